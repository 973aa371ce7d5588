"""Ref avals of Pallas kernels: which `AbstractRef` subclass holds a ref of
each memory space, and how a ref's `kind` field is stored.

Light on purpose: the writer and the reader consult it for every ref aval,
while the Pallas family (core.py, loaded with a program or file that holds a
kernel) fills it with the classes of Pallas's backends.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxpr_io import compat
from jaxpr_io.codec import params
from jaxpr_io.errors import FormatError


# Subclasses of `AbstractRef` that the format stores as refs, told apart by
# their memory space: memory space -> the class. A ref of that memory space
# is always of that class (the writer refuses a plain `AbstractRef` there),
# so reading rebuilds the same class. Mosaic GPU's WGMMA accumulator (the
# `plgpu.ACC` scratch that `wgmma` accumulates into) is the only ref in its
# REGS memory space.
_REF_CLASSES: dict[Any, type] = {}


@dataclasses.dataclass(frozen=True)
class TMEMRefAttributes:
  """What a Mosaic GPU TMEM ref aval (`AbstractTMEMRef`, Blackwell tensor
  memory) holds beyond a plain ref: its `tcgen05.TMEMLayout` and whether it
  is allocated across a CTA pair (`collective`). JAX's TMEM ref never has a
  `kind`, so the format stores these as a record in the ref's `kind` field
  (jaxpr.proto, `AbstractRef.kind`). Never part of a program: only the
  file's spelling of those two fields."""
  layout: Any
  collective: bool


def tmem_attributes_problem(kwargs) -> str | None:
  if type(kwargs.get("collective")) is not bool:
    return f"collective {kwargs.get('collective')!r:.80} is not a bool"
  if type(kwargs.get("layout")) is not _TMEM_LAYOUT:
    return (f"layout {kwargs.get('layout')!r:.80} is not a Mosaic GPU "
            "TMEMLayout")
  return None


_TMEM_LAYOUT: Any = None  # tcgen05.TMEMLayout, where Mosaic GPU imports
_TMEM_REF: Any = None  # AbstractTMEMRef, where Mosaic GPU imports
TMEM_ATTRIBUTES_NAME = "jax.pallas.gpu.TMEMRefAttributes"


def set_tmem(layout: type, ref: type) -> None:
  """Mosaic GPU's TMEM layout and ref classes (the Pallas family, once it
  finds them)."""
  global _TMEM_LAYOUT, _TMEM_REF
  _TMEM_LAYOUT, _TMEM_REF = layout, ref


def add_ref_class(memory_space, cls: type) -> None:
  """Refs in `memory_space` are of class `cls`, stored as ref avals."""
  _REF_CLASSES[memory_space] = cls
  params.register_aval_type(cls)


def stored_ref_kind(aval):
  """The value the format stores in a ref aval's `kind` field: the kind of
  a plain ref, the layout and collective flag of a TMEM ref, None for a
  WGMMA accumulator (which has no kind)."""
  t = type(aval)
  if t is compat.AbstractRef:
    return aval.kind
  if t is _TMEM_REF:
    return TMEMRefAttributes(aval.layout, aval.collective)
  return None


def build_ref(inner, memory_space, kind):
  """The ref aval a file describes: `ref_class(memory_space)` built from
  the inner aval and the stored `kind` (see `stored_ref_kind`). Raises
  FormatError where the kind does not fit the memory space's class."""
  cls = ref_class(memory_space)
  if cls is compat.AbstractRef:
    if type(kind) is TMEMRefAttributes:
      raise FormatError(f"a ref in memory space {memory_space!r:.60} has "
                        "TMEM attributes, which only a TMEM ref has")
    return compat.AbstractRef(inner, memory_space, kind)
  if cls is _TMEM_REF:
    if type(kind) is not TMEMRefAttributes:
      raise FormatError(f"a TMEM ref has kind {kind!r:.80}, not its layout "
                        f"and collective flag (a {TMEM_ATTRIBUTES_NAME} "
                        "record)")
    return cls(inner, memory_space, kind.layout, kind.collective)
  if kind is not None:
    raise FormatError(f"a ref in memory space {memory_space!r:.60} (a "
                      f"{cls.__name__}) has a kind, {kind!r:.80}")
  return cls(inner, memory_space)


def ref_class(memory_space) -> type:
  """The ref aval class of refs in `memory_space`."""
  try:
    return _REF_CLASSES.get(memory_space, compat.AbstractRef)
  except TypeError:  # an unhashable memory space: not one of ours
    return compat.AbstractRef


def ref_classes() -> tuple[type, ...]:
  """The `AbstractRef` subclasses stored as refs."""
  return tuple(_REF_CLASSES.values())


def is_ref_class(cls) -> bool:
  return cls is compat.AbstractRef or cls in _REF_CLASSES.values()
