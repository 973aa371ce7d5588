"""What the ONNX and LiteRT converters may fold, charged before they run
(`converters.folding`, issue 38): the count follows constants through
their consumers, inlined calls and loop bodies, and real models stay far
below the budget.

The hostile files (a few hundred bytes asking for gigabytes), run through
the converters and the CLI under a memory limit:
tests/hostile/test_hostile_cli.py.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.converters import folding
from tests.support import models

X = np.ones(4, np.float32)


def _loaded(fn, *args, trusted=False):
  return jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(fn, *args)),
                        trusted=trusted)


def _bytes(shape, dtype) -> int:
  return math.prod(shape) * np.dtype(dtype).itemsize


def _folded(fn, *args) -> int:
  return folding.folded_bytes(_loaded(fn, *args).closed_jaxpr)[0]


def test_a_broadcast_of_a_literal_and_its_consumers_are_counted():
  def fn(x):
    ones = jnp.broadcast_to(jnp.float32(1), (64, 32))
    return x + (ones * 2).sum()
  # The broadcast, the product and the sum: all from constants.
  assert _folded(fn, X) == 2 * _bytes((64, 32), np.float32) + 4


def test_what_depends_on_an_input_is_not_counted():
  assert _folded(lambda x: jnp.broadcast_to(x[0], (64, 32)).sum(), X) == 0


def test_constants_count_as_known_and_their_results_are_counted():
  w = np.arange(12, dtype=np.float32).reshape(3, 4)
  # w.T is computed from the constant w alone; w itself is not charged,
  # nor the product, which needs x.
  assert _folded(lambda x: (x[:, None] * jnp.transpose(w)).sum(1),
                 X) == _bytes(
      (4, 3), np.float32)


def test_inlined_calls_follow_their_operands():
  @jax.jit
  def inner(a):
    return jnp.broadcast_to(a, (128, 16)).sum()

  size = _bytes((128, 16), np.float32)
  assert _folded(lambda x: x + inner(1.0), X) >= size
  assert _folded(lambda x: x + inner(x[0]), X) == 0
  # Each call of a shared body with known operands is a copy to fold.
  once = _folded(lambda x: x + inner(1.0), X)
  assert _folded(lambda x: x + inner(1.0) + inner(2.0), X) == 2 * once


def test_a_loop_body_is_counted_once():
  def fn(xs):
    def body(carry, x):
      return carry + jax.lax.iota(jnp.int32, 1000).sum() + x, None
    return jax.lax.scan(body, jnp.zeros((), jnp.int32), xs)[0]
  xs = np.arange(50, dtype=np.int32)
  # The iota and its sum inside the body: once, not once per iteration
  # (and the initial carry, if it is a literal's broadcast).
  iota = _bytes((1000,), np.int32) + 4
  assert iota <= _folded(fn, xs) <= iota + 4


def test_symbolic_sizes_are_not_constants():
  b, = jax.export.symbolic_shape("b")
  spec = jax.ShapeDtypeStruct((b,), jnp.float32)
  assert _folded(lambda x: x + jax.lax.iota(jnp.float32, x.shape[0]),
                 spec) == 0


_BIG = (4096, 8192)  # 128 MiB of float32, over the 64 MiB a constant-free
#                      program may fold


def _big(x):
  return x + jnp.broadcast_to(1.0, _BIG).sum()


def test_an_untrusted_program_over_its_budget_is_refused_naming_it():
  prog = _loaded(_big, X)
  assert prog.untrusted
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"^equation 0: primitive broadcast_in_dim "
                     r"computes float32\[4096,8192\] \(134,217,728 bytes\) "
                     r"from constants alone, which conv folds .* over the "
                     r"67,108,864 .* trusted=True"):
    folding.check(prog, "conv")
  # What bind and specialize make of it is still untrusted.
  b, = jax.export.symbolic_shape("b")
  poly = _loaded(lambda w, x: _big(x) * w.sum(), np.ones(3, np.float32),
                 jax.ShapeDtypeStruct((b,), jnp.float32))
  with pytest.raises(jaxpr_io.FormatError):
    folding.check(poly.specialize(b=2).bind(np.ones(3, np.float32)), "conv")


def test_trusted_programs_are_not_charged():
  folding.check(_loaded(_big, X, trusted=True), "conv")
  folding.check(jaxpr_io.trace(_big, X), "conv")  # traced here
  folding.check(_loaded(_big, X), "conv", trusted=True)


def test_bound_weights_widen_the_budget():
  w = np.ones(4 << 20, np.float32)  # 16 MiB of weights

  def fn(w, x):
    return x + sum((w * k).sum() for k in range(2, 8))  # 96 MiB to fold
  prog = _loaded(fn, jax.ShapeDtypeStruct(w.shape, jnp.float32), X).bind(w)
  closed = prog.closed_jaxpr
  assert folding.budget(closed) == 16 * w.nbytes + (64 << 20)
  assert folding.folded_bytes(closed)[0] > 6 * w.nbytes > (64 << 20)
  folding.check(prog, "conv")


@pytest.mark.parametrize("name", ["cnn", "transformer", "custom_rules",
                                  "ode_integrator"])
def test_real_models_fold_little(name):
  fn, *args = getattr(models, name)()
  prog = _loaded(fn, *args)
  closed = prog.closed_jaxpr
  total, _ = folding.folded_bytes(closed)
  assert total < folding.budget(closed) // 100, total
  folding.check(prog, "conv")
