"""JAX internals for symbolic (shape-polymorphic) dimensions."""

from __future__ import annotations

import contextlib
import functools
import threading
from typing import Any

from jax._src.export import shape_poly
from jax._src.export import shape_poly_decision

DimExpr = shape_poly._DimExpr  # pylint: disable=protected-access
SymbolicScope = shape_poly.SymbolicScope


def scope_of(dim) -> SymbolicScope:
  return dim.scope


def scope_constraints(scope) -> tuple[str, ...]:
  """The scope's explicit constraints, as the user wrote them, in order."""
  return tuple(c.debug_str for c in scope._explicit_constraints)  # pylint: disable=protected-access


def new_scope(constraints) -> SymbolicScope:
  return shape_poly.SymbolicScope(tuple(constraints))


class DecisionBudgetExceeded(Exception):
  """JAX's decision procedure took more steps than `decision_budget`
  allows."""


# JAX decides `max`, `min` and comparisons of symbolic dimensions by
# combining the scope's constraints, and the implicit ones of each `max`,
# `min`, `floordiv` and `mod` in the expression, term by term: the work is
# exponential in them (a 113-byte `max` of sums of `max`es runs for
# minutes). These are the procedure's steps: its recursion, its combination
# of a term with the constraints, and each constraint it adds to its state.
_STEPS = ("_bounds_for_sorted_terms", "combine_term_with_existing",
          "add_to_state")
_budget = threading.local()


def _counted(method):
  @functools.wraps(method)
  def counted(*args, **kwargs):
    left = getattr(_budget, "left", None)
    if left is not None:
      if left <= 0:
        raise DecisionBudgetExceeded()
      _budget.left = left - 1
    return method(*args, **kwargs)
  counted._jaxpr_io_counted = True  # pylint: disable=protected-access
  return counted


_Decision = getattr(shape_poly_decision, "_DecisionByElimination", None)
# Whether this JAX's procedure has the steps counted (else the budget is
# not enforced, and the reader relies on its other limits only).
DECISION_BUDGET_ENFORCED = _Decision is not None and all(
    callable(getattr(_Decision, name, None)) for name in _STEPS)
if DECISION_BUDGET_ENFORCED:
  for _name in _STEPS:
    if not getattr(getattr(_Decision, _name), "_jaxpr_io_counted", False):
      setattr(_Decision, _name, _counted(getattr(_Decision, _name)))


@contextlib.contextmanager
def decision_budget(steps: int | None):
  """Within the block, JAX's decision procedure may take at most `steps`
  steps in this thread, in all (None: no limit), else raises
  `DecisionBudgetExceeded`; `steps_left()` tells how many are left."""
  previous = getattr(_budget, "left", None)
  _budget.left = steps
  try:
    yield
  finally:
    _budget.left = previous


def steps_left() -> int | None:
  return getattr(_budget, "left", None)


def parse_dim(text: str, scope: SymbolicScope):
  """One dimension expression, parsed by JAX's own parser (no eval)."""
  dims = shape_poly.symbolic_shape(text, scope=scope)
  if len(dims) != 1:
    raise ValueError(f"{text!r} is not one dimension expression")
  return dims[0]


def is_symbolic(d) -> bool:
  return type(d) is DimExpr


def solve_dims(avals, tree, shapes) -> dict:
  """Values of the dimension variables of `avals` given the actual `shapes`
  of the arguments (JAX's own solver: handles `b`, `2*b`, `b + c`, ...).

  Sizes are ints; where `shapes` are themselves symbolic (the program is
  traced inside another shape-polymorphic trace: `jax.export` of a caller,
  jax2tf), a variable's value is an expression in the shapes' own scope, and
  the constraints are left to that trace (its own shape assertions)."""
  solution, constraints, synthetic = shape_poly.solve_dim_vars(
      tuple(avals), args_kwargs_tree=tree)
  evaluator = shape_poly.ShapeEvaluator(
      {name: shapes[arg][dim] for name, arg, dim in synthetic})
  if not any(is_symbolic(v) for v in evaluator.env.values()):
    constraints.shape_assertions(evaluator)
  return {var: _as_size(evaluator.evaluate(expr))
          for var, expr in solution.items()}


def _as_size(value):
  """An int for a constant size, else the expression itself."""
  if is_symbolic(value):
    return value
  return int(value)


def evaluate_dim(dim, env: dict):
  """`dim` with the variables of `env` replaced by their values (ints or
  expressions); variables that `env` lacks stay as they are."""
  missing = dim._get_vars() - env.keys()  # pylint: disable=protected-access
  if missing:
    env = dict(env)
    for var in missing:
      env[var] = parse_dim(var, dim.scope)
  return _as_size(shape_poly.ShapeEvaluator(env).evaluate(dim))


def same_dims(shape1, shape2) -> bool:
  """Whether two shapes are the same dimension by dimension, without
  comparing expressions of different scopes (which JAX refuses)."""
  if len(shape1) != len(shape2):
    return False
  for d1, d2 in zip(shape1, shape2):
    if is_symbolic(d1) != is_symbolic(d2):
      return False
    if is_symbolic(d1) and d1.scope is not d2.scope:
      return False
    if d1 is not d2 and d1 != d2:
      return False
  return True


def dim_vars(avals) -> set[str]:
  """The names of the dimension variables in the shapes of `avals`."""
  names: set[str] = set()
  for a in avals:
    for d in getattr(a, "shape", ()):
      if is_symbolic(d):
        names |= d._get_vars()  # pylint: disable=protected-access
  return names


def is_equality_lhs(dim) -> bool:
  """Whether JAX takes `dim` as the left side of an equality constraint:
  a term times a coefficient (`2*b`, `max(2, b)`; not `3`, not `b + 2`)."""
  return is_symbolic(dim) and len(dim._sorted_terms) == 1  # pylint: disable=protected-access


def explicit_constraints(scope) -> list[tuple[str, Any, str, Any]]:
  """The scope's explicit constraints as (text as the user wrote it, left
  side, "==" or ">=", right side), in order."""
  return [(c.debug_str, c.e1,
           "==" if c.cmp == shape_poly.Comparator.EQ else ">=", c.e2)
          for c in scope._explicit_constraints]  # pylint: disable=protected-access


def check_satisfiable(dim) -> None:
  """Raises ValueError (JAX's "Unsatisfiable constraint: ...") when the
  constraints of `dim`'s scope leave it no value: JAX decides that only
  when it first bounds an expression of the scope."""
  shape_poly._bounds_decision(dim, shape_poly.BoundsPrecision.BEST)  # pylint: disable=protected-access
