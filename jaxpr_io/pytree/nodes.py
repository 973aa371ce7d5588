"""Pytree nodes as a file holds them: the `Node` model that the pytree
modules share, the format's nesting limits, and the trees loaded with plain
containers.

jaxpr_io/pytree/write.py turns treedefs into `Node`s and `PyTree` messages,
jaxpr_io/pytree/read.py messages back into `Node`s and treedefs,
jaxpr_io/pytree/calls.py matches a call's arguments against a signature, and
jaxpr_io/pytree/codec.py stores treedefs as param values.

## Saving a loaded program again

A tree that was loaded with plain containers remembers the nodes it was read
from (keyed by the identity of the `PyTreeDef` that `decode_treedef`
returned; the last `_MAX_REMEMBERED` such trees), so writing a loaded program
again gives the same bytes even in a process without the original types.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from typing import Any

from jaxpr_io.format import limits

# How deep pytree nodes and their keys nest (jaxpr_io/format/limits.py).
MAX_DEPTH = limits.MAX_TREE_DEPTH
MAX_KEY_NESTING = limits.MAX_KEY_NESTING


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
