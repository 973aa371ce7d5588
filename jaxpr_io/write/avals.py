"""Encoding avals into the writer's aval table: arrays (shape, dtype, weak
type, sharding, memory space, layout), refs, tokens, futures and pinned
linear values (format version 7), JAX 0.10's boxes and logs (version 8)."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.format import _proto as pb
from jaxpr_io.codec import dtypes
from jaxpr_io.codec import params
from jaxpr_io.codec import registry
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.families.pallas import refs as pallas_refs
from jaxpr_io.errors import UnsupportedError

_MEMORY_SPACES = {
    compat.MemorySpace.Device: pb.MemorySpace["MEMORY_SPACE_DEVICE"],
    compat.MemorySpace.Host: pb.MemorySpace["MEMORY_SPACE_HOST"],
    compat.MemorySpace.Any: pb.MemorySpace["MEMORY_SPACE_ANY"],
}
_DEFAULT_SHARDINGS: dict[int, Any] = {}
# Format version 7: a future's done primitive -> its stable name, and the
# memory spaces of pinned linear values (what JAX's `pin` accepts).
_FUTURE_DONE_NAMES = {prim: name for name, prim in compat_tables.FUTURE_DONES.items()}
_LIN_VAL_MEMORY_SPACES = {
    None: pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_UNSPECIFIED"],
    "hbm": pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_HBM"],
    "vmem": pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_VMEM"],
}


def _default_sharding(ndim: int):
  sharding = _DEFAULT_SHARDINGS.get(ndim)
  if sharding is None:
    sharding = _DEFAULT_SHARDINGS[ndim] = compat.ShapedArray(
        (1,) * ndim, np.float32).sharding
  return sharding


def encode_aval(w, aval, out) -> None:
  t = type(aval)
  if t is compat.AbstractToken:
    out.token.SetInParent()
    return
  if pallas_refs.is_ref_class(t):
    if pallas_refs.ref_class(aval.memory_space) is not t:
      raise UnsupportedError(
          f"a ref of type {t.__name__} in memory space "
          f"{aval.memory_space!r:.60} cannot be stored: the format reads "
          f"every ref in that memory space as a "
          f"{pallas_refs.ref_class(aval.memory_space).__name__}")
    inner = aval.inner_aval
    if type(inner) is not compat.ShapedArray:
      raise UnsupportedError(f"a ref to a value of type {inner} cannot be "
                             "stored (refs to arrays can)")
    ref = out.ref
    ref.inner_aval = w.aval(inner)  # interned first: a smaller index
    if aval.memory_space is not None:
      params.encode_value(w, aval.memory_space, ref.memory_space)
    kind = pallas_refs.stored_ref_kind(aval)
    if kind is not None:
      params.encode_value(w, kind, ref.kind)
    return
  if t is compat.AbstractFuture:
    _encode_future(w, aval, out.future)
    return
  if t is compat.AbstractLinVal:
    _encode_lin_val(w, aval, out.lin_val)
    return
  if hi_mutable.is_hi_mutable(aval):
    hi_mutable.encode_aval(aval, out)
    return
  if t is not compat.ShapedArray:
    raise UnsupportedError(
        f"abstract value {aval} of type {t.__name__} cannot be stored "
        "(ShapedArray, AbstractRef, AbstractFuture, AbstractLinVal, "
        "AbstractToken and JAX 0.10's BoxTy and LogTy can)")
  sa = out.shaped_array
  if all(type(d) is int for d in aval.shape):
    sa.sizes.extend(aval.shape)
  else:
    for d in aval.shape:
      if type(d) is int:
        sa.shape.add().size = d
      else:
        sa.shape.add().expr = w.dim_expr(d)
  dtypes.encode_dtype(aval.dtype, sa.dtype, w.string,
                      lambda value, field: params.encode_value(w, value,
                                                               field))
  sa.weak_type = aval.weak_type
  if aval.sharding != _default_sharding(len(aval.shape)):
    params.encode_value(w, aval.sharding, sa.sharding)
  if not aval.manual_axis_type.empty:
    params.encode_value(w, aval.manual_axis_type, sa.manual_axis_type)
  memory_space = _MEMORY_SPACES.get(aval.memory_space)
  if memory_space is not None:
    sa.memory_space = memory_space
  elif type(aval.memory_space) in registry.ENUMS.by_key:
    # A kernel's memory space (pl.with_memory_space_constraint).
    params.encode_value(w, aval.memory_space, sa.kernel_memory_space)
  else:
    raise UnsupportedError(
        f"an array in memory space {aval.memory_space!r:.60} cannot be "
        "stored: it is neither one of JAX's memory spaces nor a member of "
        "an enum registered with jaxpr_io.register_enum")
  layout = compat.aval_layout(aval)
  if layout is not None:
    # Format version 7: `ShapedArray.layout` (JAX 0.11+; set by relayout).
    if type(layout) is not compat.Layout:
      raise UnsupportedError(
          f"a value of type {aval.str_short()} with layout {layout!r:.80} "
          f"of type {type(layout).__name__} cannot be stored (a "
          "jax.experimental.layout.Layout can)")
    params.encode_value(w, layout, sa.layout)

def _inner_aval(w, aval, what: str) -> int:
  """Aval index of a future's or linear value's array type."""
  inner = aval.inner_aval
  if type(inner) is not compat.ShapedArray:
    raise UnsupportedError(f"{what} of a value of type {inner} cannot be "
                           "stored (of arrays can)")
  return w.aval(inner)  # interned first: a smaller index

def _encode_future(w, aval, out) -> None:
  # Format version 7.
  out.inner_aval = _inner_aval(w, aval, "a future")
  done = compat.ADAPTER.future_done(aval)
  if done is not None:
    name = (_FUTURE_DONE_NAMES.get(done)
            if type(done) is compat.Primitive else None)
    if name is None:
      raise UnsupportedError(
          f"a future resolved by {done!r:.80} cannot be stored: the "
          "format stores futures that one of JAX's own *_done primitives "
          f"resolves ({', '.join(compat_tables.FUTURE_DONES)})")
    out.done = w.string(name) + 1

def _encode_lin_val(w, aval, out) -> None:
  # Format version 7.
  out.inner_aval = _inner_aval(w, aval, "a pinned linear value")
  space = (_LIN_VAL_MEMORY_SPACES.get(aval.memory_space)
           if aval.memory_space is None or type(aval.memory_space) is str
           else None)
  if space is None:
    raise UnsupportedError(
        f"a pinned linear value in memory space {aval.memory_space!r:.60} "
        "cannot be stored (None, 'hbm' and 'vmem' can: what JAX lowers)")
  out.memory_space = space
