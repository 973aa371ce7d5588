"""The zoo: real programs people write, for tests/read_write/test_zoo.py.

Each entry maps a name to a zero-argument builder returning
(fn, args, kwargs); transformations are applied over args[0].
"""

from __future__ import annotations

import functools

import equinox as eqx
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx
from jax import ad_checkpoint

from tests.support import models

_rng = np.random.RandomState(42)


def _normal(*shape, dtype=np.float32):
  return _rng.randn(*shape).astype(dtype)


def cnn_batchnorm_train():
  """Flax Linen CNN with BatchNorm in training mode (batch_stats updated)."""
  model = models.CNN()
  x = _normal(4, 16, 16, 3)
  variables = model.init(jax.random.key(0), x)

  def step(params, batch_stats, x):
    logits, updates = model.apply(
        {"params": params, "batch_stats": batch_stats}, x, train=True,
        mutable=["batch_stats"])
    return logits, updates["batch_stats"]
  return step, (variables["params"], variables["batch_stats"], x), {}


def transformer():
  model = models.Transformer(layers=2)
  tokens = _rng.randint(0, 64, (2, 8)).astype(np.int32)
  params = model.init(jax.random.key(1), tokens)
  return (lambda p, t: model.apply(p, t)), (params, tokens), {}


def nnx_model():
  class Model(nnx.Module):
    def __init__(self, rngs):
      self.dense = nnx.Linear(6, 8, rngs=rngs)
      self.norm = nnx.LayerNorm(8, rngs=rngs)
      self.out = nnx.Linear(8, 2, rngs=rngs)

    def __call__(self, x):
      return self.out(jax.nn.gelu(self.norm(self.dense(x))))
  graphdef, state = nnx.split(Model(nnx.Rngs(0)))

  def apply(state, x):
    return nnx.merge(graphdef, state)(x)
  return apply, (state, _normal(3, 6)), {}


def equinox_scan():
  cell = eqx.nn.GRUCell(4, 8, key=jax.random.key(2))
  params, static = eqx.partition(cell, eqx.is_array)

  def run(params, xs):
    cell = eqx.combine(params, static)

    def step(h, x):
      h = cell(x, h)
      return h, h.sum()
    return jax.lax.scan(step, jnp.zeros(8), xs)
  return run, (params, _normal(5, 4)), {}


def adamw_step():
  opt = optax.chain(optax.clip_by_global_norm(1.0), optax.adamw(1e-3))
  params = {"w": _normal(8, 4), "b": np.zeros(4, np.float32)}
  opt_state = opt.init(params)
  x, y = _normal(16, 8), _normal(16, 4) * 10

  def step(params, opt_state, x, y):
    def loss(p):
      return jnp.mean((jax.nn.relu(x @ p["w"] + p["b"]) - y) ** 2)
    value, grads = jax.value_and_grad(loss)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value
  return step, (params, opt_state, x, y), {}


def ode():
  fn, y0 = models.ode_integrator()
  return fn, (y0,), {}


def linalg():
  fn, a = models.linalg()
  return fn, (a,), {}


def sparse_cg():
  a = _normal(6, 6)
  spd = a @ a.T + 6 * np.eye(6, dtype=np.float32)

  def solve(b):
    x, _ = jax.scipy.sparse.linalg.cg(lambda v: spd @ v, b, tol=1e-6)
    return x
  return solve, (_normal(6),), {}


def attention():
  def attend(q, k, v):
    return jax.nn.dot_product_attention(q, k, v, is_causal=True)
  return attend, (_normal(2, 8, 4, 16), _normal(2, 8, 4, 16),
                  _normal(2, 8, 4, 16)), {}


def mixed_precision():
  w = _normal(16, 16)

  def f(x):
    h = jnp.dot(x.astype(jnp.bfloat16), w.astype(jnp.bfloat16),
                preferred_element_type=jnp.float32)
    f8 = h.astype(jnp.float8_e4m3fn).astype(jnp.float32)
    q = jnp.clip(jnp.round(h), -8, 7).astype(jnp.int4)
    return f8 + q.astype(jnp.float32) * 0.5
  return f, (_normal(4, 16),), {}


def remat_scan_policy():
  ws = _normal(3, 8, 8) / 3
  policy = jax.checkpoint_policies.save_only_these_names("hidden")

  @functools.partial(jax.checkpoint, policy=policy)
  def layer(h, w):
    h = ad_checkpoint.checkpoint_name(jnp.tanh(h @ w), "hidden")
    return h * 2.0, None

  def net(ws, x):
    h, _ = jax.lax.scan(layer, x, ws)
    return h.sum()
  return net, (ws, _normal(2, 8)), {}


def sharded():
  mesh = jax.make_mesh((2, 4), ("data", "model"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  P = jax.sharding.PartitionSpec
  x_sharding = jax.sharding.NamedSharding(mesh, P("data", None))
  w_sharding = jax.sharding.NamedSharding(mesh, P(None, "model"))

  @functools.partial(jax.jit, in_shardings=(x_sharding, w_sharding),
                     out_shardings=jax.sharding.NamedSharding(mesh, P()))
  def f(x, w):
    h = jax.lax.with_sharding_constraint(
        jnp.tanh(x @ w), jax.sharding.NamedSharding(mesh, P("data", None)))
    return h.sum()
  return f, (jax.device_put(_normal(4, 8), x_sharding),
             jax.device_put(_normal(8, 16), w_sharding)), {}


ZOO = {
    "cnn_batchnorm": cnn_batchnorm_train,
    "transformer": transformer,
    "nnx": nnx_model,
    "equinox_scan": equinox_scan,
    "adamw_step": adamw_step,
    "ode": ode,
    "linalg": linalg,
    "sparse_cg": sparse_cg,
    "attention": attention,
    "mixed_precision": mixed_precision,
    "remat_scan_policy": remat_scan_policy,
    "sharded": sharded,
}
