"""Static leaves: `trace` takes pytrees with non-array leaves (an Equinox
module's activation functions) with no partitioning, as
`eqx.filter_make_jaxpr` does; the leaves are no inputs, the signature
records them, and the loaded program is called with the same module or
with its array leaves only, in this process or in one without the model."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.pytree import static

eqx = pytest.importorskip("equinox")


def loss(model, x):
  return jnp.mean(jax.vmap(model)(x) ** 2)


def _model(activation=jax.nn.relu):
  return eqx.nn.MLP(4, 2, 8, 2, activation=activation,
                    key=jax.random.PRNGKey(0))


X = np.random.RandomState(0).randn(5, 4).astype(np.float32)
XS = np.random.RandomState(1).randn(3, 5, 4).astype(np.float32)
TOL = dict(rtol=1e-6, atol=1e-6)


def _close(actual, expected):
  a, e = jax.tree_util.tree_leaves(actual), jax.tree_util.tree_leaves(expected)
  assert len(a) == len(e)
  for u, v in zip(a, e):
    np.testing.assert_allclose(np.asarray(u), np.asarray(v), **TOL)


def test_non_array_leaves_are_static_and_recorded():
  model = _model()
  prog = jaxpr_io.trace(loss, model, X)
  # Inputs: the six weight and bias arrays and x; no function.
  n_arrays = len(jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array)))
  assert len(prog.in_avals) == n_arrays + 1 == 7
  sig = prog.signature()
  assert "static (not inputs" in sig
  assert "args[0]['activation']: jax._src.nn.functions.relu" in sig
  data = jaxpr_io.dumps(prog)
  assert data == jaxpr_io.dumps(jaxpr_io.trace(loss, _model(), X))
  loaded = jaxpr_io.loads(data)
  assert jaxpr_io.dumps(loaded) == data
  assert "args[0]['activation']: jax._src.nn.functions.relu" in (
      loaded.signature())
  # The same module, its array leaves only, and filter_grad all work.
  _close(loaded(model, X), loss(model, X))
  _close(loaded(eqx.filter(model, eqx.is_array), X), loss(model, X))
  _close(eqx.filter_grad(loaded)(model, X), eqx.filter_grad(loss)(model, X))
  # Another activation is other static data: the program was not traced
  # for it.
  with pytest.raises(TypeError, match="static data.*relu.*tanh"):
    loaded(_model(jax.nn.tanh), X)


def test_static_descriptions_are_stable():
  assert static.describe(jax.nn.relu).endswith(".relu")
  assert static.describe("same") == "'same'"
  assert "0x" not in static.describe(object())
  assert not static.is_dynamic(jax.nn.relu)
  for x in (1.0, 2, True, np.float32(1), np.ones(2),
            jax.ShapeDtypeStruct((2,), np.float32), jnp.ones(2)):
    assert static.is_dynamic(x)


_FRESH = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    import jaxpr_io

    prog = jaxpr_io.load(sys.argv[1])
    with np.load(sys.argv[2]) as data:
      leaves = [data[f"arg{i}"] for i in range(len(data.files))]
    xs = np.load(sys.argv[3])
    (model, x), _ = jax.tree_util.tree_unflatten(prog.in_tree, leaves)
    grads = jax.grad(prog)(model, x)
    per_batch = jax.vmap(lambda xb: prog(model, xb))(xs)
    # The model code is not imported; Equinox is, from jaxpr_io's library
    # table, so the module comes back as itself.
    assert not any(m.startswith("tests") for m in sys.modules), "model code"
    assert type(model).__module__ == "equinox.nn._mlp", type(model)
    out = {f"g{i}": g for i, g in enumerate(jax.tree_util.tree_leaves(grads))}
    np.savez(sys.argv[4], vmap=np.asarray(per_batch), **out)
""")


def test_equinox_mlp_saved_and_used_in_a_fresh_process(tmp_path):
  model = _model()
  path = tmp_path / "loss.jaxpr"
  jaxpr_io.save(path, jaxpr_io.trace(loss, model, X))
  leaves = jax.tree_util.tree_leaves((eqx.filter(model, eqx.is_array), X))
  np.savez(tmp_path / "in.npz",
           **{f"arg{i}": np.asarray(v) for i, v in enumerate(leaves)})
  np.save(tmp_path / "xs.npy", XS)
  (tmp_path / "fresh.py").write_text(_FRESH)
  subprocess.run(
      [sys.executable, str(tmp_path / "fresh.py"), str(path),
       str(tmp_path / "in.npz"), str(tmp_path / "xs.npy"),
       str(tmp_path / "out.npz")],
      check=True, capture_output=True, timeout=300, cwd=tmp_path)
  with np.load(tmp_path / "out.npz") as out:
    grads = [out[f"g{i}"] for i in range(len(out.files) - 1)]
    per_batch = out["vmap"]
  expected = eqx.filter_grad(loss)(model, X)
  _close(grads, jax.tree_util.tree_leaves(expected))
  _close(per_batch, jax.vmap(lambda xb: loss(model, xb))(XS))


def test_bind_an_equinox_module():
  # Its arrays become constants; its functions are the static leaves the
  # program was traced with.
  model = _model()
  prog = jaxpr_io.trace(loss, model, X)
  bound = prog.bind(model)
  assert [a.shape for a in bound.in_avals] == [X.shape]
  _close(bound(X), loss(model, X))
  _close(jax.grad(bound)(X), jax.grad(lambda x: loss(model, x))(X))
  loaded_bound = jaxpr_io.loads(jaxpr_io.dumps(prog)).bind(model)
  assert jaxpr_io.dumps(loaded_bound) == jaxpr_io.dumps(bound)
