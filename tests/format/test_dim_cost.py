"""The bound of jaxpr_io/format/dim_cost.py: never below what JAX builds,
far below its cap for real programs, over it for the bombs.

The reference is JAX's own parser: random expressions, with and without
equality constraints that rewrite variables, are parsed by JAX and the
monomials of its result compared with the bound. The real programs are
those of JAX's shape-polymorphism harnesses (`python -m tests.shape_poly`,
jax 0.5.0's jax2tf shape_poly_test.py): every dimension and shape of the
1,434 programs they trace, as jaxpr_io writes them (collected once by
tracing each harness and recording what the reader bounds), and the
constraint sets of JAX's own tests/shape_poly_test.py.
"""

import itertools
import random

import pytest

from jaxpr_io.compat import symbolic
from jaxpr_io.errors import FormatError
from jaxpr_io.format import dim_cost

CAP = dim_cost.MAX_DIM_WORK

# Every dimension and shape of the programs of JAX's harnesses.
SUITE_DIMS = [
    "- floordiv(- 2*floordiv(- b, 2) - b + 2, 2) - 2*floordiv(- b, 2) - b "
    "+ 2", "max(floordiv(b - 8, 2) + 1, 0)",
    "floordiv(- 2*floordiv(- b, 2) - b + 2, 2)", "max(- b + 9, 0)",
    "- mod(- 2, 4*b) + 4*b", "b^2 + b + 2", "floordiv(b - 1, 2) + 1",
    "- mod(- 2, b) + b", "2*b - 1", "2*b^2", "5*b1*b3", "84*b0*b2",
    "mod(- 2, 4*b)", "b + 2", "b - 1", "b - 2", "n + m", "- floordiv(- b, 2)",
    "16*b1", "2*b", "3*b", "32*b", "b^2", "mod(- 2, b)", "b", "k", "m", "n",
    "t", "w"]
SUITE_SHAPES = [
    ["b - 1", "max(- b + 9, 0)"], ["b", "b + 2"], ["b", "k", "k"],
    ["b0", "b1", "b3"], ["m", "n + m"], ["2*b", "b"], ["b0", "5*b1*b3"],
    ["b", "w", "w"], ["b0", "b0"]]
# Constraint sets of JAX's tests/shape_poly_test.py (JAX accepts each).
SUITE_CONSTRAINTS = [
    ("mod(a + mod(a, 2), -2) == 0",
     "-2*floordiv(a + mod(a, 2), -2) == a + mod(a, 2)"),
    ("floordiv(d, 2) == a + 5", "floordiv(c, 3) == a + 3", "b == a + 1"),
    ("b == a", "c >= b + 3", "floordiv(d, 2) == floordiv(max(c, a), 3) + 2"),
    ("max(a, b) >= 8", "min(a, b) <= 2", "floordiv(a, 4) >= 2",
     "mod(a, b) >= 2", "mod(max(a, b), 4) >= 2"),
    ("128 * b * floordiv(t + mod(-1*t, 128), 128) == b * t + b * "
     "mod(-1*t, 128)",),
    ("a1 >= a3 + 1", "a3 >= a2 + 4", "a1 <= a4 + 2", "a4 <= a2 + 2"),
    ("b == a", "c == a + b", "d == 5"), ("floordiv(s + 1, 2) == - "
                                         "floordiv(- s, 2)",),
    ("min(a, b) == b - min(b, 2)",), ("max(a, b) == 4", "a == b"),
    ("4*d == a - m", "m >= 0", "m <= 3"), ("mod(b, 4) == 0",),
]


def test_power_terms_counts_the_monomials_of_a_power():
  """C(n+k-1, k): the multisets of k of n distinct monomials, counted."""
  for n in range(1, 6):
    for k in range(0, 6):
      count = len(set(itertools.combinations_with_replacement(range(n), k)))
      assert dim_cost.power_terms(n, k) == count, (n, k)
  assert dim_cost.power_terms(10**18, 64) == 1 << 62  # saturated


def test_real_programs_cost_far_below_the_cap():
  scope = dim_cost.Scope(())
  for text in SUITE_DIMS:
    assert scope.cost(text) <= CAP // 100, text
  for shape in SUITE_SHAPES:
    assert scope.shape_cost(shape) <= CAP // 100, shape
  for constraints in SUITE_CONSTRAINTS:
    scope = dim_cost.Scope(constraints)
    assert sum(scope.constraint_work) <= CAP // 100, constraints
    assert scope.cost("a*b^2 + max(a, b)") <= CAP // 50, constraints


@pytest.mark.parametrize("text", [
    "max(b+c+d+e+f+g+h+i, 0)^64",          # 10^9 monomials, 448-byte file
    "min(b+c+d+e+f+g+h+i+j+k+l+m, 5)^6",
    "max(b+c+d+e, 1)^8*max(f+g+h+i, 1)^8",
    "floordiv(max(b+c+d+e+f+g, 0)^16, 2)",  # built inside an atom
    "max(b+c+d+e+f+g+h+i, 0)^64 >= 1",      # a constraint's side
])
def test_sums_raised_to_powers_are_over_the_cap(text):
  if ">=" in text:
    with pytest.raises(FormatError, match=r"symbolic constraint 0 .*its "
                       r"side .*monomials.*over the limit of "):
      dim_cost.Scope((text,))
    return
  with pytest.raises(FormatError, match=rf"symbolic dimension .*monomials"
                     rf".*over the limit of {CAP:,}"):
    dim_cost.Scope(()).cost(text)


def test_a_shape_multiplied_out_is_bounded():
  scope = dim_cost.Scope(())
  sums = ["+".join(f"{v}{j}" for j in range(8)) for v in "bcdefg"]
  for text in sums:
    assert scope.cost(text) < CAP
  with pytest.raises(FormatError, match="a shape of the symbolic "
                     "dimensions.*size"):
    scope.shape_cost(sums)
  # The same dimension repeated is a power: (b + 1)^16 has 17 monomials.
  scope.cost("b + 1")
  assert scope.shape_cost(["b + 1"] * 16) < CAP // 10


def test_equality_constraints_count_their_rewrites():
  """`j == c + ... + k` makes every `j` a sum of 8: j^8 is refused although
  its text has one variable."""
  assert dim_cost.Scope(()).cost("j^8") < 100
  scope = dim_cost.Scope(("j == c+d+e+f+g+h+i+k",))
  with pytest.raises(FormatError, match="'j\\^8'.*monomials"):
    scope.cost("j^8")


@pytest.mark.parametrize("constraints,name", [
    (("g == g*c + 1",), "g"),
    (("e == g + 3", "f == a", "g == e*f + 1"), "e"),
    (("b >= 2", "f == mod(f, 3) + c"), "f"),
])
def test_variables_defined_in_terms_of_themselves_are_refused(constraints,
                                                              name):
  with pytest.raises(FormatError, match=rf"symbolic constraint \d .*define "
                     rf"'{name}' in terms of itself"):
    dim_cost.Scope(constraints)


def _expression(rng, depth, names):
  if depth == 0 or rng.random() < 0.25:
    return rng.choice(names) if rng.random() < 0.7 else str(
        rng.randint(1, 3))
  kind = rng.choice(["sum", "sum", "prod", "pow", "op"])
  if kind == "sum":
    return " + ".join(_expression(rng, depth - 1, names)
                      for _ in range(rng.randint(2, 4)))
  if kind == "prod":
    return "*".join(_factor(rng, depth - 1, names) for _ in range(2))
  if kind == "pow":
    return _factor(rng, depth - 1, names) + f"^{rng.randint(0, 4)}"
  return _factor(rng, depth, names)


def _factor(rng, depth, names):
  if depth <= 0 or rng.random() < 0.3:
    return rng.choice(names)
  op = rng.choice(["max", "min", "floordiv", "mod"])
  second = (_expression(rng, depth - 1, names) if op in ("max", "min")
            else str(rng.randint(1, 4)))
  return f"{op}({_expression(rng, depth - 1, names)}, {second})"


def test_the_bound_is_never_below_what_jax_builds():
  rng = random.Random(38)
  names = ["a", "b", "c", "e", "f", "g"]
  checked = 0
  for _ in range(400):
    constraints = []
    if rng.random() < 0.5:
      for v in rng.sample(["e", "f", "g"], rng.randint(1, 3)):
        constraints.append(f"{v} == {_expression(rng, 2, names)}")
      if rng.random() < 0.3:
        constraints.append(f"mod(a, {rng.randint(2, 4)}) == 0")
    text = _expression(rng, 3, names)
    try:
      terms, _ = dim_cost.Scope(constraints).bound(text)
    except FormatError:
      continue  # refused: JAX never sees it
    try:
      # JAX decides max/min in time exponential in them: skip the slow.
      with symbolic.decision_budget(20_000):
        dim = symbolic.parse_dim(text, symbolic.new_scope(constraints))
    except (symbolic.DecisionBudgetExceeded, ValueError, TypeError,
            ArithmeticError, NotImplementedError, RecursionError):
      continue
    built = len(dim._sorted_terms) if symbolic.is_symbolic(dim) else 1  # pylint: disable=protected-access
    assert built <= terms, (constraints, text, built, terms)
    checked += 1
  assert checked > 250, checked


def test_the_decision_budget_counts_jax_s_steps():
  nested = "max(" * 8 + "a" + "".join(f", v{i})" for i in range(8))
  scope = symbolic.new_scope(())
  with symbolic.decision_budget(10**9):
    symbolic.parse_dim(nested, scope)
    taken = 10**9 - symbolic.steps_left()
  assert symbolic.DECISION_BUDGET_ENFORCED
  assert 1000 < taken < 10**6, taken
  with pytest.raises(symbolic.DecisionBudgetExceeded):
    with symbolic.decision_budget(taken // 2):
      symbolic.parse_dim(nested, symbolic.new_scope(()))
  assert symbolic.steps_left() is None  # restored after the block
