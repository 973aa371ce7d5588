"""Shardings of bound inputs in one process (8 CPU devices): a bound
`jax.Array` stays on its devices; an input whose type declares an Explicit
sharding takes only an array sharded so; an Orbax source restores with the
caller's shardings, else the program's (its Explicit specs, its `jit`'s
`in_shardings`), else as numpy. The 2-process test of the same is
test_sharded_bind.py."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

import jaxpr_io
import jaxpr_io.orbax
from jaxpr_io.api import bind_sources

W = np.random.RandomState(0).randn(8, 8).astype(np.float32)
X = np.random.RandomState(1).randn(2, 8).astype(np.float32)


def _mesh(kind=jax.sharding.AxisType.Auto):
  return jax.make_mesh((8,), ("x",), axis_types=(kind,))


def _apply(params, x):
  return jnp.tanh(x @ params["w"])


def _save_state(path, params):
  with ocp.StandardCheckpointer() as checkpointer:
    checkpointer.save(path / "state", {"params": params})
  return str(path / "state") + ":params"


def test_bound_device_array_is_kept_with_its_sharding():
  mesh = _mesh()
  w = jax.device_put(W, NamedSharding(mesh, P("x")))
  prog = jaxpr_io.trace(_apply, {"w": w}, X)
  bound = prog.bind({"w": w})
  (const,) = bound.closed_jaxpr.consts
  assert const is w
  np.testing.assert_array_equal(np.asarray(bound(X)),
                                np.asarray(_apply({"w": w}, X)))
  # Fully addressable: it saves, as numpy would.
  again = jaxpr_io.loads(jaxpr_io.dumps(bound))
  np.testing.assert_array_equal(np.asarray(again.closed_jaxpr.consts[0]), W)


def test_explicit_input_takes_only_its_declared_sharding():
  mesh = _mesh(jax.sharding.AxisType.Explicit)
  w = jax.device_put(W, NamedSharding(mesh, P("x")))
  prog = jaxpr_io.trace(_apply, {"w": w}, jax.device_put(
      X, NamedSharding(mesh, P())))
  assert prog.bind({"w": w}).closed_jaxpr.consts[0] is w
  other = jax.device_put(W, NamedSharding(mesh, P(None, "x")))
  with pytest.raises(TypeError, match=r"bind args\[0\]\['w'\]: .*sharded "
                     r"as P\('x', None\).*device_put"):
    prog.bind({"w": other})
  with pytest.raises(TypeError, match="without an Explicit mesh axis"):
    prog.bind({"w": jax.device_put(W, NamedSharding(_mesh(), P("x")))})
  # Host data has no sharding to check: it binds as before.
  assert isinstance(prog.bind({"w": W}).closed_jaxpr.consts[0], np.ndarray)


def test_orbax_source_restores_with_the_jit_in_shardings(tmp_path):
  mesh = _mesh()
  sharding = NamedSharding(mesh, P(None, "x"))
  served = jax.jit(_apply, in_shardings=({"w": sharding}, None))
  source = _save_state(tmp_path, {"w": jax.device_put(W, sharding)})
  prog = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(served, {"w": W}, X)))
  bound = prog.bind(bind_sources.load_source(source))
  (const,) = bound.closed_jaxpr.consts
  assert isinstance(const, jax.Array)
  assert const.sharding.is_equivalent_to(sharding, 2)
  np.testing.assert_array_equal(np.asarray(const), W)
  np.testing.assert_array_equal(np.asarray(bound(X)),
                                np.asarray(served({"w": W}, X)))
  # A program that declares nothing binds numpy, as before.
  plain = jaxpr_io.trace(_apply, {"w": W}, X)
  const = plain.bind(bind_sources.load_source(source)).closed_jaxpr.consts[0]
  assert isinstance(const, np.ndarray)


def test_orbax_source_with_given_shardings_and_explicit_specs(tmp_path):
  source = _save_state(tmp_path, {"w": W})
  plain = jaxpr_io.trace(_apply, {"w": W}, X)
  mesh = _mesh()
  for given in (P("x"), {"w": P("x")}, NamedSharding(mesh, P("x"))):
    bound = plain.bind(bind_sources.load_source(source, shardings=given,
                                                mesh=mesh))
    const = bound.closed_jaxpr.consts[0]
    assert const.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 2)
  explicit = _mesh(jax.sharding.AxisType.Explicit)
  prog = jaxpr_io.trace(_apply, {"w": jax.device_put(
      W, NamedSharding(explicit, P("x")))}, jax.device_put(
          X, NamedSharding(explicit, P())))
  # The Explicit spec, on the mesh given (the program holds no concrete
  # mesh of its own here).
  const = prog.bind(bind_sources.load_source(
      source, mesh=explicit)).closed_jaxpr.consts[0]
  assert const.sharding.is_equivalent_to(NamedSharding(explicit, P("x")), 2)
  assert jax.typeof(const).sharding.spec == P("x", None)


def test_given_shardings_are_checked(tmp_path):
  source = _save_state(tmp_path, {"w": W})
  with pytest.raises(bind_sources.SourceError, match="pass mesh= too"):
    bind_sources.load_source(source, shardings=P("x"))
  with pytest.raises(bind_sources.SourceError, match="has the key 'v'"):
    bind_sources.load_source(source, shardings={"v": P("x")}, mesh=_mesh())
  with pytest.raises(bind_sources.SourceError, match="not int"):
    bind_sources.load_source(source, shardings=3)
  np.savez(tmp_path / "w.npz", **{"['w']": W})
  with pytest.raises(bind_sources.SourceError, match="Orbax checkpoints "
                     "only"):
    bind_sources.load_source(str(tmp_path / "w.npz"), shardings=P("x"),
                             mesh=_mesh())


def test_program_restore_binds_with_given_shardings(tmp_path):
  mesh = _mesh()
  plain = jaxpr_io.trace(_apply, {"w": W}, X)
  with ocp.CheckpointManager(tmp_path) as mngr:
    mngr.save(1, args=ocp.args.Composite(
        state=ocp.args.StandardSave({"params": {"w": W}}),
        program=jaxpr_io.orbax.ProgramSave(plain)))
    mngr.wait_until_finished()
    served = mngr.restore(1, args=ocp.args.Composite(
        program=jaxpr_io.orbax.ProgramRestore(
            bind={0: "state:params"}, bind_shardings={0: {"w": P("x")}},
            bind_mesh=mesh))).program
    with pytest.raises(ValueError, match="bind_shardings"):
      mngr.restore(1, args=ocp.args.Composite(
          program=jaxpr_io.orbax.ProgramRestore(
              bind={0: {"w": W}}, bind_shardings={0: P("x")})))
  const = served.closed_jaxpr.consts[0]
  assert const.sharding.is_equivalent_to(NamedSharding(mesh, P("x")), 2)
  # What the original computes on the same sharded weights.
  np.testing.assert_array_equal(np.asarray(served(X)), np.asarray(_apply(
      {"w": jax.device_put(W, NamedSharding(mesh, P("x")))}, X)))


def test_cli_bind_mesh_restores_the_explicit_specs(tmp_path, capsys):
  from jaxpr_io.tools import load as load_tool  # pylint: disable=g-import-not-at-top
  explicit = _mesh(jax.sharding.AxisType.Explicit)
  prog = jaxpr_io.trace(_apply, {"w": jax.device_put(
      W, NamedSharding(explicit, P("x")))}, jax.device_put(
          X, NamedSharding(explicit, P())))
  jaxpr_io.save(tmp_path / "p.jaxpr", prog)
  source = _save_state(tmp_path, {"w": W})
  out = tmp_path / "bound.jaxpr"
  assert load_tool.main([str(tmp_path / "p.jaxpr"), "--bind", f"0={source}",
                         "--bind-mesh", "x=8", "-o", str(out)]) == 0
  np.testing.assert_array_equal(
      np.asarray(jaxpr_io.load(out).closed_jaxpr.consts[0]), W)
  assert load_tool.main([str(tmp_path / "p.jaxpr"), "--bind", f"0={source}",
                         "--bind-mesh", "x=3"]) == 2
  assert "--bind-mesh x=3: a mesh of 3 devices" in capsys.readouterr().err
