"""`Program.specialize(b=1)` and `jaxpr-load --dims b=1` (issue 37): a
symbolic program with some dimensions fixed computes what the original
computes at those sizes, saves, loads and re-dumps identically, keeps the
others symbolic with the constraints left on them, and refuses sizes that
violate a constraint naming it. `--dims b=1 --to-tflite` of a ViT-like
program, whose gather along the batch LiteRT cannot take symbolically,
gives a model that runs in LiteRT."""

from __future__ import annotations

import importlib.util
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.tools import load as load_tool

B, C = jax.export.symbolic_shape(
    "b, c", constraints=("b >= c", "c >= 2", "b <= 10"))


def _fn(x, y):
  return {"rows": jnp.sum(x, axis=1)[:, None] * y[:1, :2].sum(),
          "size": x.shape[0] * jnp.ones((), jnp.float32)}


def _program():
  return jaxpr_io.trace(_fn, jax.ShapeDtypeStruct((B, 3), np.float32),
                        jax.ShapeDtypeStruct((C, 4), np.float32))


def _inputs(b, c):
  rng = np.random.RandomState(b * 10 + c)
  return (rng.randn(b, 3).astype(np.float32),
          rng.randn(c, 4).astype(np.float32))


def _same(actual, expected):
  for a, e in zip(jax.tree_util.tree_leaves(actual),
                  jax.tree_util.tree_leaves(expected)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(e))


@pytest.mark.parametrize("sizes", [dict(b=3, c=2), dict(b=5, c=5)])
def test_fixing_every_dimension_computes_the_original(sizes):
  prog = _program().specialize(**sizes)
  shapes = [a.shape for a in prog.in_avals]
  assert shapes == [(sizes["b"], 3), (sizes["c"], 4)]
  x, y = _inputs(sizes["b"], sizes["c"])
  expected = jax.jit(_fn)(x, y)
  _same(prog(x, y), expected)
  data = jaxpr_io.dumps(prog)
  loaded = jaxpr_io.loads(data, check=True)
  assert jaxpr_io.dumps(loaded) == data
  assert str(loaded) == str(prog)
  _same(loaded(x, y), expected)
  with pytest.raises(TypeError, match="shape"):
    prog(*_inputs(sizes["b"] + 1, sizes["c"]))


@pytest.mark.parametrize("b", [1, 3])
def test_fixing_the_batch_keeps_the_rest_symbolic(b):
  batch, = jax.export.symbolic_shape("b")
  w = np.random.RandomState(0).randn(3, 2).astype(np.float32)
  fn = lambda x: jnp.take(jnp.tanh(x @ w), 0, axis=1)  # noqa: E731
  prog = jaxpr_io.trace(fn, jax.ShapeDtypeStruct((batch, 3), np.float32))
  fixed = prog.specialize(b=b)
  assert fixed.in_avals[0].shape == (b, 3)
  x = np.random.RandomState(b).randn(b, 3).astype(np.float32)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(fixed), check=True)
  _same(loaded(x), jax.jit(fn)(x))
  _same(loaded(x), prog(x))


def test_fixing_some_dimensions_carries_the_constraints_over():
  prog = _program().specialize(c=2)
  x_aval, y_aval = prog.in_avals
  assert y_aval.shape == (2, 4) and str(x_aval.shape[0]) == "b"
  data = jaxpr_io.dumps(prog)
  loaded = jaxpr_io.loads(data, check=True)
  assert jaxpr_io.dumps(loaded) == data
  for b in (2, 7):
    x, y = _inputs(b, 2)
    _same(loaded(x, y), jax.jit(_fn)(x, y))
  # The constraints left on b hold in the specialized program: b >= c is
  # now b >= 2, b <= 10 stays.
  for b in (1, 11):
    with pytest.raises(ValueError, match="constraint"):
      loaded(*_inputs(b, 2))


@pytest.mark.parametrize("sizes,violated", [
    (dict(b=11), "b <= 10"),
    (dict(c=1), "c >= 2"),
    (dict(b=2, c=3), "b >= c"),
])
def test_a_violated_constraint_is_refused_naming_it(sizes, violated):
  with pytest.raises(ValueError) as info:
    _program().specialize(**sizes)
  message = str(info.value)
  assert f"constraint {violated!r}" in message and "\n" not in message


def test_sizes_that_leave_no_size_for_the_others_are_refused():
  # b=1 turns b >= c into 1 >= c, which c >= 2 contradicts.
  with pytest.raises(ValueError) as info:
    _program().specialize(b=1)
  message = str(info.value)
  assert message.startswith("b=1 leaves no size for c under the program's "
                            "constraints, which become 1 >= c, c >= 2")
  assert "\n" not in message


def test_unknown_names_and_bad_sizes_are_refused():
  with pytest.raises(TypeError, match=r"'n' is not a symbolic dimension of "
                     r"the program's inputs \(it has: b, c\)"):
    _program().specialize(n=2)
  with pytest.raises(ValueError, match="an int >= 1"):
    _program().specialize(b=0)
  concrete = jaxpr_io.trace(jnp.sin, np.ones(3, np.float32))
  with pytest.raises(TypeError, match=r"\(it has: none\)"):
    concrete.specialize(b=1)


def test_specialized_weights_can_be_bound():
  # bind refuses inputs with symbolic dimensions; fixed first, they bind.
  n, = jax.export.symbolic_shape("n")
  prog = jaxpr_io.trace(lambda w, x: x @ w,
                        jax.ShapeDtypeStruct((n, 3), np.float32),
                        jax.ShapeDtypeStruct((2, n), np.float32))
  w = np.random.RandomState(1).randn(4, 3).astype(np.float32)
  with pytest.raises(jaxpr_io.UnsupportedError, match="Program.specialize"):
    prog.bind(w)
  x = np.ones((2, 4), np.float32)
  _same(prog.specialize(n=4).bind(w)(x), x @ w)


# ------------------------------------------------------------ --dims
def _cli(capsys, *args):
  capsys.readouterr()
  status = load_tool.main([str(a) for a in args])
  out = capsys.readouterr()
  return status, out.out, out.err


def test_cli_dims(tmp_path, capsys):
  jaxpr_io.save(tmp_path / "p.jaxpr", _program())
  x, y = _inputs(4, 3)
  np.savez(tmp_path / "in.npz", arg0=x, arg1=y)
  status, out, err = _cli(capsys, tmp_path / "p.jaxpr", "--dims", "b=4, c=3",
                          "--run", tmp_path / "in.npz", "--out",
                          tmp_path / "out.npz", "-o", tmp_path / "s.jaxpr")
  assert status == 0, err
  outs = np.load(tmp_path / "out.npz")
  expected = jax.jit(_fn)(x, y)
  np.testing.assert_array_equal(outs["out0"], expected["rows"])
  np.testing.assert_array_equal(outs["out1"], expected["size"])
  assert [a.shape for a in jaxpr_io.load(tmp_path / "s.jaxpr").in_avals] == [
      (4, 3), (3, 4)]
  _, out, _ = _cli(capsys, tmp_path / "p.jaxpr", "--dims", "c=3")
  assert "float32[b,3]" in out and "float32[3,4]" in out
  for dims, message in (("b=2,c=3", "violates the program's constraint "
                                    "'b >= c'"),
                        ("n=1", "'n' is not a symbolic dimension"),
                        ("b", "bad --dims item 'b'"),
                        ("b=\u00b2", "bad --dims item 'b=\u00b2'"),
                        ("b=1,b=2", "fixes b twice")):
    status, _, err = _cli(capsys, tmp_path / "p.jaxpr", "--dims", dims)
    errors = [l for l in err.splitlines()
              if l.startswith("jaxpr-load: error: ")]
    assert status == 2 and len(errors) == 1, err
    assert message in errors[0]


def _vit_like():
  """A ViT-shaped program of a symbolic batch: patches embedded, a class
  token prepended, one attention layer, the class token taken with
  `jnp.take` along the tokens (a gather whose slice spans the batch: the
  `dynamic_gather` LiteRT lacks)."""
  rng = np.random.RandomState(0)
  w = {"embed": rng.randn(12, 16).astype(np.float32) * 0.3,
       "cls": rng.randn(1, 1, 16).astype(np.float32),
       "qkv": rng.randn(16, 48).astype(np.float32) * 0.3,
       "head": rng.randn(16, 5).astype(np.float32) * 0.3}

  def vit(images):
    b = images.shape[0]
    h = images.reshape(b, 8, 12) @ w["embed"]
    h = jnp.concatenate([jnp.broadcast_to(w["cls"], (b, 1, 16)), h], axis=1)
    q, k, v = jnp.split(h @ w["qkv"], 3, axis=-1)
    a = jax.nn.softmax(q @ k.transpose(0, 2, 1) / 4.0, axis=-1)
    h = h + jax.nn.gelu(a @ v)
    return jnp.take(h, 0, axis=1) @ w["head"]
  batch, = jax.export.symbolic_shape("b")
  return vit, jaxpr_io.trace(vit, jax.ShapeDtypeStruct((batch, 8, 12),
                                                       np.float32))


@pytest.mark.skipif(
    any(importlib.util.find_spec(m) is None
        for m in ("tensorflow", "ai_edge_litert"))
    and not os.environ.get("JAXPR_IO_REQUIRE_RUNTIMES"),
    reason="needs tensorflow and ai_edge_litert")
def test_cli_dims_to_tflite_of_a_symbolic_batch_vit(tmp_path, capsys):
  from jaxpr_io import converters  # pylint: disable=g-import-not-at-top
  vit, prog = _vit_like()
  jaxpr_io.save(tmp_path / "vit.jaxpr", prog)
  # Without --dims: LiteRT's converter refuses the symbolic gather, and the
  # message says how to fix the batch.
  status, _, err = _cli(capsys, tmp_path / "vit.jaxpr", "--to-tflite",
                        tmp_path / "sym.tflite")
  assert status == 1 and "dynamic_gather" in err, err
  assert "jaxpr-load --dims b=1" in err
  x = np.random.RandomState(1).randn(1, 8, 12).astype(np.float32)
  np.savez(tmp_path / "x.npz", arg0=x)
  status, out, err = _cli(capsys, tmp_path / "vit.jaxpr", "--dims", "b=1",
                          "--to-tflite", tmp_path / "vit.tflite", "--run",
                          tmp_path / "x.npz")
  assert status == 0, err
  assert "verified in the LiteRT interpreter" in out
  (got,) = converters.run_tflite(tmp_path / "vit.tflite", [x])
  np.testing.assert_allclose(got, jax.jit(vit)(x), rtol=1e-4, atol=1e-4)


def test_an_equality_whose_left_side_becomes_a_size_is_carried_over():
  # max(a, b) == c at a=2, b=3 is 3 == c, whose left side JAX's equality
  # constraints do not take: c stays symbolic, held to 3.
  a, b, c = jax.export.symbolic_shape("a, b, c",
                                      constraints=("max(a, b) == c",))
  fn = lambda x, y, z: x.sum() + y.sum() * z.sum()  # noqa: E731
  prog = jaxpr_io.trace(fn, *(jax.ShapeDtypeStruct((d,), np.float32)
                              for d in (a, b, c)))
  fixed = prog.specialize(a=2, b=3)
  assert str(fixed.in_avals[2].shape[0]) == "c"
  loaded = jaxpr_io.loads(jaxpr_io.dumps(fixed), check=True)
  args = [np.arange(n, dtype=np.float32) + 1 for n in (2, 3, 3)]
  _same(loaded(*args), jax.jit(fn)(*args))
  _same(loaded(*args), prog(*args))
  for n in (2, 4):
    with pytest.raises(ValueError, match="constraint"):
      loaded(*[np.ones(k, np.float32) for k in (2, 3, n)])
