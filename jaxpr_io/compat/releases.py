"""Which adapter serves the running JAX release.

Each supported JAX release line has one adapter module in this package that
maps the release's primitive names and params to the format's vocabulary
(`jaxpr_io/format/vocabulary.py`, documented in schema/VOCABULARY.md) and back:

  release line   adapter
  0.10.x         jaxpr_io/compat/jax_0_10.py   (jax >= 0.10.2)
  0.11.x         jaxpr_io/compat/jax_0_11.py
  0.12.x         jaxpr_io/compat/jax_0_12.py   (0.11's, plus new params)

Supporting a new release means adding a row here and, where its data model
changed, one adapter module; the format does not change.

A release newer than every row is served by the newest adapter with a
warning that names it: programs made of known primitives and params still
round-trip, and anything the adapter does not know fails with
`UnsupportedError` (writing) or `FormatError` (reading) naming it.
"""

from __future__ import annotations

import importlib
import warnings

from jaxpr_io.format import vocabulary

# (major, minor) of a release line -> adapter module (in this package).
ADAPTERS = {
    (0, 10): "jax_0_10",
    (0, 11): "jax_0_11",
    (0, 12): "jax_0_12",
}
OLDEST = (0, 10, 2)
SUPPORTED_JAX = ">=0.10.2,<0.13"


class NewerJaxWarning(UserWarning):
  """The running JAX release is newer than every adapter of jaxpr_io."""


def adapter_name(jax_version: str) -> tuple[str, bool]:
  """(adapter module name, whether the release is newer than every row)."""
  version = vocabulary.parse_jax_version(jax_version)
  if version < OLDEST:
    raise ImportError(
        f"jaxpr_io supports jax {SUPPORTED_JAX}; this is jax "
        f"{jax_version}. Upgrade with: pip install -U jax")
  name = ADAPTERS.get(version[:2])
  if name is not None:
    return name, False
  return ADAPTERS[max(ADAPTERS)], True


def adapter_for(jax_version: str):
  """The adapter module for `jax_version` (warns for a newer release)."""
  name, newer = adapter_name(jax_version)
  if newer:
    newest = max(ADAPTERS)
    warnings.warn(
        f"jax {jax_version} is newer than every release jaxpr_io has an "
        f"adapter for (newest: {newest[0]}.{newest[1]}.x); using that "
        "adapter. Programs of known primitives and params still round-trip; "
        "anything new fails with UnsupportedError or FormatError naming it.",
        NewerJaxWarning, stacklevel=3)
  return importlib.import_module(f"jaxpr_io.compat.{name}").ADAPTER
