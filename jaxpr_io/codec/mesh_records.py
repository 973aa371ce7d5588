"""Record codecs of shardings: partition specs, devices, meshes (abstract
and concrete), named shardings and manual axis types (format version 1).

Devices and concrete meshes are machine-bound. They are stored by platform
and device id, and re-bound on load to the devices of the loading process:
the device with the same platform and id if it exists, else the process's
devices in order. A program that needs more devices than the loading process
has fails with a FormatError. Every field is validated before it reaches a
JAX or XLA constructor (jaxpr_io/codec/records.py says why).
"""

from __future__ import annotations

import jax
import numpy as np

from jaxpr_io import compat
from jaxpr_io.codec.registry import register_param_codec
from jaxpr_io.codec.record_fields import fields as _fields, is_int as _is_int
from jaxpr_io.errors import FormatError, UnsupportedError

# Bounds on what a file may ask for. A concrete mesh needs that many devices
# in the loading process; an abstract mesh's size must fit XLA's int32
# device counts.
MAX_MESH_DEVICES = 1 << 20
MAX_ABSTRACT_MESH_SIZE = (1 << 31) - 1

_MESH = "jax.sharding.Mesh"
_ABSTRACT_MESH = "jax.sharding.AbstractMesh"
_PARTITION_SPEC = "jax.sharding.PartitionSpec"
_NAMED_SHARDING = "jax.sharding.NamedSharding"


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


_CODECS = (
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
)
for _cls, _name, _encode, _decode in _CODECS:
  register_param_codec(_cls, name=_name, encode=_encode, decode=_decode)
