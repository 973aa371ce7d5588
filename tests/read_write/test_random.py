"""PRNG keys and random primitives round-trip bit-identically.

Typed keys of each built-in implementation (`threefry2x32`, `rbg`,
`unsafe_rbg`) and legacy uint32 keys, as program inputs, outputs and
constants; the random primitives (`random_seed`, `random_wrap`,
`random_unwrap`, `random_bits`, `random_split`, `random_fold_in`,
`random_gamma`) and the samplers built on them (categorical, permutation).
Each program is compared with the original under `jit`, under `vmap` over a
batch of keys made by `jax.random.split`, and (for `gamma`) under `grad`.
To keep compile time low, most comparisons jit the original and the loaded
program as one function.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import compat
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip
from tests.support.groups import grouped

IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")
X = np.linspace(-1.0, 1.0, 6, dtype=np.float32)
ALPHA = np.array([0.3, 1.0, 2.5, 7.0], np.float32)


def _primitive_names(closed) -> set[str]:
  """Names of the primitives of a program and of all its sub-jaxprs."""
  names, todo, seen = set(), [closed.jaxpr], set()
  while todo:
    jaxpr = todo.pop()
    if id(jaxpr) in seen:
      continue
    seen.add(id(jaxpr))
    for eqn in jaxpr.eqns:
      names.add(eqn.primitive.name)
      for value in eqn.params.values():
        for v in value if type(value) is tuple else (value,):
          if type(v) is compat.ClosedJaxpr:
            todo.append(v.jaxpr)
          elif type(v) is compat.Jaxpr:
            todo.append(v)
  return names


def _everything(impl):
  """A program over a typed key of `impl` using every random primitive,
  with a key constant (closed over) and keys among its outputs."""
  const_key = jax.random.key(123, impl=impl)

  def fn(key, x, alpha):
    k1, k2, k3, k4, k5 = jax.random.split(key, 5)
    seeded = jax.random.key(jnp.int32(7), impl=impl)          # random_seed
    data = jax.random.key_data(k1)                             # random_unwrap
    rewrapped = jax.random.wrap_key_data(data, impl=impl)      # random_wrap
    folded = jax.random.fold_in(rewrapped, 11)                 # random_fold_in
    return {
        "normal": x + jax.random.normal(folded, x.shape),
        "bits": jax.random.bits(k2, (3,), jnp.uint32),         # random_bits
        "gamma": jax.random.gamma(k3, alpha),                  # random_gamma
        "categorical": jax.random.categorical(
            k4, jnp.log(jnp.array([0.1, 0.2, 0.3, 0.4])), shape=(8,)),
        "permutation": jax.random.permutation(k5, 10),
        "from_const": jax.random.uniform(const_key, (2,)),
        "seeded": jax.random.randint(seeded, (3,), 0, 100),
        "keys": (folded, const_key, jax.random.split(seeded, 2)),
    }
  return fn


def _batchable(key, x):
  """A smaller program for `vmap` over keys (gamma and sorting make the
  batched program slow to compile without covering anything new)."""
  k1, k2 = jax.random.split(key)
  data = jax.random.key_data(jax.random.fold_in(k1, 3))
  k3 = jax.random.wrap_key_data(data, impl=jax.random.key_impl(key))
  return (x + jax.random.normal(k3, x.shape), jax.random.bits(k2, (2,)),
          jax.random.categorical(k2, x), k3)


def _together(original, loaded, transform=lambda p: p):
  """One jitted function computing both programs: a single compilation
  (XLA may merge the two only where they are the same computation)."""
  return jax.jit(lambda *args: (transform(original)(*args),
                                transform(loaded)(*args)))


@pytest.fixture(scope="module", params=grouped(IMPLS, "random"))
def typed(request):
  impl = request.param
  key = jax.random.key(0, impl=impl)
  original = jaxpr_io.trace(_everything(impl), key, X, ALPHA)
  loaded = assert_roundtrip(original)
  return impl, key, original, loaded


def test_typed_keys_cover_random_primitives(typed):
  _, _, original, loaded = typed
  names = _primitive_names(loaded.closed_jaxpr)
  assert {"random_seed", "random_wrap", "random_unwrap", "random_bits",
          "random_split", "random_fold_in", "random_gamma"} <= names, names
  assert names == _primitive_names(original.closed_jaxpr)
  # The closed-over key is a constant of key type in the file.
  assert any(compat.is_prng_key_dtype(v.aval.dtype)
             for v in loaded.closed_jaxpr.jaxpr.constvars)


def test_typed_keys_jit(typed):
  impl, key, original, loaded = typed
  if impl == "threefry2x32":
    # Compiled separately once, so no XLA merging can hide a difference.
    expected = jax.jit(original)(key, X, ALPHA)
    actual = jax.jit(loaded)(key, X, ALPHA)
  else:
    expected, actual = _together(original, loaded)(key, X, ALPHA)
  assert_bit_identical(actual, expected)
  folded, const_key, _ = actual["keys"]
  assert jax.random.key_impl(folded) == jax.random.key_impl(key)
  assert str(jax.random.key_impl(const_key)) == impl


@pytest.mark.parametrize("impl", IMPLS)
def test_typed_keys_vmap_over_split_keys(impl):
  key = jax.random.key(1, impl=impl)
  original = jaxpr_io.trace(_batchable, key, X)
  loaded = assert_roundtrip(original)
  keys = jax.random.split(key, 3)
  expected, actual = _together(
      original, loaded, lambda p: jax.vmap(p, in_axes=(0, None)))(keys, X)
  assert_bit_identical(actual, expected)


def test_gamma_grad():
  key = jax.random.key(2)

  def fn(a):
    return jax.random.gamma(key, a).sum()
  original = jaxpr_io.trace(fn, ALPHA)
  loaded = assert_roundtrip(original)
  expected, actual = _together(original, loaded, jax.grad)(ALPHA)
  assert_bit_identical(actual, expected)


def test_legacy_uint32_keys():
  const_key = jax.random.PRNGKey(5)

  def fn(key, x):
    k1, k2 = jax.random.split(key)
    return (x * jax.random.bernoulli(k1, 0.5, x.shape),
            jax.random.permutation(k2, 5),
            jax.random.normal(const_key, (2,)),
            jax.random.fold_in(key, 3))        # a legacy key as an output
  key = jax.random.PRNGKey(42)
  assert key.dtype == np.uint32
  original = jaxpr_io.trace(fn, key, X)
  loaded = assert_roundtrip(original)
  expected, actual = _together(original, loaded)(key, X)
  assert_bit_identical(actual, expected)
  keys = jax.random.split(key, 3)   # legacy: uint32[3, 2]
  expected, actual = _together(
      original, loaded, lambda p: jax.vmap(p, in_axes=(0, None)))(keys, X)
  assert_bit_identical(actual, expected)


def test_key_array_output_and_input_shapes():
  # Batched keys in and out, and a key-typed program with no other data.
  def fn(keys):
    return jax.vmap(lambda k: jax.random.split(k, 2))(keys)
  keys = jax.random.split(jax.random.key(9, impl="rbg"), 4)
  original = jaxpr_io.trace(fn, keys)
  loaded = assert_roundtrip(original)
  out = loaded(keys)
  assert out.shape == (4, 2)
  assert str(jax.random.key_impl(out)) == "rbg"
  assert_bit_identical(out, original(keys))
