"""No transformation of an accepted file returns a value of a type its
program does not declare (issue 38, the rule-type class): every program of
the zoos (tests/support/zoo.py, zoo2.py) that holds custom rules
(custom_jvp, custom_vjp, custom_lin, custom_vmap) is saved, loaded with
`check=True`, and run under `jax.jvp`, `jax.jacfwd`, `jax.grad` and
`jax.vmap` over its first argument. Each result's types are compared with
the types the file declares (the program's input and output avals: the
outputs, their tangent types, the output shape followed by the input shape
for a Jacobian, the inputs' tangent types for a gradient, the outputs with
a leading batch axis), and its values with the original program's (JAX's
own rules), bit for bit, or the same failure where the original fails.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.safety import validate
from tests.support.groups import grouped
from tests.support.roundtrip import assert_bit_identical, ones_like, scalar
from tests.support.zoo import ZOO as ZOO1
from tests.support.zoo2 import REFUSED, ZOO2

ZOO = {**ZOO1, **ZOO2}
_CUSTOM = frozenset({"custom_jvp_call", "custom_vjp_call", "custom_lin",
                     "custom_vmap_call"})
# A Jacobian over at most this many entries is taken whole; a larger one
# (a model's parameters) along one direction: d/dt f(x + t).
_FULL_JACOBIAN = 1 << 16


def _has_custom_rules(prog) -> bool:
  return any(e.primitive.name in _CUSTOM
             for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
             for e in j.eqns)


def _tangent_dtype(dtype):
  if jnp.issubdtype(dtype, jnp.inexact):
    return np.dtype(dtype)
  return np.dtype(jax.dtypes.float0)


def _types(tree) -> list[tuple]:
  return [(tuple(np.shape(x)), np.dtype(jax.typeof(x).dtype)
           if not jax.dtypes.issubdtype(jax.typeof(x).dtype,
                                        jax.dtypes.prng_key)
           else jax.typeof(x).dtype)
          for x in jax.tree_util.tree_leaves(tree)]


def _declared(avals, *, lead=(), tangent=False, tail=()) -> list[tuple]:
  return [(tuple(lead) + tuple(a.shape) + tuple(tail),
           _tangent_dtype(a.dtype) if tangent else (
               a.dtype if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)
               else np.dtype(a.dtype)))
          for a in avals]


def _run(transform, original, loaded, *args):
  """`transform(loaded)(*args)` under jit: bit-identical to the
  original's, or None where both fail alike."""
  try:
    expected = jax.jit(transform(original))(*args)
  except Exception as e:  # pylint: disable=broad-except
    with pytest.raises(type(e)):
      jax.jit(transform(loaded))(*args)
    return None
  got = jax.jit(transform(loaded))(*args)
  assert_bit_identical(got, expected)
  return got


def _floats(tree) -> bool:
  return all(jnp.issubdtype(jnp.asarray(x).dtype, jnp.inexact)
             for x in jax.tree_util.tree_leaves(tree))


@pytest.fixture(scope="module", params=grouped(sorted(ZOO), "zoo"))
def case(request):
  name = request.param
  if name in REFUSED and REFUSED[name][0]:
    pytest.skip(f"{name}: refused on this JAX release")
  fn, args, kwargs = ZOO[name]()
  original = jaxpr_io.trace(fn, *args, **kwargs)
  if not _has_custom_rules(original):
    pytest.skip(f"{name} holds no custom rules")
  loaded = jaxpr_io.loads(jaxpr_io.dumps(original), check=True)
  return args, kwargs, original, loaded


def _first(p, args, kwargs):
  """`p` as a function of its first argument."""
  return lambda a0: p(a0, *args[1:], **kwargs)


def test_transformed_zoo_programs_return_their_declared_types(case):
  args, kwargs, original, loaded = case
  a0 = args[0]
  n0 = len(jax.tree_util.tree_leaves(a0))
  in0, outs = loaded.in_avals[:n0], loaded.out_avals

  # jvp: the outputs, and their tangent types.
  tangent = ones_like(a0)
  got = _run(lambda p: lambda a: jax.jvp(_first(p, args, kwargs), (a,),
                                         (tangent,)), original, loaded, a0)
  if got is not None:
    assert _types(got[0]) == _declared(outs)
    assert _types(got[1]) == _declared(outs, tangent=True)

  # grad of the summed outputs: the first argument's tangent types.
  got = _run(lambda p: jax.grad(lambda a: scalar(_first(p, args, kwargs)(a)),
                                allow_int=True), original, loaded, a0)
  if got is not None:
    assert _types(got) == _declared(in0, tangent=True)

  # vmap over a batch of two: the outputs with a leading batch axis.
  batch = jax.tree_util.tree_map(lambda a: np.stack([np.asarray(a)] * 2), a0)
  got = _run(lambda p: jax.vmap(_first(p, args, kwargs)), original, loaded,
             batch)
  if got is not None:
    assert _types(got) == _declared(outs, lead=(2,))

  # jacfwd: each output's shape followed by each input's.
  if not _floats(a0):
    return
  size = sum(np.size(x) for x in jax.tree_util.tree_leaves(a0)) * sum(
      int(np.prod(a.shape)) for a in outs)
  if size <= _FULL_JACOBIAN:
    got = _run(lambda p: jax.jacfwd(_first(p, args, kwargs)), original,
               loaded, a0)
    if got is not None:
      want = [(o_shape + tuple(a.shape), o_dtype)
              for o_shape, o_dtype in _declared(outs) for a in in0]
      assert [s for s, _ in _types(got)] == [s for s, _ in want]
    return
  along = lambda p: jax.jacfwd(lambda t: _first(p, args, kwargs)(
      jax.tree_util.tree_map(lambda a: a + t.astype(a.dtype), a0)))
  got = _run(along, original, loaded, np.float32(0))
  if got is not None:
    assert [s for s, _ in _types(got)] == [s for s, _ in _declared(outs)]
