"""ClosedJaxpr + signature -> file bytes.

The writer walks the program depth-first and fills the tables of the
`Program` message in first-use order (strings, avals, arrays, blobs, eqn
contexts, name stacks, jaxprs, closed jaxprs), so the same program always
gives the same bytes. Sub-jaxprs are stored once per object: a jaxpr used by
many equations is written once and referenced by index, and the reader
rebuilds the same sharing (which JAX's printer shows as `let` bindings).
"""

from __future__ import annotations

import struct
import threading
import zlib
from typing import Any

import numpy as np

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.format import container
from jaxpr_io.compat import symbolic
from jaxpr_io.format import dtypes
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.families.libraries import table as libraries
from jaxpr_io.families.libraries import codecs as library_codecs
from jaxpr_io.families.pallas import core as pallas
from jaxpr_io.codec import params
from jaxpr_io.pytree import codec as pytrees  # noqa: F401  (registers the treedef param codecs)
from jaxpr_io.codec import registry
from jaxpr_io.pytree import write as tree_write
from jaxpr_io.format import version
from jaxpr_io.codec import vocabulary
from jaxpr_io.errors import UnsupportedError

_DOUBLE = struct.Struct("<d")
# Arrays of at most this many bytes are stored inside the message.
INLINE_LIMIT = 64
# Sub-jaxprs nest at most this deep, in files written and read. JAX prints,
# lowers and differentiates recursively: at 40 levels of nested scans every
# operation still works on both ends of the supported releases, at 48 lowering
# runs out of Python stack. 32 leaves room for the caller's own nesting
# (tests/hostile/test_limits.py checks each kind of nesting at this depth).
MAX_JAXPR_DEPTH = 32

_KIND = pb.HostKind
_NUMPY_ARRAY = _KIND["NUMPY_ARRAY"]
_NUMPY_SCALAR = _KIND["NUMPY_SCALAR"]
_TYPED_NDARRAY = _KIND["TYPED_NDARRAY"]
_TYPED_SCALAR = _KIND["TYPED_SCALAR"]
_PYTHON_SCALAR = _KIND["PYTHON_SCALAR"]
_JAX_ARRAY = _KIND["JAX_ARRAY"]

_MEMORY_SPACES = {
    compat.MemorySpace.Device: pb.MemorySpace["MEMORY_SPACE_DEVICE"],
    compat.MemorySpace.Host: pb.MemorySpace["MEMORY_SPACE_HOST"],
    compat.MemorySpace.Any: pb.MemorySpace["MEMORY_SPACE_ANY"],
}
_DEFAULT_SHARDINGS: dict[int, Any] = {}
# Format version 7: a future's done primitive -> its stable name, and the
# memory spaces of pinned linear values (what JAX's `pin` accepts).
_FUTURE_DONE_NAMES = {prim: name for name, prim in compat.FUTURE_DONES.items()}
_LIN_VAL_MEMORY_SPACES = {
    None: pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_UNSPECIFIED"],
    "hbm": pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_HBM"],
    "vmem": pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_VMEM"],
}
# JAX's typed scalars hold a Python value; that value is what is stored.
_PYTHON_VALUE = {compat.TypedInt: int, compat.TypedFloat: float,
                 compat.TypedComplex: complex}


def _same(value):
  return value


def _host_kind(value) -> int:
  """The `HostKind` of a literal's value."""
  t = type(value)
  if t in (compat.TypedInt, compat.TypedFloat, compat.TypedComplex):
    return _TYPED_SCALAR
  if t is compat.TypedNdArray:
    return _TYPED_NDARRAY
  if t in (bool, int, float, complex):
    return _PYTHON_SCALAR
  if t is np.ndarray:
    return _NUMPY_ARRAY
  if isinstance(value, np.generic):
    return _NUMPY_SCALAR
  if t in compat.jax_array_types():
    return _JAX_ARRAY
  raise UnsupportedError(
      f"a literal of type {t.__module__}.{t.__qualname__} cannot be stored")


def _array_bytes(value, aval) -> np.ndarray:
  """C-ordered little-endian data of `value`, checked against `aval`."""
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


# The checksum a blob's entry holds until the message is finished: any value
# but 0 (which proto3 leaves out) gives the message its final length.
_PLACEHOLDER_CRC = 0xFFFFFFFF
# Blobs are told apart, before any is read whole, by their size and a hash of
# their first, middle and last windows of this many bytes.
_SAMPLE_BYTES = 4096


def _sample_key(view: memoryview) -> int:
  """A hash of a few 4 KiB windows of a blob (of all of it, if small)."""
  n = view.nbytes
  if n <= 3 * _SAMPLE_BYTES:
    return zlib.crc32(view)
  middle = (n - _SAMPLE_BYTES) // 2
  value = zlib.crc32(view[:_SAMPLE_BYTES])
  value = zlib.crc32(view[middle:middle + _SAMPLE_BYTES], value)
  return zlib.crc32(view[n - _SAMPLE_BYTES:], value)


def _same_bytes(a: memoryview, b: memoryview) -> bool:
  """Whether two byte buffers of one length are equal: numpy compares 16 MiB
  at a time (memoryview's == compares item by item, several times slower)."""
  x, y = np.frombuffer(a, np.uint8), np.frombuffer(b, np.uint8)
  step = 1 << 24
  return all(np.array_equal(x[i:i + step], y[i:i + step])
             for i in range(0, len(x), step))


class _EquationInputs(threading.local):
  """The input types of the equation whose params are being encoded, for
  the codecs registered with `needs_in_avals=True` (None otherwise)."""

  def __init__(self):
    self.in_avals = None


_EQUATION = _EquationInputs()


def equation_in_avals() -> tuple | None:
  """The input types of the equation whose params are being encoded, for a
  param codec registered with `needs_in_avals=True`; None for other codecs."""
  return _EQUATION.in_avals


class Writer:
  """Builds one `Program` message and its data section."""

  def __init__(self):
    # Values of the table's libraries (Equinox's sentinels) are records
    # once the library is imported, as it is where the program holds them.
    library_codecs.register_imported()
    self.msg = pb.Program()
    self.layout = container.DataLayout()
    self._strings: dict[str, int] = {}
    self._avals: dict[Any, int] = {}
    self._arrays: dict[Any, int] = {}
    self._blobs: dict[tuple[int, int], list[int]] = {}  # (size, sample)
    self._blob_data: list[np.ndarray] = []
    self._blob_at: dict[tuple[int, int], int] = {}  # (address, size)
    self._jaxprs: dict[int, int] = {}   # id(jaxpr) -> index
    self._closed: dict[int, int] = {}   # id(closed jaxpr) -> index
    self._depth = 0                     # jaxprs being encoded, nested
    self._contexts: dict[int, int] = {}
    self._name_stacks: dict[tuple, int] = {}  # entries -> stack index
    # `NameStackTable` columns: parents, kinds, names.
    self._stack_columns: tuple[list[int], list[int], list[int]] = ([], [], [])
    self._name_stack_ids: dict[int, int] = {}
    self._param_sets: dict[Any, int] = {}
    self._param_set_bytes: dict[tuple[str, bytes], int] = {}
    self._eqn_kinds: dict[tuple[int, int, int, int], int] = {}
    self.tree_nodes: dict[bytes, int] = {}  # PyTree bytes -> index
    self._primitive_names: dict[int, int] = {}   # id(primitive) -> string
    self._aval_ids: dict[int, int] = {}          # id(aval) -> aval index
    self._scope = None  # the symbolic scope of the program's dimensions
    self._keepalive: list[Any] = []  # objects whose id() is a table key
    # Whether the param being encoded holds open jaxprs (see
    # `jaxpr_io.codec.vocabulary.OPEN_JAXPR_PARAMS`); matters on JAX releases
    # where open and closed jaxprs are one type.
    self.open_jaxpr_slot = False
    # Whether it holds a jaxpr closed over the equation's inputs
    # (`jaxpr_io.codec.vocabulary.CLOSURE_FROM_INPUTS_PARAMS`).
    self.closure_from_inputs_slot = False
    # Whether it holds Equinox's closure-converted jaxprs, whose constants
    # the equation gets as inputs (`libraries.UNVALUED_CONSTS_PARAMS`).
    self.unvalued_consts_slot = False

  # ------------------------------------------------------------ tables
  def string(self, s: str) -> int:
    index = self._strings.get(s)
    if index is None:
      if type(s) is not str:
        raise UnsupportedError(f"expected a string, got {type(s).__name__}")
      index = self._strings[s] = len(self.msg.strings)
      self.msg.strings.append(s)
    return index

  def primitive(self, prim) -> str:
    name = registry.PRIMITIVES.name_of(prim)
    if name is None:
      raise UnsupportedError(
          f"primitive {prim.name!r} is not a JAX primitive this jaxpr_io "
          "knows; register it with jaxpr_io.register_primitive(p, name=...) "
          "in both the writing and the loading process")
    return name

  def aval(self, aval) -> int:
    # JAX interns avals, so identity finds most of them without hashing.
    index = self._aval_ids.get(id(aval))
    if index is None:
      # A ref aval's equality leaves out its kind (and a TMEM ref's layout
      # and collective flag): refs that differ only there are distinct avals.
      # Likewise a future's equality leaves out its done function.
      t = type(aval)
      key = ((aval, pallas.stored_ref_kind(aval)) if pallas.is_ref_class(t)
             else (aval, compat.ADAPTER.future_done(aval))
             if t is compat.AbstractFuture else aval)
      index = self._avals.get(key)
      if index is None:
        message = pb.Aval()
        self._encode_aval(aval, message)
        index = self._avals[key] = len(self.msg.avals)
        self.msg.avals.append(message)
      self._aval_ids[id(aval)] = index
      self._keepalive.append(aval)
    return index

  def primitive_string(self, prim) -> int:
    """String index of a primitive's serialized name."""
    index = self._primitive_names.get(id(prim))
    if index is None:
      index = self._primitive_names[id(prim)] = self.string(
          self.primitive(prim))
    return index

  def equation_kind(self, name: str, param_set: int, n_in: int,
                    n_out: int) -> int:
    key = (self.string(name), param_set, n_in, n_out)
    index = self._eqn_kinds.get(key)
    if index is None:
      index = self._eqn_kinds[key] = len(self.msg.equation_kinds)
      self.msg.equation_kinds.add(primitive=key[0], param_set=param_set,
                                  num_invars=n_in, num_outvars=n_out)
    return index

  def param_set(self, name: str, values: dict, in_avals=None) -> int:
    """Index of an equation's params in the param-set table. `in_avals`:
    the equation's input types, for primitives whose param codecs need them
    (`registry.register_eqn_param_codec(needs_in_avals=True)`); they are
    part of the key, and `equation_in_avals()` gives them to the codecs."""
    key = (name, tuple([(k, _value_key(v)) for k, v in values.items()]))
    if in_avals is not None:
      key = (key, tuple([_value_key(a) for a in in_avals]))
    index = self._param_sets.get(key)
    if index is None:
      saved_avals = _EQUATION.in_avals
      _EQUATION.in_avals = in_avals
      try:
        index = self._new_param_set(key, name, values)
      finally:
        _EQUATION.in_avals = saved_avals
    return index

  def _new_param_set(self, key, name: str, values: dict) -> int:
    message = pb.ParamSet()
    add = message.params.add
    outer_slot = self.open_jaxpr_slot  # param sets nest through jaxprs
    outer_unvalued = self.unvalued_consts_slot
    for k, v in values.items():
      param = add(name=self.string(k))
      self.open_jaxpr_slot = vocabulary.holds_open_jaxpr(name, k)
      self.closure_from_inputs_slot = (
          (name, k) in vocabulary.CLOSURE_FROM_INPUTS_PARAMS)
      self.unvalued_consts_slot = (
          (name, k) in libraries.UNVALUED_CONSTS_PARAMS)
      try:
        codec = registry.EQN_PARAM_CODECS.get((name, k))
        if codec is None:
          params.encode_value(self, v, param.value)
        else:
          params.encode_value(self, codec.encode(v, values),
                              param.value.param_codec)
      except UnsupportedError as e:
        raise UnsupportedError(f"param {k!r}: {e}") from None
      except (TypeError, ValueError) as e:
        # A codec that cannot handle this value: name the place too.
        raise UnsupportedError(
            f"param {k!r}: {type(e).__name__}: {e}") from None
      finally:
        self.open_jaxpr_slot = outer_slot
        self.closure_from_inputs_slot = False
        self.unvalued_consts_slot = outer_unvalued
    self._keepalive.append((values, key))  # `key` holds ids of its values
    # Equal values that are distinct objects (two equal shardings) give
    # equal bytes: store them once, as a reader shares them (see
    # `params.decode_value`), so that a re-dump writes the same table.
    encoded = (name, message.SerializeToString())
    index = self._param_set_bytes.get(encoded)
    if index is None:
      index = self._param_set_bytes[encoded] = len(self.msg.param_sets)
      self.msg.param_sets.append(message)
    self._param_sets[key] = index
    return index

  def _encode_aval(self, aval, out) -> None:
    t = type(aval)
    if t is compat.AbstractToken:
      out.token.SetInParent()
      return
    if pallas.is_ref_class(t):
      if pallas.ref_class(aval.memory_space) is not t:
        raise UnsupportedError(
            f"a ref of type {t.__name__} in memory space "
            f"{aval.memory_space!r:.60} cannot be stored: the format reads "
            f"every ref in that memory space as a "
            f"{pallas.ref_class(aval.memory_space).__name__}")
      inner = aval.inner_aval
      if type(inner) is not compat.ShapedArray:
        raise UnsupportedError(f"a ref to a value of type {inner} cannot be "
                               "stored (refs to arrays can)")
      ref = out.ref
      ref.inner_aval = self.aval(inner)  # interned first: a smaller index
      if aval.memory_space is not None:
        params.encode_value(self, aval.memory_space, ref.memory_space)
      kind = pallas.stored_ref_kind(aval)
      if kind is not None:
        params.encode_value(self, kind, ref.kind)
      return
    if t is compat.AbstractFuture:
      self._encode_future(aval, out.future)
      return
    if t is compat.AbstractLinVal:
      self._encode_lin_val(aval, out.lin_val)
      return
    if hi_mutable.is_hi_mutable(aval):
      hi_mutable.encode_aval(aval, out)
      return
    if t is not compat.ShapedArray:
      raise UnsupportedError(
          f"abstract value {aval} of type {t.__name__} cannot be stored "
          "(ShapedArray, AbstractRef, AbstractFuture, AbstractLinVal, "
          "AbstractToken and JAX 0.10's BoxTy and LogTy can)")
    sa = out.shaped_array
    if all(type(d) is int for d in aval.shape):
      sa.sizes.extend(aval.shape)
    else:
      for d in aval.shape:
        if type(d) is int:
          sa.shape.add().size = d
        else:
          sa.shape.add().expr = self.dim_expr(d)
    dtypes.encode_dtype(aval.dtype, sa.dtype, self.string,
                        lambda value, field: params.encode_value(self, value,
                                                                 field))
    sa.weak_type = aval.weak_type
    if aval.sharding != self._default_sharding(len(aval.shape)):
      params.encode_value(self, aval.sharding, sa.sharding)
    if not aval.manual_axis_type.empty:
      params.encode_value(self, aval.manual_axis_type, sa.manual_axis_type)
    memory_space = _MEMORY_SPACES.get(aval.memory_space)
    if memory_space is not None:
      sa.memory_space = memory_space
    elif type(aval.memory_space) in registry.ENUMS.by_key:
      # A kernel's memory space (pl.with_memory_space_constraint).
      params.encode_value(self, aval.memory_space, sa.kernel_memory_space)
    else:
      raise UnsupportedError(
          f"an array in memory space {aval.memory_space!r:.60} cannot be "
          "stored: it is neither one of JAX's memory spaces nor a member of "
          "an enum registered with jaxpr_io.register_enum")
    layout = compat.aval_layout(aval)
    if layout is not None:
      # Format version 7: `ShapedArray.layout` (JAX 0.11+; set by relayout).
      if type(layout) is not compat.Layout:
        raise UnsupportedError(
            f"a value of type {aval.str_short()} with layout {layout!r:.80} "
            f"of type {type(layout).__name__} cannot be stored (a "
            "jax.experimental.layout.Layout can)")
      params.encode_value(self, layout, sa.layout)

  def _inner_aval(self, aval, what: str) -> int:
    """Aval index of a future's or linear value's array type."""
    inner = aval.inner_aval
    if type(inner) is not compat.ShapedArray:
      raise UnsupportedError(f"{what} of a value of type {inner} cannot be "
                             "stored (of arrays can)")
    return self.aval(inner)  # interned first: a smaller index

  def _encode_future(self, aval, out) -> None:
    # Format version 7.
    out.inner_aval = self._inner_aval(aval, "a future")
    done = compat.ADAPTER.future_done(aval)
    if done is not None:
      name = (_FUTURE_DONE_NAMES.get(done)
              if type(done) is compat.Primitive else None)
      if name is None:
        raise UnsupportedError(
            f"a future resolved by {done!r:.80} cannot be stored: the "
            "format stores futures that one of JAX's own *_done primitives "
            f"resolves ({', '.join(compat.FUTURE_DONES)})")
      out.done = self.string(name) + 1

  def _encode_lin_val(self, aval, out) -> None:
    # Format version 7.
    out.inner_aval = self._inner_aval(aval, "a pinned linear value")
    space = (_LIN_VAL_MEMORY_SPACES.get(aval.memory_space)
             if aval.memory_space is None or type(aval.memory_space) is str
             else None)
    if space is None:
      raise UnsupportedError(
          f"a pinned linear value in memory space {aval.memory_space!r:.60} "
          "cannot be stored (None, 'hbm' and 'vmem' can: what JAX lowers)")
    out.memory_space = space

  def dim_expr(self, d) -> int:
    """String index of a symbolic dimension; all must share one scope."""
    if type(d) is not symbolic.DimExpr:
      raise UnsupportedError(f"dimension {d!r} of type {type(d).__name__} "
                             "is neither an int nor a symbolic dimension")
    scope = symbolic.scope_of(d)
    if self._scope is None:
      self._scope = scope
    elif scope is not self._scope:
      raise UnsupportedError(
          f"symbolic dimension {d} comes from a different symbolic scope "
          "than the program's other dimensions; create all symbolic shapes "
          "with one jax.export.symbolic_shape call or a shared `scope=`")
    return self.string(str(d))

  @staticmethod
  def _default_sharding(ndim: int):
    sharding = _DEFAULT_SHARDINGS.get(ndim)
    if sharding is None:
      sharding = _DEFAULT_SHARDINGS[ndim] = compat.ShapedArray(
          (1,) * ndim, np.float32).sharding
    return sharding

  def array(self, value, kind: int, aval=None) -> int:
    """Index of `value` in the arrays table (dedup by content)."""
    if aval is None:
      aval = compat.ShapedArray(np.shape(value), np.result_type(value))
    aval_index = self.aval(aval)
    if kind in (_TYPED_SCALAR, _PYTHON_SCALAR):
      scalar = pb.Value()
      params.encode_value(self, _PYTHON_VALUE.get(type(value), _same)(value),
                          scalar)
      key = (aval_index, kind, scalar.SerializeToString())
      index = self._arrays.get(key)
      if index is None:
        index = self._arrays[key] = len(self.msg.arrays)
        message = self.msg.arrays.add(aval=aval_index, kind=kind)
        message.python_value.CopyFrom(scalar)
      return index
    data = _array_bytes(value, aval)
    if data.nbytes <= INLINE_LIMIT:
      raw = data.tobytes()
      key = (aval_index, kind, raw)
      index = self._arrays.get(key)
      if index is None:
        index = self._arrays[key] = len(self.msg.arrays)
        self.msg.arrays.add(aval=aval_index, kind=kind, inline=raw)
      return index
    blob = self._blob(data)
    key = (aval_index, kind, "blob", blob)
    index = self._arrays.get(key)
    if index is None:
      index = self._arrays[key] = len(self.msg.arrays)
      self.msg.arrays.add(aval=aval_index, kind=kind, blob=blob)
    return index

  def _blob(self, data: np.ndarray) -> int:
    # As bytes: the buffer protocol has no format for ml_dtypes' types. The
    # view is of the array's own buffer: the data is never copied (the
    # layout holds the view, and the file is written from it).
    view = memoryview(data.reshape(-1).view(np.uint8))
    # The same memory (one array used twice) is the same blob: no checksum
    # or comparison needed. `_blob_data` keeps the memory alive, so an
    # address cannot be reused while this writer lives.
    at = (data.__array_interface__["data"][0], data.nbytes)
    index = self._blob_at.get(at)
    if index is not None:
      return index
    # Equal bytes are one blob. Blobs are grouped by size and a hash of a few
    # sampled windows, which reads almost nothing; only a blob whose group is
    # not empty is checksummed (as are, once each, the group's blobs: many
    # blobs that differ only outside the windows are not compared pairwise),
    # and compared with those whose checksum is its own. Other blobs are
    # checksummed when the file is written (`container.PendingProgram`).
    candidates = self._blobs.setdefault((data.nbytes, _sample_key(view)), [])
    checksum = None
    if candidates:
      # Large buffers are checksummed by several threads (container.crc32).
      checksum = container.crc32(view)
      for index in candidates:
        if (self._blob_crc(index) == checksum
            and _same_bytes(self._blob_data[index], view)):
          return index  # (`data` may be a temporary: its address is not kept)
    index = len(self.msg.blobs)
    offset = self.layout.add(view, checksum)  # blob i is the layout's chunk i
    self.msg.blobs.add(offset=offset, length=data.nbytes,
                       crc32=_PLACEHOLDER_CRC)
    self._blob_data.append(view)
    self._blob_at[at] = index
    candidates.append(index)
    return index

  def _blob_crc(self, index: int) -> int:
    known = self.layout.known_crcs
    if known[index] is None:
      known[index] = container.crc32(self._blob_data[index])
    return known[index]

  def eqn_context(self, ctx) -> int:
    index = self._contexts.get(id(ctx))
    if index is None:
      message = pb.EqnContext()
      if ctx.compute_type is not None:
        message.compute_type = self.string(ctx.compute_type) + 1
      message.threefry_partitionable = ctx.threefry_partitionable
      params.encode_value(self, ctx.cur_abstract_mesh,
                          message.cur_abstract_mesh)
      message.remove_size_one_mesh_axis = ctx.remove_size_one_mesh_axis
      if ctx.xla_metadata is not None:
        params.encode_value(self, tuple(sorted(ctx.xla_metadata.items())),
                            message.xla_metadata)
      extra = compat.ADAPTER.context_to_format(ctx)
      if extra.get("layout_mode", "AUTO") != "AUTO":
        message.layout_mode = self.string(extra["layout_mode"]) + 1
      if extra.get("no_collectives"):
        params.encode_value(self, frozenset(extra["no_collectives"]),
                            message.no_collectives)
      self._keepalive.append(ctx)
      index = self._contexts[id(ctx)] = len(self.msg.eqn_contexts)
      self.msg.eqn_contexts.append(message)
    return index

  def name_stack(self, name_stack) -> int:
    index = self._name_stack_ids.get(id(name_stack))
    if index is None:
      self._keepalive.append(name_stack)
      index = self._name_stack_ids[id(name_stack)] = self._stack(
          tuple(name_stack.stack))
    return index

  def _stack(self, entries: tuple) -> int:
    """The index of the stack of `entries`, stored after its prefixes."""
    table = self._stack_columns
    if not entries:  # the empty stack: no parent, no entry
      index = self._name_stacks.get(())
      if index is None:
        index = self._name_stacks[()] = len(table[0])
        for column in table:
          column.append(0)
      return index
    n = len(entries)
    while n and entries[:n] not in self._name_stacks:
      n -= 1  # the longest prefix stored so far (0: none)
    index = self._name_stacks[entries[:n]] if n else None
    for m in range(n + 1, len(entries) + 1):
      entry = entries[m - 1]
      kind = _NAME_ENTRY_KINDS.get(type(entry))
      if kind is None:
        raise UnsupportedError(f"unknown name stack entry {entry!r}")
      table[0].append(0 if index is None else index + 1)
      table[1].append(kind)
      table[2].append(self.string(entry.name))
      index = self._name_stacks[entries[:m]] = len(table[0]) - 1
    return index

  # ------------------------------------------------------------ jaxprs
  def closed_jaxpr(self, closed) -> int:
    index = self._closed.get(id(closed))
    if index is None:
      jaxpr_index = self.jaxpr(closed.jaxpr)
      message = pb.ClosedJaxpr(jaxpr=jaxpr_index)
      for i, (var, const) in enumerate(zip(closed.jaxpr.constvars,
                                           closed.consts)):
        try:
          message.consts.append(self.array(const, _TYPED_NDARRAY, var.aval))
        except UnsupportedError as e:
          raise UnsupportedError(f"constant {i}: {e}") from None
      self._keepalive.append(closed)
      index = self._closed[id(closed)] = len(self.msg.closed_jaxprs)
      self.msg.closed_jaxprs.append(message)
    return index

  def jaxpr(self, jaxpr) -> int:
    index = self._jaxprs.get(id(jaxpr))
    if index is None:
      if self._depth >= MAX_JAXPR_DEPTH:
        raise UnsupportedError(
            f"jaxprs nest deeper than {MAX_JAXPR_DEPTH} levels")
      self._depth += 1
      try:
        message = _JaxprEncoder(self, jaxpr).encode()
      finally:
        self._depth -= 1
      self._keepalive.append(jaxpr)
      index = self._jaxprs[id(jaxpr)] = len(self.msg.jaxprs)
      self.msg.jaxprs.append(message)
    return index

  # ------------------------------------------------------------ program
  def program(self, closed, in_tree, out_tree,
              metadata: dict[str, str]) -> None:
    msg = self.msg
    msg.format_version = version.FORMAT_VERSION
    msg.producer.jaxpr_io_version = version.__version__
    msg.producer.jax_version = compat.JAX_VERSION
    msg.producer.jaxlib_version = compat.JAXLIB_VERSION
    for key, value in metadata.items():
      if type(key) is not str or type(value) is not str:
        raise UnsupportedError(
            f"metadata must map str to str; got {key!r}: {value!r}")
      msg.metadata.add(key=key, value=value)
    msg.root = self.closed_jaxpr(closed)
    table = msg.name_stack_table
    table.parents, table.kinds, table.names = (
        np.asarray(column, "<u4").tobytes() for column in self._stack_columns)
    tree_write.encode_treedef(self, in_tree, msg.in_tree)
    tree_write.encode_treedef(self, out_tree, msg.out_tree)
    if self._scope is not None:
      msg.symbolic_constraints.extend(
          symbolic.scope_constraints(self._scope))


class _JaxprEncoder:
  """Encodes one jaxpr: numbers its binders and encodes its equations."""

  def __init__(self, writer: Writer, jaxpr):
    self.w = writer
    self.jaxpr = jaxpr
    self.env: dict[Any, int] = {}
    # (number, variable) of the variables with quasi-dynamic data (JAX
    # 0.10's boxes and logs: jaxpr_io/families/hijax/mutable.py), in binding order.
    self.qdd_vars: list[tuple[int, Any]] = []

  def bind(self, var) -> None:
    if var in self.env:
      raise UnsupportedError("a variable is bound twice; the jaxpr is "
                             "malformed")
    if compat.var_has_qdd(var):
      self.qdd_vars.append((len(self.env), var))
    self.env[var] = len(self.env)

  def atom(self, atom) -> int:
    if type(atom) is compat.Literal:
      return -1 - self.w.array(atom.val, _host_kind(atom.val), atom.aval)
    number = self.env.get(atom)
    if number is None or type(atom) is compat.DropVar:
      raise UnsupportedError(
          "a variable is used before it is bound; the jaxpr is malformed "
          "(check it with jax.core.check_jaxpr)")
    return number

  def effect(self, effect) -> tuple[str, Any]:
    """(registered name, payload or None) of an effect."""
    name = _SINGLETON_EFFECT_NAMES.get(id(effect))
    if name is not None:
      return name, None
    t = type(effect)
    if t is compat.NamedAxisEffect:
      return "jax.NamedAxisEffect", effect.name
    name = registry.EFFECTS.by_key.get(t)
    if name is not None:
      return name, registry.EFFECTS.by_name[name].encode(effect)
    name = _INPUT_EFFECT_NAMES.get(t)
    if name is not None:
      if isinstance(effect.input, int):
        return name, ("position", effect.input)
      return name, ("var", self.atom(effect.input))
    raise UnsupportedError(
        f"effect {effect!r} of type {t.__name__} cannot be stored")

  def effects(self, effects, out) -> None:
    # Effects are sets: store them in an order that does not depend on the
    # process (hash seeds), so the bytes are deterministic.
    parts = sorted((self.effect(e) for e in effects),
                   key=lambda p: (p[0], params.canonical_key(p[1])))
    for name, payload in parts:
      message = out.add(name=self.w.string(name))
      if payload is not None:
        params.encode_value(self.w, payload, message.payload)

  def encode(self):
    w, jaxpr = self.w, self.jaxpr
    message = pb.Jaxpr()
    for v in jaxpr.constvars:
      self.bind(v)
      message.constvars.append(w.aval(v.aval))
    for v in jaxpr.invars:
      self.bind(v)
      message.invars.append(w.aval(v.aval))
    columns = _Columns(message.equations)
    for i, eqn in enumerate(jaxpr.eqns):
      try:
        self.equation(i, eqn, columns)
      except UnsupportedError as e:
        # Errors from nested jaxprs pass here at every level, which builds
        # the path: "equation 3 (jit), param 'jaxpr': equation 0 (...), ...".
        raise UnsupportedError(
            f"equation {i} ({eqn.primitive.name}), {e}") from None
    columns.pack()
    if self.qdd_vars:
      hi_mutable.encode_qdds(w, self.qdd_vars, message.qdds)
    message.outvars.extend(self.atom(a) for a in jaxpr.outvars)
    self.effects(jaxpr.effects, message.effects)
    self.debug_info(jaxpr.debug_info, message.debug_info)
    message.is_high = jaxpr.is_high
    return message

  def equation(self, i: int, eqn, columns: "_Columns") -> None:
    w, env = self.w, self.env
    # The equation in the format's vocabulary (jaxpr_io/codec/vocabulary.py).
    name, eqn_params = compat.ADAPTER.to_format(w.primitive(eqn.primitive),
                                                eqn.params)
    for a in eqn.invars:
      number = env.get(a) if type(a) is compat.Var else None
      columns.invars.append(self.atom(a) if number is None else number)
    outvars = columns.outvars
    for v in eqn.outvars:
      if type(v) is compat.DropVar:
        columns.dropped.append(len(outvars))
        env[object()] = len(env)  # numbers a slot nobody can use
      else:
        self.bind(v)
      outvars.append(w.aval(v.aval))
    in_avals = (tuple([a.aval for a in eqn.invars])
                if name in registry.INPUT_TYPED_PRIMITIVES else None)
    columns.kinds.append(w.equation_kind(
        name, w.param_set(name, eqn_params, in_avals), len(eqn.invars),
        len(eqn.outvars)))
    if eqn.effects:
      self.effects(eqn.effects, columns.effects.add(equation=i).effects)
    columns.contexts.append(w.eqn_context(eqn.ctx))
    columns.name_stacks.append(w.name_stack(eqn.source_info.name_stack))

  def debug_info(self, info, out) -> None:
    w = self.w
    out.traced_for = w.string(info.traced_for)
    out.func_src_info = w.string(info.func_src_info)
    if info.arg_names is not None:
      out.has_arg_names = True
      out.arg_names.extend(w.string(n) for n in info.arg_names)
    paths = info.result_paths
    if paths is not None:
      if not isinstance(paths, tuple):
        paths = tuple(paths())
      out.has_result_paths = True
      out.result_paths.extend(w.string(p) for p in paths)


class _Columns:
  """The `Equations` message `out` of one jaxpr: its columns are gathered
  as Python lists and packed at the end; effects go to `out` directly."""

  def __init__(self, out):
    self.out = out
    self.kinds: list[int] = []
    self.invars: list[int] = []
    self.outvars: list[int] = []
    self.name_stacks: list[int] = []
    self.contexts: list[int] = []
    self.dropped: list[int] = []
    self.effects = out.effects

  def pack(self) -> None:
    """Writes the gathered columns into `out`."""
    out, refs = self.out, self.invars
    if refs and not _INT32_MIN <= min(refs) <= max(refs) <= _INT32_MAX:
      raise UnsupportedError(
          "a jaxpr refers to more than 2**31 variables or arrays, more than "
          "the format's int32 references hold")
    out.kinds = np.asarray(self.kinds, "<u4").tobytes()
    out.invars = np.asarray(refs, "<i4").tobytes()
    out.outvars = np.asarray(self.outvars, "<u4").tobytes()
    out.name_stacks = np.asarray(self.name_stacks, "<u4").tobytes()
    out.contexts = np.asarray(self.contexts, "<u4").tobytes()
    out.dropped = np.asarray(self.dropped, "<u4").tobytes()


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

_NAME_ENTRY_KINDS = {compat.NameScope: pb.NameStackKind["SCOPE"],
                     compat.NameTransform: pb.NameStackKind["TRANSFORM"]}
_SINGLETON_EFFECT_NAMES = {id(e): n for n, e in compat.SINGLETON_EFFECTS.items()}

# Param values whose equality is their value; everything else (jaxprs,
# arrays, records, ...) is compared by identity, which is always safe.
_VALUE_KEYED = frozenset({bool, int, str, type(None), *(
    type(d) for d in dtypes.DTYPE_TO_ENUM), *compat.ENUMS.values()})
_TUPLE_KEYED = frozenset({tuple, *compat.NAMED_TUPLES.values()})
_NUMPY_SCALARS = frozenset(d.type for d in dtypes.DTYPE_TO_ENUM)


def _value_key(v):
  """A hashable key equal for two param values iff they encode alike.

  Types are part of the key, so `True`, `1` and `1.0` never share."""
  t = type(v)
  if t in _VALUE_KEYED:
    return (t, v)
  if t is float:
    return (t, _DOUBLE.pack(v))  # bit-exact: -0.0 and NaN payloads differ
  if t is symbolic.DimExpr:
    return (t, str(v))  # one scope per program: the text identifies it
  if t in _TUPLE_KEYED:
    return (t, tuple([_value_key(x) for x in v]))
  if t is np.ndarray or t in _NUMPY_SCALARS:
    # By content: the arrays table stores equal arrays once, so after a
    # load they are one object; keying by identity here would then merge
    # param sets that were distinct, and re-dumping would change the bytes.
    return (t, v.dtype, v.shape, v.tobytes())
  return (t, id(v))
_INPUT_EFFECT_NAMES = {cls: n for n, cls in compat.INPUT_EFFECTS.items()}


class PendingMessage(container.PendingProgram):
  """A `Program` message whose blob checksums are placeholders."""

  def __init__(self, msg):
    self._msg = msg
    self._length: int | None = None

  def length(self) -> int:
    if self._length is None:
      blobs = self._msg.blobs
      real = [blob.crc32 for blob in blobs]
      for blob in blobs:
        blob.crc32 = _PLACEHOLDER_CRC
      self._length = self._msg.ByteSize()
      for blob, crc in zip(blobs, real):
        blob.crc32 = crc
    return self._length

  def finish(self, crcs: list[int]) -> bytes:
    blobs = self._msg.blobs
    if len(crcs) != len(blobs):
      raise ValueError(f"{len(crcs)} checksums for {len(blobs)} blobs")
    for blob, crc in zip(blobs, crcs):
      blob.crc32 = crc
    return self._msg.SerializeToString(deterministic=True)


def write_pending(closed, in_tree, out_tree, metadata: dict[str, str]):
  """(program message, data layout) of a closed jaxpr; the message is a
  `container.PendingProgram`, to be finished with the layout's checksums
  (`container.to_bytes` and `container.write_file` do)."""
  if not compat.is_closed_jaxpr(closed):
    raise UnsupportedError(
        f"expected a jax ClosedJaxpr, got {type(closed).__name__}")
  writer = Writer()
  writer.program(closed, in_tree, out_tree, metadata)
  return PendingMessage(writer.msg), writer.layout


def write(closed, in_tree, out_tree, metadata: dict[str, str]):
  """(program message bytes, data layout) of a closed jaxpr."""
  message, layout = write_pending(closed, in_tree, out_tree, metadata)
  return message.finish(layout.crcs()), layout
