"""Kernels over meshes (`pl.kernel`, which binds `mpmd_map`) on SparseCore
(`plsc.VectorSubcoreMesh`, `plsc.ScalarSubcoreMesh`) and Mosaic TPU's
TensorCores (`pltpu.create_tensorcore_mesh`), and the SparseCore kernel
primitives (jax._src.pallas.mosaic.sc_primitives): traced here (no TPU)
under an abstract TPU7x mesh, they round-trip exactly, and the loaded
program lowers for `tpu` from its file as the original does.

Covered through the public API (`plsc.*`): `load` (load_expanded), `swap`
(store_compressed, addupdate, addupdate_compressed), `gather` (load_gather),
`scatter` (store_scatter, addupdate_scatter), `bitcast` (JAX 0.10 and 0.11;
0.12's plsc.bitcast binds Mosaic TPU's), `barrier` (subcore_barrier, with
its memory effect), `scan_count` (JAX 0.10 names it `unique`),
`masked_cumsum`/`masked_cummax`/`masked_cummin`, `masked_sort`
(sort_key_val), `parallel_loop`, `pack`/`unpack`, `all_reduce_ffs`,
`all_reduce_population_count` and `sc_fetch_and_add` (fetch_and_add).

The kernels copy with `pltpu.sync_copy`, whose `run_scoped` bodies close
over the kernel's refs (JAX 0.11+ keep them as the body's constants; the
format stores the body open, jaxpr_io.format.vocabulary.CLOSURE_FROM_INPUTS_PARAMS).
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
from jax._src.pallas.mosaic import primitives as tpu_primitives
from jax._src.pallas.mosaic import sc_primitives

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io import converters
from jaxpr_io.codec import registry
from jaxpr_io.safety import validate
from tests.support.roundtrip import assert_roundtrip

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
  """The names the format gives the program's primitives (kernels'
  included)."""
  return {registry.PRIMITIVES.name_of(e.primitive)
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


# Kernels on the vector subcores that use the SparseCore primitives: each
# gets the kernel's input copied into VMEM refs `v` (float32) and `iv`
# (int32) and writes its result to `w`, which is copied out.
def _vector_ops(op, compiler_params=None):
  def make():
    def body(x_ref, i_ref, o_ref):
      @functools.partial(pl.run_scoped, v=pltpu.VMEM((16,), jnp.float32),
                         w=pltpu.VMEM((16,), jnp.float32),
                         iv=pltpu.VMEM((16,), jnp.int32))
      def _(v, w, iv):
        pltpu.sync_copy(x_ref, v)
        pltpu.sync_copy(i_ref, iv)
        w[...] = v[...]
        op(v, w, iv)
        pltpu.sync_copy(w, o_ref)
    return _kernel(body, jax.ShapeDtypeStruct((16,), jnp.float32),
                   compiler_params=compiler_params)
  return make


def _loads_and_stores(v, w, iv):
  mask = v[...] > 1.0
  w[...] = plsc.load_expanded(v.at[...], mask=mask)
  plsc.store_compressed(w.at[...], v[...], mask=mask)
  plsc.addupdate(w.at[...], v[...])
  plsc.addupdate_compressed(w.at[...], v[...], mask=mask)
  w[...] += plsc.load_gather(v, [iv[...]])
  plsc.store_scatter(w, [iv[...]], v[...] * 2.0)
  plsc.addupdate_scatter(w, [iv[...]], v[...])


def _scans_and_sorts(v, w, iv):
  x, mask = v[...], v[...] > 1.0
  counts = plsc.scan_count(iv[...])[0]
  sorted_values = plsc.sort_key_val(x, x * 2.0, mask=mask)[1]
  w[...] = (plsc.cumsum(x, mask=mask) + plsc.cummax(x, mask=mask)
            + sc_primitives.cummin(x, mask=mask) + sorted_values
            + counts.astype(jnp.float32)
            + plsc.all_reduce_population_count(mask).astype(jnp.float32)
            + plsc.all_reduce_ffs(mask).astype(jnp.float32))


def _bits_loops_and_barriers(v, w, iv):
  as_int = plsc.bitcast(v[...], jnp.int32)
  plsc.subcore_barrier()

  @plsc.parallel_loop(0, 16, 8)
  def _(i):
    w[pl.ds(i, 8)] = v[pl.ds(i, 8)] * 2.0

  w[...] += plsc.bitcast(as_int ^ iv[...], jnp.float32)

  @functools.partial(pl.run_scoped, s=pltpu.SMEM((1,), jnp.int32))
  def _(s):
    s[0] = 0
    plsc.subcore_barrier()
    old = plsc.fetch_and_add(s.at[0], 1, subcore_id=0)
    w[...] += old.astype(jnp.float32)


def _pack_unpack(v, w, iv):
  x = v[...]
  packed = plsc.pack(x, x * 2.0, format=plsc.PackFormat.COMPRESSED,
                     preferred_element_type=jnp.bfloat16)
  a, b = plsc.unpack(packed, format=plsc.PackFormat.COMPRESSED,
                     preferred_element_type=jnp.float32)
  w[...] = a + b


# 0.12's plsc.bitcast binds Mosaic TPU's bitcast (jax._src.pallas.mosaic).
_BITCAST = (registry.PRIMITIVES.name_of(tpu_primitives.bitcast_p)
            if compat.JAX_VERSION.startswith("0.12.")
            else "sparsecore.bitcast")
_SCAN_COUNT = ("sparsecore.unique" if compat.JAX_VERSION.startswith("0.10.")
               else "sparsecore.scan_count")


@pytest.mark.parametrize("op, want, params", [
    (_loads_and_stores, {"sparsecore.load", "sparsecore.swap",
                         "sparsecore.gather", "sparsecore.scatter"}, None),
    (_scans_and_sorts, {_SCAN_COUNT, "sparsecore.masked_cumsum",
                        "sparsecore.masked_cummax",
                        "sparsecore.masked_cummin", "sparsecore.masked_sort",
                        "sparsecore.all_reduce_population_count",
                        "sparsecore.all_reduce_ffs"}, None),
    (_bits_loops_and_barriers, {_BITCAST, "sparsecore.barrier",
                                "sparsecore.parallel_loop",
                                "sparsecore.sc_fetch_and_add"}, None),
    # plsc.pack works only without Mosaic's layout passes.
    (_pack_unpack, {"sparsecore.pack", "sparsecore.unpack"},
     dict(needs_layout_passes=False)),
], ids=["loads_and_stores", "scans_and_sorts", "bits_loops_and_barriers",
        "pack_unpack"])
def test_sparsecore_primitives_round_trip_and_lower(op, want, params):
  params = None if params is None else pltpu.CompilerParams(**params)
  _round_trip_and_lower(_vector_ops(op, params), (X, I), want)


def test_sparsecore_primitives_keep_names_of_their_own():
  # Several share their JAX names with other primitives (load, gather, ...):
  # each is stored under its own name and loads as SparseCore's primitive.
  for jax_name, name in (("load", "sparsecore.load"),
                         ("gather", "sparsecore.gather"),
                         ("masked_sort", "sparsecore.masked_sort")):
    primitive = registry.PRIMITIVES.lookup(name)
    assert primitive is getattr(sc_primitives, f"{jax_name}_p")
    assert registry.PRIMITIVES.name_of(primitive) == name
  assert registry.PRIMITIVES.lookup("load") is not sc_primitives.load_p


def test_scalar_subcore_kernel_round_trips_and_lowers():
  def make():
    mesh = plsc.ScalarSubcoreMesh(axis_name="core", num_cores=1)
    return pl.kernel(lambda x_ref, o_ref: pltpu.sync_copy(x_ref, o_ref),
                     out_type=jax.ShapeDtypeStruct((16,), jnp.float32),
                     mesh=mesh)
  loaded = _round_trip_and_lower(make, (X,), set())
  (mesh,) = loaded.closed_jaxpr.jaxpr.eqns[0].params["meshes"]
  assert type(mesh) is plsc.ScalarSubcoreMesh
  assert (mesh.axis_name, mesh.num_cores) == ("core", 1)


def test_tensorcore_kernel_round_trips_and_lowers():
  # JAX 0.10's TensorCoreMesh holds an array of cores, 0.11+'s a count: the
  # file holds 0.11+'s record on every release.
  def make():
    mesh = pltpu.create_tensorcore_mesh("core", num_cores=1)
    return pl.kernel(lambda x_ref, o_ref: pltpu.sync_copy(x_ref, o_ref),
                     out_type=jax.ShapeDtypeStruct((16,), jnp.float32),
                     mesh=mesh)
  loaded = _round_trip_and_lower(make, (X,), set())
  (mesh,) = loaded.closed_jaxpr.jaxpr.eqns[0].params["meshes"]
  assert mesh == pltpu.create_tensorcore_mesh("core", num_cores=1)
  codec = registry.RECORDS.by_name["jax.pallas.tpu.TensorCoreMesh"]
  assert codec.to_fields(mesh) == (("axis_name", "core"), ("num_cores", 1))


def test_mosaic_gpu_mesh_kernel_round_trips_and_lowers_for_cuda():
  # pl.kernel over a plgpu.Mesh (an H100, abstract). plgpu.kernel wraps the
  # same mpmd_map in a custom_vmap whose rule jaxpr_io cannot trace yet.
  device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100",
                                       num_cores=None, platform="cuda")
  h100 = jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)
  from jax.experimental.pallas import mosaic_gpu as plgpu  # pylint: disable=g-import-not-at-top
  x = np.arange(128, dtype=np.float32)

  def body(x_ref, o_ref):
    o_ref[...] = x_ref[...] + 1.0
  mesh = plgpu.Mesh(num_threads=1, thread_name="t")
  with jax.sharding.use_abstract_mesh(h100):
    f = pl.kernel(body, out_type=jax.ShapeDtypeStruct((128,), jnp.float32),
                  mesh=mesh)
    prog = jaxpr_io.trace(f, x)
    loaded = assert_roundtrip(prog, check=False)  # no GPU to compile for
    got = converters.to_exported(loaded, platforms=["cuda"]).mlir_module()
    ref = jax.export.export(jax.jit(f), platforms=["cuda"])(x).mlir_module()
  assert loaded.closed_jaxpr.jaxpr.eqns[0].params["meshes"] == (mesh,)
  call = "stablehlo.custom_call @mosaic_gpu"
  assert got.count(call) == ref.count(call) == 1


@pytest.mark.skipif(not compat.MERGED_JAXPRS,
                    reason="JAX 0.10 keeps run_scoped bodies open")
def test_a_body_closes_only_over_inputs_of_its_constvars_types():
  # The reader gives a run_scoped body stored open its equation's inputs as
  # constants; inputs of other types than the body's leading variables (a
  # crafted file) are refused.
  with jax.sharding.use_abstract_mesh(_tpu7x()):
    prog = jaxpr_io.trace(_copy_add_one(), X)
  (call,) = prog.closed_jaxpr.jaxpr.eqns
  (scoped,) = call.params["jaxprs"][0].eqns
  body = scoped.params["jaxpr"]
  opened = compat.new_jaxpr([], [*body.constvars, *body.invars],
                            body.outvars, body.eqns,
                            body.effects, body.debug_info, False)
  closed = compat.close_over_inputs(opened, scoped.invars)
  assert str(closed) == str(body) and closed.consts == scoped.invars
  wrong = [jax.extend.core.Var(jax.core.ShapedArray((3,), jnp.int8))] * 2
  assert compat.close_over_inputs(opened, wrong) is None
  assert compat.close_over_inputs(opened, [jax.extend.core.Literal(
      1.0, jax.core.ShapedArray((), jnp.float32))]) is None
