"""The params that this release's primitives accept, read from the rules
JAX registers for them (for the param schema, jaxpr_io/format/param_schema.py).

A primitive's params are the keyword arguments that `bind` passes to its
rules: abstract evaluation, implementation, lowerings (every platform's),
JVP, transpose and batching rules. A rule names a param by a keyword-only
parameter (after `*` or `*operands`); a rule that takes `**params` names
nothing by it, but JAX's wrappers pass those params on to rules they hold
(`standard_primitive`'s shape/dtype/sharding rules in a `partial`,
`_effect_free_abstract_eval`'s and `lower_fun`'s closures, `defjvp`'s
lists of rules), so those are read too, down to `_MAX_DEPTH`. Keywords a
`partial` binds are the wrapper's, not params.

What this gives per primitive (`definition`):

  named     param -> whether some always-called rule (abstract evaluation,
            implementation, a lowering) requires it (no default)
  optional  the params that an always-called rule names with a default and
            none requires: JAX runs without them, so the schema never
            requires them, whatever the traces held
  accepted  the names that abstract evaluation lets through: None when any
            name passes (every rule on its path takes `**params`), else
            the names of its closed rules (no `**params`), intersected. A
            name outside it fails at `bind`, so a name that only a
            transpose rule names (dot_general's `swap_ans`) is not a param.
  kinds     param -> the schema kinds its annotation gives (`ANNOTATION_KINDS`),
            or those `PARAM_KINDS` gives for the name; absent when neither.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import re

from jax._src import core
from jax._src.interpreters import ad
from jax._src.interpreters import batching
from jax._src.interpreters import mlir

_MAX_DEPTH = 6

# Annotation names (as JAX writes them, `from __future__ import annotations`
# strings included) -> schema kinds (jaxpr_io/compat/param_kinds.py). Read
# from jax/_src/lax/lax.py, jax/_src/lax/linalg.py, jax/_src/lax/slicing.py,
# jax/_src/lax/control_flow of 0.10.2, 0.11.2 and 0.12.0.1. A param whose
# annotation has a name not listed here gets its kinds from `PARAM_KINDS`.
ANNOTATION_KINDS: dict[str, tuple[str, ...]] = {
    "None": ("none",),
    "bool": ("bool",),
    "int": ("int+",),
    "float": ("float",),
    "str": ("str",),
    # DTypeLike: a dtype, or a scalar type (np.float32, jnp.float32) as
    # lax.ragged_dot binds it unconverted.
    "DTypeLike": ("dtype", "type"),
    "np.dtype": ("dtype",),
    "Tolerance": ("Tolerance",),
    "AccuracyMode": ("enum:AccuracyMode",),
}

# Params that some rule names but no annotation types, and that no trace
# holds a value of: kinds read from what JAX binds (jax/_src/lax/lax.py and
# friends, per release). A name neither here nor annotated nor traced is in
# the schema with no kinds, which refuses every value: the scan prints it.
PARAM_KINDS: dict[str, tuple[str, ...]] = {
    # conj_p.bind(x, input_dtype=_dtype(x)) in lax.conj (all releases).
    "input_dtype": ("dtype", "type"),
    # The unary ops' accuracy: None, a Tolerance or an AccuracyMode
    # (lax.exp, lax.cbrt, ...; 0.12's erfc).
    "accuracy": ("none", "Tolerance", "enum:AccuracyMode"),
    # mul/div's result dtype (lax.mul(x, y, out_dtype=...), 0.12).
    "out_dtype": ("none", "dtype"),
}


@dataclasses.dataclass
class Definition:
  named: dict[str, bool]
  optional: frozenset[str]
  accepted: frozenset[str] | None
  kinds: dict[str, tuple[str, ...]]


@dataclasses.dataclass
class _Reading:
  """What one callable (and the rules it passes `**params` to) names."""
  named: dict[str, inspect.Parameter]
  closed: list[frozenset[str]]   # the names of each closed callable


def rules(prim) -> list[tuple[str, object]]:
  """(role, rule) for every rule this release registers for `prim`."""
  out = []
  for role in ("impl", "abstract_eval"):
    rule = prim.__dict__.get(role)   # not Primitive's defaults, which raise
    if rule is not None:
      out.append((role, rule))
  if prim in mlir._lowerings:
    out.append(("lowering", mlir._lowerings[prim]))
  for platform, table in sorted(mlir._platform_specific_lowerings.items()):
    if prim in table:
      out.append((f"lowering:{platform}", table[prim]))
  for role, table in (("jvp", ad.primitive_jvps),
                      ("transpose", ad.primitive_transposes),
                      ("transpose", ad.fancy_transposes),
                      ("batching", batching.fancy_primitive_batchers)):
    if prim in table:
      out.append((role, table[prim]))
  return [(role, getattr(rule, "rule", rule)) for role, rule in out]


def _is_rule(value) -> bool:
  """Whether `value` may be a rule that a JAX wrapper passes params to: a
  function (or partial of one) of JAX's Python code, not an MLIR op
  builder (jax._src.lib, jaxlib) nor an object."""
  f = value.func if isinstance(value, functools.partial) else value
  if not inspect.isfunction(f):
    return False
  module = getattr(inspect.unwrap(f), "__module__", "") or ""
  return (module.startswith("jax") and not module.startswith("jax._src.lib")
          and not module.startswith("jaxlib"))


def _inner(fn) -> list:
  """The callables a wrapper holds: a partial's arguments, closure cells
  (of the function and what `functools.wraps` says it wraps), and the
  items of lists or tuples among them (defjvp's rules)."""
  found, bound = [], []
  if isinstance(fn, functools.partial):
    bound = list(fn.args) + list(fn.keywords.values())
    fn = fn.func
  for f in {fn, inspect.unwrap(fn)}:
    for cell in getattr(f, "__closure__", None) or ():
      try:
        bound.append(cell.cell_contents)
      except ValueError:  # an empty cell
        continue
  for value in bound:
    items = value if type(value) in (list, tuple) else (value,)
    found.extend(v for v in items if _is_rule(v))
  return found


def read(fn, depth: int = 0, seen: set | None = None) -> _Reading:
  """The params `fn` names, following `**params` into the rules it holds."""
  seen = set() if seen is None else seen
  reading = _Reading({}, [])
  if id(fn) in seen or depth > _MAX_DEPTH:
    return reading
  seen.add(id(fn))
  try:
    sig = inspect.signature(fn)
  except (TypeError, ValueError):  # a builtin: names nothing
    return reading
  bound = set(fn.keywords) if isinstance(fn, functools.partial) else set()
  takes_any = False
  for p in sig.parameters.values():
    if p.kind is p.KEYWORD_ONLY and p.name not in bound:
      reading.named[p.name] = p
    elif p.kind is p.VAR_KEYWORD:
      takes_any = True
  if not takes_any:
    reading.closed.append(frozenset(reading.named))
    return reading
  for inner in _inner(fn):
    sub = read(inner, depth + 1, seen)
    for name, p in sub.named.items():
      reading.named.setdefault(name, p)
    reading.closed.extend(sub.closed)
  return reading


def _kinds(p: inspect.Parameter) -> tuple[str, ...] | None:
  """Schema kinds from an annotation whose every name is known, else None."""
  text = p.annotation
  if text is p.empty:
    return None
  if not isinstance(text, str):
    # As a module without `from __future__ import annotations` holds it: a
    # class by its name, else as written (typing's `Optional[int]` has the
    # __name__ 'Optional', which would read as None alone).
    text = (text.__name__ if type(text) is type
            else repr(text).replace("typing.", ""))
  words = re.findall(r"[A-Za-z_][A-Za-z_.]*", text.replace("Optional", ""))
  kinds: list[str] = []
  for word in words:
    if word not in ANNOTATION_KINDS:
      return None
    kinds.extend(ANNOTATION_KINDS[word])
  if "Optional" in text:
    kinds.append("none")
  return tuple(sorted(set(kinds))) or None


_ALWAYS_CALLED = ("impl", "abstract_eval", "lowering")


def definition(prim: core.Primitive) -> Definition:
  """What this release's rules for `prim` say of its params."""
  named: dict[str, bool] = {}
  defaulted: set[str] = set()
  kinds: dict[str, tuple[str, ...]] = {}
  accepted = None
  for role, rule in rules(prim):
    reading = read(rule)
    if role == "abstract_eval" and reading.closed:
      accepted = frozenset.intersection(*reading.closed)
    always = role.split(":")[0] in _ALWAYS_CALLED
    for name, p in reading.named.items():
      needed = always and p.default is p.empty
      named[name] = named.get(name, False) or needed
      if always and not needed:
        defaulted.add(name)
      found = _kinds(p) or PARAM_KINDS.get(name)
      if found:
        kinds[name] = tuple(sorted(set(kinds.get(name, ())) | set(found)))
  if accepted is not None:
    named = {k: v for k, v in named.items() if k in accepted}
  optional = frozenset(n for n in defaulted if not named.get(n, True))
  return Definition(named, optional, accepted, kinds)
