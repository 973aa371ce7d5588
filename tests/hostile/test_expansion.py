"""Hostile files that expand: small files describing what costs far more than
their size (issue 28, the cost model of jaxpr_io/safety/costs.py).

Each file is crafted at the protobuf level from a real program's message:
  * the 960-byte file whose `out_tree` is a chain of 40 tuple nodes, each
    holding the one before twice (2**40 leaves), and the same chain with
    None nodes in a program without outputs (2**41 nodes, no leaf);
  * the same chain in an equation's `treedef` param;
  * 20 jaxprs, each calling the one before twice (a million inlined
    equations), under `load(check=True)`;
  * the first file given to `jaxpr-load --html`.
Each runs in a fresh process whose address space is limited to what it
held after importing jax and jaxpr_io plus the file's budget (16x its size +
64 MiB) and some slack for the allocator, so that a regression fails with a
MemoryError instead of taking the machine's memory. Each asserts the
FormatError (or the CLI's one-line error), that the peak resident memory
grew by less than the budget, and that the child finished well inside a
generous timeout.
"""

from __future__ import annotations

import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.format import _proto as pb
from jaxpr_io.format import limits
from tests.hostile import craft, replace_string, run_child
from tests.support import proto_edit

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

X4 = np.arange(1, 5, dtype=np.float32)
_KIND = pb.PyTree.Kind
LEVELS = 40
CALL_LEVELS = 20


# ------------------------------------------------------------- crafting
def _chain(msg, levels: int, leaf_kind) -> int:
  """Appends `levels` tuple nodes to `msg.tree_nodes`: the first holds two
  nodes of `leaf_kind`, each next one the one before it twice. Returns the
  `PyTree.shared` value that refers to the last (2**levels leaves)."""
  first = msg.tree_nodes.add()
  first.kind = _KIND.Value("TUPLE")
  for _ in range(2):
    first.children.add().kind = leaf_kind
  for _ in range(levels - 1):
    below = len(msg.tree_nodes)  # 1 + the index of the entry before
    node = msg.tree_nodes.add()
    node.kind = _KIND.Value("TUPLE")
    for _ in range(2):
      node.children.add().shared = below
  return len(msg.tree_nodes)


def shared_out_tree_file(leaf: str = "LEAF", levels: int = LEVELS) -> bytes:
  """`-x` whose output signature is the chain of `LEVELS` shared tuples
  (leaf="LEAF": 2**40 leaves for one output), or a program without outputs
  whose signature is the chain over None nodes (no leaf, 2**41 nodes)."""
  fn = (lambda x: -x) if leaf == "LEAF" else (lambda x: ())
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, X4))

  def mutate(msg):
    top = _chain(msg, levels, _KIND.Value(leaf))
    msg.out_tree.Clear()
    msg.out_tree.shared = top
  return craft(data, mutate)


def _treedef_values(value):
  kind = value.WhichOneof("kind")
  if kind == "treedef":
    yield value
  elif kind in ("tuple", "frozenset"):
    for item in getattr(value, kind).items:
      yield from _treedef_values(item)
  elif kind == "record":
    for field in value.record.fields:
      yield from _treedef_values(field)


def shared_treedef_param_file() -> bytes:
  """A ref program whose `get`/`swap` `tree` params are the chain."""
  def f(x):
    r = jax.new_ref(x)
    r[1:3] = r[1:3] * 2.0
    return r[...]
  data = jaxpr_io.dumps(jaxpr_io.trace(f, jnp.arange(4.0)))

  def mutate(msg):
    top = _chain(msg, LEVELS, _KIND.Value("LEAF"))
    trees = [v for ps in msg.param_sets for p in ps.params
             for v in _treedef_values(p.value)]
    assert trees
    for value in trees:
      value.treedef.Clear()
      value.treedef.shared = top
  return craft(data, mutate)


def shared_call_graph_file(levels: int = CALL_LEVELS) -> bytes:
  """`levels` jaxprs above `-x`, each calling the one below it twice with
  `jit` equations: 2**levels inlined `neg` equations in a few KB."""
  g = jax.jit(lambda a: -a)
  data = jaxpr_io.dumps(jaxpr_io.trace(lambda x: g(g(x)), X4))

  def mutate(msg):
    top = msg.closed_jaxprs[msg.root].jaxpr
    calls = proto_edit.equations(msg, top)
    assert [msg.strings[e.primitive] for e in calls] == ["jit", "jit"]
    assert top == 1 and len(msg.jaxprs) == 2  # jaxpr 0 is `-a`
    template = msg.param_sets[calls[0].param_set]
    below = msg.root
    for _ in range(levels - 1):
      params = msg.param_sets.add()
      params.CopyFrom(template)
      (body,) = [p for p in params.params if msg.strings[p.name] == "jaxpr"]
      body.value.closed_jaxpr = below
      jaxpr = msg.jaxprs.add()
      jaxpr.CopyFrom(msg.jaxprs[top])
      for eqn in proto_edit.equations(msg, len(msg.jaxprs) - 1):
        eqn.param_set = len(msg.param_sets) - 1
      closed = msg.closed_jaxprs.add()
      closed.jaxpr = len(msg.jaxprs) - 1
      below = len(msg.closed_jaxprs) - 1
    msg.root = below
  return craft(data, mutate)


# ------------------------------------------------------------ the child
# Run after the prelude of tests/hostile/__init__.py: limits the address
# space, measures the peak RSS and the time of ACT (defined by each test).
_LIMITED = """
    from jaxpr_io.format import limits
    size = os.path.getsize(ARGS[0])
    budget_mib = (limits.MEMORY_FACTOR * size + limits.FIXED_OVERHEAD) / 2**20
    # What the interpreter holds now (jax, jaxpr_io, XLA's threads) plus
    # the budget and room for the allocator's arenas.
    vm_mib = _status_mib("VmSize")
    cap = int((vm_mib + budget_mib + 256) * 2**20)
    resource.setrlimit(resource.RLIMIT_AS, (cap, cap))
    reset_peak_rss()
    base = current_rss_mib()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    start = time.monotonic()
    ACT()
    print("ELAPSED:", time.monotonic() - start)
    print("RSS_GROWTH_MIB:", rss_mib() - base)
    print("MAXRSS_GROWTH_MIB:",
          resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
          - maxrss_before)
    print("BUDGET_MIB:", budget_mib)
"""

_LOAD = """
    def ACT():
      expect_format_error(jaxpr_io.load, ARGS[0], check="check" in ARGS)
"""

_LOAD_ONLY = """
    def ACT():
      prog = jaxpr_io.load(ARGS[0])
      jaxpr = prog.closed_jaxpr.jaxpr
      print("EQNS:", [e.primitive.name for e in jaxpr.eqns])
      print("SAME_CALLEE:", jaxpr.eqns[0].params["jaxpr"]
            is jaxpr.eqns[1].params["jaxpr"])
"""

_HTML = """
    import contextlib, io
    from jaxpr_io.tools import load as cli
    def ACT():
      err = io.StringIO()
      with contextlib.redirect_stderr(err):
        rc = cli.main([ARGS[0], "--html", ARGS[1]])
      print("RC:", rc)
      for line in err.getvalue().splitlines():
        if "error" in line:
          print("CLI_ERROR:", line)
      print("PAGE_WRITTEN:", os.path.exists(ARGS[1]))
"""


def _run(code: str, *args):
  child = run_child(code + _LIMITED, *args, timeout=180)
  assert child.rc == 0, str(child)
  growth = float(child.lines("RSS_GROWTH_MIB:")[0])
  maxrss_growth = float(child.lines("MAXRSS_GROWTH_MIB:")[0])
  budget = float(child.lines("BUDGET_MIB:")[0])
  print(f"\n{child.elapsed:.1f} s in the child, of which the action "
        f"{child.lines('ELAPSED:')[0]} s; RSS growth {growth:.0f} MiB "
        f"(ru_maxrss {maxrss_growth:.0f}), budget {budget:.0f} MiB")
  assert growth <= budget and maxrss_growth <= budget, str(child)
  return child


def _format_error(child) -> str:
  (message,) = child.lines("FORMAT_ERROR:")
  print("FormatError:", message)
  return message


def _write(tmp_path, data: bytes) -> str:
  path = tmp_path / "hostile.jaxpr"
  path.write_bytes(data)
  return str(path)


# ---------------------------------------------------------------- tests
def test_shared_out_tree_file_is_small():
  data = shared_out_tree_file()
  assert len(data) < 1200, len(data)


def test_shared_out_tree_is_refused_before_it_is_built(tmp_path):
  child = _run(_LOAD, _write(tmp_path, shared_out_tree_file()))
  message = _format_error(child)
  assert re.search(r"output signature has 1,099,511,627,776 leaves but the "
                   r"program returns 1 outputs", message), message


def test_shared_out_tree_of_nones_is_charged_before_it_is_built(tmp_path):
  child = _run(_LOAD, _write(tmp_path, shared_out_tree_file("NONE")))
  message = _format_error(child)
  assert re.search(r"output signature \(a pytree of 2,199,023,255,551 "
                   r"nodes.*more memory than an untrusted file", message), (
                       message)


def test_a_tree_charged_within_the_budget_is_built_within_it(tmp_path):
  # 262,143 nodes (17 levels of shared Nones) were charged 200 bytes a node,
  # 50 MiB, and building the tree grew the resident memory by 74 MiB, over
  # the 64 MiB budget of a small file (fuzz campaign seed 102, case 232).
  # Charged at what it costs (limits.TREE_NODE_COST), it is refused, and
  # whatever the outcome the child's growth stays within the budget.
  child = _run(_LOAD, _write(tmp_path, shared_out_tree_file("NONE", 17)))
  message = _format_error(child)
  assert re.search(r"output signature \(a pytree of 262,143 nodes", message), (
      message)


def test_shared_treedef_param_is_charged_before_it_is_built(tmp_path):
  child = _run(_LOAD, _write(tmp_path, shared_treedef_param_file()))
  message = _format_error(child)
  assert re.search(r"treedef value \(a pytree of 2,199,023,255,551 nodes.*"
                   r"more memory than an untrusted file", message), message


def test_shared_call_graph_is_refused_by_check(tmp_path):
  data = shared_call_graph_file()
  assert len(data) < 8000, len(data)
  path = _write(tmp_path, data)
  child = _run(_LOAD, path, "check")
  message = _format_error(child)
  # Jaxpr k calls jaxpr k - 1 twice (jaxpr 0 is `-a`): each of its two
  # `jit` equations weighs 1 + its input and output + what jaxpr k - 1
  # weighs inlined.
  inlined = [3]
  for _ in range(CALL_LEVELS):
    inlined.append(2 * (3 + inlined[-1]))
  stored = 3 + 6 * CALL_LEVELS
  limit = limits.CHECKED_SIZE_FIXED + limits.CHECKED_SIZE_PER_STORED * stored
  first_over = next(k for k, n in enumerate(inlined) if n > limit)
  assert re.search(rf"jaxpr {first_over} expands to {inlined[first_over]:,} "
                   rf"equations, inputs and outputs .* over the {limit:,} "
                   rf"that check=True walks for a file that stores {stored} "
                   rf"\({1 + 2 * CALL_LEVELS} equations\)", message), message


def test_shared_call_graph_loads_without_check(tmp_path):
  # Building it shares each sub-jaxpr: the plain load stays within the
  # budget (what calling it compiles is what check=True bounds).
  path = _write(tmp_path, shared_call_graph_file())
  child = _run(_LOAD_ONLY, path)
  assert child.lines("EQNS:") == ["['jit', 'jit']"], str(child)
  assert child.lines("SAME_CALLEE:") == ["True"], str(child)


def test_html_refuses_the_shared_out_tree_in_one_line(tmp_path):
  out = tmp_path / "page.html"
  child = _run(_HTML, _write(tmp_path, shared_out_tree_file()), str(out))
  assert child.lines("RC:") == ["1"], str(child)
  (line,) = child.lines("CLI_ERROR:")
  assert re.fullmatch(r"jaxpr-load: error: FormatError: .*output signature "
                      r"is a pytree of [\d,]+ nodes.*viewer would refuse it",
                      line), line
  assert child.lines("PAGE_WRITTEN:") == ["False"], str(child)
  assert not os.path.exists(out)


def test_a_type_error_under_shared_calls_is_refused_cheaply(tmp_path):
  # JAX's checker prints up to 20 equations around a type error with every
  # sub-jaxpr inlined, at every level of calls: under 10 levels of shared
  # calls (1,024 inlined) that took a minute and 65 MiB (fuzz campaign seed
  # 101, case 3439). Here the bottom `-a` becomes `is_finite(a)`, typed
  # f32[4] where JAX's rule gives bool[4].
  data = craft(shared_call_graph_file(10),
               lambda msg: replace_string(msg, "neg", "is_finite"))
  child = _run(_LOAD, _write(tmp_path, data), "check")
  message = _format_error(child)
  assert re.search(r"a call body used 2 times does not type-check: "
                   r"JaxprTypeError: .*bool\[4\]", message), message
  assert len(message) < 2000, message
