"""Calling a program: matching the arguments of a call against its pytree
signature, and showing signatures and key paths.

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
"""

from __future__ import annotations

import collections
import functools
import types

import jax

from jaxpr_io.pytree import nodes as tree_nodes
from jaxpr_io.compat import pytrees as compat_pytrees

_DictKey = compat_pytrees.DictKey
_GetAttrKey = compat_pytrees.GetAttrKey
_SequenceKey = compat_pytrees.SequenceKey
_FlattenedIndexKey = compat_pytrees.FlattenedIndexKey


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
    entry = tree_nodes._remembered_entry(tree)  # pylint: disable=protected-access
    if entry is None:
      continue
    lines.append(f"{where} stored with types loaded as plain containers:")
    for path, type_name, reason in entry[2]:
      shown = (display_path(path) if where == "inputs"
               else jax.tree_util.keystr(tuple(path)) or "(the output)")
      lines.append(f"  {shown}: {type_name} ({reason})")
  return "\n".join(lines)
