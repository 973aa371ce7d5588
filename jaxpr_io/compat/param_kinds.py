"""The kinds of param values that the param schema names
(jaxpr_io/format/param_schema.py), as this release's objects are classified.

A value's kinds are strings: `none`, `bool`, `int+` (a non-negative int),
`int-` (a negative one), `dim` (a symbolic dimension), `float`, `complex`,
`str`, `dtype`, `jaxpr` (open
or closed), `sharding` (a `jax.sharding.Sharding` or the unspecified
placeholder), `primitive`, `type`, `callable`, `array`, `enum:<class>`, and
otherwise the qualified name of the value's class (records: `Mesh`,
`GatherDimensionNumbers`, ...). A tuple has the kinds of its items, each
prefixed with `tuple/`; an empty one is just `tuple`. A tuple nested
`MAX_DEPTH` deep is `tuple/*` whatever it holds. A frozenset (axis names,
dimensions) has the kinds of its items prefixed with `frozenset/`; an empty
one is just `frozenset`.

Kinds are coarse where JAX's own classes are interchangeable in a param
(every sharding class, every dtype class) and exact elsewhere, so a value of
one param type stored in another's place (a `GatherDimensionNumbers` as a
scatter's `dimension_numbers`, an int as a `sharding`) has a kind the
schema does not list.
"""

from __future__ import annotations

import enum
import types

import numpy as np

from jax._src import core
from jax._src import sharding as sharding_lib
from jax._src import named_sharding

from jaxpr_io import compat
from jaxpr_io.compat import symbolic

MAX_DEPTH = 4

_SHARDINGS = (sharding_lib.Sharding, named_sharding.UnspecifiedValue)
_CALLABLES = (types.FunctionType, types.BuiltinFunctionType, types.MethodType)


# The kind of each type whose kind does not depend on the value (all but
# ints and numpy scalars), found once: most params are jaxprs, bools and
# enums, and the chain of isinstance checks below was a tenth of the time
# of reading a program of many small sub-jaxprs.
_TYPE_KINDS: dict[type, str] = {}


def _leaf(value) -> str:
  t = type(value)
  kind = _TYPE_KINDS.get(t)
  if kind is not None:
    return kind
  kind = _leaf_of(value, t)
  if t is not int and not isinstance(value, np.generic):
    _TYPE_KINDS[t] = kind
  return kind


def _leaf_of(value, t) -> str:
  if value is None:
    return "none"
  if t is bool:
    return "bool"
  if t is int:
    return "int-" if value < 0 else "int+"
  if t in (float, complex, str, bytes):
    return t.__name__
  if isinstance(value, np.dtype):
    return "dtype"
  if isinstance(value, symbolic.DimExpr):
    return "dim"
  if compat.is_jaxpr(value):
    return "jaxpr"
  if isinstance(value, _SHARDINGS):
    return "sharding"
  if isinstance(value, core.Primitive):
    return "primitive"
  if isinstance(value, type):
    return "type"
  if isinstance(value, enum.Enum):
    return f"enum:{t.__qualname__}"
  if isinstance(value, np.generic):
    # A numpy scalar where JAX binds it (axes as np.int64): its Python kind.
    if isinstance(value, np.bool_):
      return "bool"
    if isinstance(value, np.integer):
      return "int-" if value < 0 else "int+"
    if isinstance(value, np.floating):
      return "float"
    return "array"
  if isinstance(value, np.ndarray):
    return "array"
  if isinstance(value, _CALLABLES):
    return "callable"
  return t.__qualname__


def kinds_of(value, depth: int = 0) -> frozenset[str]:
  """The kinds of a param value (see the module docstring)."""
  t = type(value)
  if t is frozenset:
    # Items of a set are leaves: JAX's sets hold axis names or dimensions.
    if not value:
      return frozenset(("frozenset",))
    return frozenset("frozenset/" + _leaf(item) for item in value)
  if t is not tuple:
    return frozenset((_leaf(value),))
  if not value:
    return frozenset(("tuple",))
  if depth + 1 >= MAX_DEPTH:
    return frozenset(("tuple/*",))
  out: set[str] = set()
  for item in value:
    out.update(kinds_of(item, depth + 1))
  return frozenset("tuple/" + k for k in out)
