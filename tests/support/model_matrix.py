"""The model families of the model-family matrix
(tests/integrations/test_model_matrix.py, shown in docs/symbolic-shapes.md).

Each builder returns a `Model`: a pure function of `(params..., x)` (or of a
train step's state and data), the parameters, and how it is batched. Every
model takes `x` of shape (batch, length, 4): a small per-token network with
ReLU (a `custom_jvp`: the case of issue 27), a reduction over the sequence
(a mean, so a symbolic length is a value too) and a LayerNorm or a
convolution where the library has one.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

FEATURES = 4
OUT = 2


@dataclasses.dataclass
class Model:
  fn: Callable
  fixed: tuple          # the arguments that are not data (params, state)
  n_data: int = 1       # the trailing data arguments: x (and y)

  def data(self, batch: int, length: int, seed: int = 0) -> tuple:
    rng = np.random.RandomState(seed)
    x = rng.randn(batch, length, FEATURES).astype(np.float32)
    if self.n_data == 1:
      return (x,)
    return (x, rng.randn(batch, OUT).astype(np.float32))

  def specs(self, batch, length) -> tuple:
    x = jax.ShapeDtypeStruct((batch, length, FEATURES), jnp.float32)
    if self.n_data == 1:
      return (x,)
    return (x, jax.ShapeDtypeStruct((batch, OUT), jnp.float32))


def flax_linen() -> Model:
  import flax.linen as nn  # pylint: disable=g-import-not-at-top

  class Net(nn.Module):
    @nn.compact
    def __call__(self, x):
      x = nn.Dense(8)(x)
      x = nn.LayerNorm()(nn.relu(x))
      return nn.Dense(OUT)(x.mean(axis=1))
  net = Net()
  params = net.init(jax.random.key(0), jnp.ones((1, 3, FEATURES)))
  return Model(net.apply, (params,))


def flax_nnx() -> Model:
  from flax import nnx  # pylint: disable=g-import-not-at-top

  class Net(nnx.Module):
    def __init__(self, rngs):
      self.conv = nnx.Conv(FEATURES, 8, kernel_size=(3,), rngs=rngs)
      self.out = nnx.Linear(8, OUT, rngs=rngs)

    def __call__(self, x):
      return self.out(nnx.relu(self.conv(x)).mean(axis=1))
  graphdef, state = nnx.split(Net(nnx.Rngs(0)))

  def apply(state, x):
    return nnx.merge(graphdef, state)(x)
  return Model(apply, (state,))


def equinox() -> Model:
  import equinox as eqx  # pylint: disable=g-import-not-at-top
  mlp = eqx.nn.MLP(FEATURES, 8, 8, 1, key=jax.random.key(0))
  norm = eqx.nn.LayerNorm(8)
  head = eqx.nn.Linear(8, OUT, key=jax.random.key(1))
  # The arrays are the inputs; the rest (activation functions) is static.
  params, static = eqx.partition((mlp, norm, head), eqx.is_array)

  def apply(params, x):
    mlp, norm, head = eqx.combine(params, static)
    per_token = jax.vmap(jax.vmap(lambda t: norm(jax.nn.relu(mlp(t)))))
    return jax.vmap(head)(per_token(x).mean(axis=1))
  return Model(apply, (params,))


def keras3() -> Model:
  import keras  # pylint: disable=g-import-not-at-top
  if keras.backend.backend() != "jax":
    raise RuntimeError(f"keras runs on the {keras.backend.backend()} "
                       "backend; set KERAS_BACKEND=jax (tests/conftest.py "
                       "does)")
  model = keras.Sequential([
      keras.Input((None, FEATURES)),
      keras.layers.Dense(8, activation="relu"),
      keras.layers.LayerNormalization(),
      keras.layers.GlobalAveragePooling1D(),
      keras.layers.Dense(OUT)])
  trainable = [np.asarray(v.value) for v in model.trainable_variables]
  fixed = [np.asarray(v.value) for v in model.non_trainable_variables]

  def apply(trainable, x):
    y, _ = model.stateless_call(trainable, fixed, x)
    return y
  return Model(apply, (trainable,))


def haiku() -> Model:
  import haiku as hk  # pylint: disable=g-import-not-at-top

  def forward(x):
    x = hk.nets.MLP([8, 8], activate_final=True)(x)
    x = hk.LayerNorm(-1, True, True)(x)
    return hk.Linear(OUT)(x.mean(axis=1))
  model = hk.without_apply_rng(hk.transform(forward))
  params = model.init(jax.random.key(0), jnp.ones((1, 3, FEATURES)))
  return Model(model.apply, (params,))


def optax_step() -> Model:
  """A train step: MSE of a small ReLU network, Adam's update; the optimizer
  state is the one after a first step (non-zero moments)."""
  import optax  # pylint: disable=g-import-not-at-top
  rng = np.random.RandomState(1)
  params = {"w1": rng.randn(FEATURES, 8).astype(np.float32) * 0.5,
            "b1": np.zeros(8, np.float32),
            "w2": rng.randn(8, OUT).astype(np.float32) * 0.5}
  opt = optax.adam(1e-2)

  def loss(params, x, y):
    h = jax.nn.relu(x @ params["w1"] + params["b1"]).mean(axis=1)
    return jnp.mean((h @ params["w2"] - y) ** 2)

  def step(params, opt_state, x, y):
    value, grads = jax.value_and_grad(loss)(params, x, y)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, value
  model = Model(step, (), n_data=2)
  x, y = model.data(3, 5, seed=3)
  _, opt_state, _ = step(params, opt.init(params), x, y)
  model.fixed = (params, opt_state)
  return model


FAMILIES: dict[str, Callable[[], Model]] = {
    "flax_linen": flax_linen,
    "flax_nnx": flax_nnx,
    "equinox": equinox,
    "keras3": keras3,
    "haiku": haiku,
    "optax_step": optax_step,
}

# (name, (batch, length) specs factory, concrete (batch, length) sizes)
SHAPES = ("fixed", "batch", "batch+length")


def shape_specs(kind: str) -> tuple[Any, Any, list[tuple[int, int]]]:
  """(batch, length) to trace with, and the sizes to call at."""
  if kind == "fixed":
    return 3, 5, [(3, 5)]
  if kind == "batch":
    (b,) = jax.export.symbolic_shape("b")
    return b, 5, [(1, 5), (3, 5)]
  b, l = jax.export.symbolic_shape("b, l")
  return b, l, [(1, 4), (3, 6)]
