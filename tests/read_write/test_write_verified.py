"""Every file the writer writes, its reader reads (issue 37): programs that
`dumps` wrote and `loads` refused (`jnp.conj`'s `input_dtype`, `jnp.cbrt`'s
`accuracy`, `ragged_dot`'s `preferred_element_type=jnp.float32`) round-trip,
and an equation the reader would refuse is refused by the writer, naming it,
before any byte is written. The reference is JAX: the original program's
printing, results and derivatives.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxpr_io
from jaxpr_io import compat

F32 = np.float32


def _same_as_original(fn, *args):
  """Loads `fn`'s file with check=True and compares it with `fn`: printing,
  bits of the results, the re-dump's bytes."""
  prog = jaxpr_io.trace(fn, *args)
  data = jaxpr_io.dumps(prog)
  loaded = jaxpr_io.loads(data, check=True)
  assert str(loaded.closed_jaxpr) == str(prog.closed_jaxpr)
  # Both under jit: the same jaxpr compiles to the same computation.
  want, got = jax.jit(fn)(*args), jax.jit(loaded)(*args)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
  assert np.asarray(got).dtype == np.asarray(want).dtype
  assert jaxpr_io.dumps(loaded) == data
  return loaded


def _complex_vector():
  rng = np.random.RandomState(0)
  return (rng.randn(5) + 1j * rng.randn(5)).astype(np.complex64)


@pytest.mark.parametrize("conj", [jnp.conj, lax.conj], ids=["jnp", "lax"])
def test_conj_of_complex_values(conj):
  x = _complex_vector()
  loaded = _same_as_original(conj, x)
  eqn = loaded.closed_jaxpr.jaxpr.eqns[-1]
  assert eqn.primitive is lax.conj_p and "input_dtype" in eqn.params
  # The transpose rule reads input_dtype: grad through the loaded program.
  w = x[::-1] * 2j
  loss = lambda f: lambda x: jnp.real(jnp.sum(f(x) * w))
  np.testing.assert_array_equal(np.asarray(jax.grad(loss(loaded))(x)),
                                np.asarray(jax.grad(loss(conj))(x)))


def test_complex_linear_algebra_that_binds_conj():
  # jnp.vdot and jnp.linalg.norm of complex inputs conjugate inside JAX.
  x = _complex_vector()
  _same_as_original(lambda a: jnp.vdot(a, a), x)
  _same_as_original(lambda a: jnp.linalg.norm(a), x)


@pytest.mark.parametrize("how", ["jnp", "no_param"])
def test_cbrt_with_and_without_accuracy(how):
  # jnp.cbrt binds accuracy=None; JAX's rules also take cbrt without it.
  x = np.linspace(-8, 27, 7).astype(F32)
  fn = jnp.cbrt if how == "jnp" else lax.cbrt_p.bind
  loaded = _same_as_original(fn, x)
  assert ("accuracy" in loaded.closed_jaxpr.jaxpr.eqns[0].params) == (
      how == "jnp")
  want = jax.grad(lambda x: jnp.sum(fn(x)))(x + 1)
  got = jax.grad(lambda x: jnp.sum(loaded(x)))(x + 1)
  np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_cbrt_with_a_tolerance_is_refused_at_write_time():
  # No codec stores a Tolerance yet: refused by dumps, never written.
  x = np.ones(3, F32)
  fn = lambda x: lax.cbrt(x, accuracy=lax.Tolerance(atol=1e-3, rtol=0, ulps=0))
  with pytest.raises(jaxpr_io.UnsupportedError, match=r"equation 0 \(cbrt\), "
                     "param 'accuracy'"):
    jaxpr_io.dumps(jaxpr_io.trace(fn, x))


@pytest.mark.parametrize("preferred", [jnp.float32, np.float32,
                                       np.dtype(np.float32)],
                         ids=["jnp", "numpy_type", "dtype"])
def test_ragged_dot_with_preferred_element_type(preferred):
  rng = np.random.RandomState(1)
  a, b = rng.randn(6, 3).astype(F32), rng.randn(2, 3, 4).astype(F32)
  groups = np.array([2, 4], np.int32)
  fn = lambda a, b, g: lax.ragged_dot(a, b, g, preferred_element_type=preferred)
  loaded = _same_as_original(fn, a, b, groups)
  # Stored as JAX bound it: the same object, not converted to a dtype.
  (eqn,) = [e for e in loaded.closed_jaxpr.jaxpr.eqns
            if e.primitive.name == "ragged_dot_general"]
  assert eqn.params["preferred_element_type"] is preferred or (
      eqn.params["preferred_element_type"] == preferred
      and type(preferred) is np.dtype)
  grad = lambda f: jax.grad(lambda a, b: jnp.sum(f(a, b, groups)), (0, 1))
  for want, got in zip(grad(fn)(a, b), grad(loaded)(a, b)):
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def _with_param(closed, index: int, key: str, value):
  """`closed` with param `key` of its equation `index` set to `value`."""
  jaxpr = compat.open_jaxpr(closed)
  eqns = list(jaxpr.eqns)
  eqns[index] = eqns[index].replace(params={**eqns[index].params, key: value})
  return compat.make_closed(jaxpr.replace(eqns=eqns), closed.consts)


def _refusal(closed, tmp_path) -> str:
  """The writer's refusal of `closed`, by `dumps` and by `save`, which
  writes no file."""
  with pytest.raises(jaxpr_io.UnsupportedError) as info:
    jaxpr_io.dumps(closed)
  path = os.path.join(tmp_path, "refused.jaxpr")
  with pytest.raises(jaxpr_io.UnsupportedError) as saved:
    jaxpr_io.save(path, closed)
  assert str(saved.value) == str(info.value)
  assert not os.listdir(tmp_path)
  return str(info.value)


def test_writer_refuses_a_param_the_reader_refuses(tmp_path):
  x = np.arange(3, dtype=F32)
  closed = jaxpr_io.trace(lambda x: jnp.sin(x) * 2, x).closed_jaxpr
  assert jaxpr_io.loads(jaxpr_io.dumps(closed), check=True)
  # An unknown param, as a hand-made or mis-traced equation could hold.
  message = _refusal(_with_param(closed, 0, "unrolled", 3), tmp_path)
  assert message.startswith("equation 0 (sin), param 'unrolled'")
  assert "reader would refuse" in message
  # A known param holding a value of a kind it never holds.
  message = _refusal(_with_param(closed, 0, "accuracy", "high"), tmp_path)
  assert message.startswith("equation 0 (sin), param 'accuracy'")
  assert "kind str" in message


def test_writer_refuses_a_value_check_of_the_reader(tmp_path):
  a, b = np.ones((6, 3), F32), np.ones((2, 3, 4), F32)
  closed = jaxpr_io.trace(
      lambda a, b, g: lax.ragged_dot(a, b, g), a, b,
      np.array([3, 3], np.int32)).closed_jaxpr
  i = [e.primitive.name for e in closed.jaxpr.eqns].index("ragged_dot_general")
  # A float where JAX takes a dtype: the reader's value check refuses it.
  message = _refusal(_with_param(closed, i, "preferred_element_type", 1.5),
                     tmp_path)
  assert message.startswith(f"equation {i} (ragged_dot_general), param "
                            "'preferred_element_type'")
