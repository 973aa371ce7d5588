"""Element types: numpy dtype <-> schema `DType`, written once.

`DTYPE_TO_ENUM` is the one table; `ENUM_TO_DTYPE` is derived from it. Types
that ml_dtypes does not provide in this process are left out, so a file that
uses one fails with a FormatError naming it.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from jax import dtypes as jax_dtypes

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.errors import FormatError, UnsupportedError

_NAMES = {
    "bool": "BOOL", "int8": "INT8", "int16": "INT16", "int32": "INT32",
    "int64": "INT64", "uint8": "UINT8", "uint16": "UINT16",
    "uint32": "UINT32", "uint64": "UINT64", "float16": "FLOAT16",
    "float32": "FLOAT32", "float64": "FLOAT64", "complex64": "COMPLEX64",
    "complex128": "COMPLEX128",
}
_ML_NAMES = {
    "bfloat16": "BFLOAT16", "int4": "INT4", "uint4": "UINT4", "int2": "INT2",
    "uint2": "UINT2", "int1": "INT1", "uint1": "UINT1",
    "float8_e4m3fn": "FLOAT8_E4M3FN", "float8_e4m3fnuz": "FLOAT8_E4M3FNUZ",
    "float8_e4m3b11fnuz": "FLOAT8_E4M3B11FNUZ", "float8_e5m2": "FLOAT8_E5M2",
    "float8_e5m2fnuz": "FLOAT8_E5M2FNUZ", "float8_e4m3": "FLOAT8_E4M3",
    "float8_e3m4": "FLOAT8_E3M4", "float8_e8m0fnu": "FLOAT8_E8M0FNU",
    "float4_e2m1fn": "FLOAT4_E2M1FN", "float6_e2m3fn": "FLOAT6_E2M3FN",
    "float6_e3m2fn": "FLOAT6_E3M2FN",
}

DTYPE_TO_ENUM: dict[np.dtype, int] = {
    np.dtype(name): pb.DType[enum] for name, enum in _NAMES.items()}
DTYPE_TO_ENUM.update({
    np.dtype(getattr(ml_dtypes, name)): pb.DType[enum]
    for name, enum in _ML_NAMES.items() if hasattr(ml_dtypes, name)})
DTYPE_TO_ENUM[np.dtype(jax_dtypes.float0)] = pb.DType["FLOAT0"]
ENUM_TO_DTYPE: dict[int, np.dtype] = {v: k for k, v in DTYPE_TO_ENUM.items()}
PRNG_KEY = pb.DType["PRNG_KEY"]
EXTENDED = pb.DType["EXTENDED"]

_ENUM_NAMES = {v: k for k, v in pb.DType.items()}


def encode_dtype(dtype, ref, strings, encode_value=None) -> None:
  """Fills the `TypeRef` `ref` for `dtype`; `strings` interns key impl names
  and `encode_value(value, value_msg)` stores an extended dtype (a record)."""
  if is_extended(dtype):
    if encode_value is None:
      raise UnsupportedError(f"the extended dtype {dtype!r} can only be an "
                             "aval's element type")
    ref.dtype = EXTENDED
    encode_value(dtype, ref.extended)
    if ref.extended.WhichOneof("kind") != "record":
      raise UnsupportedError(f"the extended dtype {dtype!r} is not stored "
                             "as a record")
    return
  if compat.is_prng_key_dtype(dtype):
    impl = compat.key_impl_of(dtype)
    if compat.prng_impls.get(impl.name) is not impl:
      raise UnsupportedError(
          f"PRNG implementation {impl.name!r} is not registered with JAX's "
          "PRNG registry (jax._src.prng.register_prng); register it under a "
          "stable name before saving")
    ref.dtype = PRNG_KEY
    ref.key_impl = strings(impl.name)
    return
  try:
    ref.dtype = DTYPE_TO_ENUM[dtype]
  except (KeyError, TypeError):
    raise UnsupportedError(
        f"dtype {dtype!r} has no jaxpr_io encoding") from None


def decode_dtype(ref, string, decode_value=None) -> np.dtype:
  """The dtype of a `TypeRef`; `string(i)` reads the string table and
  `decode_value(value_msg)` an extended dtype's record."""
  if ref.HasField("extended") and ref.dtype != EXTENDED:
    raise FormatError("a dtype that is not EXTENDED holds an extended type")
  if ref.dtype == EXTENDED:
    if not ref.HasField("extended") or decode_value is None:
      raise FormatError("an EXTENDED dtype without its type, or where an "
                        "extended dtype cannot be")
    if ref.extended.WhichOneof("kind") != "record":
      raise FormatError("an extended dtype is not a record")
    dtype = decode_value(ref.extended)
    if not is_extended(dtype):
      raise FormatError(f"the record {type(dtype).__qualname__} is not an "
                        "extended dtype")
    return dtype
  if ref.dtype == PRNG_KEY:
    name = string(ref.key_impl)
    impl = compat.prng_impls.get(name)
    if impl is None:
      raise FormatError(
          f"the file uses PRNG implementation {name!r}, which is not "
          f"registered in this process (known: {sorted(compat.prng_impls)})")
    return compat.prng_key_dtype(impl)
  try:
    return ENUM_TO_DTYPE[ref.dtype]
  except KeyError:
    name = _ENUM_NAMES.get(ref.dtype, f"number {ref.dtype}")
    raise FormatError(
        f"dtype {name} is not available in this process (needs a newer "
        "ml_dtypes or jaxpr_io)") from None


def is_extended(dtype) -> bool:
  """Whether `dtype` is an extended dtype stored as a record (format version
  5): a `jax.dtypes.ExtendedDType` other than a PRNG key's."""
  return (isinstance(dtype, compat.ExtendedDType)
          and not compat.is_prng_key_dtype(dtype))


def itemsize(dtype) -> int:
  """Bytes per element in the data section."""
  if compat.is_prng_key_dtype(dtype):
    raise TypeError("key arrays are stored as their uint32 key data")
  return np.dtype(dtype).itemsize
