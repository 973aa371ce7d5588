"""Editing the equations of a `Program` message in tests that craft files.

Version 3 stores a jaxpr's equations as columns (`Jaxpr.equations`); tests
that edit one equation's fields work on `Equation` messages instead:
`equations(msg, j)` unpacks jaxpr `j` once per message, edits go to the
returned messages, and `store(msg)` packs every unpacked jaxpr back (the
helpers that reframe a message call it). See `jaxpr_io.format.equation_edit.unpack`.
"""

from __future__ import annotations

from jaxpr_io.format import _proto as _pb
from jaxpr_io.format import container as _container
from jaxpr_io.format import equation_edit as _equation_edit

# id(Program message) -> (the message, {jaxpr index: its Equation messages}).
_OPEN: dict[int, tuple] = {}


def equations(msg, j: int) -> list:
  """The editable `Equation` messages of jaxpr `j` of `msg`."""
  _, unpacked = _OPEN.setdefault(id(msg), (msg, {}))
  if j not in unpacked:
    unpacked[j] = _equation_edit.unpack(msg, msg.jaxprs[j])
  return unpacked[j]


def all_equations(msg) -> list:
  """Every equation of `msg`, jaxpr by jaxpr, editable."""
  return [e for j in range(len(msg.jaxprs)) for e in equations(msg, j)]


def by_primitive(msg, name: str) -> list:
  """Every equation of `msg` that binds `name`, editable."""
  index = list(msg.strings).index(name)
  return [e for e in all_equations(msg) if e.primitive == index]


def store(msg) -> None:
  """Packs the edited equations of `msg` back into its jaxprs."""
  entry = _OPEN.pop(id(msg), None)
  if entry is not None:
    for j, eqns in entry[1].items():
      _equation_edit.pack(msg, msg.jaxprs[j], eqns)


def inline_trees(msg) -> None:
  """Rewrites `in_tree` and `out_tree` of `msg` with every shared node
  (`PyTree.shared`) copied in place, and empties `tree_nodes`: the trees can
  then be edited node by node. Version 3 readers accept inline trees."""
  def expand(node):
    if node.shared:
      node.CopyFrom(msg.tree_nodes[node.shared - 1])
    for child in node.children:
      expand(child)
  expand(msg.in_tree)
  expand(msg.out_tree)
  del msg.tree_nodes[:]


def message(data: bytes):
  """The `Program` message of a file's bytes."""
  return _pb.Program.FromString(_container.Container(data).program)


def reframe(msg, data: bytes, **to_bytes_kwargs) -> bytes:
  """A file with the (edited) message `msg` and the data section of
  `data`, checksums fixed up: what a crafted file looks like."""
  store(msg)
  c = _container.Container(data)
  layout = _container.DataLayout()
  if len(c.data):
    layout.add(bytes(c.data))
  return _container.to_bytes(msg.SerializeToString(deterministic=True),
                             layout, **to_bytes_kwargs)


def edited(data: bytes, mutate, format_version: int | None = None) -> bytes:
  """`data` with `mutate(msg)` applied to its `Program` message, reframed
  with fixed-up checksums; with `format_version`, the header and the
  message claim that version."""
  msg = message(data)
  mutate(msg)
  if format_version is None:
    return reframe(msg, data)
  msg.format_version = format_version
  return reframe(msg, data, format_version=format_version)


def rename_string(data: bytes, old: str, new: str) -> bytes:
  """`data` with string-table entry `old` replaced by `new`."""
  msg = message(data)
  msg.strings[list(msg.strings).index(old)] = new
  return reframe(msg, data)


def dims(aval_msg):
  """The `Dim`s of an `Aval` message holding a shaped array, for editing:
  a shape stored packed (`sizes`, format version 5) is moved to `Dim`s
  first, the form that version 5 readers still accept."""
  sa = aval_msg.shaped_array
  if sa.sizes:
    sizes = list(sa.sizes)
    del sa.sizes[:]
    for d in sizes:
      sa.shape.add().size = d
  return sa.shape


def values(msg):
  """Every param value of `msg`'s param sets and, recursively, its parts."""
  stack = [p.value for ps in msg.param_sets for p in ps.params]
  while stack:
    v = stack.pop()
    yield v
    kind = v.WhichOneof("kind")
    if kind in ("tuple", "frozenset"):
      stack += getattr(v, kind).items
    elif kind == "record":
      stack += v.record.fields


def unpack_version_5(msg, kinds=("ints", "bools")) -> None:
  """Rewrites version 5's packed values (of `kinds`) and shapes in the
  forms of versions 1-4: tuples of `Value`s and `Dim`s."""
  for v in values(msg):
    kind = v.WhichOneof("kind")
    if kind in ("ints", "bools") and kind in kinds:
      items = list(getattr(v, kind).items)
      v.tuple.SetInParent()  # clears the oneof's other member
      for x in items:
        setattr(v.tuple.items.add(), kind[:-1], x)
  for a in msg.avals:
    if a.WhichOneof("kind") == "shaped_array":
      dims(a)
