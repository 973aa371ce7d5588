"""The params each transformation rule of this release's primitives can be
called with.

JAX calls a primitive's JVP, transpose and batching rules with all of an
equation's params as keywords (`rule(..., **params)`). A rule with a closed
signature (no `**params`) raises TypeError for a name it lacks, at the
first `grad` or `jvp`, although abstract evaluation and the lowering, which
take `**params` (neg's lowering names an optional `accuracy`), let the name
through at `bind`. An equation that carries such a name (a file can give
`neg` an `accuracy`) type-checks, runs, and then fails under the
transformation, inside JAX.

What a rule takes is read from its signature: its keyword-only and
positional-or-keyword parameters, less those a `functools.partial` binds.
A rule registered through one of JAX's forwarding wrappers (`deflinear`,
`deflinear2`, `defjvp`, `defjvp2`, `defbilinear`), which hold the user's
rules as partial arguments and call each with `**params`, is read through
the wrapper, which also says how many values it passes positionally: the
rule's parameters after those, without a default, are params the equation
must have (sin's JVP rule `lambda g, x, accuracy: ...`). Other rules are
not read: one registered directly may be called otherwise than with
`**params` (custom_jvp_call's transpose takes them as one dict), and one
that takes `**params` forwards them to code this module does not follow.
"""

from __future__ import annotations

import functools
import inspect
from typing import NamedTuple

from jax._src.interpreters import ad
from jax._src.interpreters import batching

# JAX's wrappers that call the rules they hold as partial arguments (single
# rules, or lists of them) with every param, and how many values each passes
# positionally before the params: (a fixed count, whether one more per input
# of the equation follows). jax/_src/interpreters/ad.py of 0.10.2, 0.11.2
# and 0.12.0.1: `transpose_rule(cotangent, **kwargs)` (linear_transpose),
# `transpose_rule(cotangent, *args, **kwargs)` (linear_transpose2),
# `rule(t, *primals, **params)` (standard_jvp), `rule(t, val_out, *primals,
# **params)` (standard_jvp2), `lhs_rule(cotangent, x, y, **kwargs)` (the
# bilinear transposes).
_POSITIONAL = {"linear_transpose": (1, False), "linear_transpose2": (1, True),
               "standard_jvp": (1, True), "standard_jvp2": (2, True),
               "bilinear_transpose": (3, False),
               "fancy_bilinear_transpose": (3, False)}
_FORWARDING = {getattr(ad, name): positional
               for name, positional in _POSITIONAL.items()
               if hasattr(ad, name)}


class RuleKeywords(NamedTuple):
  """What one closed transformation rule can be called with."""
  role: str                     # "JVP", "transpose", "batching"
  takes: frozenset[str]         # the keywords it can be passed
  # Through a forwarding wrapper: (fixed count, per input) of the values
  # passed positionally first, and its parameters in order with whether
  # each has a default; None for a rule registered directly.
  positional: tuple[int, bool] | None
  parameters: tuple[tuple[str, bool], ...]

  def required(self, n_inputs: int) -> list[str]:
    """The params a call of this rule for an equation of `n_inputs` inputs
    must pass (those its parameters after the positional values lack a
    default for); none known for a rule registered directly."""
    if self.positional is None:
      return []
    fixed, per_input = self.positional
    first = fixed + (n_inputs if per_input else 0)
    return [name for name, has_default in self.parameters[first:]
            if not has_default]


def _read(fn, role: str, positional) -> RuleKeywords | None:
  """`fn`'s keywords, or None if it takes any."""
  try:
    sig = inspect.signature(fn)
  except (TypeError, ValueError):
    return None
  bound = set(fn.keywords) if isinstance(fn, functools.partial) else set()
  params = []
  for p in sig.parameters.values():
    if p.kind is p.VAR_KEYWORD:
      return None
    if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD) and (
        p.name not in bound):
      params.append((p.name, p.default is not p.empty))
    elif p.kind is p.VAR_POSITIONAL:
      positional = None   # *args: which names follow is not known
  return RuleKeywords(role, frozenset(n for n, _ in params), positional,
                      tuple(params))


def _held_rules(rule) -> list[tuple[object, tuple[int, bool] | None]]:
  """(rule, positional) for the rules a forwarding wrapper's partial holds
  (the rule itself, with None, otherwise)."""
  if isinstance(rule, functools.partial) and rule.func in _FORWARDING:
    held = []
    for arg in rule.args:
      items = arg if type(arg) in (list, tuple) else (arg,)
      held.extend((a, _FORWARDING[rule.func]) for a in items
                  if inspect.isfunction(a) or isinstance(a, functools.partial))
    return held
  return [(rule, None)]


@functools.lru_cache(maxsize=None)
def transform_rule_keywords(prim) -> tuple[RuleKeywords, ...]:
  """The closed JVP, transpose and batching rules this release registers
  for `prim`."""
  out = []
  for role, table in (("JVP", ad.primitive_jvps),
                      ("transpose", ad.primitive_transposes),
                      ("transpose", getattr(ad, "fancy_transposes", {})),
                      ("batching", batching.fancy_primitive_batchers),
                      ("batching", batching.primitive_batchers)):
    rule = table.get(prim) if hasattr(table, "get") else None
    if rule is None:
      continue
    for held, positional in _held_rules(rule):
      read = _read(held, role, positional)
      # Only rules a forwarding wrapper holds: a rule registered directly
      # may be called otherwise than with **params (custom_jvp_call's
      # transpose takes the params as one dict).
      if read is not None and positional is not None:
        out.append(read)
  return tuple(out)
