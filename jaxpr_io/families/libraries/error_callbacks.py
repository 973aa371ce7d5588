"""The host callbacks that libraries of the table make themselves:
Equinox's runtime errors (`library_table.LIBRARY_CALLBACKS`).

`eqx.error_if(x, pred, msg)` and `eqxi.branched_error_if` (so Diffrax's
`diffeqsolve` and Optimistix's solvers with their default `throw=True`, and
Lineax's solves) bind `pure_callback` on closures that Equinox defines inside
`equinox._errors._error`: `raises`, over the messages `msgs` (and the
trace-time Python `stack`), and `tpu_msg`, over `msgs`. No user can register
them (each `error_if` makes new ones), and they are the libraries' default
path, so they are stored by the table's name and the values of their free
variables, plain data (the messages).

The loading process rebuilds each from its own Equinox: the function's code
is Equinox's, found by tracing `branched_error_if` once (`_library_code`),
and its closure holds the stored values (and the table's fixed values for
what described only the writing process), so a failing solve raises the same
error as the original. Equinox is imported from the table, never from a
module the file names; a file chooses only among the table's callbacks and
gives them only plain data.
"""

from __future__ import annotations

import functools
import importlib
import types

import jax
import numpy as np

from jaxpr_io.codec import library_table as libraries
from jaxpr_io.safety import validate
from jaxpr_io.errors import FormatError, UnsupportedError

_BY_NAME = {c.name: c for c in libraries.LIBRARY_CALLBACKS}
_BY_QUALNAME = {(c.module, c.qualname): c for c in libraries.LIBRARY_CALLBACKS}


def _equinox_callbacks() -> dict[tuple[str, str], types.FunctionType]:
  """Equinox's error callbacks as this process's Equinox makes them: the
  host functions of a traced `branched_error_if`, by (module, qualname)."""
  eqxi = importlib.import_module("equinox.internal")

  def check(x, pred):
    return eqxi.branched_error_if(x, pred, 0, ("",), on_error="raise")
  closed = jax.make_jaxpr(check)(np.float32(0), np.bool_(False))
  found = {}
  for jaxpr in validate.walk_jaxprs(closed.jaxpr):
    for eqn in jaxpr.eqns:
      fn = getattr(eqn.params.get("callback"), "callback_func", None)
      if type(fn) is types.FunctionType:
        found[(fn.__module__, fn.__qualname__)] = fn
  return found


_MAKERS = {"equinox": _equinox_callbacks}


@functools.lru_cache(maxsize=None)
def _library_code(package: str) -> dict[tuple[str, str], types.FunctionType]:
  """(module, qualname) -> a function of the package's callbacks, as made
  in this process (its code and globals are what a rebuilt one gets)."""
  return _MAKERS[package]()


def _plain(value, where: str):
  """`value` as stored data: strings, numbers, bools, None and tuples of
  them (lists become tuples); UnsupportedError for anything else."""
  if value is None or type(value) in (str, int, float, bool):
    return value
  if type(value) in (list, tuple):
    return tuple(_plain(v, where) for v in value)
  raise UnsupportedError(f"{where} holds a {type(value).__name__}, which "
                         "is not plain data; it cannot be stored")


def encode(fn) -> tuple[str, tuple] | None:
  """(the table's name, ((free variable, value), ...)) of a library
  callback, or None when `fn` is not one (then it must be registered)."""
  if type(fn) is not types.FunctionType:
    return None
  entry = _BY_QUALNAME.get((fn.__module__, fn.__qualname__))
  if entry is None:
    return None
  model = _library_code(entry.package).get((entry.module, entry.qualname))
  if model is None or fn.__code__ is not model.__code__:
    return None  # the same name, but not the library's code
  cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or ()))
  expected = set(entry.stored) | {n for n, _ in entry.rebuilt}
  if set(cells) != expected:
    raise UnsupportedError(
        f"the {entry.package} callback {entry.module}.{entry.qualname} has "
        f"free variables {sorted(cells)}, jaxpr_io's table knows "
        f"{sorted(expected)}: this {entry.package} version is not supported")
  return entry.name, tuple(
      (name, _plain(cells[name].cell_contents, f"{entry.name}'s {name}"))
      for name in entry.stored)


def _check_stored(entry, stored) -> dict:
  names = tuple(p[0] for p in stored) if type(stored) is tuple and all(
      type(p) is tuple and len(p) == 2 for p in stored) else None
  if names != entry.stored:
    raise FormatError(f"library callback {entry.name!r}: the stored values "
                      f"are not those of {entry.stored}")
  values = dict(stored)
  msgs = values.get("msgs")
  if "msgs" in values and (type(msgs) is not tuple or not all(
      type(m) is str for m in msgs)):
    raise FormatError(f"library callback {entry.name!r}: msgs is not a "
                      "tuple of strings")
  return values


def decode(name, stored) -> types.FunctionType:
  """The library callback stored as (`name`, `stored`), rebuilt from this
  process's library; FormatError naming the package when it cannot be."""
  entry = _BY_NAME.get(name) if type(name) is str else None
  if entry is None:
    raise FormatError(f"library callback {name!r:.80} is not in jaxpr_io's "
                      "table (jaxpr_io.codec.library_table.LIBRARY_CALLBACKS)")
  values = _check_stored(entry, stored)
  reason = libraries.import_package_of(entry.module)
  if reason:
    raise FormatError(f"the program calls {entry.package}'s callback "
                      f"{entry.name!r}: {reason}")
  model = _library_code(entry.package).get((entry.module, entry.qualname))
  values.update(entry.rebuilt)
  if model is None or set(model.__code__.co_freevars) != set(values):
    raise FormatError(
        f"the program calls {entry.package}'s callback {entry.name!r}, which "
        f"this version of {entry.package!r} does not make as jaxpr_io's "
        "table describes; install the version that wrote the file")
  closure = tuple(types.CellType(values[n])
                  for n in model.__code__.co_freevars)
  return types.FunctionType(model.__code__, model.__globals__, model.__name__,
                            model.__defaults__, closure)
