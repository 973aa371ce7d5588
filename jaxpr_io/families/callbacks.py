"""Host callbacks and debug printing: `jax.debug.print`, `jax.debug.log`,
`jax.debug.callback`, `jax.pure_callback` and `jax.experimental.io_callback`.

`jax.debug.print` (and `jax.debug.log`) is stored completely: its equation
(`debug_print`) holds the format string and printing options as data, and
the loaded program prints the same text.

The other three, and `jax.experimental.buffer_callback`, call an arbitrary
Python function, which a file cannot hold.
Such a function is storable only once it is registered under a stable name,
in the saving process and again in the loading one:

    jaxpr_io.register_callback("mylib.log_stats", log_stats)

The file then stores the name, and `load` calls whatever function the
loading process registered under it (loading a file never imports code). An
unregistered function makes `dumps` raise `UnsupportedError` naming it; a
name the loading process has not registered makes `load` raise
`FormatError` naming it.

Stored values (inside `Value.param_codec`), by (primitive, param):

* `pure_callback` / `io_callback`, `callback` (JAX's `_FlatCallback`):
  `(name, in_tree)`, the registered name of the user function and the
  structure of its `(args, kwargs)`; or, for a callback a library of
  jaxpr_io's table makes itself (Equinox's `error_if`, so Diffrax's and
  Optimistix's `throw=True`), `(name, in_tree, ((free variable, value),
  ...))`, rebuilt from the loading process's library
  (jaxpr_io/families/libraries/error_callbacks.py), without registration;
* `buffer_callback`, `callback` (the user function itself): its
  registered name; the other params (`result_avals`, `in_tree`, `out_tree`,
  ...) are plain data, avals and treedefs;
* `pure_callback` / `io_callback` / `ffi_call`, `result_avals`: a tuple of
  avals, each
  `(shape, dtype, weak_type, sharding | None, memory_space,
  manual_axis_type | None)` (None: the default of an unsharded value);
* `debug_callback`, `callback` (the wrapper `jax.debug.callback` makes):
  `(name, in_tree, static_args)` with `static_args` the `(flat position,
  value)` pairs of the arguments that are not arrays, by position;
* `debug_callback`, `effect`: the effect's stable name ("jax.debug" or
  "jax.ordered_debug");
* `debug_print`, `in_tree`: the structure of the `(args, kwargs)` passed to
  `jax.debug.print`;
* `debug_print`, `logging_record` (`jax.debug.log`): None, or
  `(logger name, level, pathname, line number, message)`.

The other params (`debug_print`'s `fmt`, `ordered`, `static_args`,
`np_printoptions`, ...; `sharding`, `vmap_method`, `ordered`,
`partitioned`) are plain data and use the generic codecs.

A pytree structure `in_tree` is stored as a nested tuple, one per node
(jaxpr_io/compat/tree_tuples.py).

Importing this module registers the codecs.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.codec import registry
from jaxpr_io.compat import callbacks as compat_callbacks
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.compat import tree_tuples
from jaxpr_io.families.libraries import error_callbacks
from jaxpr_io.pytree.calls import is_call_signature
from jaxpr_io.errors import FormatError, UnsupportedError

# ------------------------------------------------------------- registry
# Registered callbacks: the function object <-> its stable name.
CALLBACKS: registry.Registry[Any] = registry.Registry("callback")


def register_callback(name: str, fn: Callable | None = None):
  """Makes the host callback `fn` storable under the stable name `name`.

  Register the same name in every process that saves or loads programs
  calling `fn` (the loading process may register a different but
  equivalent function: the file holds only the name). A name or a function
  registered twice is a ValueError naming the earlier registration. The
  registered object is matched by equality (so `obj.method` works): pass
  exactly what you pass to `jax.pure_callback` / `io_callback` /
  `jax.debug.callback`.

  Returns `fn`; with `fn` omitted, returns a decorator:

      @jaxpr_io.register_callback("mylib.host_fn")
      def host_fn(x): ...
  """
  if fn is None:
    return lambda f: register_callback(name, f)
  if not callable(fn):
    raise TypeError(f"register_callback({name!r}, ...) needs a callable, "
                    f"got {type(fn).__name__}")
  try:
    hash(fn)
  except TypeError:
    raise TypeError(f"register_callback({name!r}, ...) needs a hashable "
                    f"callable; {type(fn).__name__} is not") from None
  CALLBACKS.add(fn, name, fn)
  return fn


def registered_name(fn) -> str | None:
  """The name `fn` is registered under, or None."""
  try:
    return CALLBACKS.by_key.get(fn)
  except TypeError:  # an unhashable callable cannot be registered
    return None


def _describe_fn(fn) -> str:
  name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None)
  if name is None:
    return repr(fn)
  module = getattr(fn, "__module__", None)
  return f"{module}.{name}" if module else name


def _name_of(fn, api: str) -> str:
  name = registered_name(fn)
  if name is None:
    raise UnsupportedError(
        f"the {api} calls the Python function {_describe_fn(fn)}, which a "
        "file cannot hold; register it under a stable name with "
        "jaxpr_io.register_callback('some.name', fn) in the "
        "saving process and in every process that loads the program")
  return name


def _lookup(name) -> Any:
  if type(name) is not str:
    raise FormatError(f"callback name {name!r} is not a string")
  fn = CALLBACKS.by_name.get(name)
  if fn is None:
    raise FormatError(
        f"the program calls the host callback {name!r}, which is not "
        "registered in this process; register the function with "
        f"jaxpr_io.register_callback({name!r}, fn) before loading")
  return fn


# ------------------------------------------------------------- avals
def _default_sharding(ndim: int):
  return compat.ShapedArray((1,) * ndim, np.float32).sharding


def encode_aval(aval) -> tuple:
  """A `ShapedArray` as (shape, dtype, weak_type, sharding | None,
  memory_space, manual_axis_type | None)."""
  if type(aval) is not compat.ShapedArray:
    raise UnsupportedError(f"result type {aval!r} is not a ShapedArray")
  default = aval.sharding == _default_sharding(len(aval.shape))
  return (tuple(aval.shape), aval.dtype, aval.weak_type,
          None if default else aval.sharding, aval.memory_space,
          None if aval.manual_axis_type.empty else aval.manual_axis_type)


def decode_aval(stored):
  if type(stored) is not tuple or len(stored) != 6:
    raise FormatError(f"result type {stored!r} is not a 6-tuple")
  shape, dtype, weak_type, sharding, memory_space, mat = stored
  if type(shape) is not tuple or type(weak_type) is not bool:
    raise FormatError(f"result type {stored!r} is malformed")
  # Symbolic dimensions come decoded; JAX's constructor rejects other
  # non-integers but accepts negative sizes, which no value has.
  if any(type(d) is bool or (type(d) is int and d < 0) for d in shape):
    raise FormatError(f"result type {stored!r} cannot be rebuilt: bad "
                      "dimension")
  kwargs = {"memory_space": memory_space}
  if sharding is not None:
    kwargs["sharding"] = sharding
    if mat is not None:
      kwargs["manual_axis_type"] = mat
  elif mat is not None:
    raise FormatError("a result type has a manual axis type but no sharding")
  try:
    return compat.ShapedArray(shape, dtype, weak_type, **kwargs)
  except (TypeError, ValueError, AssertionError, AttributeError,
          LookupError) as e:
    raise FormatError(f"result type {stored!r} cannot be rebuilt: {e}") from None


def encode_avals(avals, params) -> tuple:
  del params
  return tuple(encode_aval(a) for a in avals)


def decode_avals(stored, params) -> tuple:
  del params
  if type(stored) is not tuple:
    raise FormatError(f"result types {stored!r} are not a tuple")
  return tuple(decode_aval(a) for a in stored)


# ------------------------------------------------ pure_callback, io_callback
def _flat_callback_encoder(api: str):
  def encode(callback, params) -> tuple:
    del params
    if type(callback) is not compat_callbacks.FlatCallback:
      raise UnsupportedError(
          f"the {api} callback {_describe_fn(callback)} was not made by "
          f"{api}; it cannot be stored")
    library = error_callbacks.encode(callback.callback_func)
    if library is not None:
      # A library's own callback (Equinox's error_if): its table name, its
      # arguments' structure as an exact treedef value (it holds the
      # library's pytree types, e.g. Equinox's EnumerationItem), and its
      # free variables' values.
      return (library[0], callback.in_tree, library[1])
    return (_name_of(callback.callback_func, api),
            tree_tuples.encode_treedef(callback.in_tree))
  return encode


def decode_flat_callback(stored, params):
  del params
  if type(stored) is not tuple or len(stored) not in (2, 3):
    raise FormatError(f"callback {stored!r:.120} is not a (name, in_tree) "
                      "pair or a library callback's (name, in_tree, values)")
  if len(stored) == 2:
    return compat_callbacks.FlatCallback(_lookup(stored[0]),
                                         _call_tree(stored[1]))
  name, tree, values = stored
  if (type(tree) is not compat_pytrees.PyTreeDef
      or not is_call_signature(tree)):
    raise FormatError(f"library callback {name!r:.80}: the argument "
                      "structure is not the treedef of (args tuple, kwargs "
                      "dict with string keys)")
  return compat_callbacks.FlatCallback(error_callbacks.decode(name, values),
                                       tree)


# ------------------------------------------------------- buffer_callback
# `jax.experimental.buffer_callback` binds the user function itself; it
# receives mutable buffers of the call's operands and results.
def encode_buffer_callback(callback, params) -> str:
  del params
  return _name_of(callback, "jax.experimental.buffer_callback")


def decode_buffer_callback(stored, params):
  del params
  return _lookup(stored)


# ------------------------------------------------------ inspect_sharding
# `jax.debug.inspect_array_sharding` binds the user function itself; it
# receives the value's sharding when the program is compiled.
def encode_inspect_sharding_callback(callback, params) -> str:
  del params
  return _name_of(callback, "jax.debug.inspect_array_sharding")


# ------------------------------------------------------- debug_callback
def encode_debug_callback(callback, params) -> tuple:
  del params
  parts = compat_callbacks.debug_callback_parts(callback)
  if parts is None:
    raise UnsupportedError(
        f"the debug_callback function {_describe_fn(callback)} was not made "
        "by jax.debug.callback (JAX-internal uses such as jax.debug.breakpoint "
        "cannot be stored)")
  user_fn, in_tree, static_args = parts
  return (_name_of(user_fn, "jax.debug.callback"), tree_tuples.encode_treedef(in_tree),
          tuple(sorted(static_args.items())))


def decode_debug_callback(stored, params):
  del params
  if type(stored) is not tuple or len(stored) != 3:
    raise FormatError(f"debug callback {stored!r} is not a (name, in_tree, "
                      "static_args) triple")
  name, tree, static_args = stored
  if type(static_args) is not tuple or not all(
      type(p) is tuple and len(p) == 2 and type(p[0]) is int
      for p in static_args):
    raise FormatError(f"debug callback static args {static_args!r} are not "
                      "(position, value) pairs")
  positions = [p for p, _ in static_args]
  if positions != sorted(set(positions)):
    raise FormatError("debug callback static args are not in increasing "
                      "positions")
  in_tree = _call_tree(tree)
  if any(not 0 <= p < in_tree.num_leaves for p in positions):
    raise FormatError("a debug callback static arg position is out of range")
  return compat_callbacks.make_debug_callback(_lookup(name), in_tree,
                                       dict(static_args))


_EFFECT_NAMES = {id(e): name for name in ("jax.debug", "jax.ordered_debug")
                 if (e := compat_tables.SINGLETON_EFFECTS.get(name)) is not None
                 and any(e is d for d in compat_callbacks.DEBUG_EFFECTS)}


def encode_debug_effect(effect, params) -> str:
  del params
  name = _EFFECT_NAMES.get(id(effect))
  if name is None:
    raise UnsupportedError(f"debug_callback effect {effect!r} is not one of "
                           "JAX's debug effects")
  return name


def decode_debug_effect(stored, params):
  del params
  effect = compat_tables.SINGLETON_EFFECTS.get(stored) if type(stored) is str else None
  if effect is None or id(effect) not in _EFFECT_NAMES:
    raise FormatError(f"{stored!r} is not a debug effect (expected one of "
                      f"{sorted(_EFFECT_NAMES.values())})")
  return effect


# ------------------------------------------------------- debug_print
def encode_logging_record(record, params):
  del params
  if record is None:
    return None
  if record.args or record.exc_info or type(record.msg) is not str:
    raise UnsupportedError(
        f"jax.debug.log record {record!r} has arguments or exception info; "
        "only plain records can be stored")
  return (record.name, record.levelno, record.pathname, record.lineno,
          record.msg)


def decode_logging_record(stored, params):
  del params
  if stored is None:
    return None
  if (type(stored) is not tuple or len(stored) != 5
      or [type(x) for x in stored] != [str, int, str, int, str]):
    raise FormatError(f"logging record {stored!r} is not (name, level, "
                      "pathname, lineno, msg)")
  name, level, pathname, lineno, msg = stored
  return compat_callbacks.debug_logger.makeRecord(name, level, pathname, lineno, msg,
                                           (), None)


def _encode_in_tree(treedef, params):
  del params
  return tree_tuples.encode_treedef(treedef)


def _decode_in_tree(stored, params):
  del params
  return _call_tree(stored)


def _call_tree(stored):
  """A stored `(args, kwargs)` structure: callbacks unflatten their operands
  with it and unpack the pair."""
  tree = tree_tuples.decode_treedef(stored)
  if not is_call_signature(tree):
    raise FormatError(f"callback argument structure {tree} is not that of "
                      "(args tuple, kwargs dict with string keys)")
  return tree


# ------------------------------------------------------- registration
_CODECS = (
    ("pure_callback", "callback", _flat_callback_encoder("jax.pure_callback"),
     decode_flat_callback),
    ("pure_callback", "result_avals", encode_avals, decode_avals),
    ("io_callback", "callback",
     _flat_callback_encoder("jax.experimental.io_callback"),
     decode_flat_callback),
    ("io_callback", "result_avals", encode_avals, decode_avals),
    # `jax.ffi.ffi_call`'s results; which targets a file may call is
    # jaxpr_io/safety/trust.py's decision.
    ("ffi_call", "result_avals", encode_avals, decode_avals),
    ("buffer_callback", "callback", encode_buffer_callback,
     decode_buffer_callback),
    ("inspect_sharding", "callback", encode_inspect_sharding_callback,
     decode_buffer_callback),
    ("debug_callback", "callback", encode_debug_callback,
     decode_debug_callback),
    ("debug_callback", "effect", encode_debug_effect, decode_debug_effect),
    ("debug_print", "in_tree", _encode_in_tree, _decode_in_tree),
    ("debug_print", "logging_record", encode_logging_record,
     decode_logging_record),
)
for _primitive, _param, _encode, _decode in _CODECS:
  registry.register_eqn_param_codec(_primitive, _param, encode=_encode,
                                    decode=_decode)
