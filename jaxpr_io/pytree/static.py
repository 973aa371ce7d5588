"""Static leaves: the non-array leaves of a traced program's arguments.

An Equinox module holds its activation function as a pytree leaf; other
pytrees hold strings, flags or callables. `jax.make_jaxpr` cannot take such
leaves as inputs. As in `eqx.filter_make_jaxpr`, `trace` treats every leaf
that is not array-like (`is_dynamic`) as static: it is passed to the function
as it is, it is not an input of the program, and the program's `in_tree`
holds a `Static` node in its place. `Static` is a pytree node with no
children whose auxdata is a stable description of the value (`describe`): so
it is no input, the file stores it (a GENERIC node of type
`jaxpr_io.static.Static` with plain-data auxdata: no schema change), and it
comes back as itself wherever jaxpr_io is loaded.

A call passes either the same objects at those places (`mark` turns them into
`Static` nodes again, and a different object there is refused as a different
static value), `None`, or nothing (e.g. `eqx.filter(model, eqx.is_array)`).
"""

from __future__ import annotations

import functools

import jax
import numpy as np

from jaxpr_io.pytree import calls as tree_calls
from jaxpr_io.compat import hi_mutable as compat_hi_mutable
from jaxpr_io.static import Static

# Python scalars are inputs (weakly typed), as `jax.make_jaxpr` makes them.
_DYNAMIC_TYPES = (np.ndarray, np.generic, bool, int, float, complex)
_MAX_DESCRIPTION = 200




def is_dynamic(x) -> bool:
  """Whether a leaf is an input: an array, a ShapeDtypeStruct, a Python or
  numpy scalar, anything else with a shape and a dtype (tracers), an
  object JAX converts to an array (`__jax_array__`), or a JAX 0.10 `Box` or
  `Log` (jaxpr_io/families/hijax/mutable.py)."""
  if isinstance(x, _DYNAMIC_TYPES) or isinstance(x, jax.Array):
    return True
  if compat_hi_mutable.current_state(x) is not None:
    return True
  return (hasattr(x, "shape") and hasattr(x, "dtype")) or hasattr(
      x, "__jax_array__")


def describe(x) -> str:
  """A description of a static value that is the same in every process:
  `module.qualname` of functions and classes, the repr of plain values, the
  type of other objects (never a memory address)."""
  if isinstance(x, (str, bytes, type(None), bool, int, float, complex)):
    return repr(x)[:_MAX_DESCRIPTION]
  module = getattr(x, "__module__", None)
  qualname = getattr(x, "__qualname__", None) or getattr(x, "__name__", None)
  if isinstance(module, str) and isinstance(qualname, str):
    return f"{module}.{qualname}"[:_MAX_DESCRIPTION]
  t = type(x)
  return f"<{t.__module__}.{t.__qualname__} object>"[:_MAX_DESCRIPTION]


def has_static(leaves) -> bool:
  return not all(is_dynamic(x) for x in leaves)


def _is_static_node(x) -> bool:
  return isinstance(x, Static)


def static_paths(treedef) -> dict[tuple, Static]:
  """call path (`tree_calls.call_path`) -> `Static` node, of every static leaf
  place in `treedef`; empty for most programs."""
  try:
    return _cached_static_paths(treedef)
  except TypeError:  # an auxdata that cannot be hashed: not cacheable
    return _static_paths(treedef)


def _static_paths(treedef) -> dict[tuple, Static]:
  if not any(_has_static_node(treedef)):
    return {}
  tree = treedef.unflatten([0] * treedef.num_leaves)
  pairs, _ = jax.tree_util.tree_flatten_with_path(tree, is_leaf=_is_static_node)
  return {tree_calls.call_path(p): x for p, x in pairs if isinstance(x, Static)}


_cached_static_paths = functools.lru_cache(maxsize=64)(_static_paths)


def _has_static_node(treedef):
  data = treedef.node_data()
  if data is None:
    return
  if data[0] is Static:
    yield True
    return
  for child in treedef.children():
    yield from _has_static_node(child)


def mark(tree, paths: dict[tuple, Static]):
  """`tree` with each leaf at a static call path replaced by its `Static`
  node (a different value there gives a different node, which the call then
  refuses as other static data)."""
  def replace(path, x):
    if tree_calls.call_path(path) in paths and not isinstance(x, Static):
      return Static(describe(x))
    return x
  return jax.tree_util.tree_map_with_path(replace, tree,
                                          is_leaf=_is_static_node)


def split(leaves):
  """(the `Static` node or None per leaf, the dynamic leaves)."""
  marks = [None if is_dynamic(x) else Static(describe(x)) for x in leaves]
  return marks, [x for x, m in zip(leaves, marks) if m is None]
