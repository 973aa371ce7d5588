"""What ONNX's and LiteRT's converters copy (jaxpr_io/converters/expansion.py):
calls and loop bodies once per equation that holds them, counted before
the converter runs and charged against the program's stored equations.

tests/hostile/test_hostile_cli.py runs the refused file through the CLI in
a process with a memory limit."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxpr_io
from jaxpr_io.converters import expansion
from jaxpr_io.format import limits
from tests.support import models

X = np.ones(4, np.float32)


def _loaded(fn, *args, trusted=False):
  return jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(fn, *args)),
                        trusted=trusted)


def doubling_chain(levels: int, loops: bool = False):
  """A function whose body calls the previous level's twice, `levels`
  deep, over `sin(x) * 2` (3 equations with the constant's broadcast
  folded in): jitted calls, or with `loops` scan bodies each holding two
  scans of the next level, as fuzz case 6356 (seed 0) had them."""
  fn = lambda x: jnp.sin(x) * 2.0
  for _ in range(levels):
    inner = fn
    if loops:
      def fn(x, inner=inner):
        body = lambda c, _: (inner(c), None)
        a = lax.scan(body, x, None, length=5)[0]
        return lax.scan(body, a, None, length=5)[0]
    else:
      fn = jax.jit(lambda x, inner=inner: inner(inner(x)))
  return fn


def test_a_shared_call_counts_once_stored_and_once_per_place_converted():
  for levels in (1, 4, 9):
    closed = jaxpr_io.trace(doubling_chain(levels), X).closed_jaxpr
    stored, converted, (largest, index) = expansion.counts(closed)
    body = 2  # sin, mul
    assert converted == 2 ** levels * body, (levels, converted)
    assert stored == 1 + 2 * (levels - 1) + 2 * body, (levels, stored)
    assert (largest, index) == (converted, 0)


def test_loop_bodies_count_once_per_loop():
  closed = jaxpr_io.trace(doubling_chain(3, loops=True), X).closed_jaxpr
  stored, converted, _ = expansion.counts(closed)
  # Level k: 2 scans, each 1 equation + its body (level k - 1).
  per_level = [2]
  for _ in range(3):
    per_level.append(2 * (1 + per_level[-1]))
  assert converted == per_level[-1]
  assert stored == 2 + 3 * 2


def test_an_untrusted_program_over_its_budget_is_refused_naming_it():
  prog = _loaded(doubling_chain(12), X)
  stored, converted, _ = expansion.counts(prog.closed_jaxpr)
  assert converted > expansion.budget(stored) == (
      limits.CONVERSION_COPY_FACTOR * stored
      + limits.CONVERSION_FIXED_EQUATIONS)
  with pytest.raises(jaxpr_io.FormatError, match=(
      rf"equation 0: primitive (jit|pjit) expands to {converted:,} "
      r"equations for conv, which copies each call and loop body once per "
      rf"place that holds it: the program's {stored:,} stored equations "
      rf"expand to {converted:,}, over the .* \(64x its stored equations "
      r"\+ 2,048\); load it with trusted=True")):
    expansion.check(prog, "conv")
  # The caller's say-so, a trusted load, or a program of this process.
  expansion.check(prog, "conv", trusted=True)
  expansion.check(_loaded(doubling_chain(12), X, trusted=True), "conv")
  expansion.check(jaxpr_io.trace(doubling_chain(12), X), "conv")
  # The converters refuse it before they start.
  for convert in ("to_onnx", "to_tflite"):
    with pytest.raises(jaxpr_io.FormatError, match="expands to"):
      getattr(__import__("jaxpr_io.converters").converters, convert)(
          prog, "/nonexistent/dir/m.out")


def test_a_layer_shared_by_many_layers_converts_untrusted():
  """An unrolled model calling one jitted layer 48 times."""
  w = np.full((16, 16), 0.01, np.float32)

  @jax.jit
  def layer(x, w):
    h = jnp.tanh(x @ w + 1.0)
    return x + jax.nn.gelu(h @ w.T) * 0.5

  def model(x, w):
    for _ in range(48):
      x = layer(x, w)
    return x.sum()
  prog = _loaded(model, np.ones((2, 16), np.float32), w)
  stored, converted, _ = expansion.counts(prog.closed_jaxpr)
  assert converted > 10 * stored  # 48 copies of the layer
  expansion.check(prog, "conv")


@pytest.mark.parametrize("name", ["cnn", "transformer", "custom_rules",
                                  "ode_integrator"])
def test_real_models_convert_within_the_budget(name):
  fn, *args = getattr(models, name)()
  prog = _loaded(fn, *args)
  stored, converted, _ = expansion.counts(prog.closed_jaxpr)
  assert converted <= 2 * stored, (stored, converted)
  expansion.check(prog, "conv")
