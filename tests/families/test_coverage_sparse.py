"""The primitives of `jax.experimental.sparse` round-trip (issue 12: a
covered primitive is one a test program round-trips). Each program converts
dense arrays to BCOO, BCSR, COO or CSR form (the `*_fromdense` primitives
with a static `nse`), works on them and returns dense arrays, so the loaded
program is compared bit for bit with the original function; grad and vmap
too where JAX's sparse rules support them."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import sparse
from jax.experimental.sparse import coo as coo_lib
from jax.experimental.sparse import csr as csr_lib
from jax.experimental.sparse import linalg as sparse_linalg

import jaxpr_io
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)
from tests.families.test_experimental_primitives import _primitives

# A 4x4 matrix with 6 nonzeros (one row empty) and a dense operand.
M = jnp.array([[1.5, 0.0, 0.0, -2.0],
               [0.0, 0.0, 0.0, 0.0],
               [0.25, 3.0, 0.0, 0.0],
               [0.0, -1.0, 4.0, 0.5]], dtype=jnp.float32)
V = jnp.arange(4.0, dtype=jnp.float32) / 3.0 + 1.0
B = jnp.arange(8.0, dtype=jnp.float32).reshape(4, 2) / 7.0 - 0.5
NSE = 6


def _check(f, primitives, *args, grad=False, vmap=False):
  """Round-trips `f`'s program and compares it with `f` (jitted: one
  compilation each), and its grad and vmap where asked (a few tests ask, to
  keep the file fast)."""
  prog = jaxpr_io.trace(f, *args)
  missing = set(primitives) - _primitives(prog)
  assert not missing, f"the program lacks {missing}"
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(*args), jax.jit(f)(*args))
  if grad:
    assert_same_outcome(jax.grad, lambda *a: f(*a).sum(),
                        lambda *a: loaded(*a).sum(), *args)
  if vmap:
    assert_same_outcome(jax.vmap, f, loaded,
                        *[jnp.stack([a, a * 2]) for a in args])
  return loaded


# --------------------------------------------------------------- BCOO
def _bcoo_ops(m, v):
  a = sparse.bcoo_fromdense(m, nse=NSE)
  at = sparse.bcoo_transpose(a, permutation=(1, 0))
  # The same entries twice: sum_duplicates adds them up.
  twice = sparse.BCOO((jnp.concatenate([a.data, a.data]),
                       jnp.concatenate([a.indices, a.indices])),
                      shape=m.shape)
  summed = sparse.bcoo_sum_duplicates(twice, nse=NSE)
  ext = sparse.bcoo_extract(a, m * 2.0 + 1.0)
  return (sparse.todense(at) @ v + sparse.todense(summed) @ v
          + ext.todense() @ v)


def test_bcoo_fromdense_transpose_extract_sum_duplicates_todense():
  _check(_bcoo_ops, ["bcoo_fromdense", "bcoo_transpose", "bcoo_extract",
                     "bcoo_sum_duplicates", "bcoo_todense"], M, V,
         grad=True)


def _bcoo_sort(m, v):
  # Transposing a BCOO matrix leaves its indices unsorted: sort them.
  a = sparse.bcoo_fromdense(m, nse=NSE).T.sort_indices()
  return (a @ v) * a.data.sum()


def test_bcoo_sort_indices():
  _check(_bcoo_sort, ["bcoo_sort_indices", "bcoo_dot_general"], M, V)


def _bcoo_spdot(m, n):
  a = sparse.bcoo_fromdense(m, nse=NSE)
  b = sparse.bcoo_fromdense(n, nse=NSE)
  return sparse.bcoo_dot_general(
      a, b, dimension_numbers=(((1,), (0,)), ((), ()))).todense()


def test_bcoo_spdot_general_of_two_sparse_matrices():
  _check(_bcoo_spdot, ["bcoo_spdot_general"], M, M.T * 0.5 + 0.0)


def _bcoo_sampled(x, y):
  # The product of x and y, sampled where M is nonzero: the transpose of
  # bcoo_dot_general with respect to the sparse operand's data.
  indices = sparse.bcoo_fromdense(M, nse=NSE).indices
  return sparse.bcoo_dot_general_sampled(
      x, y, indices, dimension_numbers=(((1,), (0,)), ((), ())))


def test_bcoo_dot_general_sampled():
  _check(_bcoo_sampled, ["bcoo_dot_general_sampled"], M + 1.0, M.T - 0.5)


def test_bcoo_dot_general_sampled_from_the_gradient_of_a_sparse_product():
  indices = sparse.bcoo_fromdense(M, nse=NSE).indices

  def loss(data, b):
    a = sparse.BCOO((data, indices), shape=M.shape)
    return (a @ b).sum()

  data = sparse.bcoo_fromdense(M, nse=NSE).data
  f = jax.grad(loss)
  _check(f, ["bcoo_dot_general_sampled"], data, B)


# --------------------------------------------------------------- BCSR
def _bcsr_ops(m, v):
  a = sparse.bcsr_fromdense(m, nse=NSE)
  ext = sparse.bcsr_extract(a.indices, a.indptr, m * 3.0 - 1.0)
  b = sparse.BCSR((ext, a.indices, a.indptr), shape=m.shape)
  return sparse.bcsr_todense(a) @ v + (b @ v) + b.todense().sum(0)


def test_bcsr_fromdense_extract_todense():
  _check(_bcsr_ops, ["bcsr_fromdense", "bcsr_extract", "bcsr_todense"],
         M, V)


# --------------------------------------------------------- COO and CSR
def _coo_csr_ops(m, v, b):
  # One program for both formats: each compilation counts (a fast file).
  a = coo_lib.coo_fromdense(m, nse=NSE)
  c = csr_lib.csr_fromdense(m * 0.5, nse=NSE)
  return (coo_lib.coo_matvec(a, v).sum() + coo_lib.coo_matmat(a, b)
          + coo_lib.coo_todense(a)[:, :2]
          + csr_lib.csr_matvec(c, v).sum() + csr_lib.csr_matmat(c, b)
          + csr_lib.csr_todense(c)[:, 2:])


def test_coo_and_csr_fromdense_matvec_matmat_todense():
  _check(_coo_csr_ops, ["coo_fromdense", "coo_matvec", "coo_matmat",
                        "coo_todense", "csr_fromdense", "csr_matvec",
                        "csr_matmat", "csr_todense"], M, V, B, vmap=True)


# ------------------------------------------------------ generic, linalg
def _generic_todense(m, v):
  # sparse.todense binds the generic `todense` primitive, whose `tree`
  # param is the pytree structure of the sparse matrix (a BCOO node).
  return sparse.todense(sparse.BCOO.fromdense(m, nse=NSE)) @ v


def test_generic_todense():
  _check(_generic_todense, ["todense"], M, V)


def test_spsolve():
  a = M + 4.0 * jnp.eye(4, dtype=jnp.float32)  # nonsingular
  csr = csr_lib.CSR.fromdense(a)

  def f(data, b):
    return sparse_linalg.spsolve(data, csr.indices, csr.indptr, b)

  np.testing.assert_allclose(f(csr.data, V), np.linalg.solve(a, V),
                             rtol=1e-5)
  _check(f, ["spsolve"], csr.data, V, grad=True)


def test_a_todense_tree_is_a_known_format_or_refused():
  from jaxpr_io.families import sparse as sparse_codec  # pylint: disable=g-import-not-at-top
  a = jax.eval_shape(lambda m: sparse.BCOO.fromdense(m, nse=NSE), M)
  tree = jax.tree_util.tree_structure(a)
  stored = sparse_codec.encode_todense_tree(tree, {})
  assert stored == ("BCOO", (("shape", (4, 4)), ("indices_sorted", True),
                             ("unique_indices", True)), 2)
  assert sparse_codec.decode_todense_tree(stored, {}) == tree
  # Structures only: building them runs no computation (a fast test).
  shapes = jax.eval_shape(lambda m: (
      sparse.BCSR.fromdense(m, nse=NSE), sparse.COO.fromdense(m, nse=NSE),
      sparse.CSR.fromdense(m, nse=NSE), sparse.CSC.fromdense(m, nse=NSE)), M)
  for mat in shapes:
    other = jax.tree_util.tree_structure(mat)
    back = sparse_codec.decode_todense_tree(
        sparse_codec.encode_todense_tree(other, {}), {})
    assert back == other and str(back) == str(other)
  for bad, match in [
      (("Evil", stored[1], 2), "names the sparse format"),
      (("BCOO", stored[1], 3), "has 2 buffers"),
      (("BCOO", stored[1][:2], 2), "must have the keys"),
      (("BCOO", (("shape", (4, -1)),) + stored[1][1:], 2), "sizes"),
      (("BCOO", stored[1][:1] + (("indices_sorted", 1),) + stored[1][2:], 2),
       "a bool"),
      ((1, 2), "must be"),
      (jax.tree_util.tree_structure((0, 0)), "a leaf or a sparse format")]:
    with pytest.raises(jaxpr_io.FormatError, match=match):
      sparse_codec.decode_todense_tree(bad, {})
  with pytest.raises(jaxpr_io.UnsupportedError, match="only a dense array"):
    sparse_codec.encode_todense_tree(jax.tree_util.tree_structure((0, 0)), {})
