"""Structural mutations of a `Program` message: edits that no single field
edit makes, aimed at what expands when a program is built, checked, printed
or called (issue 28).

  tree-chain     a chain of k new `tree_nodes` entries, each a tuple that
                 holds the previous one twice (2**k leaves from k nodes),
                 made the program's `in_tree` or `out_tree`, a child of
                 either, or a `treedef` param
  tree-share     a node of a tree (or a `tree_nodes` entry, or a `treedef`
                 param) replaced by a reference to an existing entry
  call-chain     k new jaxprs, each calling the previous one twice through
                 a copy of an equation of the root jaxpr that calls a closed
                 jaxpr (`jit`, `closed_call`, `custom_jvp_call`, ...), the
                 last one called in that equation's place (2**k inlined
                 calls from k small jaxprs); with a small k the program is
                 valid and runs
  param-swap     a param's value replaced by a copy of another primitive's
                 param value; another primitive's param added; a param
                 renamed to another primitive's param name; an object-valued
                 param set to a plain int
  print-options  `debug_print`'s `np_printoptions` set to extreme values
                 (threshold 2**62, precision 64, floatmode 'fixed', ...),
                 known or not
  rule-retype, rule-key, dim-blowup
                 values checked where they are used: tests/fuzz/use_sites.py

`apply(msg, rng)` picks a mutation that the message admits (every file
admits `param-swap` or `tree-*`), applies it in place, and returns its
description, or None when none applies.
"""

from __future__ import annotations

import random

import numpy as np

from jaxpr_io.format import _proto as pb
from tests.fuzz import use_sites
from tests.hostile import intern

_U32 = np.dtype("<u4")
_I32 = np.dtype("<i4")

# Chain lengths: short ones make valid programs (or small mismatches), long
# ones describe 2**k leaves or inlined calls from a few hundred bytes.
_CHAIN_LENGTHS = (1, 2, 3, 4, 6, 10, 16, 20, 24, 32, 40, 48)


# The string-table index of a text, appended if absent: the hostile
# tests' message-editing helper.
_string = intern


def _values(msg):
  """Every `Value` of every param set: (param set index, Param, Value)."""
  for i, ps in enumerate(msg.param_sets):
    for p in ps.params:
      yield i, p


def _treedef_values(msg) -> list:
  out = []
  stack = [p.value for ps in msg.param_sets for p in ps.params]
  while stack:
    v = stack.pop()
    kind = v.WhichOneof("kind")
    if kind == "treedef":
      out.append(v.treedef)
    elif kind in ("tuple", "frozenset"):
      stack.extend(getattr(v, kind).items)
  return out


# ------------------------------------------------------------ pytrees
def tree_chain(msg, rng: random.Random) -> str | None:
  k = rng.choice(_CHAIN_LENGTHS)
  base = len(msg.tree_nodes)
  leaf = pb.PyTree(kind=pb.PyTree.LEAF)
  first = msg.tree_nodes.add(kind=pb.PyTree.TUPLE)
  first.children.add().CopyFrom(leaf)
  first.children.add().CopyFrom(leaf)
  for i in range(1, k):
    node = msg.tree_nodes.add(kind=pb.PyTree.TUPLE)
    for _ in range(2):
      node.children.add(shared=1 + base + i - 1)
  top = pb.PyTree(shared=1 + base + k - 1)
  targets = ["out_tree", "in_tree_args", "out_child"]
  treedefs = _treedef_values(msg)
  if treedefs:
    targets += ["treedef"] * 2
  where = rng.choice(targets)
  if where == "out_tree":
    msg.out_tree.CopyFrom(top)
  elif where == "treedef":
    rng.choice(treedefs).CopyFrom(top)
  else:
    tree = msg.in_tree if where == "in_tree_args" else msg.out_tree
    node = _resolve(msg, tree)
    if node is None or not node.children:
      msg.out_tree.CopyFrom(top)
      where = "out_tree"
    else:
      # Into a copy of the node (the entry may be shared with other trees).
      copy = pb.PyTree()
      copy.CopyFrom(node)
      copy.children[rng.randrange(len(copy.children))].CopyFrom(top)
      tree.CopyFrom(copy)
  return f"tree-chain: {k} doubling tuple nodes ({2**k} leaves) at {where}"


def _resolve(msg, tree):
  """The node a tree stands for (following one `shared` reference)."""
  if tree.shared:
    if tree.shared - 1 < len(msg.tree_nodes):
      return msg.tree_nodes[tree.shared - 1]
    return None
  return tree


def tree_share(msg, rng: random.Random) -> str | None:
  if not msg.tree_nodes:
    return None
  # Candidate places: (the PyTree message, the highest entry it may name).
  places = [(msg.in_tree, len(msg.tree_nodes)),
            (msg.out_tree, len(msg.tree_nodes))]
  places += [(t, len(msg.tree_nodes)) for t in _treedef_values(msg)]
  for t, node in enumerate(msg.tree_nodes):
    places += [(child, t) for child in node.children]
  place, limit = rng.choice(places)
  if limit == 0:
    return None
  target = rng.randrange(limit)
  place.Clear()
  place.shared = 1 + target
  return f"tree-share: a tree node made a reference to tree_nodes[{target}]"


# ------------------------------------------------------------ call graphs
def _closed_jaxpr_params(msg, ps_index: int) -> list[int]:
  return [i for i, p in enumerate(msg.param_sets[ps_index].params)
          if p.value.WhichOneof("kind") == "closed_jaxpr"]


def call_chain(msg, rng: random.Random) -> str | None:
  if msg.format_version < 3 or not msg.closed_jaxprs:
    return None
  root_cj = msg.closed_jaxprs[msg.root] if msg.root < len(
      msg.closed_jaxprs) else None
  if root_cj is None or root_cj.jaxpr >= len(msg.jaxprs):
    return None
  root = msg.jaxprs[root_cj.jaxpr]
  eq = root.equations
  kinds = np.frombuffer(eq.kinds, _U32).tolist()
  candidates = [e for e, k in enumerate(kinds)
                if k < len(msg.equation_kinds)
                and msg.equation_kinds[k].param_set < len(msg.param_sets)
                and _closed_jaxpr_params(
                    msg, msg.equation_kinds[k].param_set)]
  if not candidates:
    return None
  e = rng.choice(candidates)
  kind = msg.equation_kinds[kinds[e]]
  slot = rng.choice(_closed_jaxpr_params(msg, kind.param_set))
  callee = msg.param_sets[kind.param_set].params[slot].value.closed_jaxpr
  if callee >= len(msg.closed_jaxprs):
    return None
  callee_jaxpr = msg.closed_jaxprs[callee].jaxpr
  if callee_jaxpr >= len(msg.jaxprs):
    return None
  n_in, n_out = kind.num_invars, kind.num_outvars
  # The avals of the equation's outputs (the callee's results).
  out_start = sum(msg.equation_kinds[k].num_outvars for k in kinds[:e])
  outs = np.frombuffer(eq.outvars, _U32)[out_start:out_start + n_out]
  if len(outs) != n_out:
    return None
  in_avals = list(msg.jaxprs[callee_jaxpr].invars)
  if len(in_avals) != n_in or msg.jaxprs[callee_jaxpr].constvars:
    return None
  stack = np.frombuffer(eq.name_stacks, _U32)[e:e + 1].tolist() or [0]
  ctx = np.frombuffer(eq.contexts, _U32)[e:e + 1].tolist() or [0]
  k_len = rng.choice(_CHAIN_LENGTHS)
  previous = callee
  for _ in range(k_len):
    ps = msg.param_sets.add()
    ps.CopyFrom(msg.param_sets[kind.param_set])
    ps.params[slot].value.closed_jaxpr = previous
    new_kind = msg.equation_kinds.add(
        primitive=kind.primitive, param_set=len(msg.param_sets) - 1,
        num_invars=n_in, num_outvars=n_out)
    k_index = len(msg.equation_kinds) - 1
    j = msg.jaxprs.add()
    j.invars.extend(in_avals)
    j.effects.extend(msg.jaxprs[callee_jaxpr].effects)
    j.equations.kinds = np.array([k_index] * 2, _U32).tobytes()
    j.equations.invars = np.array(list(range(n_in)) * 2, _I32).tobytes()
    j.equations.outvars = np.array(list(outs) * 2, _U32).tobytes()
    j.equations.name_stacks = np.array(stack * 2, _U32).tobytes()
    j.equations.contexts = np.array(ctx * 2, _U32).tobytes()
    j.outvars.extend(range(n_in + n_out, n_in + 2 * n_out))
    del new_kind
    msg.closed_jaxprs.add(jaxpr=len(msg.jaxprs) - 1)
    previous = len(msg.closed_jaxprs) - 1
  # The root, copied after the chain (a jaxpr names only lower indices),
  # with the chosen equation calling the chain's last jaxpr.
  ps = msg.param_sets.add()
  ps.CopyFrom(msg.param_sets[kind.param_set])
  ps.params[slot].value.closed_jaxpr = previous
  msg.equation_kinds.add(primitive=kind.primitive,
                         param_set=len(msg.param_sets) - 1,
                         num_invars=n_in, num_outvars=n_out)
  new_root = msg.jaxprs.add()
  new_root.CopyFrom(root)
  kinds[e] = len(msg.equation_kinds) - 1
  new_root.equations.kinds = np.array(kinds, _U32).tobytes()
  cj = msg.closed_jaxprs.add()
  cj.CopyFrom(root_cj)
  cj.jaxpr = len(msg.jaxprs) - 1
  msg.root = len(msg.closed_jaxprs) - 1
  return (f"call-chain: {k_len} jaxprs each calling the previous twice "
          f"({2**k_len} inlined calls) from root equation {e}")


# ------------------------------------------------------------ params
def param_swap(msg, rng: random.Random) -> str | None:
  params = list(_values(msg))
  if len(params) < 2:
    return None
  (i, p), (j, q) = rng.sample(params, 2)
  how = rng.choice(["value", "value", "add", "rename", "int"])
  names_i = {x.name for x in msg.param_sets[i].params}
  if how == "add" and q.name not in names_i:
    msg.param_sets[i].params.add().CopyFrom(q)
    return (f"param-swap: param set {i} given param "
            f"{_name(msg, q.name)!r} of param set {j}")
  if how == "rename" and q.name not in names_i:
    old = p.name
    p.name = q.name
    return (f"param-swap: param {_name(msg, old)!r} of param set {i} "
            f"renamed {_name(msg, q.name)!r}")
  if how == "int":
    value = rng.choice([0, 1, 2, 3, -1, 7, 2**31])
    p.value.Clear()
    p.value.int = value
    return (f"param-swap: param {_name(msg, p.name)!r} of param set {i} "
            f"set to the int {value}")
  copy = pb.Value()
  copy.CopyFrom(q.value)
  p.value.CopyFrom(copy)
  return (f"param-swap: param {_name(msg, p.name)!r} of param set {i} given "
          f"the value of {_name(msg, q.name)!r} of param set {j}")


def _name(msg, index: int) -> str:
  return msg.strings[index] if index < len(msg.strings) else f"#{index}"


_EXTREME_OPTIONS = (
    ("threshold", 2**62), ("threshold", 0), ("threshold", -1),
    ("threshold", 10**6), ("precision", 64), ("precision", 2**31),
    ("precision", -1), ("edgeitems", 2**40), ("edgeitems", 10**6),
    ("linewidth", 10**9), ("linewidth", 0), ("floatmode", "fixed"),
    ("floatmode", "unique"), ("floatmode", "bogus"), ("suppress", True),
    ("sign", "+"), ("nanstr", "n" * 10**4), ("infstr", "{x.__class__}"),
    ("legacy", "1.13"), ("formatter", 1), ("no_such_option", 1),
)


def print_options(msg, rng: random.Random) -> str | None:
  targets = []
  for k in msg.equation_kinds:
    if (k.primitive < len(msg.strings)
        and msg.strings[k.primitive] == "debug_print"
        and k.param_set < len(msg.param_sets)):
      targets.append(msg.param_sets[k.param_set])
  if not targets:
    return None
  ps = rng.choice(targets)
  chosen = rng.sample(_EXTREME_OPTIONS, rng.randint(1, 4))
  value = pb.Value()
  for name, v in chosen:
    item = value.tuple.items.add().tuple
    item.items.add().str = _string(msg, name)
    leaf = item.items.add()
    if type(v) is bool:
      leaf.bool = v
    elif type(v) is int:
      leaf.int = v
    else:
      leaf.str = _string(msg, v)
  name_index = _string(msg, "np_printoptions")
  for p in ps.params:
    if p.name == name_index:
      p.value.CopyFrom(value)
      break
  else:
    ps.params.add(name=name_index).value.CopyFrom(value)
  return f"print-options: np_printoptions = {chosen!r:.200}"


MUTATIONS = {
    "tree-chain": tree_chain,
    "tree-share": tree_share,
    "call-chain": call_chain,
    "param-swap": param_swap,
    "print-options": print_options,
    # Issue 38: values checked where they are used (tests/fuzz/use_sites.py).
    **use_sites.MUTATIONS,
}


def apply(msg, rng: random.Random,
          first: str | None = None) -> tuple[str, str] | None:
  """Applies one structural mutation that `msg` admits: (its name, its
  description), or None. `first` (a name of `MUTATIONS`) is tried before
  the others, which follow in random order."""
  names = list(MUTATIONS)
  rng.shuffle(names)
  if first is not None:
    names.remove(first)
    names.insert(0, first)
  for name in names:
    before = msg.SerializeToString(deterministic=True)
    try:
      what = MUTATIONS[name](msg, rng)
    except (IndexError, ValueError, TypeError):
      what = None
    if what is not None:
      return name, what
    msg.Clear()
    msg.MergeFromString(before)
  return None


def admits(msg, name: str) -> bool:
  """Whether mutation `name` applies to `msg` (tried on a copy)."""
  copy = type(msg)()
  copy.CopyFrom(msg)
  try:
    return MUTATIONS[name](copy, random.Random(0)) is not None
  except (IndexError, ValueError, TypeError):
    return False
