"""JAX internals for symbolic (shape-polymorphic) dimensions."""

from __future__ import annotations

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


def solve_dims(avals, tree, shapes) -> dict[str, int]:
  """Values of the dimension variables of `avals` given the actual `shapes`
  of the arguments (JAX's own solver: handles `b`, `2*b`, `b + c`, ...)."""
  solution, constraints, synthetic = shape_poly.solve_dim_vars(
      tuple(avals), args_kwargs_tree=tree)
  evaluator = shape_poly.ShapeEvaluator(
      {name: shapes[arg][dim] for name, arg, dim in synthetic})
  constraints.shape_assertions(evaluator)
  return {var: int(evaluator.evaluate(expr)) for var, expr in solution.items()}


def evaluate_dim(dim, env: dict[str, int]) -> int:
  return int(shape_poly.ShapeEvaluator(env).evaluate(dim))
