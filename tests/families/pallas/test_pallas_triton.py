"""Triton kernel primitives (jax._src.pallas.triton.primitives) in kernels
traced for an H100 (an abstract mesh with that device): atomics
(`atomic_rmw` with its `AtomicOpType`, `atomic_cas`), `max_contiguous` and
`debug_barrier` round-trip and lower for `cuda` from their file on this
machine without a GPU. Inline PTX assembly (`elementwise_inline_asm`, which
`approx_tanh` uses) is native code chosen by the file: never stored."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax._src.pallas.triton import primitives as triton_primitives
from jax.experimental import pallas as pl
from jax.experimental.pallas import triton as pltriton

import jaxpr_io
from jaxpr_io import converters
from jaxpr_io.safety import validate
from tests.support import proto_edit
from tests.support.roundtrip import assert_roundtrip

X = jnp.arange(16, dtype=jnp.float32) / 4.0


def _h100():
  device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100",
                                       num_cores=None, platform="cuda")
  return jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)


def _kernel(x_ref, o_ref, flag_ref):
  v = x_ref[...]
  pltriton.atomic_add(o_ref, (slice(None),), v)
  pltriton.atomic_max(o_ref, (slice(None),), v * 2.0)
  old = pltriton.atomic_cas(flag_ref, jnp.int32(0), jnp.int32(1))
  pltriton.debug_barrier()
  index = pltriton.max_contiguous(jnp.arange(16), [16])
  o_ref[...] += index.astype(jnp.float32) + old.astype(jnp.float32)


_call = pl.pallas_call(
    _kernel, out_shape=(jax.ShapeDtypeStruct((16,), jnp.float32),
                        jax.ShapeDtypeStruct((), jnp.int32)),
    compiler_params=pltriton.CompilerParams(num_warps=4))


def _kernel_eqns(prog):
  (call,) = prog.closed_jaxpr.jaxpr.eqns
  return [e for j in validate.walk_jaxprs(call.params["jaxpr"])
          for e in j.eqns]


def test_triton_atomics_and_barrier_round_trip_and_lower_for_cuda():
  with jax.sharding.use_abstract_mesh(_h100()):
    prog = jaxpr_io.trace(_call, X)
  names = {e.primitive.name for e in _kernel_eqns(prog)}
  assert {"atomic_rmw", "atomic_cas", "max_contiguous"} <= names
  assert names & {"debug_barrier", "debug_barrier_p"}
  loaded = assert_roundtrip(prog, check=False)  # no GPU to compile for
  kinds = [e.params["atomic_type"] for e in _kernel_eqns(loaded)
           if e.primitive.name == "atomic_rmw"]
  assert kinds == [triton_primitives.AtomicOpType.ADD,
                   triton_primitives.AtomicOpType.MAX]
  target = "__gpu$xla.gpu.triton"
  checks = [jax.export.DisabledSafetyCheck.custom_call(target)]
  with jax.sharding.use_abstract_mesh(_h100()):
    got = converters.to_exported(loaded, platforms=["cuda"],
                                 disabled_checks=checks).mlir_module()
    want = jax.export.export(jax.jit(_call), platforms=["cuda"],
                             disabled_checks=checks)(X).mlir_module()
  assert got.count(target) == want.count(target) >= 1


def test_the_barrier_is_stored_under_one_name_by_every_release():
  # JAX 0.10 and 0.11 call it debug_barrier_p, 0.12 debug_barrier: files
  # hold the former, which each release maps to its own primitive.
  with jax.sharding.use_abstract_mesh(_h100()):
    msg = proto_edit.message(jaxpr_io.dumps(jaxpr_io.trace(_call, X)))
  assert "debug_barrier_p" in msg.strings
  assert "debug_barrier" not in msg.strings


def test_inline_assembly_is_never_stored():
  def kernel(x_ref, o_ref):
    o_ref[...] = pltriton.approx_tanh(x_ref[...])
  f = pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct((16,),
                                                            jnp.float32))
  with jax.sharding.use_abstract_mesh(_h100()):
    prog = jaxpr_io.trace(f, X)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match="elementwise_inline_asm"):
    jaxpr_io.dumps(prog)
