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
the wrapper; any other rule that takes `**params` forwards them to code
this module does not follow, and is not read (it accepts any name).
"""

from __future__ import annotations

import functools
import inspect

from jax._src.interpreters import ad
from jax._src.interpreters import batching

# JAX's wrappers that call the rules they hold as partial arguments (single
# rules, or lists of them) with every param: jax/_src/interpreters/ad.py
# of 0.10.2, 0.11.2 and 0.12.0.1.
_FORWARDING = frozenset(
    f for f in (getattr(ad, name, None) for name in (
        "linear_transpose", "linear_transpose2", "standard_jvp",
        "standard_jvp2", "bilinear_transpose", "fancy_bilinear_transpose"))
    if f is not None)


def _takes(fn) -> frozenset[str] | None:
  """The keywords `fn` can be called with, or None if it takes any."""
  try:
    sig = inspect.signature(fn)
  except (TypeError, ValueError):
    return None
  bound = set(fn.keywords) if isinstance(fn, functools.partial) else set()
  names = set()
  for p in sig.parameters.values():
    if p.kind is p.VAR_KEYWORD:
      return None
    if p.kind in (p.KEYWORD_ONLY, p.POSITIONAL_OR_KEYWORD):
      names.add(p.name)
  return frozenset(names - bound)


def _held_rules(rule) -> list:
  """The rules a forwarding wrapper's partial holds (itself otherwise)."""
  if isinstance(rule, functools.partial) and rule.func in _FORWARDING:
    held = []
    for arg in rule.args:
      items = arg if type(arg) in (list, tuple) else (arg,)
      held.extend(a for a in items if inspect.isfunction(a)
                  or isinstance(a, functools.partial))
    return held
  return [rule]


@functools.lru_cache(maxsize=None)
def transform_rule_keywords(prim) -> tuple[tuple[str, frozenset[str]], ...]:
  """(role, the keywords it takes) for each closed JVP, transpose and
  batching rule this release registers for `prim`."""
  out = []
  for role, table in (("JVP", ad.primitive_jvps),
                      ("transpose", ad.primitive_transposes),
                      ("transpose", getattr(ad, "fancy_transposes", {})),
                      ("batching", batching.fancy_primitive_batchers),
                      ("batching", batching.primitive_batchers)):
    rule = table.get(prim) if hasattr(table, "get") else None
    if rule is None:
      continue
    for held in _held_rules(rule):
      takes = _takes(held)
      if takes is not None:
        out.append((role, takes))
  return tuple(out)
