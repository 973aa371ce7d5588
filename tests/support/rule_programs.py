"""Functions with custom rules that several test files store: each file
asserts its own things about them (round trips, use-site typing, the zoo).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def flagged_vjp(*, self_calling: bool):
  """A custom_vjp whose backward rule branches, in Python, on the flags its
  forward rule returns as residuals (as Equinox's `filter_custom_vjp`), so
  its backward rule is stored with those constant residuals. With
  `self_calling`, the forward rule computes the primal by calling the
  function itself (a custom_vjp call inside its own rule)."""
  @jax.custom_vjp
  def f(a, b, c):
    return jnp.sin(a) * b + c

  def fwd(a, b, c):
    perturbed = (a.perturbed, b.perturbed, c.perturbed)
    primal = (f(a.value, b.value, c.value) if self_calling
              else jnp.sin(a.value) * b.value + c.value)
    return primal, (a.value, b.value, perturbed)

  def bwd(res, ct):
    a, b, perturbed = res
    if perturbed[2]:
      raise ValueError("c cannot be differentiated")
    return (jnp.cos(a) * b * ct if perturbed[0] else None,
            jnp.sin(a) * ct if perturbed[1] else None, None)
  f.defvjp(fwd, bwd, symbolic_zeros=True)
  return f


def scaled_sin_vmap():
  """`jax.custom_batching.custom_vmap`: sin(x) * s, whose batching rule
  uses the axis size (so it differs from what JAX's own batching would
  give, by 0.01 * the axis size)."""
  from jax.custom_batching import custom_vmap  # pylint: disable=g-import-not-at-top

  @custom_vmap
  def scaled_sin(x, s):
    return jnp.sin(x) * s

  @scaled_sin.def_vmap
  def rule(axis_size, in_batched, x, s):
    x_batched, s_batched = in_batched
    s = s[:, None] if s_batched else s
    out = jnp.sin(x) * s + jnp.float32(0.01) * axis_size
    return out, x_batched or s_batched
  return scaled_sin
