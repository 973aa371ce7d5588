"""JAX's pytree machinery, as jaxpr_io uses it to store and rebuild pytree
signatures (see jaxpr_io/pytree/codec.py for the design).

Everything here goes through `jax.tree_util`'s public API, except JAX's
tracing registry (`TransformedRef` nodes, registered there alone); what is
specific to a JAX release is how it behaves at the edges, which this module
pins down:

* `PyTreeDef.from_node_data_and_children` builds a treedef from a node type,
  its auxdata and child treedefs without calling any user code, and raises
  `RuntimeError` ("Could not find type") for a type that is not a registered
  pytree node.
* `flatten_one_level_with_keys` names every child of a NamedTuple after its
  first field (jax 0.10.2), so child keys come from `tree_flatten_with_path`
  of a one-level node instead.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
from jax._src import tree_util as _tree_util
from jax._src.state import types as _state_types

PyTreeDef = jax.tree_util.PyTreeDef
DictKey = jax.tree_util.DictKey
GetAttrKey = jax.tree_util.GetAttrKey
SequenceKey = jax.tree_util.SequenceKey
FlattenedIndexKey = jax.tree_util.FlattenedIndexKey

# The treedef of one leaf.
LEAF = jax.tree_util.tree_structure(0)

# JAX's registry for the trees of traced calls, and the node types that JAX
# registers there alone: a ref with transforms (`TransformedRef`, a leaf in
# user code) is a node of the treedefs that Pallas's DMA primitives and
# Mosaic TPU's emit_pipeline build there.
_tracing_registry = _tree_util.tracing_registry
_TRACING_ONLY = frozenset({_state_types.TransformedRef})


def make_node(node_type: type, auxdata: Any,
              children: Sequence[PyTreeDef]) -> PyTreeDef | None:
  """The treedef of one `node_type` node with `auxdata` over `children`, or
  None when `node_type` is not a pytree node type registered in JAX's default
  registry (or, for `_TRACING_ONLY` types, its tracing registry). Calls no
  user code (JAX only stores the node data)."""
  try:
    return PyTreeDef.from_node_data_and_children(
        jax.tree_util.default_registry, (node_type, auxdata), list(children))
  except RuntimeError:  # "Could not find type: ..."
    pass
  if node_type not in _TRACING_ONLY:
    return None
  return PyTreeDef.from_node_data_and_children(
      _tracing_registry, (node_type, auxdata), list(children))



class _Placeholder:
  """A leaf standing in for a child while a node's keys are computed."""

  __slots__ = ("index",)

  def __init__(self, index: int):
    self.index = index

  def __repr__(self) -> str:
    return f"<child {self.index}>"


def child_keys(node_type: type, auxdata: Any,
               num_children: int) -> tuple[Any, ...] | None:
  """The key entries (`DictKey`, `GetAttrKey`, `SequenceKey`,
  `FlattenedIndexKey` or a key type of the user's) that JAX gives the
  children of a `node_type` node with `auxdata`, in child order; None when
  they cannot be found.

  The node is rebuilt one level deep with placeholder children by the type's
  own unflatten function, then flattened with paths. That is user code: any
  exception it raises means "no keys" (the caller stores positions instead),
  as does a node that does not hand back exactly its placeholders in order.
  """
  one_level = make_node(node_type, auxdata, [LEAF] * num_children)
  if one_level is None:
    return None
  if node_type in _TRACING_ONLY:
    # Flattening with paths sees the default registry, where it is a leaf:
    # its children are known by position.
    return tuple(FlattenedIndexKey(i) for i in range(num_children))
  placeholders = [_Placeholder(i) for i in range(num_children)]
  try:
    node = one_level.unflatten(placeholders)
    pairs, _ = jax.tree_util.tree_flatten_with_path(node)
  except Exception:  # pylint: disable=broad-except
    # A user unflatten function may reject placeholder children in any way;
    # the node then simply has no known keys.
    return None
  if len(pairs) != num_children:
    return None
  keys = []
  for placeholder, (path, leaf) in zip(placeholders, pairs):
    if leaf is not placeholder or len(path) != 1:
      return None
    keys.append(path[0])
  return tuple(keys)


def canonical_dict_keys(keys: Sequence[Any]) -> list[Any]:
  """`keys` in the order JAX keeps the keys of a dict (sorted). Raises
  ValueError when JAX cannot sort them and TypeError when one is
  unhashable."""
  treedef = jax.tree_util.tree_structure(dict.fromkeys(keys, 0))
  return list(treedef.node_data()[1])
