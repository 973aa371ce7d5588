"""Round-trip fixtures: each program of tests/support/programs.py is traced, saved
and loaded; the loaded program must print like the original, re-dump to the
same bytes, pass JAX's type checker, and behave like the original under jit,
grad (first and second order), jvp and vmap: bit-identical results where the
original supports the transformation, the same error where it does not (for
example reverse-mode through a `while_loop`, or grad of an integer input)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from tests.support.programs import PROGRAMS
from tests.support.roundtrip import (assert_roundtrip, assert_same_outcome, ones_like,
                             scalar)
from tests.support.groups import grouped


@pytest.fixture(scope="module", params=grouped(sorted(PROGRAMS), "roundtrip"))
def case(request):
  fn, args, kwargs = PROGRAMS[request.param]
  original = jaxpr_io.trace(fn, *args, **kwargs)
  loaded = assert_roundtrip(original)
  return fn, args, kwargs, original, loaded


def test_outputs(case):
  fn, args, kwargs, original, loaded = case
  assert_same_outcome(lambda p: lambda *a: p(*a, **kwargs), original, loaded,
                      *args)
  # Against the Python function itself (XLA may fuse it differently).
  reference = fn(*args, **kwargs)
  for a, r in zip(jax.tree_util.tree_leaves(loaded(*args, **kwargs)),
                  jax.tree_util.tree_leaves(reference)):
    if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key):
      a, r = jax.random.key_data(a), jax.random.key_data(r)
    np.testing.assert_allclose(np.asarray(a, np.float64),
                               np.asarray(r, np.float64),
                               rtol=1e-6, atol=1e-6)


def test_grad(case):
  _, args, kwargs, original, loaded = case
  assert_same_outcome(
      lambda p: jax.grad(lambda a0, *rest: scalar(p(a0, *rest, **kwargs))),
      original, loaded, *args)


def test_second_order(case):
  _, args, kwargs, original, loaded = case
  tangent = ones_like(args[0])

  def hvp(p):
    g = jax.grad(lambda a0, *rest: scalar(p(a0, *rest, **kwargs)))
    return lambda a0, *rest: jax.jvp(lambda v: g(v, *rest), (a0,),
                                     (tangent,))[1]
  assert_same_outcome(hvp, original, loaded, *args)


def test_jvp(case):
  _, args, kwargs, original, loaded = case
  tangent = ones_like(args[0])

  def jvp(p):
    return lambda a0, *rest: jax.jvp(lambda v: p(v, *rest, **kwargs), (a0,),
                                     (tangent,))
  assert_same_outcome(jvp, original, loaded, *args)


def test_vmap(case):
  _, args, kwargs, original, loaded = case
  batched = jax.tree_util.tree_map(
      lambda a: jax.random.split(a, 3)
      if jax.dtypes.issubdtype(jnp.asarray(a).dtype, jax.dtypes.prng_key)
      else jnp.stack([a, a * 2, a * 3]), args[0])
  in_axes = (0,) + (None,) * (len(args) - 1)
  assert_same_outcome(
      lambda p: jax.vmap(lambda *a: p(*a, **kwargs), in_axes=in_axes),
      original, loaded, batched, *args[1:])
