"""Everything that depends on the JAX release, in one place.

jaxpr_io reads and builds JAX's internal objects (`Jaxpr`, `JaxprEqn`,
`ShapedArray`, meshes, PRNG implementations, ...), whose homes and
constructors move between JAX releases. This package is the only place that
touches `jax._src` (this module for the core, one submodule per topic); a new JAX release means editing the tables and accessors
here, not hunting through the code. The stable serialized names in the tables
are part of the file format and MUST NOT change: when JAX renames a class or a
primitive, keep the serialized name and point it at the new object (or add an
entry to `PRIMITIVE_RENAMES`).
"""

from __future__ import annotations

import importlib
from typing import Any, Callable

import jax
import jax.numpy as jnp
import jaxlib
import numpy as np
from jax._src import core
from jax._src import dtypes as jax_dtypes
from jax._src import effects as jax_effects
from jax._src import literals
from jax._src import mesh as mesh_lib
from jax._src import named_sharding
from jax._src import partition_spec
from jax._src import source_info_util
from jax._src.state import types as state_types
from jax._src import checkify as jax_checkify
from jax._src import hashable_array
from jax._src.cudnn import fused_attention_stablehlo as fused_attention
from jax._src import layout as jax_layout
from jax._src import frozen_dict
from jax.experimental.sparse import coo as sparse_coo
from jax.experimental.sparse import util as sparse_util
from jax._src import linear_util as lu
from jax._src.export import _export as export_internal
from jax._src.lax import convolution
from jax._src.lax import fft as lax_fft
from jax._src.lax import lax as lax_internal
from jax._src.lax import slicing
from jax._src.lax.control_flow import solves
from jax._src.random import prng
from jaxlib import _jax

from jaxpr_io.compat import releases
from jaxpr_io.errors import UnsupportedError

# The JAX releases with an adapter (pyproject.toml pins the same range).
SUPPORTED_JAX = releases.SUPPORTED_JAX
JAX_VERSION = jax.__version__
JAXLIB_VERSION = jaxlib.__version__

# ---------------------------------------------------------------- core types
Jaxpr = core.Jaxpr
# JAX 0.11 merged `ClosedJaxpr` into `Jaxpr` (a `Jaxpr` carries its consts;
# `ClosedJaxpr` stayed as an alias in 0.11 and is gone in 0.12). On those
# releases `ClosedJaxpr is Jaxpr`: every jaxpr is "closed" over its (possibly
# empty) consts, and whether a param holds a closed or an open jaxpr is a
# fact of the format's vocabulary (`jaxpr_io.codec.vocabulary.OPEN_JAXPR_PARAMS`),
# not of the Python type.
ClosedJaxpr = getattr(core, "ClosedJaxpr", core.Jaxpr)
MERGED_JAXPRS = ClosedJaxpr is Jaxpr
JAXPR_TYPES = (Jaxpr,) if MERGED_JAXPRS else (Jaxpr, ClosedJaxpr)
JaxprEqn = core.JaxprEqn
Var = core.Var
DropVar = core.DropVar
Literal = core.Literal
Primitive = core.Primitive
ShapedArray = core.ShapedArray
AbstractToken = core.AbstractToken
AbstractRef = state_types.AbstractRef
# Added in format version 7. `core.AbstractFuture`: an asynchronous
# collective's result between its start and done equations (JAX 0.10-0.12;
# what it holds differs: `ADAPTER.new_future`). `state.AbstractLinVal`: a
# pinned, linear buffer (`pin`, `create_linear`); None on a release without
# it, where the reader refuses such avals.
AbstractFuture = core.AbstractFuture
AbstractLinVal = getattr(state_types, "AbstractLinVal", None)
# checkify's effect: a class of jax._src.checkify in 0.10, of
# jax._src.effects from 0.11 on (re-exported by checkify).
ErrorEffect = jax_checkify.ErrorEffect
RaggedDotDimensionNumbers = lax_internal.RaggedDotDimensionNumbers
HashableArray = hashable_array.HashableArray
FrozenDict = frozen_dict.FrozenDict
# The class of `jax.numpy`'s scalar types (jnp.float32, jnp.bfloat16, ...),
# and those types by dtype (each dtype has one).
ScalarMeta = type(jnp.float32)
SCALAR_TYPES = {jnp.dtype(t.dtype): t for t in vars(jnp).values()
                if type(t) is ScalarMeta}
abstract_token = core.abstract_token
DebugInfo = lu.DebugInfo
# JAX's marker for a DebugInfo whose result paths are not computed yet.
INITIAL_RESULT_PATHS = getattr(lu, "initial_result_paths", None)
MemorySpace = core.MemorySpace
ManualAxisType = core.ManualAxisType
empty_manual_axis_type = core.empty_mat
check_jaxpr = core.check_jaxpr
definitely_equal = core.definitely_equal
jaxpr_as_fun = core.jaxpr_as_fun
no_effects = core.no_effects
# Primitives whose abstract eval gives "no effects" as an empty dict, not a
# set (`free_ref`, JAX 0.10 to 0.12). JAX's check_jaxpr compares an
# equation's effects with the inferred ones by `!=`, and frozenset() != {}:
# the reader gives their equations what JAX's tracer gives them.
DICT_NO_EFFECTS = frozenset({"free_ref"})

TypedInt = literals.TypedInt
TypedFloat = literals.TypedFloat
TypedComplex = literals.TypedComplex
TypedNdArray = literals.TypedNdArray

SourceInfo = source_info_util.SourceInfo
NameStack = source_info_util.NameStack
NameScope = source_info_util.Scope
NameTransform = source_info_util.Transform

AbstractMesh = mesh_lib.AbstractMesh
AbstractDevice = mesh_lib.AbstractDevice
Mesh = mesh_lib.Mesh
AxisType = mesh_lib.AxisType
empty_concrete_mesh = mesh_lib.empty_concrete_mesh
NamedSharding = named_sharding.NamedSharding
UnspecifiedValue = named_sharding.UnspecifiedValue
UNSPECIFIED = named_sharding.UNSPECIFIED
PartitionSpec = partition_spec.PartitionSpec
UnconstrainedSingleton = type(PartitionSpec.UNCONSTRAINED)
# How unreduced axes combine (sum, max or min: JAX 0.12's
# `jax.sharding.UnreducedKind`, a field of PartitionSpec and
# ManualAxisType); None on releases where unreduced axes always sum.
UnreducedKind = getattr(partition_spec, "UnreducedKind", None)
# Exceptions JAX raises when it validates objects a reader builds (beyond
# TypeError/ValueError): bad input, reported as a FormatError.
JAX_VALIDATION_ERRORS = (named_sharding.DuplicateSpecError,)
Device = _jax.Device

PRNGImpl = prng.PRNGImpl
prng_impls: dict[str, Any] = prng.prngs   # name -> PRNGImpl, JAX's registry


def is_prng_key_dtype(dtype) -> bool:
  return isinstance(dtype, prng.KeyTy)


# Extended dtypes (PRNG keys, Pallas semaphores, Mosaic GPU barriers).
ExtendedDType = jax_dtypes.ExtendedDType


def prng_key_dtype(impl) -> Any:
  return prng.KeyTy(impl)


def key_impl_of(dtype) -> Any:
  return dtype._impl


def wrap_key_data(data, impl):
  """A typed key array from its raw uint32 data (copies to the device)."""
  return jax.random.wrap_key_data(data, impl=impl)


def key_data(keys):
  return jax.random.key_data(keys)


def pallas_modules() -> dict[str, Any] | None:
  """Pallas's modules of dataclasses and enums, by the short name the
  format gives them ("core", and each backend's: "tpu", "triton", "gpu"),
  or None where this jaxlib has no Pallas. Backends that do not import
  here (e.g. without their bindings) are left out."""
  try:
    from jax._src.pallas import core  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  modules = {"core": core}
  for short, name in (("tpu", "jax._src.pallas.mosaic.core"),
                      ("triton", "jax._src.pallas.triton.core"),
                      ("gpu", "jax._src.pallas.mosaic_gpu.core")):
    try:
      modules[short] = importlib.import_module(name)
    except ImportError:
      continue
  return modules


def is_inexact(dtype) -> bool:
  """Whether values of `dtype` have real tangents (floating or complex)."""
  return bool(jnp.issubdtype(dtype, jnp.inexact))


def is_tracer(x) -> bool:
  return isinstance(x, core.Tracer)


def is_key_array(x) -> bool:
  return isinstance(x, prng.PRNGKeyArray)


def jax_array_types() -> tuple[type, ...]:
  from jax._src import array  # pylint: disable=g-import-not-at-top
  return (array.ArrayImpl,)


# The context's fields, in the order `_create` takes them.
_EQN_CONTEXT_FIELDS = tuple(f for f in core.JaxprEqnContext.__slots__
                            if f not in ("configs", "__weakref__"))


def new_eqn_context(**fields):
  """An interned `JaxprEqnContext` with these fields; a field that a newer JAX
  added (and the file cannot hold) takes its value in the default context."""
  default = core.current_jaxpr_eqn_context()
  return core.JaxprEqnContext._create(*(  # pylint: disable=protected-access
      fields[f] if f in fields else getattr(default, f)
      for f in _EQN_CONTEXT_FIELDS))


def new_jaxpr(constvars, invars, outvars, eqns, effects, debug_info, is_high):
  """An open jaxpr. On merged releases its constvars (no values attached)
  are plain leading invars until `make_closed` attaches values."""
  return core.Jaxpr(constvars, invars, outvars, eqns, effects, debug_info,
                    is_high)


def make_closed(jaxpr, consts):
  """The closed jaxpr of an open `jaxpr` and values for its constvars."""
  if MERGED_JAXPRS:
    return jaxpr.with_consts(list(consts))
  return core.ClosedJaxpr(jaxpr, list(consts))


def close_over_inputs(jaxpr, invars):
  """`jaxpr` (a loaded body whose leading invars are its stored constvars)
  with the equation's input variables `invars` as its constants, as JAX
  0.11+ bind Pallas's `run_scoped` (see
  jaxpr_io.codec.vocabulary.CLOSURE_FROM_INPUTS_PARAMS). JAX 0.10 keeps the body
  open: unchanged there. None if an input is not a variable or the avals
  disagree."""
  if not MERGED_JAXPRS or type(jaxpr) is not Jaxpr or jaxpr.consts or (
      not invars):
    return jaxpr
  if len(invars) > len(jaxpr.invars) or any(
      type(a) is not Var or a.aval != v.aval
      for a, v in zip(invars, jaxpr.invars)):
    return None
  return jaxpr.with_consts(list(invars))


def tensorcore_mesh_fields(mesh) -> tuple:
  """JAX 0.10's Mosaic TPU `TensorCoreMesh` (an array of `TensorCore`s and
  its axis names) as the record 0.11+ store by field name: (("axis_name",
  name), ("num_cores", n)). Only the meshes `create_tensorcore_mesh` makes
  (cores 0..n-1 along one axis) have that form."""
  from jax._src.pallas.mosaic import core as tpu_core  # pylint: disable=g-import-not-at-top
  cores = list(np.asarray(mesh.devices).reshape(-1))
  names = tuple(mesh.axis_names)
  if (len(names) != 1 or np.ndim(mesh.devices) != 1
      or [type(c) for c in cores] != [tpu_core.TensorCore] * len(cores)
      or [c.id for c in cores] != list(range(len(cores)))):
    raise UnsupportedError(
        f"TensorCoreMesh {mesh!r:.120} is not one that "
        "pltpu.create_tensorcore_mesh(axis_name, num_cores=n) makes (cores "
        "0..n-1 along one axis), the only form the format stores")
  return (("axis_name", names[0]), ("num_cores", len(cores)))


def tensorcore_mesh(axis_name: str, num_cores: int):
  """Mosaic TPU's `TensorCoreMesh` of `num_cores` cores along `axis_name`."""
  from jax._src.pallas.mosaic import core as tpu_core  # pylint: disable=g-import-not-at-top
  return tpu_core.create_tensorcore_mesh(axis_name, num_cores=num_cores)


def open_jaxpr(closed):
  """The jaxpr part of a closed jaxpr (itself on merged releases)."""
  return closed.jaxpr


def leading_vars(jaxpr, n: int):
  """The first `n` variables a stored jaxpr binds (its stored constvars):
  on merged releases an open jaxpr's constvars are leading invars."""
  if MERGED_JAXPRS:
    return jaxpr.invars[:n]
  return jaxpr.constvars


def is_closed_jaxpr(x) -> bool:
  return type(x) is ClosedJaxpr


# Whether two types are the same, weak types aside (all releases).
typematch = core.typematch


def is_jaxpr(x) -> bool:
  """An open or a closed jaxpr."""
  return type(x) in JAXPR_TYPES


def var_has_qdd(var) -> bool:
  """Whether a variable carries quasi-dynamic data (0.10 only)."""
  return (getattr(var, "initial_qdd", None) is not None
          or getattr(var, "final_qdd", None) is not None)


def new_eqn(invars, outvars, primitive, params, effects, source_info, ctx):
  # The constructor, not `new_jaxpr_eqn`: effects are stored resolved.
  return core.JaxprEqn(invars, outvars, primitive, params, effects,
                       source_info, ctx)


# ------------------------------------------------------------ pytree nodes
# JAX's own pytree-node serialization registry, filled by
# `jax.export.register_pytree_node_serialization`:
#   type -> (serialized_name, serialize_auxdata)
#   serialized_name -> (type, deserialize_auxdata, from_children)
pytree_serialization_registry = export_internal.serialization_registry
pytree_deserialization_registry = export_internal.deserialization_registry

# ------------------------------------------------------------- primitives
# Modules whose module-level `Primitive` objects form the built-in primitive
# table. Scanning a fixed list (never a module named in a file) keeps loading
# safe; a module missing from a JAX release is skipped.
PRIMITIVE_MODULES = (
    "jax._src.ad_checkpoint", "jax._src.ad_util", "jax._src.callback",
    "jax._src.core", "jax._src.custom_batching",
    "jax._src.custom_derivatives", "jax._src.custom_partitioning",
    "jax._src.debugging", "jax._src.dispatch", "jax._src.export._export",
    "jax._src.export.shape_poly", "jax._src.ffi", "jax._src.hijax",
    "jax._src.interpreters.ad", "jax._src.interpreters.batching",
    "jax._src.lax.ann", "jax._src.lax.control_flow.conditionals",
    "jax._src.lax.control_flow.loops", "jax._src.lax.control_flow.solves",
    "jax._src.lax.convolution", "jax._src.lax.eval_jaxpr",
    "jax._src.lax.fft", "jax._src.lax.lax", "jax._src.lax.linalg",
    "jax._src.lax.parallel", "jax._src.lax.scaled_dot",
    "jax._src.lax.slicing", "jax._src.lax.special",
    "jax._src.lax.windowed_reductions", "jax._src.pjit",
    "jax._src.random.core", "jax._src.random.prng",
    "jax._src.random.philox2x32", "jax._src.random.philox4x32",
    "jax._src.random.threefry2x32", "jax._src.random.threefry4x32",
    "jax._src.shard_map", "jax._src.state.discharge",
    "jax._src.state.primitives", "jax._src.cudnn.fused_attention_stablehlo",
    "jax._src.cudnn.scaled_matmul_stablehlo", "jax._src.xla_metadata",
    "jax._src.checkify", "jax._src.shard_alike",  # shard_alike: before 0.12
    "jax.experimental.sparse._lowerings", "jax.experimental.sparse.api",
    "jax.experimental.sparse.bcoo", "jax.experimental.sparse.bcsr",
    "jax.experimental.sparse.coo", "jax.experimental.sparse.csr",
    "jax.experimental.sparse.linalg",
    "jax._src.pallas.pallas_call", "jax._src.pallas.primitives",
    "jax._src.pallas.core", "jax._src.pallas.mosaic.primitives",
    "jax._src.pallas.triton.primitives",
    "jax._src.pallas.mosaic_gpu.primitives", "jax._src.pallas.mosaic_gpu.core",
    "jax._src.program_order",  # 0.12; 0.11 defines it in jax._src.pjit
    # Key-reuse checking (consume, assert_consumed_value) and the multihost
    # data movement helpers: JAX's own, in jax.experimental.
    "jax.experimental.key_reuse._core", "jax.experimental.multihost_utils",
    "jax.experimental.scheduling_groups",  # 0.10's xla_metadata_call
    "jax._src.buffer_callback", "jax._src.compute_on",
    "jax._src.cudnn.fusion", "jax.experimental.fused",
    "jax._src.thunky.thunky",  # 0.12: programs of the XLA:GPU thunk executor
    "jax.experimental.rnn",  # cuDNN's LSTM: trusted files only (trust.py)
    # Pallas's einshape (its lowered form) and the identity that TPU
    # interpret mode binds on a kernel's operands.
    "jax._src.pallas.einshape",
    "jax._src.pallas.mosaic.interpret.interpret_pallas_call",
    # The Pallas fuser's pack_dtype/unpack_dtype (user fusion dtypes,
    # jaxpr_io/families/pallas/fuser.py).
    "jax._src.pallas.fuser.fusible_dtype",
    # Mosaic TPU's software pipeline (pltpu.emit_pipeline under
    # jax_use_emit_pipeline_primitive; jaxpr_io/compat/pallas_pipeline.py).
    "jax._src.pallas.mosaic.pipeline",
    # Kernels over meshes (`pl.kernel`, `plgpu.kernel`, SparseCore) and the
    # SparseCore kernel primitives.
    "jax._src.pallas.mpmd", "jax._src.pallas.mosaic.sc_primitives",
)

# Primitives of the modules above that stay out of the table: a file must
# never choose native code (the trust model), and these carry it.
EXCLUDED_PRIMITIVES = frozenset({
    # Triton's inline PTX assembly (0.10 names it with a `_p`).
    "elementwise_inline_asm", "elementwise_inline_asm_p",
    # thunky's PTX kernel launch (the PTX text is in its params).
    "thunky.ptx_kernel",
    # Mosaic GPU's inline kernels: a Python function that emits MLIR while
    # lowering (0.10 and 0.11 name it with a `_p`).
    "inline_mgpu", "inline_mgpu_p",
    # Mosaic GPU's lowering binds it while lowering `sign`; no traced program
    # holds it.
    "_copysign",
    # JAX 0.10's fusible_dtype module imports the fuser's `fusible`, whose
    # `func` is the user's Python function (tests/support/primitive_census.py).
    "fusible",
    # Bound only inside the jaxprs that emit_pipeline's lowering (and from
    # 0.11 its discharge rule and TPU interpret mode) build and consume at
    # once, never in a traced program (tests/support/primitive_census.py).
    "pipeline_body",
})

# Primitives whose JAX name is another JAX primitive's too: (module, JAX
# name) -> the name the format gives it. The names are the vocabulary's
# (schema/VOCABULARY.md) and stay the same on every release.
MODULE_PRIMITIVE_NAMES = {
    ("jax._src.pallas.mosaic_gpu.primitives", "load"): "mosaic_gpu.load",
    ("jax._src.pallas.mosaic_gpu.primitives", "store"): "mosaic_gpu.store",
    ("jax._src.pallas.mosaic_gpu.primitives", "semaphore_signal"):
        "mosaic_gpu.semaphore_signal",
    ("jax._src.pallas.mosaic_gpu.primitives", "semaphore_wait"):
        "mosaic_gpu.semaphore_wait",
    # SparseCore's kernel primitives: several share their JAX names with
    # others (load, swap, gather, scatter, bitcast, ...), so all of them are
    # "sparsecore.<JAX name>", whichever clash on a given release. `unique`
    # is JAX 0.10's, `scan_count` 0.11's and later.
    **{("jax._src.pallas.mosaic.sc_primitives", name): f"sparsecore.{name}"
       for name in ("all_reduce_ffs", "all_reduce_population_count",
                    "barrier", "bitcast", "gather", "load", "masked_cummax",
                    "masked_cummin", "masked_cumsum", "masked_sort", "pack",
                    "parallel_loop", "sc_fetch_and_add", "scan_count",
                    "scatter", "swap", "unique", "unpack")},
}

# Serialized primitive names written by older JAX releases -> today's name.
PRIMITIVE_RENAMES = {
    "pjit": "jit",
}


def builtin_primitives() -> dict[str, Any]:
  """name -> Primitive for every primitive of the modules above."""
  table: dict[str, Any] = {}
  for module_name in PRIMITIVE_MODULES:
    try:
      module = importlib.import_module(module_name)
    except ImportError:
      continue
    for value in vars(module).values():
      if (isinstance(value, core.Primitive)
          and value.name not in EXCLUDED_PRIMITIVES):
        name = MODULE_PRIMITIVE_NAMES.get((module_name, value.name),
                                          value.name)
        other = table.setdefault(name, value)
        if other is not value:
          raise RuntimeError(
              f"two JAX primitives are named {name!r} (one in "
              f"{module_name}); add it to compat.MODULE_PRIMITIVE_NAMES")
  return table


# Params whose values are Python callables that JAX can rebuild from the
# equation's other params: (primitive name, param name) -> rule(params).
# jaxpr_io.codec.registry registers each as an equation param codec that stores
# nothing and rebuilds the value on load.
def _reduce_computation(params):
  closed = params["jaxpr"]
  fun = core.jaxpr_as_fun(closed)

  def computation(x, y):
    flat_x, _ = jax.tree_util.tree_flatten(x)
    flat_y, tree = jax.tree_util.tree_flatten(y)
    return jax.tree_util.tree_unflatten(tree, fun(*flat_x, *flat_y))
  computation.__name__ = "reduce_computation_from_jaxpr"
  return computation


DERIVED_PARAMS: dict[tuple[str, str], Callable[[dict], Any]] = {
    ("reduce", "computation"): _reduce_computation,
}

# ------------------------------------------------------------- enums
# Stable serialized name -> enum class. A member is stored by its name.
ENUMS: dict[str, type] = {
    "jax.lax.Precision": lax_internal.Precision,
    "jax.lax.RoundingMethod": lax_internal.RoundingMethod,
    "jax.lax.RandomAlgorithm": lax_internal.RandomAlgorithm,
    "jax.lax.DotAlgorithmPreset": lax_internal.DotAlgorithmPreset,
    "jax.lax.FftType": lax_fft.FftType,
    "jax.lax.GatherScatterMode": slicing.GatherScatterMode,
    "jax.sharding.AxisType": mesh_lib.AxisType,
    "jax.MemorySpace": core.MemorySpace,
    "jaxlib.ArrayCopySemantics": _jax.ArrayCopySemantics,
    # cuDNN attention (jax.nn.dot_product_attention(implementation="cudnn")).
    "jax.cudnn.AttentionLayout": fused_attention.AttentionLayout,
    "jax.cudnn.MaskType": fused_attention.MaskType,
}

# ------------------------------------------------------------- NamedTuples
# Stable serialized name -> NamedTuple class, stored field by field in the
# class's `_fields` order.
NAMED_TUPLES: dict[str, type] = {
    "jax.lax.GatherDimensionNumbers": slicing.GatherDimensionNumbers,
    "jax.lax.ScatterDimensionNumbers": slicing.ScatterDimensionNumbers,
    "jax.lax.ConvDimensionNumbers": convolution.ConvDimensionNumbers,
    "jax.lax.LinearSolveTuple": solves._LinearSolveTuple,  # pylint: disable=protected-access
    # Added in format version 4.
    "jax.experimental.sparse.SparseInfo": sparse_util.SparseInfo,
    # Added in format version 5, without a schema change (2026-11-25).
    "jax.experimental.sparse.COOInfo": sparse_coo.COOInfo,
}

# jax.experimental.primal_tangent_dtype's extended element type.
PrimalTangentDType = jax_dtypes.PrimalTangentDType

# ---------------------------------------------------------- futures
def _future_dones() -> dict[str, Any]:
  """Stable name -> the primitive that resolves an AbstractFuture (the
  `*_done` primitives of jax._src.lax.parallel this release has; format
  version 7). The names are the vocabulary's and MUST NOT change."""
  parallel = importlib.import_module("jax._src.lax.parallel")
  names = ("all_gather_done", "psum_done", "reduce_scatter_done",
           "all_to_all_done", "ppermute_done",
           "pbroadcast_done")  # pbroadcast: JAX 0.10 only
  return {name: getattr(parallel, name + "_p") for name in names
          if hasattr(parallel, name + "_p")}


FUTURE_DONES: dict[str, Any] = _future_dones()


# -------------------------------------------------------------- layouts
_AUTO_LAYOUT = jax_layout.AutoLayout


# Whether this release's arrays carry a layout (`ShapedArray.layout`, JAX
# 0.11+, which `relayout` sets; format version 7).
ARRAYS_HAVE_LAYOUT = "layout" in getattr(core.ShapedArray, "__slots__", ())
Layout = jax_layout.Layout


def aval_layout(aval):
  """The layout a ShapedArray carries (`ShapedArray.layout`, JAX 0.11+, set
  by `relayout`), or None where it carries the default (AutoLayout) or the
  release has no such field."""
  layout = getattr(aval, "layout", _AUTO_LAYOUT)
  return None if layout is _AUTO_LAYOUT else layout


# ------------------------------------------------------------- effects
# Effects that are singletons: stable name -> the instance.
SINGLETON_EFFECTS: dict[str, Any] = {}
for _name, _path in (("jax.debug", "jax._src.debugging:debug_effect"),
                     ("jax.ordered_debug",
                      "jax._src.debugging:ordered_debug_effect"),
                     ("jax.io_callback.ordered",
                      "jax._src.callback:_OrderedIOEffect"),
                     ("jax.io_callback.unordered",
                      "jax._src.callback:_IOEffect"),
                     ("jax.internal_mutable_array",
                      "jax._src.core:internal_mutable_array_effect"),
                     ("jax.key_reuse.consume",
                      "jax.experimental.key_reuse._core:consume_effect"),
                     ("jax.key_reuse.assert",
                      "jax.experimental.key_reuse._core:assert_effect"),
                     ("jax.buffer_callback",
                      "jax._src.buffer_callback:_BufferCallbackEffect"),
                     # Mosaic GPU kernels' memory ordering, WGMMA pipeline
                     # and (0.12) programmatic dependent launch.
                     ("jax.pallas.gpu.memory",
                      "jax._src.pallas.mosaic_gpu.core:_memory_effect"),
                     ("jax.pallas.gpu.wgmma_pipeline",
                      "jax._src.pallas.mosaic_gpu.core:_wgmma_pipeline_effect"),
                     ("jax.pallas.gpu.pdl",
                      "jax._src.pallas.mosaic_gpu.core:_pdl_effect"),
                     # Mosaic TPU kernels' PRNG state, traces and MXU.
                     ("jax.pallas.tpu.prng",
                      "jax._src.pallas.mosaic.primitives:prng_effect"),
                     ("jax.pallas.tpu.trace",
                      "jax._src.pallas.mosaic.primitives:trace_effect"),
                     ("jax.pallas.tpu.mxu",
                      "jax._src.pallas.mosaic.primitives:mxu_effect"),
                     ("jax.pallas.triton.barrier",
                      "jax._src.pallas.triton.primitives:barrier_effect"),
                     # Pallas semaphore signals and waits.
                     ("jax.pallas.semaphore",
                      "jax._src.pallas.primitives:sem_effect"),
                     # `pl.delay`'s sleep, ordered within a kernel.
                     ("jax.pallas.delay",
                      "jax._src.pallas.primitives:delay_effect"),
                     # Communication between devices (Mosaic GPU's
                     # multimem stores and multicast semaphore signals).
                     ("jax.pallas.comms",
                      "jax._src.pallas.core:comms_effect"),
                     # One-sided sends and receives between devices
                     # (`jax.lax.psend`/`precv`), which must stay in order.
                     ("jax.lax.single_side_collective",
                      "jax._src.lax.parallel:single_side_collective_effect"),
                     # Orders thunky's side-effecting thunks (0.12).
                     ("jax.thunky", "jax._src.thunky.thunky:thunk_effect"),
                     # lax.dce_sink's: keeps its operand from dead-code
                     # elimination.
                     ("jax.no_dce", "jax._src.lax.lax:no_dce_effect"),
                     # Reads and writes of JAX 0.10's boxes and logs (one
                     # object: hijax's `log_effect` is `box_effect`).
                     ("jax.hijax.box", "jax._src.hijax:box_effect")):
  _module_name, _attr = _path.split(":")
  try:
    _effect = getattr(importlib.import_module(_module_name), _attr)
  except (ImportError, AttributeError):
    continue
  SINGLETON_EFFECTS[_name] = _effect

# Effect classes with fields: stable name -> (class, to_fields, from_fields).
NamedAxisEffect = core.NamedAxisEffect
JaxprInputEffect = jax_effects.JaxprInputEffect


def _state_effect_types() -> dict[str, type]:
  try:
    from jax._src.state import types as state_types  # pylint: disable=g-import-not-at-top
  except ImportError:
    return {}
  return {"jax.state.ReadEffect": state_types.ReadEffect,
          "jax.state.WriteEffect": state_types.WriteEffect,
          "jax.state.AccumEffect": state_types.AccumEffect}


# Effects tied to an input (`JaxprInputEffect`): stable name -> class.
INPUT_EFFECTS: dict[str, type] = _state_effect_types()


def weak_jax_array(x):
  """`x` (a jax.Array) marked weakly typed, as JAX's tracer would."""
  return lax_internal._convert_element_type(x, weak_type=True)  # pylint: disable=protected-access


# ---------------------------------------------------------------- adapter
# The one object that maps this release's primitive names and params to the
# format's vocabulary and back (jax_0_10.py, jax_0_11.py, jax_0_12.py,
# chosen by releases.py).
ADAPTER = releases.adapter_for(JAX_VERSION)


def _custom_vmap_tree_registry():
  """The pytree registry of `custom_vmap_call`'s `in_tree`: JAX 0.12's
  custom_vmap builds it in the tracing registry (and its JVP rule requires
  that), earlier releases in the default one (None)."""
  from jax._src import custom_batching  # pylint: disable=g-import-not-at-top
  from jax._src import tree_util  # pylint: disable=g-import-not-at-top
  if "treedef_tuple_tracing_registry" in vars(custom_batching):
    return tree_util.tracing_registry
  return None


CUSTOM_VMAP_TREE_REGISTRY = _custom_vmap_tree_registry()


def _custom_partitioning():
  """(the `custom_partitioning` class, the pytree registry of its
  equations' `in_tree`): JAX 0.12 flattens the arguments in the tracing
  registry, earlier releases in the default one (None)."""
  from jax._src import custom_partitioning  # pylint: disable=g-import-not-at-top
  from jax._src import tree_util  # pylint: disable=g-import-not-at-top
  cls = custom_partitioning.custom_partitioning
  if "tracing_registry" in cls.__call__.__code__.co_names:
    return cls, tree_util.tracing_registry
  return cls, None


CustomPartitioning, CUSTOM_PARTITIONING_TREE_REGISTRY = _custom_partitioning()
