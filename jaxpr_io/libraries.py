"""Primitives that well-known libraries define, by stable name.

Programs of the Equinox stack (Diffrax, Optimistix, Lineax) contain
primitives that those libraries define, not JAX. jaxpr_io ships this table
of them. Each entry gives the primitive a stable serialized name (the
library's name, a dot, the primitive's name), says which module defines it,
under which attribute, and which pip package provides that module.

* Writing: a primitive that is neither JAX's nor registered by the user is
  looked up here by identity, in the modules of the table that the writing
  process has already imported (the program was traced with them).
* Loading: a name from the file is looked up in this table, and the module
  of the entry is imported: the module comes from jaxpr_io's own table,
  never from the file. When the package is not installed, the load fails
  with a `FormatError` naming the package to install.

`jaxpr_io.register_primitive` stays for every other primitive.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
from typing import Any

from jaxpr_io import compat
from jaxpr_io.errors import FormatError


@dataclasses.dataclass(frozen=True)
class LibraryPrimitive:
  """One primitive of a library: `module.attribute` is the `Primitive`."""
  name: str        # stable serialized name, e.g. "equinox.unvmap_any"
  module: str      # the module that defines it
  attribute: str   # the module attribute that holds the Primitive
  package: str     # the pip package that provides the module


def _equinox(name: str, module: str, attribute: str) -> LibraryPrimitive:
  return LibraryPrimitive(f"equinox.{name}", module, attribute, "equinox")


LIBRARY_PRIMITIVES: tuple[LibraryPrimitive, ...] = (
    _equinox("unvmap_any", "equinox._unvmap", "unvmap_any_p"),
    _equinox("unvmap_all", "equinox._unvmap", "unvmap_all_p"),
    _equinox("unvmap_max", "equinox._unvmap", "unvmap_max_p"),
    _equinox("nontraceable", "equinox.internal._nontraceable",
             "nontraceable_p"),
    _equinox("nondifferentiable_backward", "equinox.internal._nontraceable",
             "nondifferentiable_backward_p"),
    _equinox("nonbatchable", "equinox.internal._nontraceable",
             "nonbatchable_p"),
    _equinox("select_if_vmap", "equinox.internal._loop.common",
             "select_if_vmap_p"),
    _equinox("maybe_set", "equinox.internal._loop.common", "maybe_set_p"),
)

_BY_NAME = {entry.name: entry for entry in LIBRARY_PRIMITIVES}
if len(_BY_NAME) != len(LIBRARY_PRIMITIVES):
  raise RuntimeError("two library primitives share a serialized name")


def name_of(primitive) -> str | None:
  """The serialized name of a library primitive, or None. Looks only in
  modules the process has imported already."""
  for entry in LIBRARY_PRIMITIVES:
    module = sys.modules.get(entry.module)
    if module is not None and vars(module).get(entry.attribute) is primitive:
      return entry.name
  return None


def load(name: str) -> Any | None:
  """The primitive of serialized name `name`, importing its module from the
  table; None when `name` is not in the table."""
  entry = _BY_NAME.get(name)
  if entry is None:
    return None
  try:
    module = importlib.import_module(entry.module)
  except ImportError as e:
    raise FormatError(
        f"the program uses primitive {name!r} of the {entry.package!r} "
        f"package, which cannot be imported here ({e}); install it with "
        f"`pip install {entry.package}`") from None
  primitive = vars(module).get(entry.attribute)
  if not isinstance(primitive, compat.Primitive):
    raise FormatError(
        f"the program uses primitive {name!r}, but this version of "
        f"{entry.package!r} has no {entry.module}.{entry.attribute}; "
        "install the version that wrote the file")
  return primitive
