"""Collectives, mutable-array state and hijax primitives round-trip
(issue 12: covered means a test program that uses the primitive round-trips).

Each program is traced, saved and loaded (`assert_roundtrip`: same printing,
same bytes on re-dump). Where XLA:CPU runs the program, the loaded one must
compute bit-identical results; the collectives that XLA:CPU cannot run
(`ragged_all_to_all`, `pbroadcast`, `psend`/`precv` are GPU-only) are lowered
for CUDA instead, and the loaded program's StableHLO must equal the
original's. Runs on the 8 host CPU devices of tests/conftest.py.

The reduced/unreduced collectives come from explicit-sharding programs
(`jax.lax.pcast`, `all_gather(..., to=...)`, and JAX 0.12's reductions
whose out_sharding leaves an axis unreduced by max or min).
"""

from __future__ import annotations

import re
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io import converters
from jaxpr_io.codec import mesh_records
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)

if jax.device_count() < 8:
  pytest.skip("needs 8 devices (tests/conftest.py forces 8 host CPU devices "
              "unless JAX was initialized before it ran)",
              allow_module_level=True)

X = jnp.arange(16, dtype=jnp.float32).reshape(8, 2) / 7
_RING = tuple((i, (i + 1) % 8) for i in range(8))


@pytest.fixture(scope="module")
def mesh():
  return jax.make_mesh((8,), ("i",),
                       axis_types=(jax.sharding.AxisType.Auto,))


def _primitives(prog) -> set[str]:
  from jaxpr_io.safety import validate  # pylint: disable=g-import-not-at-top
  return {e.primitive.name for j in validate.walk_jaxprs(
      prog.closed_jaxpr.jaxpr) for e in j.eqns}


def _on_mesh(mesh, body):
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=P("i"),
                               out_specs=P("i")))


def _traced(f, primitive, *args, runs_here=True):
  """Traces `f`, which must use `primitive`, and round-trips it. A program
  XLA:CPU cannot compile (runs_here=False) is loaded without the check that
  compiles it."""
  prog = jaxpr_io.trace(f, *args)
  assert primitive in _primitives(prog), _primitives(prog)
  return prog, assert_roundtrip(prog, check=runs_here)


_LOC = re.compile(r"\s*loc\(.*\)$")
_SSA = re.compile(r"%[\w#]+")


def _lines_with(exported, marker: str) -> list[str]:
  """The lines of the exported StableHLO that hold `marker`, without source
  locations and value names (the loaded program wraps the original in one
  more `jit`, so the surrounding calls and numbering differ)."""
  return [_SSA.sub("%", _LOC.sub("", line)).strip()
          for line in exported.mlir_module().splitlines() if marker in line]


def _same_cuda_lowering(loaded, original, args, markers, custom_call=None):
  """Both lower for CUDA, to the same collective operations."""
  checks = ([jax.export.DisabledSafetyCheck.custom_call(custom_call)]
            if custom_call else [])
  got = converters.to_exported(loaded, platforms=("cuda",),
                               disabled_checks=checks)
  want = jax.export.export(original, platforms=("cuda",),
                           disabled_checks=checks)(*args)
  assert got.platforms == ("cuda",)
  for marker in markers:
    lines = _lines_with(got, marker)
    assert lines, marker
    assert lines == _lines_with(want, marker)


# ------------------------------------------------ GPU-only collectives
def _ragged(v):
  # Device d sends its row to device d's output offset 0 on every device
  # (one chunk of 2 to each peer, as in JAX's docstring example).
  operand = v.reshape(2)
  output = jnp.zeros((2,), v.dtype)
  offsets = jnp.array([0], jnp.int32)
  sizes = jnp.array([2], jnp.int32)
  return jax.lax.ragged_all_to_all(operand, output, offsets, sizes, offsets,
                                   sizes, axis_name="i").reshape(1, 2)


def test_ragged_all_to_all_round_trips_and_lowers_for_cuda(mesh):
  f = _on_mesh(mesh, _ragged)
  _, loaded = _traced(f, "ragged_all_to_all", X, runs_here=False)
  _same_cuda_lowering(loaded, f, (X,), ["custom_call @ragged_all_to_all"],
                      custom_call="ragged_all_to_all")


def test_pbroadcast_round_trips_and_lowers_for_cuda(mesh):
  f = _on_mesh(mesh, lambda v: jax.lax.pbroadcast(v, "i", 3))
  _, loaded = _traced(f, "pbroadcast", X, runs_here=False)
  _same_cuda_lowering(loaded, f, (X,), ["collective_broadcast"])


@pytest.mark.skipif(not hasattr(jax._src.lax.parallel, "pbroadcast_dynamic_p"),
                    reason="a traced source index needs JAX 0.12's "
                    "pbroadcast_dynamic")
def test_pbroadcast_from_a_traced_source_lowers_for_cuda(mesh):
  f = _on_mesh(mesh, lambda v: jax.lax.pbroadcast(v, "i", jnp.int32(3)))
  _, loaded = _traced(f, "pbroadcast_dynamic", X, runs_here=False)
  # JAX 0.12 lowers it for CUDA as a masked all-reduce.
  _same_cuda_lowering(loaded, f, (X,), ["stablehlo.select", "all_reduce"])


def _send_receive(v):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)  # jax.lax.psend
    token = jax.lax.psend(v, "i", _RING)
    return jax.lax.precv(token, v, "i", _RING)


def test_psend_and_precv_round_trip_with_their_effect(mesh):
  # Both carry the one-sided communication effect, stored by name.
  f = _on_mesh(mesh, _send_receive)
  prog, loaded = _traced(f, "psend", X, runs_here=False)
  assert "precv" in _primitives(prog)
  _same_cuda_lowering(loaded, f, (X,), ["stablehlo.send", "stablehlo.recv"])


# ------------------------------------------------------ mutable arrays
def _freeze(v):
  ref = jax.new_ref(v)
  jax.ref.addupdate(ref, ..., v * 3)
  return jax.ref.freeze(ref)


def _empty_and_free(v):
  ref = jax.empty_ref(jax.typeof(v))
  ref[...] = v * 2
  out = ref[...]
  jax.free_ref(ref)
  return out


@pytest.mark.parametrize("f,primitives", [
    (_freeze, ("addupdate", "freeze")),
    (_empty_and_free, ("empty_ref", "free_ref")),
])
def test_ref_primitives_round_trip_and_compute_alike(f, primitives):
  f = jax.jit(f)
  prog, loaded = _traced(f, primitives[0], X)
  assert set(primitives) <= _primitives(prog)
  assert_bit_identical(loaded(X), f(X))
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([X, X * 2]))


def _broadcast_rows(v):
  # Pallas's equal-rank `pl.broadcast_to` (jax._src.state.primitives).
  from jax.experimental import pallas as pl  # pylint: disable=g-import-not-at-top
  return pl.broadcast_to(v[:1], v.shape) + v


def _accumulated(v):
  # JAX binds accum_grad_in_ref on values whose gradient it accumulates in
  # a reference (ad.py's backward pass gives them a RefAccum).
  from jax._src import core  # pylint: disable=g-import-not-at-top
  return core.accum_grad_in_ref(v) * 2


@pytest.mark.parametrize("f,primitive", [(_broadcast_rows, "broadcast_to"),
                                         (_accumulated, "accum_grad_in_ref")])
def test_state_value_primitives_round_trip_and_compute_alike(f, primitive):
  f = jax.jit(f)
  _, loaded = _traced(f, primitive, X)
  assert_bit_identical(loaded(X), f(X))
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([X, X * 2]))
  assert_same_outcome(lambda g: lambda v: jax.jvp(g, (v,), (v,)), f, loaded,
                      X)


# ----------------------------------- explicit sharding: reduced, unreduced
@pytest.fixture(scope="module")
def explicit_mesh():
  return jax.make_mesh((8,), ("i",),
                       axis_types=(jax.sharding.AxisType.Explicit,))


def _gather_invariant(v):
  return jax.lax.all_gather(v, "i", tiled=True, to="invarying")


def _gather_reduced(v):
  reduced = jax.lax.all_gather(v, "i", tiled=True, to="reduced")
  return jax.lax.pcast(reduced, "i", to="varying")


def _reduced_then_varying(v):
  reduced = jax.lax.pcast(v, "i", to="reduced")
  return jax.lax.pcast(reduced, "i", to="varying")


def _sum_unreduced(v):
  return jax.lax.psum(jax.lax.pcast(v, "i", to="unreduced"), "i")


def _scatter_unreduced(v):
  unreduced = jax.lax.pcast(jnp.tile(v, (8, 1)), "i", to="unreduced")
  return jax.lax.psum_scatter(unreduced, "i", tiled=True)


def _release_name(name):
  # JAX 0.10 and 0.11 name the casts' primitives with a `_p` suffix, 0.12
  # without (files keep the suffix: jaxpr_io/compat/jax_0_12.py).
  from jax._src import core  # pylint: disable=g-import-not-at-top
  from jax._src.lax import parallel  # pylint: disable=g-import-not-at-top
  return {"reduced_vary_cast": core.reduced_vary_cast_p.name,
          "vary_unreduced_cast": parallel.vary_unreduced_cast_p.name}[name]


@pytest.mark.parametrize("body,in_spec,out_spec,primitives", [
    (_gather_invariant, P("i"), P(), ["all_gather_invariant"]),
    (_gather_reduced, P("i"), P("i"),
     ["all_gather_reduced", _release_name("reduced_vary_cast")]),
    (_reduced_then_varying, P(), P("i"),
     ["preduced", _release_name("reduced_vary_cast")]),
    (_sum_unreduced, P("i"), P(),
     ["unreduced_psum", _release_name("vary_unreduced_cast")]),
    (_scatter_unreduced, P("i"), P("i"), ["unreduced_reduce_scatter"]),
])
def test_reduced_and_unreduced_collectives_compute_alike(
    explicit_mesh, body, in_spec, out_spec, primitives):
  f = jax.jit(jax.shard_map(body, mesh=explicit_mesh, in_specs=in_spec,
                            out_specs=out_spec))
  x = jax.device_put(X, jax.NamedSharding(explicit_mesh, in_spec))
  prog, loaded = _traced(f, primitives[0], x)
  assert set(primitives) <= _primitives(prog)
  assert_bit_identical(loaded(x), f(x))
  assert loaded(x).sharding == f(x).sharding


_HAS_UNREDUCED_KIND = compat.UnreducedKind is not None


@pytest.mark.skipif(not _HAS_UNREDUCED_KIND,
                    reason="unreduced max/min axes are JAX 0.12's")
@pytest.mark.parametrize("kind,reduce,collective,primitive", [
    ("max", jax.lax.reduce_max, jax.lax.pmax, "unreduced_pmax"),
    ("min", jax.lax.reduce_min, jax.lax.pmin, "unreduced_pmin"),
])
def test_unreduced_max_and_min_keep_their_kind(explicit_mesh, kind, reduce,
                                               collective, primitive):
  # A reduction whose out_sharding leaves axis i unreduced (by max or min),
  # then shard_map completes it: the spec's and the avals' unreduced_kind
  # must survive, or XLA refuses the loaded program.
  spec = P(None, unreduced={"i"},
           unreduced_kind=compat.UnreducedKind[kind])

  @jax.jit
  def f(v):
    partial = reduce(v, (0,), out_sharding=jax.NamedSharding(explicit_mesh,
                                                             spec))
    return jax.shard_map(lambda w: collective(w, "i"), mesh=explicit_mesh,
                         in_specs=spec, out_specs=P())(partial)

  x = jax.device_put(X, jax.NamedSharding(explicit_mesh, P("i")))
  _, loaded = _traced(f, primitive, x)
  assert_bit_identical(loaded(x), f(x))


def test_unreduced_kind_field_is_checked():
  spec = (("i", None), frozenset({"j"}), frozenset())
  with pytest.raises(jaxpr_io.FormatError, match="not a string"):
    mesh_records.decode_partition_spec((*spec, 3))
  if not _HAS_UNREDUCED_KIND:
    with pytest.raises(jaxpr_io.UnsupportedError, match="JAX 0.12"):
      mesh_records.decode_partition_spec((*spec, "max"))
    return
  decoded = mesh_records.decode_partition_spec((*spec, "max"))
  assert decoded.unreduced_kind is compat.UnreducedKind.max
  assert mesh_records.encode_partition_spec(decoded) == (*spec, "max")
  # Sum, the default, is stored by leaving the field out.
  assert len(mesh_records.encode_partition_spec(P("i", unreduced={"j"}))) == 3
  for bad in ("sum", "mean"):
    with pytest.raises(jaxpr_io.FormatError, match="unreduced_kind"):
      mesh_records.decode_partition_spec((*spec, bad))
  with pytest.raises(jaxpr_io.FormatError, match="without unreduced"):
    mesh_records.decode_partition_spec((("i",), frozenset(), frozenset(), "max"))
  with pytest.raises(jaxpr_io.FormatError, match="ManualAxisType"):
    mesh_records.decode_manual_axis_type(
        (frozenset(), frozenset(), frozenset(), "mean"))
