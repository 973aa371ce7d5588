"""A zoo of small programs built of first-order primitives and of `jit`,
`cond`, `while`, `scan` and `remat`: the round-trip fixtures.

Each entry is (fn, args, kwargs): `args` are example inputs. Transformations
are applied over the first argument.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

_rng = np.random.RandomState(0)
W1 = _rng.randn(8, 16).astype(np.float32)
B1 = _rng.randn(16).astype(np.float32)
W2 = _rng.randn(16, 4).astype(np.float32)
W_RNN = _rng.randn(8, 8).astype(np.float32)
KERNEL = _rng.randn(3, 3, 1, 2).astype(np.float32)


def mlp(x):
  return jnp.tanh(x @ W1 + B1) @ W2


@jax.jit
def _inner(x):
  return jnp.sin(x) * 2.0 + jnp.cos(x)


def shared_jit(x):
  # The same jitted function twice: one sub-jaxpr, stored once.
  return _inner(x) + _inner(x * 3.0)


def branchy(x):
  return jax.lax.cond(x.sum() > 0, lambda v: jnp.exp(v), lambda v: v ** 3, x)


def switch3(x, i):
  return jax.lax.switch(i, [jnp.sin, jnp.cos, lambda v: -v], x)


def newton_sqrt(x):
  def cond(state):
    _, i = state
    return i < 8

  def body(state):
    y, i = state
    return 0.5 * (y + x / y), i + 1
  y, _ = jax.lax.while_loop(cond, body, (jnp.ones_like(x), 0))
  return y


def fori_poly(x):
  return jax.lax.fori_loop(0, 5, lambda i, acc: acc * x + i, jnp.zeros_like(x))


def rnn(x):
  w = jnp.asarray(W_RNN)

  def step(h, xt):
    h = jnp.tanh(h @ w + xt)
    return h, h.sum()
  h, ys = jax.lax.scan(step, jnp.zeros(8, x.dtype), x)
  return h, ys


def remat_layers(x):
  @jax.checkpoint
  def layer(v):
    return jnp.sin(v) @ W1.T[:8, :8] + 1.0
  return layer(layer(x)).sum()


def remat_scan(x):
  @functools.partial(jax.checkpoint, prevent_cse=False)
  def step(c, _):
    return jnp.tanh(c * 1.5 + 0.1), None
  c, _ = jax.lax.scan(step, x, None, length=4)
  return c


def pytree_io(params, x, *, scale):
  h = x @ params["w"] + params["b"]
  return {"out": h * scale, "aux": (h.mean(), [h.max()])}


def numerics(x):
  y = jnp.clip(x, -1.0, 1.0)
  z = jnp.where(x > 0, jnp.log1p(jnp.abs(x)), jnp.expm1(x))
  s = jnp.sort(x, axis=-1)
  c = jnp.cumsum(x, axis=0)
  return y + z + s + c + jnp.nan_to_num(x / 0.0)


def dtypes_mix(x):
  b = x.astype(jnp.bfloat16) * jnp.bfloat16(1.5)
  i = (x * 10).astype(jnp.int8)
  u = jnp.uint4(3)
  return b.astype(jnp.float32) + i.astype(jnp.float32) + u.astype(jnp.float32)


def indexing(x):
  idx = jnp.array([2, 0, 1])
  y = jnp.asarray(x)[idx] + x[::-1]
  y = y.at[1].set(0.0).at[0].add(5.0)
  return jax.lax.dynamic_slice(y, (1, 0), (2, x.shape[1]))


def conv(x):
  k = jnp.asarray(KERNEL)
  return jax.lax.conv_general_dilated(
      x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))


def random_typed(key, x):
  k1, k2 = jax.random.split(key)
  return x + jax.random.normal(k1, x.shape), jax.random.uniform(k2, (3,))


def random_legacy(x):
  key = jax.random.PRNGKey(42)
  return x * jax.random.bernoulli(key, 0.5, x.shape)


F32 = np.float32
PROGRAMS = {
    "mlp": (mlp, (_rng.randn(5, 8).astype(F32),), {}),
    "shared_jit": (shared_jit, (_rng.randn(3, 4).astype(F32),), {}),
    "cond": (branchy, (_rng.randn(6).astype(F32),), {}),
    "switch": (switch3, (_rng.randn(6).astype(F32), np.int32(1)), {}),
    "while": (newton_sqrt, (np.abs(_rng.randn(5)).astype(F32) + 1,), {}),
    "fori": (fori_poly, (_rng.randn(4).astype(F32),), {}),
    "scan": (rnn, (_rng.randn(6, 8).astype(F32),), {}),
    "remat": (remat_layers, (_rng.randn(4, 8).astype(F32),), {}),
    "remat_scan": (remat_scan, (_rng.randn(5).astype(F32),), {}),
    "pytree": (pytree_io, ({"w": _rng.randn(3, 2).astype(F32),
                            "b": _rng.randn(2).astype(F32)},
                           _rng.randn(4, 3).astype(F32)),
               {"scale": F32(2.0)}),
    "numerics": (numerics, (_rng.randn(3, 5).astype(F32),), {}),
    "dtypes": (dtypes_mix, (_rng.randn(7).astype(F32),), {}),
    "indexing": (indexing, (_rng.randn(3, 4).astype(F32),), {}),
    "conv": (conv, (_rng.randn(1, 5, 5, 1).astype(F32),), {}),
    "random_typed": (random_typed, (jax.random.key(0),
                                    _rng.randn(4).astype(F32)), {}),
    "random_legacy": (random_legacy, (_rng.randn(4).astype(F32),), {}),
}
