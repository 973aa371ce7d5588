"""What the writer and the reader share: the results a case records, how
they are computed, how arrays are stored in .npz files, and how results are
compared.

The writer and the reader compute a case's results with the same function
(`make_results_fn`) so that, under the same JAX release, the same program
compiles to the same computation and must give bit-identical results.
"""

from __future__ import annotations

import json
import traceback
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

# The results a case may record, in the order they are computed.
#   out:  the program's outputs
#   grad: the gradient of `scalar_loss(outputs)` w.r.t. the float inputs
#   jvp:  the output tangents for tangents of ones on the float inputs
#   vmap: the outputs, batched over a new leading axis of every input
CHECKS = ("out", "grad", "jvp", "vmap")
META_KEY = "__meta__"


def use_compile_cache(outdir) -> None:
  """Caches compiled programs in OUTDIR/.compile-cache/<jax version>.

  Why: the exchange compiles each case once per reader and writer, and
  compilation is nearly all of its time. The reader of its own release's
  set compiles exactly what the writer compiled, and mostly the same again
  for the other releases' sets (a program loaded from another release
  usually lowers to the same HLO). A cache hit returns the executable that
  the same HLO compiles to, so results are unchanged.
  """
  import pathlib  # pylint: disable=g-import-not-at-top
  path = pathlib.Path(outdir) / ".compile-cache" / jax.__version__
  path.mkdir(parents=True, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", str(path))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


# --------------------------------------------------------------- errors
def error_record(e: BaseException, stage: str) -> dict:
  """A JSON-able record of an exception: its type (qualified name), whether
  it is a jaxpr_io.FormatError, its message, its innermost frames and the
  end of its traceback.
  `stage` says what was being done (build, trace, save, load, run, ...)."""
  is_format_error = False
  try:
    from jaxpr_io import FormatError  # pylint: disable=g-import-not-at-top
    is_format_error = isinstance(e, FormatError)
  except Exception:  # pylint: disable=broad-except
    pass  # jaxpr_io itself does not import: then nothing is a FormatError
  tb = traceback.format_exception(type(e), e, e.__traceback__)
  frames = traceback.extract_tb(e.__traceback__)[-4:]
  return {
      "stage": stage,
      "error_type": f"{type(e).__module__}.{type(e).__qualname__}",
      "is_format_error": is_format_error,
      "message": str(e),
      # The innermost frames: where a library bug is.
      "where": [f"{f.filename}:{f.lineno} in {f.name}: {f.line}"
                for f in frames],
      "traceback": "".join(tb)[-6000:],
  }


# ------------------------------------------------------------- results
def is_key(x) -> bool:
  """Whether `x` is a typed PRNG key array."""
  dtype = getattr(x, "dtype", None)
  return dtype is not None and jax.dtypes.issubdtype(dtype,
                                                     jax.dtypes.prng_key)


def float_indices(flat: Sequence[Any]) -> list[int]:
  """Indices of the inputs that gradients and tangents are taken over:
  the real and complex floating ones (not keys, not integers)."""
  return [i for i, x in enumerate(flat)
          if not is_key(x) and jnp.issubdtype(_dtype(x), jnp.inexact)]


def _dtype(x) -> np.dtype:
  # np.result_type of a jax.Array converts it (deprecated): ask first.
  return x.dtype if hasattr(x, "dtype") else np.result_type(x)


def scalar_loss(out) -> jax.Array:
  """The sum of the real part of every non-key output, as float32."""
  total = jnp.float32(0)
  for leaf in jax.tree_util.tree_leaves(out):
    if is_key(leaf) or leaf.dtype == jax.dtypes.float0:
      continue
    if jnp.iscomplexobj(leaf):
      leaf = jnp.real(leaf)
    total = total + jnp.sum(leaf.astype(jnp.float32))
  return total


def call_flat(program, in_tree, flat: Sequence[Any]):
  """`program(*args, **kwargs)` with `(args, kwargs)` rebuilt from leaves."""
  args, kwargs = jax.tree_util.tree_unflatten(in_tree, list(flat))
  return program(*args, **kwargs)


def _batch(x):
  """Two examples of `x` along a new axis: x and (for floats) x / 2, so the
  batch is not two copies of the same example."""
  second = x * 0.5 if (not is_key(x) and jnp.issubdtype(
      jnp.result_type(x), jnp.inexact)) else x
  return jnp.stack([x, second])


# The checks over the float inputs: (call, floats) -> pytree, where
# call(floats) runs the program with its float inputs replaced.
def _out(call, floats):
  return call(floats)


def _grad(call, floats):
  return jax.grad(lambda fl: scalar_loss(call(fl)))(floats)


def _jvp(call, floats):
  ones = tuple(jnp.ones_like(v) for v in floats)
  return jax.jvp(call, (floats,), (ones,))[1]


_CHECK_FNS = {"out": _out, "grad": _grad, "jvp": _jvp}  # vmap: below


def make_results_fn(program, in_tree, checks: Sequence[str],
                    fidx: Sequence[int]) -> Callable:
  """fn(flat_inputs) -> {check: list of leaves} for the named `checks`,
  computed in one function (jit it: one compilation per case).

  `program` is called as `program(*args, **kwargs)`; `fidx` are the float
  input indices (see float_indices).
  """
  unknown = set(checks) - set(CHECKS)
  if unknown:
    raise ValueError(f"unknown checks {sorted(unknown)}")

  def fn(flat):
    flat = list(flat)

    def call(floats):
      full = list(flat)
      for i, v in zip(fidx, floats):
        full[i] = v
      return call_flat(program, in_tree, full)
    floats = tuple(flat[i] for i in fidx)
    results = {}
    for check in checks:
      if check == "vmap":  # batches every input, not only the floats
        results[check] = jax.vmap(
            lambda *fl: call_flat(program, in_tree, fl))(
                *[_batch(x) for x in flat])
      else:
        results[check] = _CHECK_FNS[check](call, floats)
    return {k: jax.tree_util.tree_leaves(v) for k, v in results.items()}
  return fn


# ---------------------------------------------------------- .npz storage
def _native(dtype: np.dtype) -> bool:
  """Whether numpy's .npy format keeps `dtype` (ml_dtypes' bfloat16, int4,
  float8 ... are saved as anonymous void types, so they are stored as
  their bits)."""
  return np.dtype(dtype.str) == dtype


def encode(x) -> tuple[np.ndarray, dict]:
  """(array .npz keeps exactly, description to decode it back)."""
  if is_key(x):
    return (np.asarray(jax.random.key_data(x)),
            {"dtype": "key", "key_impl": str(jax.random.key_impl(x))})
  a = np.asarray(x)
  if a.dtype == jax.dtypes.float0:
    return np.zeros(a.shape, np.bool_), {"dtype": "float0"}
  if _native(a.dtype):
    return a, {"dtype": a.dtype.name}
  bits = np.dtype(f"uint{8 * a.dtype.itemsize}")
  # reshape: ascontiguousarray makes 0-d arrays 1-d.
  return (np.ascontiguousarray(a).view(bits).reshape(a.shape),
          {"dtype": a.dtype.name})


def decode(stored: np.ndarray, desc: dict):
  """Inverse of `encode`: a numpy array, a float0 array or a key array."""
  if desc["dtype"] == "key":
    return jax.random.wrap_key_data(stored, impl=desc["key_impl"])
  if desc["dtype"] == "float0":
    return np.zeros(stored.shape, jax.dtypes.float0)
  dtype = jnp.dtype(desc["dtype"])
  # reshape: numpy's view of a 0-d array into another dtype is 1-d.
  return (stored if stored.dtype == dtype else
          stored.view(dtype).reshape(stored.shape))


def save_npz(path, groups: dict[str, Sequence[Any]], meta: dict) -> None:
  """Saves lists of arrays by group ('in', 'out', 'grad', ...) as
  `<group>_<i>` entries; `meta` (JSON) goes with them, plus how to decode
  each array."""
  arrays, descs = {}, {}
  for group, leaves in groups.items():
    for i, leaf in enumerate(leaves):
      name = f"{group}_{i}"
      arrays[name], descs[name] = encode(leaf)
  meta = dict(meta, arrays=descs,
              counts={g: len(v) for g, v in groups.items()})
  arrays[META_KEY] = np.array(json.dumps(meta))
  with open(path, "wb") as f:
    np.savez(f, **arrays)


def load_npz(path) -> tuple[dict[str, list], dict]:
  """({group: list of arrays}, meta) from a file written by save_npz."""
  with np.load(path, allow_pickle=False) as data:
    meta = json.loads(str(data[META_KEY]))
    groups = {
        g: [decode(data[f"{g}_{i}"], meta["arrays"][f"{g}_{i}"])
            for i in range(n)]
        for g, n in meta["counts"].items()}
  return groups, meta


# ------------------------------------------------------------ comparison
# Checks whose results come from the reader's own differentiation rules,
# not from the program alone: across releases they follow JAX's rule
# changes (0.11 computes acosh's derivative as rsqrt(x - 1) * rsqrt(x + 1),
# 0.10 as rsqrt(x**2 - 1): they differ in sign where acosh itself is NaN).
DERIVED_CHECKS = ("grad", "jvp")


def _tolerances(dtype: np.dtype, expected: np.ndarray) -> tuple[float, float]:
  """(rtol, atol) for comparing floats computed by different XLA versions.

  rtol: 1e-5 (float32 functions such as lgamma may differ by some ulps
  between releases), or two units in the last place for narrow types
  (bfloat16, float8), where one rounding flip of the float32 computation
  moves the result an ulp. atol: the same, times the largest finite
  magnitude in `expected`: sums reassociated by another XLA differ by a few
  ulps of their terms, not of their result (0.12's transformer gradient
  differs from 0.10's by 2e-5 in entries of 0.05, in an array up to 92).
  """
  real = np.dtype(np.real(np.zeros((), dtype)).dtype)
  tol = max(1e-5, 2 * float(jnp.finfo(real).eps))
  finite = np.abs(expected[np.isfinite(expected)])
  scale = max(1.0, float(finite.max())) if finite.size else 1.0
  return tol, tol * scale


def _bits(x) -> tuple:
  if is_key(x):
    return ("key", str(jax.random.key_impl(x)), x.shape,
            np.asarray(jax.random.key_data(x)).tobytes())
  a = np.asarray(x)
  return (a.dtype.name, a.shape, np.ascontiguousarray(a).tobytes())


def _nan_mismatch(a: np.ndarray, e: np.ndarray) -> np.ndarray:
  """Where exactly one of `a`, `e` is NaN."""
  return np.isnan(a) != np.isnan(e)


def assert_leaf_close(actual, expected, *, exact: bool, where: str,
                      derived: bool = False) -> list[str]:
  """Raises AssertionError unless `actual` matches `expected`: bit for bit
  when `exact`; otherwise same dtype and shape, keys, integers and bools
  equal, floats within `_tolerances` with NaNs in the same places, except
  that for `derived` results (DERIVED_CHECKS) elements that are NaN on one
  side only are left out, as long as they are under half of the elements.
  Returns notes on what was left out."""
  if exact:
    if _bits(actual) != _bits(expected):
      raise AssertionError(f"{where}: not bit-identical:\n{actual!r}\n"
                           f"vs expected\n{expected!r}")
    return []
  if is_key(actual) or is_key(expected):
    if _bits(actual) != _bits(expected):
      raise AssertionError(f"{where}: keys differ:\n{actual!r}\nvs\n"
                           f"{expected!r}")
    return []
  a, e = np.asarray(actual), np.asarray(expected)
  if a.dtype != e.dtype or a.shape != e.shape:
    raise AssertionError(f"{where}: {a.dtype}{list(a.shape)} vs expected "
                         f"{e.dtype}{list(e.shape)}")
  if a.dtype == jax.dtypes.float0:
    return []
  if not jnp.issubdtype(a.dtype, jnp.inexact):
    np.testing.assert_array_equal(a, e, err_msg=where)
    return []
  wide = np.complex128 if jnp.issubdtype(a.dtype, jnp.complexfloating) else (
      np.float64)
  a, e = a.astype(wide), e.astype(wide)
  notes = []
  mismatch = _nan_mismatch(a, e)
  if derived and 0 < mismatch.sum() < mismatch.size / 2:
    notes.append(f"{where}: {mismatch.sum()} of {mismatch.size} elements "
                 "NaN on one side only, not compared (the releases' "
                 "derivative rules differ there)")
    a, e = a[~mismatch], e[~mismatch]
  rtol, atol = _tolerances(np.asarray(actual).dtype, e)
  np.testing.assert_allclose(a, e, rtol=rtol, atol=atol, equal_nan=True,
                             err_msg=f"{where} ({np.asarray(actual).dtype})")
  return notes


def assert_results_close(actual: dict[str, list], expected: dict[str, list],
                         *, exact: bool) -> list[str]:
  """Every check's leaves match (see assert_leaf_close); returns the notes
  on elements left out."""
  notes = []
  for check, want in expected.items():
    got = actual[check]
    if len(got) != len(want):
      raise AssertionError(f"{check}: {len(got)} leaves, expected "
                           f"{len(want)}")
    for i, (a, e) in enumerate(zip(got, want)):
      notes += assert_leaf_close(a, e, exact=exact, where=f"{check}[{i}]",
                                 derived=check in DERIVED_CHECKS)
  return notes


def parse_cli(doc: str, argv: list[str] | None):
  """(OUTDIR, case globs or None) of the write/read command line; turns on
  the compile cache in OUTDIR unless --no-cache."""
  import argparse  # pylint: disable=g-import-not-at-top
  import pathlib  # pylint: disable=g-import-not-at-top
  parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
  parser.add_argument("outdir", type=pathlib.Path)
  parser.add_argument("--only", help="comma-separated globs of case names")
  parser.add_argument("--no-cache", action="store_true",
                      help="do not use OUTDIR/.compile-cache")
  ns = parser.parse_args(argv)
  if not ns.no_cache:
    use_compile_cache(ns.outdir)
  return ns.outdir, (ns.only.split(",") if ns.only else None)
