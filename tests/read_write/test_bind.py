"""`Program.bind`: a program with some inputs fixed to arrays computes what
the original computes on them, differentiates in the rest, saves the
weights as its constants and re-dumps to identical bytes; a value that does
not match is refused naming the first mismatching key path."""

from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import jaxpr_io
import jaxpr_io.orbax
from jaxpr_io.api import bind_sources
from jaxpr_io.api import binding


def predict(params, x, *, scale):
  h = jnp.tanh(x @ params["dense"]["w"] + params["dense"]["b"])
  return {"y": h * scale, "norm": jnp.sum(h ** 2, axis=-1)}


def _params(seed=0):
  rng = np.random.RandomState(seed)
  return {"dense": {"w": rng.randn(4, 3).astype(np.float32),
                    "b": rng.randn(3).astype(np.float32)}}


X = np.random.RandomState(7).randn(5, 4).astype(np.float32)


def _close(actual, expected):
  for a, e in zip(jax.tree_util.tree_leaves(actual),
                  jax.tree_util.tree_leaves(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(e), rtol=1e-6,
                               atol=1e-6)


def _program():
  return jaxpr_io.trace(predict, _params(), X, scale=2.0)


def test_bind_params_computes_the_original_and_differentiates():
  params = _params(3)  # other values than the traced ones
  bound = _program().bind(params)
  assert [a.shape for a in bound.in_avals] == [(5, 4), ()]
  sig = bound.signature()
  assert "args[0]: float32[5,4]" in sig and "kwargs['scale']" in sig
  assert "dense" not in sig  # the weights are no inputs any more
  assert len(bound.closed_jaxpr.consts) == 2
  _close(bound(X, scale=0.5), predict(params, X, scale=0.5))
  # grad with respect to what is left: x and the keyword argument.
  loss = lambda p, x, s: jnp.sum(predict(p, x, scale=s)["y"] ** 2)  # noqa: E731
  g_x, g_s = jax.grad(
      lambda x, s: jnp.sum(bound(x, scale=s)["y"] ** 2), argnums=(0, 1))(
          X, 0.5)
  e_x, e_s = jax.grad(loss, argnums=(1, 2))(params, X, 0.5)
  _close((g_x, g_s), (e_x, e_s))
  # vmap over a batch of inputs, as for the original.
  xs = np.stack([X, X * 2])
  _close(jax.vmap(lambda x: bound(x, scale=2.0))(xs),
         jax.vmap(lambda x: predict(params, x, scale=2.0))(xs))


def test_bind_keyword_and_positional_like_partial():
  params = _params(1)
  bound = _program().bind(params, scale=3.0)
  assert bound.in_tree == jax.tree_util.tree_structure(((X,), {}))
  _close(bound(X), predict(params, X, scale=3.0))
  only_kw = _program().bind(scale=3.0)
  _close(only_kw(params, X), predict(params, X, scale=3.0))
  # Binding in two steps computes what binding at once does.
  _close(only_kw.bind(params)(X), bound(X))


def test_bound_program_saves_weights_and_redumps_identically(tmp_path):
  params = _params(2)
  bound = _program().bind(params)
  data = jaxpr_io.dumps(bound)
  assert data == jaxpr_io.dumps(_program().bind(_params(2)))  # deterministic
  # The same bytes whatever the arrays were (numpy, jax, another layout).
  as_jax = jax.tree_util.tree_map(jnp.asarray, params)
  assert jaxpr_io.dumps(_program().bind(as_jax)) == data
  path = tmp_path / "bound.jaxpr"
  jaxpr_io.save(path, bound)
  assert path.read_bytes() == data
  loaded = jaxpr_io.load(path, check=True)
  assert jaxpr_io.dumps(loaded) == data
  _close(loaded(X, scale=2.0), predict(params, X, scale=2.0))
  # The weights are in the data section: the bytes of w and b are there.
  for leaf in jax.tree_util.tree_leaves(params):
    assert leaf.tobytes() in data


def test_bind_accepts_any_structure_with_the_same_key_paths():
  params = _params(4)
  flax_core = pytest.importorskip("flax.core")
  frozen = flax_core.FrozenDict(params)
  flat = binding.FlatSource(
      {"['dense']['w']": params["dense"]["w"],
       "args[0]['dense']['b']": params["dense"]["b"]}, "test")
  expected = jaxpr_io.dumps(_program().bind(params))
  assert jaxpr_io.dumps(_program().bind(frozen)) == expected
  assert jaxpr_io.dumps(_program().bind(flat)) == expected


@pytest.mark.parametrize("value,message", [
    ({"dense": {"w": np.zeros((4, 3), np.float32)}},
     r"args\[0\]\['dense'\]\['b'\]: the program takes float32\[3\], the "
     r"source has nothing there"),
    ({"dense": {"w": np.zeros((4, 2), np.float32),
                "b": np.zeros(3, np.float32)}},
     r"args\[0\]\['dense'\]\['w'\]: the program takes float32\[4,3\], the "
     r"source has float32\[4,2\]"),
    ({"dense": {"w": np.zeros((4, 3), np.float64),
                "b": np.zeros(3, np.float32)}},
     r"args\[0\]\['dense'\]\['w'\]: the program takes float32\[4,3\], the "
     r"source has float64\[4,3\]"),
    ({"dense": {"w": np.zeros((4, 3), np.float32),
                "b": np.zeros(3, np.float32), "c": np.zeros(2, np.int32)}},
     r"args\[0\]\['dense'\]\['c'\]: the source has int32\[2\], which is "
     r"not an input"),
    ({"dense": {"w": "weights", "b": np.zeros(3, np.float32)}},
     r"args\[0\]\['dense'\]\['w'\]: the program takes float32\[4,3\], the "
     r"source has a str"),
])
def test_mismatch_names_first_key_path_expected_and_found(value, message):
  with pytest.raises(TypeError, match=message) as info:
    _program().bind(value)
  assert "\n" not in str(info.value)


def test_bind_argument_errors():
  prog = _program()
  with pytest.raises(TypeError, match="takes 2 positional arguments, 3"):
    prog.bind(_params(), X, X)
  with pytest.raises(TypeError, match="no keyword argument 'temperature'"):
    prog.bind(temperature=1.0)
  b, = jax.export.symbolic_shape("b")
  poly = jaxpr_io.trace(lambda w, x: x @ w,
                        jax.ShapeDtypeStruct((b, 3), np.float32),
                        jax.ShapeDtypeStruct((2, b), np.float32))
  with pytest.raises(jaxpr_io.UnsupportedError, match="symbolic dimensions"):
    poly.bind(np.zeros((4, 3), np.float32))
  # Symbolic dimensions in the remaining inputs are fine.
  poly_x = jaxpr_io.trace(lambda w, x: x @ w, np.ones((4, 3), np.float32),
                          jax.ShapeDtypeStruct((b, 4), np.float32))
  w = np.random.RandomState(0).randn(4, 3).astype(np.float32)
  for n in (1, 6):
    x = np.ones((n, 4), np.float32)
    _close(poly_x.bind(w)(x), x @ w)


def test_bind_a_loaded_program_keeps_the_stored_type_names():
  # A NamedTuple this process defines, loaded where it is not importable:
  # the plain container stands in, and the bound program saves the
  # original type name again.
  import collections  # pylint: disable=g-import-not-at-top
  Batch = collections.namedtuple("Batch", ["x", "mask"])
  Batch.__module__ = "no_such_module_anywhere"
  prog = jaxpr_io.trace(
      lambda p, batch: predict(p, batch.x * batch.mask, scale=1.0), _params(),
      Batch(X, np.ones_like(X)))
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  assert "no_such_module_anywhere" in loaded.signature()
  params = _params(5)
  bound_loaded = loaded.bind(params)
  bound_traced = prog.bind(params)
  assert jaxpr_io.dumps(bound_loaded) == jaxpr_io.dumps(bound_traced)
  _close(bound_loaded({"x": X, "mask": np.ones_like(X)}),
         predict(params, X, scale=1.0))


def test_to_exported_bakes_in_the_weights():
  from jaxpr_io import converters  # pylint: disable=g-import-not-at-top
  params = _params(6)
  exported = converters.to_exported(_program().bind(params, scale=2.0))
  assert [a.shape for a in exported.in_avals] == [(5, 4)]
  restored = jax.export.deserialize(exported.serialize())
  _close(restored.call(X), predict(params, X, scale=2.0))


def test_orbax_restore_binds_an_item_of_the_same_step(tmp_path):
  params = jax.tree_util.tree_map(jnp.asarray, _params(8))
  state = {"params": params, "step": np.int32(3)}
  prog = jaxpr_io.trace(lambda p, x: predict(p, x, scale=2.0), params, X)
  with ocp.CheckpointManager(tmp_path) as mngr:
    mngr.save(3, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        program=jaxpr_io.orbax.ProgramSave(prog)))
    mngr.wait_until_finished()
    served = mngr.restore(3, args=ocp.args.Composite(
        program=jaxpr_io.orbax.ProgramRestore(bind={0: "state:params"})))
    _close(served.program(X), predict(params, X, scale=2.0))
    assert served.program.in_tree == jax.tree_util.tree_structure(((X,), {}))
    # A pytree value binds as it is.
    given = mngr.restore(3, args=ocp.args.Composite(
        program=jaxpr_io.orbax.ProgramRestore(bind={0: _params(9)})))
    _close(given.program(X), predict(_params(9), X, scale=2.0))
    with pytest.raises(TypeError, match=r"args\[0\]\['dense'\]\['w'\]"):
      mngr.restore(3, args=ocp.args.Composite(
          program=jaxpr_io.orbax.ProgramRestore(
              bind={0: {"dense": {"w": np.zeros(3, np.float32),
                                  "b": np.zeros(3, np.float32)}}})))


try:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
except ImportError:
  tf = None


@pytest.mark.skipif(tf is None, reason="needs TensorFlow")
def test_saved_model_of_a_bound_100mib_model_keeps_weights_in_variables(
    tmp_path):
  from jaxpr_io import converters  # pylint: disable=g-import-not-at-top
  n = 100 * 2**20 // 4 // 1024
  w = np.random.RandomState(0).randn(n, 1024).astype(np.float32)  # 100 MiB
  assert w.nbytes == 100 * 2**20
  prog = jaxpr_io.trace(lambda params, x: params["w"] @ x,
                        {"w": jax.ShapeDtypeStruct(w.shape, w.dtype)},
                        np.ones(1024, np.float32))
  converters.to_saved_model(prog.bind({"w": w}), tmp_path / "sm")
  assert os.path.getsize(tmp_path / "sm" / "saved_model.pb") < 2**20
  var_bytes = sum(os.path.getsize(tmp_path / "sm" / "variables" / f)
                  for f in os.listdir(tmp_path / "sm" / "variables"))
  assert var_bytes >= 100 * 2**20
  serve = tf.saved_model.load(str(tmp_path / "sm")).signatures[
      "serving_default"]
  _, specs = serve.structured_input_signature
  assert list(specs) == ["arg0"] and specs["arg0"].shape == (1024,)
  x = np.random.RandomState(1).randn(1024).astype(np.float32)
  np.testing.assert_allclose(serve(arg0=x)["out0"].numpy(), w @ x,
                             rtol=1e-4, atol=1e-3)


def test_converters_refuse_unknown_platforms():
  from jaxpr_io import converters  # pylint: disable=g-import-not-at-top
  with pytest.raises(ValueError, match="unknown platform 'gpu': valid "
                     "platforms are cpu, cuda, rocm, tpu"):
    converters.to_exported(_program(), platforms=("cpu", "gpu"))


# ------------------------------------------------- key data for typed keys
def _noisy(key, x):
  return x + jax.random.normal(key, x.shape)


@pytest.mark.parametrize("impl,data_shape", [("threefry2x32", (2,)),
                                             ("rbg", (4,))])
def test_key_data_binds_as_a_key_of_the_programs_impl(impl, data_shape,
                                                       tmp_path):
  key = jax.random.key(5, impl=impl)
  prog = jaxpr_io.trace(_noisy, key, X)
  data = np.asarray(jax.random.key_data(key))
  assert data.shape == data_shape and data.dtype == np.uint32
  bound = prog.bind(data)
  np.testing.assert_array_equal(np.asarray(bound(X)),
                                np.asarray(_noisy(key, X)))
  (const,) = bound.closed_jaxpr.consts
  assert jax.random.key_impl(const) == jax.random.key_impl(key)
  # The same bytes as binding the key itself; they load and re-dump.
  assert jaxpr_io.dumps(bound) == jaxpr_io.dumps(prog.bind(key))
  loaded = jaxpr_io.loads(jaxpr_io.dumps(bound), check=True)
  np.testing.assert_array_equal(np.asarray(loaded(X)),
                                np.asarray(_noisy(key, X)))
  # From an .npz (what `jaxpr-load --bind` reads), read once matched.
  np.savez(tmp_path / "key.npz", **{"args[0]": data})
  from_npz = prog.bind(bind_sources.load_source(str(tmp_path / "key.npz")))
  assert jaxpr_io.dumps(from_npz) == jaxpr_io.dumps(bound)
  # A batch of keys: the key shape, then the key data's.
  keys = jax.random.split(key, 3)
  batch = jaxpr_io.trace(lambda k, x: jax.vmap(_noisy, (0, None))(k, x),
                         keys, X)
  np.testing.assert_array_equal(
      np.asarray(batch.bind(np.asarray(jax.random.key_data(keys)))(X)),
      np.asarray(jax.vmap(_noisy, (0, None))(keys, X)))


@pytest.mark.parametrize("impl,value,found", [
    ("threefry2x32", np.zeros(4, np.uint32), r"uint32\[4\]"),
    ("threefry2x32", np.zeros(2, np.int32), r"int32\[2\]"),
    ("threefry2x32", np.zeros((1, 2), np.uint32), r"uint32\[1,2\]"),
    ("rbg", np.zeros(2, np.uint32), r"uint32\[2\]"),
])
def test_key_data_of_another_impl_or_shape_is_refused(impl, value, found):
  key = jax.random.key(0, impl=impl)
  prog = jaxpr_io.trace(_noisy, key, X)
  expected = "uint32[2]" if impl == "threefry2x32" else "uint32[4]"
  with pytest.raises(TypeError) as info:
    prog.bind(value)
  message = str(info.value)
  assert "\n" not in message
  assert message.startswith(f"bind args[0]: the program takes "
                            f"{prog.in_avals[0].str_short()} (impl {impl}), "
                            f"whose key data is {expected}; the source has ")
  assert re.search(found + "$", message), message
  # A typed key of another impl is refused as before.
  other = "rbg" if impl == "threefry2x32" else "threefry2x32"
  with pytest.raises(TypeError, match=r"bind args\[0\]: the program takes"):
    prog.bind(jax.random.key(0, impl=other))
