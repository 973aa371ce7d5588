"""Format version 3's tables and columns: the equation columns and kinds,
the name stack table and the shared pytree nodes.

Every test edits a real file at the protobuf level (`tests/support/proto_edit.py`
for equations) and expects a `FormatError` that names the place, or, for
the well-formed cases, a program that loads, prints like the original and
re-dumps to the same bytes.
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.format import _proto as pb
from jaxpr_io.format import container
from tests.support import proto_edit

X = np.arange(1, 5, dtype=np.float32)


def _program(fn=None, *args):
  if fn is None:
    def fn(x):
      with jax.named_scope("outer"):
        with jax.named_scope("inner"):
          y = jnp.sin(x) * 2.0
        z = jnp.cos(y) + x
      return y, z
    args = (X,)
  return jaxpr_io.trace(fn, *args)


_message = proto_edit.message
_reframe = proto_edit.reframe


def _edited(mutate, prog=None) -> bytes:
  data = jaxpr_io.dumps(prog or _program())
  msg = _message(data)
  mutate(msg)
  return _reframe(msg, data)


def _root(msg):
  return msg.jaxprs[msg.closed_jaxprs[msg.root].jaxpr]


def _rejected(data: bytes, match: str):
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(data)


# ------------------------------------------------------------ well formed
def test_layout_round_trips_exactly():
  prog = _program()
  data = jaxpr_io.dumps(prog)
  msg = _message(data)
  assert msg.format_version == jaxpr_io.FORMAT_VERSION  # 3 and later
  assert all(not j.eqns for j in msg.jaxprs)       # columns only
  assert not msg.name_stacks and msg.name_stack_table.parents
  loaded = jaxpr_io.loads(data)
  assert str(loaded) == str(prog)
  assert jaxpr_io.dumps(loaded) == data
  # The nested scopes share their prefix: outer, outer/inner.
  stacks = {str(e.source_info.name_stack)
            for e in loaded.closed_jaxpr.jaxpr.eqns}
  assert {"outer", "outer/inner"} <= stacks


def test_equations_of_one_kind_share_their_kind_entry():
  def f(x):
    for _ in range(6):
      x = jnp.sin(x)
    return x
  data = jaxpr_io.dumps(_program(f, X))
  msg = _message(data)
  assert len(msg.equation_kinds) == 1
  assert len(_root(msg).equations.kinds) == 6 * 4


def test_repeated_pytree_nodes_are_stored_once():
  layer = {"w": np.ones((4, 4), np.float32), "b": np.ones(4, np.float32)}
  prog = _program(lambda ps, x: sum(x @ p["w"] + p["b"] for p in ps),
                  [layer] * 5, X)
  msg = _message(jaxpr_io.dumps(prog))
  # (args, kwargs), args, the list of layers, one layer dict, kwargs.
  assert len(msg.tree_nodes) <= 5
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  assert loaded.in_tree == prog.in_tree


def test_dropped_params_are_counted_per_equation():
  """Equations of one kind share one check, but the warning still counts
  every equation whose param was dropped."""
  f = jax.jit(lambda a, b: a * b, donate_argnums=(0,))
  prog = _program(lambda x: f(x, x) + f(x + 1, x) + f(x + 2, x), X)
  assert sum(e.primitive.name == "jit"
             for e in prog.closed_jaxpr.jaxpr.eqns) == 3
  with pytest.warns(jaxpr_io.DroppedParamWarning,
                    match=r"'donated_invars' of 3 'jit' equation\(s\)"):
    jaxpr_io.loads(jaxpr_io.dumps(prog))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    jaxpr_io.loads(jaxpr_io.dumps(prog), trusted=True)


# ------------------------------------------------------- equation columns
@pytest.mark.parametrize("field", ["kinds", "invars", "outvars",
                                   "name_stacks", "contexts", "dropped"])
def test_column_not_a_multiple_of_four_bytes(field):
  def mutate(m):
    cols = _root(m).equations
    setattr(cols, field, getattr(cols, field) + b"\x00")
  _rejected(_edited(mutate), rf"column '{field}' has \d+ bytes, not a "
            r"multiple of 4")


@pytest.mark.parametrize("field", ["invars", "outvars"])
def test_column_too_short_for_the_kinds(field):
  def mutate(m):
    cols = _root(m).equations
    setattr(cols, field, getattr(cols, field)[:-4])
  _rejected(_edited(mutate), rf"equations column '{field}' has \d+ entries; "
            r"the equations' kinds take \d+")


@pytest.mark.parametrize("field", ["name_stacks", "contexts"])
def test_per_equation_column_of_the_wrong_length(field):
  def mutate(m):
    cols = _root(m).equations
    setattr(cols, field, getattr(cols, field) + b"\x00" * 4)
  _rejected(_edited(mutate), rf"equations column '{field}' has \d+ entries "
            r"for \d+ equations")


@pytest.mark.parametrize("field,what", [("kinds", "kind"),
                                        ("name_stacks", "name stack"),
                                        ("contexts", "eqn context")])
def test_column_index_out_of_range(field, what):
  def mutate(m):
    cols = _root(m).equations
    values = np.frombuffer(getattr(cols, field), "<u4").copy()
    values[1] = 10_000
    setattr(cols, field, values.tobytes())
  _rejected(_edited(mutate), rf"equation 1: {what} index 10000 is out of "
            r"range")


def test_output_aval_out_of_range():
  def mutate(m):
    cols = _root(m).equations
    values = np.frombuffer(cols.outvars, "<u4").copy()
    values[0] = 2**32 - 1
    cols.outvars = values.tobytes()
  _rejected(_edited(mutate), r"output's aval index 4294967295 is out of "
            r"range")


def test_equation_kind_arity_does_not_fit_the_primitive():
  def mutate(m):
    (eqn,) = proto_edit.by_primitive(m, "sin")
    eqn.outvars.append(eqn.outvars[0])   # sin has one result
  _rejected(_edited(mutate), r"equation \d+ \(sin\): primitive 'sin' has one "
            r"result, but the equation binds 2")


def test_duplicate_equation_kinds():
  def mutate(m):
    m.equation_kinds.add().CopyFrom(m.equation_kinds[0])
  _rejected(_edited(mutate), r"equation kinds table holds a kind twice")


def test_version_3_jaxpr_with_legacy_equation_messages():
  def mutate(m):
    _root(m).eqns.add()
  _rejected(_edited(mutate), r"version \d+ jaxpr stores `eqns` messages")


def test_kinds_table_in_a_version_2_file():
  data = jaxpr_io.dumps(_program())
  msg = _message(data)
  msg.format_version = 2
  proto_edit.store(msg)
  layout = container.DataLayout()
  bad = container.to_bytes(msg.SerializeToString(deterministic=True),
                           layout, 2)
  _rejected(bad, r"version 2 file has an equation kinds table")


@pytest.mark.parametrize("entries,match", [
    ([(5, None)], r"effects of equation 5, but the jaxpr has \d+"),
    ([(1, None), (0, None)], r"not in ascending order or repeat"),
    ([(0, ())], r"equation 0 has an empty effects entry"),
])
def test_bad_effects_entries(entries, match):
  def mutate(m):
    cols = _root(m).equations
    effect = pb.Effect(name=list(m.strings).index("sin"))
    for eqn, effects in entries:
      entry = cols.effects.add(equation=eqn)
      if effects is None:
        entry.effects.append(effect)
  _rejected(_edited(mutate), match)


# ------------------------------------------------------ name stack table
def _stack_columns(m):
  t = m.name_stack_table
  return [np.frombuffer(getattr(t, f), "<u4").copy()
          for f in ("parents", "kinds", "names")]


def _set_stack_columns(m, parents, kinds, names):
  t = m.name_stack_table
  t.parents, t.kinds, t.names = (c.astype("<u4").tobytes()
                                 for c in (parents, kinds, names))


def test_name_stack_parent_must_come_before():
  def mutate(m):
    parents, kinds, names = _stack_columns(m)
    parents[0] = len(parents)   # 1 + its own index or later
    _set_stack_columns(m, parents, kinds, names)
  _rejected(_edited(mutate), r"name stack 0's parent \d+ does not come "
            r"before it")


def test_name_stack_columns_of_different_lengths():
  def mutate(m):
    parents, kinds, names = _stack_columns(m)
    _set_stack_columns(m, parents, kinds[:-1], names)
  _rejected(_edited(mutate), r"name stack table's columns have")


def test_name_stack_without_an_entry_that_is_not_empty():
  def mutate(m):
    parents, kinds, names = _stack_columns(m)
    i = int(np.flatnonzero(parents)[0])
    kinds[i] = 0
    _set_stack_columns(m, parents, kinds, names)
  _rejected(_edited(mutate), r"has no entry of its own but is not the empty "
            r"stack")


def test_name_stack_entry_of_unknown_kind():
  def mutate(m):
    parents, kinds, names = _stack_columns(m)
    kinds[0] = 7
    _set_stack_columns(m, parents, kinds, names)
  _rejected(_edited(mutate), r"unknown name stack entry kind 7")


def test_name_stack_name_out_of_range():
  def mutate(m):
    parents, kinds, names = _stack_columns(m)
    names[0] = 10**6
    _set_stack_columns(m, parents, kinds, names)
  _rejected(_edited(mutate), r"string index 1000000 is out of range")


def test_long_chain_of_name_stacks_is_charged_before_it_is_built():
  """Each stack holds all its entries: a chain of n stacks would build n**2
  entries from a file of 12n bytes. The budget refuses it first."""
  n = 200_000
  def mutate(m):
    parents = np.arange(n, dtype=np.uint32)     # stack i's parent is i - 1
    kinds = np.ones(n, np.uint32)
    names = np.zeros(n, np.uint32)
    _set_stack_columns(m, parents, kinds, names)
  _rejected(_edited(mutate), r"the name stacks would take more memory than "
            r"an untrusted file")


def test_name_stack_table_in_a_version_2_file():
  data = jaxpr_io.dumps(_program())
  msg = _message(data)
  msg.format_version = 2
  del msg.equation_kinds[:]
  bad = container.to_bytes(msg.SerializeToString(deterministic=True),
                           container.DataLayout(), 2)
  with pytest.raises(jaxpr_io.FormatError):
    jaxpr_io.loads(bad)


# ------------------------------------------------------ shared tree nodes
def test_shared_tree_node_out_of_range():
  def mutate(m):
    m.in_tree.shared = len(m.tree_nodes) + 1
  _rejected(_edited(mutate), r"refers to shared node \d+, which is out of "
            r"range or does not come before it")


def test_shared_tree_node_refers_forward():
  def mutate(m):
    assert len(m.tree_nodes) >= 2
    first = m.tree_nodes[0]
    first.children[0].Clear()
    first.children[0].shared = len(m.tree_nodes)   # the last entry
  _rejected(_edited(mutate), r"which is out of range or does not come "
            r"before it")


def test_shared_tree_node_with_other_fields():
  def mutate(m):
    m.in_tree.kind = pb.PyTreeKind["TUPLE"]
  _rejected(_edited(mutate), r"refers to a shared node and sets other fields")


def test_shared_tree_node_in_a_version_2_file():
  data = jaxpr_io.dumps(_program())
  msg = _message(data)
  msg.format_version = 2
  del msg.equation_kinds[:]
  msg.ClearField("name_stack_table")
  bad = container.to_bytes(msg.SerializeToString(deterministic=True),
                           container.DataLayout(), 2)
  with pytest.raises(jaxpr_io.FormatError):
    jaxpr_io.loads(bad)


def test_inline_trees_load_like_shared_ones():
  """A version 3 reader accepts trees written inline (no `tree_nodes`)."""
  prog = _program()
  data = jaxpr_io.dumps(prog)
  msg = _message(data)
  proto_edit.inline_trees(msg)
  loaded = jaxpr_io.loads(_reframe(msg, data))
  assert loaded.in_tree == prog.in_tree and loaded.out_tree == prog.out_tree


def test_each_name_stack_is_stored_once():
  """Equal stacks (JAX makes many equal empty ones) share one row."""
  def f(x):
    y = jax.lax.scan(lambda c, v: (c * v, jnp.sin(c)), 1.0, x)[1]
    return jnp.sum(jnp.cos(y))
  prog = _program(jax.grad(f), X)
  msg = _message(jaxpr_io.dumps(prog))
  rows = list(zip(*(np.frombuffer(getattr(msg.name_stack_table, c), "<u4")
                    .tolist() for c in ("parents", "kinds", "names"))))
  assert len(rows) == len(set(rows)) > 1
