"""Record codecs for JAX's structured param values that are not NamedTuples.

Each codec is an `encode_X`/`decode_X` pair registered under a stable name.
The fields each codec writes are listed in its docstring; together with
`compat.NAMED_TUPLES` this is the list of record types of format version 1.

Devices and concrete meshes are machine-bound. They are stored by platform
and device id, and re-bound on load to the devices of the loading process:
the device with the same platform and id if it exists, else the process's
devices in order. A program that needs more devices than the loading process
has fails with a FormatError.

Decoders validate every field before it reaches a JAX or XLA constructor:
some of these (device lists, partition canonicalization) are C++ that aborts
the process on input JAX's own tracing never produces (a mesh without
devices, a partition that is not a string). A bad field is a FormatError
naming the record type and the field.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import symbolic
from jaxpr_io.errors import FormatError, UnsupportedError
from jaxpr_io.codec.registry import register_param_codec

# Bounds on what a file may ask for. A concrete mesh needs that many devices
# in the loading process; an abstract mesh's size must fit XLA's int32
# device counts.
MAX_MESH_DEVICES = 1 << 20
MAX_ABSTRACT_MESH_SIZE = (1 << 31) - 1

_MESH = "jax.sharding.Mesh"
_ABSTRACT_MESH = "jax.sharding.AbstractMesh"
_PARTITION_SPEC = "jax.sharding.PartitionSpec"
_NAMED_SHARDING = "jax.sharding.NamedSharding"


def _fields(record: str, fields, names: tuple[str, ...]) -> tuple:
  """`fields`, which must be a tuple of len(names) values."""
  if type(fields) is not tuple or len(fields) != len(names):
    raise FormatError(f"{record}: expected the fields ({', '.join(names)}), "
                      f"got {fields!r}"[:500])
  return fields


def _is_int(v) -> bool:
  return type(v) is int   # never a bool


def _check_axes(record: str, axis_sizes, axis_names, axis_types,
                max_size: int) -> int:
  """Validates a mesh's axes; returns the mesh's size (the product)."""
  if type(axis_sizes) is not tuple or not all(
      _is_int(s) and s >= 1 for s in axis_sizes):
    raise FormatError(f"{record}: axis_sizes {axis_sizes!r} is not a tuple "
                      "of ints >= 1"[:500])
  size = 1
  for s in axis_sizes:
    size *= s
    if size > max_size:
      raise FormatError(f"{record}: axis_sizes {axis_sizes!r} make a mesh of "
                        f"over {max_size:,} devices")
  if (type(axis_names) is not tuple
      or not all(type(n) is str for n in axis_names)):
    raise FormatError(f"{record}: axis_names {axis_names!r} is not a tuple "
                      "of strings"[:500])
  if len(set(axis_names)) != len(axis_names):
    raise FormatError(f"{record}: axis_names {axis_names!r} repeat a name")
  if len(axis_names) != len(axis_sizes):
    raise FormatError(f"{record}: {len(axis_sizes)} axis_sizes for "
                      f"{len(axis_names)} axis_names")
  if (type(axis_types) is not tuple
      or not all(type(t) is compat.AxisType for t in axis_types)):
    raise FormatError(f"{record}: axis_types {axis_types!r} is not a tuple "
                      "of jax.sharding.AxisType members"[:500])
  if len(axis_types) != len(axis_names):
    raise FormatError(f"{record}: {len(axis_types)} axis_types for "
                      f"{len(axis_names)} axis_names")
  return size


def _check_device_ids(record: str, platform, ids) -> None:
  if platform is not None and type(platform) is not str:
    raise FormatError(f"{record}: platform {platform!r} is not a string")
  if type(ids) is not tuple or not all(_is_int(i) and i >= 0 for i in ids):
    raise FormatError(f"{record}: device ids {ids!r} are not a tuple of "
                      "non-negative ints"[:500])
  if len(set(ids)) != len(ids):
    raise FormatError(f"{record}: device ids {ids!r} repeat"[:500])


def _spec_axes(partitions) -> list:
  """The axis names a PartitionSpec's partitions use, in order."""
  axes = []
  for p in partitions:
    if type(p) is tuple:
      axes.extend(p)
    elif type(p) is str:
      axes.append(p)
  return axes


def encode_prng_impl(impl) -> tuple:
  """Fields: (name,). The implementation must be in JAX's PRNG registry."""
  if compat.prng_impls.get(impl.name) is not impl:
    raise UnsupportedError(
        f"PRNG implementation {impl.name!r} is not in JAX's PRNG registry; "
        "register it with jax._src.prng.register_prng before saving")
  return (impl.name,)


def decode_prng_impl(fields):
  (name,) = _fields("jax.random.PRNGImpl", fields, ("name",))
  if type(name) is not str:
    raise FormatError(f"jax.random.PRNGImpl: name {name!r} is not a string")
  impl = compat.prng_impls.get(name)
  if impl is None:
    raise FormatError(f"PRNG implementation {name!r} is not registered in "
                      f"this process (known: {sorted(compat.prng_impls)})")
  return impl


def encode_unspecified(value) -> tuple:
  """Fields: (). The `UNSPECIFIED` sharding singleton."""
  del value
  return ()


def decode_unspecified(fields):
  del fields
  return compat.UNSPECIFIED


def encode_unconstrained(value) -> tuple:
  """Fields: (). `PartitionSpec.UNCONSTRAINED`."""
  del value
  return ()


def decode_unconstrained(fields):
  del fields
  return compat.PartitionSpec.UNCONSTRAINED


def _unreduced_kind_field(value) -> tuple:
  """() for unreduced axes that sum (JAX's default and the only kind before
  JAX 0.12, so such records keep their three fields and their bytes), else
  (the `UnreducedKind` member's name,): "max" or "min"."""
  kind = getattr(value, "unreduced_kind", None)
  if kind is None or kind is compat.UnreducedKind.sum:
    return ()
  return (kind.name,)


def _decode_unreduced_kind(record: str, fields: tuple, unreduced) -> dict:
  """{} or {"unreduced_kind": member} from the optional last field."""
  if len(fields) == 0:
    return {}
  name, = fields
  if type(name) is not str:
    raise FormatError(f"{record}: unreduced_kind {name!r} is not a "
                      "string"[:500])
  if compat.UnreducedKind is None:
    raise UnsupportedError(
        f"{record}: unreduced axes that combine by {name[:100]!r} need JAX "
        f"0.12 or later (this is JAX {jax.__version__}); load the file there")
  if name == "sum" or name not in compat.UnreducedKind.__members__:
    raise FormatError(f"{record}: unreduced_kind {name!r} is not one of "
                      f"{sorted(set(compat.UnreducedKind.__members__) - {'sum'})}"
                      " (sum is stored by leaving the field out)"[:500])
  if not unreduced:
    raise FormatError(f"{record}: unreduced_kind {name!r} without unreduced "
                      "axes"[:500])
  return {"unreduced_kind": compat.UnreducedKind[name]}


def _optional_last(record: str, fields, names: tuple[str, ...]) -> tuple:
  """`fields` with len(names) or len(names) + 1 values (the last one the
  optional unreduced kind): (the required ones, the optional ones)."""
  if type(fields) is tuple and len(fields) == len(names) + 1:
    return fields[:-1], fields[-1:]
  return _fields(record, fields, names), ()


def encode_partition_spec(spec) -> tuple:
  """Fields: (partitions: tuple, unreduced: frozenset, reduced: frozenset)
  and, for unreduced axes that do not sum (JAX 0.12), unreduced_kind: str
  ("max" or "min")."""
  return (tuple(spec.partitions), spec.unreduced, spec.reduced,
          *_unreduced_kind_field(spec))


def decode_partition_spec(fields):
  fields, kind = _optional_last(_PARTITION_SPEC, fields,
                                ("partitions", "unreduced", "reduced"))
  partitions, unreduced, reduced = fields
  if type(partitions) is not tuple or not all(
      p is None or type(p) is str or p is compat.PartitionSpec.UNCONSTRAINED
      or (type(p) is tuple and all(type(a) is str for a in p))
      for p in partitions):
    raise FormatError(
        f"{_PARTITION_SPEC}: partitions {partitions!r} is not a tuple whose "
        "entries are None, UNCONSTRAINED, an axis name or a tuple of axis "
        "names"[:500])
  axes = _spec_axes(partitions)
  seen: set[str] = set()
  repeated = sorted({a for a in axes if a in seen or seen.add(a)})
  if repeated:
    # JAX raises its DuplicateSpecError for this only when a NamedSharding is
    # built from the spec, and shard_map's specs are never one.
    raise FormatError(
        f"{_PARTITION_SPEC}: partitions {partitions!r} use mesh axis "
        f"{', '.join(map(repr, repeated))} more than once (JAX's "
        "DuplicateSpecError)"[:500])
  for name, value in (("unreduced", unreduced), ("reduced", reduced)):
    if type(value) is not frozenset or not all(type(a) is str
                                               for a in value):
      raise FormatError(f"{_PARTITION_SPEC}: {name} {value!r} is not a "
                        "frozenset of axis names"[:500])
    if value & seen:
      raise FormatError(f"{_PARTITION_SPEC}: {name} axes {sorted(value)!r} "
                        f"overlap the partitions {partitions!r}"[:500])
  if unreduced & reduced:
    raise FormatError(f"{_PARTITION_SPEC}: unreduced and reduced axes "
                      f"overlap: {sorted(unreduced & reduced)!r}")
  return compat.PartitionSpec(
      *partitions, unreduced=unreduced, reduced=reduced,
      **_decode_unreduced_kind(_PARTITION_SPEC, kind, unreduced))


def encode_abstract_device(device) -> tuple:
  """Fields: (device_kind: str, num_cores: int | None, platform: str)."""
  return (device.device_kind, device.num_cores, device.platform)


def decode_abstract_device(fields):
  record = "jax.sharding.AbstractDevice"
  device_kind, num_cores, platform = _fields(
      record, fields, ("device_kind", "num_cores", "platform"))
  if type(device_kind) is not str or type(platform) is not str:
    raise FormatError(f"{record}: device_kind {device_kind!r} or platform "
                      f"{platform!r} is not a string"[:500])
  if num_cores is not None and not (_is_int(num_cores) and num_cores >= 0):
    raise FormatError(f"{record}: num_cores {num_cores!r} is not None or an "
                      "int >= 0")
  return compat.AbstractDevice(device_kind=device_kind, num_cores=num_cores,
                               platform=platform)


def encode_abstract_mesh(mesh) -> tuple:
  """Fields: (axis_sizes, axis_names, axis_types, abstract_device | None)."""
  return (tuple(mesh.axis_sizes), tuple(mesh.axis_names),
          tuple(mesh.axis_types), mesh.abstract_device)


def decode_abstract_mesh(fields):
  axis_sizes, axis_names, axis_types, abstract_device = _fields(
      _ABSTRACT_MESH, fields,
      ("axis_sizes", "axis_names", "axis_types", "abstract_device"))
  _check_axes(_ABSTRACT_MESH, axis_sizes, axis_names, axis_types,
              MAX_ABSTRACT_MESH_SIZE)
  if (abstract_device is not None
      and type(abstract_device) is not compat.AbstractDevice):
    raise FormatError(f"{_ABSTRACT_MESH}: abstract_device "
                      f"{abstract_device!r} is not None or an "
                      "AbstractDevice"[:500])
  return compat.AbstractMesh(axis_sizes, axis_names, axis_types,
                             abstract_device=abstract_device)


def _local_devices(platform: str | None, ids: tuple[int, ...]) -> list:
  """Devices of this process for stored (platform, ids), re-bound if needed.

  The same ids if they all exist here. Otherwise id `i` maps to local device
  `i mod n` (so a stored id gets the same device in every record of the
  file), falling back to rank order when that collides; either way a mesh
  keeps its device order.
  """
  if platform is not None and type(platform) is not str:
    raise FormatError(f"device platform {platform!r} is not a string")
  if any(type(i) is not int or i < 0 for i in ids):
    raise FormatError(f"device ids {ids!r} are not non-negative ints")
  if len(set(ids)) != len(ids):
    raise FormatError(f"device ids {ids!r} repeat")
  try:
    devices = jax.devices(platform) if platform else jax.devices()
  except RuntimeError:
    devices = jax.devices()
  if len(ids) > len(devices):
    raise FormatError(
        f"the program needs {len(ids)} devices but this process has "
        f"{len(devices)} ({devices[0].platform}); on a CPU, set "
        f"XLA_FLAGS=--xla_force_host_platform_device_count={len(ids)}")
  by_id = {d.id: d for d in devices}
  if all(i in by_id for i in ids):
    return [by_id[i] for i in ids]
  local = sorted(devices, key=lambda d: d.id)
  picked = [local[i % len(local)] for i in ids]
  if len({d.id for d in picked}) != len(picked):
    rank = {i: k for k, i in enumerate(sorted(ids))}
    picked = [local[rank[i]] for i in ids]
  return picked


def encode_mesh(mesh) -> tuple:
  """Fields: (axis_sizes, axis_names, axis_types, platform | None,
  device_ids: tuple[int] in the mesh's row-major device order)."""
  if not mesh.axis_names:  # the empty mesh has no devices
    return ((), (), (), None, ())
  devices = mesh.devices.reshape(-1)
  platform = devices[0].platform
  return (tuple(mesh.axis_sizes), tuple(mesh.axis_names),
          tuple(mesh.axis_types), platform, tuple(d.id for d in devices))


def decode_mesh(fields):
  axis_sizes, axis_names, axis_types, platform, ids = _fields(
      _MESH, fields,
      ("axis_sizes", "axis_names", "axis_types", "platform", "device_ids"))
  size = _check_axes(_MESH, axis_sizes, axis_names, axis_types,
                     MAX_MESH_DEVICES)
  _check_device_ids(_MESH, platform, ids)
  if not axis_names:
    if ids or platform is not None:
      raise FormatError(f"{_MESH}: the empty mesh has device ids {ids!r} "
                        f"on platform {platform!r}"[:500])
    return compat.empty_concrete_mesh
  if len(ids) != size:
    raise FormatError(f"{_MESH}: axis_sizes {axis_sizes!r} make a mesh of "
                      f"{size} devices but it has {len(ids)} device ids")
  devices = np.array(_local_devices(platform, ids), dtype=object)
  return compat.Mesh(devices.reshape(axis_sizes), axis_names,
                     axis_types=axis_types)


def encode_named_sharding(sharding) -> tuple:
  """Fields: (mesh: Mesh | AbstractMesh, spec: PartitionSpec,
  memory_kind: str | None)."""
  return (sharding.mesh, sharding.spec, sharding.memory_kind)


def decode_named_sharding(fields):
  mesh, spec, memory_kind = _fields(_NAMED_SHARDING, fields,
                                    ("mesh", "spec", "memory_kind"))
  if type(mesh) not in (compat.Mesh, compat.AbstractMesh):
    raise FormatError(f"{_NAMED_SHARDING}: mesh {mesh!r} is not a Mesh or "
                      "an AbstractMesh"[:500])
  if type(mesh) is compat.Mesh and not mesh.axis_names:
    # The empty concrete mesh has no devices: JAX's C++ device list aborts
    # the process on it.
    raise FormatError(f"{_NAMED_SHARDING}: the mesh is the empty concrete "
                      "mesh, which has no devices")
  if type(spec) is not compat.PartitionSpec:
    raise FormatError(f"{_NAMED_SHARDING}: spec {spec!r} is not a "
                      "PartitionSpec"[:500])
  if memory_kind is not None and type(memory_kind) is not str:
    raise FormatError(f"{_NAMED_SHARDING}: memory_kind {memory_kind!r} is "
                      "not None or a string"[:500])
  unknown = sorted(
      {*_spec_axes(spec.partitions), *spec.unreduced, *spec.reduced}
      - set(mesh.axis_names))
  if unknown:
    raise FormatError(f"{_NAMED_SHARDING}: spec {spec!r} names axes "
                      f"{unknown!r} that its mesh (axes "
                      f"{tuple(mesh.axis_names)!r}) does not have"[:500])
  return compat.NamedSharding(mesh, spec, memory_kind=memory_kind)


def encode_device(device) -> tuple:
  """Fields: (platform: str, id: int)."""
  return (device.platform, device.id)


def decode_device(fields):
  platform, device_id = _fields("jax.Device", fields, ("platform", "id"))
  if type(platform) is not str:
    raise FormatError(f"jax.Device: platform {platform!r} is not a string")
  _check_device_ids("jax.Device", platform, (device_id,))
  return _local_devices(platform, (device_id,))[0]


def encode_manual_axis_type(mat) -> tuple:
  """Fields: (varying, unreduced, reduced), each a frozenset of axis names,
  and, for unreduced axes that do not sum (JAX 0.12), unreduced_kind: str
  ("max" or "min")."""
  return (mat.varying, mat.unreduced, mat.reduced,
          *_unreduced_kind_field(mat))


def decode_manual_axis_type(fields):
  fields, kind = _optional_last("jax.ManualAxisType", fields,
                                ("varying", "unreduced", "reduced"))
  varying, unreduced, reduced = fields
  for name, value in (("varying", varying), ("unreduced", unreduced),
                      ("reduced", reduced)):
    if type(value) is not frozenset or not all(type(a) is str
                                               for a in value):
      raise FormatError(f"jax.ManualAxisType: {name} {value!r} is not a "
                        "frozenset of axis names"[:500])
  return compat.ManualAxisType(
      varying=varying, unreduced=unreduced, reduced=reduced,
      **_decode_unreduced_kind("jax.ManualAxisType", kind, unreduced))


def _int_tuple(record: str, name: str, value) -> tuple:
  if type(value) is not tuple or not all(_is_int(v) and v >= 0 for v in value):
    raise FormatError(f"{record}: {name} {value!r} is not a tuple of "
                      "dimension numbers"[:500])
  return value


def encode_ragged_dot_dimension_numbers(dn) -> tuple:
  """Fields: (dot_dimension_numbers: ((lhs_contracting, rhs_contracting),
  (lhs_batch, rhs_batch)), lhs_ragged_dimensions, rhs_group_dimensions),
  each innermost entry a tuple of dimension numbers."""
  return (dn.dot_dimension_numbers, dn.lhs_ragged_dimensions,
          dn.rhs_group_dimensions)


def decode_ragged_dot_dimension_numbers(fields):
  record = "jax.lax.RaggedDotDimensionNumbers"
  dot, ragged, group = _fields(record, fields, (
      "dot_dimension_numbers", "lhs_ragged_dimensions",
      "rhs_group_dimensions"))
  if type(dot) is not tuple or len(dot) != 2 or not all(
      type(pair) is tuple and len(pair) == 2 for pair in dot):
    raise FormatError(f"{record}: dot_dimension_numbers {dot!r} is not "
                      "((contracting, contracting), (batch, batch))"[:500])
  for pair in dot:
    for dims in pair:
      _int_tuple(record, "dot_dimension_numbers", dims)
  return compat.RaggedDotDimensionNumbers(
      dot, _int_tuple(record, "lhs_ragged_dimensions", ragged),
      _int_tuple(record, "rhs_group_dimensions", group))


def encode_hashable_array(value) -> tuple:
  """Fields: (val: numpy array). JAX's read-only array wrapper for array
  attributes (`lax.composite`)."""
  return (value.val,)


def decode_hashable_array(fields):
  (val,) = _fields("jax.HashableArray", fields, ("val",))
  if type(val) is not np.ndarray:
    raise FormatError(f"jax.HashableArray: val is a {type(val).__name__}, "
                      "not a numpy array")
  return compat.HashableArray(val)


def encode_frozen_dict(value) -> tuple:
  """Fields: the (key, value) items, in the dict's order. JAX's immutable
  dict (Pallas compiler flags)."""
  return tuple(value.items())


def decode_frozen_dict(fields):
  if type(fields) is not tuple or not all(
      type(item) is tuple and len(item) == 2 for item in fields):
    raise FormatError("jax.FrozenDict: the fields are not (key, value) "
                      "items")
  items = dict(fields)
  if len(items) != len(fields):
    raise FormatError("jax.FrozenDict: a key is given twice")
  return compat.FrozenDict(items)


def encode_scalar_type(value) -> tuple:
  """Fields: (dtype). A `jax.numpy` scalar type such as `jnp.bfloat16`
  (Mosaic TPU's `stochastic_round` target)."""
  return (np.dtype(value.dtype),)


def decode_scalar_type(fields):
  (dtype,) = _fields("jax.numpy.scalar_type", fields, ("dtype",))
  scalar_type = compat.SCALAR_TYPES.get(dtype) if isinstance(
      dtype, np.dtype) else None
  if scalar_type is None:
    raise FormatError(f"jax.numpy.scalar_type: {dtype!r:.80} is not the "
                      "dtype of a jax.numpy scalar type")
  return scalar_type


def encode_list(value) -> tuple:
  """A Python list: its items (static pytree data holds lists, e.g.
  Equinox's `Static` wrapper and closure-converted functions)."""
  return tuple(value)


def decode_list(fields):
  if type(fields) is not tuple:
    raise FormatError("builtins.list: the fields are not a tuple")
  return list(fields)


def encode_shape_dtype_struct(value) -> tuple:
  """(shape, dtype, weak_type) of a `jax.ShapeDtypeStruct`, then its memory
  space (a `jax.MemorySpace`, as 0.12 sets under tracing) when it has one.
  One with a sharding, a layout, a manual axis type or a ref flag has more
  than the record holds: refused."""
  extra = [name for name, default in _SDS_DEFAULTS
           if getattr(value, name, default) is not default
           and getattr(value, name, default) != default]
  if extra:
    raise UnsupportedError(
        f"the jax.ShapeDtypeStruct {value} sets {', '.join(extra)}, which "
        "cannot be stored; only its shape, dtype and weak_type can")
  fields = (tuple(value.shape), value.dtype, bool(value.weak_type))
  memory_space = getattr(value, "_memory_space", None)
  if memory_space is None:
    return fields
  if type(memory_space) is not compat.MemorySpace:
    raise UnsupportedError(f"the jax.ShapeDtypeStruct {value} has memory "
                           f"space {memory_space!r}, which cannot be stored")
  return fields + (memory_space,)


# Fields of a ShapeDtypeStruct the record leaves out, with their defaults
# (JAX releases without a field report the default).
_SDS_DEFAULTS = (("sharding", None), ("_dll", None), ("manual_axis_type", None),
                 ("is_ref", False))
_SDS_FIELDS = ("shape", "dtype", "weak_type")


def decode_shape_dtype_struct(fields):
  extra = {}
  if type(fields) is tuple and len(fields) == 4:
    if type(fields[3]) is not compat.MemorySpace:
      raise FormatError("jax.ShapeDtypeStruct: the memory space is not a "
                        "jax.MemorySpace")
    if "_memory_space" not in getattr(jax.ShapeDtypeStruct, "__slots__", ()):
      raise FormatError("jax.ShapeDtypeStruct: this JAX's has no memory "
                        "space; load the file with the JAX that wrote it")
    extra["_memory_space"] = fields[3]
    fields = fields[:3]
  shape, dtype, weak_type = _fields("jax.ShapeDtypeStruct", fields,
                                    _SDS_FIELDS)
  if type(shape) is not tuple or not all(
      (_is_int(d) and d >= 0) or type(d) is symbolic.DimExpr
      for d in shape):
    raise FormatError(f"jax.ShapeDtypeStruct: shape {shape!r:.200} is not a "
                      "tuple of dimensions")
  if not isinstance(dtype, np.dtype) or type(weak_type) is not bool:
    raise FormatError("jax.ShapeDtypeStruct: dtype or weak_type has the "
                      "wrong type")
  return jax.ShapeDtypeStruct(shape, dtype, weak_type=weak_type, **extra)


_PRIMAL_TANGENT_FIELDS = ("primal_dtype", "tangent_dtype", "name")


def encode_primal_tangent_dtype(dtype) -> tuple:
  return (dtype.primal_dtype, dtype.tangent_dtype, dtype.name)


def decode_primal_tangent_dtype(fields):
  # jax.experimental.primal_tangent_dtype's extended dtype: the one that
  # convert_element_type converts to and from (to_edtype, from_edtype).
  primal, tangent, name = _fields("jax.PrimalTangentDType", fields,
                                  _PRIMAL_TANGENT_FIELDS)
  if not (isinstance(primal, np.dtype) and isinstance(tangent, np.dtype)
          and type(name) is str):
    raise FormatError("jax.PrimalTangentDType: expected two numpy dtypes "
                      "and a name")
  return compat.PrimalTangentDType(primal, tangent, name)


_DEBUG_INFO_FIELDS = ("traced_for", "func_src_info", "arg_names",
                      "result_paths")
# compat.INITIAL_RESULT_PATHS (result paths not computed yet) is stored as
# this string.
_INITIAL = "initial"


def encode_debug_info(info) -> tuple:
  """A `DebugInfo` as a param (JAX 0.10's `core_map`): what a jaxpr's
  `debug_info` message holds, with result paths resolved (JAX computes them
  lazily)."""
  paths = info.result_paths
  if paths is compat.INITIAL_RESULT_PATHS:
    paths = _INITIAL  # not computed yet (core_map's, always)
  elif paths is not None and not isinstance(paths, tuple):
    paths = tuple(paths())
  return (info.traced_for, info.func_src_info,
          None if info.arg_names is None else tuple(info.arg_names), paths)


def decode_debug_info(fields):
  traced_for, src, arg_names, paths = _fields("jax.DebugInfo", fields,
                                              _DEBUG_INFO_FIELDS)
  def strings(v, optional_items):
    return type(v) is tuple and all(
        type(x) is str or (optional_items and x is None) for x in v)
  if not (type(traced_for) is str and (src is None or type(src) is str)
          and (arg_names is None or strings(arg_names, True))
          and (paths is None or strings(paths, False) or (
              paths == _INITIAL and compat.INITIAL_RESULT_PATHS is not None))):
    raise FormatError("jax.DebugInfo: expected (str, str or None, tuple of "
                      "str or None, tuple of str or None)")
  if paths == _INITIAL:
    paths = compat.INITIAL_RESULT_PATHS
  return compat.DebugInfo(traced_for, src, arg_names, paths)


_CODECS = (
    (compat.PRNGImpl, "jax.random.PRNGImpl", encode_prng_impl,
     decode_prng_impl),
    (compat.UnspecifiedValue, "jax.sharding.UNSPECIFIED", encode_unspecified,
     decode_unspecified),
    (compat.UnconstrainedSingleton, "jax.sharding.PartitionSpec.UNCONSTRAINED",
     encode_unconstrained, decode_unconstrained),
    (compat.PartitionSpec, "jax.sharding.PartitionSpec",
     encode_partition_spec, decode_partition_spec),
    (compat.AbstractDevice, "jax.sharding.AbstractDevice",
     encode_abstract_device, decode_abstract_device),
    (compat.AbstractMesh, "jax.sharding.AbstractMesh", encode_abstract_mesh,
     decode_abstract_mesh),
    (compat.Mesh, "jax.sharding.Mesh", encode_mesh, decode_mesh),
    (compat.NamedSharding, "jax.sharding.NamedSharding",
     encode_named_sharding, decode_named_sharding),
    (compat.ManualAxisType, "jax.ManualAxisType", encode_manual_axis_type,
     decode_manual_axis_type),
    (compat.Device, "jax.Device", encode_device, decode_device),
    # Added in format version 4.
    (compat.RaggedDotDimensionNumbers, "jax.lax.RaggedDotDimensionNumbers",
     encode_ragged_dot_dimension_numbers, decode_ragged_dot_dimension_numbers),
    (compat.HashableArray, "jax.HashableArray", encode_hashable_array,
     decode_hashable_array),
    (compat.FrozenDict, "jax.FrozenDict", encode_frozen_dict,
     decode_frozen_dict),
    (compat.ScalarMeta, "jax.numpy.scalar_type", encode_scalar_type,
     decode_scalar_type),
    (list, "builtins.list", encode_list, decode_list),
    (jax.ShapeDtypeStruct, "jax.ShapeDtypeStruct", encode_shape_dtype_struct,
     decode_shape_dtype_struct),
    (compat.PrimalTangentDType, "jax.PrimalTangentDType",
     encode_primal_tangent_dtype, decode_primal_tangent_dtype),
    (compat.DebugInfo, "jax.DebugInfo", encode_debug_info, decode_debug_info),
)
for _cls, _name, _encode, _decode in _CODECS:
  register_param_codec(_cls, name=_name, encode=_encode, decode=_decode)
