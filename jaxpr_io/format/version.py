"""Versions: the package version and the one format version.

The format version is an integer that every file carries in its header and in
`Program.format_version`. It changes whenever the schema (schema/jaxpr.proto)
or the meaning of any field changes; tests/format/test_schema.py fails when
the schema changes without a bump here. A reader reads every version from
`OLDEST_READABLE_FORMAT_VERSION` to `FORMAT_VERSION` and refuses newer ones.

What each version changed, in full: schema/CHANGELOG.md (one line each below).
"""

from __future__ import annotations

__version__ = "0.1.0"

# Format versions (schema/CHANGELOG.md has the full changelog):
#   1 (2026-11-22): the first format: header, Program message, data section
#   2 (2026-11-23): one vocabulary for every JAX release; EqnContext settings
#   3 (2026-11-23): equations stored column by column (Jaxpr.equations)
#   4 (2026-11-24): refs, treedef and aval params; checkify, sparse, Pallas
#   5 (2026-11-24): packed ints, bools and shapes; extended element types
#   6 (2026-11-25): kernel memory spaces of arrays (kernel_memory_space)
#   7 (2026-11-25): futures, pinned linear values, array layouts
#   8 (2026-11-26): hijax boxes and logs (Aval.hi_mutable, Jaxpr.qdds)
#   9 (2026-11-27): backward rules stored with constant residuals
FORMAT_VERSION = 9
OLDEST_READABLE_FORMAT_VERSION = 1

# SHA-256 of the compiled schema descriptor (jaxpr_io/format/_proto/jaxpr.desc)
# that each format version was released with. A schema change without a new
# entry here fails tests/format/test_schema.py.
SCHEMA_FINGERPRINTS = {
    1: "6dba239941cd2638d4d9abb6663e137185d49d1d09a0ee8e26bdd8091e2c0f84",
    2: "f8f320cf553012591dbf8578f245c472cc44539786e2bdc4e5e5c57666bb4742",
    3: "e317033409d5ad8d21e0a2f6531fa503bee957b78f4e33a2934f8be6bde68530",
    4: "2e5d2d81683ce64e02a2646868570b78d1291decf2cc4fc00c48fc6a2dae2ee1",
    5: "81cc109773a083b139f9d68dc720784b724db2732c2fb8ed6ebf5871d02eb7b6",
    6: "c52b2ef5be61a42996fd493238a7a59f5eb3341cbd7062481f166a467a75e435",
    7: "1675cec0211fbe4e0d0ad4c9e8fb0c0f77ae4a11ca84930f9b7c3486fa3b3d75",
    8: "1723ab128d2fb4b20d7203e42a89c23202a633248c1a99ef605f4bd392be6d8d",
    # 9 changed the stored form of a param (custom_vjp's `bwd`), not the
    # schema.
    9: "1723ab128d2fb4b20d7203e42a89c23202a633248c1a99ef605f4bd392be6d8d",
}
