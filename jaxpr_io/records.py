"""Record codecs for JAX's structured param values that are not NamedTuples.

Each codec is an `encode_X`/`decode_X` pair registered under a stable name.
The fields each codec writes are listed in its docstring; together with
`compat.NAMED_TUPLES` this is the list of record types of format version 1.

Devices and concrete meshes are machine-bound. They are stored by platform
and device id, and re-bound on load to the devices of the loading process:
the device with the same platform and id if it exists, else the process's
devices in order. A program that needs more devices than the loading process
has fails with a FormatError.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxpr_io import compat
from jaxpr_io.errors import FormatError, UnsupportedError
from jaxpr_io.registry import register_param_codec


def encode_prng_impl(impl) -> tuple:
  """Fields: (name,). The implementation must be in JAX's PRNG registry."""
  if compat.prng_impls.get(impl.name) is not impl:
    raise UnsupportedError(
        f"PRNG implementation {impl.name!r} is not in JAX's PRNG registry; "
        "register it with jax._src.prng.register_prng before saving")
  return (impl.name,)


def decode_prng_impl(fields):
  (name,) = fields
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


def encode_partition_spec(spec) -> tuple:
  """Fields: (partitions: tuple, unreduced: frozenset, reduced: frozenset)."""
  return (tuple(spec.partitions), spec.unreduced, spec.reduced)


def decode_partition_spec(fields):
  partitions, unreduced, reduced = fields
  return compat.PartitionSpec(*partitions, unreduced=unreduced,
                              reduced=reduced)


def encode_abstract_device(device) -> tuple:
  """Fields: (device_kind: str, num_cores: int | None, platform: str)."""
  return (device.device_kind, device.num_cores, device.platform)


def decode_abstract_device(fields):
  device_kind, num_cores, platform = fields
  return compat.AbstractDevice(device_kind=device_kind, num_cores=num_cores,
                               platform=platform)


def encode_abstract_mesh(mesh) -> tuple:
  """Fields: (axis_sizes, axis_names, axis_types, abstract_device | None)."""
  return (tuple(mesh.axis_sizes), tuple(mesh.axis_names),
          tuple(mesh.axis_types), mesh.abstract_device)


def decode_abstract_mesh(fields):
  axis_sizes, axis_names, axis_types, abstract_device = fields
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
  axis_sizes, axis_names, axis_types, platform, ids = fields
  if not axis_names:
    return compat.empty_concrete_mesh
  devices = np.array(_local_devices(platform, ids), dtype=object)
  return compat.Mesh(devices.reshape(axis_sizes), axis_names,
                     axis_types=axis_types)


def encode_named_sharding(sharding) -> tuple:
  """Fields: (mesh: Mesh | AbstractMesh, spec: PartitionSpec,
  memory_kind: str | None)."""
  return (sharding.mesh, sharding.spec, sharding.memory_kind)


def decode_named_sharding(fields):
  mesh, spec, memory_kind = fields
  return compat.NamedSharding(mesh, spec, memory_kind=memory_kind)


def encode_device(device) -> tuple:
  """Fields: (platform: str, id: int)."""
  return (device.platform, device.id)


def decode_device(fields):
  platform, device_id = fields
  return _local_devices(platform, (device_id,))[0]


def encode_manual_axis_type(mat) -> tuple:
  """Fields: (varying, unreduced, reduced), each a frozenset of axis names."""
  return (mat.varying, mat.unreduced, mat.reduced)


def decode_manual_axis_type(fields):
  varying, unreduced, reduced = fields
  return compat.ManualAxisType(varying=varying, unreduced=unreduced,
                               reduced=reduced)


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
)
for _cls, _name, _encode, _decode in _CODECS:
  register_param_codec(_cls, name=_name, encode=_encode, decode=_decode)
