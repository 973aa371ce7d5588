"""Shape-polymorphic programs whose transformations call rules (issue 27):
a program traced with a symbolic batch, just traced or loaded, is
specialized to the arguments' sizes when called, and so are the rules JAX
calls later (custom_jvp's JVP rule, custom_vjp's forward and backward
rules, custom_vmap's rule); converters see the program in their own
symbolic scope. Each result is compared with the original function at the
same sizes.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import converters

_rng = np.random.RandomState(27)
W = _rng.randn(3, 8).astype(np.float32)


def _symbolic(*names):
  return jax.export.symbolic_shape(", ".join(names))


def _both(fn, *specs):
  """The program just traced, and loaded back."""
  prog = jaxpr_io.trace(fn, *specs)
  return {"traced": prog, "loaded": jaxpr_io.loads(jaxpr_io.dumps(prog))}


def relu_loss(w, x):
  return jnp.sum(jax.nn.relu(x @ w))


@pytest.mark.parametrize("which", ["traced", "loaded"])
def test_grad_of_relu_at_a_symbolic_batch(which):
  # The 4-line case of issue 27: "Error refining shapes" eagerly, "select
  # cases must have the same shapes" under jit.
  b, = _symbolic("b")
  prog = _both(relu_loss, W, jax.ShapeDtypeStruct((b, 3), jnp.float32))[which]
  for n in (1, 5):
    x = _rng.randn(n, 3).astype(np.float32)
    expected = jax.grad(relu_loss, argnums=(0, 1))(W, x)
    for grad in (jax.grad(prog, argnums=(0, 1)),
                 jax.jit(jax.grad(prog, argnums=(0, 1)))):
      np.testing.assert_array_equal(grad(W, x)[0], expected[0])
      np.testing.assert_array_equal(grad(W, x)[1], expected[1])
    np.testing.assert_array_equal(
        jax.jvp(lambda x: prog(W, x), (x,), (jnp.ones_like(x),))[1],
        jax.jvp(lambda x: relu_loss(W, x), (x,), (jnp.ones_like(x),))[1])


@jax.custom_vjp
def _scaled_sin(x, y):
  return jnp.sin(x) * y


def _fwd(x, y):
  return jnp.sin(x) * y, (jnp.cos(x), y)


def _bwd(res, ct):
  cos, y = res
  return (cos * y * ct, None)  # no cotangent for y: a symbolic zero


_scaled_sin.defvjp(_fwd, _bwd)


@pytest.mark.parametrize("which", ["traced", "loaded"])
def test_grad_of_custom_vjp_at_a_symbolic_batch(which):
  def f(x, y):
    return jnp.sum(_scaled_sin(x, y) ** 2)
  b, = _symbolic("b")
  spec = jax.ShapeDtypeStruct((b, 3), jnp.float32)
  prog = _both(f, spec, spec)[which]
  for n in (2, 4):
    x, y = (_rng.randn(n, 3).astype(np.float32) for _ in range(2))
    expected = jax.grad(f, argnums=(0, 1))(x, y)
    actual = jax.jit(jax.grad(prog, argnums=(0, 1)))(x, y)
    np.testing.assert_array_equal(actual[0], expected[0])
    np.testing.assert_array_equal(actual[1], expected[1])


def test_sequential_vmap_at_a_symbolic_batch():
  # sequential_vmap's rule maps the function itself: stored as that map of
  # the equation's call, at the program's symbolic batch and at a fixed one.
  @jax.custom_batching.sequential_vmap
  def row_norm(v):
    return jnp.sqrt(jnp.sum(v * v))

  def f(x):
    return jax.vmap(row_norm)(x) * 2.0
  b, = _symbolic("b")
  loaded = _both(f, jax.ShapeDtypeStruct((b, 3), jnp.float32))["loaded"]
  fixed = _both(row_norm, jax.ShapeDtypeStruct((3,), jnp.float32))["loaded"]
  for n in (1, 4):
    x = _rng.randn(n, 3).astype(np.float32)
    np.testing.assert_array_equal(loaded(x), f(x))
    np.testing.assert_array_equal(jax.vmap(loaded)(x[None]),
                                  jax.vmap(f)(x[None]))
    np.testing.assert_array_equal(jax.vmap(fixed)(x), jax.vmap(row_norm)(x))


def test_custom_vmap_rule_with_the_programs_symbolic_dims():
  # The rule is traced with its axis size in the program's own scope, and
  # specialized with both the program's sizes and the axis size.
  @jax.custom_batching.custom_vmap
  def scale_rows(x):
    return x * 2.0

  @scale_rows.def_vmap
  def _rule(axis_size, in_batched, x):
    del axis_size
    return x * 2.0 + 0.0 * jnp.sum(x, axis=-1, keepdims=True), in_batched[0]

  def f(x):
    return scale_rows(x).sum(axis=0)
  b, = _symbolic("b")
  loaded = _both(f, jax.ShapeDtypeStruct((b, 3), jnp.float32))["loaded"]
  x = _rng.randn(2, 5, 3).astype(np.float32)
  np.testing.assert_array_equal(jax.vmap(loaded)(x), jax.vmap(f)(x))


def test_a_loaded_program_exports_in_another_scope():
  # jax.export with the caller's own symbolic shapes (another scope): the
  # program is re-expressed in it.
  b, = _symbolic("b")
  loaded = _both(lambda x: jnp.tanh(x[:, None] * 2.0),
                 jax.ShapeDtypeStruct((b, 3), jnp.float32))["loaded"]
  c, = _symbolic("c")
  exp = jax.export.export(jax.jit(loaded))(
      jax.ShapeDtypeStruct((c, 3), jnp.float32))
  assert str(exp.out_avals[0].shape[0]) == "c"
  x = _rng.randn(4, 3).astype(np.float32)
  np.testing.assert_array_equal(exp.call(x), jnp.tanh(x[:, None] * 2.0))


def _equinox_conv():
  eqx = pytest.importorskip("equinox")
  conv = eqx.nn.Conv2d(1, 2, 3, key=jax.random.key(0))
  return jax.vmap(conv), (1, 6, 6)  # adds and removes the channel axis


@pytest.mark.parametrize("make", [
    lambda: (lambda x: x[:, None], (3,)),
    lambda: (lambda x: jnp.expand_dims(x, 1) * x.shape[0], (3,)),
    _equinox_conv], ids=["new_axis", "new_axis_times_dim", "equinox_conv"])
def test_saved_model_of_a_symbolic_program_that_adds_an_axis(make, tmp_path):
  tf = pytest.importorskip("tensorflow")
  fn, shape = make()
  b, = _symbolic("b")
  loaded = _both(fn, jax.ShapeDtypeStruct((b, *shape), jnp.float32))[
      "loaded"]
  converters.to_saved_model(loaded, tmp_path / "m")
  serve = tf.saved_model.load(str(tmp_path / "m")).signatures[
      "serving_default"]
  for n in (1, 4):
    x = _rng.randn(n, *shape).astype(np.float32)
    np.testing.assert_allclose(serve(arg0=tf.constant(x))["out0"].numpy(),
                               jax.jit(fn)(x), rtol=1e-6, atol=1e-6)


def test_vmap_of_bfloat16_pad_at_a_symbolic_batch():
  # JAX's `vmap_pad` harness (bfloat16, padding value an argument) from the
  # shape-polymorphism campaign. Its vmap step once fed the loaded program
  # float32 (numpy promotes bfloat16 * 0.5), which the original retraces at
  # and the stored program cannot take; at bfloat16 both agree.
  def f(x, v):
    return jax.lax.pad(x, v, ((0, 0, 0), (1, 1, 0), (2, 2, 0)))
  b, = _symbolic("b")
  loaded = _both(f, jax.ShapeDtypeStruct((b, 2, 3), jnp.bfloat16),
                 jax.ShapeDtypeStruct((), jnp.bfloat16))["loaded"]
  x = _rng.randn(2, 3, 2, 3).astype(jnp.bfloat16)
  v = _rng.randn(2).astype(jnp.bfloat16)
  np.testing.assert_array_equal(jax.vmap(loaded)(x, v), jax.vmap(f)(x, v))
  np.testing.assert_array_equal(jax.vmap(loaded, in_axes=(0, None))(x, v[0]),
                                jax.vmap(f, in_axes=(0, None))(x, v[0]))
  with pytest.raises(TypeError, match="bfloat16"):
    jax.vmap(loaded)(x.astype(np.float32), v)


@pytest.mark.parametrize("odd", [False, True])
def test_same_padding_of_a_symbolic_size_at_stride_2(odd):
  # JAX's `conv_general_dilated_1d_stride_2_even`/`_odd` harnesses from
  # the shape-polymorphism campaign: "SAME" padding of a symbolic length at
  # stride 2 is symbolic (floordiv(...)), a kind the param schema lacked,
  # so the file was refused at load.
  def f(lhs, rhs):
    return jax.lax.conv_general_dilated(
        lhs, rhs, window_strides=(2,), padding="SAME",
        dimension_numbers=jax.lax.ConvDimensionNumbers(
            lhs_spec=(0, 2, 1), rhs_spec=(2, 1, 0), out_spec=(0, 2, 1)))
  b, = _symbolic("b")
  loaded = _both(f, jax.ShapeDtypeStruct((1, b, 16), jnp.float32),
                 jax.ShapeDtypeStruct((4, 16, 16), jnp.float32))["loaded"]
  rhs = _rng.randn(4, 16, 16).astype(np.float32)
  for n in (13, 15) if odd else (12, 14):
    lhs = _rng.randn(1, n, 16).astype(np.float32)
    np.testing.assert_array_equal(jax.jit(loaded)(lhs, rhs),
                                  jax.jit(f)(lhs, rhs))


def test_top_k_of_a_symbolic_count():
  # JAX's `lax_top_k` harness: k = x.shape[-1] - 1 is symbolic (b - 1), a
  # kind the param schema lacked, so the file was refused at load.
  f = lambda x: jax.lax.top_k(x, x.shape[-1] - 1)
  b, = _symbolic("b")
  loaded = _both(f, jax.ShapeDtypeStruct((b,), jnp.float32))["loaded"]
  for n in (5, 16):
    x = _rng.randn(n).astype(np.float32)
    for got, want in zip(jax.jit(loaded)(x), jax.jit(f)(x)):
      np.testing.assert_array_equal(got, want)


def test_approx_top_k_under_vmap():
  # JAX's `vmap_approx_top_k` harness: vmap turns approx_top_k's
  # reduction_dimension -1 into 1, a value the param schema lacked.
  f = jax.vmap(lambda x: jax.lax.approx_max_k(x, 4))
  b, = _symbolic("b")
  loaded = _both(f, jax.ShapeDtypeStruct((b, 32), jnp.float32))["loaded"]
  x = _rng.randn(3, 32).astype(np.float32)
  for got, want in zip(jax.jit(loaded)(x), jax.jit(f)(x)):
    np.testing.assert_array_equal(got, want)


def _tril_gather(x):
  i, j = jnp.tril_indices(x.shape[0])
  return x[i, j]


def _triu_rows(x):
  i, j = jnp.triu_indices(x.shape[0], m=x.shape[0] + 1)
  return x[i, j] * i


def _arange_inside(x):
  # The program holds `2*n`, which no argument's shape is.
  return x + jnp.arange(2 * x.shape[0]).reshape(-1, 2).sum(1).astype(x.dtype)


@pytest.mark.parametrize("which", ["traced", "loaded"])
@pytest.mark.parametrize("fn, shape", [
    (_tril_gather, lambda n, m: (n, n)),
    (_triu_rows, lambda n, m: (n, n + 1)),
    (_arange_inside, lambda n, m: (n,)),
], ids=["tril_indices", "triu_indices", "arange_inside"])
def test_dimensions_that_no_argument_carries(fn, shape, which):
  # Issue 37: jnp.tril_indices(n) of a symbolic n binds (from JAX 0.11)
  # nonzero's hi primitive with size=floordiv(n^2 - n, 2), a dimension of
  # no argument; the program failed with UnexpectedDimVar eagerly and under
  # vmap, and with a broadcast error under jit, where jax.export worked.
  n, m = _symbolic("n", "m")
  spec = jax.ShapeDtypeStruct(shape(n, m), jnp.float32)
  prog = _both(fn, spec)[which]
  exported = jax.export.export(jax.jit(fn))(spec)
  ours = converters.to_exported(prog)
  assert str(ours.in_avals) == str(exported.in_avals)
  assert str(ours.out_avals) == str(exported.out_avals)
  c, d = _symbolic("c", "d")  # the caller's own scope
  other = jax.export.export(jax.jit(prog))(
      jax.ShapeDtypeStruct(shape(c, d), jnp.float32))
  for sizes in ((3, 5), (6, 4)):
    x = _rng.randn(*shape(*sizes)).astype(np.float32)
    want = jax.jit(fn)(x)
    np.testing.assert_array_equal(exported.call(x), want)
    for got in (prog(x), jax.jit(prog)(x), ours.call(x), other.call(x)):
      np.testing.assert_array_equal(got, want)
    xs = np.stack([x, 2 * x])
    np.testing.assert_array_equal(jax.vmap(prog)(xs), jax.vmap(fn)(xs))
