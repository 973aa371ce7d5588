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
must have (sin's JVP rule `lambda g, x, accuracy: ...`). A rule registered
directly is read where every supported release calls it with `**params`:
a JVP rule, always `jvp(primals, tangents, **params)` (ad.py's
`JVPTrace.process_primitive` and `linearize_from_jvp`; sub's closed
`_sub_jvp(primals, tangents)`), and the transpose rule of a primitive that
is not a call primitive, always `rule(ct, *primals, **params)` (ad.py's
`backward_pass`; 0.10.2 passes a call primitive's params as one dict).
Other rules are not read: a fancy transpose registered directly need not
match its call (0.10.2's custom_jvp_call's takes the params as one dict
and is never called there), a batching rule is wrapped in a closure, and
one that takes `**params` forwards them to code this module does not
follow.
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

  def keywords(self, n_inputs: int) -> frozenset[str]:
    """The params a call of this rule for an equation of `n_inputs` inputs
    can pass by name: its parameters after the positional values (a param
    named as one of those would be passed twice)."""
    if self.positional is None:
      return self.takes
    fixed, per_input = self.positional
    first = fixed + (n_inputs if per_input else 0)
    return frozenset(name for name, _ in self.parameters[first:])

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


# How JAX calls a rule registered directly in each table, where every
# supported release calls it with **params (see the module doc).
_DIRECT = {"JVP": (2, False), "transpose": (1, True)}


def _held_rules(rule, direct) -> list[tuple[object, tuple[int, bool] | None]]:
  """(rule, positional) for the rules a forwarding wrapper's partial holds
  (the rule itself, with `direct`, otherwise)."""
  if isinstance(rule, functools.partial) and rule.func in _FORWARDING:
    held = []
    for arg in rule.args:
      items = arg if type(arg) in (list, tuple) else (arg,)
      held.extend((a, _FORWARDING[rule.func]) for a in items
                  if inspect.isfunction(a) or isinstance(a, functools.partial))
    return held
  return [(rule, direct)]


@functools.lru_cache(maxsize=None)
def transform_rule_keywords(prim) -> tuple[RuleKeywords, ...]:
  """The closed JVP, transpose and batching rules this release registers
  for `prim`."""
  out = []
  plain_transpose = None if prim.call_primitive else _DIRECT["transpose"]
  for role, table, direct in (
      ("JVP", ad.primitive_jvps, _DIRECT["JVP"]),
      ("transpose", ad.primitive_transposes, plain_transpose),
      ("transpose", getattr(ad, "fancy_transposes", {}), None),
      ("batching", batching.fancy_primitive_batchers, None),
      ("batching", batching.primitive_batchers, None)):
    rule = table.get(prim) if hasattr(table, "get") else None
    if rule is None:
      continue
    for held, positional in _held_rules(rule, direct):
      read = _read(held, role, positional)
      # Only rules whose call is known (held by a forwarding wrapper, or
      # registered directly in a table JAX calls with **params).
      if read is not None and positional is not None:
        out.append(read)
  return tuple(out)
