"""Format version 4: ref avals (`Aval.ref`), treedef params
(`Value.treedef`) and the new record types, written and read exactly, and
crafted files that misuse them refused with FormatError.

The programs' full round trips (printing, bytes, jit, grad, vmap, jvp, a
fresh process) are tests/read_write/test_zoo.py's second zoo; here are the format's
own rules.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxpr_io
from jaxpr_io.format import _proto as pb
from tests.support import proto_edit
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip


def _refs_program():
  def f(x):
    r = jax.new_ref(x)
    r[1:3] = r[1:3] * 2.0
    r[0] += 1.0
    return r[...]
  return jaxpr_io.trace(f, jnp.arange(4.0))


_message = proto_edit.message


def _edited(prog, mutate) -> bytes:
  data = jaxpr_io.dumps(prog)
  msg = _message(data)
  mutate(msg)
  return proto_edit.reframe(msg, data)


def _ref_avals(msg):
  return [i for i, a in enumerate(msg.avals) if a.WhichOneof("kind") == "ref"]


def _treedef_values(msg):
  """Every `Value.treedef` in the param sets of `msg`."""
  found = []

  def visit(value):
    kind = value.WhichOneof("kind")
    if kind == "treedef":
      found.append(value)
    elif kind in ("tuple", "frozenset"):
      for item in getattr(value, kind).items:
        visit(item)
    elif kind == "record":
      for field in value.record.fields:
        visit(field)
  for param_set in msg.param_sets:
    for param in param_set.params:
      visit(param.value)
  return found


# ----------------------------------------------------------- well formed
def test_ref_program_round_trips_and_runs():
  prog = _refs_program()
  loaded = assert_roundtrip(prog)
  x = jnp.arange(4.0)
  assert_bit_identical(loaded(x), prog(x))
  msg = _message(jaxpr_io.dumps(prog))
  assert msg.format_version >= 4  # refs were added in version 4
  (ref,) = _ref_avals(msg)
  assert msg.avals[ref].ref.inner_aval < ref  # the inner aval comes first
  assert _treedef_values(msg), "get/swap trees are treedef params"


def test_treedef_param_is_rebuilt_exactly():
  prog = _refs_program()
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  trees = [e.params["tree"] for e in prog.closed_jaxpr.jaxpr.eqns
           if "tree" in e.params]
  loaded_trees = [e.params["tree"] for e in loaded.closed_jaxpr.jaxpr.eqns
                  if "tree" in e.params]
  assert trees == loaded_trees and len(trees) >= 3


def test_ragged_dot_dimension_numbers_record():
  prog = jaxpr_io.trace(lambda l, r, g: lax.ragged_dot(l, r, g),
                        jnp.ones((6, 4)), jnp.ones((3, 4, 2)),
                        jnp.array([1, 2, 3], jnp.int32))
  loaded = assert_roundtrip(prog)
  (eqn,) = loaded.closed_jaxpr.jaxpr.eqns
  dn = eqn.params["ragged_dot_dimension_numbers"]
  assert type(dn) is lax.RaggedDotDimensionNumbers
  assert dn == prog.closed_jaxpr.jaxpr.eqns[0].params[
      "ragged_dot_dimension_numbers"]


def test_composite_array_attribute():
  @jax.jit
  def f(x):
    return lax.composite(lambda v, *, table: v + jnp.asarray(table),
                         name="t.add")(x, table=np.arange(3.0))
  prog = jaxpr_io.trace(f, jnp.ones(3))
  loaded = assert_roundtrip(prog)
  assert_bit_identical(loaded(jnp.ones(3)), prog(jnp.ones(3)))


def test_treedef_whose_auxdata_cannot_be_stored_is_refused_at_dumps():
  class Opaque:
    pass

  @jax.tree_util.register_pytree_node_class
  class Box:
    def __init__(self, x, tag):
      self.x, self.tag = x, tag

    def tree_flatten(self):
      return (self.x,), self.tag

    @classmethod
    def tree_unflatten(cls, tag, children):
      return cls(children[0], tag)

  treedef = jax.tree_util.tree_structure(Box(1.0, Opaque()))
  with pytest.raises(jaxpr_io.UnsupportedError, match="cannot be stored "
                     "exactly.*Box.*not plain data"):
    jaxpr_io.dumps(jaxpr_io.trace(
        lambda x: lax.composite(lambda v, *, box: v, name="t.box")(
            x, box=Box(1.0, Opaque())), jnp.ones(2)))
  del treedef


# ------------------------------------------------------------ crafted files
def test_ref_whose_inner_aval_comes_after_it():
  def mutate(m):
    i = _ref_avals(m)[0]
    m.avals[i].ref.inner_aval = i
  with pytest.raises(jaxpr_io.FormatError, match="does not come before it"):
    jaxpr_io.loads(_edited(_refs_program(), mutate))


def test_ref_to_a_ref():
  def mutate(m):
    i = _ref_avals(m)[0]
    m.avals.add().ref.inner_aval = i
  with pytest.raises(jaxpr_io.FormatError, match="inner aval is a "
                     "AbstractRef"):
    jaxpr_io.loads(_edited(_refs_program(), mutate))


def test_ref_memory_space_must_be_registered():
  def mutate(m):
    i = _ref_avals(m)[0]
    m.avals[i].ref.memory_space.int = 3
  with pytest.raises(jaxpr_io.FormatError, match="memory space 3 is not"):
    jaxpr_io.loads(_edited(_refs_program(), mutate))


@pytest.mark.parametrize("what", ["ref", "treedef"])
def test_version_4_fields_in_a_version_3_file(what):
  data = jaxpr_io.dumps(_refs_program())
  msg = _message(data)
  msg.format_version = 3
  proto_edit.unpack_version_5(msg)
  if what == "treedef":  # keep refs readable: only the treedef is new
    for i in _ref_avals(msg):
      inner = msg.avals[msg.avals[i].ref.inner_aval]
      msg.avals[i].CopyFrom(inner)
  raw = proto_edit.reframe(msg, data, format_version=3)
  with pytest.raises(jaxpr_io.FormatError,
                     match=f"a {what} .*before version 4"):
    jaxpr_io.loads(raw)


def test_treedef_param_naming_a_missing_type():
  def mutate(m):
    for node in m.tree_nodes:
      if node.kind == pb.PyTreeKind["GENERIC"]:
        node.type_module = m.strings.__len__()
        m.strings.append("no_such_module_for_jaxpr_io")
        return
    raise AssertionError("no GENERIC node in the refs program")
  with pytest.raises(jaxpr_io.FormatError,
                     match="treedef param needs the pytree node type "
                     "no_such_module_for_jaxpr_io"):
    jaxpr_io.loads(_edited(_refs_program(), mutate))


def test_treedef_that_contains_itself():
  def mutate(m):
    # A GENERIC node whose auxdata is a treedef referring to that node.
    for i, node in enumerate(m.tree_nodes):
      if node.kind == pb.PyTreeKind["GENERIC"]:
        node.auxdata.Clear()
        node.auxdata.treedef.shared = i + 1
        return
    raise AssertionError("no GENERIC node in the refs program")
  with pytest.raises(jaxpr_io.FormatError, match="contains itself|does not "
                     "come before"):
    jaxpr_io.loads(_edited(_refs_program(), mutate))


def test_ragged_dot_dimension_numbers_must_be_dimension_tuples():
  prog = jaxpr_io.trace(lambda l, r, g: lax.ragged_dot(l, r, g),
                        jnp.ones((6, 4)), jnp.ones((3, 4, 2)),
                        jnp.array([1, 2, 3], jnp.int32))

  def mutate(m):
    for param_set in m.param_sets:
      for p in param_set.params:
        if m.strings[p.name] == "ragged_dot_dimension_numbers":
          p.value.record.fields[1].ints.items[0] = -4
          return
    raise AssertionError("no ragged_dot_dimension_numbers param")
  with pytest.raises(jaxpr_io.FormatError, match="lhs_ragged_dimensions"):
    jaxpr_io.loads(_edited(prog, mutate))


# ----------------------------------------------------------------- checkify
def _checked(x):
  from jax.experimental import checkify  # pylint: disable=g-import-not-at-top
  checkify.check(jnp.all(x > 0), "x must be positive, got {} and {y}", x[0],
                 y=x[1])
  y = jnp.log(x)
  checkify.check(jnp.all(y < 3), "log too large: {}", y.max())
  return y


def test_checkify_check_round_trips_and_raises_the_same_error():
  from jax.experimental import checkify  # pylint: disable=g-import-not-at-top
  prog = jaxpr_io.trace(_checked, jnp.ones(3))
  loaded = assert_roundtrip(prog)
  for x in (jnp.array([1.0, 2.0, 3.0]), jnp.array([-1.0, 2.0, 3.0]),
            jnp.array([1.0, 2.0, 100.0])):
    want_err, want = jax.jit(checkify.checkify(_checked))(x)
    got_err, got = jax.jit(checkify.checkify(loaded))(x)
    assert got_err.get() == want_err.get()
    assert_bit_identical(got, want)
  assert "x must be positive, got -1.0 and 2.0" in checkify.checkify(loaded)(
      jnp.array([-1.0, 2.0, 3.0]))[0].get()


def _edit_check_format(fmt):
  def mutate(m):
    for i, s in enumerate(m.strings):
      if s.startswith("x must be positive"):
        m.strings[i] = fmt
        return
    raise AssertionError("no format string in the checkify program")
  return _edited(jaxpr_io.trace(_checked, jnp.ones(3)), mutate)


@pytest.mark.parametrize("fmt, match", [
    ("{0.__class__}", "not a plain name or position"),
    ("{0:>100000}", "format spec"),
    ("{} {} {}", "does not fit its arguments"),
])
def test_checkify_format_string_is_screened(fmt, match):
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(_edit_check_format(fmt))
  # A file you wrote yourself may say anything.
  jaxpr_io.loads(_edit_check_format(fmt), trusted=True)


def test_checkify_error_type_must_be_known():
  def mutate(m):
    for i, s in enumerate(m.strings):
      if s == "FailedCheckError":
        m.strings[i] = "SystemExit"
        return
    raise AssertionError("no error type in the checkify program")
  with pytest.raises(jaxpr_io.FormatError, match="SystemExit"):
    jaxpr_io.loads(_edited(jaxpr_io.trace(_checked, jnp.ones(3)), mutate))
