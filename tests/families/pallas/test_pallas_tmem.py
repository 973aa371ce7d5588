"""Mosaic GPU's Blackwell tensor memory (TMEM, tcgen05) and multicast
primitives in `pallas_call` kernels written with plgpu for a B200 (TMEM)
or an H100 (multicast), traced here without a GPU (see
tests/families/pallas/test_pallas_mosaic_gpu.py, whose helpers these tests share): they
round-trip exactly, and under JAX 0.10 the loaded TMEM kernels lower for
`cuda` from their files as the originals do. The multicast kernel is not
lowered: Mosaic GPU lowers multicast only under a concrete device mesh,
which this machine does not have (the test asserts that the original does
not lower either).

Covered: `tcgen05_mma` (plain and block-scaled), `async_load` (JAX's name
of `async_load_tmem`'s primitive), `async_store_tmem`,
`async_copy_smem_to_tmem`, `async_copy_scales_to_tmem`,
`async_copy_sparse_metadata_to_tmem`, `multimem_store` (with and without a
`multicast_ref`), `multimem_load_reduce` and `semaphore_signal_multicast`.

A TMEM ref aval (`AbstractTMEMRef`) is stored as the ref of Mosaic GPU's
TMEM memory space whose `kind` field holds its layout (a
`tcgen05.TMEMLayout`, a record of its tiling and dimensions) and its
collective flag: JAX's own TMEM refs have no kind (jaxpr.proto,
`AbstractRef`)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas.mosaic_gpu import core as gpu_core
from jax._src.pallas.mosaic_gpu import primitives as gpu_primitives
from jax.experimental import pallas as pl
from jax.experimental.mosaic.gpu import tcgen05
from jax.experimental.pallas import mosaic_gpu as plgpu

import jaxpr_io
from tests.support import proto_edit
from tests.support.roundtrip import assert_roundtrip
from tests.families.pallas.test_pallas_mosaic_gpu import (_LOWERS, _SWIZZLED, _call, _h100,
                                          _kernel_eqns, _round_trip_and_lower)

_B200 = "NVIDIA B200"
p = gpu_primitives


def _scratch_avals(prog):
  (call,) = prog.closed_jaxpr.jaxpr.eqns
  return call.params["grid_mapping"].scratch_avals


def _tmem_refs(prog):
  """The kernel's TMEM refs: (shape, dtype, layout, collective) each."""
  (call,) = prog.closed_jaxpr.jaxpr.eqns
  return [(a.shape, a.dtype, a.layout, a.collective)
          for a in (v.aval for v in call.params["jaxpr"].invars)
          if type(a) is gpu_core.AbstractTMEMRef]


def _mma_kernel(a_gmem, b_gmem, o_gmem, a_smem, b_smem, acc_tmem, o_smem,
                barrier, mma_barrier):
  plgpu.copy_gmem_to_smem(a_gmem, a_smem, barrier)
  plgpu.barrier_wait(barrier)
  plgpu.copy_gmem_to_smem(b_gmem, b_smem, barrier)
  plgpu.barrier_wait(barrier)
  plgpu.tcgen05_mma(acc_tmem, a_smem, b_smem, mma_barrier, accumulate=False)
  plgpu.barrier_wait(mma_barrier)
  plgpu.async_store_tmem(acc_tmem, plgpu.async_load_tmem(acc_tmem) * 2)
  plgpu.commit_tmem()
  o_smem[...] = plgpu.async_load_tmem(acc_tmem)
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(o_smem, o_gmem)
  plgpu.wait_smem_to_gmem(0)


def _mma_call():
  return _call(_mma_kernel, jax.ShapeDtypeStruct((128, 128), jnp.float32),
               [plgpu.SMEM((128, 128), jnp.float16, transforms=_SWIZZLED),
                plgpu.SMEM((128, 128), jnp.float16, transforms=_SWIZZLED),
                plgpu.TMEM((128, 128), jnp.float32),
                plgpu.SMEM((128, 128), jnp.float32),
                plgpu.Barrier(num_arrivals=1),
                plgpu.Barrier(num_arrivals=1, orders_tensor_core=True)],
               n_in=2)


_MMA_ARGS = (np.ones((128, 128), np.float16),) * 2


def test_tcgen05_matmul_into_a_tmem_accumulator():
  prog, loaded = _round_trip_and_lower(
      _mma_call(), _MMA_ARGS,
      {p.tcgen05_mma_p, p.async_load_tmem_p, p.async_store_tmem_p},
      gpu=_B200)
  # The accumulator comes back a TMEM ref with the layout JAX inferred.
  (tmem,) = _tmem_refs(loaded)
  assert tmem == _tmem_refs(prog)[0]
  assert tmem[2] == tcgen05.tmem_default_layout(packing=1)
  assert tmem[3] is False


def _smem_to_tmem_kernel(x_gmem, o_gmem, x_smem, x_tmem, o_smem, barrier,
                         tc_barrier):
  plgpu.copy_gmem_to_smem(x_gmem, x_smem, barrier)
  plgpu.barrier_wait(barrier)
  plgpu.async_copy_smem_to_tmem(x_smem, x_tmem)
  plgpu.tcgen05_commit_arrive(tc_barrier)
  plgpu.barrier_wait(tc_barrier)
  o_smem[...] = plgpu.async_load_tmem(x_tmem)
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(o_smem, o_gmem)
  plgpu.wait_smem_to_gmem(0)


def test_a_copy_from_smem_into_packed_tmem():
  f = _call(_smem_to_tmem_kernel,
            jax.ShapeDtypeStruct((128, 128), jnp.float16),
            [plgpu.SMEM((128, 128), jnp.float16, transforms=_SWIZZLED),
             plgpu.TMEM((128, 128), jnp.float16, packed=True),
             plgpu.SMEM((128, 128), jnp.float16),
             plgpu.Barrier(num_arrivals=1),
             plgpu.Barrier(num_arrivals=1, orders_tensor_core=True)])
  prog, loaded = _round_trip_and_lower(
      f, (np.ones((128, 128), np.float16),),
      {p.async_copy_smem_to_tmem_p, p.async_load_tmem_p}, gpu=_B200)
  (tmem,) = _tmem_refs(loaded)
  assert tmem == _tmem_refs(prog)[0]
  assert tmem[2] == tcgen05.tmem_default_layout(packing=2)


_K = 128
_E8 = jnp.float8_e8m0fnu
_F8 = jnp.float8_e4m3fn


def _scaled_mma_kernel(a_gmem, b_gmem, sa_gmem, sb_gmem, o_gmem, a_smem,
                       b_smem, sa_smem, sb_smem, acc, sa_tmem, sb_tmem,
                       o_smem, barrier, tc_barrier):
  for gmem, smem in ((a_gmem, a_smem), (b_gmem, b_smem), (sa_gmem, sa_smem),
                     (sb_gmem, sb_smem)):
    plgpu.copy_gmem_to_smem(gmem, smem, barrier)
    plgpu.barrier_wait(barrier)
  plgpu.async_copy_scales_to_tmem(sa_smem, sa_tmem)
  plgpu.async_copy_scales_to_tmem(sb_smem, sb_tmem)
  plgpu.tcgen05_mma(acc, a_smem, b_smem, tc_barrier, a_scale=sa_tmem,
                    b_scale=sb_tmem, accumulate=False)
  plgpu.barrier_wait(tc_barrier)
  o_smem[...] = plgpu.async_load_tmem(acc)
  plgpu.commit_smem()
  plgpu.copy_smem_to_gmem(o_smem, o_gmem)
  plgpu.wait_smem_to_gmem(0)


def test_a_block_scaled_fp8_matmul_with_scales_in_tmem():
  swizzled = (plgpu.TilingTransform((8, 128)), plgpu.SwizzleTransform(128))
  scales = (1, _K // 128, 32, 16)
  f = _call(_scaled_mma_kernel,
            jax.ShapeDtypeStruct((128, 128), jnp.float32),
            [plgpu.SMEM((128, _K), _F8, transforms=swizzled),
             plgpu.SMEM((_K, 128), _F8, transforms=swizzled),
             plgpu.SMEM(scales, _E8), plgpu.SMEM(scales, _E8),
             plgpu.TMEM((128, 128), jnp.float32),
             plgpu.TMEM((128, _K // 32), _E8,
                        layout=plgpu.TMEMLayout.SCALES_LAYOUT),
             plgpu.TMEM((128, _K // 32), _E8,
                        layout=plgpu.TMEMLayout.SCALES_LAYOUT),
             plgpu.SMEM((128, 128), jnp.float32),
             plgpu.Barrier(num_arrivals=1),
             plgpu.Barrier(num_arrivals=1, orders_tensor_core=True)],
            n_in=4)
  args = (np.ones((128, _K), _F8), np.ones((_K, 128), _F8),
          np.ones(scales, _E8), np.ones(scales, _E8))
  prog, loaded = _round_trip_and_lower(
      f, args, {p.async_copy_scales_to_tmem_p, p.tcgen05_mma_p}, gpu=_B200)
  tmems = _tmem_refs(loaded)
  assert tmems == _tmem_refs(prog)
  # The scales' layout replicates over the warps (a `Replicated` record).
  assert [t[2] for t in tmems[1:]] == [tcgen05.scales_layout()] * 2
  assert isinstance(tmems[1][2].warp_dims[0], type(
      tcgen05.scales_layout().warp_dims[0]))


def _sparse_metadata_kernel(m_gmem, o_gmem, m_smem, m_tmem, barrier,
                            tc_barrier):
  del o_gmem
  plgpu.copy_gmem_to_smem(m_gmem, m_smem, barrier)
  plgpu.barrier_wait(barrier)
  plgpu.async_copy_sparse_metadata_to_tmem(m_smem, m_tmem)
  plgpu.tcgen05_commit_arrive(tc_barrier)
  plgpu.barrier_wait(tc_barrier)


def _sparse_metadata_call(collective=False):
  return _call(_sparse_metadata_kernel,
               jax.ShapeDtypeStruct((128,), jnp.float32),
               [plgpu.SMEM((1, 1, 128, 64), jnp.int2),
                plgpu.TMEM((128, 64), jnp.int2, collective=collective,
                           layout=plgpu.TMEMLayout.SPARSE_METADATA_LAYOUT),
                plgpu.Barrier(num_arrivals=1),
                plgpu.Barrier(num_arrivals=1, orders_tensor_core=True)])


def test_sparsity_metadata_copied_into_tmem():
  prog, loaded = _round_trip_and_lower(
      _sparse_metadata_call(), (np.zeros((1, 1, 128, 64), jnp.int2),),
      {p.async_copy_sparse_metadata_to_tmem_p}, gpu=_B200)
  (tmem,) = _tmem_refs(loaded)
  assert tmem == _tmem_refs(prog)[0]
  assert tmem[2] == tcgen05.sparse_meta_layout()


def test_tmem_refs_that_differ_only_in_being_collective_stay_apart():
  # JAX's TMEM ref avals compare equal whatever their layout and collective
  # flag; the file keeps each ref's own.
  def kernel(x_gmem, o_gmem, a_tmem, b_tmem):
    del a_tmem, b_tmem
    o_gmem[...] = x_gmem[...]
  f = _call(kernel, jax.ShapeDtypeStruct((128,), jnp.float32),
            [plgpu.TMEM((128, 128), jnp.float32),
             plgpu.TMEM((128, 128), jnp.float32, collective=True)])
  with jax.sharding.use_abstract_mesh(_h100(_B200)):
    prog = jaxpr_io.trace(f, np.ones(128, np.float32))
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  assert [t[3] for t in _tmem_refs(loaded)] == [False, True]
  assert _tmem_refs(loaded) == _tmem_refs(prog)
  assert jaxpr_io.dumps(loaded) == jaxpr_io.dumps(prog)


def _tmem_ref_message(data):
  msg = proto_edit.message(data)
  tmem = [a.ref for a in msg.avals if a.WhichOneof("kind") == "ref"
          and a.ref.HasField("memory_space")
          and msg.strings[a.ref.memory_space.enum.member] == "TMEM"]
  assert tmem
  return msg, tmem[0]


def test_a_tmem_ref_without_its_layout_is_a_format_error():
  with jax.sharding.use_abstract_mesh(_h100(_B200)):
    data = jaxpr_io.dumps(jaxpr_io.trace(_mma_call(), *_MMA_ARGS))
  msg, tmem = _tmem_ref_message(data)
  tmem.ClearField("kind")
  with pytest.raises(jaxpr_io.FormatError,
                     match="TMEM ref has kind None, not its layout"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_tmem_attributes_on_another_ref_are_a_format_error():
  with jax.sharding.use_abstract_mesh(_h100(_B200)):
    data = jaxpr_io.dumps(jaxpr_io.trace(_mma_call(), *_MMA_ARGS))
  msg, tmem = _tmem_ref_message(data)
  smem = [a.ref for a in msg.avals if a.WhichOneof("kind") == "ref"
          and a.ref.HasField("memory_space")
          and msg.strings[a.ref.memory_space.enum.member] == "SMEM"]
  smem[0].kind.CopyFrom(tmem.kind)
  with pytest.raises(jaxpr_io.FormatError, match="has TMEM attributes"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_a_tmem_layout_that_is_not_one_is_a_format_error():
  with jax.sharding.use_abstract_mesh(_h100(_B200)):
    data = jaxpr_io.dumps(jaxpr_io.trace(_mma_call(), *_MMA_ARGS))
  msg, tmem = _tmem_ref_message(data)
  (layout,) = [f for f in tmem.kind.record.fields
               if msg.strings[f.tuple.items[0].str] == "layout"]
  layout.tuple.items[1].Clear()
  layout.tuple.items[1].int = 7
  with pytest.raises(jaxpr_io.FormatError,
                     match="layout 7 is not a Mosaic GPU TMEMLayout"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def _multicast_kernel(x_gmem, o_gmem, sem):
  multicast = plgpu.multicast_ref(o_gmem, "x")
  plgpu.multimem_store(x_gmem[:128], multicast.at[:128], "x")
  plgpu.multimem_store(x_gmem[...], o_gmem, "x")
  o_gmem[...] = plgpu.multimem_load_reduce(o_gmem, collective_axes="x",
                                           reduction_op="add")
  plgpu.semaphore_signal_multicast(sem, collective_axes="x")


def test_multicast_stores_loads_and_semaphore_signals():
  f = pl.pallas_call(
      _multicast_kernel, out_shape=jax.ShapeDtypeStruct((256,), jnp.float32),
      in_specs=[pl.BlockSpec(memory_space=plgpu.GMEM)],
      out_specs=pl.BlockSpec(memory_space=plgpu.GMEM),
      scratch_shapes=[plgpu.SemaphoreType.REGULAR(())],
      compiler_params=plgpu.CompilerParams())
  x = np.ones(256, np.float32)
  with jax.sharding.use_abstract_mesh(_h100()):
    prog = jaxpr_io.trace(f, x)
  used = {e.primitive for e in _kernel_eqns(prog)}
  assert {p.multimem_store_p, p.multimem_load_reduce_p,
          p.semaphore_signal_multicast_p} <= used
  loaded = assert_roundtrip(prog, check=False)
  assert [e.primitive for e in _kernel_eqns(loaded)] == [
      e.primitive for e in _kernel_eqns(prog)]
  if _LOWERS:
    # Multicast needs a concrete device mesh, which this machine lacks: the
    # original does not lower here either, so neither is lowered.
    with jax.sharding.use_abstract_mesh(_h100()), pytest.raises(
        ValueError, match="device mesh is required by multimem_store"):
      jax.export.export(jax.jit(f), platforms=["cuda"])(x)
  # The multicast ref is a transform of the store's ref: a treedef node.
  (call,) = loaded.closed_jaxpr.jaxpr.eqns
  stores = [e for e in call.params["jaxpr"].eqns
            if e.primitive is p.multimem_store_p]
  assert "MulticastRef" in str(stores[0].params["transforms_tree"])
  assert stores[1].params["transforms_tree"] is None
