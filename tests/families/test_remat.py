"""`jax.checkpoint` policies and `checkpoint_name` round-trip.

Every policy of `jax.checkpoint_policies` is stored by factory name and
arguments and rebuilt by calling the factory again; the loaded program must
print like the original, re-dump to the same bytes, and differentiate to the
same program (the policy decides what the gradient saves, so the gradient's
jaxpr shows that the rebuilt policy behaves alike). A policy the user wrote
is refused with a message that names it.
"""

from __future__ import annotations

import functools
import re
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.ad_checkpoint import checkpoint_name

import jaxpr_io
import jaxpr_io.families.remat  # noqa: F401  (registers the policy codec)
from jaxpr_io import FormatError, UnsupportedError
from jaxpr_io.families.remat import decode_policy, encode_policy
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip, normalized_text

cp = jax.checkpoint_policies
_rng = np.random.RandomState(0)
W = _rng.randn(3, 8, 8).astype(np.float32) / 3
X = _rng.randn(4, 8).astype(np.float32)

POLICIES = {
    "none": None,
    "everything_saveable": cp.everything_saveable,
    "nothing_saveable": cp.nothing_saveable,
    "dots_saveable": cp.dots_saveable,
    "checkpoint_dots": cp.checkpoint_dots,
    "dots_with_no_batch_dims_saveable": cp.dots_with_no_batch_dims_saveable,
    "checkpoint_dots_with_no_batch_dims":
        cp.checkpoint_dots_with_no_batch_dims,
    "save_anything_except_these_names":
        cp.save_anything_except_these_names("h"),
    "save_any_names_but_these": cp.save_any_names_but_these("h", "z"),
    "save_only_these_names": cp.save_only_these_names("z", "h"),
    "save_from_both_policies": cp.save_from_both_policies(
        cp.save_only_these_names("h"),
        cp.save_from_both_policies(cp.dots_saveable,
                                   cp.save_any_names_but_these("z"))),
    "offload_dot_with_no_batch_dims":
        cp.offload_dot_with_no_batch_dims("device", "pinned_host"),
    "save_and_offload_only_these_names":
        cp.save_and_offload_only_these_names(
            names_which_can_be_saved=["h"], names_which_can_be_offloaded=["z"],
            offload_src="device", offload_dst="pinned_host"),
}


def _layer(w, x):
  h = checkpoint_name(jnp.tanh(x @ w), "h")
  z = checkpoint_name(jnp.sin(h) * 2.0, "z")
  return jnp.cos(z) + x


def _remat_scan(policy):
  """A scan over layers, each `jax.checkpoint`ed with `policy`."""
  layer = jax.checkpoint(_layer, policy=policy, prevent_cse=False)

  def fn(x, ws):
    def step(carry, w):
      return layer(w, carry), None
    out, _ = jax.lax.scan(step, x, ws)
    return jnp.sum(out ** 2)
  return fn


def _same_policy(a, b) -> bool:
  """Whether two policies were made alike: the same object, equal objects
  (JAX's dataclass policies), or closures of the same JAX code over equal
  values, sub-policies compared alike (JAX 0.12 makes most policies as
  closures, which compare by identity)."""
  if a is b:
    return True
  if type(a) is not type(b):
    return False
  if type(a) is types.FunctionType:
    cells_a = [c.cell_contents for c in a.__closure__ or ()]
    cells_b = [c.cell_contents for c in b.__closure__ or ()]
    return (a.__code__ is b.__code__ and len(cells_a) == len(cells_b)
            and all(_same_policy(x, y) for x, y in zip(cells_a, cells_b)))
  return a == b


def _remat_eqns(closed):
  """The `checkpoint` equations of a program, searching sub-jaxprs."""
  found, todo = [], [closed.jaxpr]
  while todo:
    jaxpr = todo.pop()
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "remat2":
        found.append(eqn)
      for v in eqn.params.values():
        if hasattr(v, "eqns"):
          todo.append(v)
        elif hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):
          todo.append(v.jaxpr)
  return found


@pytest.fixture(scope="module")
def scan_with_names_policy():
  original = jaxpr_io.trace(_remat_scan(cp.save_only_these_names("h")), X, W)
  return original, assert_roundtrip(original)


def test_scan_of_remat_layers_keeps_policy(scan_with_names_policy):
  original, loaded = scan_with_names_policy
  [eqn] = _remat_eqns(loaded.closed_jaxpr)
  assert _same_policy(eqn.params["policy"], cp.save_only_these_names("h"))
  names = [e.params["name"] for e in eqn.params["jaxpr"].eqns
           if e.primitive.name == "name"]
  assert names == ["h", "z"]
  assert jaxpr_io.dumps(loaded) == jaxpr_io.dumps(original)


def test_scan_of_remat_layers_grad_bit_identical(scan_with_names_policy):
  original, loaded = scan_with_names_policy
  grad = lambda p: jax.jit(jax.grad(p, argnums=(0, 1)))
  assert_bit_identical(grad(loaded)(X, W), grad(original)(X, W))
  # The policy decides the residuals, which the gradient program shows.
  assert (normalized_text(jax.make_jaxpr(jax.grad(loaded))(X, W)) ==
          normalized_text(jax.make_jaxpr(jax.grad(original))(X, W)))


def test_scan_of_remat_layers_vmap(scan_with_names_policy):
  original, loaded = scan_with_names_policy
  xs = np.stack([X, 2 * X])
  both = jax.jit(jax.vmap(lambda x: (jax.grad(original)(x, W),
                                     jax.grad(loaded)(x, W))))
  expected, actual = both(xs)
  assert_bit_identical(actual, expected)


@pytest.mark.parametrize("name", sorted(POLICIES))
def test_every_policy_roundtrips(name):
  policy = POLICIES[name]
  fn = _remat_scan(policy)
  original = jaxpr_io.trace(fn, X, W)
  loaded = assert_roundtrip(original)
  [eqn] = _remat_eqns(loaded.closed_jaxpr)
  rebuilt = eqn.params["policy"]
  assert encode_policy(rebuilt) == encode_policy(policy)
  # Singletons come back identical, dataclass policies equal, and closures
  # made by a factory as new closures of the same code over equal values.
  assert _same_policy(rebuilt, policy)
  # Same residual choices: the gradient programs print alike.
  grad_text = lambda p: normalized_text(jax.make_jaxpr(jax.grad(p))(X, W))
  assert grad_text(loaded) == grad_text(original)
  # One compilation for both (see tests/read_write/test_random.py `_together`).
  both = jax.jit(lambda x, w: (jax.grad(original)(x, w),
                               jax.grad(loaded)(x, w)))
  expected, actual = both(X, W)
  assert_bit_identical(actual, expected)


def test_policies_are_distinguished():
  # The gradient-program comparison above has teeth: policies that choose
  # different residuals give different gradient programs, even with the
  # policy's own printed text taken out.
  texts = {name: re.sub(r"policy=.*", "policy=?", normalized_text(
      jax.make_jaxpr(jax.grad(_remat_scan(POLICIES[name])))(X, W)))
           for name in ("none", "everything_saveable", "dots_saveable",
                        "save_only_these_names", "save_from_both_policies",
                        "offload_dot_with_no_batch_dims",
                        "save_and_offload_only_these_names")}
  assert len(set(texts.values())) == len(texts)


def test_plain_policies_come_back_as_jax_objects():
  for name in ("everything_saveable", "nothing_saveable", "dots_saveable",
               "dots_with_no_batch_dims_saveable"):
    policy = getattr(cp, name)
    assert decode_policy(encode_policy(policy)) is policy
  assert decode_policy(encode_policy(cp.checkpoint_dots)) is cp.dots_saveable


def test_stored_values():
  assert encode_policy(None) is None
  assert encode_policy(cp.checkpoint_dots) == (
      "jax.checkpoint_policies.dots_saveable",)
  assert encode_policy(cp.save_only_these_names("b", "a")) == (
      "jax.checkpoint_policies.save_only_these_names", frozenset({"a", "b"}))
  assert encode_policy(cp.offload_dot_with_no_batch_dims("device", "pinned_host")) == (
      "jax.checkpoint_policies.offload_dot_with_no_batch_dims", "device",
      "pinned_host")
  assert encode_policy(POLICIES["save_and_offload_only_these_names"]) == (
      "jax.checkpoint_policies.save_and_offload_only_these_names",
      frozenset({"h"}), frozenset({"z"}), "device", "pinned_host")
  # (Sub-policies that JAX 0.12's factory does not simplify away; see
  # test_save_from_both_is_rebuilt_by_the_factory.)
  assert encode_policy(cp.save_from_both_policies(
      cp.dots_saveable, cp.save_any_names_but_these("x"))) == (
          "jax.checkpoint_policies.save_from_both_policies",
          ("jax.checkpoint_policies.dots_saveable",),
          ("jax.checkpoint_policies.save_any_names_but_these",
           frozenset({"x"})))


@pytest.mark.parametrize("trivial", ["everything_saveable", "nothing_saveable"])
def test_save_from_both_is_rebuilt_by_the_factory(trivial):
  # A file written where save_from_both_policies keeps everything_saveable
  # or nothing_saveable as an argument (JAX 0.10, 0.11) loads as whatever
  # this JAX's factory makes of those arguments (JAX 0.12 returns one of
  # them), and a loaded policy stores again as what it is.
  names = cp.save_any_names_but_these("x")
  stored = ("jax.checkpoint_policies.save_from_both_policies",
            ("jax.checkpoint_policies." + trivial,),
            ("jax.checkpoint_policies.save_any_names_but_these",
             frozenset({"x"})))
  rebuilt = decode_policy(stored)
  expected = cp.save_from_both_policies(getattr(cp, trivial), names)
  assert _same_policy(rebuilt, expected)
  assert encode_policy(rebuilt) == encode_policy(expected)
  grad_text = lambda p: normalized_text(
      jax.make_jaxpr(jax.grad(_remat_scan(p)))(X, W))
  assert grad_text(rebuilt) == grad_text(expected)


def test_checkpoint_name_roundtrips():
  def fn(x):
    y = checkpoint_name(jnp.sin(x), "first")
    return checkpoint_name(y * y, "second").sum()
  original = jaxpr_io.trace(fn, X)
  loaded = assert_roundtrip(original)
  names = [e.params["name"] for e in loaded.closed_jaxpr.jaxpr.eqns
           if e.primitive.name == "name"]
  assert names == ["first", "second"]
  assert_bit_identical(jax.grad(loaded)(X), jax.grad(original)(X))


def _my_policy(prim, *args, **params):
  del prim, args, params
  return True


def test_user_policy_is_refused():
  fn = jax.checkpoint(jnp.sin, policy=_my_policy)
  with pytest.raises(UnsupportedError) as info:
    jaxpr_io.dumps(jaxpr_io.trace(fn, X))
  message = str(info.value)
  assert message.startswith("equation 0 (remat2), param 'policy': ")
  assert "tests.families.test_remat._my_policy" in message
  assert "save_only_these_names" in message and "policy=None" in message


def test_user_policy_inside_save_from_both_is_refused():
  policy = cp.save_from_both_policies(cp.dots_saveable, _my_policy)
  fn = _remat_scan(policy)
  with pytest.raises(UnsupportedError) as info:
    jaxpr_io.dumps(jaxpr_io.trace(fn, X, W))
  message = str(info.value)
  assert "(scan)" in message and "(remat2), param 'policy'" in message
  assert "in save_from_both_policies" in message
  assert "_my_policy" in message


def test_partial_is_not_mistaken_for_a_factory_policy():
  policy = functools.partial(_my_policy)
  with pytest.raises(UnsupportedError, match="_my_policy|partial"):
    encode_policy(policy)


@pytest.mark.parametrize("stored, match", [
    ("jax.checkpoint_policies.dots_saveable", "not a .name, \\*args. tuple"),
    ((), "not a .name, \\*args. tuple"),
    (("jax.checkpoint_policies.my_policy",), "unknown checkpoint policy"),
    (("dots_saveable",), "unknown checkpoint policy"),
    (("jax.checkpoint_policies.dots_saveable", 1), "takes 0 arguments"),
    (("jax.checkpoint_policies.save_only_these_names", ("a",)),
     "must be a frozenset"),
    (("jax.checkpoint_policies.offload_dot_with_no_batch_dims", "device", 3),
     "memory kind string"),
    (("jax.checkpoint_policies.save_and_offload_only_these_names",
      frozenset({"a"}), frozenset({"a"}), "device", "pinned_host"),
     "cannot be rebuilt"),
    (("jax.checkpoint_policies.save_from_both_policies",
      ("jax.checkpoint_policies.nothing_saveable",), ("nope",)),
     "unknown checkpoint policy"),
])
def test_malformed_stored_policy(stored, match):
  with pytest.raises(FormatError, match=match):
    decode_policy(stored)


_ATOMS = st.one_of(
    st.none(), st.booleans(), st.integers(-2, 3), st.text(max_size=3),
    st.sampled_from([jaxpr_io.families.remat.PREFIX + n
                     for n in jaxpr_io.families.remat.compat_remat.FACTORY_NAMES]
                    + ["device", "pinned_host"]))
_VALUES = st.recursive(
    _ATOMS, lambda inner: st.one_of(
        st.lists(inner, max_size=5).map(tuple),
        st.frozensets(st.one_of(st.text(max_size=2), st.integers(0, 3)),
                      max_size=3)),
    max_leaves=12)


@settings(max_examples=300, deadline=None, database=None, derandomize=True,
          suppress_health_check=list(HealthCheck))
@given(stored=_VALUES)
def test_arbitrary_stored_values_rebuild_or_raise_format_error(stored):
  try:
    policy = decode_policy(stored)
  except FormatError:
    return
  # What decodes re-encodes to the same stored value (re-dump identity),
  # up to what JAX's own save_from_both_policies simplifies.
  assert encode_policy(policy) == _reencoded(stored)


def _reencoded(stored):
  """What a decodable stored policy re-encodes to: itself, except that a
  save_from_both_policies for which this JAX's factory returns one of its
  arguments (JAX 0.12, given everything_saveable or nothing_saveable) is
  that argument."""
  prefix = jaxpr_io.families.remat.PREFIX
  if type(stored) is not tuple or stored[0] != prefix + "save_from_both_policies":
    return stored
  parts = tuple(_reencoded(p) for p in stored[1:])
  policies = [decode_policy(p) for p in parts]
  both = cp.save_from_both_policies(*policies)
  for part, policy in zip(parts, policies):
    if both is policy:
      return part
  return (stored[0], *parts)
