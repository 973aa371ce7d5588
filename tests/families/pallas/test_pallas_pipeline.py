"""Mosaic TPU's software pipeline: the `emit_pipeline` primitive
(jax._src.pallas.mosaic.pipeline) in `pallas_call` kernels written for a TPU.

JAX binds `emit_pipeline` when `jax_use_emit_pipeline_primitive` is on (off
by default: then `pltpu.emit_pipeline` inlines its loop of DMAs and
semaphores, already storable, tests/families/pallas/test_pallas_tpu.py). Traced here (no
TPU) under an abstract TPU mesh, its kernels round-trip exactly and the
loaded program lowers for `tpu` from its file, as the original does. The
pipeline's body is an open jaxpr over refs; its grid and blocks are a
`GridMapping`; `args_tree` (JAX 0.11+: an `EmitPipelinePrimitiveArgs`
pytree) and `refs_tree` are treedefs.

`pipeline_body`, the other primitive of the module, is bound only while
`emit_pipeline` is lowered (tests/support/primitive_census.py: NOT_STORABLE)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import config
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io import converters
from jaxpr_io.safety import validate
from jaxpr_io.format import vocabulary
from tests.support.roundtrip import assert_roundtrip

_JAX_010 = compat.JAX_VERSION.startswith("0.10.")
X = np.arange(16 * 256, dtype=np.float32).reshape(16, 256) / 7.0
Y = X[::-1] * 3.0


def _tpu_mesh():
  device = jax.sharding.AbstractDevice(device_kind="TPU v5p", num_cores=1,
                                       platform="tpu")
  return jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)


def _body(x_ref, y_ref, o_ref):
  # program_id inside the body counts the pipeline's own grid steps.
  step = (pl.program_id(0) * 2 + pl.program_id(1)).astype(jnp.float32)
  o_ref[...] = x_ref[...] * 2.0 + y_ref[...] + step


def _kernel(x_hbm, y_hbm, o_hbm):
  spec = pl.BlockSpec((8, 128), lambda i, j: (i, j))
  pltpu.emit_pipeline(_body, grid=(2, 2), in_specs=[spec, spec],
                      out_specs=[spec])(x_hbm, y_hbm, o_hbm)


def _row_body(x_ref, o_ref):
  o_ref[...] = jnp.maximum(x_ref[...], 1.5)


def _nested_kernel(x_hbm, y_hbm, o_hbm):
  # Two pipelines in one kernel, the second over whole rows of blocks.
  _kernel(x_hbm, y_hbm, o_hbm)
  spec = pl.BlockSpec((8, 256), lambda i: (i, 0))
  pltpu.emit_pipeline(_row_body, grid=(2,), in_specs=[spec],
                      out_specs=[spec])(x_hbm, o_hbm)


def _call(kernel):
  any_spec = pl.BlockSpec(memory_space=pl.ANY)
  return pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct(X.shape, jnp.float32),
      in_specs=[any_spec, any_spec], out_specs=any_spec)


def _pipelines(prog) -> list:
  (call,) = [e for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
             for e in j.eqns if e.primitive.name == "pallas_call"]
  return [e for j in validate.walk_jaxprs(call.params["jaxpr"])
          for e in j.eqns if e.primitive.name == "emit_pipeline"]


def _effects(jaxpr) -> list[tuple[str, int]]:
  """The body's read and write effects, by the position of the ref."""
  position = {v: i for i, v in enumerate(jaxpr.invars)}
  return sorted((type(e).__name__, position[e.input]) for e in jaxpr.effects)


@pytest.mark.parametrize("kernel,count", [(_kernel, 1),
                                          (_nested_kernel, 2)])
def test_emit_pipeline_round_trips_and_lowers_for_tpu(kernel, count):
  f = _call(kernel)
  mesh = _tpu_mesh()
  with config.use_emit_pipeline_primitive(True), \
       jax.sharding.use_abstract_mesh(mesh):
    prog = jaxpr_io.trace(f, X, Y)
    assert len(_pipelines(prog)) == count
    loaded = assert_roundtrip(prog, check=False)  # no TPU to compile for
    for got_eqn, want_eqn in zip(_pipelines(loaded), _pipelines(prog)):
      # (GridMapping's index-map jaxprs are new objects: the printed
      # program, compared above, shows them.)
      got_map, want_map = (e.params["grid_mapping"]
                           for e in (got_eqn, want_eqn))
      assert got_map.grid == want_map.grid
      assert [str(b.index_map_jaxpr) for b in got_map.block_mappings] == [
          str(b.index_map_jaxpr) for b in want_map.block_mappings]
      assert got_eqn.params["args_tree"] == want_eqn.params["args_tree"]
      assert _effects(got_eqn.params["body_jaxpr"]) == _effects(
          want_eqn.params["body_jaxpr"])
    got = converters.to_exported(loaded, platforms=["tpu"]).mlir_module()
    ref = jax.export.export(jax.jit(f), platforms=["tpu"])(X, Y).mlir_module()
  assert got.count("@tpu_custom_call") == ref.count("@tpu_custom_call") == 1


def test_without_the_flag_emit_pipeline_is_inlined():
  # The default: no emit_pipeline equation, the pipeline's DMAs instead,
  # on refs with transforms (their treedefs have `TransformedRef` nodes,
  # which JAX registers in its tracing registry alone).
  with config.use_emit_pipeline_primitive(False), \
       jax.sharding.use_abstract_mesh(_tpu_mesh()):
    prog = jaxpr_io.trace(_call(_kernel), X, Y)
    assert not _pipelines(prog)
    # From 0.11 the inlined pipeline's `run_scoped` body closes over the
    # kernel's refs: stored open, its closure rebuilt from the equation's
    # inputs (vocabulary.CLOSURE_FROM_INPUTS_PARAMS).
    assert_roundtrip(prog, check=False)


def test_the_other_releases_form_is_refused():
  # JAX 0.10's emit_pipeline lays out its operands by counts, 0.11+'s as an
  # EmitPipelinePrimitiveArgs pytree: each release refuses the other's,
  # naming the param.
  where = vocabulary.Where("<test>", "0.0.0", compat.JAX_VERSION)
  ours = {"body_consts_len": 0, "_static_grid_offsets": (0,),
          "_num_extra_dynamic": 0}
  theirs = {"refs_tree": None, "_explicit_indices": False, "num_cores": None}
  if not _JAX_010:
    ours, theirs = theirs, ours
  rule = compat.ADAPTER.params_from_format["emit_pipeline"]
  assert rule(dict(ours), where) == ours
  with pytest.raises(jaxpr_io.FormatError,
                     match=f"emit_pipeline param '{next(iter(theirs))}'"):
    rule({**ours, **theirs}, where)
  missing = dict(ours)
  missing.pop(next(iter(ours)))
  with pytest.raises(jaxpr_io.FormatError, match="is missing"):
    rule(missing, where)
