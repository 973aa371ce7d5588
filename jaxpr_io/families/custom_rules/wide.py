"""`symbolic_zeros=True` rules with more differentiable inputs (outputs,
for a backward rule) than `MAX_PATTERN_INPUTS`, and JVP and backward rules
whose patterns would hold more than `MAX_PATTERN_EQUATIONS` equations:
stored for their widest patterns only, which serve the others when loaded.

Such a rule is stored once per pattern of symbolic zeros, 2**n jaxprs
(jaxpr_io/families/custom_rules/registrations.py). Over the limit the
writer stores only the widest pattern: every input perturbed (a forward
rule), no tangent or cotangent a zero (a JVP or backward rule). Where the
rule raises for that pattern (Equinox's `filter_custom_vjp` asserts that
the arguments after its first are not perturbed), that error is stored for
it, and beside it the widest pattern that perturbs a prefix of the
differentiable inputs and traces (Equinox's differentiable argument comes
first).

The loaded rule serves a pattern that is not stored from a stored one that
covers it (`covering_pattern`): a forward rule from one that perturbs a
superset of its inputs (JAX drops the cotangents of the others), a JVP or
backward rule from one with a subset of its zeros, the missing zeros
instantiated. That is what a correct rule computes for the pattern; how
close to bit-identical it is: docs/families.md, "Over 8 inputs".
"""

from __future__ import annotations

from typing import Any, Callable

from jaxpr_io import compat
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.families.custom_rules import common
from jaxpr_io.families.custom_rules import requests
from jaxpr_io.safety import validate


# A JVP or backward rule whose 2**n patterns would hold more equations
# than this (sub-jaxprs included) is stored for its widest pattern only, as
# one over MAX_PATTERN_INPUTS is: an Equinox checkpointed while loop's
# backward rule has about a thousand per pattern and 8 float outputs.
MAX_PATTERN_EQUATIONS = 1 << 14


def affordable(patterns: tuple, first, fun) -> tuple:
  """`patterns`, or the first alone (the widest) where the stored rules of
  them all would hold over MAX_PATTERN_EQUATIONS equations, judged by
  `first`, the stored rule of the first (a rule that raises is kept), with
  the patterns JAX asks of the rule `fun` (`with_requested`)."""
  if len(patterns) < 2 or len(first) < 3:
    return patterns
  closed = first[1]
  size = sum(len(j.eqns) for j in validate.walk_jaxprs(closed.jaxpr))
  return patterns if len(patterns) * size <= MAX_PATTERN_EQUATIONS else (
      with_requested(patterns[:1], fun))


def with_requested(patterns: tuple, fun) -> tuple:
  """`patterns`, the stored ones of a rule stored for its widest patterns
  only, and after them those JAX asks of the rule `fun` when it
  differentiates the program being written (requests.py)."""
  return patterns + tuple(p for p in requests.requested(fun)
                          if p not in patterns)


def over_limit(avals) -> bool:
  """Whether a rule over `avals` is stored for its widest patterns only."""
  return len(common.free_inputs(avals)) > common.MAX_PATTERN_INPUTS


def stored_patterns(avals, eqn, what: str, fixed: bool, fun):
  """The patterns the rule `fun` over `avals` is stored for: every one
  (`common.symbolic_patterns`), or over the limit the widest (every free
  aval `not fixed`) and those JAX asks for (`with_requested`)."""
  if not over_limit(avals):
    return common.symbolic_patterns(avals, eqn, what, fixed)
  return with_requested((_prefix_pattern(avals, fixed, len(avals)),), fun)


def _prefix_pattern(avals, fixed: bool, k: int) -> tuple[bool, ...]:
  """The first `k` differentiable avals `not fixed`, the rest `fixed`."""
  free = common.free_inputs(avals)[:k]
  return tuple((not fixed) if i in free else fixed for i in range(len(avals)))


def widest_rules(avals, fixed: bool, attempt: Callable[[tuple], Any],
                 raised: Callable[[Any], bool], fun) -> list:
  """The rules stored for the over-limit rule `fun`: `attempt(pattern)`
  traces one (`raised(rule)`: it stored an error). The widest pattern's
  rule; if that raises, the longest prefix pattern's that does not (first)
  and the widest's error; then those of the patterns JAX asks for
  (`with_requested`)."""
  widest = _widest_rules(avals, fixed, attempt, raised)
  stored = tuple(rule[0] for rule in widest)
  return widest + [attempt(p)
                   for p in with_requested(stored, fun)[len(stored):]]


def _widest_rules(avals, fixed: bool, attempt, raised) -> list:
  n = len(common.free_inputs(avals))
  widest = attempt(_prefix_pattern(avals, fixed, n))
  if not raised(widest):
    return [widest]
  # Shorter prefixes in turn, so the one kept is the last call: JAX's rule
  # wrappers keep what the last call returned (`out_trees`, which the
  # backward rule reads) and memoize the calls (calls after it, of the
  # requested patterns, are followed by a fresh call of the kept one:
  # vjp.py, `call_fresh`). A rule refusing a pattern usually does so
  # before tracing anything (Equinox's assertion).
  for k in range(n - 1, 0, -1):
    rule = attempt(_prefix_pattern(avals, fixed, k))
    if not raised(rule):
      return [rule, widest]
  return [widest]


def covering_pattern(table: dict, pattern: tuple, value: bool):
  """The stored pattern of `table` that serves `pattern`, which is not
  stored: one with `value` wherever `pattern` has it (a superset of
  perturbed inputs, `value` True; a subset of zero tangents or cotangents,
  `value` False), the fewest of them first; None if there is none."""
  best = None
  for stored in table:
    if (type(stored) is tuple and len(stored) == len(pattern)
        and all(s == value for s, p in zip(stored, pattern) if p == value)
        and (best is None or stored.count(value) < best.count(value))):
      best = stored
  return best


def constant_residuals(jaxpr, input_fwds) -> tuple | None:
  """Per residual, the value the forward rule's `jaxpr` returns for it as
  a literal, or None (forwarded inputs too); None when there are none.
  JAX's transpose passes a backward rule these values, not tracers."""
  pruned = iter(jaxpr.outvars)
  values = []
  for f in input_fwds:
    var = None if f is not None else next(pruned)
    values.append(var.val if type(var) is compat.Literal else None)
  return tuple(values) if any(v is not None for v in values) else None


def widened_cotangents(table: dict, pattern: tuple, cts: list):
  """(rule, its cotangent arguments) of the stored backward rule that
  serves zero-cotangent `pattern` with the cotangents `cts` (some zeros),
  or None: the zeros it does not take as zeros are instantiated."""
  covering = covering_pattern(table, pattern, False)
  if covering is None:
    return None
  args = [compat_custom_rules.zeros_like_aval(c.aval) if z else c
          for c, z, s in zip(cts, pattern, covering) if not s]
  return table[covering], args


_WIDENED_DEBUG = compat.DebugInfo("jaxpr_io", "widened_jvp_rule", None, None)


def widened_jvp(rule: tuple, covering: tuple, pattern: tuple) -> tuple:
  """The `(jaxpr, consts, out_zeros)` of a JVP rule for zero-tangent
  `pattern` made from the stored `rule` of `covering`: its tangents that
  `pattern` has as zeros are instantiated."""
  jaxpr, consts, out_zeros = rule
  n = len(pattern)
  tangent_avals = iter(v.aval for v in jaxpr.invars[n:])
  in_avals = [v.aval for v in jaxpr.invars[:n]]
  fill = []  # per tangent `rule` takes: None (an input) or a zero's type
  for q, p in zip(covering, pattern):
    if not q:
      aval = next(tangent_avals)
      fill.append(aval if p else None)
      if not p:
        in_avals.append(aval)

  def call(*args):
    given = iter(args[n:])
    tangents = [next(given) if a is None
                else compat_custom_rules.zeros_like_aval(a) for a in fill]
    return compat_custom_rules.eval_jaxpr(jaxpr, consts, *args[:n],
                                          *tangents)
  new_jaxpr, new_consts = compat_custom_rules.trace_flat(call, in_avals,
                                                         _WIDENED_DEBUG)
  return new_jaxpr, new_consts, list(out_zeros)
