"""The checks of their own that some primitives' equations get on every
load, beyond arity and the checks of their params (read.equations runs
them as it builds a jaxpr): what JAX itself would not refuse, or only once
the program runs, and what an untrusted file may not ask for.
"""

from __future__ import annotations

from typing import Callable

from jaxpr_io.errors import FormatError
from jaxpr_io.families.custom_rules import rule_types
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.families.hijax import prims as hi_prims
from jaxpr_io.safety import printing
from jaxpr_io.safety import shape_rules

# Primitives whose equations need a check of their own, beyond arity:
# name -> the check (the problem, or None). Hi primitives' `_prim` must
# type the equation (shape_rules.hi_primitive_types); JAX 0.10's boxes and
# logs must be taken and made where their rules expect
# (hi_mutable.equation_problem).
_EQUATION_CHECKS: dict[str, Callable] = {
    "custom_lin": rule_types.lin_problem,
    "call_hi_primitive": shape_rules.hi_primitive_types,
    "call_hi_primitive_linearized": shape_rules.hi_linearized_types,
    **dict.fromkeys(hi_mutable.PRIMITIVE_NAMES, hi_mutable.equation_problem),
}


def _untrusted_hi(check):
  """An untrusted file's hi primitive: also the path search of an einsum
  (jaxpr_io/format/limits.py, EINSUM_SEARCH_OPERANDS)."""
  return lambda eqn: check(eqn) or hi_prims.search_problem(eqn)


# Untrusted files also: the characters one debug_print call may print, and
# the path search an einsum asks for.
_UNTRUSTED_CHECKS = {
    **_EQUATION_CHECKS,
    "debug_print": printing.equation_problem,
    **{name: _untrusted_hi(_EQUATION_CHECKS[name])
       for name in ("call_hi_primitive", "call_hi_primitive_linearized")},
}



def check(eqns: list, used: set[str], trusted: bool) -> None:
  """Raises FormatError naming the first of `eqns` (whose primitives'
  names are `used`) that its primitive's check refuses."""
  checks = _EQUATION_CHECKS if trusted else _UNTRUSTED_CHECKS
  if used.isdisjoint(checks):
    return
  for i, e in enumerate(eqns):
    problem = checks.get(e.primitive.name, _no_problem)(e)
    if problem:
      raise FormatError(f"equation {i} ({e.primitive.name}): {problem}")


def _no_problem(eqn) -> None:
  del eqn
