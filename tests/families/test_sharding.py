"""Sharded and parallel programs survive the round trip on 8 CPU devices.

Each program is traced, saved and loaded; the loaded program must print like
the original, re-dump to the same bytes and pass JAX's type checker
(`assert_roundtrip`), and compute bit-identical results with the same output
shardings under jit, and under grad and vmap where the original supports
them. Two tests load in a fresh Python process: one with the 8 devices the
program needs (it runs there and its outputs come back as .npy files), one
with a single device (loading fails with a FormatError that says what to
set).

`jax.pmap` has no primitive of its own in this JAX release: it traces to a
`jit` around a `shard_map`, so its test covers shard_map's params again,
with pmap's axis handling.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.layout import Format, Layout
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jaxpr_io
import jaxpr_io.families.sharding  # registers the codecs; jaxpr_io imports it too
from jaxpr_io import compat
from jaxpr_io.compat import sharding as compat_sharding
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip
from tests.support import paths

if jax.device_count() < 8:
  pytest.skip("needs 8 devices (tests/conftest.py forces 8 host CPU devices "
              "unless JAX was initialized before it ran)",
              allow_module_level=True)

_REPO = paths.ROOT
X = jnp.arange(32, dtype=jnp.float32).reshape(8, 4) / 7


@pytest.fixture(scope="module")
def auto_mesh():
  return jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


@pytest.fixture(scope="module")
def explicit_mesh():
  return jax.make_mesh((2, 4), ("x", "y"),
                       axis_types=(AxisType.Explicit,) * 2)


def _shardings(tree) -> list:
  return [leaf.sharding for leaf in jax.tree_util.tree_leaves(tree)]


def assert_same_run(original, loaded, *args):
  """jit(loaded)(*args) is bit-identical to jit(original)(*args) and its
  outputs have the same shardings."""
  expected = jax.jit(original)(*args)
  actual = jax.jit(loaded)(*args)
  assert_bit_identical(actual, expected)
  assert _shardings(actual) == _shardings(expected)
  return actual


def _device_ids(devices) -> np.ndarray:
  return np.vectorize(lambda d: d.id)(devices)


def _scalar(out):
  return sum(jnp.sum(leaf) for leaf in jax.tree_util.tree_leaves(out))


def assert_same_grad(original, loaded, *args):
  grad = lambda p: jax.jit(jax.grad(lambda *a: _scalar(p(*a))))
  expected = grad(original)(*args)
  actual = grad(loaded)(*args)
  assert_bit_identical(actual, expected)
  assert _shardings(actual) == _shardings(expected)


def assert_same_vmap(original, loaded, *args):
  batched = [jnp.stack([a, a * 2]) for a in args]
  expected = jax.jit(jax.vmap(original))(*batched)
  assert_bit_identical(jax.jit(jax.vmap(loaded))(*batched), expected)


def roundtrip(fn, *args):
  original = jaxpr_io.trace(fn, *args)
  return original, assert_roundtrip(original)


def _eqn(program, name):
  return next(e for e in program.closed_jaxpr.jaxpr.eqns
              if e.primitive.name == name)


# ------------------------------------------------------------- jit, wsc
def test_jit_named_shardings(auto_mesh):
  in_s = NamedSharding(auto_mesh, P("x", "y"))
  out_s = NamedSharding(auto_mesh, P(("x", "y")))
  fn = jax.jit(lambda a, b: (jnp.sin(a) * b, a + 1),
               in_shardings=(in_s, None), out_shardings=(out_s, in_s),
               donate_argnums=1)
  original, loaded = roundtrip(fn, X, X)
  # Every param comes back equal (the body is a new, equal-printing jaxpr;
  # jaxprs compare by identity). Donation is recorded but not performed:
  # the jit equation runs nested inside the test's own jit.
  params = _eqn(loaded, "jit").params
  assert params == _eqn(original, "jit").params | {
      "jaxpr": params["jaxpr"]}
  assert params["in_shardings"][0] == in_s
  assert params["in_shardings"][1] is compat.UNSPECIFIED
  assert params["donated_invars"] == (False, True)
  out = assert_same_run(original, loaded, X, X)
  assert [s.spec for s in _shardings(out)] == [P(("x", "y")), P("x", "y")]
  assert_same_grad(original, loaded, X, X)
  assert_same_vmap(original, loaded, X, X)


def test_traced_at_arrays_committed_to_an_auto_mesh(auto_mesh):
  # Such inputs' avals carry the mesh abstractly (every axis Auto), which
  # types nothing a caller passes: check=True used to lower with it and fail
  # ("lowering_platforms ... required when only AbstractMesh exists").
  x = jax.device_put(X, NamedSharding(auto_mesh, P("x", "y")))
  fn = jax.jit(lambda a: jnp.sin(a) * 2)
  original = jaxpr_io.trace(fn, x)
  assert {t for t in original.closed_jaxpr.in_avals[0].sharding.mesh
          .axis_types} == {AxisType.Auto}
  loaded = assert_roundtrip(original)   # check=True
  assert_same_run(original, loaded, x)


def test_one_program_names_one_device_count(auto_mesh):
  # Found by the fuzzer (campaign seed 104, case 32613): an input type's
  # abstract mesh resized to 2 x 3 devices beside a jit sharded over the
  # 2 x 4 mesh passed check=True; every call failed ("incompatible
  # devices"), since no argument of that type runs where the jit does.
  xs = jax.device_put(X, NamedSharding(auto_mesh, P("x", None)))
  fn = jax.jit(jnp.sin, in_shardings=NamedSharding(auto_mesh, P("x", None)))
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, xs))
  jaxpr_io.loads(data, check=True)
  from tests.support import proto_edit  # pylint: disable=g-import-not-at-top
  msg = proto_edit.message(data)
  (mesh,) = [a.shaped_array.sharding.record.fields[0].record
             for a in msg.avals if a.shaped_array.HasField("sharding")]
  assert list(mesh.fields[0].ints.items) == [2, 4]
  mesh.fields[0].ints.items[1] = 3
  with pytest.raises(jaxpr_io.FormatError,
                     match="the program names meshes of 6 and 8 devices"):
    jaxpr_io.loads(proto_edit.reframe(msg, data), check=True)


def test_with_sharding_constraint(auto_mesh):
  def fn(a):
    b = jax.lax.with_sharding_constraint(
        jnp.cos(a), NamedSharding(auto_mesh, P("x", P.UNCONSTRAINED)))
    return jax.lax.with_sharding_constraint(
        b * a, NamedSharding(auto_mesh, P(None, "y")))
  original, loaded = roundtrip(fn, X)
  assert (_eqn(loaded, "sharding_constraint").params
          == _eqn(original, "sharding_constraint").params)
  out = assert_same_run(original, loaded, X)
  assert out.sharding.spec == P(None, "y")
  assert_same_grad(original, loaded, X)
  assert_same_vmap(original, loaded, X)


def test_nested_jit_shardings(auto_mesh):
  rows = NamedSharding(auto_mesh, P("x"))
  cols = NamedSharding(auto_mesh, P(None, "y"))
  inner = jax.jit(lambda a: jnp.tanh(a) * 3, in_shardings=rows,
                  out_shardings=cols)

  @jax.jit
  def outer(a):
    return inner(a) + inner(a * 2)   # one inner jaxpr, stored once
  fn = jax.jit(outer, out_shardings=rows)
  original, loaded = roundtrip(fn, X)
  out = assert_same_run(original, loaded, X)
  assert out.sharding.spec == P("x")
  assert_same_grad(original, loaded, X)


def test_explicit_axes(explicit_mesh):
  with jax.set_mesh(explicit_mesh):
    xs = jax.device_put(X, P("x", "y"))

    def fn(a):
      b = jax.sharding.reshard(jnp.sin(a) * 2, P("x", None))
      return jnp.sum(b, axis=0), b * 3
    original, loaded = roundtrip(fn, xs)
    # Avals carry explicit shardings on abstract meshes.
    for o, l in zip(original.closed_jaxpr.jaxpr.eqns,
                    loaded.closed_jaxpr.jaxpr.eqns):
      assert [v.aval.sharding for v in l.outvars] == [
          v.aval.sharding for v in o.outvars]
      assert l.ctx.cur_abstract_mesh == o.ctx.cur_abstract_mesh
    assert loaded.in_avals[0].sharding.spec == P("x", "y")
    out = assert_same_run(original, loaded, xs)
    assert [s.spec for s in _shardings(out)] == [P(None), P("x", None)]
    assert_same_grad(original, loaded, xs)
    assert_same_vmap(original, loaded, xs)


def test_unreduced_partition_spec(explicit_mesh):
  with jax.set_mesh(explicit_mesh):
    a = jax.device_put(X, P(None, "x"))
    b = jax.device_put(X.T, P("x", None))
    fn = lambda a, b: jax.sharding.reshard(
        jnp.dot(a, b, out_sharding=P(None, None, unreduced={"x"})), P())
    original, loaded = roundtrip(fn, a, b)
    assert_same_run(original, loaded, a, b)
    assert_same_grad(original, loaded, a, b)


def test_permuted_mesh_devices():
  # A mesh's device order is part of it: devices are stored by id, in the
  # mesh's order, and re-bound to the same ids.
  devices = np.array(jax.devices()[::-1]).reshape(2, 4)
  mesh = jax.sharding.Mesh(devices, ("x", "y"))
  fn = jax.jit(lambda a: a * 2,
               in_shardings=NamedSharding(mesh, P("x", "y")))
  original, loaded = roundtrip(fn, X)
  loaded_mesh = _eqn(loaded, "jit").params["in_shardings"][0].mesh
  assert loaded_mesh == mesh
  assert (loaded_mesh.device_ids == _device_ids(devices)).all()
  out = assert_same_run(original, loaded, X)
  assert out.sharding.mesh == mesh


def test_auto_axes_inside_explicit_mesh(explicit_mesh):
  with jax.set_mesh(explicit_mesh):
    xs = jax.device_put(X, P("x", "y"))
    fn = lambda a: jax.sharding.auto_axes(
        lambda b: jnp.exp(b) * 2, out_sharding=P("x", None))(a)
    original, loaded = roundtrip(fn, xs)
    out = assert_same_run(original, loaded, xs)
    assert out.sharding.spec == P("x", None)


# ------------------------------------------------------------ shard_map
def _collectives(b):
  i = jax.lax.axis_index("x")
  total = jax.lax.psum(b, "y")
  gathered = jax.lax.all_gather(b, "y", axis=1, tiled=True)
  shifted = jax.lax.ppermute(b, "x", [(0, 1), (1, 0)])
  scattered = jax.lax.psum_scatter(gathered, "y", scatter_dimension=1,
                                   tiled=True)
  transposed = jax.lax.all_to_all(b, "x", 0, 1, tiled=True)
  return (total * i + shifted, gathered, scattered, transposed)


def test_shard_map_collectives(auto_mesh):
  specs = (P("x", "y"), P("x", "y"), P("x", "y"), P(None, ("y", "x")))
  fn = jax.shard_map(_collectives, mesh=auto_mesh, in_specs=P("x", "y"),
                     out_specs=specs)
  original, loaded = roundtrip(fn, X)
  params = _eqn(loaded, "shard_map").params
  assert params["in_specs"] == (P("x", "y"),)
  assert params["out_specs"] == specs
  assert params["newly_manual_axes"] == frozenset({"x", "y"})
  assert params["mesh"] == auto_mesh
  out = assert_same_run(original, loaded, X)
  assert [s.spec for s in _shardings(out)] == list(specs)
  assert_same_grad(original, loaded, X)
  assert_same_vmap(original, loaded, X)


def test_shard_map_output_must_vary_over_its_out_spec_axes(auto_mesh):
  # Found by the fuzzer (campaign seed 104, case 19935): a body output
  # replaced by a psum over "y" (varying over "x" only) whose out_spec
  # names "y" passed check=True (JAX's typing rule checks the axes a spec
  # leaves out) and failed grad inside JAX's transpose of shard_map.
  fn = jax.shard_map(lambda b: (b * 2.0, jax.lax.psum(b, "y")),
                     mesh=auto_mesh, in_specs=P("x", "y"),
                     out_specs=(P("x", "y"), P("x", None)))
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, X))
  jaxpr_io.loads(data, check=True)
  from tests.support import proto_edit  # pylint: disable=g-import-not-at-top
  msg = proto_edit.message(data)
  root = msg.closed_jaxprs[msg.root].jaxpr
  (body,) = [j for i, j in enumerate(msg.jaxprs) if i != root
             and len(j.outvars) == 2 and len(j.invars) == 1]
  body.outvars[0] = body.outvars[1]
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"equation 0 \(shard_map\): output 0 of the body "
                     r"does not vary over the axes \['y'\] that its out_spec "
                     r"P\('x', 'y'\) names"):
    jaxpr_io.loads(proto_edit.reframe(msg, data), check=True)


def test_shard_map_max_min(auto_mesh):
  # No gradients: JAX has no differentiation rule for pmax/pmin.
  fn = jax.shard_map(
      lambda b: (jax.lax.pmax(b, "y"), jax.lax.pmin(b, ("x", "y"))),
      mesh=auto_mesh, in_specs=P("x", "y"), out_specs=(P("x"), P()))
  original, loaded = roundtrip(fn, X)
  assert_same_run(original, loaded, X)
  assert_same_vmap(original, loaded, X)


def test_shard_map_partial_manual_abstract_mesh(explicit_mesh):
  # The mesh comes from the context: the equation holds an AbstractMesh,
  # and only axis "x" is manual.
  with jax.set_mesh(explicit_mesh):
    xs = jax.device_put(X, P("x", "y"))
    fn = jax.shard_map(lambda b: jax.lax.psum(b * b, "x"), in_specs=P("x"),
                       out_specs=P(), axis_names={"x"})
    original, loaded = roundtrip(fn, xs)
    assert type(_eqn(loaded, "shard_map").params["mesh"]) is (
        compat.AbstractMesh)
    assert_same_run(original, loaded, xs)
    assert_same_grad(original, loaded, xs)


def test_pmap():
  fn = jax.pmap(lambda a, b: jax.lax.psum(a * b, "i") + jax.lax.axis_index(
      "i"), axis_name="i", in_axes=(1, None), out_axes=1)
  a = jnp.arange(16, dtype=jnp.float32).reshape(2, 8)
  original, loaded = roundtrip(fn, a, jnp.float32(3))
  assert_same_run(original, loaded, a, jnp.float32(3))
  assert_same_grad(original, loaded, a, jnp.float32(3))


# ---------------------------------------- single devices and layouts
def test_single_device_sharding():
  device = jax.devices()[5]
  fn = jax.jit(lambda a: jax.device_put(a * 2, device) + 1,
               out_shardings=jax.sharding.SingleDeviceSharding(device))
  original, loaded = roundtrip(fn, X)
  out = assert_same_run(original, loaded, X)
  assert out.sharding.device_set == {device}


def test_layouts(auto_mesh):
  s = NamedSharding(auto_mesh, P("x", "y"))
  fn = jax.jit(lambda a: a.T * 2, in_shardings=Format(Layout((1, 0)), s),
               out_shardings=Format(Layout.AUTO))
  original, loaded = roundtrip(fn, X)
  params = _eqn(loaded, "jit").params
  assert params["in_layouts"] == (Layout((1, 0)),)
  assert params["out_layouts"][0] is Layout.AUTO
  assert_same_run(original, loaded, X)
  # A Format inside device_put's params.
  put = lambda a: jax.device_put(a, Format(Layout((0, 1)), s)) + 1
  original, loaded = roundtrip(put, X)
  assert_same_run(original, loaded, X)


@pytest.mark.parametrize("name, fields", [
    (jaxpr_io.families.sharding.LAYOUT, ((0, 0), None, 0)),
    (jaxpr_io.families.sharding.LAYOUT, ((1, 0), ((True,),), 0)),
    (jaxpr_io.families.sharding.LAYOUT, ((1, 0), None, -1)),
    (jaxpr_io.families.sharding.SINGLE_DEVICE_SHARDING, ("cpu", None)),
    (jaxpr_io.families.sharding.FORMAT, (compat_sharding.Layout((0,)), None)),
    (jaxpr_io.families.sharding.FORMAT, (None, "device")),
])
def test_bad_records_raise_format_error(name, fields):
  codec = jaxpr_io.codec.registry.RECORDS.by_name[name]
  with pytest.raises(jaxpr_io.FormatError, match=name.split(".")[-1]):
    codec.from_fields(fields)


# ------------------------------------------------------- fresh processes
_CHILD = textwrap.dedent("""
    import json, sys
    import jax, numpy as np
    import jaxpr_io, jaxpr_io.families.sharding
    path, out_dir = sys.argv[1], sys.argv[2]
    try:
      prog = jaxpr_io.load(path, check=True)
    except jaxpr_io.FormatError as e:
      print(e)
      sys.exit(3)
    x = np.load(out_dir + "/x.npy")
    outs = jax.jit(prog)(x)
    for i, out in enumerate(outs):
      np.save(f"{out_dir}/out{i}.npy", np.asarray(out))
    with open(path, "rb") as f:
      same_bytes = jaxpr_io.dumps(prog) == f.read()
    json.dump({"specs": [str(o.sharding.spec) for o in outs],
               "devices": [sorted(d.id for d in o.sharding.device_set)
                           for o in outs],
               "same_bytes": same_bytes}, open(out_dir + "/info.json", "w"))
""")


def _run_child(tmp_path, program_path, device_count: int):
  env = dict(os.environ)
  env["XLA_FLAGS"] = (
      f"--xla_force_host_platform_device_count={device_count}")
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = _REPO + os.pathsep + env.get("PYTHONPATH", "")
  return subprocess.run(
      [sys.executable, "-c", _CHILD, str(program_path), str(tmp_path)],
      env=env, capture_output=True, text=True, timeout=120, check=False)


def _sharded_program(mesh):
  s = NamedSharding(mesh, P("x", "y"))

  def fn(a):
    b = jax.shard_map(_collectives, mesh=mesh, in_specs=P("x", "y"),
                      out_specs=(P("x", "y"), P("x", "y"), P("x", "y"),
                                 P(None, ("y", "x"))))(a)
    return jax.lax.with_sharding_constraint(b[0] * 2, s), b[1], b[3]
  return jaxpr_io.trace(jax.jit(fn, in_shardings=s), X)


def test_fresh_process_loads_and_runs(tmp_path, auto_mesh):
  original = _sharded_program(auto_mesh)
  path = tmp_path / "sharded.jaxpr"
  jaxpr_io.save(path, original)
  np.save(tmp_path / "x.npy", np.asarray(X))
  result = _run_child(tmp_path, path, 8)
  assert result.returncode == 0, result.stderr[-3000:]
  expected = jax.jit(original)(X)
  info = json.loads((tmp_path / "info.json").read_text())
  assert info["same_bytes"]
  assert info["specs"] == [str(s.spec) for s in _shardings(expected)]
  assert info["devices"] == [list(range(8))] * len(expected)
  for i, e in enumerate(expected):
    assert_bit_identical(np.load(tmp_path / f"out{i}.npy"), e)


def test_too_few_devices_is_a_format_error(tmp_path, auto_mesh):
  path = tmp_path / "sharded.jaxpr"
  jaxpr_io.save(path, _sharded_program(auto_mesh))
  result = _run_child(tmp_path, path, 1)
  assert result.returncode == 3, result.stderr[-3000:]
  assert "needs 8 devices but this process has 1" in result.stdout
  assert "xla_force_host_platform_device_count=8" in result.stdout


def _records(value, type_index):
  """Every `Record` of type string `type_index` inside a `Value`."""
  kind = value.WhichOneof("kind")
  if kind == "record":
    if value.record.type == type_index:
      yield value.record
    for field in value.record.fields:
      yield from _records(field, type_index)
  elif kind in ("tuple", "frozenset"):
    for item in getattr(value, kind).items:
      yield from _records(item, type_index)


def test_partition_spec_naming_an_axis_twice_is_a_format_error(auto_mesh):
  """JAX refuses P('x', 'x') with its own exception type; loading turns it
  into a FormatError that says where."""
  sharding = NamedSharding(auto_mesh, P("x", "y"))
  data = jaxpr_io.dumps(jaxpr_io.trace(
      jax.jit(jnp.sin, in_shardings=sharding), X))

  def mutate(msg):
    strings = list(msg.strings)
    specs = [r for ps in msg.param_sets for p in ps.params
             for r in _records(p.value,
                               strings.index("jax.sharding.PartitionSpec"))]
    partitions = specs[0].fields[0].tuple.items
    assert [strings[v.str] for v in partitions] == ["x", "y"]
    partitions[1].str = partitions[0].str
  from tests.hostile.test_bad_input import mutated  # pylint: disable=g-import-not-at-top
  with pytest.raises(jaxpr_io.FormatError, match="DuplicateSpecError"):
    jaxpr_io.loads(mutated(data, mutate))
