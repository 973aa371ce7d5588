"""Storing JAX 0.12's thunky programs (`jax._src.thunky`): programs of the
XLA:GPU thunk executor, written as jaxprs over buffer refs.

Most thunky primitives hold plain data (slice specs, replica groups, stream
ids, sub-jaxprs) and need nothing here. Three need a decision:

* `thunky.call_jax`'s `fn` is a Python function, which JAX traces at
  abstract evaluation (at the avals of `slice_specs` and `is_ref`) and again
  when it lowers the equation. The writer traces it the same way and stores
  the closed jaxpr (inside `Value.param_codec`); `load` rebuilds a function
  that evaluates it (`StoredThunkyFn`), saved again as the same jaxpr.
* `thunky.custom_call` calls an XLA:GPU custom-call target by name: native
  code of the loading process chosen by the file, screened like `ffi_call`
  (jaxpr_io/safety/trust.py): the target must be registered with
  `jaxpr_io.register_ffi_target`, which also validates `backend_config`.
* `thunky.ptx_kernel` carries PTX source, native code chosen by the file:
  never stored (`jaxpr_io.compat.tables.EXCLUDED_PRIMITIVES`).

thunky exists from JAX 0.12 on: a file with thunky equations loaded under an
earlier release fails with a FormatError naming the primitive and the first
release that has it (`vocabulary.unknown_primitive`).
"""

from __future__ import annotations

import numpy as np

from jaxpr_io import compat
from jaxpr_io.codec import registry
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.errors import FormatError, UnsupportedError

CALL_JAX = "thunky.call_jax"


def _fn_avals(params) -> list:
  """The avals `thunky.call_jax` traces its `fn` at: one per input (those
  of its outputs included), a ref where `is_ref` says so."""
  specs, is_ref = params.get("slice_specs"), params.get("is_ref")
  if (type(specs) is not tuple or type(is_ref) is not tuple
      or len(specs) != len(is_ref)
      or not all(type(s) is tuple and len(s) == 3 for s in specs)
      or not all(type(r) is bool for r in is_ref)):
    raise FormatError(f"{CALL_JAX}'s slice_specs and is_ref are not tuples "
                      "of (offset, shape, dtype) and of bools of one length")
  avals = []
  for (_, shape, dtype), ref in zip(specs, is_ref):
    aval = compat.ShapedArray(shape, dtype)
    avals.append(compat.AbstractRef(aval) if ref else aval)
  return avals


class StoredThunkyFn:
  """`thunky.call_jax`'s `fn` read from a file: evaluates the stored
  jaxpr on the refs and arrays JAX passes, and returns nothing, as the
  function `call_jax` binds does."""

  def __init__(self, closed):
    self.closed = closed

  def __call__(self, *args):
    n_in = len(self.closed.in_avals)
    if len(args) != n_in:
      raise TypeError(f"{CALL_JAX}'s stored function takes {n_in} "
                      f"arguments, got {len(args)}")
    compat.jaxpr_as_fun(self.closed)(*args)

  def __str__(self):
    return f"<function stored_thunky_fn at {hex(id(self))}>"

  __repr__ = __str__


def encode_fn(fn, params):
  if type(fn) is StoredThunkyFn:  # a loaded program, saved again
    return fn.closed
  avals = _fn_avals(params)

  def flat(*args):
    fn(*args)
    return []
  try:
    jaxpr, consts = compat_custom_rules.trace_flat(
        flat, avals, compat.DebugInfo(
            "thunky_call_jax", getattr(fn, "__qualname__", "fn"),
            tuple(f"args[{i}]" for i in range(len(avals))), None))
  except Exception as e:  # pylint: disable=broad-except
    # The user's function can raise anything when traced outside the
    # program (e.g. a collective whose mesh axis is not bound there).
    raise UnsupportedError(
        f"{CALL_JAX}'s function cannot be traced on its own at "
        f"{avals}: {type(e).__name__}: {e}"[:600]) from None
  return compat.make_closed(jaxpr, consts)


def decode_fn(stored, params):
  if not compat.is_closed_jaxpr(stored):
    raise FormatError(f"{CALL_JAX}'s fn is not a closed jaxpr")
  avals = _fn_avals(params)
  if (list(stored.in_avals) != avals
      or compat.open_jaxpr(stored).outvars):
    raise FormatError(f"{CALL_JAX}'s fn jaxpr does not take the avals of "
                      f"its slice_specs ({avals}) or returns values")
  return StoredThunkyFn(stored)


registry.register_eqn_param_codec(CALL_JAX, "fn", encode=encode_fn,
                                  decode=decode_fn)


# `thunky.inline_constant` (the constants of a thunky module, bound when
# `call_thunky_nested` is discharged to its XLA custom call) holds raw bytes,
# a type the format's values lack: stored as a uint8 array.
INLINE_CONSTANT = "thunky.inline_constant"


def encode_constant_bytes(value, params):
  del params
  if type(value) is not bytes:
    raise UnsupportedError(f"{INLINE_CONSTANT}'s value is not bytes: "
                           f"{type(value).__name__}")
  return np.frombuffer(value, np.uint8).copy()


def decode_constant_bytes(stored, params):
  del params
  if (type(stored) is not np.ndarray or stored.dtype != np.uint8
      or stored.ndim != 1):
    raise FormatError(f"{INLINE_CONSTANT}'s value is not a 1-D uint8 array")
  return stored.tobytes()


registry.register_eqn_param_codec(INLINE_CONSTANT, "value",
                                  encode=encode_constant_bytes,
                                  decode=decode_constant_bytes)
