"""The reader's limits are set where everything still works.

A file may nest sub-jaxprs up to `MAX_JAXPR_DEPTH` levels. At that depth,
for each kind of nesting, loading with `check=True`, printing, calling under
jit, `grad`, `vmap`, `jvp` and saving again all work; one level deeper, the
writer refuses the program and the reader refuses the file
(tests/hostile/test_hostile.py crafts the deeper file at the protobuf level).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io.write import writer

DEPTH = writer.MAX_JAXPR_DEPTH


def _nest(kind: str, depth: int):
  """`sin` wrapped in `depth` levels of `kind`, each a sub-jaxpr."""
  fn = jnp.sin
  for _ in range(depth):
    if kind == "jit":
      fn = jax.jit(lambda x, f=fn: f(x) * 2.0)
    elif kind == "scan":
      fn = (lambda f: lambda x: jax.lax.scan(
          lambda c, _: (f(c), None), x, None, length=1)[0])(fn)
    elif kind == "cond":
      fn = (lambda f: lambda x: jax.lax.cond(
          x.sum() > 0, f, lambda y: y * 2.0, x))(fn)
    elif kind == "fori":
      fn = (lambda f: lambda x: jax.lax.fori_loop(
          0, 1, lambda i, c: f(c), x))(fn)
    elif kind == "remat":
      fn = jax.checkpoint(lambda x, f=fn: f(x) * 2.0)
  return fn


def _sub_jaxprs(value):
  if compat.is_jaxpr(value):
    yield value.jaxpr if compat.is_closed_jaxpr(value) else value
  elif type(value) is tuple:
    for item in value:
      yield from _sub_jaxprs(item)


def _depth(jaxpr) -> int:
  """Levels of jaxprs in `jaxpr`, itself included."""
  subs = [j for eqn in jaxpr.eqns for v in eqn.params.values()
          for j in _sub_jaxprs(v)]
  return 1 + max((_depth(j) for j in subs), default=0)


@pytest.mark.parametrize("kind", ["jit", "scan", "cond", "fori", "remat"])
def test_everything_works_at_the_depth_limit(kind):
  x = jnp.linspace(0.1, 1.0, 3)
  fn = _nest(kind, DEPTH - 1)   # the root jaxpr is one level
  prog = jaxpr_io.trace(fn, x)
  assert _depth(prog.closed_jaxpr.jaxpr) == DEPTH
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog), check=True)
  assert str(loaded) == str(prog)
  np.testing.assert_array_equal(jax.jit(loaded)(x), jax.jit(fn)(x))
  loss = lambda f: lambda v: f(v).sum()
  np.testing.assert_array_equal(jax.grad(loss(loaded))(x),
                                jax.grad(loss(fn))(x))
  xs = jnp.stack([x, 2 * x])
  np.testing.assert_array_equal(jax.vmap(loaded)(xs), jax.vmap(fn)(xs))
  np.testing.assert_array_equal(jax.jvp(loaded, (x,), (x,))[1],
                                jax.jvp(fn, (x,), (x,))[1])
  assert jaxpr_io.dumps(loaded) == jaxpr_io.dumps(prog)


def test_one_level_deeper_is_refused_by_the_writer():
  prog = jaxpr_io.trace(_nest("jit", DEPTH), jnp.ones(3))
  with pytest.raises(jaxpr_io.UnsupportedError, match="nest deeper"):
    jaxpr_io.dumps(prog)
