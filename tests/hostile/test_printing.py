"""The bound on what one `debug_print` call prints (jaxpr_io/safety/printing.py)
against what numpy and JAX actually print.

`call_bound` must be an upper bound of the text `jax.debug.print` formats,
whatever the shapes, dtypes, values and print options: random and extreme
cases are formatted as JAX formats them (`fmt.format(*args)` under
`np.printoptions`, the operands as `jax.Array`s, `str` and `repr`) and the
text's length compared with the bound. The limit itself is checked on
loaded files in tests/hostile/test_hostile_io.py.
"""

from __future__ import annotations

import random

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

from jaxpr_io.format import limits
from jaxpr_io.safety import printing

pytestmark = pytest.mark.once

DTYPES = [np.bool_, np.int8, np.int32, np.int64, np.uint8, np.uint32,
          np.float16, np.float32, np.float64, ml_dtypes.bfloat16,
          np.complex64, np.complex128]
LEGACY = [False, "1.13", "1.21", "1.25", "2.1", "2.2"]


def _values(rng: random.Random, shape, dtype) -> np.ndarray:
  """Values that print wide: extremes, subnormals, nan and inf, mixed
  magnitudes."""
  size = int(np.prod(shape))
  dtype = np.dtype(dtype)
  if dtype == np.bool_:
    return np.array([rng.random() < 0.5 for _ in range(size)],
                    bool).reshape(shape)
  if dtype.kind in "iu":
    info = np.iinfo(dtype)
    picks = [info.min, info.max, 0, -1 if dtype.kind == "i" else 1]
    data = [rng.choice(picks) if rng.random() < 0.5
            else rng.randint(int(info.min), int(info.max))
            for _ in range(size)]
    return np.array(data, dtype).reshape(shape)
  real = np.float64 if dtype.kind == "c" else dtype
  info = ml_dtypes.finfo(real)
  picks = [float(info.max), -float(info.max), float(info.tiny),
           float(getattr(info, "smallest_subnormal", info.tiny)), np.nan,
           np.inf, -np.inf, 0.0, 1 / 3, -123456.789, 1e-5, 99999999.0]
  data = [rng.choice(picks) if rng.random() < 0.6
          else rng.uniform(-1, 1) * 10 ** rng.randint(-30, 30)
          for _ in range(size)]
  with np.errstate(over="ignore", invalid="ignore"):
    array = np.array(data, np.float64).astype(real)
    if dtype.kind == "c":
      array = (array + 1j * array[::-1]).astype(dtype)
  return array.reshape(shape)


def _options(rng: random.Random) -> dict:
  return {
      "threshold": rng.choice([0, 1, 5, 50, 1000, 2**62]),
      "edgeitems": rng.choice([0, 1, 2, 3, 7]),
      "precision": rng.choice([0, 1, 8, 17, 40, 64]),
      "floatmode": rng.choice(["fixed", "unique", "maxprec",
                               "maxprec_equal"]),
      "suppress": rng.random() < 0.5,
      "linewidth": rng.choice([1, 10, 75, 400]),
      "sign": rng.choice(["-", "+", " "]),
      "nanstr": rng.choice(["nan", "N" * 64]),
      "infstr": rng.choice(["inf", "I" * 64]),
      "legacy": rng.choice(LEGACY),
  }


def _printed(fmt: str, arrays, opts: dict) -> str:
  """What `jax.debug.print(fmt, *arrays)` formats (JAX's
  `_format_print_callback`): `fmt.format` under the stored options."""
  # jax.Arrays where JAX holds the dtype (64-bit ones need jax_enable_x64).
  args = [a if a.dtype.itemsize == 8 and a.dtype != np.complex64
          else jnp.asarray(a) for a in arrays]
  with np.printoptions(**opts):
    return fmt.format(*args)


def _bound(fmt: str, arrays, opts: dict) -> int:
  in_tree = jax.tree_util.tree_structure((tuple(arrays), {}))
  params = {"fmt": fmt, "in_tree": in_tree, "static_args": (),
            "np_printoptions": tuple(opts.items()), "has_placeholders": True}
  avals = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in arrays]
  return printing.call_bound(params, avals)


@pytest.mark.parametrize("seed", range(8))
def test_bound_is_above_what_numpy_and_jax_print(seed):
  rng = random.Random(seed)
  worst = 0.0
  for _ in range(40):
    rank = rng.choice([0, 1, 1, 2, 2, 3, 4, 6])
    shape = tuple(rng.choice([0, 1, 2, 3, 7, 9]) for _ in range(rank))
    if int(np.prod(shape)) > 3000:
      continue
    dtype = rng.choice(DTYPES)
    array = _values(rng, shape, dtype)
    opts = _options(rng)
    fmt = rng.choice(["{}", "{!r}", "x={0} again {0!s}", "{0!a:>200}"])
    text = _printed(fmt, [array], opts)
    bound = _bound(fmt, [array], opts)
    assert len(text) <= bound, (shape, array.dtype, opts, fmt, len(text),
                                bound, text[:400])
    worst = max(worst, len(text) / bound)
  print(f"seed {seed}: at most {worst:.0%} of the bound printed")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("spec", ["", ">256.64f", ",.64e", "+.30g", ".64%"])
def test_scalar_format_specs_are_bounded(dtype, spec):
  rng = random.Random(7)
  for _ in range(12):
    array = _values(rng, (), dtype)
    fmt = "{:" + spec + "}"
    opts = _options(rng)
    try:
      text = _printed(fmt, [array], opts)
    except (TypeError, ValueError):
      continue  # a spec the scalar's type refuses prints nothing
    assert len(text) <= _bound(fmt, [array], opts), (array, spec, text)


def test_default_options_pass_for_arrays_up_to_six_dimensions():
  defaults = dict(np.get_printoptions())
  for rank in range(7):
    array = jax.ShapeDtypeStruct((100,) * rank, np.float64)
    assert _bound("{}", [array], defaults) <= limits.MAX_PRINTED_CHARACTERS
  huge = {**defaults, "threshold": 2**62, "precision": 64,
          "floatmode": "fixed"}
  array = jax.ShapeDtypeStruct((1000, 1000), np.float32)
  assert _bound("{}", [array], huge) > limits.MAX_PRINTED_CHARACTERS


def test_an_argument_printed_twice_counts_twice():
  opts = dict(np.get_printoptions())
  array = jax.ShapeDtypeStruct((10,), np.float32)
  once, twice = _bound("{0}", [array], opts), _bound("{0}{0}", [array], opts)
  assert twice >= 2 * once - 2


def test_symbolic_dimensions_count_as_large():
  opts = {**np.get_printoptions(), "threshold": 2**40}
  (b,) = jax.export.symbolic_shape("b")
  aval = jax.ShapeDtypeStruct((b, 4), np.float32)
  params = {"fmt": "{}", "in_tree": jax.tree_util.tree_structure(((1,), {})),
            "static_args": (), "np_printoptions": tuple(opts.items()),
            "has_placeholders": True}
  assert printing.call_bound(params, [aval]) > limits.MAX_PRINTED_CHARACTERS
  params["np_printoptions"] = tuple({**opts, "threshold": 1000}.items())
  assert printing.call_bound(params, [aval]) < limits.MAX_PRINTED_CHARACTERS


def test_format_arguments_are_checked_only_on_trees_of_bounded_size():
  # The check unflattens the arguments' tree (an object per node, beyond
  # the tree's own charge): a debug_print's or failed check's arguments of
  # more nodes are refused (fuzz campaign seed 102, case 232).
  from jaxpr_io import FormatError  # pylint: disable=g-import-not-at-top
  from jaxpr_io.safety import trust  # pylint: disable=g-import-not-at-top
  n = limits.MAX_FORMAT_ARGUMENT_NODES
  small = jax.tree_util.tree_structure(((None,) * 3, {}))
  trust._check_format_arguments("{} {} {}", small)  # pylint: disable=protected-access
  with pytest.raises(FormatError, match="does not fit its arguments"):
    trust._check_format_arguments("{3}", small)  # pylint: disable=protected-access
  big = jax.tree_util.tree_structure(((None,) * n, {}))
  with pytest.raises(FormatError, match=rf"debug_print's arguments are a "
                     rf"pytree of {n + 3:,} nodes, more than the {n:,}"):
    trust._check_format_arguments("{}", big)  # pylint: disable=protected-access
