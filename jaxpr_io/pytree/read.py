"""`PyTree` messages -> `PyTreeDef`, validated (the reader's side of
pytrees): each node read once, GENERIC nodes re-bound to their types or
loaded as plain containers.

## Loading imports only the library table

A GENERIC node is re-bound to its type when all of these hold:

  1. the module is in `sys.modules` already, or it is a module of a library
     package in jaxpr_io's table (`libraries.LIBRARY_PACKAGES`: Equinox,
     Lineax, Optimistix, Diffrax) and is there once the table's module for
     that package is imported (a module the file names is never imported,
     only compared with the table), the
     qualname resolves in it through module and class `__dict__`s (never
     `getattr`, so no module `__getattr__` hook runs), and what it finds is a
     class with exactly that `__module__` and `__qualname__`, and not one of
     the built-in containers (None, tuple, list, dict have their own kinds);
  2. the auxdata was stored;
  3. the class is a pytree node type in JAX's default registry;
  4. given the stored auxdata, the class reports exactly the stored child
     keys, so a class whose fields changed since the file was written is not
     bound to the wrong layout. This calls its unflatten function once with
     placeholder children.

Otherwise the node becomes its *plain container*, which has the same
children, in the stored order, under the same keys:

  * no children: `()`;
  * keys `SequenceKey`/`FlattenedIndexKey` 0, 1, ..., n-1: a tuple;
  * otherwise, when the attribute names, dict keys and indices are distinct:
    a `dict` if JAX's (sorted) dict order is the stored order, else a
    `collections.OrderedDict` (a dict that JAX flattens in insertion order),
    so that the leaves keep the program's input and output order;
  * otherwise (colliding keys): a tuple.

An attribute child `.w` thus becomes a dict child `['w']`. `signature_text`
lists the nodes that were loaded as plain containers and why.
"""

from __future__ import annotations

import collections
import types
from typing import Any

import jax

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.codec import library_table as libraries
from jaxpr_io.codec import params
from jaxpr_io.codec import unloaded
from jaxpr_io.pytree import calls as tree_calls
from jaxpr_io.pytree import nodes as tree_nodes
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.errors import FormatError
from jaxpr_io.pytree.calls import is_call_signature
from jaxpr_io.pytree.nodes import MAX_DEPTH, Node

_K = pb.PyTreeKind
_DictKey = compat_pytrees.DictKey
_GetAttrKey = compat_pytrees.GetAttrKey
_SequenceKey = compat_pytrees.SequenceKey
_FlattenedIndexKey = compat_pytrees.FlattenedIndexKey


def decode_treedef(r, msg):
  """The `PyTreeDef` of a `PyTree` message.

  GENERIC nodes are re-bound to their types or become plain containers, as
  the module docstring says; nothing is imported.
  """
  fast = _plain_fast(r, msg)
  if fast is not None:
    return fast[0]
  return _treedef_of(_read(r, msg, 0, r.tree_memo))


def decode_call_signature(r, msg):
  """(`decode_treedef` of `msg`, whether it `is_call_signature`).

  Reads the answer off the nodes where they are plainly an (args tuple,
  kwargs dict with string keys) pair: asking the treedef copies the whole
  args subtree, which for a model's params costs more than reading it."""
  fast = _plain_fast(r, msg)
  if fast is not None:
    treedef, skeleton = fast  # `_plain_fast` keeps only string dict keys
    return treedef, (type(skeleton) is tuple and len(skeleton) == 2
                     and type(skeleton[0]) is tuple
                     and type(skeleton[1]) is dict)
  node = _read(r, msg, 0, r.tree_memo)
  treedef = _treedef_of(node)
  if (node.kind == "tuple" and len(node.children) == 2
      and node.children[0].kind == "tuple"
      and node.children[1].kind == "dict"
      and all(type(k) is str for k in node.children[1].keys)):
    return treedef, True
  return treedef, is_call_signature(treedef)


def _treedef_of(node: Node):
  skeleton = _plain_skeleton(node, {})
  if skeleton is not _NOT_PLAIN:
    try:
      # One call into JAX's C++ flattening instead of one per node.
      return jax.tree_util.tree_structure(skeleton)
    except TypeError:  # dict keys JAX cannot sort: `_build` says so
      pass
  fallbacks: list[tuple[tuple, str, str]] = []
  treedef = _build(node, (), fallbacks)
  if fallbacks:
    tree_nodes._remember(treedef, node, fallbacks)  # pylint: disable=protected-access
  return treedef


_KINDS = {number: name.lower() for name, number in _K.items()}
_NOT_PLAIN = object()
_SKELETON_LEAF = object()


class _NotFast(Exception):
  """`_plain_fast` met something it leaves to the validating reader."""


def _plain_fast(r, msg):
  """(treedef, skeleton (`_plain_skeleton`)) of a version 3+ `PyTree`
  message whose nodes are all leaves, Nones, tuples, lists and dicts with
  distinct string keys, read straight from the messages; None for any other
  tree, valid or not, which `_read` then reads and validates.

  A model's signature is such a tree, and building and checking a `Node` of
  each node, then the skeleton, took a few times as long. It accepts only
  what `_read` accepts (it is stricter: a node setting any field its kind
  does not use goes to `_read`), and gives the same treedef."""
  if r.msg.format_version < 3:
    return None
  try:
    skeleton, _ = _fast_node(r, msg, 0, r.tree_memo.table, {}, None)
  except _NotFast:
    return None
  return jax.tree_util.tree_structure(skeleton), skeleton


_FAST_KINDS = {_K[name.upper()]: name for name in ("leaf", "none", "tuple", "list", "dict")}


def _fast_node(r, msg, depth: int, table, done: dict, limit: int | None):
  """(skeleton, height) of one node for `_plain_fast`; raises `_NotFast`.
  `done` holds the table entries read so far; entry `limit` refers only to
  entries before it, as in `_read`."""
  if depth > MAX_DEPTH:
    raise _NotFast
  shared = msg.shared
  if shared:
    i = shared - 1
    if (i >= (len(table) if limit is None else limit)
        or len(msg.ListFields()) != 1):
      raise _NotFast
    got = done.get(i)
    if got is None:
      got = done[i] = _fast_node(r, table[i], depth, table, done, i)
    if depth + got[1] > MAX_DEPTH:
      raise _NotFast
    return got
  kind = _FAST_KINDS.get(msg.kind)
  children_msgs = msg.children[:]
  keys_msgs = msg.keys[:] if kind == "dict" else ()
  if kind is None or len(msg.ListFields()) != (
      1 + bool(children_msgs) + bool(keys_msgs)):
    raise _NotFast
  if kind == "leaf" or kind == "none":
    if children_msgs:
      raise _NotFast
    return (_SKELETON_LEAF if kind == "leaf" else None), 0
  results = [_fast_node(r, c, depth + 1, table, done, limit)
             for c in children_msgs]
  children = [c for c, _ in results]
  height = 1 + max([h for _, h in results]) if results else 0
  if kind == "tuple":
    return tuple(children), height
  if kind == "list":
    return children, height
  strings = r.strings
  keys = []
  for k in keys_msgs:
    if k.WhichOneof("kind") != "str" or k.str >= len(strings):
      raise _NotFast
    keys.append(strings[k.str])
  node = dict(zip(keys, children))
  if len(keys) != len(children) or len(node) != len(children):
    raise _NotFast
  return node, height


def _plain_skeleton(node: Node, memo: dict[int, Any]):
  """A Python object of `node`'s structure, with `_SKELETON_LEAF` leaves,
  when the tree holds only leaves, None, tuples, lists and dicts; else
  `_NOT_PLAIN`. Shared nodes give one shared object."""
  done = memo.get(id(node))
  if done is not None:
    return done
  kind = node.kind
  if kind == "leaf":
    return _SKELETON_LEAF
  if kind == "none":
    return None
  if kind not in ("tuple", "list", "dict"):
    return _NOT_PLAIN
  children = []
  for child in node.children:
    skeleton = _plain_skeleton(child, memo)
    if skeleton is _NOT_PLAIN:
      return _NOT_PLAIN
    children.append(skeleton)
  if kind == "tuple":
    result = tuple(children)
  elif kind == "list":
    result = children
  else:
    result = dict(zip(node.keys, children))
    if len(result) != len(children):
      return _NOT_PLAIN  # repeated keys: `_build` refuses them
  memo[id(node)] = result
  return result


class TreeMemo:
  """The nodes of one program read so far, each read once: identical
  subtrees (the params of each layer of a model) are one validated `Node`.

  Version 3 files store each node with children once (`Program.tree_nodes`)
  and refer to it by index; older files repeat them, and their messages
  are matched by their bytes.
  """

  def __init__(self, program_msg):
    self.table = program_msg.tree_nodes
    self.nodes: list[Node | None] = [None] * len(self.table)
    self.by_bytes: dict[bytes, Node] | None = (
        {} if program_msg.format_version < 3 else None)
    self.heights: dict[int, int] = {}  # id(node) -> height, nodes with children
    # Table entries being read: a treedef param in a node's auxdata may
    # refer to any entry, so a file could make two entries refer to each
    # other (version 4).
    self.reading: set[int] = set()

  def height(self, node: Node) -> int:
    return self.heights.get(id(node), 0)

  def reuse(self, node: Node, depth: int) -> Node:
    """`node`, read before, met again at `depth`: validated where it was
    first met, only its depth here is new."""
    if depth + self.height(node) > MAX_DEPTH:
      raise FormatError(f"pytree nests deeper than {MAX_DEPTH}")
    return node


def _read(r, msg, depth: int, memo: TreeMemo, limit: int | None = None
          ) -> Node:
  """The `Node` of a message, validated. In entry `limit` of the table,
  references go only to entries before it."""
  if depth > MAX_DEPTH:
    raise FormatError(f"pytree nests deeper than {MAX_DEPTH}")
  if msg.shared:
    return _read_shared(r, msg, depth, memo, limit)
  children = msg.children[:]  # one copy: each access to the field is slow
  if not children:
    return _read_node(r, msg, children, depth, memo, limit)
  if memo.by_bytes is None:
    node = _read_node(r, msg, children, depth, memo, limit)
  else:
    key = msg.SerializeToString()
    node = memo.by_bytes.get(key)
    if node is not None:
      return memo.reuse(node, depth)
    node = memo.by_bytes[key] = _read_node(r, msg, children, depth, memo,
                                           limit)
  heights = memo.heights
  heights[id(node)] = 1 + max([heights.get(id(c), 0) for c in node.children])
  return node


def _read_shared(r, msg, depth: int, memo: TreeMemo, limit: int | None
                 ) -> Node:
  i = msg.shared - 1
  if memo.by_bytes is not None:
    raise FormatError("a pytree node refers to the shared node table, which "
                      "files before version 3 do not have")
  if len(msg.ListFields()) != 1:
    raise FormatError("a pytree node refers to a shared node and sets other "
                      "fields")
  if i >= (len(memo.table) if limit is None else limit):
    raise FormatError(f"a pytree node refers to shared node {i}, which is "
                      f"out of range or does not come before it")
  node = memo.nodes[i]
  if node is None:
    entry = memo.table[i]
    if entry.shared:
      raise FormatError(f"shared pytree node {i} refers to another")
    if i in memo.reading:
      raise FormatError(f"shared pytree node {i} contains itself (through "
                        "a treedef in its auxdata)")
    memo.reading.add(i)
    try:
      node = memo.nodes[i] = _read(r, entry, depth, memo, limit=i)
    finally:
      memo.reading.discard(i)
    return node
  return memo.reuse(node, depth)


def _read_node(r, msg, children_msgs: list, depth: int, memo: TreeMemo,
               limit: int | None) -> Node:
  kind = _KINDS.get(msg.kind)
  if kind is None or kind == "kind_unspecified":
    raise FormatError(f"unknown pytree node kind {msg.kind}")
  is_generic = kind == "generic"
  if not is_generic and (msg.child_keys or msg.HasField("auxdata") or
                         msg.type_module or msg.type_qualname):
    raise FormatError(f"a pytree {kind} node has fields of a GENERIC node")
  children = tuple([_read(r, c, depth + 1, memo, limit)
                    for c in children_msgs])
  if kind == "leaf":
    if children:
      raise FormatError("a pytree leaf has children")
    return Node("leaf")
  if kind == "none":
    if children:
      raise FormatError("a pytree None node has children")
    return Node("none")
  if kind in ("tuple", "list"):
    return Node(kind, children)
  if kind == "dict":
    keys = tuple(_read_dict_key(r, k) for k in msg.keys[:])
    if len(keys) != len(children):
      raise FormatError(f"a pytree dict has {len(keys)} keys and "
                        f"{len(children)} children")
    return Node("dict", children, keys=keys)
  if kind == "custom":
    return Node("custom", children, custom_name=msg.custom_name,
                custom_auxdata=msg.custom_auxdata)
  module = r.string(msg.type_module)
  qualname = r.string(msg.type_qualname)
  if not module or not qualname:
    raise FormatError("a GENERIC pytree node does not name its type")
  where = f"the pytree node of type {module}.{qualname}"
  if len(msg.child_keys) != len(children):
    raise FormatError(f"{where} has {len(children)} children but "
                      f"{len(msg.child_keys)} child keys")
  keys = tuple(_read_key(r, k, where) for k in msg.child_keys[:])
  has_auxdata = msg.HasField("auxdata")
  auxdata = _read_auxdata(r, msg.auxdata) if has_auxdata else None
  return Node("generic", children, type_module=module, type_qualname=qualname,
              child_keys=keys, has_auxdata=has_auxdata, auxdata=auxdata)


def _read_auxdata(r, msg):
  """A GENERIC node's auxdata. A record of a table library that cannot be
  imported here becomes a `unloaded.UnloadedRecord` (the node then
  loads as a plain container) instead of failing the load."""
  before = getattr(r, "unloaded_records_ok", False)
  r.unloaded_records_ok = True
  try:
    return params.decode_value(r, msg)
  finally:
    r.unloaded_records_ok = before


def _read_dict_key(r, msg):
  # Most keys are strings (module and parameter names): read those inline.
  if msg.WhichOneof("kind") == "str":
    return r.string(msg.str)
  return params.decode_value(r, msg)


def _read_key(r, msg, where: str):
  kind = msg.WhichOneof("kind")
  if kind == "dict_key":
    key = params.decode_value(r, msg.dict_key)
    try:
      hash(key)
    except TypeError:
      raise FormatError(f"{where} has an unhashable dict key") from None
    return _DictKey(key)
  if kind == "attribute":
    return _GetAttrKey(r.string(msg.attribute))
  if kind in ("sequence_index", "flattened_index"):
    index = getattr(msg, kind)
    if index < 0:
      raise FormatError(f"{where} has a negative child index {index}")
    return (_SequenceKey(index) if kind == "sequence_index"
            else _FlattenedIndexKey(index))
  raise FormatError(f"{where} has a child key of no known kind")


class _Leaf:
  """Placeholder leaf of a skeleton pytree (for CUSTOM nodes)."""


_LEAF = _Leaf()


def _is_leaf_placeholder(x) -> bool:
  return x is _LEAF


def _build(node: Node, path: tuple, fallbacks: list):
  """The `PyTreeDef` of a validated `Node`; appends (path, type name,
  reason) to `fallbacks` for each GENERIC node built as a plain container.
  `path` is the node's key path in the tree being built."""
  if node.built is not None:
    return node.built
  n_fallbacks = len(fallbacks)
  treedef = _build_node(node, path, fallbacks)
  if len(fallbacks) == n_fallbacks and node.children:
    node.built = treedef  # the same wherever the node is (`_read`'s memo)
  return treedef


def _build_node(node: Node, path: tuple, fallbacks: list):
  kind = node.kind
  if kind == "leaf":
    return compat_pytrees.LEAF
  if kind == "dict":
    return _build_dict(node.keys, node.children, path, fallbacks)
  if kind == "generic":
    return _build_generic(node, path, fallbacks)
  if kind == "custom":
    children = [_build(c, path + (_FlattenedIndexKey(i),), fallbacks)
                for i, c in enumerate(node.children)]
    return _build_custom(node, children)
  node_type = {"none": types.NoneType, "tuple": tuple, "list": list}[kind]
  children = [_build(c, path + (_SequenceKey(i),), fallbacks)
              for i, c in enumerate(node.children)]
  return compat_pytrees.make_node(node_type, None, children)


def _build_dict(keys, children, path, fallbacks):
  """A dict node, its children put in JAX's key order (files written by
  jaxpr_io already have it)."""
  try:
    order = compat_pytrees.canonical_dict_keys(keys)
  except TypeError as e:
    raise FormatError(f"a pytree dict key is unhashable: {e}") from None
  except ValueError:
    raise FormatError(f"the pytree dict keys {list(keys)!r:.200} cannot be "
                      "sorted, as JAX requires") from None
  if len(order) != len(keys):
    raise FormatError("a pytree dict has a repeated key")
  by_key = dict(zip(keys, children))
  built = [_build(by_key[k], path + (_DictKey(k),), fallbacks) for k in order]
  return compat_pytrees.make_node(dict, order, built)


def _build_custom(node: Node, children):
  entry = compat.pytree_deserialization_registry.get(node.custom_name)
  if entry is None:
    raise FormatError(
        f"the pytree node type {node.custom_name!r} is not registered in "
        "this process; register it with "
        "jax.export.register_pytree_node_serialization before loading")
  _, deserialize_auxdata, from_children = entry
  # The registered `from_children` builds an object; its structure is the
  # node's. The children are skeletons of placeholder leaves.
  skeletons = [c.unflatten([_LEAF] * c.num_leaves) for c in children]
  obj = from_children(deserialize_auxdata(node.custom_auxdata), skeletons)
  return jax.tree_util.tree_structure(obj, is_leaf=_is_leaf_placeholder)


def _build_generic(node: Node, path: tuple, fallbacks: list):
  node_type, reason = _find_type(node)
  if node_type is None:
    fallbacks.append((path, node.type_name, reason))
    return _build_plain(node, path, fallbacks)
  children = [_build(c, path + (k,), fallbacks)
              for k, c in zip(node.child_keys, node.children)]
  return compat_pytrees.make_node(node_type, node.auxdata, children)


def _find_type(node: Node) -> tuple[type | None, str]:
  """(the loading process's class of a GENERIC node, "") when the node can
  be re-bound to it (the conditions of the module docstring), else (None,
  why not)."""
  obj, reason = libraries.find_class(node.type_module, node.type_qualname)
  if obj is None:
    return None, reason
  if obj in (types.NoneType, tuple, list, dict):
    # Stored by their own kinds; JAX checks their node data only lazily.
    return None, "a GENERIC node cannot be a built-in container"
  if not node.has_auxdata:
    return None, "its auxdata is not plain data and was not stored"
  if unloaded.holds_unloaded(node.auxdata):
    return None, "its auxdata holds values of a library not imported here"
  n = len(node.children)
  if compat_pytrees.make_node(obj, node.auxdata,
                              [compat_pytrees.LEAF] * n) is None:
    return None, "it is not a registered pytree node type here"
  if compat_pytrees.child_keys(obj, node.auxdata, n) != node.child_keys:
    return None, ("the type here gives its children other keys than the "
                  "file says")
  return obj, ""


def _build_plain(node: Node, path: tuple, fallbacks: list):
  """The plain container of a GENERIC node (see the module docstring)."""
  keys = node.child_keys
  n = len(keys)
  positions = [_index_of(k) for k in keys]
  if n == 0 or positions == list(range(n)):
    children = [_build(c, path + (_SequenceKey(i),), fallbacks)
                for i, c in enumerate(node.children)]
    return compat_pytrees.make_node(tuple, None, children)
  names = [tree_calls._plain_key_of(k) for k in keys]  # pylint: disable=protected-access
  if len(set(names)) != n:  # colliding keys: positions are all that's left
    children = [_build(c, path + (_SequenceKey(i),), fallbacks)
                for i, c in enumerate(node.children)]
    return compat_pytrees.make_node(tuple, None, children)
  try:
    in_dict_order = compat_pytrees.canonical_dict_keys(names) == names
  except ValueError:  # keys JAX cannot sort (e.g. ints and strings)
    in_dict_order = False
  if in_dict_order:
    return _build_dict(names, node.children, path, fallbacks)
  # An OrderedDict keeps the stored child order; a dict would be sorted.
  children = [_build(c, path + (_DictKey(k),), fallbacks)
              for k, c in zip(names, node.children)]
  return compat_pytrees.make_node(collections.OrderedDict, names, children)


def _index_of(key) -> int | None:
  t = type(key)
  if t is _SequenceKey:
    return key.idx
  if t is _FlattenedIndexKey:
    return key.key
  return None
