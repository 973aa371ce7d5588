"""Pallas kernels: `pallas_call` and the kernel-side primitives.

A `pallas_call` equation holds the kernel as an open jaxpr over refs (ref
avals: `Aval.ref`, format version 4) and describes its grid and blocks with
Pallas's own frozen dataclasses: `GridMapping`, `BlockMapping`, block
dimensions (`Blocked`, `Element`, `Squeezed`, `BoundedSlice`), `Buffered`
pipelining, `CostEstimate` and each backend's `CompilerParams` (Mosaic TPU,
Triton, Mosaic GPU). Memory spaces are enums.

Each dataclass is a record stored *by field name*: `((name, value), ...)`
for the fields that differ from the field's default, in declaration order.
A reader fills the fields the file leaves out with this JAX's defaults and
refuses a field this JAX's class does not have (a newer JAX's setting it
cannot honour), naming it. So a kernel written under one JAX release loads
under another as long as it uses what both have.

What a kernel asks of the machine beyond describing a computation is
screened by jaxpr_io/safety/trust.py: the Mosaic TPU compiler `flags` and the
Mosaic GPU profiler's `profile_space`/`profile_dir` (a path) are dropped
from untrusted files.
"""

from __future__ import annotations

import dataclasses
import importlib
import enum
from typing import Any

from jaxpr_io import compat
from jaxpr_io.codec import registry
from jaxpr_io.errors import FormatError, UnsupportedError

_pallas = compat.pallas_modules()

_MISSING = dataclasses.MISSING


def _default(field: dataclasses.Field):
  if field.default is not _MISSING:
    return field.default
  if field.default_factory is not _MISSING:  # type: ignore[misc]
    return field.default_factory()  # type: ignore[misc]
  return _MISSING


def _init_fields(cls) -> list[dataclasses.Field]:
  return [f for f in dataclasses.fields(cls) if f.init]


def _symbolic(value) -> bool:
  """Whether `value` (an aval, a ref aval or a tuple of them) has a
  symbolic dimension."""
  if type(value) is tuple:
    return any(map(_symbolic, value))
  if type(value) is compat.AbstractRef:
    value = value.inner_aval
  return any(type(d) is not int for d in getattr(value, "shape", ()))


# Fields of array types that must have concrete shapes: `Program.__call__`
# specializes a shape-polymorphic program's equations, not the kernels'
# grids, and Pallas lowers fixed blocks.
_CONCRETE_FIELDS = frozenset({"array_aval", "transformed_block_aval",
                              "index_map_avals", "scratch_avals"})


def field_pairs(name: str, stored) -> dict:
  """The fields of record `name` stored as (field name, value) pairs, as a
  dict; FormatError unless they are such pairs, each field once."""
  if type(stored) is not tuple or not all(
      type(item) is tuple and len(item) == 2 and type(item[0]) is str
      for item in stored):
    raise FormatError(f"{name}: the fields are not (name, value) pairs")
  kwargs = dict(stored)
  if len(kwargs) != len(stored):
    raise FormatError(f"{name}: a field is given twice")
  return kwargs


def _record_by_field_name(cls, name: str, must_be_none=(), check=None):
  """Registers `cls` (a dataclass) as a record stored by field name.
  `check(kwargs)`, if given, returns what is wrong with the fields read, or
  None."""
  fields = _init_fields(cls)
  names = {f.name for f in fields}

  def encode(value) -> tuple:
    stored = []
    for f in fields:
      v = getattr(value, f.name)
      if f.name in must_be_none and v is not None:
        raise UnsupportedError(f"{name}.{f.name} is {v!r:.80}: a Python "
                               "callable, which a file cannot hold")
      default = _default(f)
      if default is not _MISSING and type(v) is type(default) and v == default:
        continue
      stored.append((f.name, v))
    return tuple(stored)

  def decode(stored):
    kwargs = field_pairs(name, stored)
    unknown = sorted(set(kwargs) - names)
    if unknown:
      raise FormatError(
          f"{name}: this JAX's {cls.__qualname__} has no field "
          f"{unknown[0]!r} (the file sets it to {kwargs[unknown[0]]!r:.80}); "
          "load the file with the JAX release that wrote it")
    for f in fields:
      if f.name not in kwargs and _default(f) is _MISSING:
        raise FormatError(f"{name}: the required field {f.name!r} is "
                          "missing")
    problem = None if check is None else check(kwargs)
    if problem is not None:
      raise FormatError(f"{name}: {problem}")
    for field in _CONCRETE_FIELDS & set(kwargs):
      if _symbolic(kwargs[field]):
        raise FormatError(f"{name}: {field} {kwargs[field]} has a symbolic "
                          "dimension; Pallas kernels need concrete shapes")
    try:
      return cls(**kwargs)
    except (AssertionError, TypeError, ValueError, AttributeError,
            IndexError, KeyError) as e:
      # Pallas checks its dataclasses with asserts in __post_init__.
      raise FormatError(f"{name} cannot be built from {stored!r:.200}: "
                        f"{type(e).__name__}: {e}") from None

  registry.register_param_codec(cls, name=name, encode=encode, decode=decode)


def register_record_by_field_name(cls, name: str) -> None:
  """Registers the frozen dataclass `cls` as a record stored by field name
  (the Pallas fuser's fusion dtypes: jaxpr_io/families/pallas/fuser.py)."""
  _record_by_field_name(cls, name)


def _singleton_record(cls, name: str) -> None:
  """Registers `cls`, whose instances take no arguments and are all equal,
  as a record of no fields."""
  def decode(fields):
    if fields:
      raise FormatError(f"{name} has no fields, but the file gives "
                        f"{len(fields)}")
    return cls()
  registry.register_param_codec(cls, name=name, encode=lambda v: (),
                                decode=decode)


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


def _tmem_attributes_problem(kwargs) -> str | None:
  if type(kwargs.get("collective")) is not bool:
    return f"collective {kwargs.get('collective')!r:.80} is not a bool"
  if type(kwargs.get("layout")) is not _TMEM_LAYOUT:
    return (f"layout {kwargs.get('layout')!r:.80} is not a Mosaic GPU "
            "TMEMLayout")
  return None


_TMEM_LAYOUT: Any = None  # tcgen05.TMEMLayout, where Mosaic GPU imports


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
                        f"and collective flag (a {_TMEM_ATTRIBUTES_NAME} "
                        "record)")
    return cls(inner, memory_space, kind.layout, kind.collective)
  if kind is not None:
    raise FormatError(f"a ref in memory space {memory_space!r:.60} (a "
                      f"{cls.__name__}) has a kind, {kind!r:.80}")
  return cls(inner, memory_space)


_TMEM_REF: Any = None  # AbstractTMEMRef, where Mosaic GPU imports
_TMEM_ATTRIBUTES_NAME = "jax.pallas.gpu.TMEMRefAttributes"


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


def _transformed_ref_problem(kwargs) -> str | None:
  if not is_ref_class(type(kwargs.get("ref"))):
    return f"ref {kwargs.get('ref')!r:.80} is not a ref aval"
  if type(kwargs.get("transforms", ())) is not tuple:
    return "transforms is not a tuple"
  return None


def _register_gpu_transforms(gpu_core) -> None:
  """Mosaic GPU's ref transforms (tiling, swizzling, ...; run_scoped's
  `ref_transforms` holds them) and the layouts that name a register layout
  with arguments: frozen dataclasses of plain fields. PeerMemRef and
  MulticastRef are not frozen (they hold a traced device id) and stay out."""
  if gpu_core is None:
    return
  from jax._src.state import types as state_types  # pylint: disable=g-import-not-at-top
  for attr, cls in sorted(vars(gpu_core).items()):
    if (isinstance(cls, type) and cls.__module__ == gpu_core.__name__
        and dataclasses.is_dataclass(cls)
        and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        and (state_types.Transform in cls.__mro__
             or attr in ("ReducedLayout", "ParameterizedLayout"))):
      _record_by_field_name(cls, f"jax.pallas.gpu.{attr}")


def _register_tmem(gpu_core) -> None:
  """Mosaic GPU's TMEM refs (Blackwell tensor memory): every ref in the
  TMEM memory space is an `AbstractTMEMRef`, whose layout is a
  `tcgen05.TMEMLayout` (a `TiledLayout`: a `Tiling` and the warp, lane and
  vector dimensions, some of them `Replicated`), all frozen dataclasses of
  plain fields."""
  global _TMEM_LAYOUT, _TMEM_REF
  tmem_ref = vars(gpu_core or object).get("AbstractTMEMRef")
  if tmem_ref is None:
    return
  from jax.experimental.mosaic.gpu import fragmented_array, tcgen05  # pylint: disable=g-import-not-at-top
  for cls, name in ((fragmented_array.Tiling, "Tiling"),
                    (fragmented_array.Replicated, "Replicated"),
                    (fragmented_array.TiledLayout, "TiledLayout"),
                    (tcgen05.TMEMLayout, "TMEMLayout")):
    _record_by_field_name(cls, f"jax.mosaic_gpu.{name}")
  _TMEM_LAYOUT, _TMEM_REF = tcgen05.TMEMLayout, tmem_ref
  _record_by_field_name(TMEMRefAttributes, _TMEM_ATTRIBUTES_NAME,
                        check=_tmem_attributes_problem)
  _REF_CLASSES[gpu_core.MemorySpace.TMEM] = tmem_ref


def _register_optional_enum(module_name: str, attr: str, name: str) -> None:
  """Registers enum `attr` of JAX's module `module_name` as `name`, where
  this jaxlib has that module (a backend's bindings may be absent)."""
  try:
    module = importlib.import_module(module_name)
  except ImportError:
    return
  cls = getattr(module, attr, None)
  if cls is not None:
    registry.register_enum(cls, name=name)


def _register() -> None:
  if _pallas is None:
    return
  core = _pallas["core"]
  for attr in ("Blocked", "Element", "Squeezed", "BoundedSlice", "Buffered",
               "CostEstimate", "BlockMapping"):
    cls = vars(core).get(attr)
    if cls is not None:
      _record_by_field_name(cls, f"jax.pallas.{attr}")
  _record_by_field_name(core.GridMapping, "jax.pallas.GridMapping",
                        must_be_none=("get_grid_indices", "local_grid_env"))
  # Mosaic TPU's accumulator memory space (0.11+), a ref's memory space.
  acc = vars(_pallas.get("tpu", core)).get("AccMemorySpace")
  if acc is not None:
    _record_by_field_name(acc, "jax.pallas.tpu.AccMemorySpace")
  # Semaphore element types (extended dtypes, format version 5): field-less
  # classes whose instances are all equal.
  for short, attr in (("core", "Semaphore"), ("core", "BarrierSemaphore"),
                      ("tpu", "DMASemaphore")):
    cls = vars(_pallas.get(short, object)).get(attr)
    if cls is not None:
      _singleton_record(cls, f"jax.pallas.{short}.{attr}" if short != "core"
                        else f"jax.pallas.{attr}")
  # The size of a grid dimension that the kernel's caller passes at run
  # time (`grid=(n,)` with a traced `n`): JAX compares it by identity with
  # its one instance, so reading gives back that instance.
  dynamic = vars(core).get("dynamic_grid_dim")
  if dynamic is not None:
    def _decode_dynamic_grid_dim(fields, dynamic=dynamic):
      if fields:
        raise FormatError("jax.pallas.DynamicGridDim has no fields, but the "
                          f"file gives {len(fields)}")
      return dynamic
    registry.register_param_codec(type(dynamic),
                                  name="jax.pallas.DynamicGridDim",
                                  encode=lambda v: (),
                                  decode=_decode_dynamic_grid_dim)
  # Mosaic GPU barriers (extended dtypes, format version 5): frozen
  # dataclasses of plain fields (the number of arrivals, ...).
  for attr in ("BarrierType", "ClusterBarrierType"):
    cls = vars(_pallas.get("gpu", object)).get(attr)
    if cls is not None:
      _record_by_field_name(cls, f"jax.pallas.gpu.{attr}")
  # A scratch ref with transforms (e.g. Mosaic GPU's swizzled SMEM) is a
  # ref aval and the transforms that present it: GridMapping.scratch_avals.
  from jax._src.state import types as state_types  # pylint: disable=g-import-not-at-top
  _record_by_field_name(state_types.TransformedRef,
                        "jax.pallas.TransformedRef",
                        check=_transformed_ref_problem)
  _register_gpu_transforms(_pallas.get("gpu"))
  accumulator = vars(_pallas.get("gpu", object)).get(
      "WGMMAAbstractAccumulatorRef")
  if accumulator is not None:
    _REF_CLASSES[_pallas["gpu"].MemorySpace.REGS] = accumulator
  _register_tmem(_pallas.get("gpu"))
  # Enums of the kernel primitives' params: how Mosaic GPU's TMA copies fill
  # what lies out of bounds, the kinds of Mosaic GPU's and Triton's atomic
  # operations, and how remote DMAs and semaphore signals name a device.
  for module, attr, name in (
      ("jax.experimental.mosaic.gpu.launch_context", "OOBFillMode",
       "jax.pallas.gpu.OOBFillMode"),
      ("jax._src.pallas.mosaic_gpu.primitives", "AtomicOpType",
       "jax.pallas.gpu.AtomicOpType"),
      ("jax._src.pallas.primitives", "DeviceIdType",
       "jax.pallas.DeviceIdType"),
      ("jax._src.pallas.triton.primitives", "AtomicOpType",
       "jax.pallas.triton.AtomicOpType")):
    _register_optional_enum(module, attr, name)
  for short, module in _pallas.items():
    params = vars(module).get("CompilerParams")
    if short != "core" and params is not None:
      _record_by_field_name(params, f"jax.pallas.{short}.CompilerParams")
    for attr, value in sorted(vars(module).items()):
      if (isinstance(value, type) and issubclass(value, enum.Enum)
          and value.__module__ == module.__name__
          and value not in registry.ENUMS.by_key):
        registry.register_enum(value, name=f"jax.pallas.{short}.{attr}")


_register()


def compiler_params_screen(params: dict, drop) -> dict:
  """`pallas_call` params with the compiler settings an untrusted file may
  not choose reset: `drop(param)` records each one dropped."""
  value = params.get("compiler_params")
  if value is None or not dataclasses.is_dataclass(value):
    return params
  resets: dict[str, Any] = {}
  for field in _init_fields(type(value)):
    if field.name in _UNTRUSTED_COMPILER_FIELDS:
      default = _default(field)
      if default is not _MISSING and getattr(value, field.name) != default:
        resets[field.name] = default
  if not resets:
    return params
  for name in resets:
    drop(f"compiler_params.{name}")
  params = dict(params)
  params["compiler_params"] = dataclasses.replace(value, **resets)
  return params


# Mosaic TPU's `flags` are compiler flags; Mosaic GPU's profiler writes to
# `profile_dir` (a path) and `profile_space`.
_UNTRUSTED_COMPILER_FIELDS = frozenset({"flags", "profile_space",
                                        "profile_dir"})
