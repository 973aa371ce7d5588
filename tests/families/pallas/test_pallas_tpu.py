"""Mosaic TPU kernel primitives (jax._src.pallas.mosaic.primitives) in
`pallas_call` kernels written for a TPU: traced here (no TPU) under an
abstract TPU mesh, they round-trip exactly and the loaded program lowers for
`tpu` from its file, as the original does.

Covered: `roll`, `bitcast`, `prng_seed`, `prng_random_bits`,
`stochastic_round` (its target is a `jax.numpy` scalar type),
`pack_elementwise`, `unpack_elementwise`, `trace_value`, `add_dependency`,
`matmul_push_rhs`, `prng_join`, `prng_split`, and `matmul_acc_lhs` /
`matmul_pop` in each release's form (JAX 0.10 addresses the accumulator,
0.11+ takes an accumulator ref, `pltpu.ACC`, with `matmul_lhs_fifo`,
`matmul_pop_fifo`, `conv` and, from 0.12, `has_memory_space`), and the DMA
and semaphore primitives (`dma_start`, `dma_wait`, local and remote,
`get_barrier_semaphore`, `semaphore_signal`/`wait`/`read`) with semaphore
refs, whose element types are extended dtypes (format version 5)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas.mosaic import primitives as tpu_primitives
from jax._src.pallas.mosaic import random as tpu_random
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io import converters
from jaxpr_io.safety import validate
from jaxpr_io.format import vocabulary
from tests.support.roundtrip import assert_roundtrip

X = np.arange(8 * 128, dtype=np.float32).reshape(8, 128) / 64.0
SEEDS = np.array([5, 6], np.uint32)
_JAX_010 = compat.JAX_VERSION.startswith("0.10.")
_SPEC = pl.BlockSpec((8, 128), lambda i: (0, 0))
_SMEM = pl.BlockSpec(memory_space=pltpu.SMEM)


def _tpu_mesh(kind: str):
  device = jax.sharding.AbstractDevice(device_kind=kind, num_cores=1,
                                       platform="tpu")
  return jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)


def _tpu_mesh2(kind: str):
  """Two TPU devices along "x", for kernels that talk to their neighbour."""
  device = jax.sharding.AbstractDevice(device_kind=kind, num_cores=1,
                                       platform="tpu")
  return jax.sharding.AbstractMesh(
      (2,), ("x",), axis_types=(jax.sharding.AxisType.Auto,),
      abstract_device=device)


def _kernel_primitives(prog) -> set[str]:
  (call,) = [e for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
             for e in j.eqns if e.primitive.name == "pallas_call"]
  return {e.primitive.name
          for j in validate.walk_jaxprs(call.params["jaxpr"]) for e in j.eqns}


def _round_trip_and_lower(f, args, mesh, want):
  """Traces `f` for the TPU of `mesh`, checks the round trip, and lowers
  the loaded program for `tpu`: one Mosaic kernel, as from the original."""
  with jax.sharding.use_abstract_mesh(mesh):
    prog = jaxpr_io.trace(f, *args)
  assert want <= _kernel_primitives(prog), want - _kernel_primitives(prog)
  loaded = assert_roundtrip(prog, check=False)  # no TPU to compile for
  with jax.sharding.use_abstract_mesh(mesh):
    got = converters.to_exported(loaded, platforms=["tpu"]).mlir_module()
    ref = jax.export.export(jax.jit(f), platforms=["tpu"])(*args).mlir_module()
  assert got.count("@tpu_custom_call") == ref.count("@tpu_custom_call") == 1
  return loaded


def _vector_kernel(x_ref, seed_ref, o_ref, scratch_ref):
  v = x_ref[...]
  pltpu.trace_value("v00", v[0, 0])
  v = pltpu.roll(v, shift=3, axis=1)
  as_int = pltpu.bitcast(v, jnp.int32)
  pltpu.prng_seed(seed_ref[0])
  bits = pltpu.prng_random_bits((8, 128))
  rounded = pltpu.stochastic_round(v, bits.astype(jnp.uint32),
                                   target_dtype=jnp.bfloat16)
  packed = pltpu.pack_elementwise([v, v * 2.0], packed_dtype=jnp.bfloat16)
  unpacked = pltpu.unpack_elementwise(packed, index=1,
                                      packed_dtype=jnp.bfloat16,
                                      unpacked_dtype=jnp.float32)
  pltpu.touch(scratch_ref)
  pltpu.matmul_push_rhs(v, 0, 0)
  o_ref[...] = (pltpu.bitcast(as_int ^ bits.astype(jnp.int32), jnp.float32)
                + rounded.astype(jnp.float32) + unpacked)


_vector_call = pl.pallas_call(
    _vector_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
    grid=(1,), in_specs=[_SPEC, _SMEM], out_specs=_SPEC,
    scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
    compiler_params=pltpu.CompilerParams())


def test_vector_prng_and_packing_primitives():
  loaded = _round_trip_and_lower(
      _vector_call, (X, SEEDS.astype(np.int32)), _tpu_mesh("TPU v5p"),
      {"trace_value", "roll", "bitcast", "prng_seed", "prng_random_bits",
       "stochastic_round", "pack_elementwise", "unpack_elementwise",
       "add_dependency", "matmul_push_rhs"})
  eqns = loaded.closed_jaxpr.jaxpr.eqns[0].params["jaxpr"].eqns
  (rounding,) = [e for e in eqns if e.primitive.name == "stochastic_round"]
  assert rounding.params["target_dtype"] is jnp.bfloat16
  # The kernel's effects (PRNG state, traces, MXU) come back as they were.
  with jax.sharding.use_abstract_mesh(_tpu_mesh("TPU v5p")):
    original = jax.make_jaxpr(_vector_call)(X, SEEDS.astype(np.int32))
  effect_types = lambda es: [sorted(type(x).__name__ for x in e.effects)
                             for e in es]
  assert effect_types(eqns) == effect_types(
      original.jaxpr.eqns[0].params["jaxpr"].eqns)


def _key_kernel(seed_ref, o_ref):
  key = tpu_primitives.wrap_pallas_seed(seed_ref[0], seed_ref[1],
                                        impl=tpu_random.tpu_key_impl.name)
  first, second = tpu_primitives.unwrap_pallas_seed(key)
  o_ref[0] = first + second


def test_key_join_and_split():
  f = pl.pallas_call(_key_kernel,
                     out_shape=jax.ShapeDtypeStruct((1,), jnp.uint32),
                     in_specs=[_SMEM], out_specs=_SMEM)
  _round_trip_and_lower(f, (SEEDS,), _tpu_mesh("TPU v5p"),
                        {"prng_join", "prng_split"})


@pytest.mark.skipif(not _JAX_010, reason="JAX 0.10's accumulator addresses")
def test_jax010_accumulator_matmul():
  def kernel(x_ref, o_ref):
    v = x_ref[...]
    pltpu.matmul_push_rhs(v, 0, 0)
    pltpu.matmul_acc_lhs(0, v, 0, load_staged_rhs=0)
    o_ref[...] = pltpu.matmul_pop(0, (8, 128), jnp.float32, 0)
  f = pl.pallas_call(kernel,
                     out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
                     grid=(1,), in_specs=[_SPEC], out_specs=_SPEC)
  with jax.sharding.use_abstract_mesh(_tpu_mesh("TPU v5p")):
    prog = jaxpr_io.trace(f, X)
  assert {"matmul_acc_lhs", "matmul_pop"} <= _kernel_primitives(prog)
  assert_roundtrip(prog, check=False)


_has_memory_space = getattr(pltpu, "has_memory_space", None)  # 0.12+


@pytest.mark.skipif(_JAX_010, reason="JAX 0.11+'s accumulator refs")
def test_accumulator_refs_fifo_conv_and_memory_space_queries():
  def kernel(x_ref, any_ref, o_ref, acc_ref):
    v = x_ref[...]
    pltpu.matmul_push_rhs(v, 0, 0)
    pltpu.matmul_acc_lhs(acc_ref, jnp.concatenate([v, v], axis=1),
                         load_staged_rhs=0)
    popped = pltpu.matmul_pop(acc_ref)[:, :128]
    pltpu.matmul_lhs_fifo(v, 0)
    fifo = pltpu.matmul_pop_fifo((8, 128), jnp.float32, 0)
    in_vmem = (_has_memory_space(any_ref, pltpu.VMEM) if _has_memory_space
               else jnp.bool_(False))
    conv = pltpu.conv(v[None, None], v[None, None],
                      dimension_numbers=("NCHW", "OIHW", "NCHW"))
    o_ref[...] = (popped + fifo + in_vmem.astype(jnp.float32)
                  + conv[0, 0, :1, :1])
  # Accumulators exist on TPU7x; sizing one asks which TPU this is.
  with jax.sharding.use_abstract_mesh(_tpu_mesh("TPU7x")):
    f = pl.pallas_call(
        kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
        grid=(1,), in_specs=[_SPEC, pl.BlockSpec(memory_space=pl.ANY)],
        out_specs=_SPEC,
        scratch_shapes=[pltpu.ACC(0)((8, 256), jnp.float32)],
        compiler_params=pltpu.CompilerParams())
    prog = jaxpr_io.trace(f, X, X)
  want = {"matmul_acc_lhs", "matmul_pop", "matmul_lhs_fifo",
          "matmul_pop_fifo", "conv"}
  if _has_memory_space:
    want.add("has_memory_space")
  assert want <= _kernel_primitives(prog)
  loaded = assert_roundtrip(prog, check=False)
  scratch = loaded.closed_jaxpr.jaxpr.eqns[0].params[
      "grid_mapping"].scratch_avals[0]
  assert scratch.memory_space == pltpu.ACC(0)


def test_the_other_releases_accumulator_form_is_refused():
  # JAX 0.10 files address accumulators (`acc_addr`), 0.11+ files pass refs
  # (`acc_transforms_tree`); each release refuses the other's, naming it.
  ours, theirs = (("acc_addr", "acc_transforms_tree") if _JAX_010
                  else ("acc_transforms_tree", "acc_addr"))
  where = vocabulary.Where("<test>", "0.0.0", compat.JAX_VERSION)
  for name in ("matmul_acc_lhs", "matmul_pop"):
    rule = compat.ADAPTER.params_from_format[name]
    assert rule({ours: ()}, where) == {ours: ()}
    with pytest.raises(jaxpr_io.FormatError, match=f"{name} param '{theirs}'"):
      rule({theirs: ()}, where)


def _dma_kernel(x_hbm, o_ref, buf, dma_sem, sem):
  # A local DMA, a remote one to the next device along "x", and a regular
  # semaphore signalled and waited on: semaphore refs are extended element
  # types (format version 5).
  local = pltpu.make_async_copy(x_hbm, buf, dma_sem)
  local.start()
  local.wait()
  remote = pltpu.make_async_remote_copy(
      buf, o_ref, dma_sem, dma_sem,
      device_id=(jax.lax.axis_index("x") + 1) % 2,
      device_id_type=pl.DeviceIdType.MESH)
  remote.start()
  remote.wait()
  barrier = pltpu.get_barrier_semaphore()
  pl.semaphore_signal(barrier, 1)
  pl.semaphore_wait(barrier, 1)
  pl.semaphore_signal(sem, 2)
  pl.semaphore_wait(sem, 2)
  o_ref[...] = buf[...] + pl.semaphore_read(sem).astype(jnp.float32)


def _dma_call(x):
  return pl.pallas_call(
      _dma_kernel, out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32),
      in_specs=[pl.BlockSpec(memory_space=pl.ANY)],
      out_specs=pl.BlockSpec(memory_space=pltpu.VMEM),
      scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32),
                      pltpu.SemaphoreType.DMA(()),
                      pltpu.SemaphoreType.REGULAR(())],
      compiler_params=pltpu.CompilerParams(collective_id=0))(x)


def test_dma_and_semaphores():
  mesh = _tpu_mesh2("TPU v5p")
  f = jax.shard_map(_dma_call, mesh=mesh, in_specs=jax.P("x"),
                    out_specs=jax.P("x"), check_vma=False)
  x = np.concatenate([X, X + 1.0])
  loaded = _round_trip_and_lower(
      f, (x,), mesh,
      {"dma_start", "dma_wait", "get_barrier_semaphore", "semaphore_signal",
       "semaphore_wait", "semaphore_read"})
  # The semaphore scratch refs come back with their extended element types.
  kernel = next(e for j in validate.walk_jaxprs(loaded.closed_jaxpr.jaxpr)
                for e in j.eqns if e.primitive.name == "pallas_call")
  dtypes = [v.aval.inner_aval.dtype for v in kernel.params["jaxpr"].invars]
  assert [str(d) for d in dtypes[-2:]] == ["dma_sem", "semaphore"]
  assert type(dtypes[-2]).__name__ == "DMASemaphore"
