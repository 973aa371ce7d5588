"""Pallas primitives that no other test's program held (issue 12: a covered
primitive is one a test program round-trips): Triton-style masked loads and
stores (`masked_load`, `masked_swap`), `multiple_of` and `reciprocal` in an
interpret-mode kernel and `num_programs` over a grid whose size is an
argument, which run here and are compared bit for bit with the original;
`delay` in a Mosaic TPU kernel, lowered for `tpu` from its file; and the
Mosaic GPU primitives of kernels traced for an H100, lowered for `cuda`
where JAX lowers them (tests/test_pallas_mosaic_gpu.py)."""

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
from tests.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)
from tests.test_pallas_tpu import (_kernel_primitives,
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


def test_an_array_in_a_tpu_memory_space_is_refused():
  # pltpu.with_memory_space_constraint puts VMEM on the array's type, which
  # the format's ShapedArray cannot hold (device, host, any): refused with
  # the equation named, not stored wrongly.
  def kernel(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0

  call = pl.pallas_call(kernel,
                        out_shape=jax.ShapeDtypeStruct((8, 128), jnp.float32))

  def f(x):
    return call(pltpu.with_memory_space_constraint(x * 2.0, pltpu.VMEM))

  with jax.sharding.use_abstract_mesh(_tpu_mesh("TPU v5 lite")):
    prog = jaxpr_io.trace(f, X2D)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"equation 1 \(with_memory_space_constraint\), "
                           r"an array in memory space VMEM"):
    jaxpr_io.dumps(prog)
