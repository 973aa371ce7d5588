"""Field checks shared by the record codecs (records.py, mesh_records.py)."""

from __future__ import annotations

from jaxpr_io.errors import FormatError


def fields(record: str, values, names: tuple[str, ...]) -> tuple:
  """`values`, which must be a tuple of len(names) fields of `record`."""
  if type(values) is not tuple or len(values) != len(names):
    raise FormatError(f"{record}: expected the fields ({', '.join(names)}), "
                      f"got {values!r}"[:500])
  return values


def is_int(v) -> bool:
  return type(v) is int   # never a bool
