"""Storing params that are thunks of a jaxpr: `linear_call`'s
`transpose_thunk` and `remat_opt`'s `fun_jaxpr_thunk`.

JAX traces these thunks only when a transformation needs them (transposing
a `linear_call`; batching, differentiating or dead-code eliminating a
`custom_vjp` with `optimize_remat=True`). The writer calls the thunk once and
stores what it returns, `(jaxpr, consts)`, as one closed jaxpr: the consts
are its constants (stored value, inside `Value.param_codec`: a closed jaxpr
reference). The reader rebuilds a thunk that returns that jaxpr and those
consts, in the form the running JAX release expects
(jaxpr_io/compat/jaxpr_thunks.py). No code is stored: the jaxpr is data, as
any other sub-jaxpr.

Added in format version 6 (after its first release: an older reader refuses
such a file, naming the param it has no codec for). Importing this module
registers the codecs.
"""

from __future__ import annotations

from typing import Any, Callable

from jaxpr_io import compat
from jaxpr_io import registry
from jaxpr_io.compat import jaxpr_thunks as compat_thunks
from jaxpr_io.errors import FormatError, UnsupportedError


def _stored_thunk(closed, result):
  """A loaded thunk: returns the stored jaxpr and consts, as JAX's own
  (memoized) thunks return the same objects at every call. A plain function,
  so that the program prints as the original does; `closed` is what a
  re-dump stores again."""
  def thunk():
    return result
  thunk.jaxpr_io_closed = closed
  return thunk


_STORED_CODE = _stored_thunk(None, None).__code__


def _codec(what: str, close: Callable, open_: Callable):
  def encode(thunk, params: dict) -> Any:
    del params
    if getattr(thunk, "__code__", None) is _STORED_CODE:
      return thunk.jaxpr_io_closed
    if not callable(thunk):
      raise UnsupportedError(f"{what} is {type(thunk).__name__}, not a thunk")
    try:
      jaxpr, consts = thunk()
    except Exception as e:  # pylint: disable=broad-except
      # The user's function failed when traced: JAX would fail the same
      # way when a transformation first needs it.
      raise UnsupportedError(
          f"tracing {what} failed ({type(e).__name__}: {e}); the program "
          "cannot be stored with it") from None
    return close(jaxpr, consts)

  def decode(stored: Any, params: dict) -> Any:
    del params
    if not compat.is_closed_jaxpr(stored):
      raise FormatError(f"{what} is not stored as a closed jaxpr")
    return _stored_thunk(stored, open_(stored))

  return encode, decode


for _primitive, _param, _close, _open in (
    ("linear_call", "transpose_thunk", compat_thunks.close_leading_invars,
     compat_thunks.to_leading_invars),
    ("remat_opt", "fun_jaxpr_thunk", compat_thunks.close_traced,
     compat_thunks.to_traced)):
  _encode, _decode = _codec(f"{_primitive}'s {_param}", _close, _open)
  registry.register_eqn_param_codec(_primitive, _param, encode=_encode,
                                    decode=_decode)
