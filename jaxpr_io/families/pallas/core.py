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
import enum
from typing import Any

from jaxpr_io import compat
from jaxpr_io.compat import pallas as compat_pallas
from jaxpr_io.codec import registry
from jaxpr_io.safety import trust
from jaxpr_io.families.pallas import refs
from jaxpr_io.errors import FormatError, UnsupportedError

_pallas = compat_pallas.pallas_modules()

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


def _transformed_ref_problem(kwargs) -> str | None:
  if not refs.is_ref_class(type(kwargs.get("ref"))):
    return f"ref {kwargs.get('ref')!r:.80} is not a ref aval"
  if type(kwargs.get("transforms", ())) is not tuple:
    return "transforms is not a tuple"
  return None


def _leaves(tree) -> int | None:
  return getattr(tree, "num_leaves", None)


def _is_count(v) -> bool:
  return type(v) is int and v >= 0


def _grid_counts_problem(kwargs) -> str | None:
  """The grid's dimensions and the counts Pallas's batching and lowering
  compute with: `vmapped_dims` index the grid, `num_inputs + num_outputs`
  block mappings."""
  grid = kwargs.get("grid", ())
  if type(grid) is not tuple:
    return f"grid {grid!r:.80} is not a tuple"
  dims = kwargs.get("vmapped_dims", ())
  if (type(dims) is not tuple or len(set(dims)) != len(dims)
      or not all(type(d) is int and 0 <= d < len(grid) for d in dims)):
    return (f"vmapped_dims {dims!r:.80} are not distinct dimensions of the "
            f"{len(grid)}-dimensional grid")
  counts = {f: kwargs.get(f, 0) for f in
            ("num_index_operands", "num_inputs", "num_outputs")}
  if not all(map(_is_count, counts.values())):
    return f"the counts {counts} are not non-negative ints"
  blocks = kwargs.get("block_mappings", ())
  if (type(blocks) is not tuple
      or counts["num_inputs"] + counts["num_outputs"] != len(blocks)):
    return (f"num_inputs {counts['num_inputs']} and num_outputs "
            f"{counts['num_outputs']} do not add up to the "
            f"{len(blocks) if type(blocks) is tuple else '?'} block mappings")
  return None


def _grid_mapping_problem(kwargs) -> str | None:
  """A grid mapping's index maps take the grid indices and scalar operands
  that `index_map_tree` describes and `index_map_avals` types, and each
  block mapping's index map returns what its `index_map_out_tree`
  describes: Pallas's batching and lowering unflatten one with the other
  (a file may share a tree node in a treedef so that they disagree)."""
  problem = _grid_counts_problem(kwargs)
  if problem:
    return problem
  avals = kwargs.get("index_map_avals", ())
  tree = kwargs.get("index_map_tree")
  n_tree = _leaves(tree)
  if type(avals) is not tuple or n_tree != len(avals):
    return (f"index_map_tree has {n_tree} leaves but index_map_avals "
            f"{len(avals) if type(avals) is tuple else avals!r:.80}")
  # Pallas unflattens it into the index maps' (args, kwargs), kwargs empty.
  try:
    args, kw = tree.unflatten(list(avals))
  except (TypeError, ValueError):
    args, kw = None, None
  if type(args) is not tuple or kw != {}:
    return f"index_map_tree {tree} is not (args tuple, {{}})"[:300]
  for i, block in enumerate(kwargs.get("block_mappings", ())):
    index_map = getattr(block, "index_map_jaxpr", None)
    if index_map is None:
      continue
    if len(index_map.in_avals) != len(avals) or not all(
        compat.typematch(a, b) for a, b in zip(index_map.in_avals, avals)):
      return (f"block mapping {i}'s index map takes {index_map.in_avals}, "
              f"not the grid's index_map_avals {avals}")
    n_out = _leaves(getattr(block, "index_map_out_tree", None))
    if n_out is not None and n_out != len(index_map.out_avals):
      return (f"block mapping {i}'s index_map_out_tree has {n_out} leaves "
              f"but its index map returns {len(index_map.out_avals)} values")
  return None


def _register_gpu_transforms(gpu_core) -> None:
  """Mosaic GPU's ref transforms (tiling, swizzling, ...; run_scoped's
  `ref_transforms` holds them) and the layouts that name a register layout
  with arguments: frozen dataclasses of plain fields. PeerMemRef and
  MulticastRef are not frozen (they hold a traced device id) and stay out."""
  if gpu_core is None:
    return
  for attr, cls in sorted(vars(gpu_core).items()):
    if (isinstance(cls, type) and cls.__module__ == gpu_core.__name__
        and dataclasses.is_dataclass(cls)
        and cls.__dataclass_params__.frozen  # type: ignore[attr-defined]
        and (compat.StateTransform in cls.__mro__
             or attr in ("ReducedLayout", "ParameterizedLayout"))):
      _record_by_field_name(cls, f"jax.pallas.gpu.{attr}")


def _register_tmem(gpu_core) -> None:
  """Mosaic GPU's TMEM refs (Blackwell tensor memory): every ref in the
  TMEM memory space is an `AbstractTMEMRef`, whose layout is a
  `tcgen05.TMEMLayout` (a `TiledLayout`: a `Tiling` and the warp, lane and
  vector dimensions, some of them `Replicated`), all frozen dataclasses of
  plain fields."""
  tmem_ref = vars(gpu_core or object).get("AbstractTMEMRef")
  if tmem_ref is None:
    return
  layouts = compat_pallas.mosaic_gpu_tmem_layouts()
  for name, cls in layouts.items():
    _record_by_field_name(cls, f"jax.mosaic_gpu.{name}")
  refs.set_tmem(layouts["TMEMLayout"], tmem_ref)
  _record_by_field_name(refs.TMEMRefAttributes, refs.TMEM_ATTRIBUTES_NAME,
                        check=refs.tmem_attributes_problem)
  refs.add_ref_class(gpu_core.MemorySpace.TMEM, tmem_ref)


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
                        must_be_none=("get_grid_indices", "local_grid_env"),
                        check=_grid_mapping_problem)
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
  _record_by_field_name(compat.TransformedRef,
                        "jax.pallas.TransformedRef",
                        check=_transformed_ref_problem)
  _register_gpu_transforms(_pallas.get("gpu"))
  accumulator = vars(_pallas.get("gpu", object)).get(
      "WGMMAAbstractAccumulatorRef")
  if accumulator is not None:
    refs.add_ref_class(_pallas["gpu"].MemorySpace.REGS, accumulator)
  _register_tmem(_pallas.get("gpu"))
  # Enums of the kernel primitives' params: how Mosaic GPU's TMA copies fill
  # what lies out of bounds, the kinds of Mosaic GPU's and Triton's atomic
  # operations, and how remote DMAs and semaphore signals name a device.
  for name, cls in compat_pallas.optional_enums().items():
    registry.register_enum(cls, name=name)
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


trust.register_family_screen("pallas compiler params", compiler_params_screen)
