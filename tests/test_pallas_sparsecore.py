"""SparseCore kernels (`pl.kernel` over a `plsc.VectorSubcoreMesh`, which
binds `mpmd_map`) and the SparseCore kernel primitives
(jax._src.pallas.mosaic.sc_primitives): traced here (no TPU) under an
abstract TPU7x mesh, they round-trip exactly, and the loaded program lowers
for `tpu` from its file as the original does.

The kernels copy with `pltpu.sync_copy`, whose `run_scoped` bodies close
over the kernel's refs (JAX 0.11+ keep them as the body's constants; the
format stores the body open, jaxpr_io.vocabulary.CLOSURE_FROM_INPUTS_PARAMS).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import tpu_sc as plsc

import jaxpr_io
from jaxpr_io import converters, validate
from tests.roundtrip import assert_roundtrip

X = np.arange(16, dtype=np.float32) / 4.0
I = np.arange(16, dtype=np.int32)[::-1].copy()


def _tpu7x():
  device = jax.sharding.AbstractDevice(device_kind="TPU7x", num_cores=1,
                                       platform="tpu")
  return jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)


def _kernel(body, out_type, **kwargs):
  """`body` as a SparseCore kernel on one core's vector subcores (built
  under the abstract TPU: the mesh asks which TPU it targets)."""
  mesh = plsc.VectorSubcoreMesh(core_axis_name="core",
                                subcore_axis_name="subcore", num_cores=1)
  return pl.kernel(body, out_type=out_type, mesh=mesh, **kwargs)


def _names(prog) -> set[str]:
  return {e.primitive.name
          for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
          for e in j.eqns}


def _round_trip_and_lower(make, args, want):
  """Traces the kernel `make()` builds, checks the round trip and that the
  loaded program lowers for `tpu` to one Mosaic kernel, as the original."""
  with jax.sharding.use_abstract_mesh(_tpu7x()):
    f = make()
    prog = jaxpr_io.trace(f, *args)
    assert "mpmd_map" in _names(prog)
    assert want <= _names(prog), want - _names(prog)
    loaded = assert_roundtrip(prog, check=False)  # no TPU to compile for
    ref = jax.export.export(jax.jit(f), platforms=["tpu"])(*args)
    got = converters.to_exported(loaded, platforms=["tpu"])
  assert (got.mlir_module().count("@tpu_custom_call")
          == ref.mlir_module().count("@tpu_custom_call") == 1)
  return loaded


def _copy_add_one():
  def body(x_ref, o_ref):
    @functools.partial(pl.run_scoped, v=pltpu.VMEM((16,), jnp.float32))
    def _(v):
      pltpu.sync_copy(x_ref, v)
      v[...] = v[...] + 1.0
      pltpu.sync_copy(v, o_ref)
  return _kernel(body, jax.ShapeDtypeStruct((16,), jnp.float32))


def test_sync_copy_kernel_round_trips_and_lowers():
  loaded = _round_trip_and_lower(_copy_add_one, (X,), {"run_scoped"})
  (call,) = loaded.closed_jaxpr.jaxpr.eqns
  (mesh,) = call.params["meshes"]
  assert type(mesh) is plsc.VectorSubcoreMesh and mesh.num_subcores == 16


def test_a_sparsecore_mesh_loads_only_for_a_tpu():
  with jax.sharding.use_abstract_mesh(_tpu7x()):
    data = jaxpr_io.dumps(jaxpr_io.trace(_copy_add_one(), X))
  # The reader reports it as the file it cannot build here.
  with pytest.raises(jaxpr_io.FormatError,
                     match="VectorSubcoreMesh: building a SparseCore mesh "
                           "needs the target TPU"):
    jaxpr_io.loads(data)


def test_an_untrusted_file_cannot_set_the_kernels_mosaic_flags():
  def body(x_ref, o_ref):
    pltpu.sync_copy(x_ref, o_ref)
  flagged = pltpu.CompilerParams(flags={"xla_tpu_some_flag": True})
  with jax.sharding.use_abstract_mesh(_tpu7x()):
    f = _kernel(body, jax.ShapeDtypeStruct((16,), jnp.float32),
                compiler_params=flagged)
    data = jaxpr_io.dumps(jaxpr_io.trace(f, X))
    with pytest.warns(jaxpr_io.DroppedParamWarning,
                      match="compiler_params.flags' of 1 'mpmd_map'"):
      loaded = jaxpr_io.loads(data)
    trusted = jaxpr_io.loads(data, trusted=True)
  (call,) = loaded.closed_jaxpr.jaxpr.eqns
  assert call.params["compiler_params"].flags is None
  (call,) = trusted.closed_jaxpr.jaxpr.eqns
  assert call.params["compiler_params"] == flagged
