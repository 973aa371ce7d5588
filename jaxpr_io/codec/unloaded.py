"""Records of a library in jaxpr_io's table that cannot be imported here
(jaxpr_io/families/libraries/): in a pytree node's auxdata such a record is
kept as it was read, so the node loads as a plain container and the program
re-dumps to the same bytes; anywhere else it is an error."""

from __future__ import annotations

from jaxpr_io.errors import FormatError
from jaxpr_io.format import limits


class MissingLibraryError(FormatError):
  """A file holds a record of a table library that cannot be imported
  (jaxpr_io/families/libraries/)."""


class UnloadedRecord:
  """A library record read where its library cannot be imported: in the
  auxdata of a pytree node, which then loads as a plain container
  (jaxpr_io/pytree/read.py). Kept so that the program re-dumps to the same
  bytes; it is written back as the record it was read as."""

  __slots__ = ("name", "fields")

  def __init__(self, name: str, fields: tuple):
    self.name = name
    self.fields = fields

  def __repr__(self):
    return f"<{self.name} of a library not imported here>"


def holds_unloaded(value, depth: int = 0) -> bool:
  """Whether a decoded auxdata value holds an `UnloadedRecord`."""
  if type(value) is UnloadedRecord:
    return True
  if type(value) in (tuple, list, frozenset) and depth < limits.MAX_VALUE_DEPTH:
    return any(holds_unloaded(v, depth + 1) for v in value)
  return False
