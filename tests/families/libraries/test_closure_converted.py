"""Equinox's closure-converted jaxprs in a filter primitive's `static` param
(Lineax's `linear_solve` of a `FunctionLinearOperator`, as Optimistix's
Newton steps make): stored open, their constvars unvalued, under every JAX
release (jaxpr_io/compat/dead_consts.py). Under JAX 0.11+ the original's
jaxpr holds the dead tracers of the trace that made it as its constants,
and the loaded one holds dead tracers of the same types."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex_core

import jaxpr_io
from jaxpr_io import compat
from tests.support import proto_edit
from tests.support.roundtrip import assert_roundtrip, assert_same_outcome

lx = pytest.importorskip("lineax")

A = np.array([2.0, 3.0, 4.0], np.float32)
B = np.array([1.0, -2.0, 3.0], np.float32)
C = jnp.arange(3.0, dtype=jnp.float32)  # an array from outside any trace


def _solve(a, b):
  # The operator closes over `a`, a tracer of the program's trace.
  op = lx.FunctionLinearOperator(lambda x: a * x + x,
                                 jax.eval_shape(lambda: b))
  return lx.linear_solve(op, b, lx.LU()).value


def _solve_closing_over_an_array(a, b):
  op = lx.FunctionLinearOperator(lambda x: a * x + C * x,
                                 jax.eval_shape(lambda: b))
  return lx.linear_solve(op, b, lx.LU()).value


def _static_jaxprs(jaxpr) -> list:
  """The jaxprs in the `static` params of `jaxpr`'s `linear_solve`
  equations, at any depth, in order."""
  found = []
  for eqn in jaxpr.eqns:
    if eqn.primitive.name == "linear_solve":
      found += [v for v in eqn.params["static"]
                if type(v) in compat.JAXPR_TYPES]
    for sub in jex_core.jaxprs_in_params(eqn.params):
      found += _static_jaxprs(sub)
  return found


def _top(program):
  closed = program.closed_jaxpr
  return closed if compat.MERGED_JAXPRS else closed.jaxpr


def _stored_static_jaxprs(msg) -> list:
  """The jaxpr messages that `linear_solve`'s `static` params hold."""
  name = list(msg.strings).index("static")
  found = []
  for param_set in msg.param_sets:
    for p in param_set.params:
      if p.name == name and p.value.WhichOneof("kind") == "param_codec":
        values = p.value.param_codec.tuple.items[1].tuple.items
        found += [msg.jaxprs[v.jaxpr] for v in values
                  if v.WhichOneof("kind") == "jaxpr"]
  return found


def test_closure_converted_jaxpr_loads_as_the_original_holds_it():
  original = jaxpr_io.trace(_solve, A, B)
  data = jaxpr_io.dumps(original)
  loaded = assert_roundtrip(original)  # same printing, same bytes again
  (want,), (got,) = _static_jaxprs(_top(original)), _static_jaxprs(
      _top(loaded))
  # The file holds it open, with one constvar: the same under every release.
  (stored,) = _stored_static_jaxprs(proto_edit.message(data))
  assert len(stored.constvars) == len(want.constvars) == 1
  assert str(got) == str(want)
  assert [v.aval for v in got.constvars] == [v.aval for v in want.constvars]
  if compat.MERGED_JAXPRS:
    # The original's constants are the dead tracers of its trace, the
    # loaded one's dead tracers of the same types: using one raises alike.
    assert [type(c) for c in got.consts] == [type(c) for c in want.consts]
    assert [c.aval for c in got.consts] == [c.aval for c in want.consts]
    for jaxpr in (want, got):
      with pytest.raises(jax.errors.UnexpectedTracerError):
        jax.jit(lambda: jaxpr.consts[0] + 1)()
  else:
    assert not hasattr(got, "consts")  # JAX 0.10: an open jaxpr
  assert_same_outcome(lambda p: p, _solve, loaded, A, B)
  assert_same_outcome(lambda p: jax.grad(lambda a, b: p(a, b).sum()),
                      _solve, loaded, A, B)
  assert_same_outcome(lambda p: jax.vmap(p, in_axes=(None, 0)), _solve,
                      loaded, A, np.stack([B, B * 2]))


@pytest.mark.parametrize("move", ["constvar_to_invars", "invar_to_constvars"])
def test_constvars_that_disagree_with_the_constants_passed_are_refused(move):
  data = jaxpr_io.dumps(jaxpr_io.trace(_solve, A, B))
  msg = proto_edit.message(data)
  (stored,) = _stored_static_jaxprs(msg)
  # Variables are numbered constvars first, then invars: moving the
  # boundary keeps every reference valid and changes only the count.
  constvars, invars = list(stored.constvars), list(stored.invars)
  if move == "constvar_to_invars":
    constvars, invars, want = [], constvars + invars, 0
  else:
    constvars, invars, want = constvars + invars[:1], invars[1:], 2
  del stored.constvars[:], stored.invars[:]
  stored.constvars.extend(constvars)
  stored.invars.extend(invars)
  names = stored.debug_info.arg_names  # one per invar
  if move == "constvar_to_invars":
    names.insert(0, names[0])
  else:
    del names[0]
  with pytest.raises(jaxpr_io.FormatError,
                     match=f"param 'static'.*closure-converted function's "
                     f"jaxpr\\) is a jaxpr of {want} constvars where the "
                     "function passes it 1 constants"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_a_jaxpr_closed_over_tracers_and_arrays():
  original = jaxpr_io.trace(_solve_closing_over_an_array, A, B)
  if not compat.MERGED_JAXPRS:
    # JAX 0.10 keeps the jaxpr open and the array among the inputs.
    loaded = assert_roundtrip(original)
    assert_same_outcome(lambda p: p, _solve_closing_over_an_array, loaded,
                        A, B)
    return
  # JAX 0.11+ keep the array on the jaxpr beside the dead tracer: the array
  # would be lost, so it is refused, saying what to do.
  (jaxpr,) = _static_jaxprs(_top(original))
  assert [compat.is_tracer(c) for c in jaxpr.consts] == [True, False]
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match="param 'static': entry 0 .* partly values .*"
                     "arguments of the traced function"):
    jaxpr_io.dumps(original)
