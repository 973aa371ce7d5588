"""Pallas primitives outside kernels' backends: `einshape_lo` (the lowered
form of Pallas's `einshape`, a reshape-and-transpose that runs anywhere)
and `remove_memory_space` (the identity that TPU interpret mode binds on a
kernel's operands). Each round-trips and the loaded program computes what
the original does, bit for bit; neither has batching or differentiation
rules, and the loaded program fails under vmap and grad as the original
does.

The other leftovers of the census are listed with reasons
(tests/support/primitive_census.py): `_copysign` is bound only while Mosaic GPU
lowers `sign`; the fuser's `custom_fusion` and (JAX 0.10) `fusible` hold
Python functions of block specs and `Fusion` objects, which no jaxpr can
express.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax._src.pallas import einshape
from jax._src.pallas.mosaic.interpret import interpret_pallas_call

import jaxpr_io
from jaxpr_io.safety import validate
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)

X3 = jnp.arange(24.0, dtype=jnp.float32).reshape(2, 3, 4) / 7.0
X2 = jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4) / 5.0


def _merge(x):
  return einshape.einshape_lo("abc->b(ac)", x, False) * 2.0


def _split(x):
  return einshape.einshape_lo("a(bc)->bac", x, True, b=2) + 1.0


def _interpret_operand(x):
  return interpret_pallas_call.remove_memory_space_p.bind(x) * 3.0


@pytest.mark.parametrize("fn,x,primitive", [
    (_merge, X3, "einshape_lo"),
    (_split, X2, "einshape_lo"),
    (_interpret_operand, X3, "remove_memory_space"),
], ids=["einshape_merge", "einshape_split_with_size", "remove_memory_space"])
def test_round_trips_like_the_original(fn, x, primitive):
  prog = jaxpr_io.trace(fn, x)
  assert primitive in {e.primitive.name for j in validate.walk_jaxprs(
      prog.closed_jaxpr.jaxpr) for e in j.eqns}
  loaded = assert_roundtrip(prog)
  assert_bit_identical(loaded(x), fn(x))
  assert_bit_identical(jax.jit(loaded)(x), jax.jit(fn)(x))
  assert_same_outcome(jax.vmap, fn, loaded, jnp.stack([x, x]))
  assert_same_outcome(jax.grad, lambda v: fn(v).sum(),
                      lambda v: loaded(v).sum(), x)


def test_einshape_params_survive():
  loaded = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(_split, X2)))
  (eqn, _) = loaded.closed_jaxpr.jaxpr.eqns
  assert eqn.params == dict(equation="a(bc)->bac", sizes=(("b", 2),),
                            assert_is_tile_preserving=True)
