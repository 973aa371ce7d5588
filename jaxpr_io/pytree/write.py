"""`PyTreeDef` -> `PyTree` messages (the writer's side of pytrees).

## Writing

Each node of a treedef is stored by kind (schema/jaxpr.proto, `PyTree`):

* None, tuple, list and dict structurally; dict keys are param `Value`s, so
  int and other non-string keys work.
* Node types in JAX's pytree-node serialization registry
  (`jax.export.register_pytree_node_serialization`,
  `register_namedtuple_serialization`) as CUSTOM: the registered name and the
  bytes its auxdata serializer wrote. Loading needs the same registration.
* Every other registered node type (NamedTuples, dataclasses registered with
  `jax.tree_util.register_dataclass`, `register_pytree_node(_class)` and
  `register_pytree_with_keys` types: Flax `FrozenDict`, NNX `State` and
  `Variable`, Equinox modules, optax states, ...) as GENERIC, with nothing for
  the user to register:
    - the type's `__module__` and `__qualname__`, for display and re-binding;
    - the key of each child as JAX names it in key paths (`DictKey`,
      `GetAttrKey`, `SequenceKey`, `FlattenedIndexKey`), found by rebuilding
      the node one level deep around placeholder children with the type's
      own unflatten function and flattening that with paths. When this
      fails, or a key is of a user-defined key type, or a dict key is not
      plain data, every child of that node is stored by position
      (`FlattenedIndexKey`);
    - the auxdata, when it is plain data that a `Value` stores exactly (see
      `_is_plain_data`; Equinox's `Missing` field sentinel, its enumeration
      classes and Lineax's tags are records of jaxpr_io/families/libraries/codecs.py);
      otherwise (e.g. a function) it is left out.
"""

from __future__ import annotations

import types

import numpy as np

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.codec import params
from jaxpr_io.codec import registry
from jaxpr_io.pytree import nodes as tree_nodes
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.errors import UnsupportedError
from jaxpr_io.pytree.nodes import MAX_DEPTH, MAX_KEY_NESTING, Node

_K = pb.PyTreeKind
_DictKey = compat_pytrees.DictKey
_GetAttrKey = compat_pytrees.GetAttrKey
_SequenceKey = compat_pytrees.SequenceKey
_FlattenedIndexKey = compat_pytrees.FlattenedIndexKey


def encode_treedef(w, treedef, out, depth: int = 0) -> None:
  """Fills the `PyTree` message `out` with `treedef`.

  A treedef returned by `decode_treedef` with plain containers standing in
  for missing types is written as the nodes it was read from.
  """
  del depth  # kept for callers; nesting is bounded in `_node_of`
  node = tree_nodes._remembered_node(treedef)  # pylint: disable=protected-access
  if node is None:
    node = _node_of(treedef, 0)
  _write(w, node, out)


def _node_of(treedef, depth: int, programs: bool = False) -> Node:
  """The `Node` tree of a (traced) treedef. With `programs`, auxdata may
  hold jaxprs (see `_is_plain_data`)."""
  if depth > MAX_DEPTH:
    raise UnsupportedError(f"pytree nests deeper than {MAX_DEPTH}")
  node_data = treedef.node_data()
  if node_data is None:
    return Node("leaf")
  node_type, aux = node_data
  children = tuple(_node_of(c, depth + 1, programs)
                   for c in treedef.children())
  if node_type is types.NoneType:
    return Node("none")
  if node_type is tuple:
    return Node("tuple", children)
  if node_type is list:
    return Node("list", children)
  if node_type is dict:
    for key in aux:
      if _nesting(key, 0) > MAX_KEY_NESTING:
        raise UnsupportedError(
            f"the dict key {key!r:.80} nests tuples deeper than "
            f"{MAX_KEY_NESTING}; use flatter keys")
    return Node("dict", children, keys=tuple(aux))
  if node_type in compat.pytree_serialization_registry:
    name, serialize_auxdata = compat.pytree_serialization_registry[node_type]
    data = serialize_auxdata(aux)
    if not isinstance(data, (bytes, bytearray)):
      raise UnsupportedError(
          f"the pytree auxdata serializer of {name!r} returned "
          f"{type(data).__name__}, not bytes")
    return Node("custom", children, custom_name=name,
                custom_auxdata=bytes(data))
  keys = compat_pytrees.child_keys(node_type, aux, len(children))
  if keys is None or not all(_is_storable_key(k) for k in keys):
    keys = tuple(_FlattenedIndexKey(i) for i in range(len(children)))
  has_auxdata = _is_plain_data(aux, 0, programs)
  return Node("generic", children,
              type_module=str(getattr(node_type, "__module__", "")),
              type_qualname=str(getattr(node_type, "__qualname__",
                                        node_type.__name__)),
              child_keys=keys, has_auxdata=has_auxdata,
              auxdata=aux if has_auxdata else None)


def _nesting(v, depth: int) -> int:
  """How deep tuples and frozensets nest in `v` (counted up to just past
  MAX_KEY_NESTING)."""
  if depth > MAX_KEY_NESTING or type(v) not in (tuple, frozenset):
    return depth
  return max((_nesting(item, depth + 1) for item in v), default=depth + 1)


def _is_storable_key(key) -> bool:
  t = type(key)
  if t is _DictKey:
    return _is_plain_data(key.key, 0)
  if t is _GetAttrKey:
    return type(key.name) is str
  if t is _SequenceKey:
    return type(key.idx) is int and key.idx >= 0
  if t is _FlattenedIndexKey:
    return type(key.key) is int and key.key >= 0
  return False  # a key type of the user's: its meaning is not data


# Value codecs whose values come back equal (==, same type) after a round
# trip and that hold no arrays or programs: what auxdata may be stored as.
_PLAIN_ENCODERS = frozenset({
    params.encode_none, params.encode_bool, params.encode_int,
    params.encode_float, params.encode_complex, params.encode_str,
    params.encode_dtype, params.encode_numpy_scalar})


def _is_plain_data(v, depth: int, programs: bool = False) -> bool:
  """Whether `params.encode_value` stores `v` exactly as plain data: None,
  bools, ints, floats, complexes, strings, dtypes, numpy scalars, builtin
  and numpy scalar types, registered enums and records of these, and tuples
  and frozensets of all of them, nested at most MAX_KEY_NESTING deep.
  Checked before encoding, so that a value that cannot be stored leaves
  nothing behind in the writer's tables.

  With `programs` (treedef params, which the program itself uses, never
  compares with a caller's), jaxprs count too: an Equinox closure-converted
  function holds its jaxpr as static data.
  """
  if depth > MAX_KEY_NESTING:
    return False
  t = type(v)
  encoder = params.ENCODERS.get(t)
  if encoder in _PLAIN_ENCODERS:
    return True
  if t is tuple or t is frozenset:
    return all(_is_plain_data(item, depth + 1, programs) for item in v)
  if t is type:
    if v in (bool, int, float, complex):
      return True
    if not issubclass(v, np.generic):
      return False
    try:
      return type(np.dtype(v)) in params.ENCODERS
    except TypeError:  # an abstract scalar type such as np.floating
      return False
  if t in registry.ENUMS.by_key:
    return True
  if t is compat_pytrees.PyTreeDef:
    return _exact_problem(v) is None
  if t in registry.RECORDS.by_key:
    codec = registry.RECORDS.by_name[registry.RECORDS.by_key[t]]
    try:
      fields = codec.to_fields(v)
    except (TypeError, ValueError, AttributeError, UnsupportedError):
      return False
    return all(_is_plain_data(f, depth + 1, programs) for f in fields)
  if programs and t in compat.JAXPR_TYPES:
    return True
  return False


def _write(w, node: Node, out) -> None:
  """Fills `out` with `node`: a node with children is stored once, in the
  program's `tree_nodes` table, and `out` refers to it."""
  if node.children:
    out.shared = 1 + _intern(w, node)
  else:
    _write_fields(w, node, out)


def _intern(w, node: Node) -> int:
  """The `tree_nodes` index of `node` (its children interned first)."""
  message = pb.PyTree()
  _write_fields(w, node, message)
  key = message.SerializeToString()
  index = w.tree_nodes.get(key)
  if index is None:
    index = w.tree_nodes[key] = len(w.msg.tree_nodes)
    w.msg.tree_nodes.append(message)
  return index


def _write_fields(w, node: Node, out) -> None:
  out.kind = _K[node.kind.upper()]
  if node.kind == "dict":
    for key in node.keys:
      params.encode_value(w, key, out.keys.add())
  elif node.kind == "custom":
    out.custom_name = node.custom_name
    out.custom_auxdata = node.custom_auxdata
  elif node.kind == "generic":
    out.type_module = w.string(node.type_module)
    out.type_qualname = w.string(node.type_qualname)
    for key in node.child_keys:
      _write_key(w, key, out.child_keys.add())
    if node.has_auxdata:
      params.encode_value(w, node.auxdata, out.auxdata)
  for child in node.children:
    _write(w, child, out.children.add())


def _write_key(w, key, out) -> None:
  t = type(key)
  if t is _DictKey:
    params.encode_value(w, key.key, out.dict_key)
  elif t is _GetAttrKey:
    out.attribute = w.string(key.name)
  elif t is _SequenceKey:
    out.sequence_index = key.idx
  else:
    out.flattened_index = key.key


def _exact_problem(treedef) -> str | None:
  """Why `treedef` cannot be stored exactly, or None."""
  try:
    node = _node_of(treedef, 0, programs=True)
  except UnsupportedError as e:
    return str(e)
  stack = [node]
  while stack:
    n = stack.pop()
    if n.kind == "generic" and not n.has_auxdata:
      return (f"the auxdata of its node type {n.type_name} is not plain "
              "data")
    stack.extend(n.children)
  return None
