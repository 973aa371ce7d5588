"""The cost model (jaxpr_io/safety/costs.py): its table in
docs/trust-model.md is the registry's, and its counts are those of the trees
JAX builds.

tests/hostile/test_expansion.py crafts the files that the model refuses and
runs them in subprocesses with a memory limit; these tests check the model's
pieces in-process.
"""

import os
import re

import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.format import _proto as pb
from jaxpr_io.format import limits
from jaxpr_io.safety import costs
from tests.support import paths
from tests.support import proto_edit
from tests.support import scale_programs

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

ROOT = paths.ROOT


def test_docs_cost_table_matches_the_registry():
  with open(os.path.join(ROOT, "docs", "trust-model.md")) as f:
    page = f.read()
  assert "\n## Cost model\n" in page
  table = re.search(r"<!-- cost-table -->\n(.*?)<!-- /cost-table -->",
                    page, re.S)
  assert table is not None
  assert table.group(1) == costs.cost_table()
  rows = table.group(1).splitlines()[2:]
  assert [row.split(" | ")[0].lstrip("| ") for row in rows] == list(
      costs.QUANTITIES)


def test_a_quantity_is_registered_once():
  name = next(iter(costs.QUANTITIES))
  with pytest.raises(ValueError, match="twice"):
    costs.register_quantity(name=name, counted="x", limit="y")


def test_a_cell_cannot_break_the_table():
  with pytest.raises(ValueError, match="cannot hold"):
    costs.register_quantity(name="a | b", counted="x", limit="y")
  assert "a | b" not in costs.QUANTITIES


def _layers_program():
  """A model of 12 identical layers (the writer shares their tree node)
  with a None and a list in its signature."""

  layer = {"w": np.ones((2, 2), np.float32), "b": np.zeros(2, np.float32)}
  params = {f"layer{i:02d}": dict(layer) for i in range(12)}

  def f(params, x, extra):
    del extra
    for p in params.values():
      x = jnp.tanh(x @ p["w"] + p["b"])
    return [x, None, (x.sum(), {"a": x})]
  return jaxpr_io.trace(f, params, np.ones(2, np.float32), None)


def test_tree_counts_are_jax_s():
  """The counts of the signatures, read from the messages with shared
  nodes expanded, are the node and leaf counts of the trees JAX builds."""
  prog = _layers_program()
  msg = proto_edit.message(jaxpr_io.dumps(prog))
  assert len(msg.tree_nodes) < 12, "the layers should share a node"
  counts = costs.TreeCounts(msg)
  for field, tree in (("in_tree", prog.in_tree), ("out_tree", prog.out_tree)):
    assert counts.of(getattr(msg, field)) == (tree.num_nodes,
                                              tree.num_leaves), field
  # Each shared entry is counted once, in table order.
  assert len(counts._entries) == len(msg.tree_nodes)  # pylint: disable=protected-access


def test_counts_saturate_and_reach_no_recursion_limit():
  """10,000 entries, each holding the one before twice: counted without
  recursion, the counts capped instead of growing to 2**10000."""
  msg = pb.Program()
  first = msg.tree_nodes.add(kind=pb.PyTree.Kind.Value("TUPLE"))
  first.children.add(kind=pb.PyTree.Kind.Value("LEAF"))
  for i in range(1, 10_000):
    node = msg.tree_nodes.add(kind=pb.PyTree.Kind.Value("TUPLE"))
    node.children.add(shared=i)
    node.children.add(shared=i)
  msg.out_tree.shared = 10_000
  nodes, leaves = costs.TreeCounts(msg).of(msg.out_tree)
  assert nodes == leaves == 1 << 62


def test_a_reference_the_reader_refuses_counts_as_one_leaf():
  msg = pb.Program()
  node = msg.tree_nodes.add(kind=pb.PyTree.Kind.Value("TUPLE"))
  node.children.add(shared=1)   # itself: not an entry before it
  node.children.add(shared=7)   # out of range
  msg.out_tree.shared = 1
  assert costs.TreeCounts(msg).of(msg.out_tree) == (3, 2)


def test_viewer_uses_the_same_constants():
  """viewer/src/reader.js charges pytrees with jaxpr_io/format/limits.py's
  constants."""
  with open(os.path.join(ROOT, "viewer", "src", "reader.js")) as f:
    source = f.read()
  (line,) = re.findall(r"^const COSTS = \{(.*)\};$", source, re.M)
  values = dict(item.split(": ") for item in line.split(", "))
  assert values == {
      "memoryFactor": str(limits.MEMORY_FACTOR),
      "fixedOverhead": f"{limits.FIXED_OVERHEAD >> 20} * 1024 * 1024",
      "treeNodeCost": str(limits.TREE_NODE_COST)}


def test_checked_equations_limit():
  assert costs.checked_equations_limit(0, trusted=False) == (
      limits.CHECKED_SIZE_FIXED)
  assert costs.checked_equations_limit(1000, trusted=False) == (
      limits.CHECKED_SIZE_FIXED
      + 1000 * limits.CHECKED_SIZE_PER_STORED)
  assert costs.checked_equations_limit(10**9, trusted=False) == (
      limits.MAX_CHECKED_SIZE)
  assert costs.checked_equations_limit(0, trusted=True) == (
      limits.MAX_CHECKED_SIZE)


def test_docs_floor_table_matches_the_code():
  assert paths.generated_block("docs/trust-model.md",
                               "floor-table") == costs.floor_table()


@pytest.mark.parametrize("shape", scale_programs.SHAPES)
def test_honest_files_fit_the_budget(shape):
  """Issue 40: every file `dumps` writes loads untrusted, at any size. The
  largest honest files (a million equations) are too slow to write here;
  what decides is per stored object, so a 20,000-equation program of each
  shape is loaded, and its charge beyond the floor, which does not grow
  with the program, is compared with the budget of a 1M-equation file."""
  closed = scale_programs.build(shape, 20_000)
  data = jaxpr_io.dumps(closed)
  prog = jaxpr_io.loads(data)  # untrusted
  assert len(prog.closed_jaxpr.jaxpr.eqns) == len(closed.jaxpr.eqns)
  msg = proto_edit.message(data)
  counts = costs.stored_counts(msg, msg.ByteSize())
  assert counts["equation"] >= 19_000
  charge = costs.writer_charge(msg)
  assert charge < costs.expansion_budget(counts, 0) // 10
  # The floor per stored equation keeps the bound linear in the file.
  assert costs.stored_cost(counts) < 60 * len(data)
