"""JAX's objects that the format names, by stable name: the primitive
table, enums, NamedTuples, singleton effects and the primitives that resolve
futures.

These tables are built on first use, not when jaxpr_io is imported, and
import a JAX module only when a program or a file needs it: the writer
looks among the modules a program's objects come from (already imported),
the reader imports the module of a name a file holds. The stable names are
part of the format and MUST NOT change; when JAX renames a class or a
primitive, keep the name and point it at the new object (or add an entry to
`PRIMITIVE_RENAMES`).
"""

from __future__ import annotations

from collections.abc import Mapping
import importlib
import sys
from typing import Any, Callable

import jax
from jax._src import core
from jax._src import mesh as mesh_lib
from jax._src.cudnn import fused_attention_stablehlo as fused_attention
from jax._src.lax import convolution
from jax._src.lax import fft as lax_fft
from jax._src.lax import lax as lax_internal
from jax._src.lax import slicing
from jax._src.lax.control_flow import solves
from jaxlib import _jax

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


def builtin_primitives(modules=PRIMITIVE_MODULES, *,
                       imported_only: bool = False) -> dict[str, Any]:
  """name -> Primitive for every primitive of `modules` (a part of
  PRIMITIVE_MODULES). With `imported_only`, only the modules this process
  has imported already are scanned (no import: a live program's primitives
  are all in imported modules); otherwise each is imported, and a module
  missing from this release is skipped."""
  table: dict[str, Any] = {}
  for module_name in modules:
    module = sys.modules.get(module_name)
    if module is None and not imported_only:
      try:
        module = importlib.import_module(module_name)
      except ImportError:
        continue
    if module is None:
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
              f"{module_name}); add it to compat.tables.MODULE_PRIMITIVE_NAMES")
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

# The strings that name a `Precision` (its `_missing_` looks them up), as
# callers may pass them where a precision is taken.
PRECISION_NAMES = frozenset(
    k for k in lax_internal._precision_strings if type(k) is str)  # pylint: disable=protected-access

# ------------------------------------------------------------- enums
# Stable serialized name -> enum class. A member is stored by its name.
ENUMS: dict[str, type] = {
    "jax.lax.Precision": lax_internal.Precision,
    # The unary ops' `accuracy` (jax.scipy.special's erfcx, ndtri, kl_div
    # bind exp with AccuracyMode.HIGHEST on 0.12).
    "jax.lax.AccuracyMode": lax_internal.AccuracyMode,
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
}


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


# ------------------------------------------------------------- effects
# Effects that are singletons: stable name -> where the instance lives
# ("module:attribute"). The names MUST NOT change.
SINGLETON_EFFECT_PATHS: dict[str, str] = dict((("jax.debug", "jax._src.debugging:debug_effect"),
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
                     ("jax.hijax.box", "jax._src.hijax:box_effect")))


class _SingletonEffects(Mapping):
  """Stable name -> the singleton effect, for the effects this release has.

  A lookup by name imports that effect's module (a file names it); `name_of`
  finds an effect's name among the modules imported already (an effect
  object exists only once its module is). Iterating imports every module."""

  def __init__(self, paths: dict[str, str]):
    self._paths = paths
    self._found: dict[str, Any] = {}
    self._names: dict[int, str] = {}

  def _find(self, name: str, import_: bool):
    if name in self._found:
      return self._found[name]
    path = self._paths.get(name)
    if path is None:
      return None
    module_name, attr = path.split(":")
    module = sys.modules.get(module_name)
    if module is None and import_:
      try:
        module = importlib.import_module(module_name)
      except ImportError:
        module = None
    effect = getattr(module, attr, None) if module is not None else None
    if effect is not None:
      self._found[name] = effect
      self._names[id(effect)] = name
    return effect

  def __getitem__(self, name: str):
    effect = self._find(name, import_=True)
    if effect is None:
      raise KeyError(name)
    return effect

  def __iter__(self):
    return iter([n for n in self._paths if self._find(n, True) is not None])

  def __len__(self) -> int:
    return sum(1 for _ in self)

  def name_of(self, effect) -> str | None:
    """The stable name of a singleton effect, or None."""
    name = self._names.get(id(effect))
    if name is None:
      for n in self._paths:
        self._find(n, import_=False)
      name = self._names.get(id(effect))
    return name


SINGLETON_EFFECTS = _SingletonEffects(SINGLETON_EFFECT_PATHS)
