"""`custom_lin` (a linearized `jax.custom_vjp` call) round-trips
(jaxpr_io/families/custom_rules/lin.py): the loaded program prints as the original,
re-dumps to the same bytes, transposes (`jax.linear_transpose`, and grad of
that transpose) bit for bit as the original, and raises as the original
where JAX cannot run it forward (its impl, batching and lowering raise on
purpose)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.families.custom_rules import lin as custom_lin
from jaxpr_io.safety import validate
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)

F = jnp.linspace(0.25, 2.0, 8, dtype=jnp.float32)
G = jnp.linspace(-1.0, 3.0, 8, dtype=jnp.float32)


def _custom_lin_eqns(prog):
  return [e for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
          for e in j.eqns if e.primitive.name == "custom_lin"]


def _round_trip(fn, *args):
  """Traces the linear function `fn`, asserts it holds custom_lin, and
  round-trips it (check=False: a program with custom_lin cannot be
  lowered, which check=True would try; the original cannot either)."""
  prog = jaxpr_io.trace(fn, *args)
  assert _custom_lin_eqns(prog)
  loaded = assert_roundtrip(prog, check=False)
  for a, b in zip(_custom_lin_eqns(prog), _custom_lin_eqns(loaded)):
    assert list(b.params["out_avals"]) == list(a.params["out_avals"])
    assert type(b.params["in_zeros"]) is list
  return prog, loaded


def _assert_transposes_alike(prog, loaded, primals, cts):
  # The transpose calls the backward rule: the loaded rule is its jaxpr.
  transpose = lambda p: jax.linear_transpose(p, *primals)
  assert_bit_identical(jax.jit(transpose(loaded))(*cts),
                       jax.jit(transpose(prog))(*cts))
  # ... and it is differentiable, as the original's is.
  assert_same_outcome(
      lambda p: jax.grad(lambda *c: sum(
          jnp.sum(x) for x in transpose(p)(*c))), prog, loaded, *cts)
  # Running it forward raises, as the original does (TypeError).
  assert_same_outcome(lambda p: p, prog, loaded, *primals)


def _sin():
  f = jax.custom_vjp(jnp.sin)
  f.defvjp(lambda v: (jnp.sin(v), jnp.cos(v)), lambda r, g: (g * r,))
  return f


def test_linearized_custom_vjp_round_trips_and_transposes():
  lin = jax.linearize(_sin(), F)[1]
  prog, loaded = _round_trip(lin, F)
  _assert_transposes_alike(prog, loaded, (F,), (G,))
  with pytest.raises(TypeError, match="forward-mode autodiff"):
    loaded(F)


def test_the_coverage_program_round_trips():
  # tests/read_write/test_coverage_lax.py's program: the linear function applied
  # inside the traced function, so residuals are computed from the input.
  def with_custom_lin(x):
    return jax.linearize(_sin(), x)[1](x)
  prog, loaded = _round_trip(with_custom_lin, F)
  assert_same_outcome(lambda p: p, prog, loaded, F)


def _two_in_two_out():
  @jax.custom_vjp
  def f(x, y):
    return x * y, jnp.sin(x)

  def fwd(x, y):
    return f(x, y), (x, y, jnp.cos(x))

  def bwd(res, cts):
    x, y, c = res
    a, b = cts
    return a * y + b * c, None  # y gets no cotangent: a symbolic zero

  f.defvjp(fwd, bwd)
  return f


def test_zero_input_cotangents_and_a_constant_input():
  f = _two_in_two_out()
  # Linearized in x only: y's tangent is a symbolic zero (in_zeros).
  lin = jax.linearize(lambda x: f(x, G), F)[1]
  prog, loaded = _round_trip(lin, F)
  (eqn,) = _custom_lin_eqns(prog)
  assert eqn.params["in_zeros"] == [False, True]
  _assert_transposes_alike(prog, loaded, (F,), ((G, F * 2.0),))
  # In both inputs: the rule's None is a zero cotangent for y.
  lin2 = jax.linearize(f, F, G)[1]
  prog, loaded = _round_trip(lin2, F, G)
  _assert_transposes_alike(prog, loaded, (F, G), ((G, F * 2.0),))


def test_custom_vjp_inside_jit_has_constants():
  # Inside a jaxpr, the equation's constants get zero cotangents from JAX's
  # wrapping of the rule (`_handle_consts_in_bwd`).
  f = _two_in_two_out()
  g = jax.jit(lambda x: f(x, x + 1.0)[0] + f(x, G)[1])
  lin = jax.linearize(g, F)[1]
  prog, loaded = _round_trip(lin, F)
  _assert_transposes_alike(prog, loaded, (F,), (G,))


def test_symbolic_zero_cotangents():
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x), x * 3.0

  def fwd(x):
    return f(x.value), jnp.cos(x.value)

  def bwd(c, cts):
    a, b = cts
    # The rule sees which cotangents are symbolic zeros.
    out = jnp.zeros_like(c)
    if type(a) is not jax.custom_derivatives.SymbolicZero:
      out = out + a * c
    if type(b) is not jax.custom_derivatives.SymbolicZero:
      out = out + b * 3.0
    return (out,)

  f.defvjp(fwd, bwd, symbolic_zeros=True)
  lin = jax.linearize(f, F)[1]
  prog, loaded = _round_trip(lin, F)
  (eqn,) = _custom_lin_eqns(loaded)
  # One rule per pattern of zero cotangents.
  assert len(eqn.params["bwd"].f.table) == 4
  _assert_transposes_alike(prog, loaded, (F,), ((G, F),))
  # Only the first output used: its transpose gets a symbolic zero for the
  # second, and the rule stored for that pattern runs.
  first, loaded_first = _round_trip(lambda t: lin(t)[0], F)
  _assert_transposes_alike(first, loaded_first, (F,), (G,))


def test_a_backward_rule_that_raises_is_stored_raising():
  f = jax.custom_vjp(jnp.sin)

  def bwd(r, g):
    raise ValueError("no backward pass here")

  f.defvjp(lambda v: (jnp.sin(v), jnp.cos(v)), bwd)
  lin = jax.linearize(f, F)[1]
  prog, loaded = _round_trip(lin, F)
  for p in (prog, loaded):
    with pytest.raises(ValueError, match="no backward pass here"):
      jax.linear_transpose(p, F)(G)


def test_a_loaded_custom_vjp_program_linearized_round_trips():
  # The custom_lin's bwd wraps a loaded custom_vjp's rule.
  f = _two_in_two_out()
  g = lambda x: f(x, G)[0] * f(x, x)[1]
  loaded_g = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(g, F)))
  lin = jax.linearize(loaded_g, F)[1]
  original_lin = jax.linearize(g, F)[1]
  prog, loaded = _round_trip(lin, F)
  _assert_transposes_alike(prog, loaded, (F,), (G,))
  assert_bit_identical(jax.linear_transpose(loaded, F)(G),
                       jax.linear_transpose(original_lin, F)(G))


# ------------------------------------------------------------ bad files
def _stored_bwd():
  prog = jaxpr_io.trace(jax.linearize(_sin(), F)[1], F)
  (eqn,) = _custom_lin_eqns(prog)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog), check=False)
  (loaded_eqn,) = _custom_lin_eqns(loaded)
  return dict(loaded_eqn.params), loaded_eqn.params["bwd"].f.stored, eqn


@pytest.mark.parametrize("edit,match", [
    (lambda s: s[:4], "is not \\('lin_bwd'"),
    (lambda s: ("bwd",) + s[1:], "is not \\('lin_bwd'"),
    (lambda s: s[:4] + ((),), "needs 1 to 1 jaxprs"),
    (lambda s: s[:4] + (s[4] * 2,), "needs 1 to 1 jaxprs"),
    (lambda s: s[:4] + ((((True,),) + s[4][0][1:],),), "all-False pattern"),
    (lambda s: s[:4] + ((((False,), ("ValueError",)),),),
     "not \\(error type name, message\\)"),
    (lambda s: s[:4] + ((s[4][0][:2] + ((False, True),) + s[4][0][3:],),),
     "cts_in_zeros is not a tuple of 1 bools"),
])
def test_a_malformed_stored_bwd_is_a_format_error(edit, match):
  params, stored, _ = _stored_bwd()
  with pytest.raises(jaxpr_io.FormatError, match=match):
    custom_lin.decode_bwd(edit(stored), params)


def test_a_bwd_that_disagrees_with_the_equation_is_a_format_error():
  params, stored, _ = _stored_bwd()
  bwd = custom_lin.decode_bwd(stored, params)
  # As if the file's in_zeros or out_avals were decoded after a bwd of
  # another shape.
  for param, value in (("in_zeros", [False, False]),
                       ("out_avals", params["out_avals"] * 2)):
    decode = jaxpr_io.codec.registry.EQN_PARAM_CODECS[("custom_lin", param)].decode
    with pytest.raises(jaxpr_io.FormatError, match="backward rule takes"):
      decode(tuple(value), dict(params, bwd=bwd))
  with pytest.raises(jaxpr_io.FormatError, match="backward rule takes"):
    custom_lin.decode_bwd(stored, dict(params, num_res=2))


def test_an_equation_that_disagrees_with_its_params_is_a_format_error():
  params, _, eqn = _stored_bwd()
  prim = eqn.primitive
  validate.check_equation("custom_lin", prim, 2, 1, params)  # as stored
  for n_in, n_out in ((1, 1), (3, 1), (2, 2)):
    with pytest.raises(jaxpr_io.FormatError,
                       match="custom_lin has .* inputs and .* outputs, but"):
      validate.check_equation("custom_lin", prim, n_in, n_out, params)
