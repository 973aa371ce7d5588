"""Storing params that are thunks of a jaxpr: `linear_call`'s
`transpose_thunk` and `remat_opt`'s `fun_jaxpr_thunk`.

JAX traces these thunks only when a transformation needs them (transposing
a `linear_call`; batching, differentiating or dead-code eliminating a
`custom_vjp` with `optimize_remat=True`). The writer calls the thunk once and
stores what it returns, `(jaxpr, consts)`, as one closed jaxpr: the consts
are its constants (stored value, inside `Value.param_codec`: a closed jaxpr
reference). The reader rebuilds a thunk that returns that jaxpr and those
consts, in the form the running JAX release expects
(jaxpr_io/compat/jaxpr_callables.py). No code is stored: the jaxpr is data, as
any other sub-jaxpr.

Added in format version 6 (after its first release: an older reader refuses
such a file, naming the param it has no codec for). Importing this module
registers the codecs.
"""

from __future__ import annotations

from typing import Any, Callable

from jaxpr_io import compat
from jaxpr_io.codec import registry
from jaxpr_io.compat import jaxpr_callables as compat_callables
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


def _transpose_types(params: dict) -> tuple[list, list] | None:
  """(input, output) types that `linear_call`'s transpose must have, its
  consts closed over: JAX binds it to the residuals and the cotangents of
  the callee's outputs, and takes its outputs as the cotangents of the
  callee's linear operands."""
  callee, n_consts, n_res = (params.get(k) for k in (
      "callee", "num_callee_consts", "num_res"))
  if not (compat.is_closed_jaxpr(callee) and type(n_consts) is int
          and type(n_res) is int):
    return None  # the equation's own checks name what is wrong
  ins = list(callee.in_avals)
  return ins[n_consts:n_consts + n_res] + list(callee.out_avals), ins[
      n_consts + n_res:]


def _primal_types(params: dict) -> tuple[list, list] | None:
  """(input, output) types that `remat_opt`'s primal function must have: its
  forward function's, less the consts and the residuals."""
  fwd, n_consts, n_res = (params.get(k) for k in (
      "fwd_jaxpr", "num_consts", "num_res"))
  if not (compat.is_closed_jaxpr(fwd) and type(n_consts) is int
          and type(n_res) is int):
    return None
  return list(fwd.in_avals)[n_consts:], list(fwd.out_avals)[n_res:]


def _check_types(what: str, closed, expected: tuple[list, list] | None,
                 error: type[Exception]) -> None:
  """Raises `error` unless `closed` takes and returns the `expected` types
  (weak types aside), as the transformations that bind it assume: JAX does
  not check, and a mismatch would fail far from its cause, or not at all."""
  if expected is None:
    return
  for side, have, want in (("takes", closed.in_avals, expected[0]),
                           ("returns", closed.out_avals, expected[1])):
    have = list(have)
    if len(have) != len(want) or not all(
        compat.typematch(a, b) for a, b in zip(have, want)):
      raise error(
          f"{what} {side} ({', '.join(a.str_short() for a in have)}) where "
          f"the equation needs ({', '.join(a.str_short() for a in want)})")


def _codec(what: str, close: Callable, open_: Callable,
           types: Callable[[dict], tuple[list, list] | None]):
  def encode(thunk, params: dict) -> Any:
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
    closed = close(jaxpr, consts)
    # What a reader refuses is refused here, so that every file loads.
    _check_types(what, closed, types(params), UnsupportedError)
    return closed

  def decode(stored: Any, params: dict) -> Any:
    if not compat.is_closed_jaxpr(stored):
      raise FormatError(f"{what} is not stored as a closed jaxpr")
    _check_types(what, stored, types(params), FormatError)
    return _stored_thunk(stored, open_(stored))

  return encode, decode


for _primitive, _param, _close, _open, _types in (
    ("linear_call", "transpose_thunk", compat_callables.close_leading_invars,
     compat_callables.to_leading_invars, _transpose_types),
    ("remat_opt", "fun_jaxpr_thunk", compat_callables.close_traced,
     compat_callables.to_traced, _primal_types)):
  _encode, _decode = _codec(f"{_primitive}'s {_param}", _close, _open, _types)
  registry.register_eqn_param_codec(_primitive, _param, encode=_encode,
                                    decode=_decode)
