"""Versions: the package version and the one format version.

The format version is an integer that every file carries in its header and in
`Program.format_version`. It changes whenever the schema (schema/jaxpr.proto)
or the meaning of any field changes; tests/test_schema_version.py fails when
the schema changes without a bump here. A reader reads every version from
`OLDEST_READABLE_FORMAT_VERSION` to `FORMAT_VERSION` and refuses newer ones.

Changelog (newest last):
  * 2026-11-22, version 1: the first format. A 64-byte header, the Program
    message (tables of strings, avals, arrays, blobs, param sets, equation
    contexts, name stacks, jaxprs and closed jaxprs; params as typed
    Values, with per-(primitive, param) codecs for rules, policies and
    callbacks; symbolic dimensions with the scope's constraints; pytree
    signatures with GENERIC nodes for library types) and an aligned data
    section with a CRC-32 per blob.
"""

from __future__ import annotations

__version__ = "0.1.0"

FORMAT_VERSION = 1
OLDEST_READABLE_FORMAT_VERSION = 1

# SHA-256 of the compiled schema descriptor (jaxpr_io/_proto/jaxpr.desc) that
# each format version was released with. A schema change without a new entry
# here fails tests/test_schema_version.py.
SCHEMA_FINGERPRINTS = {
    1: "6dba239941cd2638d4d9abb6663e137185d49d1d09a0ee8e26bdd8091e2c0f84",
}
