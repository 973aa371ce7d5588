"""The public functions of `jax.numpy` (with `linalg` and `fft`),
`jax.scipy.special`, `jax.nn` and `jax.lax`, called as users call them.

The functions are found by introspection (`dir` of each module: every public
callable that is not a class), so a function a release adds is swept without
editing anything here. Each is called on small arrays of each of `DTYPES`:
with its recipe (`tests/support/public_api_recipes.py`) where it needs more
than arrays (shapes, axes, index arrays, callables), else with 1, 2 or 3
arrays of shape (3, 3) (the number its signature requires first), plus
`axis=0` and `keepdims=True` where its signature takes them. `SKIP` names
what is not an array function, with the reason.

A call that JAX itself refuses to trace (a dtype the function does not take,
a recipe that does not fit a release) is skipped by the test: that is JAX's
limit, not jaxpr_io's.
"""

from __future__ import annotations

import dataclasses
import inspect
from typing import Any, Callable

import jax
import jax.numpy as jnp
import jax.scipy.special as jss
import numpy as np

from tests.support import public_api_recipes as recipes

MODULES = (
    ("jnp", jnp),
    ("jnp.linalg", jnp.linalg),
    ("jnp.fft", jnp.fft),
    ("jax.scipy.special", jss),
    ("jax.nn", jax.nn),
    ("lax", jax.lax),
)

DTYPES = ("float32", "complex64", "int32", "bool")

_NOT_ARRAY = "not an array function"
_SHAPES = "computes shapes or parameters from Python values, not arrays"
# Public callables that are not array functions: they take or return dtypes,
# shapes, files, print settings or Python functions, or change global state.
SKIP = {
    **{f"jnp.{n}": _NOT_ARRAY for n in (
        "can_cast", "isdtype", "issubdtype", "promote_types", "result_type",
        "iterable", "isscalar", "ndim", "shape", "size", "iscomplexobj",
        "isrealobj")},
    **{f"jnp.{n}": "reads or writes files or buffers" for n in (
        "load", "save", "savez", "fromfile", "frombuffer", "fromstring",
        "fromiter", "from_dlpack")},
    **{f"jnp.{n}": "print settings: changes or reads global state" for n in (
        "set_printoptions", "get_printoptions", "printoptions", "array_repr",
        "array_str")},
    "jnp.vectorize": "wraps a Python function (a decorator)",
    "jnp.frompyfunc": "wraps a Python function (a decorator)",
    "jnp.einsum_path": "plans a contraction; returns Python values",
    "jnp.broadcast_shapes": _SHAPES,
    "jax.nn.get_scaled_dot_general_config": "returns a configuration object",
    **{f"lax.{n}": _SHAPES for n in (
        "broadcast_shapes", "conv_dimension_numbers",
        "conv_general_permutations", "conv_general_shape_tuple",
        "conv_shape_tuple", "conv_transpose_shape_tuple",
        "reduce_window_shape_tuple", "padtype_to_pads", "dtype",
        "DotDimensionNumbers")},
}


# Calls that JAX itself cannot compile without aborting the process (an
# XLA CHECK, which no `except` catches): the sweep skips them by id.
JAX_ABORTS = {
    "lax.rng_uniform-bool": "XLA aborts compiling the original (jax 0.10.2)",
}


# Functions whose original gives other values at each call (hidden state):
# their loaded program must give values of the same types, not the same
# values.
NONDETERMINISTIC = {
    "lax.rng_uniform": "XLA's RngUniform draws from its executable's hidden "
                       "state: two calls of the original differ",
}


_CLOSES_OVER_TRACERS = (
    "JAX 0.10's expn passes its order n, an array, as a nondiff argument: "
    "the JVP rule closes over it (a tracer of the program being traced), "
    "which no file can hold; the writer refuses it by name (JAX 0.11+ "
    "passes it as an argument and the program is stored)")
# Failures still open (a function, or a function on one dtype), by the
# releases whose whole sweep found them (docs/testing.md): the test marks
# these calls xfail, strict on those releases (a fix must remove its line)
# and not strict on the others.
OPEN_FAILURES = {
    **{f: (("0.10",), _CLOSES_OVER_TRACERS) for f in (
        "jax.scipy.special.expn-float32",
        "jax.scipy.special.exp1", "jax.scipy.special.expi")},
}
_MEASURED = ("0.10", "0.12")


def open_failure(case: "Case") -> tuple[str, bool] | None:
  """(reason, strict) if `case` is a known open failure here."""
  key = next((k for k in (f"{case.qualname}-{case.dtype}", case.qualname)
              if k in OPEN_FAILURES), None)
  if key is None:
    return None
  releases, reason = OPEN_FAILURES[key]
  release = ".".join(jax.__version__.split(".")[:2])
  if release in _MEASURED and release not in releases:
    return None
  return reason, release in _MEASURED


@dataclasses.dataclass(frozen=True)
class Case:
  """One function on one dtype, with one keyword variant ('' for none)."""
  module: str
  name: str
  dtype: str
  variant: str = ""

  @property
  def qualname(self) -> str:
    return f"{self.module}.{self.name}"

  @property
  def id(self) -> str:
    parts = [self.qualname, self.dtype] + ([self.variant] if self.variant
                                           else [])
    return "-".join(parts)


def public_functions() -> list[tuple[str, str, Callable]]:
  """(module prefix, name, function) of every public array function."""
  found = []
  for prefix, module in MODULES:
    for name in sorted(dir(module)):
      obj = getattr(module, name, None)
      # Classes and type aliases (typing.Union objects) are not functions.
      if (name.startswith("_") or not callable(obj)
          or isinstance(obj, type) or type(obj).__module__ == "typing"
          or f"{prefix}.{name}" in SKIP):
        continue
      found.append((prefix, name, obj))
  return found


def _signature(fn):
  try:
    return inspect.signature(fn)
  except (TypeError, ValueError):  # builtins and ufunc objects without one
    return None


def _generic_variants(fn) -> dict[str, dict[str, Any]]:
  sig = _signature(fn)
  params = sig.parameters if sig else {}
  variants = {"": {}}
  if "axis" in params:
    variants["axis=0"] = {"axis": 0}
  if "keepdims" in params:
    variants["keepdims=True"] = {"keepdims": True}
  return variants


def cases() -> list[Case]:
  """Every call of the sweep, in a fixed order (no tracing needed)."""
  found = []
  for prefix, name, fn in public_functions():
    recipe = recipes.RECIPES.get(f"{prefix}.{name}")
    variants = recipe if recipe is not None else _generic_variants(fn)
    for dtype in DTYPES:
      for variant in variants:
        found.append(Case(prefix, name, dtype, variant))
  return found


def function(case: Case) -> Callable:
  return getattr(dict(MODULES)[case.module], case.name)


def _required_positional(fn) -> int | None:
  sig = _signature(fn)
  if sig is None:
    return None
  kinds = (inspect.Parameter.POSITIONAL_ONLY,
           inspect.Parameter.POSITIONAL_OR_KEYWORD)
  if any(p.kind is inspect.Parameter.VAR_POSITIONAL
         for p in sig.parameters.values()):
    return None
  return sum(1 for p in sig.parameters.values()
             if p.kind in kinds and p.default is inspect.Parameter.empty)


def candidates(case: Case) -> list[tuple[tuple[np.ndarray, ...], Callable]]:
  """The calls to try, in order: (arrays, a function of those arrays). The
  test uses the first one that JAX traces."""
  fn = function(case)
  dtype = np.dtype(case.dtype)
  recipe = recipes.RECIPES.get(case.qualname)
  if recipe is not None:
    spec, body = recipe[case.variant]
    arrays = tuple(recipes.array(letter, dtype) for letter in spec)
    return [(arrays, lambda *a: body(fn, dtype, *a))]
  kwargs = _generic_variants(fn)[case.variant]
  n = _required_positional(fn)
  arities = [n] if n in (1, 2, 3) else [1, 2, 3]
  return [(tuple(recipes.array(letter, dtype) for letter in "xyz"[:k]),
           lambda *a: fn(*a, **kwargs))
          for k in arities]
