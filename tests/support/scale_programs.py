"""Programs of 1k to 1M equations in the three shapes of issue 40: an
unrolled chain, an unrolled transformer and nested
`jit > scan > cond > scan > jit` blocks.

Each is one small template traced by JAX, copied `n // len(template)`
times with fresh variables (and, for the nested shape, fresh sub-jaxprs,
so that every block is stored: as when each block is traced from its own
function). Tracing a million equations would take JAX minutes; copying
them takes seconds, and the copies are the objects tracing would give.
benchmarks/bench_scale.py, benchmarks/measure_costs.py and the honest-file
test of tests/hostile/test_costs.py use them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jax_core

from jaxpr_io import compat

SHAPES = ("chain", "transformer", "nested")
D = 8  # the width of every value: the shapes test counts, not arithmetic


def _chain_step(x, x0):
  y = lax.sin(x)
  y = y * x0
  y = y + 1.5
  return lax.tanh(y)


def _rms_norm(x, w):
  return x * lax.rsqrt(jnp.mean(x * x, axis=-1, keepdims=True) + 1e-6) * w


def _layer(x, wq, wk, wv, wo, w1, w2, w3, n1, n2):
  """A LLaMA-shaped decoder layer (RMSNorm, attention, SwiGLU MLP)."""
  h = _rms_norm(x, n1)
  q, k, v = h @ wq, h @ wk, h @ wv
  scores = (q @ k.T) / np.float32(np.sqrt(D))
  scores = jnp.where(jnp.tril(jnp.ones((x.shape[0],) * 2, bool)), scores,
                     -1e9)
  x = x + jax.nn.softmax(scores, axis=-1) @ v @ wo
  h = _rms_norm(x, n2)
  return x + (jax.nn.silu(h @ w1) * (h @ w3)) @ w2


def _nested_block(x, seed):
  """jit > scan > cond > scan > jit, its body scaled by `seed` (a literal,
  so that each traced block differs)."""
  @jax.jit
  def inner(c):
    return jnp.tanh(c * seed + 0.5) - c

  def inner_scan(c, _):
    return inner(c), None

  def branch(c):
    return lax.scan(inner_scan, c, None, length=2)[0]

  def outer_scan(c, _):
    return lax.cond(c.sum() > 0, branch, lambda c: c * 0.5, c), None

  return jax.jit(lambda x: lax.scan(outer_scan, x, None, length=2)[0])(x)


@functools.cache
def template(shape: str):
  """(closed jaxpr of one step, number of weight inputs after x)."""
  x = jax.ShapeDtypeStruct((D,), jnp.float32)
  if shape == "chain":
    return jax.make_jaxpr(_chain_step)(x, x), 0
  if shape == "transformer":
    w = jax.ShapeDtypeStruct((D, D), jnp.float32)
    n = jax.ShapeDtypeStruct((D,), jnp.float32)
    xs = jax.ShapeDtypeStruct((4, D), jnp.float32)
    return jax.make_jaxpr(_layer)(xs, *[w] * 7, n, n), 9
  if shape == "nested":
    return jax.make_jaxpr(lambda x: _nested_block(x, 3.0))(x), 0
  raise ValueError(f"unknown shape {shape!r}")


def count_equations(jaxpr, seen=None) -> int:
  """Equations of `jaxpr` and of each distinct sub-jaxpr once: what the
  file stores."""
  seen = set() if seen is None else seen
  if id(jaxpr) in seen:
    return 0
  seen.add(id(jaxpr))
  total = len(jaxpr.eqns)
  for eqn in jaxpr.eqns:
    for sub in jax_core.jaxprs_in_params(eqn.params):
      total += count_equations(sub, seen)
  return total


def _copy_value(v, fresh: bool):
  if not fresh:
    return v
  if compat.is_closed_jaxpr(v):
    return compat.make_closed(_copy_jaxpr(v.jaxpr), v.consts)
  if type(v) is jax_core.Jaxpr:
    return _copy_jaxpr(v)
  if type(v) is tuple and any(compat.is_closed_jaxpr(x) for x in v):
    return tuple(_copy_value(x, fresh) for x in v)
  return v


def _copy_eqns(eqns, env: dict, fresh: bool = True) -> list:
  """`eqns` with fresh output variables (recorded in `env`), and their
  sub-jaxprs copied if `fresh` (else shared, as JAX's tracing cache shares
  the jaxprs of `jnp` functions between layers)."""
  out = []
  for e in eqns:
    invars = [env.get(v, v) if type(v) is not compat.Literal else v
              for v in e.invars]
    outvars = []
    for v in e.outvars:
      new = (compat.DropVar(v.aval) if type(v) is compat.DropVar
             else compat.Var(v.aval))
      env[v] = new
      outvars.append(new)
    params = {k: _copy_value(p, fresh) for k, p in e.params.items()}
    out.append(e.replace(invars=invars, outvars=outvars, params=params))
  return out


def _copy_jaxpr(jaxpr):
  env = {v: compat.Var(v.aval) for v in (*jaxpr.constvars, *jaxpr.invars)}
  eqns = _copy_eqns(jaxpr.eqns, env)
  return jaxpr.replace(
      constvars=[env[v] for v in jaxpr.constvars],
      invars=[env[v] for v in jaxpr.invars],
      outvars=[env.get(v, v) if type(v) is not compat.Literal else v
               for v in jaxpr.outvars],
      eqns=eqns)


def build(shape: str, n: int):
  """A closed jaxpr of `shape` storing about `n` equations (at least one
  step)."""
  closed, n_weights = template(shape)
  t = closed.jaxpr
  fresh = shape == "nested"
  per_step = count_equations(t) if fresh else len(t.eqns)
  steps = max(1, round(n / per_step))
  x = compat.Var(t.invars[0].aval)
  invars, eqns = [x], []
  shared = [compat.Var(v.aval) for v in t.invars[1:]] if not n_weights else []
  invars += shared
  for _ in range(steps):
    weights = ([compat.Var(v.aval) for v in t.invars[1:]] if n_weights
               else shared)
    invars += weights if n_weights else []
    env = dict(zip(t.invars, [x, *weights]))
    eqns += _copy_eqns(t.eqns, env, fresh)
    (out,) = t.outvars
    x = env[out]
  jaxpr = t.replace(invars=invars, outvars=[x], eqns=eqns,
                    debug_info=t.debug_info._replace(
                        arg_names=None, result_paths=None)
                    if hasattr(t.debug_info, "_replace") else t.debug_info)
  return compat.make_closed(jaxpr, [])
