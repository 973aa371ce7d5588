"""JAX-release-specific sharding and layout internals used by
jaxpr_io/families/sharding.py.

The rest of the sharding vocabulary (meshes, `NamedSharding`,
`PartitionSpec`, `AxisType`, devices) is in `jaxpr_io.compat`; this module
adds the classes that only parallel programs hold in their params: single
device shardings and the layout classes of `jax.jit`'s `in_layouts`/
`out_layouts`, `sharding_constraint`'s `layout` and `device_put`'s
`devices`/`srcs`.

Parallelism itself needs nothing here: in this JAX release `jax.pmap` traces
to `jit` around a `shard_map` equation (there is no `xla_pmap` primitive),
and the `shard_map` primitive's params (`mesh`, `in_specs`, `out_specs`,
`jaxpr`, `check_vma`, `newly_manual_axes`) and the collectives' params are
all plain data or types `jaxpr_io.compat` already names.
"""

from __future__ import annotations

from jax._src import layout as layout_lib
from jax._src import sharding_impls

SingleDeviceSharding = sharding_impls.SingleDeviceSharding

# `Layout.AUTO`: let the compiler choose the layout.
Layout = layout_lib.Layout
AutoLayoutSingleton = layout_lib.AutoLayoutSingleton
AUTO_LAYOUT = layout_lib.AutoLayout
# A (layout, sharding) pair, as `device_put` and `jax.jit` accept it.
Format = layout_lib.Format


def varying_axes(aval) -> frozenset:
  """The manual mesh axes a value inside `shard_map` varies over (its vma;
  `ManualAxisType.varying` in JAX 0.10 to 0.12)."""
  mat = getattr(aval, "mat", None)
  return getattr(mat, "varying", frozenset())


def spec_axes(spec) -> frozenset:
  """The mesh axes a `PartitionSpec` names."""
  return frozenset(p for s in spec if s is not None
                   for p in (s if isinstance(s, tuple) else (s,)))
