"""JAX internals for symbolic (shape-polymorphic) dimensions."""

from __future__ import annotations

from typing import Any

from jax._src.export import shape_poly

DimExpr = shape_poly._DimExpr  # pylint: disable=protected-access
SymbolicScope = shape_poly.SymbolicScope


def scope_of(dim) -> SymbolicScope:
  return dim.scope


def scope_constraints(scope) -> tuple[str, ...]:
  """The scope's explicit constraints, as the user wrote them, in order."""
  return tuple(c.debug_str for c in scope._explicit_constraints)  # pylint: disable=protected-access


def new_scope(constraints) -> SymbolicScope:
  return shape_poly.SymbolicScope(tuple(constraints))


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
