"""Release version strings, without importing JAX (the table command runs
under any Python)."""

from __future__ import annotations


def release_series(version: str) -> str:
  """'0.12.0.1' -> '0.12': the release line expected failures refer to."""
  return ".".join(version.split(".")[:2])


def version_key(version: str) -> tuple:
  """Sort key for version strings ('0.10.2' < '0.11.2' < '0.12.0.1')."""
  return tuple(int(p) if p.isdigit() else 0 for p in version.split("."))
