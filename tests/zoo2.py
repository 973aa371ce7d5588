"""The second zoo (issue 12): programs built on parts of JAX that the first
zoo (tests/zoo.py) leaves out, tested by tests/test_zoo.py in the same way.

Each entry maps a name to a zero-argument builder returning
(fn, args, kwargs); transformations are applied over args[0].
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import sparse

_rng = np.random.RandomState(12)


def _normal(*shape):
  return _rng.randn(*shape).astype(np.float32)


def ragged_moe():
  """A mixture-of-experts layer: tokens routed to their top expert, sorted
  by expert, multiplied by each expert's weights with one `ragged_dot`,
  and put back in order, scaled by the router's probability."""
  n_tokens, d_model, d_ff, n_experts = 16, 8, 12, 4
  params = {"router": _normal(d_model, n_experts),
            "w_in": _normal(n_experts, d_model, d_ff) * 0.3,
            "w_out": _normal(n_experts, d_ff, d_model) * 0.3}
  x = _normal(n_tokens, d_model)

  def moe(params, x):
    probs = jax.nn.softmax(x @ params["router"], axis=-1)
    expert = jnp.argmax(probs, axis=-1)
    order = jnp.argsort(expert)
    sizes = jnp.bincount(expert, length=n_experts).astype(jnp.int32)
    h = lax.ragged_dot(x[order], params["w_in"], sizes)
    y = lax.ragged_dot(jax.nn.gelu(h), params["w_out"], sizes)
    y = jnp.zeros_like(y).at[order].set(y)
    return y * jnp.max(probs, axis=-1, keepdims=True)
  return moe, (params, x), {}


def composite_gelu():
  """`lax.composite`: a named decomposition with float, string and array
  attributes, as backends that match composites by name see it."""
  @functools.partial(lax.composite, name="zoo.scaled_gelu", version=2)
  def scaled_gelu(x, *, scale, mode, table):
    del mode
    return jax.nn.gelu(x) * scale + jnp.asarray(table)[0]

  def f(x):
    return scaled_gelu(x, scale=1.5, mode="tanh",
                       table=np.array([0.25, 0.5], np.float32)).sum(0)
  return f, (_normal(3, 5),), {}


def bcoo_matmul():
  """A BCOO sparse matrix (its nonzeros are the differentiated input) times
  a dense one, then a sparse-dense elementwise product and a reduction."""
  dense = np.where(_rng.rand(6, 5) < 0.4, _normal(6, 5), 0).astype(np.float32)
  m = sparse.BCOO.fromdense(dense)
  rhs = _normal(5, 3)

  def f(data, indices, rhs):
    mat = sparse.BCOO((data, indices), shape=m.shape)
    y = mat @ rhs
    z = sparse.bcoo_reduce_sum(mat * 2.0, axes=(1,)).todense()
    return y, z
  return f, (m.data, m.indices, rhs), {}


def bcsr_matmul():
  """A BCSR sparse matrix times a dense vector and matrix."""
  dense = np.where(_rng.rand(5, 7) < 0.4, _normal(5, 7), 0).astype(np.float32)
  m = sparse.BCSR.fromdense(dense)

  def f(data, indices, indptr, v, w):
    mat = sparse.BCSR((data, indices, indptr), shape=m.shape)
    return mat @ v, mat @ w
  return f, (m.data, m.indices, m.indptr, _normal(7), _normal(7, 2)), {}


def refs_accumulate():
  """Mutable array references (`jax.new_ref`): reads, whole and sliced
  writes, and an accumulation."""
  def f(x, y):
    acc = jax.new_ref(jnp.zeros_like(x))
    acc[...] += x * 2.0
    acc[1:3] = acc[1:3] + y[:2]
    acc[0] = acc[0] * y[0]
    return acc[...] + 1.0
  return f, (_normal(4), _normal(3)), {}


def run_state_loop():
  """`run_state`: a stateful computation over refs, discharged by JAX."""
  from jax._src.state.discharge import run_state  # pylint: disable=g-import-not-at-top

  def f(x, w):
    def body(refs):
      acc, out = refs
      for i in range(3):
        acc[...] = jnp.tanh(acc[...] @ w + i)
      out[...] = acc[...].sum(0)
    acc, out = run_state(body)((x, jnp.zeros(x.shape[1], x.dtype)))
    return acc, out
  return f, (_normal(2, 4), _normal(4, 4) * 0.5), {}


def checkify_checks():
  """`checkify.checkify` of a function with a user check, NaN, index and
  division checks: the program returns the error's arrays and the result.
  (A program with the `check`s themselves: tests/test_version4.py.)"""
  from jax.experimental import checkify  # pylint: disable=g-import-not-at-top

  def f(x, i):
    checkify.check(jnp.all(x > -5), "x too small: {}", x.min())
    return jnp.log(x) + x[i] / x[0]
  errors = (checkify.user_checks | checkify.nan_checks
            | checkify.index_checks | checkify.div_checks)
  return checkify.checkify(f, errors=errors), (_normal(3) ** 2 + 0.5,
                                               np.int32(1)), {}


ZOO2 = {
    "ragged_moe": ragged_moe,
    "composite_gelu": composite_gelu,
    "bcoo_matmul": bcoo_matmul,
    "bcsr_matmul": bcsr_matmul,
    "refs_accumulate": refs_accumulate,
    "run_state_loop": run_state_loop,
    "checkify_checks": checkify_checks,
}
