"""Pytree structures (`PyTreeDef`) <-> `PyTree` messages.

Built-in containers (None, tuple, list, dict) are stored structurally; dict
keys are stored as param `Value`s, so int and other non-string keys work.
Every other node type must be registered with JAX's own pytree-node
serialization registry (`jax.export.register_pytree_node_serialization` or
`register_namedtuple_serialization`), which stores the node's auxdata as bytes
under a stable name. Loading never imports a module named in the file.
"""

from __future__ import annotations

import types

import jax

from jaxpr_io import _proto as pb
from jaxpr_io import compat
from jaxpr_io import params
from jaxpr_io.errors import FormatError, UnsupportedError

MAX_DEPTH = 256
_K = pb.PyTreeKind


def encode_treedef(w, treedef, out, depth: int = 0) -> None:
  """Fills the `PyTree` message `out` with `treedef`."""
  if depth > MAX_DEPTH:
    raise UnsupportedError(f"pytree nests deeper than {MAX_DEPTH}")
  node_data = treedef.node_data()
  if node_data is None:
    out.kind = _K["LEAF"]
    return
  node_type, aux = node_data
  if node_type is types.NoneType:
    out.kind = _K["NONE"]
  elif node_type is tuple:
    out.kind = _K["TUPLE"]
  elif node_type is list:
    out.kind = _K["LIST"]
  elif node_type is dict:
    out.kind = _K["DICT"]
    for key in aux:
      params.encode_value(w, key, out.keys.add())
  elif node_type in compat.pytree_serialization_registry:
    name, serialize_auxdata = compat.pytree_serialization_registry[node_type]
    out.kind = _K["CUSTOM"]
    out.custom_name = name
    data = serialize_auxdata(aux)
    if not isinstance(data, (bytes, bytearray)):
      raise UnsupportedError(
          f"the pytree auxdata serializer of {name!r} returned "
          f"{type(data).__name__}, not bytes")
    out.custom_auxdata = bytes(data)
  else:
    raise UnsupportedError(
        f"the pytree node type {node_type.__module__}."
        f"{node_type.__qualname__} has no stable serialized name; register "
        "it with jax.export.register_pytree_node_serialization (or "
        "register_namedtuple_serialization for a NamedTuple)")
  for child in treedef.children():
    encode_treedef(w, child, out.children.add(), depth + 1)


class _Leaf:
  """Placeholder leaf used to rebuild a treedef from a skeleton pytree."""


_LEAF = _Leaf()


def _skeleton(r, msg, depth: int):
  if depth > MAX_DEPTH:
    raise FormatError(f"pytree nests deeper than {MAX_DEPTH}")
  kind = msg.kind
  if kind == _K["LEAF"]:
    if msg.children:
      raise FormatError("a pytree leaf has children")
    return _LEAF
  children = [_skeleton(r, c, depth + 1) for c in msg.children]
  if kind == _K["NONE"]:
    if children:
      raise FormatError("a pytree None node has children")
    return None
  if kind == _K["TUPLE"]:
    return tuple(children)
  if kind == _K["LIST"]:
    return children
  if kind == _K["DICT"]:
    keys = [params.decode_value(r, k) for k in msg.keys]
    if len(keys) != len(children):
      raise FormatError(f"a pytree dict has {len(keys)} keys and "
                        f"{len(children)} children")
    try:
      return dict(zip(keys, children))
    except TypeError as e:
      raise FormatError(f"a pytree dict key is unhashable: {e}") from None
  if kind == _K["CUSTOM"]:
    entry = compat.pytree_deserialization_registry.get(msg.custom_name)
    if entry is None:
      raise FormatError(
          f"the pytree node type {msg.custom_name!r} is not registered in "
          "this process; register it with "
          "jax.export.register_pytree_node_serialization before loading")
    _, deserialize_auxdata, from_children = entry
    return from_children(deserialize_auxdata(msg.custom_auxdata), children)
  raise FormatError(f"unknown pytree node kind {kind}")


def decode_treedef(r, msg):
  """The `PyTreeDef` of a `PyTree` message."""
  skeleton = _skeleton(r, msg, 0)
  return jax.tree_util.tree_structure(skeleton,
                                      is_leaf=lambda x: x is _LEAF)
