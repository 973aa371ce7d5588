"""Custom rules that call their own function with other arguments (or each
other's) are stored up to the derivative order `dumps` is given.

Such a rule nests without end and without a ref (each level's key
differs): e3nn-jax's spherical harmonics call themselves with twice the
degrees. The loaded program must differentiate bit for bit as the original
up to the stored order, raise a clear `UnsupportedError` at the next one,
and the writer must trace the nested rules only to that order (plus one
level, for the keys).
"""

from __future__ import annotations

import functools
import time

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.custom_derivatives import SymbolicZero

import jaxpr_io
from jaxpr_io.families.custom_rules import common
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip

F32 = np.float32
# Every `n` a rule below was traced with: proves the writer's tracing stops.
TRACED: list[int] = []


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def jvp_self(n, x):
  return jnp.sin(x) * n


@jvp_self.defjvp
def _jvp_self_rule(n, primals, tangents):
  (x,), (t,) = primals, tangents
  TRACED.append(n)
  # Calls itself with n + 1: a new function at every order.
  return jvp_self(n, x), jvp_self(n + 1, x) * t


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def vjp_self(n, x):
  return jnp.sin(x) * n


def _vjp_self_fwd(n, x):
  return vjp_self(n, x), x


def _vjp_self_bwd(n, x, g):
  TRACED.append(n)
  return (vjp_self(n + 1, x) * g,)


vjp_self.defvjp(_vjp_self_fwd, _vjp_self_bwd)


# Mutual recursion: g's rule calls h, h's rule calls g with n + 1.
@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def mutual_g(n, x):
  return jnp.cos(x) * n


@mutual_g.defjvp
def _mutual_g_rule(n, primals, tangents):
  (x,), (t,) = primals, tangents
  TRACED.append(n)
  return mutual_g(n, x), mutual_h(n, x) * t


@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def mutual_h(n, x):
  return jnp.exp(x) * n


@mutual_h.defjvp
def _mutual_h_rule(n, primals, tangents):
  (x,), (t,) = primals, tangents
  TRACED.append(n)
  return mutual_h(n, x), mutual_g(n + 1, x) * t


# With symbolic zeros (patterns of zeros, a non-float input).
@functools.partial(jax.custom_jvp, nondiff_argnums=(0,))
def jvp_zeros(n, x, i):
  return jnp.sin(x) * n + i


def _jvp_zeros_rule(n, primals, tangents):
  (x, i), (t, _) = primals, tangents
  TRACED.append(n)
  if type(t) is SymbolicZero:
    t = jnp.zeros_like(x)
  return jvp_zeros(n, x, i), jvp_zeros(n + 1, x, i) * t


jvp_zeros.defjvp(_jvp_zeros_rule, symbolic_zeros=True)


@functools.partial(jax.custom_vjp, nondiff_argnums=(0,))
def vjp_zeros(n, x, k):
  return jnp.sin(x) * n * k


def _vjp_zeros_fwd(n, x, k):
  return vjp_zeros(n, x.value, k.value), (x.value, k.value)


def _vjp_zeros_bwd(n, res, g):
  x, k = res
  TRACED.append(n)
  return (vjp_zeros(n + 1, x, k) * g, None)


vjp_zeros.defvjp(_vjp_zeros_fwd, _vjp_zeros_bwd, symbolic_zeros=True)


# (function, the largest n a rule is traced with when saving to order k,
# as a function of k): each order adds one n (two functions per n for the
# mutual pair), and one level past the order is traced for its key.
CASES = {
    "custom_jvp": (lambda x: jvp_self(1, x), lambda k: k + 1),
    "custom_vjp": (lambda x: vjp_self(1, x), lambda k: k + 1),
    "mutual": (lambda x: mutual_g(1, x), lambda k: (k + 2) // 2),
    "custom_jvp, symbolic zeros": (lambda x: jvp_zeros(1, x, 3),
                                   lambda k: k + 1),
    "custom_vjp, symbolic zeros": (lambda x: vjp_zeros(1, x, F32(2.0)),
                                   lambda k: k + 1),
}


def _nth_grad(fn, k):
  for _ in range(k):
    fn = jax.grad(fn)
  return fn


@pytest.mark.parametrize("name", sorted(CASES))
def test_self_calling_rules_to_the_default_order(name):
  fn, _ = CASES[name]
  original = jaxpr_io.trace(fn, F32(0.5))
  loaded = assert_roundtrip(original)
  order = common.DEFAULT_MAX_DERIVATIVE_ORDER
  for k in range(1, order + 1):
    assert_bit_identical(_nth_grad(loaded, k)(F32(0.5)),
                         _nth_grad(fn, k)(F32(0.5)))
  # The original goes on; the loaded program says what to do.
  _nth_grad(fn, order + 1)(F32(0.5))
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=rf"derivatives up to order {order}, .* order "
                     rf"{order + 1} or higher.*max_derivative_order="
                     rf"{order + 1}"):
    _nth_grad(loaded, order + 1)(F32(0.5))


@pytest.mark.parametrize("order", [0, 1, 5])
@pytest.mark.parametrize("name", sorted(CASES))
def test_self_calling_rules_to_a_chosen_order(name, order):
  fn, deepest = CASES[name]
  # JAX's tracing cache would hand back the last trace's equations, whose
  # rules are memoized: the writer would trace nothing to count.
  jax.clear_caches()
  original = jaxpr_io.trace(fn, F32(0.25))
  TRACED.clear()
  data = jaxpr_io.dumps(original, max_derivative_order=order)
  assert TRACED and max(TRACED) == deepest(order)
  assert jaxpr_io.dumps(original, max_derivative_order=order) == data
  loaded = jaxpr_io.loads(data, check=True)
  # What a loaded program holds is what it saves, whatever the order.
  assert jaxpr_io.dumps(loaded) == data
  assert_bit_identical(loaded(F32(0.25)), fn(F32(0.25)))
  if order:
    assert_bit_identical(_nth_grad(loaded, order)(F32(0.25)),
                         _nth_grad(fn, order)(F32(0.25)))
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=f"max_derivative_order={order + 1}"):
    _nth_grad(loaded, order + 1)(F32(0.25))


def test_a_rule_calling_itself_alike_serves_every_order_regardless():
  # softplus's rule calls softplus at the same types: a ref, not a limit.
  original = jaxpr_io.trace(jax.nn.softplus, F32(0.5))
  loaded = jaxpr_io.loads(jaxpr_io.dumps(original, max_derivative_order=1))
  assert_bit_identical(jax.jit(_nth_grad(loaded, 5))(F32(0.5)),
                       jax.jit(_nth_grad(jax.nn.softplus, 5))(F32(0.5)))


@pytest.mark.parametrize("order", [-1, 17, 2.0, "3", True])
def test_max_derivative_order_is_checked(order):
  original = jaxpr_io.trace(lambda x: jvp_self(1, x), F32(0.5))
  with pytest.raises(ValueError, match="max_derivative_order must be an int"):
    jaxpr_io.dumps(original, max_derivative_order=order)


def test_save_takes_the_order(tmp_path):
  original = jaxpr_io.trace(lambda x: jvp_self(1, x), F32(0.5))
  jaxpr_io.save(tmp_path / "p.jaxpr", original, max_derivative_order=1)
  loaded = jaxpr_io.load(tmp_path / "p.jaxpr")
  assert_bit_identical(jax.grad(loaded)(F32(0.5)),
                       jax.grad(lambda x: jvp_self(1, x))(F32(0.5)))
  with pytest.raises(jaxpr_io.UnsupportedError, match="up to order 1,"):
    jax.grad(jax.grad(loaded))(F32(0.5))


def test_e3nn_spherical_harmonics():
  e3nn = pytest.importorskip("e3nn_jax")

  def layer(w, vectors):
    # The default algorithm's custom_jvp calls itself with twice the
    # degrees at every order.
    sh = e3nn.spherical_harmonics("1x0e+1x1o+1x2e", vectors, normalize=True)
    return jnp.sum(jnp.tanh(sh.array @ w))

  w = jnp.linspace(-1.0, 1.0, 9 * 4, dtype=F32).reshape(9, 4)
  v = jnp.array([[0.3, -0.2, 0.9], [1.0, 0.5, -0.4]], F32)
  original = jaxpr_io.trace(layer, w, v)
  # Importing e3nn-jax imports JAX's Pallas, whose jaxpr_io family the
  # next `dumps` imports once: measured apart (docs/families.md).
  start = time.perf_counter()
  jaxpr_io.dumps(jaxpr_io.trace(jnp.sin, F32(1.0)))
  warm_up = time.perf_counter() - start
  start = time.perf_counter()
  data = jaxpr_io.dumps(original)
  print(f"\ne3nn spherical harmonics: dumps {time.perf_counter() - start:.2f}"
        f" s, {len(data)} bytes (a first dumps before it: {warm_up:.2f} s)")
  loaded = assert_roundtrip(original)
  # Under jit: eagerly, JAX's op-by-op evaluation of the original differs
  # in the last bit from any evaluation of its own jaxpr (`original` too).
  assert_bit_identical(jax.jit(loaded)(w, v), jax.jit(layer)(w, v))
  for argnums in (0, 1):
    assert_bit_identical(jax.jit(jax.grad(loaded, argnums))(w, v),
                         jax.jit(jax.grad(layer, argnums))(w, v))
  assert_bit_identical(jax.jit(jax.hessian(loaded, 1))(w, v),
                       jax.jit(jax.hessian(layer, 1))(w, v))
  grad_of_grad = lambda f: jax.grad(  # noqa: E731
      lambda v: jnp.sum(jax.grad(f, 1)(w, v) ** 2))
  assert_bit_identical(jax.jit(grad_of_grad(loaded))(v),
                       jax.jit(grad_of_grad(layer))(v))


# A jit function with a custom_vjp inside, called at the top of a program
# and, the same jaxpr (JAX's tracing cache), inside a custom_jvp's rule.
@jax.custom_vjp
def _vjp_sin(x):
  return jnp.sin(x)


_vjp_sin.defvjp(lambda x: (jnp.sin(x), x),
                lambda x, g: (jnp.cos(x) * g,))
_shared = jax.jit(lambda x: _vjp_sin(x) * 2)


@jax.custom_jvp
def _calls_shared(x):
  return x * 3


@_calls_shared.defjvp
def _calls_shared_rule(primals, tangents):
  (x,), (t,) = primals, tangents
  return _calls_shared(x), _shared(x) * t


def test_a_jaxpr_shared_with_a_rule_beyond_the_order_keeps_its_rules():
  # Saved to order 1, the rule's copy of the shared jaxpr (nested one
  # deep) stores the custom_vjp's rules as raising; the program's own call
  # of it must keep them: its first derivative is the original's.
  fn = lambda x: _calls_shared(x) + _shared(x)  # noqa: E731
  prog = jaxpr_io.trace(fn, F32(0.7))
  (call,) = [e for e in prog.closed_jaxpr.jaxpr.eqns
             if e.primitive.name in ("jit", "pjit")]
  assert any(e.params.get("jaxpr") is call.params["jaxpr"]
             for e in _rule_jaxpr(prog).eqns), "the jaxpr is not shared"
  data = jaxpr_io.dumps(prog, max_derivative_order=1)
  loaded = jaxpr_io.loads(data, check=True)
  assert jaxpr_io.dumps(loaded) == data
  assert_bit_identical(jax.jit(jax.grad(loaded))(F32(0.7)),
                       jax.jit(jax.grad(fn))(F32(0.7)))


def _rule_jaxpr(prog):
  """The JVP rule's jaxpr of the program's custom_jvp equation."""
  (eqn,) = [e for e in prog.closed_jaxpr.jaxpr.eqns
            if e.primitive.name == "custom_jvp_call"]
  jaxpr, _, _ = eqn.params["jvp_jaxpr_fun"].call_wrapped(False)
  return jaxpr
