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

import functools

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
from jax._src import hashable_array
from jax._src import layout as jax_layout
from jax._src import frozen_dict
from jax._src import linear_util as lu
from jax._src.export import _export as export_internal
from jax._src.lax import lax as lax_internal
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
# fact of the format's vocabulary (`jaxpr_io.format.vocabulary.OPEN_JAXPR_PARAMS`),
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
# Ref transforms (Pallas: Mosaic GPU's tiling and swizzling; a scratch ref
# with transforms).
StateTransform = state_types.Transform
TransformedRef = state_types.TransformedRef
# Added in format version 7. `core.AbstractFuture`: an asynchronous
# collective's result between its start and done equations (JAX 0.10-0.12;
# what it holds differs: `ADAPTER.new_future`). `state.AbstractLinVal`: a
# pinned, linear buffer (`pin`, `create_linear`); None on a release without
# it, where the reader refuses such avals.
AbstractFuture = core.AbstractFuture
AbstractLinVal = getattr(state_types, "AbstractLinVal", None)
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
# The memory spaces a jax.Array's aval can have: those of the memory kinds
# of its sharding (`core.mem_kind_to_space`, whose inverse JAX calls where
# a program's inputs and outputs cross a jit boundary). `Any` is not one:
# it is for values inside `jax.experimental.fused` computations.
ARRAY_MEMORY_SPACES = frozenset(
    core.mem_kind_to_space(kind) for kind in (None, "device", "pinned_host"))
ManualAxisType = core.ManualAxisType
empty_manual_axis_type = core.empty_mat


def check_jaxpr(jaxpr) -> None:
  """`jax.core.check_jaxpr` without its costly error message: JAX names
  the variables of a failing jaxpr by printing all of it first, then prints
  up to 20 of its equations around the error, each with every sub-jaxpr it
  calls inlined; under a chain of shared calls that is megabytes of text
  and a minute (a 5 KB hostile file). Here variables are named as the
  failing equation is printed, and the message is JAX's first paragraph:
  the error and that equation, a sub-jaxpr used more than once printed as
its name (JAX 0.10 to 0.12 share `_check_jaxpr`)."""
  @functools.cache
  def ctx_factory():
    # A jaxpr used more than once prints as a name (JAX's printer's
    # convention), each distinct jaxpr walked once.
    ctx = core.JaxprPpContext()
    uses: dict = {}
    seen, stack = set(), [jaxpr]
    while stack:
      j = stack.pop()
      if j in seen:
        continue
      seen.add(j)
      for eqn in j.eqns:
        for sub in core.jaxprs_in_params(eqn.params):
          uses[sub] = uses.get(sub, 0) + 1
          stack.append(sub)
    for i, sub in enumerate(s for s, n in uses.items() if n > 1):
      ctx.shared_jaxpr_names.add(f"shared{i}")
      ctx.shared_jaxprs[sub] = f"shared{i}"
    return ctx, core.JaxprPpSettings()
  try:
    core._check_jaxpr(ctx_factory, jaxpr)  # pylint: disable=protected-access
  except core.JaxprTypeError as e:
    raise core.JaxprTypeError(str(e.args[0])) from None

typecompat = core.typecompat
# Primitives with a typing rule of their own that checks their sub-jaxprs
# (through `core._check_call` or `check_jaxpr`); a primitive without a rule
# of its own has them checked by `check_jaxpr` too (`check_eqn`). The other
# rules (scan, while, cond, custom_jvp_call, custom_vjp_call, pallas_call,
# closed_call, ...) look at their sub-jaxprs' input and output types only.
_RULES_THAT_CHECK_SUB_JAXPRS = frozenset({"jit", "pjit", "shard_map",
                                          "core_map"})


def wrapped_function(value):
  """The function inside a `linear_util.WrappedFun` (how custom_jvp_call and
  custom_vjp_call hold their rules), else None."""
  return value.f if type(value) is lu.WrappedFun else None


def check_jaxpr_checks_sub_jaxprs(primitive) -> bool:
  """Whether JAX's check_jaxpr type-checks the sub-jaxprs in the params of
  an equation of `primitive` (JAX 0.10 to 0.12)."""
  return (primitive not in core.custom_typechecks
          or primitive.name in _RULES_THAT_CHECK_SUB_JAXPRS)
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
  jaxpr_io.format.vocabulary.CLOSURE_FROM_INPUTS_PARAMS). JAX 0.10 keeps the body
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




# jax.experimental.primal_tangent_dtype's extended element type.
PrimalTangentDType = jax_dtypes.PrimalTangentDType



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
