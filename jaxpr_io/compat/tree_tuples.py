"""Pytree structures as nested tuples of plain data: how host callbacks
store their `in_tree` (jaxpr_io/families/callbacks.py) and JAX 0.11+'s
FlatTree records store their treedefs (jax_0_11.py).

One tuple per node: `("leaf",)`, `("none",)`, `("tuple", children)`,
`("list", children)`, `("dict", keys, children)`, or `("custom", name,
auxdata, children)` for a node type registered with
`jax.export.register_pytree_node_serialization` (`name` its serialized
name, `auxdata` the bytes its serializer wrote, as a uint8 array);
`children` is a tuple of nodes. Only builtin containers and registered
node types: a file never names a class.
"""

from __future__ import annotations

import types
from typing import Any

import jax
from jax._src.export import _export as export_internal
import numpy as np

from jaxpr_io.errors import FormatError, UnsupportedError

_SERIALIZATION = export_internal.serialization_registry
_DESERIALIZATION = export_internal.deserialization_registry


def encode_treedef(treedef) -> tuple:
  """A `PyTreeDef` as a nested tuple (see the module docstring)."""
  node_data = treedef.node_data()
  if node_data is None:
    return ("leaf",)
  node_type, aux = node_data
  children = tuple(encode_treedef(c) for c in treedef.children())
  if node_type is types.NoneType:
    return ("none",)
  if node_type is tuple:
    return ("tuple", children)
  if node_type is list:
    return ("list", children)
  if node_type is dict:
    return ("dict", tuple(aux), children)
  entry = _SERIALIZATION.get(node_type)
  if entry is None:
    raise UnsupportedError(
        f"the pytree node type {node_type.__module__}."
        f"{node_type.__qualname__} has no stable serialized name; register "
        "it with jax.export.register_pytree_node_serialization (or "
        "register_namedtuple_serialization for a NamedTuple)")
  name, serialize_auxdata = entry
  data = serialize_auxdata(aux)
  if not isinstance(data, (bytes, bytearray)):
    raise UnsupportedError(
        f"the pytree auxdata serializer of {name!r} returned "
        f"{type(data).__name__}, not bytes")
  return ("custom", name, np.frombuffer(bytes(data), np.uint8), children)


class _Leaf:
  """Placeholder leaf of the skeleton a treedef is rebuilt from."""


_LEAF = _Leaf()


def _skeleton(node) -> Any:
  if type(node) is not tuple or not node or type(node[0]) is not str:
    raise FormatError(f"pytree node {node!r} is not a (kind, ...) tuple")
  kind, rest = node[0], node[1:]
  shape = {"leaf": 0, "none": 0, "tuple": 1, "list": 1, "dict": 2,
           "custom": 3}.get(kind)
  if shape is None or len(rest) != shape:
    raise FormatError(f"pytree node {node!r} is not a known node kind")
  if kind == "leaf":
    return _LEAF
  if kind == "none":
    return None
  if type(rest[-1]) is not tuple:
    raise FormatError(f"the children of pytree node {kind!r} are not a tuple")
  children = [_skeleton(c) for c in rest[-1]]
  if kind == "tuple":
    return tuple(children)
  if kind == "list":
    return children
  if kind == "dict":
    keys = rest[0]
    if type(keys) is not tuple or len(keys) != len(children):
      raise FormatError(f"a pytree dict has keys {keys!r} for "
                        f"{len(children)} children")
    try:
      return dict(zip(keys, children))
    except TypeError as e:
      raise FormatError(f"a pytree dict key is unhashable: {e}") from None
  name, data = rest[0], rest[1]
  if type(name) is not str or type(data) is not np.ndarray or (
      data.dtype != np.uint8 or data.ndim != 1):
    raise FormatError(f"custom pytree node {name!r} needs a name and uint8 "
                      "auxdata")
  entry = _DESERIALIZATION.get(name)
  if entry is None:
    raise FormatError(
        f"the pytree node type {name!r} is not registered in this process; "
        "register it with jax.export.register_pytree_node_serialization "
        "before loading")
  _, deserialize_auxdata, from_children = entry
  try:
    return from_children(deserialize_auxdata(data.tobytes()), children)
  except (TypeError, ValueError, LookupError, AttributeError) as e:
    raise FormatError(f"custom pytree node {name!r} cannot be rebuilt: "
                      f"{e}") from None


def treedef_skeleton(stored):
  """A pytree whose structure is the stored treedef; its leaves are
  placeholders that `is_skeleton_leaf` recognizes."""
  return _skeleton(stored)


def is_skeleton_leaf(x) -> bool:
  return x is _LEAF


def decode_treedef(stored):
  """The `PyTreeDef` of a nested tuple written by `encode_treedef`."""
  skeleton = _skeleton(stored)
  try:
    return jax.tree_util.tree_structure(skeleton,
                                        is_leaf=lambda x: x is _LEAF)
  except (TypeError, ValueError) as e:  # e.g. dict keys that do not sort
    raise FormatError(f"pytree {stored!r} cannot be rebuilt: {e}") from None
