"""Small real models shared by the converter, benchmark and zoo tests."""

from __future__ import annotations

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np


class CNN(nn.Module):
  """Conv -> BatchNorm -> relu -> pool, twice, then a dense head."""

  @nn.compact
  def __call__(self, x, train: bool = False):
    for features in (8, 16):
      x = nn.Conv(features, (3, 3))(x)
      x = nn.BatchNorm(use_running_average=not train)(x)
      x = nn.relu(x)
      x = nn.avg_pool(x, (2, 2), strides=(2, 2))
    x = x.reshape((x.shape[0], -1))
    return nn.Dense(10)(x)


class Block(nn.Module):
  d_model: int = 32
  heads: int = 4

  @nn.compact
  def __call__(self, x):
    mask = nn.make_causal_mask(jnp.ones(x.shape[:2], jnp.int32))
    h = nn.LayerNorm()(x)
    x = x + nn.MultiHeadDotProductAttention(num_heads=self.heads)(h, h,
                                                                  mask=mask)
    h = nn.LayerNorm()(x)
    h = nn.Dense(4 * self.d_model)(h)
    return x + nn.Dense(self.d_model)(nn.gelu(h))


class Transformer(nn.Module):
  layers: int = 2
  vocab: int = 64
  d_model: int = 32

  @nn.compact
  def __call__(self, tokens):
    x = nn.Embed(self.vocab, self.d_model)(tokens)
    for _ in range(self.layers):
      x = Block(self.d_model)(x)
    return nn.Dense(self.vocab)(nn.LayerNorm()(x))


def cnn():
  """(apply_fn closing over the variables, example input)."""
  model = CNN()
  x = np.random.RandomState(0).randn(2, 16, 16, 3).astype(np.float32)
  variables = model.init(jax.random.key(0), x)
  return (lambda images: model.apply(variables, images)), x


def transformer():
  model = Transformer()
  tokens = np.random.RandomState(1).randint(0, 64, (2, 8)).astype(np.int32)
  variables = model.init(jax.random.key(1), tokens)
  return (lambda t: model.apply(variables, t)), tokens


def ode_integrator():
  """RK4 on a damped oscillator until t >= t_end: a while_loop with cond."""
  def f(y0):
    def deriv(y):
      return jnp.stack([y[1], -y[0] - 0.1 * y[1]], axis=-1) if y.ndim == 1 \
          else jnp.stack([y[..., 1], -y[..., 0] - 0.1 * y[..., 1]], axis=-1)

    def body(state):
      t, y = state
      h = jnp.where(t > 5.0, 0.05, 0.1)
      k1 = deriv(y)
      k2 = deriv(y + h / 2 * k1)
      k3 = deriv(y + h / 2 * k2)
      k4 = deriv(y + h * k3)
      return t + h, y + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
    _, y = jax.lax.while_loop(lambda s: s[0] < 10.0, body, (0.0, y0))
    return y
  return f, np.array([[1.0, 0.0], [0.5, 0.5]], np.float32)


def linalg():
  def f(a):
    spd = a @ a.T + 4 * jnp.eye(a.shape[-1])
    x = jnp.linalg.solve(spd, jnp.ones(a.shape[-1]))
    chol = jnp.linalg.cholesky(spd)
    w, _ = jnp.linalg.eigh(spd)
    s = jnp.linalg.svd(a, compute_uv=False)
    q, r = jnp.linalg.qr(a)
    sign, logdet = jnp.linalg.slogdet(spd)
    return x.sum() + chol.sum() + w.sum() + s.sum() + (q @ r).sum() + \
        sign * logdet
  return f, np.random.RandomState(2).randn(5, 5).astype(np.float32)


def linalg_hlo():
  """jnp.linalg / jax.scipy.linalg functions that lower to plain HLO on the
  CPU (no LAPACK custom calls): what a SavedModel can carry."""
  def f(a):
    v = jnp.linalg.vecdot(a, a)
    return (jnp.linalg.norm(a) + jnp.linalg.matrix_power(a, 3).sum()
            + jnp.linalg.norm(a, ord=1) + jnp.linalg.vector_norm(v)
            + jnp.trace(jnp.linalg.multi_dot([a, a.T, a]))
            + jnp.linalg.matrix_norm(jnp.linalg.outer(v, v)))
  return f, np.random.RandomState(3).randn(5, 5).astype(np.float32)


@jax.custom_vjp
def _clip_gradient(x):
  return x


_clip_gradient.defvjp(lambda x: (x, None),
                      lambda _, g: (jnp.clip(g, -0.01, 0.01),))


def custom_rules():
  """An MLP with custom_jvp activations (relu, softplus) and a custom_vjp
  gradient clip, weights as constants."""
  rng = np.random.RandomState(4)
  w1, w2 = rng.randn(6, 16).astype(np.float32), rng.randn(16, 3).astype(
      np.float32)

  def f(x):
    h = _clip_gradient(jax.nn.relu(x @ w1)) + jax.nn.softplus(x @ w1)
    return h @ w2
  return f, rng.randn(4, 6).astype(np.float32)
