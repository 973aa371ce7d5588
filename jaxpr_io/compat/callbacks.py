"""JAX internals for host callbacks and debug printing.

How JAX 0.10, 0.11 and 0.12 stage the callback APIs out into equations
(alike in all three; the `jax.debug.callback` wrapper's closure is checked
at import):

* `jax.pure_callback` / `jax.experimental.io_callback` bind `pure_callback`
  / `io_callback` with `callback=_FlatCallback(user_fn, in_tree)`, a frozen
  dataclass that unflattens the arguments with `in_tree` (the structure of
  `(args, kwargs)`) and calls `user_fn`.
* `jax.debug.callback` binds `debug_callback` with `callback=_flat_callback`,
  a closure defined inside `debug_callback` over `callback` (the user's
  function), `in_tree` (structure of `(args, kwargs)`, static arguments
  included) and `static_args` (flat position -> value of each argument that
  is not an array). It also passes the effect instance as param `effect`.
  (JAX 0.12 builds `in_tree` in its tracing pytree registry, 0.10 in the
  default one; for the node types a file can hold the two unflatten alike,
  so a stored `in_tree` is rebuilt in the default registry everywhere.)
* `jax.debug.print` binds its own `debug_print` primitive whose params are
  all data except `in_tree` (a `PyTreeDef`) and `logging_record` (a
  `logging.LogRecord` for `jax.debug.log`, else None).

This module finds those pieces and rebuilds them; `jaxpr_io.families.callbacks` does
the storing.
"""

from __future__ import annotations

import types
from typing import Any

from jax._src import callback as callback_lib
from jax._src import debugging

FlatCallback = callback_lib._FlatCallback  # pylint: disable=protected-access

pure_callback_p = callback_lib.pure_callback_p
io_callback_p = callback_lib.io_callback_p
debug_callback_p = debugging.debug_callback_p
debug_print_p = debugging.debug_print_p

# The effects `debug_callback` takes as its `effect` param.
DEBUG_EFFECTS = (debugging.debug_effect, debugging.ordered_debug_effect)

# The logger `jax.debug.log` makes its records for.
debug_logger = debugging.logger


def _nested_code(code: types.CodeType, name: str) -> types.CodeType:
  found = [c for c in code.co_consts
           if isinstance(c, types.CodeType) and c.co_name == name]
  if len(found) != 1:
    raise RuntimeError(
        f"{code.co_qualname} defines {len(found)} functions named {name!r} "
        "in this JAX release; update jaxpr_io/compat/callbacks.py")
  return found[0]


# `jax.debug.callback`'s wrapper: debug_callback -> _debug_callback ->
# _flat_callback. Found by code object, never by name, so that a user
# function that happens to be called `_flat_callback` is not mistaken for it.
_DEBUG_FLAT_CODE = _nested_code(
    _nested_code(debugging.debug_callback.__code__, "_debug_callback"),
    "_flat_callback")
_DEBUG_FLAT_VARS = ("callback", "in_tree", "static_args")
if set(_DEBUG_FLAT_CODE.co_freevars) != set(_DEBUG_FLAT_VARS):
  raise RuntimeError(
      "jax.debug.callback's wrapper captures "
      f"{_DEBUG_FLAT_CODE.co_freevars}, not {_DEBUG_FLAT_VARS}, in this JAX "
      "release; update jaxpr_io/compat/callbacks.py")


def debug_callback_parts(fn) -> tuple[Any, Any, dict] | None:
  """(user function, in_tree, static_args) of the wrapper that
  `jax.debug.callback` made, or None if `fn` is not such a wrapper."""
  if type(fn) is not types.FunctionType or fn.__code__ is not _DEBUG_FLAT_CODE:
    return None
  cells = dict(zip(fn.__code__.co_freevars, fn.__closure__))
  return (cells["callback"].cell_contents, cells["in_tree"].cell_contents,
          cells["static_args"].cell_contents)


def make_debug_callback(user_fn, in_tree, static_args: dict):
  """A wrapper equivalent to the one `jax.debug.callback(user_fn, ...)`
  makes: JAX's own code, closed over the given values."""
  values = {"callback": user_fn, "in_tree": in_tree,
            "static_args": static_args}
  closure = tuple(types.CellType(values[v])
                  for v in _DEBUG_FLAT_CODE.co_freevars)
  fn = types.FunctionType(_DEBUG_FLAT_CODE, vars(debugging),
                          _DEBUG_FLAT_CODE.co_name, None, closure)
  fn.__qualname__ = _DEBUG_FLAT_CODE.co_qualname
  return fn
