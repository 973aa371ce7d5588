"""Mosaic GPU kernel primitives (jax._src.pallas.mosaic_gpu) in
`pallas_call` kernels written with `jax.experimental.pallas.mosaic_gpu`
(plgpu) for an H100: traced here (no GPU) under an abstract CUDA mesh, they
round-trip exactly; under JAX 0.10, which lowers a `pallas_call` with
Mosaic GPU compiler params, the loaded program lowers for `cuda` from its
file as the original does (one Mosaic GPU kernel; the Mosaic GPU compiler
runs on the CPU). JAX 0.11+ lowers Mosaic GPU kernels only through
`plgpu.kernel` (an `mpmd_map`, not covered here) and refuses the
`pallas_call` form even for the original, so there the round trip is tested
and lowering is not.

Covered: TMA copies (`copy_gmem_to_smem`, `copy_smem_to_gmem` with and
without a reduction, `commit_smem`, `commit_group`, `wait_smem_to_gmem`),
barriers (`barrier_arrive`, `barrier_wait`; their `BarrierType` element
type is a record), swizzled and tiled SMEM (the transforms are records),
WGMMA (`wgmma_ref`, `wgmma_wait`, `wgmma_accumulator_deref`,
`wgmma_accumulator_store`; the accumulator ref, `plgpu.ACC`, is stored as
the ref of Mosaic GPU's REGS memory space, so a plain ref there is refused),
register loads (`mosaic_gpu.load`) and `layout_cast`, Mosaic GPU's own
`semaphore_signal`/`semaphore_wait` (beside Pallas's own),
`griddepcontrol_wait`/`griddepcontrol_launch_dependents`,
`set_max_registers`, `print_layout`, atomic stores (`mgpu_atomic_store`
with its `AtomicOpType`), each release's own (`wait_gmem_to_smem` and
Ampere `mma` from 0.11, `mosaic_gpu.store` and `barrier_arrive_and_wait` in
0.12), and Blackwell's tensor-core synchronization (`commit_tmem`,
`wait_load_tmem`, `tcgen05_commit_arrive`, traced and lowered for a B200).
`inline_mgpu` (a Python function that emits MLIR) is never stored. The
primitives that take TMEM refs (`tcgen05_mma`, ...) and the multicast ones
are tests/families/pallas/test_pallas_tmem.py's."""

from __future__ import annotations

import importlib
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas.mosaic_gpu import core as gpu_core
from jax._src.pallas.mosaic_gpu import primitives as gpu_primitives
from jax.experimental import pallas as pl
from jax.experimental.pallas import mosaic_gpu as plgpu

import jaxpr_io
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io import compat
from jaxpr_io import converters
from jaxpr_io.safety import validate
from tests.support import proto_edit
from tests.support.roundtrip import assert_roundtrip
from tests.support import paths

# JAX 0.10 lowers `pallas_call` with Mosaic GPU compiler params; 0.11+ only
# `plgpu.kernel` (mpmd_map).
_LOWERS = compat.JAX_VERSION.startswith("0.10.")
_ROOT = paths.ROOT
_GMEM = pl.BlockSpec(memory_space=plgpu.GMEM)
_SWIZZLED = (plgpu.TilingTransform((8, 64)), plgpu.SwizzleTransform(128))


def _h100(kind="NVIDIA H100"):
  device = jax.sharding.AbstractDevice(device_kind=kind, num_cores=None,
                                       platform="cuda")
  return jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)


def _call(kernel, out_shape, scratch, n_in=1):
  return pl.pallas_call(kernel, out_shape=out_shape, in_specs=[_GMEM] * n_in,
                        out_specs=_GMEM, scratch_shapes=scratch,
                        compiler_params=plgpu.CompilerParams())


def _kernel_eqns(prog):
  (call,) = [e for e in prog.closed_jaxpr.jaxpr.eqns
             if e.primitive.name == "pallas_call"]
  return [e for j in validate.walk_jaxprs(call.params["jaxpr"])
          for e in j.eqns]


def _round_trip_and_lower(f, args, want, gpu="NVIDIA H100", lower=True):
  """Traces `f` for `gpu`, checks that its kernel uses the primitives
  `want` and that it round-trips, and (where JAX lowers it, and `lower`)
  lowers the loaded program for `cuda`: one Mosaic GPU kernel, as from the
  original. `lower=False` for kernels JAX itself cannot lower outside a real
  launch."""
  with jax.sharding.use_abstract_mesh(_h100(gpu)):
    prog = jaxpr_io.trace(f, *args)
  used = {e.primitive for e in _kernel_eqns(prog)}
  assert want <= used, {p.name for p in want - used}
  loaded = assert_roundtrip(prog, check=False)  # no GPU to compile for
  # The loaded kernel binds the same primitive objects (names are shared).
  assert [e.primitive for e in _kernel_eqns(loaded)] == [
      e.primitive for e in _kernel_eqns(prog)]
  if _LOWERS and lower:
    with jax.sharding.use_abstract_mesh(_h100(gpu)):
      got = converters.to_exported(loaded, platforms=["cuda"]).mlir_module()
      want_text = jax.export.export(jax.jit(f), platforms=["cuda"])(
          *args).mlir_module()
    assert got.count("@mosaic_gpu") == want_text.count("@mosaic_gpu") == 1
  return prog, loaded


def _tma_kernel(x_gmem, o_gmem, x_smem, o_smem, barrier):
  plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
  plgpu.barrier_wait(barrier)
  o_smem[...] = x_smem[...] * 2.0
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(o_smem, o_gmem)
  plgpu.wait_smem_to_gmem(0)


def test_tma_copy_pipeline_with_a_barrier():
  f = _call(_tma_kernel, jax.ShapeDtypeStruct((128, 128), jnp.float32),
            [plgpu.SMEM((128, 128), jnp.float32),
             plgpu.SMEM((128, 128), jnp.float32),
             plgpu.Barrier(num_arrivals=1)])
  p = gpu_primitives
  _, loaded = _round_trip_and_lower(
      f, (np.ones((128, 128), np.float32),),
      {p.copy_gmem_to_smem_p, p.barrier_wait_p, p.commit_smem_p,
       p.copy_smem_to_gmem_p, p.wait_smem_to_gmem_p})
  # The barrier's element type is a record of its fields.
  (call,) = loaded.closed_jaxpr.jaxpr.eqns
  barrier = call.params["grid_mapping"].scratch_avals[-1]
  assert barrier.dtype == gpu_core.BarrierType(num_arrivals=1,
                                               orders_tensor_core=False)


def _swizzled_kernel(x_gmem, o_gmem, x_smem, barrier):
  plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
  plgpu.barrier_arrive(barrier)
  plgpu.barrier_wait(barrier)
  x_smem[...] = x_smem[...] * 2
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(x_smem, o_gmem, commit_group=False)
  plgpu.commit_smem_to_gmem_group()
  plgpu.wait_smem_to_gmem(0, wait_read_only=True)


def test_swizzled_smem_and_barrier_arrivals():
  f = _call(_swizzled_kernel, jax.ShapeDtypeStruct((64, 128), jnp.float16),
            [plgpu.SMEM((64, 128), jnp.float16, transforms=_SWIZZLED),
             plgpu.Barrier(num_arrivals=2)])
  p = gpu_primitives
  _, loaded = _round_trip_and_lower(
      f, (np.ones((64, 128), np.float16),),
      {p.barrier_arrive_p, p.commit_group_p})
  (call,) = loaded.closed_jaxpr.jaxpr.eqns
  smem = call.params["grid_mapping"].scratch_avals[0]
  assert [type(t).__name__ for t in smem.transforms] == [
      "UnswizzleRef", "UntilingTransform"]


def _wgmma_kernel(a_gmem, b_gmem, o_gmem, a_smem, b_smem, barrier, o_smem,
                  acc_ref):
  plgpu.copy_gmem_to_smem(a_gmem, a_smem, barrier)
  plgpu.copy_gmem_to_smem(b_gmem, b_smem, barrier)
  plgpu.barrier_wait(barrier)
  acc_ref[...] = plgpu.layout_cast(jnp.zeros((64, 128), jnp.float32),
                                   plgpu.Layout.WGMMA)
  plgpu.wgmma(acc_ref, a_smem, b_smem)
  plgpu.wgmma_wait(0)
  o_smem[...] = acc_ref[...].astype(jnp.float16)
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(o_smem, o_gmem)
  plgpu.wait_smem_to_gmem(0)


def test_wgmma_matmul_with_an_accumulator_ref():
  p = gpu_primitives
  prog, loaded = _round_trip_and_lower(
      _wgmma_call(),
      (np.ones((64, 128), np.float16), np.ones((128, 128), np.float16)),
      {p.wgmma_ref_p, p.wgmma_wait_p, p.wgmma_accumulator_deref_p,
       p.wgmma_accumulator_store_p})
  (call,) = loaded.closed_jaxpr.jaxpr.eqns
  acc = call.params["jaxpr"].invars[-1].aval
  assert type(acc) is gpu_core.WGMMAAbstractAccumulatorRef
  assert acc.shape == (64, 128) and acc.dtype == jnp.float32
  # JAX 0.12 dropped the `_p` of the accumulator's primitives; files keep it.
  strings = proto_edit.message(jaxpr_io.dumps(prog)).strings
  assert "wgmma_accumulator_deref_p" in strings
  assert "wgmma_accumulator_deref" not in strings


def _wgmma_call():
  return _call(_wgmma_kernel, jax.ShapeDtypeStruct((64, 128), jnp.float16),
               [plgpu.SMEM((64, 128), jnp.float16, transforms=_SWIZZLED),
                plgpu.SMEM((128, 128), jnp.float16, transforms=_SWIZZLED),
                plgpu.Barrier(num_arrivals=2),
                plgpu.SMEM((64, 128), jnp.float16),
                plgpu.ACC((64, 128), jnp.float32)], n_in=2)


def test_an_accumulator_ref_with_a_kind_is_a_format_error():
  # The accumulator has no kind; a file that gives a REGS ref one is bad.
  with jax.sharding.use_abstract_mesh(_h100()):
    data = jaxpr_io.dumps(jaxpr_io.trace(
        _wgmma_call(), np.ones((64, 128), np.float16),
        np.ones((128, 128), np.float16)))
  msg = proto_edit.message(data)
  regs = [a.ref for a in msg.avals if a.WhichOneof("kind") == "ref"
          and a.ref.HasField("memory_space")
          and msg.strings[a.ref.memory_space.enum.member] == "REGS"]
  assert regs
  regs[0].kind.CopyFrom(regs[0].memory_space)
  with pytest.raises(jaxpr_io.FormatError, match="has a kind"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_a_transformed_scratch_ref_must_hold_a_ref():
  f = _call(_swizzled_kernel, jax.ShapeDtypeStruct((64, 128), jnp.float16),
            [plgpu.SMEM((64, 128), jnp.float16, transforms=_SWIZZLED),
             plgpu.Barrier(num_arrivals=2)])
  with jax.sharding.use_abstract_mesh(_h100()):
    data = jaxpr_io.dumps(jaxpr_io.trace(f, np.ones((64, 128), np.float16)))
  msg = proto_edit.message(data)
  type_index = list(msg.strings).index("jax.pallas.TransformedRef")
  records = [v.record for v in proto_edit.values(msg) if v.WhichOneof("kind") == "record"
             and v.record.type == type_index]
  assert records
  (ref_field,) = [f for f in records[0].fields
                  if msg.strings[f.tuple.items[0].str] == "ref"]
  ref_field.tuple.items[1].Clear()
  ref_field.tuple.items[1].int = 3
  with pytest.raises(jaxpr_io.FormatError, match="is not a ref aval"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_each_name_of_its_own_is_documented_and_binds_its_module():
  with open(os.path.join(_ROOT, "schema", "VOCABULARY.md")) as f:
    documented = f.read()
  for (module, jax_name), name in compat_tables.MODULE_PRIMITIVE_NAMES.items():
    assert f"| `{name}` | `{jax_name}`" in documented, name
    primitive = jaxpr_io.codec.registry.PRIMITIVES.lookup(name)
    if primitive is None:  # e.g. `store`, which only 0.12 has
      assert not any(getattr(p, "name", None) == jax_name
                     for p in vars(importlib.import_module(module)).values()
                     if isinstance(p, jax.extend.core.Primitive))
      continue
    assert primitive.name == jax_name
    assert primitive in vars(importlib.import_module(module)).values()


def _load_kernel(x_gmem, o_gmem, x_smem, barrier, o_smem):
  plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
  plgpu.barrier_wait(barrier)
  if compat.JAX_VERSION.startswith("0.10."):
    v = plgpu.load(x_smem, (), layout=plgpu.Layout.WG_STRIDED((128,), 1))
  else:
    v = plgpu.load(x_smem.at[()], layout=plgpu.Layout.WG_STRIDED((128,), 1))
  v = plgpu.layout_cast(v, plgpu.Layout.WG_STRIDED((128,), 1))
  o_smem[...] = v + 1.0
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(o_smem, o_gmem)
  plgpu.wait_smem_to_gmem(0)


def test_register_loads_and_layout_casts():
  f = _call(_load_kernel, jax.ShapeDtypeStruct((128,), jnp.float32),
            [plgpu.SMEM((128,), jnp.float32), plgpu.Barrier(num_arrivals=1),
             plgpu.SMEM((128,), jnp.float32)])
  _, loaded = _round_trip_and_lower(
      f, (np.arange(128, dtype=np.float32),),
      {gpu_primitives.load_p, gpu_core.layout_cast_p})
  casts = [e.params["new_layout"] for e in _kernel_eqns(loaded)
           if e.primitive is gpu_core.layout_cast_p]
  assert casts and all(c == plgpu.Layout.WG_STRIDED((128,), 1)
                       for c in casts)


def _semaphore_kernel(x_gmem, o_gmem, sem):
  plgpu.semaphore_signal(sem, 1)
  plgpu.semaphore_wait(sem, 1)
  o_gmem[...] = x_gmem[...]


def test_mosaic_gpu_semaphores_have_names_of_their_own():
  f = _call(_semaphore_kernel, jax.ShapeDtypeStruct((128,), jnp.float32),
            [plgpu.SemaphoreType.REGULAR])
  p = gpu_primitives
  prog, _ = _round_trip_and_lower(
      f, (np.ones(128, np.float32),),
      {p.semaphore_signal_p, p.semaphore_wait_p})
  # Pallas's own semaphore_signal/semaphore_wait share the JAX names; the
  # format tells Mosaic GPU's apart.
  strings = proto_edit.message(jaxpr_io.dumps(prog)).strings
  assert {"mosaic_gpu.semaphore_signal",
          "mosaic_gpu.semaphore_wait"} <= set(strings)
  assert "semaphore_signal" not in strings


def _pdl_kernel(x_gmem, o_gmem, x_smem, barrier, sem):
  plgpu.griddepcontrol_wait()
  plgpu.set_max_registers(128, action="increase")
  plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
  plgpu.barrier_wait(barrier)
  plgpu.print_layout("x: {}", x_smem[...])
  pl.semaphore_signal(sem, 1)  # Pallas's own, beside Mosaic GPU's
  pl.semaphore_wait(sem, 1)
  plgpu.copy_smem_to_gmem(x_smem, o_gmem, reduction_op="add")
  plgpu.wait_smem_to_gmem(0)
  plgpu.griddepcontrol_launch_dependents()


def test_dependent_launch_registers_and_reductions():
  f = _call(_pdl_kernel, jax.ShapeDtypeStruct((128, 128), jnp.float32),
            [plgpu.SMEM((128, 128), jnp.float32),
             plgpu.Barrier(num_arrivals=1), plgpu.SemaphoreType.REGULAR])
  p = gpu_primitives
  prog, loaded = _round_trip_and_lower(
      f, (np.ones((128, 128), np.float32),),
      {p.griddepcontrol_wait_p, p.griddepcontrol_launch_dependents_p,
       p.set_max_registers_p, p.print_layout_p})
  (copy,) = [e for e in _kernel_eqns(loaded)
             if e.primitive is p.copy_smem_to_gmem_p]
  assert copy.params["reduction_op"] == "add"
  assert "set_max_registers_p" in proto_edit.message(
      jaxpr_io.dumps(prog)).strings


def _atomics_kernel(x_gmem, o_gmem, x_smem, barrier, o_smem):
  plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
  plgpu.barrier_wait(barrier)
  if _NEWER:
    plgpu.wait_gmem_to_smem(0)  # pre-Hopper cp.async copies
  if hasattr(plgpu, "barrier_arrive_and_wait"):  # 0.12
    plgpu.barrier_arrive_and_wait(barrier)
    plgpu.store(o_smem, x_smem[...] + 1.0)
  else:
    o_smem[...] = x_smem[...] + 1.0
  plgpu.commit_smem()
  plgpu.atomic_add(o_gmem, o_smem[...])


_NEWER = not compat.JAX_VERSION.startswith("0.10.")


def test_atomics_and_each_releases_own_primitives():
  f = _call(_atomics_kernel, jax.ShapeDtypeStruct((128,), jnp.float32),
            [plgpu.SMEM((128,), jnp.float32), plgpu.Barrier(num_arrivals=1),
             plgpu.SMEM((128,), jnp.float32)])
  p = gpu_primitives
  want = {p.atomic_store_p}
  if _NEWER:
    want.add(p.wait_gmem_to_smem_p)
  if hasattr(p, "store_p"):
    want |= {p.store_p, p.barrier_arrive_and_wait_p}
  prog, loaded = _round_trip_and_lower(f, (np.ones(128, np.float32),), want)
  (atomic,) = [e for e in _kernel_eqns(loaded)
               if e.primitive is p.atomic_store_p]
  assert atomic.params["atomic_type"] is p.AtomicOpType.ADD
  if hasattr(p, "store_p"):
    assert "mosaic_gpu.store" in proto_edit.message(
        jaxpr_io.dumps(prog)).strings


@pytest.mark.skipif(not _NEWER, reason="plgpu.mma is JAX 0.11+'s")
def test_ampere_mma_on_values():
  def kernel(a_gmem, b_gmem, o_gmem):
    o_gmem[...] = plgpu.mma(jnp.zeros((64, 64), jnp.float32), a_gmem[...],
                            b_gmem[...])
  f = _call(kernel, jax.ShapeDtypeStruct((64, 64), jnp.float32), [], n_in=2)
  _round_trip_and_lower(
      f, (np.ones((64, 16), np.float16), np.ones((16, 64), np.float16)),
      {gpu_primitives.mma_p})


def _tensor_core_sync_kernel(x_gmem, o_gmem, x_smem, barrier, tc_barrier):
  plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
  plgpu.barrier_wait(barrier)
  plgpu.commit_tmem()
  plgpu.wait_load_tmem()
  plgpu.tcgen05_commit_arrive(tc_barrier)
  plgpu.barrier_wait(tc_barrier)
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(x_smem, o_gmem)
  plgpu.wait_smem_to_gmem(0)


def test_blackwell_tensor_core_synchronization():
  # Traced and lowered for a B200 (TMEM refs: tests/families/pallas/test_pallas_tmem.py).
  f = _call(_tensor_core_sync_kernel,
            jax.ShapeDtypeStruct((128,), jnp.float32),
            [plgpu.SMEM((128,), jnp.float32), plgpu.Barrier(num_arrivals=1),
             plgpu.Barrier(num_arrivals=1, orders_tensor_core=True)])
  p = gpu_primitives
  _, loaded = _round_trip_and_lower(
      f, (np.ones(128, np.float32),),
      {p.commit_tmem_p, p.wait_load_tmem_p, p.tcgen05_commit_arrive_p},
      gpu="NVIDIA B200")
  (call,) = loaded.closed_jaxpr.jaxpr.eqns
  assert call.params["grid_mapping"].scratch_avals[-1].dtype == (
      gpu_core.BarrierType(num_arrivals=1, orders_tensor_core=True))


def test_run_scoped_closing_over_refs():
  # Under JAX 0.10 the scoped body's closure is an open jaxpr's constvars;
  # 0.11+ keep the enclosing trace's refs as constants. The file stores the
  # body open on every release (vocabulary.CLOSURE_FROM_INPUTS_PARAMS) and
  # 0.11+ readers make the equation's inputs its constants again.
  def kernel(x_gmem, o_gmem):
    pl.run_scoped(lambda *scratch: _tma_kernel(x_gmem, o_gmem, *scratch),
                  plgpu.SMEM((128, 128), jnp.float32),
                  plgpu.SMEM((128, 128), jnp.float32),
                  plgpu.Barrier(num_arrivals=1))
  f = _call(kernel, jax.ShapeDtypeStruct((128, 128), jnp.float32), [])
  _, loaded = _round_trip_and_lower(f, (np.ones((128, 128), np.float32),),
                                    {gpu_primitives.copy_gmem_to_smem_p})
  (scoped,) = [e for e in loaded.closed_jaxpr.jaxpr.eqns[0].params[
      "jaxpr"].eqns if e.primitive.name == "run_scoped"]
  assert len(scoped.params["jaxpr"].constvars) == len(scoped.invars) == 2


def test_a_plain_ref_in_registers_is_refused():
  # The format reads every ref in Mosaic GPU's REGS memory space as a WGMMA
  # accumulator; a plain one would come back as one, so it is refused.
  def kernel(x_gmem, o_gmem, regs):
    del regs
    o_gmem[...] = x_gmem[...]
  f = _call(kernel, jax.ShapeDtypeStruct((128,), jnp.float32),
            [plgpu.REGS((128,), jnp.float32)])
  with jax.sharding.use_abstract_mesh(_h100()):
    prog = jaxpr_io.trace(f, np.ones(128, np.float32))
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match="WGMMAAbstractAccumulatorRef"):
    jaxpr_io.dumps(prog)


def test_inline_mosaic_gpu_code_is_never_stored():
  @plgpu.inline_mgpu(
      return_type=plgpu.ShapeDtypeStruct(
          (128,), jnp.float32, layout=plgpu.Layout.WG_STRIDED((128,), 1)))
  def splat(ctx):
    raise AssertionError("never lowered here")

  def kernel(x_gmem, o_gmem):
    del x_gmem
    o_gmem[...] = splat()
  f = _call(kernel, jax.ShapeDtypeStruct((128,), jnp.float32), [])
  with jax.sharding.use_abstract_mesh(_h100()):
    prog = jaxpr_io.trace(f, np.ones(128, np.float32))
  with pytest.raises(jaxpr_io.UnsupportedError, match="inline_mgpu"):
    jaxpr_io.dumps(prog)
