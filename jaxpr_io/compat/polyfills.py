"""Polyfills: primitives that a newer JAX release added and this release can
express with primitives it has (as ONNX's version converter keeps adapters
between opsets).

A file written by a newer JAX may hold a primitive that the reading JAX
lacks: `log2` (JAX 0.11), `one_minus_square` (0.11; JAX 0.11+ differentiate
`tanh`, `asin`, `acos` and `atanh` with it), `polynomial` (0.12). When this
table has a polyfill for it and nobody registered the primitive
(`jaxpr_io.register_primitive` wins), the reader builds each such equation
as a `closed_call` of a jaxpr of this release's primitives, traced per
equation at the equation's own input types; its output types must be the
equation's. `jit`, `grad`, `vmap` and `jvp` then work through those
primitives.

A polyfilled program is not the original, and says so: it prints
differently (a `closed_call` where the file has `log2`); its results may
differ from the writer's in the last bits (XLA compiles other operations;
each polyfill follows the newer JAX's own lowering of the primitive, so on
one XLA they usually agree), and its derivatives come from the older
primitives' rules, not from the new primitive's. `load` warns once per file
(`PolyfillWarning`) and the loaded `Program.polyfilled` lists the
equations.

Re-dumping writes the original primitive and params, not the polyfill: the
writer asks `original(eqn)`, which recognises a polyfill's call by its
jaxpr object. So a file read and re-written by an older release keeps its
bytes (all but the producer) and loads as the original under a release that
has the primitive. A call that a transformation rebuilt (`grad`, `vmap`)
holds a new jaxpr and is written as the older primitives it holds.
"""

from __future__ import annotations

import dataclasses
import threading
import warnings
import weakref
from typing import Any, Callable

import jax
import numpy as np
from jax import lax
from jax._src import core

from jaxpr_io import compat
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.format import limits
from jaxpr_io.format import vocabulary
from jaxpr_io.errors import FormatError

CALL = core.closed_call_p  # `eval_jaxpr` (same params) from JAX 0.11 on


class PolyfillWarning(UserWarning):
  """A loaded program uses polyfills: primitives of a newer JAX rebuilt from
  this JAX's primitives (see `Program.polyfilled`)."""


@dataclasses.dataclass(frozen=True)
class Polyfill:
  """How this release expresses a primitive of a newer one."""
  since: tuple[int, int]   # the first JAX release line with the primitive
  expand: Callable         # (*inputs, **params) -> the output (one array)
  n_in: Callable[[int], bool]  # whether an equation's arity is right
  note: str                # how it differs from the original


def _full(x, value):
  # A constant of x's shape, dtype and weak type, as JAX's own lowerings
  # make them (`lax._one`, `lax._const`).
  return lax.full_like(x, value)


_INV_LN2 = 1.4426950408889634  # 1 / ln 2, as JAX 0.11+ lower log2


def _log2(x, *, accuracy=None):
  # JAX 0.11+'s lowering of log2: log(x) * (1 / ln 2), in x's dtype, the
  # real and imaginary parts apart for complex x.
  log_x = lax.log(x, accuracy=accuracy)
  if np.issubdtype(x.dtype, np.complexfloating):
    re, im = lax.real(log_x), lax.imag(log_x)
    scale = _full(re, _INV_LN2)
    return lax.complex(lax.mul(re, scale), lax.mul(im, scale))
  return lax.mul(log_x, _full(x, _INV_LN2))


def _one_minus_square(x):
  # JAX 0.11+'s lowering: (1 + x) * (1 - x).
  one = _full(x, 1)
  return lax.mul(lax.add(one, x), lax.sub(one, x))


def _polynomial(x, *coeffs, unroll=None):
  # Horner's rule, as JAX 0.12 lowers `polynomial` (unrolled; its scan for
  # long polynomials computes the same sequence of operations).
  del unroll
  shape = lax.broadcast_shapes(np.shape(x), *(np.shape(c) for c in coeffs))

  def full_shape(a):
    if tuple(np.shape(a)) == tuple(shape):
      return a
    rank = np.ndim(a)  # 0, or the rank of `shape` (size-1 dimensions)
    return lax.broadcast_in_dim(a, shape,
                                tuple(range(len(shape) - rank, len(shape))))
  xb = full_shape(x)
  acc = full_shape(coeffs[-1])
  for c in reversed(coeffs[:-1]):
    acc = lax.add(lax.mul(acc, xb), full_shape(c))
  return acc


_NOT_EXACT = ("results may differ from the writer's in the last bits, and "
              "derivatives come from the rules of the primitives it is "
              "built of")

POLYFILLS: dict[str, Polyfill] = {
    "log2": Polyfill((0, 11), _log2, lambda n: n == 1,
                     f"log(x) * (1 / ln 2); {_NOT_EXACT}"),
    "one_minus_square": Polyfill(
        (0, 11), _one_minus_square, lambda n: n == 1,
        f"(1 + x) * (1 - x); {_NOT_EXACT} (no longer -2x exactly near 0)"),
    "polynomial": Polyfill((0, 12), _polynomial, lambda n: n >= 2,
                           f"Horner's rule with mul and add; {_NOT_EXACT}"),
}


def lookup(name: str) -> Polyfill | None:
  """The polyfill of primitive `name` if this release lacks it (JAX 0.10
  lacks `log2`; 0.12 has all of the table)."""
  fill = POLYFILLS.get(name)
  if fill is None or vocabulary.release_line(jax.__version__) >= fill.since:
    return None
  return fill


# The polyfill jaxprs alive (in loaded programs): id -> (weak reference,
# name, params), for the writer (`original`), and (name, params, input
# avals) -> jaxpr, so that equations of one type share one jaxpr. Entries
# leave with their jaxpr.
_BY_ID: dict[int, tuple[Any, str, dict]] = {}
_BY_KEY: "weakref.WeakValueDictionary[Any, Any]" = weakref.WeakValueDictionary()
_LOCK = threading.Lock()
# What building one polyfill jaxpr may cost, charged to an untrusted load's
# memory budget before it is built: a file of many distinct equation types
# cannot make the reader trace without bound (safety/costs.py's table).
BUILD_COST = limits.POLYFILL_BUILD_COST


def _key(name: str, params: dict, in_avals) -> Any:
  try:
    key = (name, tuple(sorted(params.items())), tuple(in_avals))
    hash(key)
  except TypeError:
    return None
  return key


def build(name: str, params: dict, in_avals, out_avals,
          charge: Callable[[int, str], None]):
  """The closed jaxpr that stands for one equation of primitive `name`
  with `params` (the file's) and these input types; FormatError if it does
  not return `out_avals`. `charge(nbytes, what)` is called before a new
  jaxpr is built (the reader's memory budget)."""
  key = _key(name, params, in_avals)
  closed = _BY_KEY.get(key) if key is not None else None
  if closed is not None:
    return closed
  charge(BUILD_COST, f"the polyfill of {name!r}")
  fill = POLYFILLS[name]
  try:
    jaxpr, consts = compat_custom_rules.trace_flat(
        lambda *xs: [fill.expand(*xs, **params)], list(in_avals),
        _debug_info(name, len(in_avals)))
  except (TypeError, ValueError) as e:
    raise FormatError(f"the polyfill of {name!r} does not apply to inputs "
                      f"of types {[a.str_short() for a in in_avals]}: "
                      f"{e}") from None
  closed = compat.make_closed(jaxpr, consts)
  got = [v.aval for v in jaxpr.outvars]
  if len(got) != len(out_avals) or any(
      not core.typematch(g, o) or g.weak_type != o.weak_type
      for g, o in zip(got, out_avals)):
    raise FormatError(
        f"the polyfill of {name!r} returns "
        f"{[a.str_short() for a in got]}, but the equation's outputs are "
        f"{[a.str_short() for a in out_avals]}")
  ident = id(closed)
  with _LOCK:
    _BY_ID[ident] = (weakref.ref(closed, lambda _: _BY_ID.pop(ident, None)),
                     name, dict(params))
    if key is not None:
      _BY_KEY[key] = closed
  return closed


def _debug_info(name: str, n_in: int):
  return jax.api_util.debug_info(f"jaxpr_io polyfill of {name}",
                                 POLYFILLS[name].expand,
                                 (None,) * n_in, {})


def equation_params(closed) -> dict:
  """The params of the `CALL` equation that stands for the original."""
  return {"call_jaxpr": closed}


def original(primitive, params) -> tuple[str, dict] | None:
  """(primitive name, params) of the equation a polyfill stands for, if this
  equation (`primitive`, `params`) is one that `build` made; else None."""
  if primitive is not CALL:
    return None
  entry = _BY_ID.get(id(params.get("call_jaxpr")))
  if entry is None or entry[0]() is not params.get("call_jaxpr"):
    return None
  return entry[1], dict(entry[2])


def warn(source: str, polyfilled, stacklevel: int) -> None:
  """One `PolyfillWarning` for a load that used polyfills: `polyfilled` is
  a list of (jaxpr index, equation index, primitive name)."""
  if not polyfilled:
    return
  names = sorted({name for _, _, name in polyfilled})
  notes = "; ".join(f"{n}: {POLYFILLS[n].note}" for n in names)
  warnings.warn(PolyfillWarning(
      f"{source}: {len(polyfilled)} equation(s) use primitives that jax "
      f"{jax.__version__} lacks ({', '.join(names)}), rebuilt from its own "
      f"primitives (polyfills: {notes}). The program does not print like "
      "the original, nor is it bit-identical; re-dumping it writes the "
      "original primitives. Load the file with the writer's JAX release for "
      "exact results."), stacklevel=stacklevel + 1)
