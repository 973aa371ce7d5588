"""Kernels over meshes (`mpmd_map`, which `pl.kernel` binds) and the
SparseCore kernel primitives (jax._src.pallas.mosaic.sc_primitives).

`mpmd_map` runs one kernel jaxpr per mesh; its `meshes` param holds Pallas's
mesh dataclasses: SparseCore's `VectorSubcoreMesh` and `ScalarSubcoreMesh`
and (JAX 0.11+) Mosaic TPU's `TensorCoreMesh`. Each is a record stored by
field name, like jaxpr_io/families/pallas/core.py's, with one difference: every field is
stored. The SparseCore meshes' defaults (how many cores and subcores) come
from the TPU the writing process targets, so a default is not a property
of the class, and calling the default factory off a TPU raises.

Building a SparseCore mesh asks JAX for the target TPU's SparseCore (its
`__post_init__` checks the counts against it), so a file holding one loads
on a TPU or under `jax.sharding.use_abstract_mesh` with a TPU
`AbstractDevice`, as tracing the kernel needed; elsewhere loading raises
UnsupportedError saying so.

JAX 0.10's `TensorCoreMesh` holds an array of cores and a list of axis
names instead; it is stored as 0.11+'s record (`compat_pallas.tensorcore_mesh_fields`)
when it is one that `pltpu.create_tensorcore_mesh` makes (cores 0..n-1, one
axis), which is what that record can say; others are refused.

Mosaic GPU's `plgpu.Mesh` and `WarpMesh` (plain fields, constant defaults)
are records like jaxpr_io/families/pallas/core.py's, so `pl.kernel` over a `plgpu.Mesh`
round-trips too. (`plgpu.kernel` wraps that in a `custom_vmap` whose rule
jaxpr_io cannot trace yet.)

`mpmd_map`'s `compiler_params` are screened as `pallas_call`'s
(jaxpr_io/safety/trust.py).
"""

from __future__ import annotations

import dataclasses
import enum
import functools

from jaxpr_io.compat import pallas as compat_pallas
from jaxpr_io.families.pallas import core as pallas
from jaxpr_io.codec import registry
from jaxpr_io.errors import FormatError, UnsupportedError


def _sparse_core_problem() -> str | None:
  """Why this process cannot build a SparseCore mesh now, or None."""
  return compat_pallas.sparse_core_problem()


def _check_field(cls_name: str, name: str, value) -> None:
  if name.endswith("axis_name"):
    if type(value) is not str:
      raise FormatError(f"{cls_name}.{name} {value!r:.80} is not a string")
  elif type(value) is not int or value < 1:
    raise FormatError(f"{cls_name}.{name} {value!r:.80} is not a positive "
                      "int")


def _mesh_record(cls, name: str, needs_sparse_core: bool) -> None:
  """Registers mesh dataclass `cls` (fields: axis names and counts) as a
  record of all its init fields, by name."""
  fields = [f.name for f in dataclasses.fields(cls) if f.init]

  def encode(value) -> tuple:
    return tuple((f, getattr(value, f)) for f in fields)

  def decode(stored):
    kwargs = pallas.field_pairs(name, stored)
    if set(kwargs) != set(fields):
      raise FormatError(
          f"{name}: the file gives fields {sorted(kwargs)}, this JAX's "
          f"{cls.__qualname__} has {fields}; load the file with the JAX "
          "release that wrote it")
    for field, value in kwargs.items():
      _check_field(name, field, value)
    if needs_sparse_core:
      problem = _sparse_core_problem()
      if problem is not None:
        raise UnsupportedError(
            f"{name}: building a SparseCore mesh needs the target TPU "
            f"({problem}); load the file on a TPU or under "
            "jax.sharding.use_abstract_mesh with a TPU AbstractDevice")
    try:
      return cls(**kwargs)
    except (AssertionError, TypeError, ValueError) as e:
      raise FormatError(f"{name} cannot be built from {stored!r:.200}: "
                        f"{type(e).__name__}: {e}") from None

  registry.register_param_codec(cls, name=name, encode=encode, decode=decode)


def _memory_effect(effect, payload):
  if payload is not None:
    raise FormatError("jax.pallas.sparsecore.MemoryEffect has no payload, "
                      f"but the file gives {payload!r:.80}")
  return effect


def _decode_tensorcore_mesh(stored):
  """JAX 0.10's TensorCoreMesh from the record 0.11+ store by field name."""
  if (type(stored) is not tuple or len(stored) != 2
      or stored[0] != ("axis_name", stored[0][1])
      or stored[1] != ("num_cores", stored[1][1])):
    raise FormatError("jax.pallas.tpu.TensorCoreMesh: the fields are not "
                      f"axis_name and num_cores: {stored!r:.200}")
  _check_field("jax.pallas.tpu.TensorCoreMesh", "axis_name", stored[0][1])
  _check_field("jax.pallas.tpu.TensorCoreMesh", "num_cores", stored[1][1])
  return compat_pallas.tensorcore_mesh(stored[0][1], stored[1][1])


def _register() -> None:
  modules = compat_pallas.sparse_core_modules()
  if modules is None:
    return
  sc_core, tpu_core, sc_primitives = modules
  for attr in ("VectorSubcoreMesh", "ScalarSubcoreMesh"):
    _mesh_record(getattr(sc_core, attr), f"jax.pallas.sparsecore.{attr}",
                 needs_sparse_core=True)
  mesh = tpu_core.TensorCoreMesh
  if [f.name for f in dataclasses.fields(mesh)
      if f.init] == ["axis_name", "num_cores"]:  # 0.11+
    _mesh_record(mesh, "jax.pallas.tpu.TensorCoreMesh",
                 needs_sparse_core=False)
  else:  # 0.10: an array of cores and a list of axis names
    registry.register_param_codec(
        mesh, name="jax.pallas.tpu.TensorCoreMesh",
        encode=compat_pallas.tensorcore_mesh_fields, decode=_decode_tensorcore_mesh)
  # Mosaic GPU's meshes (`plgpu.kernel`): frozen dataclasses of plain
  # fields (grid, cluster, names, threads) whose defaults are constants,
  # stored like jaxpr_io/families/pallas/core.py's records.
  gpu_core = (compat_pallas.pallas_modules() or {}).get("gpu")
  for attr in ("Mesh", "WarpMesh"):
    cls = vars(gpu_core or object).get(attr)
    if cls is not None and dataclasses.is_dataclass(cls):
      pallas._record_by_field_name(cls, f"jax.pallas.gpu.{attr}")  # pylint: disable=protected-access
  # `subcore_barrier`'s effect: a field-less class of which JAX uses one
  # instance (effects compare by identity), which reading returns.
  memory_effect = getattr(sc_primitives, "_memory_effect", None)
  if memory_effect is not None:
    registry.register_effect_codec(
        type(memory_effect), name="jax.pallas.sparsecore.MemoryEffect",
        encode=lambda effect: None,
        decode=functools.partial(_memory_effect, memory_effect))
  # Enums of the SparseCore primitives' params (PackFormat, ...).
  for module in (sc_core, sc_primitives):
    for attr, value in sorted(vars(module).items()):
      if (isinstance(value, type) and issubclass(value, enum.Enum)
          and value.__module__ == module.__name__
          and value not in registry.ENUMS.by_key):
        registry.register_enum(value, name=f"jax.pallas.sparsecore.{attr}")


if compat_pallas.pallas_modules() is not None:
  _register()
