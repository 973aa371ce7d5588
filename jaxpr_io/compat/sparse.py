"""jax.experimental.sparse's NamedTuples, imported with the sparse family
(a program or a file that holds sparse primitives)."""

from jax.experimental.sparse import coo as sparse_coo
from jax.experimental.sparse import util as sparse_util

# Stable serialized name -> NamedTuple class, stored field by field (as
# jaxpr_io.compat.tables.NAMED_TUPLES).
NAMED_TUPLES: dict[str, type] = {
    # Added in format version 4.
    "jax.experimental.sparse.SparseInfo": sparse_util.SparseInfo,
    # Added in format version 5, without a schema change (2026-11-25).
    "jax.experimental.sparse.COOInfo": sparse_coo.COOInfo,
}
