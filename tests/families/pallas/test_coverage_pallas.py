"""Pallas primitives that no other test's program held (issue 12: a covered
primitive is one a test program round-trips): Triton-style masked loads and
stores (`masked_load`, `masked_swap`), `multiple_of` and `reciprocal` in an
interpret-mode kernel and `num_programs` over a grid whose size is an
argument, which run here and are compared bit for bit with the original;
`delay` in a Mosaic TPU kernel, lowered for `tpu` from its file; and the
Mosaic GPU primitives of kernels traced for an H100, lowered for `cuda`
where JAX lowers them (tests/families/pallas/test_pallas_mosaic_gpu.py)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.pallas import primitives as pl_primitives
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

import jaxpr_io
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)
from tests.families.pallas.test_pallas_tpu import (_kernel_primitives,
                                   _round_trip_and_lower as _tpu_round_trip,
                                   _tpu_mesh)

X16 = np.arange(16, dtype=np.float32) / 3.0 + 0.5
X2D = np.arange(8 * 128, dtype=np.float32).reshape(8, 128) / 100.0


# ------------------------------------------------ core, in interpret mode
def _masked_kernel(x_ref, o_ref):
  start = pl.multiple_of(pl.program_id(0) * 8, 8)
  block = pl.ds(start, 8)
  mask = jnp.arange(8) < 6
  x = pltriton.load(x_ref.at[block], mask=mask, other=1.0)
  o_ref[block] = jnp.zeros(8, jnp.float32)
  pltriton.store(o_ref.at[block],
                 pl_primitives.reciprocal(x, approx=False), mask=mask)


_masked = pl.pallas_call(
    _masked_kernel, out_shape=jax.ShapeDtypeStruct((16,), jnp.float32),
    grid=(2,), interpret=True)


def test_masked_load_and_store_multiple_of_and_reciprocal():
  prog = jaxpr_io.trace(_masked, X16)
  assert {"masked_load", "masked_swap", "multiple_of",
          "reciprocal"} <= _kernel_primitives(prog)
  loaded = assert_roundtrip(prog)
  got = loaded(X16)
  assert_bit_identical(got, _masked(X16))
  # The masked-off lanes keep the zeros; the others hold 1/x.
  assert got[6] == got[7] == got[14] == got[15] == 0.0
  np.testing.assert_allclose(got[:6], 1.0 / X16[:6], rtol=1e-6)
  eqns = [e for e in loaded.closed_jaxpr.jaxpr.eqns[0].params["jaxpr"].eqns]
  assert [e.params["values"] for e in eqns
          if e.primitive.name == "multiple_of"] == [(8,)]
  assert [(e.params["approx"], e.params["full_range"]) for e in eqns
          if e.primitive.name == "reciprocal"] == [(False, True)]
  assert_same_outcome(jax.vmap, _masked, loaded, np.stack([X16, X16 * 2]))


def _grid_sized_kernel(x_ref, o_ref):
  @pl.when(pl.program_id(0) == 0)
  def _():
    o_ref[...] = jnp.zeros_like(o_ref)
  o_ref[...] += x_ref[...] * pl.num_programs(0).astype(jnp.float32)


def _grid_sized(x, n):
  # A grid whose size is an argument: only then does the kernel bind
  # `num_programs` (a static grid's size is a constant).
  spec = pl.BlockSpec((8, 128), lambda i: (0, 0))
  return pl.pallas_call(
      _grid_sized_kernel, out_shape=jax.ShapeDtypeStruct((8, 128),
                                                         jnp.float32),
      grid=(n,), in_specs=[spec], out_specs=spec, interpret=True)(x, )


def test_num_programs_of_a_grid_sized_at_run_time():
  n = jnp.int32(3)
  prog = jaxpr_io.trace(_grid_sized, X2D, n)
  assert "num_programs" in _kernel_primitives(prog)
  loaded = assert_roundtrip(prog)
  grid = loaded.closed_jaxpr.jaxpr.eqns[-1].params["grid_mapping"].grid
  from jax._src.pallas import core as pallas_core  # pylint: disable=g-import-not-at-top
  assert grid[0] is pallas_core.dynamic_grid_dim  # JAX compares by identity
  for size in (n, jnp.int32(5)):
    got = loaded(X2D, size)
    assert_bit_identical(got, _grid_sized(X2D, size))
    np.testing.assert_array_equal(got, X2D * float(size) * float(size))


# ------------------------------------------------------------- Mosaic TPU
def _delay_kernel(x_ref, o_ref):
  pl.delay(100)
  o_ref[...] = x_ref[...] + 1.0


def test_delay_lowers_for_tpu_from_its_file():
  f = pl.pallas_call(_delay_kernel,
                     out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))
  loaded = _tpu_round_trip(f, (X2D,), _tpu_mesh("TPU v5 lite"), {"delay"})
  # Its effect (the sleep's order in the kernel) comes back.
  call = loaded.closed_jaxpr.jaxpr.eqns[0]
  (delay,) = [e for e in call.params["jaxpr"].eqns
              if e.primitive.name == "delay"]
  assert delay.effects == {pl_primitives.delay_effect}


def test_an_array_in_a_tpu_memory_space_round_trips():
  # pltpu.with_memory_space_constraint puts VMEM on the array's type: a
  # memory space not JAX's own, stored since format version 6
  # (ShapedArray.kernel_memory_space). The kernel lowers from the file.
  def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

  call = pl.pallas_call(kernel,
                        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))

  def f(x):
    return call(pltpu.with_memory_space_constraint(x * 2.0, pltpu.VMEM))

  loaded = _tpu_round_trip(f, (X2D,), _tpu_mesh("TPU v5 lite"), set())
  constrained = loaded.closed_jaxpr.jaxpr.eqns[1]
  assert constrained.primitive.name == "with_memory_space_constraint"
  assert constrained.outvars[0].aval.memory_space == pltpu.VMEM


# ------------------------------------------------------------- Mosaic GPU
from jax._src.pallas.mosaic_gpu import primitives as gpu_primitives  # noqa: E402  pylint: disable=g-import-not-at-top
from jax.experimental.pallas import mosaic_gpu as plgpu  # noqa: E402  pylint: disable=g-import-not-at-top
from tests.families.pallas.test_pallas_mosaic_gpu import (  # noqa: E402  pylint: disable=g-import-not-at-top
    _call, _h100, _kernel_eqns, _round_trip_and_lower as _gpu_round_trip)

_F128 = jax.ShapeDtypeStruct((128,), jnp.float32)
_ONES = (np.ones(128, np.float32),)


def _gpu_round_trip_only(f, args, want):
  """For kernels that JAX itself cannot lower outside a real launch (a 0-D
  kernel mesh for remote signals, warp semantics, a cluster): the trace for
  an H100 round-trips and binds the same primitive objects."""
  return _gpu_round_trip(f, args, want, lower=False)[1]


def _cancel_kernel(x_gmem, o_gmem, result, barrier):
  plgpu.try_cluster_cancel(result, barrier)
  plgpu.barrier_wait(barrier)
  _, ok = plgpu.query_cluster_cancel(result, grid_names=())
  o_gmem[...] = x_gmem[...] + ok.astype(jnp.float32)


def test_cluster_cancellation_lowers_for_a_blackwell_gpu():
  f = _call(_cancel_kernel, _F128, [plgpu.SMEM((4,), jnp.uint32),
                                    plgpu.Barrier(num_arrivals=1)])
  _gpu_round_trip(f, _ONES, {gpu_primitives.try_cluster_cancel_p,
                             gpu_primitives.query_cluster_cancel_p},
                  gpu="NVIDIA B200")


def _global_semaphore_kernel(x_gmem, o_gmem):
  # A remote signal (device_id given): one that only signals this device
  # has no effect, and the kernel's tracing drops it.
  sem = pl.get_global(plgpu.SemaphoreType.REGULAR)
  plgpu.semaphore_signal_parallel(
      plgpu.SemaphoreSignal(sem, device_id=jnp.int32(0), inc=1))
  plgpu.semaphore_wait(sem, 1)
  o_gmem[...] = x_gmem[...]


def test_a_global_semaphore_and_parallel_signals():
  loaded = _gpu_round_trip_only(
      _call(_global_semaphore_kernel, _F128, []), _ONES,
      {pl_primitives.get_global_p, gpu_primitives.semaphore_signal_parallel_p})
  (get,) = [e for e in _kernel_eqns(loaded)
            if e.primitive is pl_primitives.get_global_p]
  assert str(get.params["what"]) == str(
      plgpu.SemaphoreType.REGULAR.get_ref_aval())


def _smem_kernel(x_gmem, o_gmem, x_smem, barrier):
  plgpu.async_store_smem(x_gmem[...], x_smem, barrier,
                         cluster_idx=jnp.int32(0), cluster_dim=0)
  done = plgpu.barrier_test(barrier)
  plgpu.barrier_wait(barrier)
  o_gmem[...] = x_smem[...] + done.astype(jnp.float32)


def test_cluster_smem_stores_and_barrier_tests():
  _gpu_round_trip_only(
      _call(_smem_kernel, _F128, [plgpu.SMEM((128,), jnp.float32),
                                  plgpu.Barrier(num_arrivals=1)]),
      _ONES, {gpu_primitives.async_store_smem_p,
              gpu_primitives.barrier_test_p})


def _reductions_kernel(x_gmem, o_gmem):
  x = x_gmem[...]
  o_gmem[...] = x + (plgpu.sum(x) + plgpu.max(x) + plgpu.min(x)
                     + plgpu.prod(x, accumulator_ilp=2))


@pytest.mark.skipif(not hasattr(plgpu, "prod"),
                    reason="Mosaic GPU's reductions are JAX 0.12's")
def test_mosaic_gpu_reductions():
  p = gpu_primitives
  loaded = _gpu_round_trip_only(
      _call(_reductions_kernel, _F128, []), _ONES,
      {p.reduce_sum_p, p.reduce_max_p, p.reduce_min_p, p.reduce_prod_p})
  assert [e.params["accumulator_ilp"] for e in _kernel_eqns(loaded)
          if e.primitive is p.reduce_prod_p] == [2]


def test_async_prefetch_in_a_mesh_kernel_round_trips_and_lowers():
  # pallas_call's tracing drops plgpu.async_prefetch (its only effect is a
  # read); a kernel over a plgpu.Mesh (pl.kernel, an mpmd_map) keeps it.
  from jaxpr_io import converters
  from jaxpr_io.safety import validate
  device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100",
                                       num_cores=None, platform="cuda")
  h100 = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)

  def body(x_ref, o_ref):
    plgpu.async_prefetch(x_ref)
    o_ref[...] = x_ref[...] + 1.0

  with jax.sharding.use_abstract_mesh(h100):
    f = pl.kernel(body, out_type=jax.ShapeDtypeStruct((128,), jnp.float32),
                  mesh=plgpu.Mesh(num_threads=1, thread_name="t"))
    prog = jaxpr_io.trace(f, X2D[0])
    assert "async_prefetch" in {
        e.primitive.name
        for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr) for e in j.eqns}
    loaded = assert_roundtrip(prog, check=False)  # no GPU to compile for
    got = converters.to_exported(loaded, platforms=["cuda"]).mlir_module()
    ref = jax.export.export(jax.jit(f), platforms=["cuda"])(X2D[0]).mlir_module()
  call = "stablehlo.custom_call @mosaic_gpu"
  assert got.count(call) == ref.count(call) == 1


def _lowered_for_tpu(fn, *args):
  """The number of Mosaic kernels in `fn`'s module for `tpu`, or the error
  that lowering raised (as text: to_exported wraps it)."""
  try:
    return fn(*args).mlir_module().count("@tpu_custom_call")
  except Exception as e:  # pylint: disable=broad-except
    return str(e).split(": ", 1)[-1] if isinstance(
        e, jaxpr_io.UnsupportedError) else f"{type(e).__name__}: {e}"


def test_core_map_round_trips_and_lowers_alike():
  # pl.core_map over a TensorCore mesh: JAX 0.10 binds core_map (its mesh
  # a TensorCoreMesh, its debug_info a jax.DebugInfo record), 0.11+ an
  # mpmd_map. The loaded program lowers for `tpu` as the original does
  # (under 0.12 with an explicit abstract mesh, both fail alike).
  from jaxpr_io import converters
  from jaxpr_io.safety import validate
  mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)

  def f(x):
    def stateful(refs):
      x_ref, o_ref = refs

      @pl.core_map(mesh)
      def _():
        pltpu.sync_copy(x_ref, o_ref)
    return pl.run_state(stateful)((x, jnp.zeros_like(x)))[1]

  with jax.sharding.use_abstract_mesh(_tpu_mesh("TPU v5 lite")):
    prog = jaxpr_io.trace(f, X2D)
    names = {e.primitive.name
             for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
             for e in j.eqns}
    assert ("core_map" in names) == jax.__version__.startswith("0.10.")
    loaded = assert_roundtrip(prog, check=False)  # no TPU to compile for
    got = _lowered_for_tpu(
        lambda: converters.to_exported(loaded, platforms=["tpu"]))
    want = _lowered_for_tpu(
        lambda: jax.export.export(jax.jit(f), platforms=["tpu"])(X2D))
  assert got == want


def test_a_bad_debug_info_record_is_a_format_error():
  from jaxpr_io.codec import records  # pylint: disable=g-import-not-at-top
  for fields in (("pallas_core_map", "_", None), (3, "_", None, None),
                 ("t", "_", ("x", 3), None), ("t", "_", None, ("a", None)),
                 ("t", "_", None, "later")):
    with pytest.raises(jaxpr_io.FormatError, match="jax.DebugInfo"):
      records.decode_debug_info(fields)
  info = records.decode_debug_info(("t", "f at x.py:1", ("a", None), ("r",)))
  assert records.encode_debug_info(info) == ("t", "f at x.py:1", ("a", None),
                                             ("r",))
