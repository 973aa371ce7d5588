"""Pytree signatures: `PyTreeDef` <-> `PyTree` messages, and matching the
arguments of a call against a program's signature.

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
      classes and Lineax's tags are records of jaxpr_io/library_codecs.py);
      otherwise (e.g. a function) it is left out.

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

## Calling

`flatten_call_args` takes arguments with exactly the program's `in_tree`, or
with any structure whose leaves have the same *call paths* (`call_path`):
the keys under which plain containers would hold each leaf, i.e. key paths
in which attribute names, dict keys and indices are interchangeable (`.w`
and `['w']` are both "w"; `[0]` and `[<flat index 0>]` both 0). So a program
saved with Flax `FrozenDict` params takes the `FrozenDict` where Flax is
loaded and a plain dict anywhere, and one saved with an Equinox module takes
the module, its plain containers or nested plain dicts. The leaves are
matched by path and passed in the program's order.

## Saving a loaded program again

A tree that was loaded with plain containers remembers the nodes it was read
from (keyed by the identity of the `PyTreeDef` that `decode_treedef`
returned; the last `_MAX_REMEMBERED` such trees), so writing a loaded program
again gives the same bytes even in a process without the original types.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import threading
import types
from typing import Any

import jax
import numpy as np

from jaxpr_io import _proto as pb
from jaxpr_io import compat
from jaxpr_io import libraries
from jaxpr_io import library_codecs
from jaxpr_io import params
from jaxpr_io import registry
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.errors import FormatError, UnsupportedError

# Protobuf parsers refuse messages nested more than 100 deep. A pytree node
# at depth d is a message at depth d + 2 (under `Program`), its dict keys,
# child keys and auxdata a few levels deeper, two per nested tuple: the
# writer keeps both within these limits, so whatever it writes parses.
MAX_DEPTH = 64
MAX_KEY_NESTING = 8
_K = pb.PyTreeKind

_DictKey = compat_pytrees.DictKey
_GetAttrKey = compat_pytrees.GetAttrKey
_SequenceKey = compat_pytrees.SequenceKey
_FlattenedIndexKey = compat_pytrees.FlattenedIndexKey


@dataclasses.dataclass(eq=False)
class Node:
  """One pytree node as a file holds it: a `PyTree` message, decoded.

  `kind` is one of "leaf", "none", "tuple", "list", "dict", "custom",
  "generic" (the `PyTree.Kind`s). Only the fields of that kind are set.
  """
  kind: str
  children: tuple[Node, ...] = ()
  keys: tuple[Any, ...] = ()            # dict: its keys, in JAX's order
  custom_name: str = ""                 # custom
  custom_auxdata: bytes = b""           # custom
  type_module: str = ""                 # generic
  type_qualname: str = ""               # generic
  child_keys: tuple[Any, ...] = ()      # generic: one key entry per child
  has_auxdata: bool = False             # generic
  auxdata: Any = None                   # generic, when has_auxdata
  # The treedef `_build` made of this node, when it did not depend on where
  # the node sits (no plain container stood in for a type below it).
  built: Any = dataclasses.field(default=None, repr=False)

  @property
  def type_name(self) -> str:
    return f"{self.type_module}.{self.type_qualname}"


# ------------------------------------------------------------------ writing
def encode_treedef(w, treedef, out, depth: int = 0) -> None:
  """Fills the `PyTree` message `out` with `treedef`.

  A treedef returned by `decode_treedef` with plain containers standing in
  for missing types is written as the nodes it was read from.
  """
  del depth  # kept for callers; nesting is bounded in `_node_of`
  node = _remembered_node(treedef)
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


# --------------------------------------------------- treedefs as params
# A `PyTreeDef` param (`composite`'s attributes, the `tree` of a ref's
# `get`/`swap`, checkify's error trees) is stored as a signature is, in a
# `Value.treedef` (version 4), but it must come back exactly: a plain
# container standing in for a missing type would change what the primitive
# does. So every GENERIC node must have its auxdata stored (checked when
# writing) and be re-bound to its type (checked when reading).
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


def encode_treedef_value(w, v, out, depth):
  del depth
  problem = _exact_problem(v)
  if problem is not None:
    # The reason first: the treedef itself may be long.
    raise UnsupportedError(f"a treedef param cannot be stored exactly: "
                           f"{problem}; the treedef is {v}"[:600])
  _write(w, _node_of(v, 0, programs=True), out.treedef)


def decode_treedef_value(r, msg, depth):
  del depth
  if r.msg.format_version < 4:
    raise FormatError("a treedef param value in a file before version 4")
  node = _read(r, msg.treedef, 0, r.tree_memo)
  fallbacks: list[tuple[tuple, str, str]] = []
  treedef = _build(node, (), fallbacks)
  if fallbacks:
    path, type_name, reason = fallbacks[0]
    raise FormatError(
        f"a treedef param needs the pytree node type {type_name} "
        f"(at {display_path(path) or 'its root'}), which cannot be used "
        f"here: {reason}; import the module that defines it before loading")
  return treedef


params.register_value_encoder(compat_pytrees.PyTreeDef, encode_treedef_value)
params.register_value_decoder("treedef", decode_treedef_value)


# ------------------------------------------------------------------ reading
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
    _remember(treedef, node, fallbacks)
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
  imported here becomes a `library_codecs.UnloadedRecord` (the node then
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
  if library_codecs.holds_unloaded(node.auxdata):
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
  names = [_plain_key_of(k) for k in keys]
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


# Trees decoded with plain containers: id(treedef) -> (treedef, Node,
# fallbacks). The treedef is held so that its id is not reused while the
# entry lives; the oldest entries go first.
_MAX_REMEMBERED = 256
_remembered: collections.OrderedDict[int, tuple[Any, Node, tuple]] = (
    collections.OrderedDict())
_remembered_lock = threading.Lock()


def _remember(treedef, node: Node, fallbacks) -> None:
  with _remembered_lock:
    _remembered[id(treedef)] = (treedef, node, tuple(fallbacks))
    while len(_remembered) > _MAX_REMEMBERED:
      _remembered.popitem(last=False)


def _remembered_entry(treedef):
  with _remembered_lock:
    entry = _remembered.get(id(treedef))
  if entry is None or entry[0] is not treedef:
    return None
  return entry


def _remembered_node(treedef) -> Node | None:
  entry = _remembered_entry(treedef)
  return None if entry is None else entry[1]


# ------------------------------------------------------------------ calling
def _plain_key_of(entry):
  """The key under which a plain container holds the child that `entry`
  names: attribute names, dict keys and indices as themselves. A key type
  of the user's is kept as it is."""
  t = type(entry)
  if t is _DictKey:
    return entry.key
  if t is _GetAttrKey:
    return entry.name
  if t is _SequenceKey:
    return entry.idx
  if t is _FlattenedIndexKey:
    return entry.key
  return entry


def call_path(path) -> tuple:
  """The call path of a key path: the keys under which plain containers
  would hold the leaf (`.w` and `['w']` are both "w", `[0]` and
  `[<flat index 0>]` both 0). A node and its plain container give each leaf
  the same call path."""
  return tuple(_plain_key_of(e) for e in path)


def _keys_text(keys) -> str:
  return "".join(f"[{k!r}]" for k in keys)


def _display_call_path(keys: tuple) -> str:
  """A call path of `(args, kwargs)` as the user writes it."""
  if len(keys) >= 2 and keys[0] == 0:
    return f"args[{keys[1]!r}]{_keys_text(keys[2:])}"
  if len(keys) >= 2 and keys[0] == 1:
    return f"kwargs[{keys[1]!r}]{_keys_text(keys[2:])}"
  return _keys_text(keys)


def display_path(path) -> str:
  """A key path of `(args, kwargs)` as the user writes it: `args[0]['w']`,
  `args[1].mu`, `kwargs['scale']`."""
  if len(path) >= 2 and type(path[0]) is _SequenceKey:
    rest = jax.tree_util.keystr(tuple(path[2:]))
    if path[0].idx == 0 and type(path[1]) is _SequenceKey:
      return f"args[{path[1].idx}]{rest}"
    if path[0].idx == 1 and type(path[1]) is _DictKey:
      return f"kwargs[{path[1].key!r}]{rest}"
  return jax.tree_util.keystr(tuple(path)) or "(the whole value)"


class _Slot:
  """A leaf standing for one input while a signature's paths are found."""

  __slots__ = ()


def leaf_paths(treedef) -> list[tuple]:
  """The key path of each leaf of `treedef`, in leaf order."""
  tree = treedef.unflatten([_Slot() for _ in range(treedef.num_leaves)])
  return [p for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


@functools.lru_cache(maxsize=64)
def _expected_call_paths(treedef) -> tuple[tuple[tuple, ...], bool]:
  """(call path of each leaf, whether they are distinct) of a signature."""
  paths = tuple(call_path(p) for p in leaf_paths(treedef))
  return paths, len(set(paths)) == len(paths)


def is_call_signature(in_tree) -> bool:
  """Whether `in_tree` is the structure of some `(args, kwargs)`: a pair of
  a tuple and a dict with string keys."""
  def node_type(tree):
    data = tree.node_data()
    return None if data is None else data[0]
  if node_type(in_tree) is not tuple or len(in_tree.children()) != 2:
    return False
  args, kwargs = in_tree.children()
  kw_data = kwargs.node_data()
  return (node_type(args) is tuple and kw_data is not None
          and kw_data[0] is dict
          and all(type(k) is str for k in kw_data[1]))


def flatten_call_args(in_tree, args) -> list:
  """The leaves of `args` in the order of `in_tree`'s leaves.

  `args` matches when it has exactly the structure `in_tree`, or when its
  leaves have the same call paths (`call_path`) as `in_tree`'s: the same
  number of leaves, each under the same keys, attribute keys, dict keys and
  indices being interchangeable (`.w` is `['w']`), in any order. Raises
  TypeError, listing the expected key paths, otherwise.
  """
  flat, tree = jax.tree_util.tree_flatten(args)
  if tree == in_tree:
    return flat
  try:
    expected, distinct = _expected_call_paths(in_tree)
  except TypeError:  # an auxdata that cannot be hashed: not cacheable
    expected = tuple(call_path(p) for p in leaf_paths(in_tree))
    distinct = len(set(expected)) == len(expected)
  pairs, _ = jax.tree_util.tree_flatten_with_path(args)
  try:
    given = {call_path(p): leaf for p, leaf in pairs}
  except TypeError:  # a user key that cannot be hashed
    given = {}
  if distinct and len(given) == len(pairs) == len(expected):
    try:
      leaves = [given[p] for p in expected]
    except KeyError:
      pass
    else:
      conflict = _static_conflict(in_tree, tree)
      if conflict:
        raise TypeError(conflict)
      return leaves
  raise TypeError(_mismatch_message(in_tree, tree, expected, given))


def _typed_nodes(treedef, path: tuple, out: dict) -> dict:
  """call path -> (type, auxdata) of every node in `treedef` that is not a
  plain container (None, tuple, list, dict, OrderedDict, defaultdict: their
  auxdata is their keys, and differing keys already show in call paths)."""
  node_data = treedef.node_data()
  if node_data is None:
    return out
  node_type, aux = node_data
  children = treedef.children()
  if node_type is types.NoneType:
    return out
  if node_type in (tuple, list):
    keys = range(len(children))
  elif node_type in (dict, collections.OrderedDict):
    keys = aux
  elif node_type is collections.defaultdict:
    keys = aux[1]
  else:
    out[path] = node_data
    entries = compat_pytrees.child_keys(node_type, aux, len(children))
    # A node JAX cannot report keys for: by position.
    keys = (range(len(children)) if entries is None
            else [_plain_key_of(e) for e in entries])
  for key, child in zip(keys, children):
    _typed_nodes(child, path + (key,), out)
  return out


def _static_conflict(in_tree, tree) -> str | None:
  """Why a structure whose leaves match `in_tree`'s call paths must still be
  refused: a node of the same type as `in_tree`'s at the same call path,
  with other auxdata (static fields), which the program was traced for."""
  expected = _typed_nodes(in_tree, (), {})
  if not expected:
    return None
  for path, (node_type, aux) in _typed_nodes(tree, (), {}).items():
    want = expected.get(path)
    if want is None or want[0] is not node_type:
      continue
    try:
      same = bool(want[1] == aux)
    except Exception:  # pylint: disable=broad-except
      same = False  # a user __eq__ that cannot compare these: not the same
    if not same:
      return (
          f"the program was traced with a {node_type.__qualname__} at "
          f"{_display_call_path(path) or '(args, kwargs)'} whose static "
          f"data (pytree auxdata) is {want[1]!r:.200}, but was called with "
          f"one whose static data is {aux!r:.200}; trace the program again "
          "for these static values")
  return None


_MAX_LISTED = 24


def _listing(paths) -> str:
  paths = list(paths)
  shown = ", ".join(paths[:_MAX_LISTED])
  if len(paths) > _MAX_LISTED:
    shown += f", ... ({len(paths) - _MAX_LISTED} more)"
  return shown or "(none)"


def _mismatch_message(in_tree, tree, expected, given) -> str:
  shown = [display_path(p) for p in leaf_paths(in_tree)]
  missing = [_display_call_path(p) for p in expected if p not in given]
  expected_set = set(expected)
  unexpected = [_display_call_path(p) for p in given
                if p not in expected_set]
  return (
      f"the program takes arguments of structure {in_tree}, but was called "
      f"with {tree}. It takes {len(shown)} leaves at these key paths of "
      f"(args, kwargs): {_listing(shown)}. Any structure with leaves at the "
      "same key paths works (attribute keys .name and dict keys ['name'] "
      "are interchangeable); the call lacks "
      f"{_listing(missing)} and has unexpected {_listing(unexpected)}")


def signature_text(in_tree, in_avals, out_tree, out_avals) -> str:
  """A readable signature: each input and output leaf by key path with its
  type, the structures, and the nodes loaded as plain containers."""
  lines = [f"inputs {in_tree}:"]
  for path, aval in zip(leaf_paths(in_tree), in_avals):
    lines.append(f"  {display_path(path)}: {aval.str_short()}")
  lines.append(f"outputs {out_tree}:")
  for path, aval in zip(leaf_paths(out_tree), out_avals):
    name = jax.tree_util.keystr(tuple(path)) or "(the whole output)"
    lines.append(f"  {name}: {aval.str_short()}")
  for where, tree in (("inputs", in_tree), ("outputs", out_tree)):
    entry = _remembered_entry(tree)
    if entry is None:
      continue
    lines.append(f"{where} stored with types loaded as plain containers:")
    for path, type_name, reason in entry[2]:
      shown = (display_path(path) if where == "inputs"
               else jax.tree_util.keystr(tuple(path)) or "(the output)")
      lines.append(f"  {shown}: {type_name} ({reason})")
  return "\n".join(lines)
