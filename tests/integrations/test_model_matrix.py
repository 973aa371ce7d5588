"""The model-family matrix (issue 27): Flax linen, Flax NNX, Equinox,
Keras 3 (JAX backend), Haiku and an Optax train step
(tests/support/model_matrix.py), each traced with a fixed batch, a
symbolic batch, and a symbolic batch and sequence length, saved and
loaded; then each cell calls the loaded program at every size of its row
and checks call, grad, vmap, jvp, `to_exported` and `to_saved_model`
against the original function at those sizes. docs/symbolic-shapes.md
shows the matrix.

One program per (family, shape) is traced, dumped and loaded once for its
six cells (a module-scoped fixture, one xdist group each).
"""

from __future__ import annotations

import functools
import tempfile

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import converters
from tests.support import groups
from tests.support import model_matrix

OPS = ("call", "grad", "vmap", "jvp", "to_exported", "to_saved_model")
_CASES = [f"{family}-{shape}" for family in model_matrix.FAMILIES
          for shape in model_matrix.SHAPES]


@functools.cache
def _model(family: str) -> model_matrix.Model:
  """Each family's model is built once for its three rows."""
  return model_matrix.FAMILIES[family]()


class _Case:

  def __init__(self, name: str):
    family, shape = name.split("-")
    self.model = _model(family)
    batch, length, self.sizes = model_matrix.shape_specs(shape)
    prog = jaxpr_io.trace(self.model.fn, *self.model.fixed,
                          *self.model.specs(batch, length))
    self.loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))

  def args(self, size, seed=0) -> tuple:
    return (*self.model.fixed, *self.model.data(*size, seed=seed))


@pytest.fixture(scope="module", params=groups.grouped(_CASES, "model_matrix"))
def case(request):
  return _Case(request.param)


def _close(actual, expected):
  a_leaves, a_tree = jax.tree_util.tree_flatten(actual)
  e_leaves, e_tree = jax.tree_util.tree_flatten(expected)
  assert a_tree == e_tree
  for a, e in zip(a_leaves, e_leaves):
    a, e = np.asarray(a), np.asarray(e)
    assert a.shape == e.shape and a.dtype == e.dtype
    if a.dtype != jax.dtypes.float0:
      np.testing.assert_allclose(a, e, rtol=2e-5, atol=2e-6)


def _float_sum(fn):
  def total(*args):
    return sum(jnp.sum(x) for x in jax.tree_util.tree_leaves(fn(*args))
               if jnp.issubdtype(x.dtype, jnp.floating))
  return total


def _tangents(args, seed=4):
  rng = np.random.RandomState(seed)

  def tangent(x):
    x = np.asarray(x)
    if np.issubdtype(x.dtype, np.floating):
      return rng.randn(*x.shape).astype(x.dtype)
    return np.zeros(x.shape, jax.dtypes.float0)
  return jax.tree_util.tree_map(tangent, args)


def _run(op: str, fn, case: _Case, size):
  args = case.args(size)
  if op in ("call", "to_exported", "to_saved_model"):
    return fn(*args)
  if op == "grad":
    # With respect to every argument of floats (not the optimizer's step).
    argnums = tuple(i for i, a in enumerate(args) if all(
        jnp.issubdtype(x.dtype, jnp.floating)
        for x in jax.tree_util.tree_leaves(a)))
    return jax.grad(_float_sum(fn), argnums=argnums)(*args)
  if op == "jvp":
    return jax.jvp(fn, args, _tangents(args))
  if op == "vmap":
    n_fixed = len(case.model.fixed)
    other = case.args(size, seed=1)
    stacked = [np.stack([a, b]) for a, b in
               zip(args[n_fixed:], other[n_fixed:])]
    in_axes = (None,) * n_fixed + (0,) * len(stacked)
    return jax.vmap(fn, in_axes=in_axes)(*args[:n_fixed], *stacked)
  raise ValueError(op)


def _saved_model(case: _Case):
  tf = pytest.importorskip("tensorflow")
  directory = tempfile.mkdtemp(prefix="model_matrix_")
  converters.to_saved_model(case.loaded, directory)
  serve = tf.saved_model.load(directory).signatures["serving_default"]

  def call(*args):
    flat = jax.tree_util.tree_leaves(args)
    outs = serve(**{f"arg{i}": tf.constant(np.asarray(x))
                    for i, x in enumerate(flat)})
    leaves = [outs[f"out{i}"].numpy() for i in range(len(outs))]
    return jax.tree_util.tree_unflatten(case.loaded.out_tree, leaves)
  return call


@pytest.mark.parametrize("op", OPS)
def test_matrix_cell(case, op):
  if op == "to_exported":
    exported = converters.to_exported(case.loaded)
    loaded = exported.call
  elif op == "to_saved_model":
    loaded = _saved_model(case)
  else:
    loaded = case.loaded
  # Transformations at the largest size; calls at every size.
  sizes = case.sizes if op in ("call", "to_exported", "to_saved_model") \
      else case.sizes[-1:]
  for size in sizes:
    expected = _run(op, case.model.fn, case, size)
    actual = (loaded(*case.args(size)) if op == "to_saved_model"
              else _run(op, loaded, case, size))
    _close(actual, expected)
