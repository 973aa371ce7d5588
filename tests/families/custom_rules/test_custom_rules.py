"""`custom_jvp` and `custom_vjp` equations round-trip as the same program.

Each program below is traced, saved and loaded (same printing, same bytes,
JAX's type checker); the loaded program must then behave like the original
under jit, grad (first and second order), jvp, linearize, vmap of grad
and vmap of jvp (plain vmap, which never calls the rules, is covered by
tests/read_write/test_roundtrip.py): bit-identical results where the original supports the
transformation, the same exception type where it does not (e.g. jvp of a
custom_vjp function). Targeted tests check that the user's rules, not the
derivatives of the primal functions, are what the loaded program uses, and
that a fresh process that imports no model code computes the same gradient.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import textwrap

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from jax.custom_derivatives import SymbolicZero
from jax.custom_derivatives import custom_vjp_primal_tree_values

import jaxpr_io
import jaxpr_io.families.custom_rules.registrations  # noqa: F401  (registers the codecs)
from jaxpr_io.families.custom_rules import jvp as custom_jvp
from jaxpr_io.families.custom_rules import common as custom_rule_common
from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.format import container
from jaxpr_io.compat import custom_rules as compat_custom_rules
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)
from tests.support.groups import grouped

F32 = np.float32


# ------------------------------------------------------------ user rules
@jax.custom_jvp
def safe_log(x):
  return jnp.log(x)


@safe_log.defjvp
def _safe_log_jvp(primals, tangents):
  x, = primals
  t, = tangents
  # Not the derivative of log: bounded near 0. Calls safe_log itself, so the
  # rule's jaxpr holds a custom_jvp_call of the same rule.
  return safe_log(x), t / jnp.maximum(x, 1e-3)


@jax.custom_vjp
def clip_gradient(x):
  return x


def _clip_fwd(x):
  return clip_gradient(x), None


def _clip_bwd(_, g):
  return (jnp.clip(g, -1.0, 1.0),)


clip_gradient.defvjp(_clip_fwd, _clip_bwd)


def clip_loss(x):
  return clip_gradient(x * 3.0) * 10.0


@functools.partial(jax.custom_jvp, nondiff_argnums=(2,))
def scaled_product(x, y, k):
  return x * y * k


@scaled_product.defjvp
def _scaled_product_jvp(k, primals, tangents):
  x, y = primals
  x_dot, y_dot = tangents
  out = scaled_product(x, y, k)
  t = jnp.zeros_like(out)
  # The rule sees which tangents are symbolic zeros, and its factors are
  # not the product rule's: a loaded program must pick the right pattern.
  if type(x_dot) is not SymbolicZero:
    t = t + 2.0 * x_dot * y
  if type(y_dot) is not SymbolicZero:
    t = t + 3.0 * x * y_dot
  return out, t


scaled_product.defjvp(_scaled_product_jvp, symbolic_zeros=True)


@jax.custom_vjp
def two_outputs(x, y):
  return x * y, x + y


def _two_outputs_fwd(x, y):
  x, y = custom_vjp_primal_tree_values((x, y))
  return two_outputs(x, y), (x, y)


def _two_outputs_bwd(res, g):
  x, y = res
  g_prod, g_sum = g
  gx, gy = jnp.zeros_like(x), jnp.zeros_like(y)
  if type(g_prod) is not SymbolicZero:
    gx, gy = gx + 5.0 * g_prod * y, gy + g_prod * x
  if type(g_sum) is not SymbolicZero:
    gx, gy = gx + g_sum, gy + 7.0 * g_sum
  return gx, gy


two_outputs.defvjp(_two_outputs_fwd, _two_outputs_bwd, symbolic_zeros=True)


@jax.custom_vjp
def sin_scaled(x, y, n):
  return jnp.sin(x) * y * n


def _sin_scaled_fwd(x, y, n):
  # x and y are forwarded inputs (residuals JAX does not store twice).
  return sin_scaled(x, y, n), (x, y, jnp.cos(x), n)


def _sin_scaled_bwd(res, g):
  _, y, cos_x, n = res
  # None: no cotangent for y (an ad.Zero); n is an integer input (float0).
  return (cos_x * g * y * n * 0.5, None, None)


sin_scaled.defvjp(_sin_scaled_fwd, _sin_scaled_bwd)


@jax.custom_vjp
def relu_plus_softplus(x):
  return jax.nn.relu(x) + jax.nn.softplus(x)


def _rps_fwd(x):
  return relu_plus_softplus(x), jax.nn.relu(x)


def _rps_bwd(r, g):
  return (g * jax.nn.relu(r) + g,)


relu_plus_softplus.defvjp(_rps_fwd, _rps_bwd)


def scan_of_custom_vjp(x):
  def body(c, xt):
    y = jax.jit(relu_plus_softplus)(c * xt)
    return y, y.sum()
  return jax.lax.scan(body, x, jnp.stack([x, x * 0.5, -x]))


Y = jnp.array([3.0, 4.0], F32)


def closes_over_constant(x):
  # Both rules close over a concrete array: `num_consts` is 1.
  @jax.custom_jvp
  def f(z):
    return jnp.sin(z) * Y

  @f.defjvp
  def _f_jvp(p, t):
    return f(p[0]), 4.0 * t[0] * Y

  @jax.custom_vjp
  def g(z):
    return z * Y
  g.defvjp(lambda z: (g(z), None), lambda _, ct: (ct * Y * 9.0,))
  return f(x) + g(x)


hundredfold_sin = jax.custom_gradient(
    lambda x: (jnp.sin(x), lambda g: g * 100.0))


def grad_of_scan(x):
  # A saved gradient program: its custom rules were applied when tracing.
  def loss(v):
    def body(c, xt):
      y = clip_gradient(c * xt)
      return jax.nn.relu(y), y.sum()
    return jax.lax.scan(body, v, jnp.stack([v, v * 0.5]))[1].sum()
  return jax.grad(loss)(x)


X3 = np.array([1.0, -2.0, 0.5], F32)
X2 = np.array([1.0, 2.0], F32)

PROGRAMS = {
    "relu": (jax.nn.relu, (np.array([-1.0, 0.0, 2.0], F32),)),
    "relu_at_zero": (jax.nn.relu, (F32(0.0),)),
    "jax_nn_custom_jvps": (
        lambda x: (jax.nn.softplus(x), jax.nn.mish(x), jax.nn.relu6(x),
                   jax.nn.hard_silu(x), jax.scipy.special.xlogy(x, x + 3)),
        (np.array([0.0, 1.0, -2.0, 7.0], F32),)),
    "safe_log": (safe_log, (np.array([1e-5, 2.0, 3.0], F32),)),
    "symbolic_zeros_jvp": (lambda x, y: scaled_product(x, y, 2.0),
                           (X2, np.array([3.0, 4.0], F32))),
    "clip_gradient": (clip_loss, (X3,)),
    "forwarded_residuals_and_zero_cotangents": (
        lambda x, y: sin_scaled(x, y, 3), (X2, np.array([0.5, 0.25], F32))),
    "custom_vjp_in_jit_in_scan_with_custom_jvp": (scan_of_custom_vjp, (X3,)),
    "symbolic_zeros_vjp": (two_outputs, (X2, np.array([3.0, 4.0], F32))),
    "closed_over_constant": (closes_over_constant, (X2,)),
    "custom_gradient": (hundredfold_sin, (X2,)),
    "optax": (lambda x: optax.scale_gradient(x * 2.0, 0.25)
              + optax.projections.projection_simplex(x),
              (np.array([0.3, 0.2, 0.6], F32),)),
    "saved_gradient_program": (grad_of_scan, (X2,)),
}


# ------------------------------------------------------------ helpers
def _sum(out):
  return sum(jnp.sum(leaf) for leaf in jax.tree_util.tree_leaves(out))


def _grad(p, n_args):
  return jax.grad(lambda *a: _sum(p(*a)), argnums=tuple(range(n_args)))


def _batched(args):
  return tuple(jnp.stack([a, a * 2.0]) for a in args)


def _ones(args):
  return tuple(np.ones(np.shape(a), F32) for a in args)


TRANSFORMS = {
    "call": lambda p, args: p,
    "grad": lambda p, args: _grad(p, len(args)),
    "second_order": lambda p, args: jax.grad(
        lambda *a: _sum(_grad(p, len(args))(*a)),
        argnums=tuple(range(len(args)))),
    "jvp": lambda p, args: lambda *a: jax.jvp(p, a, _ones(args)),
    "linearize": lambda p, args: lambda *a: jax.linearize(p, *a)[1](
        *_ones(args)),
}
BATCHED_TRANSFORMS = {
    "vmap_of_grad": lambda p, args: jax.vmap(_grad(p, len(args))),
    "vmap_of_jvp": lambda p, args: jax.vmap(
        lambda *a: jax.jvp(p, a, _ones(args))),
}


@pytest.fixture(scope="module", params=grouped(sorted(PROGRAMS), "custom_rules"))
def case(request):
  fn, args = PROGRAMS[request.param]
  original = jaxpr_io.trace(fn, *args)
  loaded = assert_roundtrip(original)
  return args, original, loaded


@pytest.mark.parametrize("name", sorted(TRANSFORMS))
def test_transform(case, name):
  args, original, loaded = case
  assert_same_outcome(lambda p: TRANSFORMS[name](p, args), original, loaded,
                      *args)


@pytest.mark.parametrize("name", sorted(BATCHED_TRANSFORMS))
def test_batched_transform(case, name):
  args, original, loaded = case
  assert_same_outcome(lambda p: BATCHED_TRANSFORMS[name](p, args), original,
                      loaded, *_batched(args))


def _load(fn, *args):
  original = jaxpr_io.trace(fn, *args)
  return original, assert_roundtrip(original)


# ------------------------------------------------------------ rules used
def test_relu_gradient_at_zero_is_the_rules():
  original, loaded = _load(jax.nn.relu, F32(0.0))
  assert jax.grad(loaded)(F32(0.0)) == 0.0
  assert_bit_identical(jax.grad(loaded)(F32(0.0)), jax.grad(original)(F32(0.0)))


def test_loaded_gradient_follows_the_custom_jvp_rule():
  original, loaded = _load(safe_log, F32(1.0))
  x = F32(1e-5)
  g = jax.grad(loaded)(x)
  # The rule's 1 / max(x, 1e-3), not log's 1 / x.
  np.testing.assert_allclose(g, 1e3, rtol=1e-6)
  assert_bit_identical(g, jax.grad(original)(x))
  # Second order differentiates the rule: -1 / x**2 above the bound.
  gg = jax.grad(jax.grad(loaded))(F32(2.0))
  np.testing.assert_allclose(gg, -0.25, rtol=1e-6)
  assert_bit_identical(gg, jax.grad(jax.grad(original))(F32(2.0)))


def test_any_order_through_recursive_rules():
  # softplus's rule calls softplus: the file holds the rule once and a
  # reference to it, which must serve every order.
  original, loaded = _load(jax.nn.softplus, F32(0.5))
  d_loaded, d_original = loaded, original
  for _ in range(4):
    d_loaded, d_original = jax.grad(d_loaded), jax.grad(d_original)
  assert_bit_identical(jax.jit(d_loaded)(F32(0.5)),
                       jax.jit(d_original)(F32(0.5)))
  message = pb.Program()
  message.ParseFromString(container.Container(jaxpr_io.dumps(original)).program)
  assert "jvp_ref" in message.strings


def test_symbolic_zero_patterns_pick_the_rules():
  x, y = X2, np.array([3.0, 4.0], F32)
  original, loaded = _load(lambda a, b: scaled_product(a, b, 2.0), x, y)
  for argnums, expected in ((0, 2.0 * y), (1, 3.0 * x)):
    g = jax.grad(lambda a, b: loaded(a, b).sum(), argnums=argnums)(x, y)
    np.testing.assert_allclose(g, expected)
    assert_bit_identical(
        g, jax.grad(lambda a, b: original(a, b).sum(), argnums=argnums)(x, y))
  original, loaded = _load(two_outputs, x, y)
  for out, argnums in ((0, 0), (1, 0), (0, 1), (1, 1)):
    def grad_of(p, out=out, argnums=argnums):
      return jax.grad(lambda a, b: p(a, b)[out].sum(), argnums=argnums)(x, y)
    assert_bit_identical(grad_of(loaded), grad_of(original))
  np.testing.assert_allclose(
      jax.grad(lambda a, b: loaded(a, b)[1].sum(), argnums=1)(x, y), 7.0)


def test_loaded_gradient_follows_the_custom_vjp_rule():
  original, loaded = _load(clip_loss, X3)
  g = jax.grad(lambda x: loaded(x).sum())(X3)
  # d/dx of 10 * 3x is 30; the backward rule clips the 10 to 1.
  np.testing.assert_array_equal(g, np.full(3, 3.0, F32))
  assert_bit_identical(g, jax.grad(lambda x: original(x).sum())(X3))
  _, vjp = jax.vjp(loaded, X3)
  assert_bit_identical(vjp(np.ones(3, F32)),
                       jax.vjp(original, X3)[1](np.ones(3, F32)))


def test_jvp_of_custom_vjp_raises_like_the_original():
  original, loaded = _load(clip_loss, X3)
  for p in (original, loaded):
    with pytest.raises(TypeError, match="can't apply forward-mode autodiff"):
      jax.jvp(p, (X3,), (np.ones(3, F32),))


def test_flax_model_with_optax_loss():
  class MLP(nn.Module):

    @nn.compact
    def __call__(self, x):
      x = nn.relu(nn.Dense(4)(x))
      x = nn.gelu(nn.Dense(4)(x))
      return nn.softplus(nn.Dense(2)(x))

  model = MLP()
  x = np.linspace(-1, 1, 6, dtype=F32).reshape(2, 3)
  rng = np.random.RandomState(1)
  # The params `model.init` would make, without its compilations.
  params = {"params": {
      f"Dense_{i}": {"kernel": rng.randn(n_in, n_out).astype(F32),
                     "bias": rng.randn(n_out).astype(F32)}
      for i, (n_in, n_out) in enumerate(((3, 4), (4, 4), (4, 2)))}}

  def loss(params, x):
    logits = model.apply(params, x)
    labels = jax.nn.one_hot(jnp.array([0, 1]), 2)
    return optax.softmax_cross_entropy(logits, labels).sum()

  original, loaded = _load(loss, params, x)
  assert_same_outcome(jax.grad, original, loaded, params, x)
  assert_same_outcome(lambda p: jax.vmap(jax.grad(p), in_axes=(None, 0)),
                      original, loaded, params, jnp.stack([x, x * 2]))


def test_resaving_a_retraced_loaded_program():
  original, loaded = _load(lambda x: jax.nn.relu(x) * clip_gradient(x), X3)
  retraced = jaxpr_io.trace(loaded, X3)
  reloaded = assert_roundtrip(retraced)
  assert_same_outcome(lambda p: jax.grad(lambda x: jax.grad(
      lambda y: p(y).sum())(x).sum()), original, reloaded, X3)


def test_saving_jax_rewrites_of_a_loaded_program():
  # JAX's dead-code elimination wraps a loaded rule in a new callable whose
  # jaxprs reuse the loaded rule's equations, recursion refs included: the
  # new file must hold their definitions too.
  original, loaded = _load(lambda x: safe_log(x) + clip_loss(x), X2)
  closed = loaded.closed_jaxpr
  rewritten = compat.make_closed(
      compat_custom_rules.dce_jaxpr(closed.jaxpr, [True] * len(closed.jaxpr.outvars)),
      closed.consts)
  reloaded = assert_roundtrip(rewritten)  # flat signature: a list out
  assert_same_outcome(lambda p: jax.grad(lambda x: jax.grad(
      lambda y: _sum(p(y)))(x).sum()), original, reloaded, X2)


def test_bytes_are_deterministic():
  program = jaxpr_io.trace(PROGRAMS["custom_vjp_in_jit_in_scan_with_custom_jvp"]
                           [0], X3)
  assert jaxpr_io.dumps(program) == jaxpr_io.dumps(program)


# ------------------------------------------------------------ refusals
def _raises_same(fn_original, fn_loaded, *args):
  """Both raise, with the same message (the type is the same when it is a
  Python built-in; otherwise the loaded one is a RuntimeError naming it).
  JAX's tracer errors go on to say where they were traced (which differs
  between saving and calling): their first lines must agree."""
  with pytest.raises(Exception) as want:
    jax.jit(fn_original)(*args)
  with pytest.raises(Exception) as got:
    fn_loaded(*args)
  t = type(want.value)
  if t.__module__ == "builtins":
    assert type(got.value) is t
    assert str(got.value) == str(want.value)
  else:
    assert type(got.value) is RuntimeError
    first_line = lambda e: str(e).splitlines()[0]  # pylint: disable=unnecessary-lambda-assignment
    assert first_line(got.value) == (f"{t.__module__}.{t.__qualname__}: "
                                     f"{first_line(want.value)}")


def test_rules_that_raise_when_traced_raise_when_asked_for():
  # Issue 12: a rule that raises when the writer traces it is stored as the
  # error; the loaded program runs and raises it only for that derivative.
  @jax.custom_jvp
  def branchy(x):
    return x * 2

  @branchy.defjvp
  def _branchy_jvp(p, t):
    if p[0] > 0:  # Python control flow on a traced value
      return branchy(p[0]), t[0]
    return branchy(p[0]), -t[0]

  loaded = assert_roundtrip(jaxpr_io.trace(branchy, 1.0))
  assert float(loaded(1.5)) == 3.0
  _raises_same(jax.grad(branchy), jax.grad(loaded), 1.5)

  @jax.custom_vjp
  def refuses(x):
    return jnp.sin(x)

  def _bwd(res, g):
    raise ValueError("refuses cannot be reverse-differentiated")
  refuses.defvjp(lambda x: (refuses(x), x), _bwd)
  loaded = assert_roundtrip(jaxpr_io.trace(refuses, 1.0))
  assert_bit_identical(loaded(0.5), refuses(0.5))
  _raises_same(jax.grad(refuses), jax.grad(loaded), 0.5)
  # Batching does not ask for the backward rule.
  xs = jnp.linspace(0.0, 1.0, 4)
  assert_bit_identical(jax.vmap(loaded)(xs), jax.vmap(refuses)(xs))


def test_symbolic_zero_rule_that_raises_for_some_patterns():
  # As Equinox's `nondifferentiable`: the rule raises only when the second
  # input's tangent is not a symbolic zero.
  @jax.custom_jvp
  def f(x, y):
    return x * jnp.sin(y)

  def _f_jvp(primals, tangents):
    x, y = primals
    tx, ty = tangents
    if type(ty) is not jax.custom_derivatives.SymbolicZero:
      raise RuntimeError("Unexpected tangent: y cannot be differentiated")
    tx = jnp.zeros_like(x) if type(tx) is jax.custom_derivatives.SymbolicZero \
        else tx
    return f(x, y), tx * jnp.sin(y)
  f.defjvp(_f_jvp, symbolic_zeros=True)

  args = (jnp.float32(2.0), jnp.float32(0.5))
  loaded = assert_roundtrip(jaxpr_io.trace(f, *args))
  assert_bit_identical(jax.grad(loaded)(*args), jax.grad(f)(*args))
  _raises_same(jax.grad(f, argnums=1), jax.grad(loaded, argnums=1), *args)


def test_forward_rule_that_cannot_be_traced_is_refused():
  @jax.custom_vjp
  def branchy_vjp(x):
    return x * 2

  def _fwd(x):
    if x > 0:  # the forward rule runs for every call that is differentiated
      return branchy_vjp(x), x
    return branchy_vjp(x), -x
  branchy_vjp.defvjp(_fwd, lambda r, g: (g * r,))
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"forward rule .*'branchy_vjp'.*TracerBool"):
    jaxpr_io.dumps(jaxpr_io.trace(branchy_vjp, 1.0))


_needs_logs = pytest.mark.skipif(
    not hasattr(jax.custom_vjp, "defvjp_with_logs"),
    reason="backward-pass logs are new in JAX 0.11")


def _sin_with_logs(bwd):
  """sin as a custom_vjp whose backward rule `bwd` may log."""
  f = jax.custom_vjp(jnp.sin)
  f.defvjp_with_logs(lambda x: (jnp.sin(x), jnp.cos(x)), bwd)
  return f


@_needs_logs
def test_backward_rule_that_logs_is_refused():
  def _logging_bwd(cos_x, g):
    return (cos_x * g,), {"g": g}
  program = jaxpr_io.trace(_sin_with_logs(_logging_bwd), X3)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"'_logging_bwd'.*returns backward-pass logs"):
    jaxpr_io.dumps(program)


@_needs_logs
def test_backward_rule_that_may_log_but_does_not():
  # Registered with defvjp_with_logs, but logging nothing: storable, and the
  # loaded program's VJP logs nothing either.
  f = _sin_with_logs(lambda cos_x, g: ((2.0 * cos_x * g,), None))
  original, loaded = _load(f, X3)
  ct = np.ones(3, F32)
  expected = jax.vjp(original, X3)[1].with_logs(ct)
  actual = jax.vjp(loaded, X3)[1].with_logs(ct)
  assert_bit_identical(actual, expected)
  assert actual[1] == expected[1]
  assert_same_outcome(lambda p: jax.grad(lambda x: p(x).sum()), original,
                      loaded, X3)


def test_rule_closing_over_a_tracer():
  def fn(x, y):
    @jax.custom_jvp
    def f(z):
      return z * y

    @f.defjvp
    def _f_jvp(p, t):
      return f(p[0]), t[0] * y
    return f(x)

  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"'f'.*closes over values computed inside"):
    jaxpr_io.dumps(jaxpr_io.trace(fn, X2, X2))


def test_more_symbolic_zero_inputs_than_the_pattern_limit():
  # Once refused (2**n rule patterns); now stored for the widest pattern,
  # which serves the one grad asks for (tests/families/custom_rules/
  # test_wide_rules.py has the details).
  @jax.custom_jvp
  def many(*xs):
    return sum(xs)
  many.defjvp(lambda p, t: (many(*p), sum(
      ti for ti in t if type(ti) is not SymbolicZero)), symbolic_zeros=True)
  n = custom_rule_common.MAX_PATTERN_INPUTS + 1
  prog = jaxpr_io.trace(many, *[F32(1.0)] * n)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  grad = lambda p: jax.jit(jax.grad(p, argnums=(0, 2)))
  assert_bit_identical(grad(loaded)(*[F32(1.0)] * n),
                       grad(prog)(*[F32(1.0)] * n))


def test_malformed_stored_rules():
  closed = jax.make_jaxpr(jax.nn.relu)(F32(1.0))
  params = dict(closed.eqns[0].params)
  params["jvp_jaxpr_fun"] = None
  decode = custom_jvp.decode_jvp_rule
  debug = ("custom_jvp jvp", "jvp at f.py:1", None)
  for bad in ("jvp", ("jvp", "k", debug), ("jvp", "k", debug, ()),
              ("jvp", "k", debug, (((True,), params["call_jaxpr"], (False,)),)),
              ("jvp", "k", ("x",), ()), ("nope", "k", debug)):
    with pytest.raises(jaxpr_io.FormatError):
      decode(bad, params)
  # A ref no definition encloses fails when used, naming the problem.
  ref = decode(("jvp_ref", "k", debug), params)
  with pytest.raises(jaxpr_io.FormatError, match="does not enclose it"):
    ref.call_wrapped(False)


# ------------------------------------------------------------ fresh process
def _model(w, x):
  h = clip_gradient(x @ w)
  return safe_log(jax.nn.softplus(h) + 1.0).sum() + jax.nn.relu(h).sum()


_CHILD = textwrap.dedent("""
    import sys
    import jax
    import numpy as np
    import jaxpr_io
    import jaxpr_io.families.custom_rules.registrations  # noqa: F401
    path, out = sys.argv[1], sys.argv[2]
    w, x = np.load(out + "/w.npy"), np.load(out + "/x.npy")
    program = jaxpr_io.load(path)
    gw, gx = jax.jit(jax.grad(program, argnums=(0, 1)))(w, x)
    np.save(out + "/gw.npy", np.asarray(gw))
    np.save(out + "/gx.npy", np.asarray(gx))
    assert not any(m.startswith("tests") for m in sys.modules), "model code"
""")


def test_fresh_process_computes_the_same_gradient(tmp_path):
  rng = np.random.RandomState(0)
  w = rng.randn(3, 4).astype(F32)
  x = rng.randn(5, 3).astype(F32)
  np.save(tmp_path / "w.npy", w)
  np.save(tmp_path / "x.npy", x)
  program = jaxpr_io.trace(_model, w, x)
  jaxpr_io.save(tmp_path / "model.jaxpr", program)
  env = dict(os.environ)
  env.pop("PYTHONPATH", None)  # nothing but the installed packages
  subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "model.jaxpr"),
                  str(tmp_path)], check=True, cwd=tmp_path, env=env,
                 timeout=300)
  gw, gx = jax.jit(jax.grad(program, argnums=(0, 1)))(w, x)
  assert_bit_identical((np.load(tmp_path / "gw.npy"),
                        np.load(tmp_path / "gx.npy")), (gw, gx))
