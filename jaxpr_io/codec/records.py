"""Record codecs for JAX's structured param values that are not NamedTuples.

Each codec is an `encode_X`/`decode_X` pair registered under a stable name.
The fields each codec writes are listed in its docstring; together with
`compat.tables.NAMED_TUPLES` this is the list of record types of format version 1.

Shardings, devices and meshes have their own module, mesh_records.py.

Decoders validate every field before it reaches a JAX or XLA constructor:
some of these (device lists, partition canonicalization) are C++ that aborts
the process on input JAX's own tracing never produces (a mesh without
devices, a partition that is not a string). A bad field is a FormatError
naming the record type and the field.
"""

from __future__ import annotations

import jax
import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import symbolic
from jaxpr_io.errors import FormatError, UnsupportedError
from jaxpr_io.codec import mesh_records  # noqa: F401  (registers the sharding records)
from jaxpr_io.codec.registry import register_param_codec
from jaxpr_io.codec.record_fields import fields as _fields, is_int as _is_int





def encode_prng_impl(impl) -> tuple:
  """Fields: (name,). The implementation must be in JAX's PRNG registry."""
  if compat.prng_impls.get(impl.name) is not impl:
    raise UnsupportedError(
        f"PRNG implementation {impl.name!r} is not in JAX's PRNG registry; "
        "register it with jax._src.prng.register_prng before saving")
  return (impl.name,)


def decode_prng_impl(fields):
  (name,) = _fields("jax.random.PRNGImpl", fields, ("name",))
  if type(name) is not str:
    raise FormatError(f"jax.random.PRNGImpl: name {name!r} is not a string")
  impl = compat.prng_impls.get(name)
  if impl is None:
    raise FormatError(f"PRNG implementation {name!r} is not registered in "
                      f"this process (known: {sorted(compat.prng_impls)})")
  return impl


def _int_tuple(record: str, name: str, value) -> tuple:
  if type(value) is not tuple or not all(_is_int(v) and v >= 0 for v in value):
    raise FormatError(f"{record}: {name} {value!r} is not a tuple of "
                      "dimension numbers"[:500])
  return value


def encode_ragged_dot_dimension_numbers(dn) -> tuple:
  """Fields: (dot_dimension_numbers: ((lhs_contracting, rhs_contracting),
  (lhs_batch, rhs_batch)), lhs_ragged_dimensions, rhs_group_dimensions),
  each innermost entry a tuple of dimension numbers."""
  return (dn.dot_dimension_numbers, dn.lhs_ragged_dimensions,
          dn.rhs_group_dimensions)


def decode_ragged_dot_dimension_numbers(fields):
  record = "jax.lax.RaggedDotDimensionNumbers"
  dot, ragged, group = _fields(record, fields, (
      "dot_dimension_numbers", "lhs_ragged_dimensions",
      "rhs_group_dimensions"))
  if type(dot) is not tuple or len(dot) != 2 or not all(
      type(pair) is tuple and len(pair) == 2 for pair in dot):
    raise FormatError(f"{record}: dot_dimension_numbers {dot!r} is not "
                      "((contracting, contracting), (batch, batch))"[:500])
  for pair in dot:
    for dims in pair:
      _int_tuple(record, "dot_dimension_numbers", dims)
  return compat.RaggedDotDimensionNumbers(
      dot, _int_tuple(record, "lhs_ragged_dimensions", ragged),
      _int_tuple(record, "rhs_group_dimensions", group))


def encode_hashable_array(value) -> tuple:
  """Fields: (val: numpy array). JAX's read-only array wrapper for array
  attributes (`lax.composite`)."""
  return (value.val,)


def decode_hashable_array(fields):
  (val,) = _fields("jax.HashableArray", fields, ("val",))
  if type(val) is not np.ndarray:
    raise FormatError(f"jax.HashableArray: val is a {type(val).__name__}, "
                      "not a numpy array")
  return compat.HashableArray(val)


def encode_frozen_dict(value) -> tuple:
  """Fields: the (key, value) items, in the dict's order. JAX's immutable
  dict (Pallas compiler flags)."""
  return tuple(value.items())


def decode_frozen_dict(fields):
  if type(fields) is not tuple or not all(
      type(item) is tuple and len(item) == 2 for item in fields):
    raise FormatError("jax.FrozenDict: the fields are not (key, value) "
                      "items")
  items = dict(fields)
  if len(items) != len(fields):
    raise FormatError("jax.FrozenDict: a key is given twice")
  return compat.FrozenDict(items)


def encode_scalar_type(value) -> tuple:
  """Fields: (dtype). A `jax.numpy` scalar type such as `jnp.bfloat16`
  (Mosaic TPU's `stochastic_round` target)."""
  return (np.dtype(value.dtype),)


def decode_scalar_type(fields):
  (dtype,) = _fields("jax.numpy.scalar_type", fields, ("dtype",))
  scalar_type = compat.SCALAR_TYPES.get(dtype) if isinstance(
      dtype, np.dtype) else None
  if scalar_type is None:
    raise FormatError(f"jax.numpy.scalar_type: {dtype!r:.80} is not the "
                      "dtype of a jax.numpy scalar type")
  return scalar_type


def encode_list(value) -> tuple:
  """A Python list: its items (static pytree data holds lists, e.g.
  Equinox's `Static` wrapper and closure-converted functions)."""
  return tuple(value)


def decode_list(fields):
  if type(fields) is not tuple:
    raise FormatError("builtins.list: the fields are not a tuple")
  return list(fields)


def encode_shape_dtype_struct(value) -> tuple:
  """(shape, dtype, weak_type) of a `jax.ShapeDtypeStruct`, then its memory
  space (a `jax.MemorySpace`, as 0.12 sets under tracing) when it has one.
  One with a sharding, a layout, a manual axis type or a ref flag has more
  than the record holds: refused."""
  extra = [name for name, default in _SDS_DEFAULTS
           if getattr(value, name, default) is not default
           and getattr(value, name, default) != default]
  if extra:
    raise UnsupportedError(
        f"the jax.ShapeDtypeStruct {value} sets {', '.join(extra)}, which "
        "cannot be stored; only its shape, dtype and weak_type can")
  fields = (tuple(value.shape), value.dtype, bool(value.weak_type))
  memory_space = getattr(value, "_memory_space", None)
  if memory_space is None:
    return fields
  if type(memory_space) is not compat.MemorySpace:
    raise UnsupportedError(f"the jax.ShapeDtypeStruct {value} has memory "
                           f"space {memory_space!r}, which cannot be stored")
  return fields + (memory_space,)


# Fields of a ShapeDtypeStruct the record leaves out, with their defaults
# (JAX releases without a field report the default).
_SDS_DEFAULTS = (("sharding", None), ("_dll", None), ("manual_axis_type", None),
                 ("is_ref", False))
_SDS_FIELDS = ("shape", "dtype", "weak_type")


def decode_shape_dtype_struct(fields):
  extra = {}
  if type(fields) is tuple and len(fields) == 4:
    if type(fields[3]) is not compat.MemorySpace:
      raise FormatError("jax.ShapeDtypeStruct: the memory space is not a "
                        "jax.MemorySpace")
    if "_memory_space" not in getattr(jax.ShapeDtypeStruct, "__slots__", ()):
      raise FormatError("jax.ShapeDtypeStruct: this JAX's has no memory "
                        "space; load the file with the JAX that wrote it")
    extra["_memory_space"] = fields[3]
    fields = fields[:3]
  shape, dtype, weak_type = _fields("jax.ShapeDtypeStruct", fields,
                                    _SDS_FIELDS)
  if type(shape) is not tuple or not all(
      (_is_int(d) and d >= 0) or type(d) is symbolic.DimExpr
      for d in shape):
    raise FormatError(f"jax.ShapeDtypeStruct: shape {shape!r:.200} is not a "
                      "tuple of dimensions")
  if not isinstance(dtype, np.dtype) or type(weak_type) is not bool:
    raise FormatError("jax.ShapeDtypeStruct: dtype or weak_type has the "
                      "wrong type")
  return jax.ShapeDtypeStruct(shape, dtype, weak_type=weak_type, **extra)


_PRIMAL_TANGENT_FIELDS = ("primal_dtype", "tangent_dtype", "name")


def encode_primal_tangent_dtype(dtype) -> tuple:
  return (dtype.primal_dtype, dtype.tangent_dtype, dtype.name)


def decode_primal_tangent_dtype(fields):
  # jax.experimental.primal_tangent_dtype's extended dtype: the one that
  # convert_element_type converts to and from (to_edtype, from_edtype).
  primal, tangent, name = _fields("jax.PrimalTangentDType", fields,
                                  _PRIMAL_TANGENT_FIELDS)
  if not (isinstance(primal, np.dtype) and isinstance(tangent, np.dtype)
          and type(name) is str):
    raise FormatError("jax.PrimalTangentDType: expected two numpy dtypes "
                      "and a name")
  return compat.PrimalTangentDType(primal, tangent, name)


_DEBUG_INFO_FIELDS = ("traced_for", "func_src_info", "arg_names",
                      "result_paths")
# compat.INITIAL_RESULT_PATHS (result paths not computed yet) is stored as
# this string.
_INITIAL = "initial"


def encode_debug_info(info) -> tuple:
  """A `DebugInfo` as a param (JAX 0.10's `core_map`): what a jaxpr's
  `debug_info` message holds, with result paths resolved (JAX computes them
  lazily)."""
  paths = info.result_paths
  if paths is compat.INITIAL_RESULT_PATHS:
    paths = _INITIAL  # not computed yet (core_map's, always)
  elif paths is not None and not isinstance(paths, tuple):
    paths = tuple(paths())
  return (info.traced_for, info.func_src_info,
          None if info.arg_names is None else tuple(info.arg_names), paths)


def decode_debug_info(fields):
  traced_for, src, arg_names, paths = _fields("jax.DebugInfo", fields,
                                              _DEBUG_INFO_FIELDS)
  def strings(v, optional_items):
    return type(v) is tuple and all(
        type(x) is str or (optional_items and x is None) for x in v)
  if not (type(traced_for) is str and (src is None or type(src) is str)
          and (arg_names is None or strings(arg_names, True))
          and (paths is None or strings(paths, False) or (
              paths == _INITIAL and compat.INITIAL_RESULT_PATHS is not None))):
    raise FormatError("jax.DebugInfo: expected (str, str or None, tuple of "
                      "str or None, tuple of str or None)")
  if paths == _INITIAL:
    paths = compat.INITIAL_RESULT_PATHS
  return compat.DebugInfo(traced_for, src, arg_names, paths)


_CODECS = (
    (compat.PRNGImpl, "jax.random.PRNGImpl", encode_prng_impl,
     decode_prng_impl),
    # Added in format version 4.
    (compat.RaggedDotDimensionNumbers, "jax.lax.RaggedDotDimensionNumbers",
     encode_ragged_dot_dimension_numbers, decode_ragged_dot_dimension_numbers),
    (compat.HashableArray, "jax.HashableArray", encode_hashable_array,
     decode_hashable_array),
    (compat.FrozenDict, "jax.FrozenDict", encode_frozen_dict,
     decode_frozen_dict),
    (compat.ScalarMeta, "jax.numpy.scalar_type", encode_scalar_type,
     decode_scalar_type),
    (list, "builtins.list", encode_list, decode_list),
    (jax.ShapeDtypeStruct, "jax.ShapeDtypeStruct", encode_shape_dtype_struct,
     decode_shape_dtype_struct),
    (compat.PrimalTangentDType, "jax.PrimalTangentDType",
     encode_primal_tangent_dtype, decode_primal_tangent_dtype),
    (compat.DebugInfo, "jax.DebugInfo", encode_debug_info, decode_debug_info),
)
for _cls, _name, _encode, _decode in _CODECS:
  register_param_codec(_cls, name=_name, encode=_encode, decode=_decode)
