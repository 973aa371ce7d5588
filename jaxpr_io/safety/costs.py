"""The cost model of an untrusted file: every quantity that building,
checking, printing, calling, converting or viewing a program can expand
beyond the file's size, how it is counted from the file's tables, and its
limit.

`QUANTITIES` is the registry (`register_quantity`, one call per quantity);
`cost_table()` renders it as the table of docs/trust-model.md ("## Cost
model"), which tests/hostile/test_costs.py checks against this module. The
counting itself works on the `Program` message, before anything is built:
`TreeCounts` counts the nodes and leaves of pytrees with shared nodes
expanded, each table entry once. The reader (jaxpr_io/read/reader.py)
charges what it counts against the load's memory budget
(jaxpr_io/format/limits.py), and `check=True` (jaxpr_io/api/program.py)
applies `checked_equations_limit`. The viewer's JavaScript reader
(viewer/src/reader.js) counts and charges pytrees the same way, with the
same constants.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxpr_io.errors import FormatError
from jaxpr_io.format import dim_cost
from jaxpr_io.format import limits


@dataclasses.dataclass(frozen=True)
class Quantity:
  """One row of the cost table: what is counted, how, and its limit."""
  name: str
  counted: str
  limit: str


QUANTITIES: dict[str, Quantity] = {}


def register_quantity(*, name: str, counted: str, limit: str) -> Quantity:
  """Adds a row to the cost model's table (docs/trust-model.md); a name
  registered twice is an error."""
  if name in QUANTITIES:
    raise ValueError(f"cost quantity {name!r} is registered twice")
  for text in (name, counted, limit):
    if "|" in text or "\n" in text:
      raise ValueError(f"a cost table cell cannot hold '|' or a newline: "
                       f"{text!r}")
  QUANTITIES[name] = quantity = Quantity(name, counted, limit)
  return quantity


def cost_table() -> str:
  """The markdown table of docs/trust-model.md's "## Cost model"."""
  rows = ["| quantity | how it is counted | limit |", "| --- | --- | --- |"]
  rows += [f"| {q.name} | {q.counted} | {q.limit} |"
           for q in QUANTITIES.values()]
  return "\n".join(rows) + "\n"


_BUDGET = (f"{limits.MEMORY_FACTOR}x the file's size + "
           f"{limits.FIXED_OVERHEAD >> 20} MiB")

register_quantity(
    name="objects a load builds",
    counted="each entry of the string, param set, name stack, context, "
            "aval, array, equation kind and pytree tables, each stored "
            "jaxpr, equation, variable and input reference, once, at what "
            "JAX's objects measurably cost (the floor table below): bounded "
            "by the file's size, and never refused; everything a load "
            "builds beyond them (the rows below) is charged as expansion",
    limit=f"expansion is charged before it is built, against {_BUDGET} "
          "(+ the floor of the signatures' stored nodes), so an honest "
          "file always loads (no limit with `trusted=True`)")
register_quantity(
    name="pytree nodes",
    counted="every node of each tree the file describes (the signatures "
            "`in_tree` and `out_tree`, and each `treedef` value: equation "
            "params, custom rules, pytree auxdata and keys, a box's "
            "contents), a shared node (`PyTree.shared`) counted at each of "
            "its uses; each shared entry is counted once, from the entries "
            "before it, so counting is linear in the file",
    limit=f"{limits.TREE_NODE_COST} bytes a node, charged against the same "
          "budget before the tree is built (the nodes the file stores are "
          "in its floor) (no limit with `trusted=True`); "
          "the viewer's reader and `jaxpr-load --html` charge the same")
register_quantity(
    name="pytree leaves",
    counted="as nodes: the leaves below each node, shared nodes counted at "
            "each use",
    limit="a signature may not have more leaves than the program has "
          "inputs (`in_tree`) or outputs (`out_tree`), checked before it "
          "is built; a `treedef` value's leaves are among its nodes")
register_quantity(
    name="inlined equations",
    counted="per jaxpr, each equation weighs 1 + its inputs and outputs + "
            "what the sub-jaxprs its params name weigh inlined (each jaxpr "
            "weighed once, from the sub-jaxprs before it); the stored size "
            "is the same count without inlining",
    limit=f"`check=True` refuses a program over "
          f"{limits.CHECKED_SIZE_FIXED:,} + "
          f"{limits.CHECKED_SIZE_PER_STORED}x the stored size (with "
          f"`trusted=True`: {limits.MAX_CHECKED_SIZE:,}), naming the first "
          "jaxpr over it, before it checks anything; a load builds each "
          "sub-jaxpr once")

register_quantity(
    name="polyfill jaxprs",
    counted="one per distinct (primitive, params, input types) among the "
            "equations whose primitive this JAX lacks and rebuilds from "
            "its own (`jaxpr_io/compat/polyfills.py`), when it is traced",
    limit=f"{limits.POLYFILL_BUILD_COST:,} bytes each, charged against the "
          "same budget before it is traced (no limit with `trusted=True`)")


register_quantity(
    name="printed characters per debug_print call",
    counted="from the equation's format string, numpy print options and "
            "operand avals (jaxpr_io/safety/printing.py): the elements "
            "numpy prints (all up to the threshold, else the edge items of "
            "each axis), each at its widest for its dtype and options, with "
            "brackets, separators, line breaks, summary markers and JAX's "
            "`Array(...)` text; an argument named by two fields counts twice",
    limit=f"{limits.MAX_PRINTED_CHARACTERS:,} characters, else the "
          "equation is refused at load with a `FormatError` naming it (no "
          "limit with `trusted=True`)")
register_quantity(
    name="format arguments",
    counted="the nodes of the pytree of arguments a format string is "
            "checked against at load (a `debug_print`'s, a failed "
            "`checkify.check`'s payload), which the check unflattens, and "
            "of the payload trees checkify's error tree is composed from",
    limit=f"{limits.MAX_FORMAT_ARGUMENT_NODES:,} nodes, else a `FormatError` "
          "naming the equation (payloads: whether trusted or not)")
register_quantity(
    name="monomials of a symbolic dimension",
    counted="from the syntax tree of each dimension, each side of each "
            "constraint, and each shape's size (the product of its "
            "dimensions, which shape rules multiply out), before JAX parses "
            "them (jaxpr_io/format/dim_cost.py): what JAX's parser forms, a "
            "sum adding its parts, a product multiplying them, a power of a "
            "sum of n monomials by the multinomial C(n+k-1, k), max and min "
            "their larger argument, floordiv and mod one atom, and each "
            "rewrite by an equality constraint its right side",
    limit=f"{dim_cost.MAX_DIM_WORK:,} for each, else a `FormatError` naming "
          "the dimension (its aval) or the constraint, trusted or not; "
          f"each charged at {dim_cost.DIM_WORK_COST} bytes a monomial "
          "against the load's budget. Equality constraints that define a "
          "variable in terms of itself are refused")
register_quantity(
    name="steps of JAX's decision procedure",
    counted="the recursions, term combinations and constraints added by "
            "the procedure that simplifies `max` and `min` and compares "
            "dimensions (exponential in the max, min, floordiv and mod it "
            "combines), counted as it runs while the reader builds the "
            "dimensions and while `check=True` type-checks them "
            "(jaxpr_io/compat/symbolic.py)",
    limit=f"{limits.DECISION_STEPS:,} per load, else a `FormatError` naming "
          "the dimension or the check (no limit with `trusted=True`)")
register_quantity(
    name="operands of an einsum path search",
    counted="the operands of each `jnp.einsum` hi primitive whose "
            "`optimize` names an exponential search of opt_einsum's (`True` "
            "is \"optimal\"), which runs when the program is lowered",
    limit="at most " + ", ".join(
        f"{n} for {name!r}" for name, n in
        limits.EINSUM_SEARCH_OPERANDS.items()) + " (where opt_einsum's own "
          "\"auto\" and \"auto-hq\" use them), else a `FormatError` naming "
          "the equation (no limit with `trusted=True`)")
register_quantity(
    name="bytes decompressed from a bind source",
    counted="what the arrays the program needs declare in the source's "
            "metadata, read first (an Orbax item's tree metadata; each "
            "needed `.npz` member's `.npy` header, at most 10,000 bytes), "
            "and for an Orbax array also the chunks its storage metadata "
            "declares, which TensorStore decodes whole (the chunk grid "
            "covering the array, rounded up to whole chunks); members the "
            "program does not need are never read",
    limit=f"{limits.MEMORY_FACTOR}x the source's size on disk (each file "
          "at the size of what a read returns: links followed, "
          f"jaxpr_io/api/source_paths.py) + {limits.FIXED_OVERHEAD >> 20} "
          "MiB, checked before any array is "
          "read; each `.npz` member inflated up to its declared size and no "
          "further (no limit with `trusted=True`, `jaxpr-load --trusted`)")

register_quantity(
    name="constants a conversion folds",
    counted="the output bytes of every equation whose inputs are all "
            "literals or constants, the outputs of such equations counting "
            "as constants in turn (an iota, a broadcast of a literal, and "
            "their consumers), through the calls the converters inline, and "
            "once per loop body or branch (jaxpr_io/converters/folding.py): "
            "what `converters.to_onnx` (jax2onnx's initializers) and "
            "`converters.to_tflite` (TensorFlow's constant folding) may "
            "materialize",
    limit=f"{limits.MEMORY_FACTOR}x the bytes of the program's constants + "
          f"{limits.FIXED_OVERHEAD >> 20} MiB, checked before the converter "
          "runs, else a `FormatError` naming the largest such equation (no "
          "limit for a program loaded with `trusted=True` or traced in the "
          "process, nor with the converter's `trusted=True`; "
          "`to_exported` and `to_saved_model` fold nothing)")
register_quantity(
    name="equations a conversion copies",
    counted="the equations `converters.to_onnx` and `converters.to_tflite` "
            "hand their converters, which copy each call and loop body once "
            "per equation that holds it: an inlined call counts its body's "
            "equations, any other equation 1 plus those of its sub-jaxprs, "
            "each distinct jaxpr counted once and its count reused "
            "(jaxpr_io/converters/expansion.py)",
    limit=f"{limits.CONVERSION_COPY_FACTOR}x the equations the program "
          "stores (each distinct jaxpr once) + "
          f"{limits.CONVERSION_FIXED_EQUATIONS:,}, checked before the "
          "converter runs, else a `FormatError` naming the equation that "
          "contributes most (no limit for a program loaded with "
          "`trusted=True` or traced in the process, nor with the "
          "converter's `trusted=True`; `to_exported` and `to_saved_model` "
          "keep the sharing)")


# ------------------------------------------------- what a file stores
@dataclasses.dataclass(frozen=True)
class FloorCharge:
  """One row of the floor table (docs/trust-model.md): the bytes charged
  for each object of a kind that a file stores, the objects a load builds
  for it, and what they were measured at (benchmarks/measure_costs.py)."""
  name: str
  builds: str
  charge: int
  measured: str


FLOOR: dict[str, FloorCharge] = {f.name: f for f in (
    FloorCharge("equation", "a `JaxprEqn` with its input and output lists, "
                "its slots in the reader's per-equation columns", 450,
                "288 retained on both releases; 450 to 500 at the peak "
                "of a load of a chain, with its variable and inputs"),
    FloorCharge("variable", "a `Var` (a constvar, an input, an equation's "
                "output) and its slots in the environment and lists", 100,
                "72 retained (jax 0.10.2), 56 (0.12.0.1)"),
    FloorCharge("input reference", "an equation's or a jaxpr's use of a "
                "variable or literal: a list slot, and its place in the "
                "reader's columns", 30, "8 retained, 28 to 36 at the peak"),
    FloorCharge("sub-jaxpr", "a `Jaxpr`, its `ClosedJaxpr` and "
                "`DebugInfo` and their lists, the reader's columns and "
                "decoder for it", 2000, "968 to 1,072 retained; with the param "
                "set row, 2,100 to 3,100 a nested block's equation at the "
                "peak RSS of a load"),
    FloorCharge("param set", "a params dict, decoded once, and the copies "
                "its kind checks", 1000, "with the sub-jaxpr rows: the "
                "nested blocks' peak"),
    FloorCharge("aval or array", "a `ShapedArray` with its shape tuple", 300,
                "256 (jax 0.10.2) to 280 (0.12.0.1) retained"),
    FloorCharge("table entry", "a string, name stack, context, equation "
                "kind or pytree table entry", 100, "a `str` of a short "
                "name 50 to 60, with its list slot"),
    FloorCharge("pytree node", "a node stored inline in a signature (the "
                "others are charged at each use, as expansion): JAX's "
                "`PyTreeDef` keeps one C++ node per node",
                limits.TREE_NODE_COST,
                "295 at the peak of building a treedef (RSS)"),
)}


def floor_table() -> str:
  """The markdown table of docs/trust-model.md's floor charges."""
  rows = ["| object the file stores | what a load builds for it | charged "
          "(bytes) | measured (bytes) |", "| --- | --- | --- | --- |"]
  rows += [f"| {f.name} | {f.builds} | {f.charge:,} | {f.measured} |"
           for f in FLOOR.values()]
  return "\n".join(rows) + "\n"


def _stored_nodes(msg) -> int:
  """The `PyTree` messages of a tree as stored: its inline nodes, each use
  of a shared entry counted as one."""
  nodes, stack = 0, [msg]
  while stack:
    m = stack.pop()
    nodes += 1
    if not m.shared:
      stack += m.children
  return nodes


def stored_counts(program_msg, program_bytes: int) -> dict[str, int]:
  """How many objects of each row of `FLOOR` the `Program` message stores
  (each table entry, jaxpr, equation and variable once; no expansion),
  plus "characters": the program message's size, which bounds the
  characters of its strings (summing their lengths costs more)."""
  m = program_msg
  jaxprs = m.jaxprs[:]
  equations = sum(len(j.eqns) + len(j.equations.kinds) // 4 for j in jaxprs)
  return {
      "equation": equations,
      "variable": sum(len(j.equations.outvars) // 4 + len(j.constvars)
                      + len(j.invars) + len(j.eqns) for j in jaxprs),
      "input reference": sum(len(j.equations.invars) // 4 + len(j.outvars)
                             + sum(len(e.invars) for e in j.eqns)
                             for j in jaxprs),
      "sub-jaxpr": len(jaxprs) + len(m.closed_jaxprs),
      "param set": len(m.param_sets),
      "aval or array": len(m.avals) + len(m.arrays),
      "table entry": (len(m.strings) + len(m.name_stack_table.parents) // 4
                      + len(m.name_stacks) + len(m.eqn_contexts)
                      + len(m.equation_kinds) + len(m.tree_nodes)),
      "pytree node": _stored_nodes(m.in_tree) + _stored_nodes(m.out_tree),
      "characters": program_bytes,
  }


def stored_cost(counts: dict[str, int]) -> int:
  """Bytes the objects of `stored_counts` cost once built, at the charges
  of `FLOOR`: what any reader must build for the file, and the floor of
  the memory a load of it takes. Not refused: it is bounded by the file's
  size (each object takes bytes of its own in the file)."""
  return counts["characters"] + sum(
      FLOOR[name].charge * n for name, n in counts.items()
      if name != "characters")


def expansion_budget(counts: dict[str, int], file_size: int) -> int:
  """What a load of an untrusted file of `file_size` bytes that stores
  `counts` (`stored_counts`) may build beyond the floor of its stored
  objects: `limits.MEMORY_FACTOR`x its size + `limits.FIXED_OVERHEAD`
  (shared pytree nodes at each use, symbolic dimensions' monomials, name
  stacks' tuples, polyfills), and its signatures' stored nodes, which are
  charged with the rest of each tree as it is built. Unused table entries
  earn nothing here, so a file cannot pad its way to a larger budget."""
  return (limits.MEMORY_FACTOR * file_size + limits.FIXED_OVERHEAD
          + FLOOR["pytree node"].charge * counts["pytree node"])


def load_bound(counts: dict[str, int], file_size: int) -> int:
  """The most memory that building the program of such a file takes by the
  model: its floor and its expansion budget."""
  return stored_cost(counts) + expansion_budget(counts, file_size)


def name_stack_cost(depths_sum: int) -> int:
  """Bytes charged for name stacks whose depths add up to `depths_sum`:
  each stack holds a tuple of all its entries."""
  return 8 * depths_sum


def writer_charge(program_msg) -> int:
  """What the reader charges against `expansion_budget` for a `Program`
  message the writer made: its signatures and `treedef` values with
  shared nodes at each use, and its name stacks' tuples. (The writer's
  dimensions are JAX's own, a few monomials each; polyfills are a reader's
  release's choice.) `dumps` compares the two."""
  trees = TreeCounts(program_msg)
  total = sum(tree_cost(trees.of(tree)) for tree in (
      program_msg.in_tree, program_msg.out_tree))
  total += sum(tree_cost(trees.of(tree))
               for param_set in program_msg.param_sets
               for p in param_set.params for tree in _treedef_values(p.value))
  parents = program_msg.name_stack_table.parents
  depths = [0] * (len(parents) // 4)
  for i, parent in enumerate(np.frombuffer(parents, "<u4").tolist()):
    depths[i] = depths[parent - 1] + 1 if parent else 1
  return total + name_stack_cost(sum(depths))


def checked_equations_limit(stored_size: int, trusted: bool) -> int:
  """How much `check=True` walks at most, in the units of the "inlined
  equations" row, for a file that stores `stored_size` of them."""
  if trusted:
    return limits.MAX_CHECKED_SIZE
  return min(limits.MAX_CHECKED_SIZE,
             limits.CHECKED_SIZE_FIXED
             + limits.CHECKED_SIZE_PER_STORED * stored_size)


# Counts saturate here: a file of n shared entries can describe 2**n nodes.
_CAP = 1 << 62

# `PyTree.Kind` numbers (schema/jaxpr.proto) that count as leaves.
_LEAF = 1


class TreeCounts:
  """(nodes, leaves) of the pytrees of one `Program` message, with every
  use of a shared node (`PyTree.shared`) counted, read from the messages
  without building anything.

  Entry i of `tree_nodes` may refer only to entries before it, so entries
  are counted in table order, each once; a reference the reader would
  refuse (out of range, or not to an earlier entry) counts as one leaf
  here, and the reader then raises its own error."""

  def __init__(self, program_msg):
    self._table = program_msg.tree_nodes
    self._entries: list[tuple[int, int]] = []

  def entry(self, i: int) -> tuple[int, int]:
    """(nodes, leaves) of table entry `i`."""
    while len(self._entries) <= i:
      j = len(self._entries)
      self._entries.append(self._count(self._table[j], j))
    return self._entries[i]

  def of(self, msg) -> tuple[int, int]:
    """(nodes, leaves) of the tree of `PyTree` message `msg`."""
    return self._count(msg, len(self._table))

  def _count(self, msg, limit: int) -> tuple[int, int]:
    # Iterative over inline children: a tree may nest 64 levels, and one
    # node's children may be many.
    nodes = leaves = 0
    stack = [msg]
    while stack:
      m = stack.pop()
      shared = m.shared
      if shared:
        if shared - 1 < limit:
          n, l = self.entry(shared - 1)
          nodes, leaves = min(nodes + n, _CAP), min(leaves + l, _CAP)
        else:
          nodes, leaves = nodes + 1, leaves + 1
        continue
      nodes += 1
      if m.kind == _LEAF:
        leaves += 1
      stack += m.children
    return min(nodes, _CAP), min(leaves, _CAP)


def signature_leaves_problem(what: str, leaves: int, expected: int
                             ) -> str | None:
  """Why signature `what` ("the input signature" or "the output
  signature") of `leaves` leaves cannot describe `expected` values (checked
  before the tree is built), or None."""
  if leaves <= expected:
    return None  # fewer: the reader says so once the tree is built
  takes = ("takes {} inputs" if "input" in what else "returns {} outputs"
           ).format(expected)
  return f"{what} has {leaves:,} leaves but the program {takes}"


def tree_cost(counts: tuple[int, int]) -> int:
  """Bytes charged for a tree of `counts` (nodes, leaves)."""
  return counts[0] * limits.TREE_NODE_COST



def _treedef_values(value):
  """The `PyTree` messages of the `treedef` values inside `Value` message
  `value` (tuples, frozensets, records and codec values included)."""
  stack = [value]
  while stack:
    v = stack.pop()
    kind = v.WhichOneof("kind")
    if kind == "treedef":
      yield v.treedef
    elif kind in ("tuple", "frozenset"):
      stack += getattr(v, kind).items
    elif kind == "record":
      stack += v.record.fields
    elif kind == "param_codec":
      stack.append(v.param_codec)


def check_page_costs(program_msg, file_size: int, source: str) -> None:
  """Raises `FormatError` if the viewer's reader would refuse the file for
  its cost: its signatures and the `treedef` values of its params, counted
  and charged as viewer/src/reader.js does, against the budget of a file of
  `file_size` bytes (`jaxpr-load --html` calls it before writing the
  page)."""
  budget = limits.MEMORY_FACTOR * file_size + limits.FIXED_OVERHEAD
  counts = TreeCounts(program_msg)
  trees = [("the input signature", program_msg.in_tree),
           ("the output signature", program_msg.out_tree)]
  trees += [(f"param set {i}, a treedef value", tree)
            for i, param_set in enumerate(program_msg.param_sets)
            for p in param_set.params for tree in _treedef_values(p.value)]
  for what, tree in trees:
    nodes = counts.of(tree)[0]
    budget -= nodes * limits.TREE_NODE_COST
    if budget < 0:
      raise FormatError(
          f"{source}: {what} is a pytree of {nodes:,} nodes (counting every "
          f"use of a shared node), more than a file of {file_size:,} bytes "
          f"may ask for ({limits.MEMORY_FACTOR}x its size + "
          f"{limits.FIXED_OVERHEAD >> 20} MiB); the viewer would refuse it")
