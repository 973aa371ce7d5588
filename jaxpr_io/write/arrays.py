"""How the writer sees host arrays: their host kind (numpy array, typed
scalar, jax.Array, ...), their bytes in the format's byte order, and cheap
keys that tell blobs of different content apart without checksumming them."""

from __future__ import annotations

import zlib

import numpy as np

from jaxpr_io import compat
from jaxpr_io.format import _proto as pb
from jaxpr_io.errors import UnsupportedError


_KIND = pb.HostKind


NUMPY_ARRAY = _KIND["NUMPY_ARRAY"]


NUMPY_SCALAR = _KIND["NUMPY_SCALAR"]


TYPED_NDARRAY = _KIND["TYPED_NDARRAY"]


TYPED_SCALAR = _KIND["TYPED_SCALAR"]


PYTHON_SCALAR = _KIND["PYTHON_SCALAR"]


JAX_ARRAY = _KIND["JAX_ARRAY"]


# JAX's typed scalars hold a Python value; that value is what is stored.
PYTHON_VALUE = {compat.TypedInt: int, compat.TypedFloat: float,
                 compat.TypedComplex: complex}


def same(value):
  return value


def host_kind(value) -> int:
  """The `HostKind` of a literal's value."""
  t = type(value)
  if t in (compat.TypedInt, compat.TypedFloat, compat.TypedComplex):
    return TYPED_SCALAR
  if t is compat.TypedNdArray:
    return TYPED_NDARRAY
  if t in (bool, int, float, complex):
    return PYTHON_SCALAR
  if t is np.ndarray:
    return NUMPY_ARRAY
  if isinstance(value, np.generic):
    return NUMPY_SCALAR
  if t in compat.jax_array_types():
    return JAX_ARRAY
  raise UnsupportedError(
      f"a literal of type {t.__module__}.{t.__qualname__} cannot be stored")


def array_bytes(value, aval) -> np.ndarray:
  """C-ordered little-endian data of `value`, checked against `aval`.
  UnsupportedError for a `jax.Array` with shards in other processes: this
  process cannot read them, and a file holds the whole array."""
  if type(value) in compat.jax_array_types() and (
      not value.is_fully_addressable):
    raise UnsupportedError(
        f"a {aval.str_short()} jax.Array sharded over devices of other "
        "processes (not fully addressable) cannot be written, as no one "
        "process holds its data: save the weights with Orbax and bind "
        "them where the program is loaded (ProgramRestore(bind=...), "
        "jaxpr-load --bind; docs/scale.md), or write the program unbound")
  if compat.is_prng_key_dtype(aval.dtype):
    impl = compat.key_impl_of(aval.dtype)
    data = np.asarray(compat.key_data(value))
    expected = tuple(aval.shape) + tuple(impl.key_shape)
  else:
    data = np.asarray(value)
    if data.dtype != aval.dtype:
      data = data.astype(aval.dtype)
    expected = tuple(aval.shape)
  if data.shape != expected:
    raise UnsupportedError(
        f"array value of shape {data.shape} does not match its type "
        f"{aval.str_short()}")
  if data.dtype.byteorder == ">":
    data = data.astype(data.dtype.newbyteorder("<"))
  return np.ascontiguousarray(data)


# Blobs are told apart, before any is read whole, by their size and a hash of
# their first, middle and last windows of this many bytes.
SAMPLE_BYTES = 4096


def sample_key(view: memoryview) -> int:
  """A hash of a few 4 KiB windows of a blob (of all of it, if small)."""
  n = view.nbytes
  if n <= 3 * SAMPLE_BYTES:
    return zlib.crc32(view)
  middle = (n - SAMPLE_BYTES) // 2
  value = zlib.crc32(view[:SAMPLE_BYTES])
  value = zlib.crc32(view[middle:middle + SAMPLE_BYTES], value)
  return zlib.crc32(view[n - SAMPLE_BYTES:], value)


def same_bytes(a: memoryview, b: memoryview) -> bool:
  """Whether two byte buffers of one length are equal: numpy compares 16 MiB
  at a time (memoryview's == compares item by item, several times slower)."""
  x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
  step = 1 << 24
  return all(np.array_equal(x[i:i + step], y[i:i + step])
             for i in range(0, len(x), step))
