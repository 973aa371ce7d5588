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
  * 2026-11-23, version 2: one vocabulary for every JAX release. Equations
    are stored in the format's vocabulary (jaxpr_io/format/vocabulary.py,
    schema/VOCABULARY.md) and each JAX release's adapter maps to and from
    it. `EqnContext` gained `layout_mode` and `no_collectives` (JAX
    0.11/0.12 context settings). Meanings changed: `jit`'s `inline` is a
    mode string ("auto", "jax_late", "jax_early", "xla_early", "xla_late";
    version 1 stored a bool: False is "auto", True is "jax_late"); `scan`
    MAY carry `ft_in`/`ft_out` (`jax.FlatTree.*` records, written by JAX
    0.11+) beside `num_consts`/`num_carry`, which remain required; on JAX
    releases where a `Jaxpr` carries its consts, whether a param holds a
    closed or an open jaxpr follows the vocabulary's table, not the type.
    Readers of version 2 read version 1 files.
  * 2026-11-23, version 3: equations stored column by column. A jaxpr's
    equations are `Jaxpr.equations` (columns of little-endian integers:
    kinds, inputs, outputs, name stacks, contexts, dropped outputs, and the
    effects of the equations that have any) instead of one `Equation`
    message each, and the new `Program.equation_kinds` table holds what
    equations of one kind share (primitive, param set, numbers of inputs
    and outputs). Loading is about 3x faster. Nothing else changed;
    readers of version 3 read versions 1 and 2.
  * 2026-11-24, version 4: more of JAX's programs. `Aval.ref`
    (`AbstractRef`, the type of mutable array references), `Value.treedef`
    (a `PyTreeDef` param, rebuilt exactly or refused) and `Value.aval` (an
    abstract value as a param, e.g. `pallas_call`'s `out_avals`); new
    record types `jax.lax.RaggedDotDimensionNumbers`, `jax.HashableArray`,
    `jax.FrozenDict`, `jax.experimental.sparse.SparseInfo`,
    `jax.checkify.ErrorEffect` and Pallas's dataclasses (stored by field
    name, jaxpr_io/families/pallas/core.py); the effect `jax.checkify.ErrorEffect`; the
    primitives of checkify, `shard_alike`, `jax.experimental.sparse`,
    Pallas (`pallas_call` and the core kernel primitives) and Equinox
    (`equinox.*`, jaxpr_io/codec/library_table.py) join the vocabulary. A custom
    rule that raises when traced is stored as its error
    (jaxpr_io/families/custom_rules/registrations.py). Readers of version 4 read versions 1 to 3.
    Later on 2026-11-24, without a schema change: the record types
    `builtins.list`, `jax.ShapeDtypeStruct` and, for the library table's
    values, `equinox.Missing`, `equinox.Enumeration`, `lineax.tag`,
    `library.function` and `functools.partial`
    (jaxpr_io/families/libraries/codecs.py), with which Equinox modules' auxdata is
    stored; `lineax.linear_solve` with its param codecs; and
    `custom_vmap_call`'s `rule` and `in_tree` param codecs
    (jaxpr_io/families/custom_rules/vmap.py). A reader from
    before these additions refuses files that use them (unknown record or
    primitive).
  * 2026-11-24, version 5: faster to read, and extended element types.
    `Value.ints` and `Value.bools` hold a tuple of ints or of bools as one
    packed field, and `ShapedArray.sizes` a shape of known sizes; writers
    MUST use them (so equal values keep equal bytes), readers still accept
    the forms of versions 1-4. The new dtype `EXTENDED` with
    `TypeRef.extended` stores an extended element type (Pallas semaphores,
    Mosaic GPU barriers) as a record of a type the reader registers.
    A ref in Mosaic GPU's REGS memory space is a WGMMA accumulator
    (`AbstractRef.memory_space`). The primitives of Mosaic GPU (four under
    names of their own, `mosaic_gpu.load` and so on), Mosaic TPU's DMAs and
    semaphores, JAX 0.12's thunky, the cuDNN RNN, `einshape_lo` and
    `remove_memory_space` join the vocabulary, with the effects
    `jax.pallas.semaphore`, `jax.pallas.gpu.*` and `jax.thunky`.
    Readers of version 5 read versions 1 to 4.
  * 2026-11-25, version 6: `ShapedArray.kernel_memory_space` holds an
    array's memory space when it is not one of JAX's own (`MemorySpace`):
    a member of a registered enum, as refs hold theirs (a Pallas memory
    space, which `pl.with_memory_space_constraint` gives a kernel's array
    operand); `memory_space` is then MEMORY_SPACE_UNSPECIFIED. Readers of
    version 6 read versions 1 to 5. Landed with version 6, and needing no
    schema change of their own (a reader from before them refuses files
    that use them by the unknown name):
    - `mpmd_map` (`pl.kernel` over meshes) with the mesh records
      `jax.pallas.sparsecore.VectorSubcoreMesh`/`ScalarSubcoreMesh`,
      `jax.pallas.tpu.TensorCoreMesh` and `jax.pallas.gpu.Mesh`/`WarpMesh`;
      the SparseCore kernel primitives under names of their own
      (`sparsecore.load` and so on) with the effect
      `jax.pallas.sparsecore.MemoryEffect` and the enum
      `jax.pallas.sparsecore.PackFormat`. A `run_scoped` body that closes
      over the kernel's refs is stored as an open jaxpr whose constvars are
      the equation's inputs (as JAX 0.10 writes it; 0.11+ writers refused
      it before).
    - The record types `jax.experimental.sparse.COOInfo` (`coo_matvec`'s
      and `coo_matmat`'s `spinfo`), `jax.pallas.DynamicGridDim` (a Pallas
      grid dimension sized at run time), `jax.PrimalTangentDType`
      (`jax.experimental.primal_tangent_dtype`, which `to_edtype` /
      `from_edtype` convert to and from) and `jax.DebugInfo` (JAX 0.10's
      `core_map`'s `debug_info` param; result paths not computed yet are
      the string "initial"); param codecs for the `tree` of sparse's
      generic `todense` (jaxpr_io/families/sparse.py) and `inspect_sharding`'s
      `callback` (a registered callback's name, as `buffer_callback`'s);
      the enums `jax.cudnn.AttentionLayout` and `jax.cudnn.MaskType`.
    - A Mosaic GPU TMEM ref's layout and collective flag, as a
      `jax.pallas.gpu.TMEMRefAttributes` record in `AbstractRef.kind` (its
      layout a `jax.mosaic_gpu.TMEMLayout` record; schema/jaxpr.proto).
    - The effects `jax.pallas.delay` (`pl.delay`), `jax.pallas.comms`
      (Mosaic GPU's multicast), `jax.lax.single_side_collective`
      (`jax.lax.psend`/`precv`) and `jax.no_dce` (`lax.dce_sink`).
    - The records `jax.sharding.PartitionSpec` and `jax.ManualAxisType`
      MAY carry a fourth field, the name of JAX 0.12's `UnreducedKind`
      ("max" or "min") of unreduced axes that do not sum; writers MUST
      leave it out for sum (so older files keep their bytes), and a reader
      on a release without unreduced kinds refuses it (UnsupportedError).
  * 2026-11-25, later additions to version 6 (no schema change; a version 6
    reader from before them refuses such a file, naming the param it has no
    codec for): the param codecs of `linear_call`'s `transpose_thunk` and
    `remat_opt`'s `fun_jaxpr_thunk`, each a closed jaxpr (what the thunk
    returns, its consts as the jaxpr's constants; jaxpr_io/families/thunks.py).
  * 2026-11-25, version 7: two new kinds of abstract value. `Aval.future`
    (`core.AbstractFuture`, the result of JAX's asynchronous collectives
    `ppermute_start`, `psum_invariant_start`, `all_gather_start` and the
    other `*_start` primitives of jax._src.lax.parallel, until their
    `*_done` equation): its value type and, from JAX 0.11 on, the done
    primitive that resolves it. `Aval.lin_val` (`state.AbstractLinVal`,
    the pinned linear buffers of `pin`, `unpin` and `create_linear`): its
    value type and memory space. Those primitives join the vocabulary.
    `ShapedArray.layout` holds an array's layout (JAX 0.11+; a
    `jax.experimental.layout.Layout` record), which `relayout` gives its
    output; readers on JAX releases whose arrays carry no layout (0.10)
    refuse such files. Readers of version 7 read versions 1 to 6.
  * 2026-11-25, later additions to version 7 (no schema change; a version 7
    reader from before them refuses such a file, naming the param it has no
    codec for): the param codecs of `custom_lin`'s `bwd` (its backward
    rule as jaxprs, one per pattern of zero cotangents, in the form of
    `custom_vjp_call`'s backward rules), `out_avals` and `in_zeros` (lists,
    stored as tuples; jaxpr_io/families/custom_rules/lin.py).
  * 2026-11-26, later additions to version 7 (no schema change): the
    primitive `call_hi_primitive_linearized` (the linearized hi primitive
    in the linear jaxprs of `jax.vjp`) with the params `_prim` (a hi
    primitive record, as `call_hi_primitive`'s), `residuals_tree` (a
    treedef), `nz_in_flat`, `nz_out_flat` (tuples of bools) and `has_sres`
    (a bool). Files always hold all five: writers on releases without the
    last two (JAX 0.10; 0.11.0 lacks `has_sres`) store the values under
    which their primitive behaves as it does, and their readers refuse
    other values (jaxpr_io/compat/hi_linearized.py).
  * 2026-11-26, later additions to version 7 (no schema change; a version 7
    reader from before them refuses such a file, naming the param it has no
    codec for): the param codecs of `custom_partitioning`'s `partition`,
    `propagate_user_sharding`, `infer_sharding_from_operands` and
    `sharding_rule` (each None or the name its object was registered under
    with `register_custom_partitioning`; the loading process's registered
    object supplies the value) and `in_tree` (its treedef;
    jaxpr_io/families/custom_rules/partitioning.py).
  * 2026-11-26, a later addition to version 7 (no schema change, and no
    new name: files that use it are read by every version 7 reader): a
    closure-converted jaxpr in an Equinox filter primitive's `static` param
    (`libraries.UNVALUED_CONSTS_PARAMS`; Lineax's `linear_solve` of a
    `FunctionLinearOperator`, as Optimistix's Newton steps make) is an
    open jaxpr whose constvars take the constants that the equation passes
    it as inputs, as JAX 0.10 writers already stored it. JAX 0.11+ writers
    store it so too, where its constants are the tracers of the trace that
    made it (they refused it before), and their readers attach dead
    tracers of the constvars' types (jaxpr_io/compat/dead_consts.py);
    readers check that its constvars are as many as the constants its
    `_ClosureConvert` node of the `treedef` param passes.
  * 2026-11-26, version 8: JAX 0.10's mutable hijax types. `Aval.hi_mutable`
    (`MutableHiType`: jax._src.hijax's `BoxTy` or `LogTy`, the types of
    `Box` and `Log`) and `Jaxpr.qdds`, the quasi-dynamic data of a jaxpr's
    variables that have any (`Var.initial_qdd`/`final_qdd`: what a box
    holds, as a `BoxTypeState` of leaf avals and a treedef; a log's is
    empty), which every box or log input of a jaxpr MUST have; the effect
    `jax.hijax.box` of their reads and writes. The primitives `new_box`,
    `box_get`, `box_set`, `new_log` and `log_extend` become storable
    (jaxpr_io/families/hijax/mutable.py). JAX 0.11.1 and later have no
    boxes: their readers refuse such files with a FormatError naming JAX
    0.10.2. Readers of version 8 read versions 1 to 7.
"""

from __future__ import annotations

__version__ = "0.1.0"

FORMAT_VERSION = 8
OLDEST_READABLE_FORMAT_VERSION = 1

# SHA-256 of the compiled schema descriptor (jaxpr_io/format/_proto/jaxpr.desc) that
# each format version was released with. A schema change without a new entry
# here fails tests/test_schema_version.py.
SCHEMA_FINGERPRINTS = {
    1: "6dba239941cd2638d4d9abb6663e137185d49d1d09a0ee8e26bdd8091e2c0f84",
    2: "f8f320cf553012591dbf8578f245c472cc44539786e2bdc4e5e5c57666bb4742",
    3: "e317033409d5ad8d21e0a2f6531fa503bee957b78f4e33a2934f8be6bde68530",
    4: "2e5d2d81683ce64e02a2646868570b78d1291decf2cc4fc00c48fc6a2dae2ee1",
    5: "81cc109773a083b139f9d68dc720784b724db2732c2fb8ed6ebf5871d02eb7b6",
    6: "c52b2ef5be61a42996fd493238a7a59f5eb3341cbd7062481f166a467a75e435",
    7: "1675cec0211fbe4e0d0ad4c9e8fb0c0f77ae4a11ca84930f9b7c3486fa3b3d75",
    8: "1723ab128d2fb4b20d7203e42a89c23202a633248c1a99ef605f4bd392be6d8d",
}
