"""Every primitive of the installed JAX is storable or listed with a reason
(tests/support/primitive_census.py). A primitive that a new JAX release adds fails
here until it is one of the two; a listed primitive that has become storable
fails until it leaves the list, so the list stays true."""

from __future__ import annotations

import pytest

from tests.support import primitive_census
from tests.support.zoo2 import ZOO2

import jaxpr_io
from jaxpr_io.safety import validate


@pytest.fixture(scope="module")
def classes():
  return primitive_census.classify()


def test_every_primitive_is_accounted_for(classes, capsys):
  with capsys.disabled():
    print(f"\n{primitive_census.summary(classes)}")
  assert not classes["unaccounted"], (
      "primitives that are neither storable nor listed in NOT_STORABLE or "
      f"NEVER_TRACED: {classes['unaccounted']}")
  # Most of JAX is storable: a broken primitive table would show here.
  assert len(classes["storable"]) > 300


def test_listed_primitives_are_refused_by_name(classes):
  # A listed primitive is not in jaxpr_io's table, so a program using it
  # fails at dumps with UnsupportedError naming it (tests of the writer
  # cover the message); here: none of them is registered, except those
  # whose param a codec of jaxpr_io's refuses, with a message of its own
  # (tests/read_write/test_coverage_lax.py).
  for name, _ in classes["listed"]:
    if name in primitive_census.NEVER_TRACED:
      continue  # in the table or not: no traced program holds them
    param = primitive_census.REFUSED_BY_PARAM.get(name)
    if param is not None:
      assert (name, param) in jaxpr_io.codec.registry.EQN_PARAM_CODECS, name
      continue
    assert jaxpr_io.codec.registry.PRIMITIVES.lookup(name) is None, name


# The second zoo's programs that hold the primitives it was made for. Only
# these are traced here (the rest of the zoo, Diffrax or Keras, costs a
# minute under jax 0.12 and holds none of them).
_ZOO2_PRIMITIVES = {
    "ragged_moe": {"ragged_dot_general"},
    "composite_gelu": {"composite"},
    "bcoo_matmul": {"bcoo_dot_general"},
    "bcsr_matmul": {"bcsr_dot_general"},
    "refs_accumulate": {"new_ref", "get", "swap"},
    "run_state_loop": {"run_state", "get", "swap"},
}


@pytest.mark.parametrize("name", sorted(_ZOO2_PRIMITIVES))
def test_second_zoo_uses_the_new_primitives(name):
  # The round trips of these primitives are tests/read_write/test_zoo.py's (zoo2).
  fn, args, kwargs = ZOO2[name]()
  seen = set()
  for jaxpr in validate.walk_jaxprs(
      jaxpr_io.trace(fn, *args, **kwargs).closed_jaxpr.jaxpr):
    seen.update(eqn.primitive.name for eqn in jaxpr.eqns)
  assert _ZOO2_PRIMITIVES[name] <= seen, _ZOO2_PRIMITIVES[name] - seen
