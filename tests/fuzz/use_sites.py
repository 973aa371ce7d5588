"""Structural mutations aimed at what a file's values mean where they are
used (issue 38), not at their own syntax:

  rule-retype   a stored custom rule's jaxpr (a closed jaxpr referenced from
                inside a `param_codec` value: a JVP rule, a forward rule, a
                backward-table entry, a vmap rule) gets an input or an
                output of another type: an invar's aval replaced by a copy
                with a dimension dropped, resized or made symbolic, or by
                another aval of the table; or two outputs swapped
  rule-key      a backward table's key (a bool tuple inside a
                `param_codec` value: the pattern of zero cotangents) or an
                int inside one (residual counts, tree sizes) flipped or
                changed
  dim-blowup    a symbolic dimension (`Dim.expr`, `Value.dim_expr`) or a
                constraint replaced by an expression that is short but
                expands to many terms: sums raised to powers, products of
                sums, nested max/min

Each function takes the decoded `Program` message and a `random.Random`,
edits the message in place and returns its description, or None when the
message has nothing it applies to.
"""

from __future__ import annotations

import random

from jaxpr_io.format import _proto as pb
from tests.hostile import intern


def _codec_values(msg):
  """Every `Value` nested inside a `param_codec` param value."""
  stack = []
  for ps in msg.param_sets:
    for p in ps.params:
      if p.value.WhichOneof("kind") == "param_codec":
        stack.append(p.value.param_codec)
  while stack:
    v = stack.pop()
    yield v
    kind = v.WhichOneof("kind")
    if kind in ("tuple", "frozenset"):
      stack.extend(getattr(v, kind).items)
    elif kind == "record":
      stack.extend(v.record.fields)
    elif kind == "param_codec":
      stack.append(v.param_codec)


def _rule_jaxprs(msg) -> list[int]:
  """Indices into `msg.jaxprs` of the stored rules' jaxprs."""
  out = set()
  for v in _codec_values(msg):
    kind = v.WhichOneof("kind")
    if kind == "closed_jaxpr" and v.closed_jaxpr < len(msg.closed_jaxprs):
      out.add(msg.closed_jaxprs[v.closed_jaxpr].jaxpr)
    elif kind == "jaxpr":
      out.add(v.jaxpr)
  return sorted(j for j in out if j < len(msg.jaxprs))


def _retyped(msg, index: int, rng: random.Random) -> tuple[int, str]:
  """A new aval index: a copy of aval `index` with its shape changed."""
  new = pb.Aval()
  new.CopyFrom(msg.avals[index])
  if new.WhichOneof("kind") != "shaped_array":
    other = rng.randrange(len(msg.avals))
    return other, f"aval {index} -> existing aval {other}"
  arr = new.shaped_array
  dims = list(arr.shape) or [pb.Dim(size=s) for s in arr.sizes]
  choice = rng.choice(["drop", "resize", "add", "symbolic", "dtype"])
  if choice == "drop" and dims:
    dims.pop(rng.randrange(len(dims)))
  elif choice == "resize" and dims:
    dims[rng.randrange(len(dims))] = pb.Dim(size=rng.choice([0, 1, 3, 7]))
  elif choice == "symbolic" and dims:
    dims[rng.randrange(len(dims))] = pb.Dim(
        expr=intern(msg, rng.choice(["b", "2*b", "b + 1"])))
  elif choice == "dtype":
    arr.dtype.dtype = rng.choice([d for d in pb.DType.values() if d])
  else:
    dims.append(pb.Dim(size=rng.choice([1, 2])))
    choice = "add"
  del arr.shape[:]
  del arr.sizes[:]
  if any(d.WhichOneof("kind") == "expr" for d in dims):
    arr.shape.extend(dims)
  else:
    arr.sizes.extend(d.size for d in dims)
  msg.avals.append(new)
  return len(msg.avals) - 1, f"aval {index} -> {choice}"


def rule_retype(msg, rng: random.Random) -> str | None:
  rules = _rule_jaxprs(msg)
  if not rules:
    return None
  j = rng.choice(rules)
  jaxpr = msg.jaxprs[j]
  where = rng.choice(["invar", "invar", "outvars"])
  if where == "outvars" and len(jaxpr.outvars) >= 2:
    a, b = rng.sample(range(len(jaxpr.outvars)), 2)
    jaxpr.outvars[a], jaxpr.outvars[b] = jaxpr.outvars[b], jaxpr.outvars[a]
    return f"rule-retype: jaxpr {j} outputs {a} and {b} swapped"
  if not jaxpr.invars:
    return None
  k = rng.randrange(len(jaxpr.invars))
  new, what = _retyped(msg, jaxpr.invars[k], rng)
  jaxpr.invars[k] = new
  return f"rule-retype: jaxpr {j} invar {k}: {what}"


def rule_key(msg, rng: random.Random) -> str | None:
  sites = [v for v in _codec_values(msg)
           if v.WhichOneof("kind") in ("bools", "int", "ints")]
  if not sites:
    return None
  v = rng.choice(sites)
  kind = v.WhichOneof("kind")
  if kind == "bools" and v.bools.items:
    i = rng.randrange(len(v.bools.items))
    v.bools.items[i] = not v.bools.items[i]
    if rng.random() < 0.3:
      v.bools.items.append(rng.random() < 0.5)
    return f"rule-key: bool {i} of a key flipped ({len(v.bools.items)} long)"
  if kind == "int":
    v.int = rng.choice([0, 1, v.int + 1, v.int - 1, 2**31, -1])
    return f"rule-key: an int set to {v.int}"
  if kind == "ints" and v.ints.items:
    i = rng.randrange(len(v.ints.items))
    v.ints.items[i] = rng.choice([0, 1, v.ints.items[i] + 1, -1])
    return f"rule-key: int {i} of a tuple set to {v.ints.items[i]}"
  return None


def _blowup(rng: random.Random, names: list[str]) -> str:
  n = rng.randint(2, 10)
  terms = " + ".join(rng.choice(names) + (f"*{rng.randint(2, 9)}"
                                          if rng.random() < 0.3 else "")
                     for _ in range(n))
  shape = rng.choice(["power", "product", "nested", "power-in-max"])
  k = rng.choice([2, 3, 8, 16, 32, 64, 200])
  if shape == "power":
    return f"({terms})^{k}"
  if shape == "product":
    return " * ".join(f"({terms})" for _ in range(rng.randint(2, 12)))
  if shape == "nested":
    e = terms
    for _ in range(rng.randint(2, 40)):
      e = f"{rng.choice(['max', 'min'])}({e}, {rng.choice(names)})"
    return e
  return f"max({terms}, 0)^{k}"


def dim_blowup(msg, rng: random.Random) -> str | None:
  sites = []
  for a in msg.avals:
    if a.WhichOneof("kind") == "shaped_array":
      sites += [d for d in a.shaped_array.shape
                if d.WhichOneof("kind") == "expr"]
  values = [v for ps in msg.param_sets for p in ps.params
            for v in [p.value] if v.WhichOneof("kind") == "dim_expr"]
  constraints = len(msg.symbolic_constraints)
  if not sites and not values and not constraints:
    return None
  names = sorted({s for d in sites for s in [msg.strings[d.expr]]
                  if s.isidentifier()}) or ["b"]
  expr = _blowup(rng, names + ["c", "d", "e"][:rng.randint(0, 3)])
  where = rng.choice(["dim"] * bool(sites) + ["param"] * bool(values)
                     + ["constraint"] * bool(constraints))
  if where == "dim":
    rng.choice(sites).expr = intern(msg, expr)
  elif where == "param":
    rng.choice(values).dim_expr = intern(msg, expr)
  else:
    i = rng.randrange(constraints)
    lhs = msg.symbolic_constraints[i].split(">=")[0].split("==")[0].strip()
    msg.symbolic_constraints[i] = f"{lhs or 'b'} >= {expr}"
  return f"dim-blowup: {where} = {expr:.120}"


MUTATIONS = {
    "rule-retype": rule_retype,
    "rule-key": rule_key,
    "dim-blowup": dim_blowup,
}
