"""Runs JAX's shape-polymorphism harnesses through jaxpr_io.

For each harness (tests/shape_poly/suite.py), first what jax.export does
with it: export with the harness's symbolic specs and call the `Exported`
at the harness's arguments, comparing with the original function under
`jit`. A harness jax.export handles is then traced by `jaxpr_io.trace`
with the same specs, dumped, loaded, and checked step by step against the
original function:

  load+call      the loaded program at the harness's sizes and at larger
                 ones (each variable + 1 and + 2, where jax.export's own
                 `Exported` accepts them), and `dumps` of it gives the same
                 bytes
  grad           jax.grad of the sum of the float outputs, w.r.t. the float
                 inputs
  vmap           jax.vmap over a new leading axis of size 2
  jvp            jax.jvp with random tangents for the float inputs
  to_exported    converters.to_exported, called at the harness's sizes
  to_saved_model converters.to_saved_model, loaded by TensorFlow and called

A step is "n/a" where the original function itself fails at it (e.g. grad
of an integer function). Beside each jaxpr_io step the same step is run on
jax.export's own `Exported` (for to_saved_model: jax2tf.convert), which is
the pass rate the table compares with.
"""

from __future__ import annotations

import contextlib
import tempfile
import traceback
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

import jaxpr_io
from jaxpr_io import converters
from jaxpr_io.compat import symbolic

STEPS = ("load+call", "grad", "vmap", "jvp", "to_exported",
         "to_saved_model")


class NotApplicable(Exception):
  """The original function itself fails at this step."""


def _flags(harness):
  flags = getattr(harness, "override_jax_config_flags", {}) or {}
  if not flags:
    return contextlib.nullcontext()
  from jax._src import test_util as jtu  # pylint: disable=g-import-not-at-top
  return jtu.thread_local_config_context(**flags)


def _constraints(harness):
  return tuple(getattr(harness, "symbolic_constraints", None)
               or getattr(harness, "polymorphic_constraints", None) or ())


def _expects_error(harness) -> bool:
  expect = getattr(harness, "expect_error", None)
  return expect is not None and expect[0] is not None


def _tol(harness) -> float:
  tol = getattr(harness, "tol", None)
  return 1e-5 if tol is None else max(tol, 1e-5)


def assert_close(actual, expected, tol: float) -> bool:
  """Raises AssertionError unless the pytrees match (NaNs equal); returns
  whether they are bit-identical."""
  a_leaves, a_tree = jax.tree_util.tree_flatten(actual)
  e_leaves, e_tree = jax.tree_util.tree_flatten(expected)
  if a_tree != e_tree:
    raise AssertionError(f"tree {a_tree} != {e_tree}")
  exact = True
  for a, e in zip(a_leaves, e_leaves):
    a, e = _plain(a), _plain(e)
    if a.shape != e.shape or a.dtype != e.dtype:
      raise AssertionError(f"{a.dtype}{a.shape} != {e.dtype}{e.shape}")
    if a.dtype == jax.dtypes.float0:
      continue
    # bfloat16 and the other ml_dtypes have numpy kind "V", not "f".
    inexact = jnp.issubdtype(a.dtype, jnp.inexact)
    if inexact and a.dtype.kind == "V":  # exactly representable in float32
      a, e = a.astype(np.float32), e.astype(np.float32)
    if np.array_equal(a, e, equal_nan=inexact):
      continue
    exact = False
    if inexact:
      np.testing.assert_allclose(a, e, rtol=tol, atol=tol, equal_nan=True)
    else:
      raise AssertionError(f"values differ: {a} != {e}")
  return exact


def _plain(x):
  if isinstance(x, (bool, int, float, complex)):
    x = jnp.asarray(x)  # a Python scalar result, as JAX types it
  if jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key):
    return np.asarray(jax.random.key_data(x))
  return np.asarray(x)


def _is_float(x) -> bool:
  dtype = getattr(x, "dtype", None)
  return dtype is not None and jnp.issubdtype(dtype, jnp.inexact)


def _float_loss(fun):
  def loss(*args):
    outs = [o for o in jax.tree_util.tree_leaves(fun(*args)) if _is_float(o)]
    if not outs:
      raise NotApplicable("no float output")
    return sum(jnp.sum(jnp.real(o)).astype(np.float32) for o in outs)
  return loss


def _with_float_args(fun, args, body: Callable):
  """Calls `body(g, float_args)` with `g` a function of the float
  arguments only (the others fixed)."""
  where = [i for i, a in enumerate(args) if _is_float(a)]
  if not where:
    raise NotApplicable("no float input")

  def g(*floats):
    full = list(args)
    for i, x in zip(where, floats):
      full[i] = x
    return fun(*full)
  return body(g, [args[i] for i in where])


def step_grad(fun, args):
  return _with_float_args(fun, args, lambda g, xs: jax.grad(
      _float_loss(g), argnums=tuple(range(len(xs))))(*xs))


def step_jvp(fun, args):
  rng = np.random.RandomState(1)

  def body(g, xs):
    tangents = [np.asarray(rng.randn(*np.shape(x)), np.asarray(x).dtype)
                for x in xs]
    return jax.jvp(g, xs, tangents)
  return _with_float_args(fun, args, body)


def _batched(args):
  out = []
  for a in args:
    a = np.asarray(a) if not hasattr(a, "dtype") or not jax.dtypes.issubdtype(
        a.dtype, jax.dtypes.prng_key) else a
    # Keep the dtype: numpy promotes bfloat16 * 0.5 to float32, and the
    # original function, traced anew, would then be compared at float32
    # with a program that takes bfloat16.
    other = (a * 0.5).astype(a.dtype) if _is_float(a) else a
    out.append(jnp.stack([a, other]))
  return out


def step_vmap(fun, args):
  return jax.vmap(fun)(*_batched(args))


def other_sizes(specs, args, constraints, exp) -> list[list]:
  """Arguments at larger sizes (each dimension variable + 1, then + 2)
  that jax.export's own `Exported` accepts."""
  avals = [jax.core.ShapedArray(s.shape, s.dtype) for s in specs]
  tree = jax.tree_util.tree_structure((tuple(args), {}))
  try:
    env = symbolic.solve_dims(avals, tree, [np.shape(a) for a in args])
  except Exception:  # pylint: disable=broad-except
    return []
  rng = np.random.RandomState(2)
  sizes = []
  for k in (1, 2):
    env_k = {v: n + k for v, n in env.items()}
    new = []
    for spec, arg in zip(specs, args):
      if not any(symbolic.is_symbolic(d) for d in spec.shape):
        new.append(arg)
        continue
      shape = tuple(symbolic.evaluate_dim(d, env_k)
                    if symbolic.is_symbolic(d) else d for d in spec.shape)
      new.append(_random_like(rng, np.asarray(arg), shape))
    try:
      exp.call(*new)
    except Exception:  # pylint: disable=broad-except
      continue  # sizes the program's constraints refuse
    sizes.append(new)
  return sizes


def _random_like(rng, arg, shape):
  dtype = arg.dtype
  if jnp.issubdtype(dtype, jnp.floating):  # bfloat16 too (kind "V")
    return rng.randn(*shape).astype(dtype)
  if dtype.kind == "c":
    return (rng.randn(*shape) + 1j * rng.randn(*shape)).astype(dtype)
  if dtype.kind == "b":
    return rng.rand(*shape) < 0.5
  lo = int(arg.min()) if arg.size else 0
  hi = int(arg.max()) if arg.size else 1
  return rng.randint(lo, hi + 1, size=shape).astype(dtype)


def _canonical(a) -> np.ndarray:
  """`a` as `jit` passes it to the program: a harness's int64 index array
  is int32 unless x64 is on (a TensorFlow signature does not convert)."""
  a = np.asarray(a)
  return a.astype(jax.dtypes.canonicalize_dtype(a.dtype))


def _saved_model_call(tf, directory, flat_args):
  model = tf.saved_model.load(directory)
  fn = model.signatures["serving_default"]
  outs = fn(**{f"arg{i}": tf.constant(_canonical(a))
               for i, a in enumerate(flat_args)})
  return [outs[f"out{i}"].numpy() for i in range(len(outs))]


def _reason(e: BaseException) -> str:
  text = str(e).strip().splitlines()[0] if str(e).strip() else ""
  return f"{type(e).__name__}: {text}"[:240]


def _attempt(fn) -> tuple[str, Any]:
  """("pass", value), ("n/a", reason) or ("fail", reason)."""
  try:
    return "pass", fn()
  except NotApplicable as e:
    return "n/a", str(e)
  except Exception as e:  # pylint: disable=broad-except
    return "fail", _reason(e)


class _Harness:
  """One harness's arguments, specs, original results and export."""

  def __init__(self, h):
    self.h = h
    self.fun = h.dyn_fun
    self.args = list(h.dyn_args_maker(np.random.RandomState(0)))
    self.specs = jax.export.symbolic_args_specs(
        self.args, h.polymorphic_shapes,
        constraints=_constraints(h))
    self.jit = jax.jit(self.fun)
    self.tol = _tol(h)
    self.exp = None
    self.loaded = None
    self._expected = {}  # step -> the original's result (or its failure)

  def export(self):
    self.exp = jax.export.export(self.jit)(*self.specs)
    assert_close(self.exp.call(*self.args), self.jit(*self.args), self.tol)

  def load_call(self, sizes):
    prog = jaxpr_io.trace(self.fun, *self.specs)
    data = jaxpr_io.dumps(prog)
    loaded = jaxpr_io.loads(data)
    if jaxpr_io.dumps(loaded) != data:
      raise AssertionError("dumps of the loaded program gives other bytes")
    for args in sizes:
      assert_close(loaded(*args), self.jit(*args), self.tol)
    self.loaded = loaded

  def transformed(self, step, fun):
    """`step` of `fun`, compared with `step` of the original (n/a where
    the original fails)."""
    if step not in self._expected:  # once for jaxpr_io and jax.export
      try:
        self._expected[step] = ("ok", step(self.fun, self.args))
      except NotApplicable as e:
        self._expected[step] = ("n/a", str(e))
      except Exception as e:  # pylint: disable=broad-except
        self._expected[step] = ("n/a", f"the original fails: {_reason(e)}")
    status, expected = self._expected[step]
    if status != "ok":
      raise NotApplicable(expected)
    assert_close(step(fun, self.args), expected, self.tol)

  def to_exported(self):
    exp = converters.to_exported(self.loaded)
    assert_close(exp.call(*self.args), self.jit(*self.args), self.tol)

  def to_saved_model(self, tf):
    flat = jax.tree_util.tree_leaves(self.args)
    with tempfile.TemporaryDirectory() as d:
      converters.to_saved_model(self.loaded, d + "/m")
      outs = _saved_model_call(tf, d + "/m", flat)
    assert_close(outs, jax.tree_util.tree_leaves(self.jit(*self.args)),
                 self.tol)

  def jax2tf(self, tf):
    from jax.experimental import jax2tf  # pylint: disable=g-import-not-at-top
    f_tf = jax2tf.convert(self.fun, polymorphic_shapes=list(
        self.h.polymorphic_shapes), polymorphic_constraints=_constraints(
            self.h))
    signature = [tf.TensorSpec([d if isinstance(d, int) else None
                                for d in s.shape], s.dtype)
                 for s in self.specs]
    concrete = tf.function(f_tf, autograph=False,
                           input_signature=signature).get_concrete_function()
    outs = concrete(*[tf.constant(_canonical(a)) for a in self.args])
    outs = [np.asarray(o) for o in tf.nest.flatten(outs)]
    assert_close(outs, jax.tree_util.tree_leaves(self.jit(*self.args)),
                 self.tol)


def run_harness(h, tf=None) -> dict:
  """The record of one harness: jax.export's status and each step's
  (jaxpr_io status, jax.export status, reason)."""
  record: dict[str, Any] = {"name": h.fullname, "steps": {}}
  with _flags(h):
    try:
      _run(h, record, tf)
    except Exception as e:  # pylint: disable=broad-except
      record["error"] = _reason(e) + "\n" + traceback.format_exc()[-2000:]
  return record


def _run(h, record: dict, tf) -> None:
  if _expects_error(h):
    record["export"] = "refuses (the harness expects an error)"
    return
  try:
    run = _Harness(h)
  except Exception as e:  # pylint: disable=broad-except
    record["export"] = f"no arguments: {_reason(e)}"
    return
  status, why = _attempt(run.export)
  if status != "pass":
    record["export"] = f"fails: {why}"
    return
  record["export"] = "ok"
  sizes = [run.args] + other_sizes(run.specs, run.args, _constraints(h),
                                   run.exp)
  record["sizes"] = len(sizes)
  steps = record["steps"]
  steps["load+call"] = (*_attempt(lambda: run.load_call(sizes)), "pass")
  if run.loaded is None:
    return
  for name, step in (("grad", step_grad), ("vmap", step_vmap),
                     ("jvp", step_jvp)):
    mine = _attempt(lambda: run.transformed(step, run.loaded))
    if mine[0] == "n/a":
      steps[name] = ("n/a", mine[1], "n/a")
      continue
    theirs = _attempt(lambda: run.transformed(step, run.exp.call))
    steps[name] = (mine[0], mine[1], theirs[0])
  steps["to_exported"] = (*_attempt(run.to_exported), "pass")
  if tf is not None:
    steps["to_saved_model"] = (*_attempt(lambda: run.to_saved_model(tf)),
                               _attempt(lambda: run.jax2tf(tf))[0])
