"""`symbolic_zeros=True` custom rules with more differentiable inputs (or
outputs) than `MAX_PATTERN_INPUTS`: stored for their widest patterns only
(jaxpr_io/families/custom_rules/wide.py), and serving the patterns JAX asks
for from those. The reference is the original function: forward, grad with
respect to some of the inputs (so JAX asks for patterns that are not
stored) and with some outputs unused (zero cotangents), and jvp.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.families.custom_rules import common
from jaxpr_io.families.custom_rules import requests
from jaxpr_io.families.custom_rules import vjp
from tests.support import proto_edit
from tests.support import rule_programs
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip

N = common.MAX_PATTERN_INPUTS + 2
XS = tuple(np.linspace(0.5, 1.5, 3).astype(np.float32) * (i + 1)
           for i in range(N))


def _wide_vjp(strict: bool):
  """A custom_vjp over N inputs whose rules use the symbolic zeros: the
  forward rule saves only what perturbed inputs need, the backward rule
  returns None for unperturbed inputs and skips zero cotangents. `strict`:
  the forward rule refuses to perturb the last two inputs, as Equinox's
  `filter_custom_vjp` refuses its non-differentiable arguments."""

  @jax.custom_vjp
  def f(*xs):
    return tuple(jnp.sin(x) * xs[0] for x in xs)

  def fwd(*xs):
    if strict:
      assert not any(x.perturbed for x in xs[-2:]), "perturbed a static"
    values = [x.value for x in xs]
    perturbed = tuple(x.perturbed for x in xs)
    return f(*values), (values, perturbed)

  def bwd(res, cts):
    values, perturbed = res
    x0 = values[0]
    grads = [None if not p else jnp.cos(x) * x0 * ct
             if not isinstance(ct, jax.custom_derivatives.SymbolicZero)
             else None
             for x, p, ct in zip(values, perturbed, cts)]
    if perturbed[0]:
      extra = sum(jnp.sin(x) * ct for x, ct in zip(values, cts)
                  if not isinstance(ct, jax.custom_derivatives.SymbolicZero))
      grads[0] = extra if grads[0] is None else grads[0] + extra
    return tuple(jnp.zeros_like(v) if g is None else g
                 for v, g in zip(values, grads))

  f.defvjp(fwd, bwd, symbolic_zeros=True)
  return f


def _loss(f, used: int):
  # Only the first `used` outputs reach the loss: the others' cotangents
  # are symbolic zeros.
  return lambda *xs: sum(jnp.sum(o) for o in f(*xs)[:used])


@pytest.mark.parametrize("strict", [False, True])
def test_wide_custom_vjp_forward_and_grad_match_the_original(strict):
  f = _wide_vjp(strict)
  prog = jaxpr_io.trace(f, *XS)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(*XS), jax.jit(prog)(*XS))
  # Patterns JAX asks for: input 0 and 3 perturbed, outputs past 5 unused.
  for argnums, used in (((0, 3), 5), ((1,), N - 2), ((0,), N - 2)):
    grad = lambda p: jax.jit(jax.grad(_loss(p, used), argnums=argnums))
    assert_bit_identical(grad(loaded)(*XS), grad(prog)(*XS))


def _stored_patterns(loaded, param: str) -> list:
  """The plain patterns of a loaded rule's table (not `ResidualKey`s)."""
  eqn, = [e for e in loaded.closed_jaxpr.jaxpr.eqns
          if e.primitive.name == "custom_vjp_call"]
  return sorted(k for k in eqn.params[param].f.rules if type(k) is tuple)


@pytest.fixture
def no_probes(monkeypatch):
  """The writer stores only the widest patterns (not those its probes of
  requests.py see JAX ask for), so the tests reach the covering ones."""
  monkeypatch.setattr(requests, "_record", lambda closed, in_tree: {})


def test_wide_custom_vjp_stores_the_widest_patterns_only(no_probes):
  data = jaxpr_io.dumps(jaxpr_io.trace(_wide_vjp(True), *XS))
  loaded = jaxpr_io.loads(data)
  # Not 2**N patterns: the strict rule's error for every input perturbed,
  # and the longest prefix of perturbed inputs that traces (all but the
  # last two); one backward rule, for no zero cotangent.
  assert _stored_patterns(loaded, "fwd_jaxpr_thunk") == [
      (True,) * (N - 2) + (False, False), (True,) * N]
  assert _stored_patterns(loaded, "bwd") == [(False,) * N]
  strings = list(proto_edit.message(data).strings)
  assert any("perturbed a static" in s for s in strings)


def test_wide_custom_vjp_stores_the_patterns_grad_asks_for():
  """Besides the widest, the patterns JAX asks for when the writer's probes
  differentiate the program by each argument (all N, so all of them and
  each alone): for the gradient by input i, the forward rule perturbing i
  alone. The backward rule needs no entry with constant residuals: it
  traces with those of the kept forward rule (test_backward_rule_branching
  _on_perturbed_flags has one that does not)."""
  prog = jaxpr_io.trace(_wide_vjp(True), *XS)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  single = [tuple(j == i for j in range(N)) for i in range(N)]
  assert _stored_patterns(loaded, "fwd_jaxpr_thunk") == sorted(
      [(True,) * (N - 2) + (False, False), (True,) * N, *single])
  eqn, = [e for e in loaded.closed_jaxpr.jaxpr.eqns
          if e.primitive.name == "custom_vjp_call"]
  assert list(eqn.params["bwd"].f.rules) == [(False,) * N]
  for i in range(N - 2):
    grad = lambda p: jax.jit(jax.grad(_loss(p, N), argnums=i))
    assert_bit_identical(grad(loaded)(*XS), grad(prog)(*XS))


def _flagged_vjp():
  return rule_programs.flagged_vjp(self_calling=True)


def test_backward_rule_branching_on_perturbed_flags():
  """A custom_vjp of few inputs whose backward rule branches on flags its
  forward rule returns (Equinox's, in every Diffrax solve): traced with
  abstract residuals it cannot run; stored as JAX calls it, with the flags'
  values, the gradient of the loaded program is the original's."""
  xs = XS[:3]
  prog = jaxpr_io.trace(_flagged_vjp(), *xs)
  loaded = assert_roundtrip(prog)
  for argnums in (0, 1, (0, 1)):
    grad = lambda p: jax.jit(jax.grad(lambda *a: p(*a).sum(), argnums))
    assert_bit_identical(grad(loaded)(*xs), grad(prog)(*xs))
  for p in (prog, loaded):
    with pytest.raises(ValueError, match="c cannot be differentiated"):
      jax.grad(lambda *a: p(*a).sum(), argnums=2)(*xs)


def test_wide_custom_vjp_refused_pattern_raises_the_rule_error():
  prog = jaxpr_io.trace(_wide_vjp(True), *XS)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  grad = lambda p: jax.jit(jax.grad(_loss(p, N), argnums=N - 1))
  with pytest.raises(AssertionError, match="perturbed a static"):
    grad(prog)(*XS)
  with pytest.raises(AssertionError, match="perturbed a static"):
    grad(loaded)(*XS)


def test_grad_traced_first_then_stored_matches():
  f = _wide_vjp(False)
  g = jax.grad(_loss(f, 5), argnums=(0, 3))
  # The forward pass of a second call is left undifferentiated in the
  # program: its custom_vjp equation is stored with its rules.
  h = lambda *xs: (g(*xs), f(*xs)[0])
  prog = jaxpr_io.trace(h, *XS)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(*XS), jax.jit(prog)(*XS))


def _wide_jvp():
  @jax.custom_jvp
  def f(*xs):
    return jnp.sin(xs[0]) * sum(xs[1:])

  def f_jvp(primals, tangents):
    out = f(*primals)
    t = jnp.cos(primals[0]) * sum(primals[1:])
    t_out = jnp.zeros_like(out)
    if not isinstance(tangents[0], jax.custom_derivatives.SymbolicZero):
      t_out = t_out + t * tangents[0]
    for dx in tangents[1:]:
      if not isinstance(dx, jax.custom_derivatives.SymbolicZero):
        t_out = t_out + jnp.sin(primals[0]) * dx
    return out, t_out
  f.defjvp(f_jvp, symbolic_zeros=True)
  return f


def test_wide_custom_jvp_matches_the_original():
  f = _wide_jvp()
  prog = jaxpr_io.trace(f, *XS)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(*XS), jax.jit(prog)(*XS))
  for argnums in ((0,), (2, 5)):
    grad = lambda p: jax.jit(jax.grad(lambda *a: p(*a).sum(),
                                      argnums=argnums))
    got, want = grad(loaded)(*XS), grad(prog)(*XS)
    # The loaded rule adds the instantiated zero tangents' terms (+0.0),
    # which leave every finite value unchanged.
    assert_bit_identical(got, want)
  tangent = tuple(np.ones_like(x) if i == 1 else np.zeros_like(x)
                  for i, x in enumerate(XS))
  jvp = lambda p: jax.jit(lambda *a: jax.jvp(p, a, tangent))
  assert_bit_identical(jvp(loaded)(*XS), jvp(prog)(*XS))


def _three_output_vjp():
  """A symbolic-zeros custom_vjp of 3 inputs and outputs whose backward
  rule skips the zero cotangents."""
  @jax.custom_vjp
  def f(a, b, c):
    return jnp.sin(a) * b, jnp.cos(b) * c, a * c

  def fwd(a, b, c):
    return f(a.value, b.value, c.value), (a.value, b.value, c.value)

  def bwd(res, cts):
    a, b, c = res
    zero = jax.custom_derivatives.SymbolicZero
    da, db, dc = jnp.zeros_like(a), jnp.zeros_like(b), jnp.zeros_like(c)
    if not isinstance(cts[0], zero):
      da, db = da + jnp.cos(a) * b * cts[0], db + jnp.sin(a) * cts[0]
    if not isinstance(cts[1], zero):
      db, dc = db - jnp.sin(b) * c * cts[1], dc + jnp.cos(b) * cts[1]
    if not isinstance(cts[2], zero):
      da, dc = da + c * cts[2], dc + a * cts[2]
    return da, db, dc

  f.defvjp(fwd, bwd, symbolic_zeros=True)
  return f


def test_a_rule_over_the_equation_budget_stores_its_widest_pattern(
    monkeypatch, no_probes):
  # Few inputs, but a large rule (an Equinox checkpointed while loop's
  # backward rule: about a thousand equations for each of 2**8 patterns):
  # over wide.MAX_PATTERN_EQUATIONS in all, the JVP and backward rules are
  # stored for their widest pattern, which serves the others.
  from jaxpr_io.families.custom_rules import wide  # pylint: disable=g-import-not-at-top
  xs = XS[:3]
  vjp_f, jvp_f = _three_output_vjp(), _wide_jvp()
  f = lambda *a: (*vjp_f(*a), jvp_f(*a))
  full = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(f, *xs)))
  assert len(_stored_patterns(full, "bwd")) == 2 ** 3
  monkeypatch.setattr(wide, "MAX_PATTERN_EQUATIONS", 4)
  prog = jaxpr_io.trace(f, *xs)
  loaded = assert_roundtrip(prog)
  assert _stored_patterns(loaded, "bwd") == [(False,) * 3]
  eqn, = [e for e in loaded.closed_jaxpr.jaxpr.eqns
          if e.primitive.name == "custom_jvp_call"]
  assert sorted(eqn.params["jvp_jaxpr_fun"].f.rules) == [(False,) * 3]
  assert_bit_identical(jax.jit(loaded)(*xs), jax.jit(prog)(*xs))
  # Unused outputs (zero cotangents) and unperturbed inputs (zero tangents):
  # patterns served from the widest one.
  for argnums, used in (((0,), 1), ((1, 2), 2), ((2,), 4)):
    grad = lambda p: jax.jit(jax.grad(_loss(p, used), argnums=argnums))
    assert_bit_identical(grad(loaded)(*xs), grad(prog)(*xs))


def test_malformed_constant_residuals_are_format_errors():
  prog = jaxpr_io.trace(_flagged_vjp(), *XS[:3])
  eqn, = [e for e in jaxpr_io.loads(jaxpr_io.dumps(prog)).closed_jaxpr.jaxpr.eqns
          if e.primitive.name == "custom_vjp_call"]
  kind, key, debug, rules = eqn.params["bwd"].f.stored
  i = next(i for i, r in enumerate(rules) if len(r) == 5)
  values = rules[i][4]
  for bad_values, match in (((None,) * len(values), "at least one scalar"),
                            (("True",) + values[1:], "numpy scalars"),
                            (values[:-1], "constant residuals for")):
    bad = (*rules[:i], (*rules[i][:4], bad_values), *rules[i + 1:])
    with pytest.raises(jaxpr_io.FormatError, match=match):
      vjp.decode_bwd_rule((kind, key, debug, bad), eqn.params)
  many = rules + (rules[i],) * common.MAX_CALLS_WITH_VALUES
  with pytest.raises(jaxpr_io.FormatError, match="constant residuals, over"):
    vjp.decode_bwd_rule((kind, key, debug, many), eqn.params)
