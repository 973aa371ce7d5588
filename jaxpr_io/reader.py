"""File bytes -> ClosedJaxpr + signature, validated while it is rebuilt.

Trust model: the reader treats the file as untrusted data. It never unpickles,
evaluates or imports anything the file names; primitives, enum and record
types, pytree nodes and PRNG implementations are looked up in registries of
the loading process. Every table reference is range-checked, every variable
reference must name a variable bound earlier in the same jaxpr, sub-jaxprs
may only refer to sub-jaxprs before them (so there are no cycles and nesting
is bounded), and array data must have exactly the bytes its type declares.
Values are validated before they reach a JAX constructor (dimension
expressions by jaxpr_io/dim_grammar.py, param types by jaxpr_io/validate.py,
records by their codecs), the objects a load builds are charged against a
memory budget before they are built, and params that reach past the
computation pass jaxpr_io/trust.py. Any violation raises `FormatError`
naming the place. Building the program does not call JAX's abstract
evaluation; `check=True` (jaxpr_io/program.py) does, and more.
"""

from __future__ import annotations

import gc
import tokenize
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError
from jax import numpy as jnp

from jaxpr_io import _proto as pb
from jaxpr_io import compat
from jaxpr_io import container
from jaxpr_io.compat import symbolic
from jaxpr_io import dim_grammar
from jaxpr_io import dtypes
from jaxpr_io import equations
from jaxpr_io import pallas
from jaxpr_io import params
from jaxpr_io import pytrees
from jaxpr_io import registry
from jaxpr_io import trust
from jaxpr_io import validate
from jaxpr_io import vocabulary
from jaxpr_io.errors import FormatError
from jaxpr_io.writer import MAX_JAXPR_DEPTH

_KIND_NAMES = {v: k for k, v in pb.HostKind.items()}
_MEMORY_SPACES = {
    pb.MemorySpace["MEMORY_SPACE_DEVICE"]: compat.MemorySpace.Device,
    pb.MemorySpace["MEMORY_SPACE_HOST"]: compat.MemorySpace.Host,
    pb.MemorySpace["MEMORY_SPACE_ANY"]: compat.MemorySpace.Any,
}
_SIZES_FIELD, _DTYPE_FIELD, _WEAK_TYPE_FIELD, _MEMORY_SPACE_FIELD = (
    pb.ShapedArray.DESCRIPTOR.fields_by_name[name].number
    for name in ("sizes", "dtype", "weak_type", "memory_space"))
_LIN_VAL_MEMORY_SPACES = {
    pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_UNSPECIFIED"]: None,
    pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_HBM"]: "hbm",
    pb.LinValMemorySpace["LIN_VAL_MEMORY_SPACE_VMEM"]: "vmem",
}
_NAME_ENTRY_TYPES = {pb.NameStackKind["SCOPE"]: compat.NameScope,
                     pb.NameStackKind["TRANSFORM"]: compat.NameTransform}
_MAX_RANK = 64
_MAX_DIM = 1 << 62
_MAX_CONSTRAINTS = 100
_MAX_ZERO_SIZE_ELEMENTS = 1 << 31
_SIZE_CAP = 1 << 62
# Resource limits of an untrusted load: building the program may take at most
# MEMORY_FACTOR times the file's size plus FIXED_OVERHEAD bytes. The reader
# charges, before it builds them, what the objects of each table and jaxpr
# cost in Python (measured on jax 0.10 and 0.12, CPython 3.11-3.12; a real
# program costs about 16x its file size, a file of tiny equations 60x).
MEMORY_FACTOR = 16
FIXED_OVERHEAD = 64 << 20
_EQN_COST = 520       # JaxprEqn, its in/out lists, its params dict
_VAR_COST = 100       # Var (or Literal) and its list slot
_AVAL_COST = 300      # ShapedArray with its shape tuple
_TABLE_ENTRY_COST = 100   # a string, param set, name stack, context
_TYPED_SCALARS = {"int": compat.TypedInt, "float": compat.TypedFloat,
                  "complex": compat.TypedComplex}
_PYTHON_SCALARS = {"bool": bool, "int": int, "big_int": int,
                   "float": float, "complex": complex}


def _scalar_fits(which: str, value, dtype) -> bool:
  """Whether a Python value of Value-kind `which` can be a scalar of dtype:
  a bool for bool, an int in range for an integer type, a float for a
  floating type, a complex for a complex type."""
  if compat.is_prng_key_dtype(dtype):
    return False
  if which == "bool":
    return dtype == np.bool_
  if which in ("int", "big_int"):
    if not jnp.issubdtype(dtype, jnp.integer):
      return False
    info = jnp.iinfo(dtype)
    return int(info.min) <= value <= int(info.max)
  if which == "float":
    return jnp.issubdtype(dtype, jnp.floating)
  if which == "complex":
    return jnp.issubdtype(dtype, jnp.complexfloating)
  return False


def parse_program(data: bytes, source: str):
  message = pb.Program()
  try:
    message.ParseFromString(data)
  except DecodeError as e:
    raise FormatError(f"{source}: the program message does not parse: "
                      f"{e}") from None
  return message


def _shaped_array(shape: tuple, dtype, weak_type: bool, kwargs: dict):
  try:
    return compat.ShapedArray(shape, dtype, weak_type, **kwargs)
  except (TypeError, ValueError, AssertionError) as e:
    raise FormatError(f"aval cannot be rebuilt: {e}") from None


class Reader:
  """Rebuilds the objects of one `Program` message."""

  # True while a pytree node's auxdata is read: records of libraries that
  # are not installed become placeholders (params.decode_record). A class
  # attribute, so that the hot `params.decode_value` finds it at once.
  unloaded_records_ok = False

  def __init__(self, msg, blobs: container.Container, *, verify_blobs: bool,
               trusted: bool = False):
    self.msg = msg
    self.format_version = msg.format_version
    self.screen = trust.Screen(trusted)
    self.container = blobs
    self.source = blobs.source
    self.verify_blobs = verify_blobs
    self.pending_blobs: set[int] = set()
    self.strings = msg.strings[:]
    self.avals: list[Any] = []
    self._arrays: list[Any] = [None] * len(msg.arrays)
    self._array_done = [False] * len(msg.arrays)
    self.contexts: list[Any] = [None] * len(msg.eqn_contexts)
    self.jaxprs: list[Any] = []
    self._depths: list[int] = []
    self._param_sets: list[Any] = [None] * len(msg.param_sets)
    self._closed: list[Any] = [None] * len(msg.closed_jaxprs)
    self._primitives: dict[str, Any] = {}
    self._scope = None
    self._dims: dict[str, Any] = {}
    # Per name stack index: the equations' shared `SourceInfo`
    # (`decode_name_stacks`).
    self.source_infos: list[Any] = [None] * len(msg.name_stacks)
    self._source_info_array: np.ndarray | None = None
    self._context_array: np.ndarray | None = None
    self._name_entries: dict[tuple[int, int], Any] = {}
    # Equation kinds: (primitive string, param set, #inputs, #outputs) of
    # each, and, once checked, the `equations.Kind` its equations share
    # (None if not checked yet or not shareable). Files of versions 1-2 have
    # no kinds table: `legacy_kind` numbers their kinds as they are met.
    self.kind_keys: list[tuple[int, int, int, int]] = [
        (k.primitive, k.param_set, k.num_invars, k.num_outvars)
        for k in msg.equation_kinds[:]]
    if len(set(self.kind_keys)) != len(self.kind_keys):
      raise FormatError("the equation kinds table holds a kind twice")
    if self.kind_keys and msg.format_version < 3:
      raise FormatError(f"a version {msg.format_version} file has an "
                        "equation kinds table (added in version 3)")
    self.kinds: list[Any] = [None] * len(self.kind_keys)
    self._kind_index: dict[tuple[int, int, int, int], int] = {}
    self._kind_arity: tuple[np.ndarray, np.ndarray] | None = None
    self.tree_memo = pytrees.TreeMemo(msg)
    # Array index -> (value, aval) of a literal, checked once.
    self._literals: dict[int, tuple] = {}
    # Jaxpr indices referenced by the param set being decoded, for each
    # jaxpr's nesting depth and its size with shared sub-jaxprs inlined.
    self._refs: list[int] | None = None
    # Jaxpr references read so far, and top-level param values by their
    # bytes (`params.decode_value`).
    self.jaxpr_refs_seen = 0
    self.value_memo: dict[bytes, Any] = {}
    self.sizes: list[int] = []
    self.where = vocabulary.Where(blobs.source, msg.producer.jax_version,
                                  compat.JAX_VERSION)
    self._budget = (None if trusted else
                    MEMORY_FACTOR * len(blobs.buffer) + FIXED_OVERHEAD)

  # ----------------------------------------------------- resource limits
  def charge(self, nbytes: int, what: str) -> None:
    """Counts `nbytes` of objects about to be built against the budget."""
    if self._budget is None:
      return
    self._budget -= nbytes
    if self._budget < 0:
      raise FormatError(
          f"{what} would take more memory than an untrusted file of "
          f"{len(self.container.buffer):,} bytes may ask for "
          f"({MEMORY_FACTOR}x its size + {FIXED_OVERHEAD >> 20} MiB); load "
          "it with trusted=True if you know where it comes from")

  def charge_tables(self) -> None:
    """Charges every table and every jaxpr's equations before any is built:
    a file cannot make the reader allocate first and refuse later."""
    m = self.msg
    self.charge((len(m.strings) + len(m.param_sets) + len(m.name_stacks)
                 + len(m.name_stack_table.parents) // 4
                 + len(m.eqn_contexts)) * _TABLE_ENTRY_COST
                # The strings' characters: no more than the program's
                # bytes (summing their lengths costs more than this check).
                + len(self.container.program)
                + (len(m.avals) + len(m.arrays)) * _AVAL_COST,
                "the program's tables")
    self.charge((len(m.equation_kinds) + len(m.tree_nodes))
                * _TABLE_ENTRY_COST, "the equation kinds and pytree tables")
    self.charge(sum((len(j.eqns) + len(j.equations.kinds) // 4) * _EQN_COST
                    + (len(j.eqns) + len(j.equations.outvars) // 4
                       + len(j.equations.invars) // 4
                       + len(j.constvars) + len(j.invars)) * _VAR_COST
                    for j in m.jaxprs[:]), "the program's equations")

  # ------------------------------------------------------------ helpers
  # Errors are raised without a location; the loops that walk the tables
  # prefix their position ("jaxpr 2, equation 7 (gather), param 'mode'")
  # as the error passes up, and `read` prefixes the file name.
  @staticmethod
  def _index(i: int, table_len: int, what: str) -> int:
    if not 0 <= i < table_len:
      raise FormatError(f"{what} index {i} is out of range (the table has "
                        f"{table_len} entries)")
    return i

  def string(self, i: int) -> str:
    try:
      return self.strings[i]  # indices are uint32: never negative
    except IndexError:
      raise FormatError(f"string index {i} is out of range (the table has "
                        f"{len(self.strings)} entries)") from None

  def string_tuple(self, indices) -> tuple[str, ...]:
    """The strings of a repeated string-index field."""
    try:
      return tuple(map(self.strings.__getitem__, indices[:]))
    except IndexError:
      raise FormatError(f"a string index of {list(indices)!r:.80} is out of "
                        f"range (the table has {len(self.strings)} entries)"
                        ) from None

  def primitive(self, name: str):
    prim = self._primitives.get(name)
    if prim is None:
      prim = registry.PRIMITIVES.lookup(name)
      if prim is None:
        raise FormatError(vocabulary.unknown_primitive(self.where, name))
      self._primitives[name] = prim
    return prim

  # ------------------------------------------------------------ avals
  def aval(self, i: int):
    return self.avals[self._index(i, len(self.avals), "aval")]

  def decode_avals(self) -> None:
    for i, m in enumerate(self.msg.avals[:]):
      try:
        self.avals.append(self._decode_aval(m))
      except validate.DECODE_ERRORS as e:
        raise FormatError(f"aval {i}: {validate.describe_error(e)}") from None

  def _decode_aval(self, m):
    kind = m.WhichOneof("kind")
    if kind == "token":
      return compat.abstract_token
    if kind == "ref":
      return self._decode_ref(m.ref)
    if kind == "future":
      return self._decode_future(m.future)
    if kind == "lin_val":
      return self._decode_lin_val(m.lin_val)
    if kind != "shaped_array":
      raise FormatError(f"aval of unknown kind {kind!r}")
    sa = m.shaped_array
    plain = self._plain_shaped_array(sa)
    if plain is not None:
      return plain
    shape = sa.sizes[:]  # one copy: each access to the field is slow
    if shape:
      # Version 5: every dimension known, one packed field.
      if self.format_version < 5 or sa.shape:
        raise FormatError("an aval has `sizes`, which a file before version "
                          "5 or with a symbolic `shape` MUST NOT have")
      if len(shape) > _MAX_RANK:
        raise FormatError(f"aval of rank {len(shape)} is over {_MAX_RANK}")
      if not 0 <= min(shape) <= max(shape) <= _MAX_DIM:
        bad = min(shape) if min(shape) < 0 else max(shape)
        raise FormatError(f"aval dimension {bad} is not a valid size (0 to "
                          "2**62)")
    else:
      shape = self._dims_of(sa.shape[:])
    dtype = dtypes.decode_dtype(
        sa.dtype, self.string, lambda value: params.decode_value(self, value))
    # XLA computes byte sizes in int64 and aborts on overflow.
    size = max(getattr(dtype, "itemsize", 0), 1)  # extended: none
    for d in shape:
      if type(d) is int:
        size *= d
    if size > _MAX_DIM:
      raise FormatError(f"aval of shape {str(tuple(shape))[:80]} and dtype "
                        f"{dtype} has over 2**62 bytes")
    if sa.HasField("kernel_memory_space"):
      memory_space = self._kernel_memory_space(sa)
    else:
      memory_space = _MEMORY_SPACES.get(sa.memory_space)
      if memory_space is None:
        raise FormatError(f"unknown memory space {sa.memory_space}")
    kwargs = {"memory_space": memory_space}
    if sa.HasField("sharding"):
      kwargs["sharding"] = params.decode_value(self, sa.sharding)
    if sa.HasField("manual_axis_type"):
      kwargs["manual_axis_type"] = params.decode_value(self,
                                                       sa.manual_axis_type)
    if sa.HasField("layout"):
      kwargs["layout"] = self._layout(sa, len(shape))
    return _shaped_array(tuple(shape), dtype, sa.weak_type, kwargs)

  def _plain_shaped_array(self, sa):
    """The `ShapedArray` of `sa` when it sets only known `sizes` (version
    5+), a dtype of the table, `weak_type` and `memory_space`, all valid;
    None for anything else, which `_decode_aval` then reads and checks
    field by field. Asking a message for each field in turn costs more than
    the array itself; this reads the fields that are set in one call."""
    shape, ref, weak_type, memory_space = (), None, False, 0
    for field, value in sa.ListFields():
      number = field.number
      if number == _SIZES_FIELD:
        shape = value[:]
      elif number == _DTYPE_FIELD:
        ref = value
      elif number == _WEAK_TYPE_FIELD:
        weak_type = value
      elif number == _MEMORY_SPACE_FIELD:
        memory_space = value
      else:
        return None
    if ref is None or self.format_version < 5 or len(shape) > _MAX_RANK:
      return None
    dtype = dtypes.ENUM_TO_DTYPE.get(ref.dtype)
    memory = _MEMORY_SPACES.get(memory_space)
    if dtype is None or memory is None or ref.HasField("extended"):
      return None
    size = max(dtype.itemsize, 1)
    for d in shape:
      if not 0 <= d <= _MAX_DIM:
        return None
      size *= d
    if size > _MAX_DIM:
      return None
    return _shaped_array(tuple(shape), dtype, weak_type,
                         {"memory_space": memory})

  def _kernel_memory_space(self, sa):
    """An array's memory space that is not one of JAX's own (version 6)."""
    if self.format_version < 6:
      raise FormatError("an aval has `kernel_memory_space`, which a file "
                        "before version 6 MUST NOT have")
    if sa.memory_space:
      raise FormatError("an aval has both `memory_space` and "
                        "`kernel_memory_space`")
    value = params.decode_value(self, sa.kernel_memory_space)
    if type(value) not in registry.ENUMS.by_key:
      raise FormatError(f"an array's kernel memory space {value!r:.80} is "
                        "not a member of a registered enum")
    return value

  def _layout(self, sa, ndim: int):
    """An array's layout (`ShapedArray.layout`, JAX 0.11+; version 7)."""
    if self.format_version < 7:
      raise FormatError("an aval has `layout`, which a file before version 7 "
                        "MUST NOT have")
    layout = params.decode_value(self, sa.layout)
    if type(layout) is not compat.Layout:
      raise FormatError(f"an array's layout {layout!r:.80} is not a "
                        "jax.experimental.layout.Layout record")
    if len(layout.major_to_minor) != ndim:
      raise FormatError(f"an array of rank {ndim} has the layout {layout} "
                        f"of rank {len(layout.major_to_minor)}")
    if not compat.ARRAYS_HAVE_LAYOUT:
      # Loading without it would be a different program: JAX compares and
      # lowers arrays with their layout.
      raise FormatError(
          f"an array has the layout {layout} (set by relayout), which "
          f"arrays of JAX {compat.JAX_VERSION} cannot carry; load the file "
          "with JAX 0.11 or later")
    return layout

  def _dims_of(self, dims) -> list:
    """The dimensions of repeated `Dim` messages."""
    if len(dims) > _MAX_RANK:
      raise FormatError(f"aval of rank {len(dims)} is over {_MAX_RANK}")
    shape = []
    for d in dims:
      kind = d.WhichOneof("kind")
      if kind == "expr":
        shape.append(self.dim(self.string(d.expr)))
      elif kind == "size" and 0 <= d.size <= _MAX_DIM:
        shape.append(d.size)
      else:
        value = d.size if kind == "size" else "(unset)"
        raise FormatError(f"aval dimension {value} is not a valid size "
                          f"(0 to 2**62)")
    return shape

  def _decode_ref(self, m):
    if self.msg.format_version < 4:
      raise FormatError("a ref aval in a file before version 4")
    # Avals refer only to earlier ones: `self.avals` holds exactly those.
    if m.inner_aval >= len(self.avals):
      raise FormatError(f"a ref's inner aval {m.inner_aval} does not come "
                        "before it")
    inner = self.avals[m.inner_aval]
    if type(inner) is not compat.ShapedArray:
      raise FormatError(f"a ref's inner aval is a {type(inner).__name__}, "
                        "not an array type")
    memory_space = (params.decode_value(self, m.memory_space)
                    if m.HasField("memory_space") else None)
    kind = params.decode_value(self, m.kind) if m.HasField("kind") else None
    for what, value in (("memory space", memory_space), ("kind", kind)):
      if value is not None and type(value) not in registry.ENUMS.by_key \
          and type(value) not in registry.RECORDS.by_key:
        raise FormatError(f"a ref's {what} {value!r:.80} is not None or a "
                          "registered enum member or record")
    try:
      return pallas.build_ref(inner, memory_space, kind)
    except (TypeError, ValueError) as e:
      raise FormatError(f"ref aval cannot be rebuilt: {e}") from None

  def _earlier_array_aval(self, i: int, what: str):
    """The aval a version 7 aval kind refers to: an earlier ShapedArray."""
    if self.msg.format_version < 7:
      raise FormatError(f"{what} aval in a file before version 7")
    # Avals refer only to earlier ones: `self.avals` holds exactly those.
    if i >= len(self.avals):
      raise FormatError(f"{what}'s inner aval {i} does not come before it")
    inner = self.avals[i]
    if type(inner) is not compat.ShapedArray:
      raise FormatError(f"{what}'s inner aval is a {type(inner).__name__}, "
                        "not an array type")
    return inner

  def _decode_future(self, m):
    """`core.AbstractFuture` (version 7)."""
    inner = self._earlier_array_aval(m.inner_aval, "a future")
    done = None
    if m.done:
      name = self.string(m.done - 1)
      done = compat.FUTURE_DONES.get(name)
      if done is None:
        raise FormatError(
            f"a future's done primitive {name!r:.80} is not one this JAX "
            f"has (it has {', '.join(compat.FUTURE_DONES)})")
    return compat.ADAPTER.new_future(inner, done)

  def _decode_lin_val(self, m):
    """`state.AbstractLinVal` (version 7)."""
    inner = self._earlier_array_aval(m.inner_aval, "a pinned linear value")
    if m.memory_space not in _LIN_VAL_MEMORY_SPACES:
      raise FormatError(f"unknown memory space {m.memory_space} of a "
                        "pinned linear value")
    if compat.AbstractLinVal is None:
      raise FormatError(
          f"the file holds a pinned linear value (state.AbstractLinVal), "
          f"which JAX {compat.JAX_VERSION} does not have; load it with a "
          "JAX release that has jax._src.state.types.AbstractLinVal")
    return compat.AbstractLinVal(inner, _LIN_VAL_MEMORY_SPACES[m.memory_space])

  def dim(self, text: str):
    """The symbolic dimension `text`, in the program's one scope."""
    dim = self._dims.get(text)
    if dim is None:
      # JAX's parser trusts its input: bound what it gets.
      dim_grammar.check(text)
      if self._scope is None:
        constraints = self.msg.symbolic_constraints
        if len(constraints) > _MAX_CONSTRAINTS:
          raise FormatError(f"{len(constraints)} symbolic constraints are "
                            f"over the limit of {_MAX_CONSTRAINTS}")
        for c in constraints:
          dim_grammar.check(c, constraint=True)
        try:
          self._scope = symbolic.new_scope(constraints)
        except (ValueError, TypeError, RecursionError,
                tokenize.TokenError) as e:
          raise FormatError(f"symbolic constraints are invalid: {e}") from None
      try:
        dim = symbolic.parse_dim(text, self._scope)
      except (ValueError, TypeError, RecursionError,
              tokenize.TokenError) as e:  # TokenError: Python 3.12's tokenizer
        raise FormatError(f"symbolic dimension {text!r} does not parse: "
                          f"{e}") from None
      dim_grammar.check_value(text, dim)
      self._dims[text] = dim
    return dim

  # ------------------------------------------------------------ arrays
  def array(self, i: int):
    self._index(i, len(self._arrays), "array")
    if not self._array_done[i]:
      try:
        self._arrays[i] = self._decode_array(self.msg.arrays[i])
      except FormatError as e:
        raise FormatError(f"array {i}: {e}") from None
      self._array_done[i] = True
    return self._arrays[i]

  def _decode_array(self, m):
    aval = self.aval(m.aval)
    kind = m.kind
    if type(aval) is not compat.ShapedArray:
      raise FormatError("an array value needs a ShapedArray type")
    which = m.WhichOneof("data")
    if which == "python_value":
      return self._python_scalar(kind, m.python_value, aval)
    if compat.is_prng_key_dtype(aval.dtype):
      impl = compat.key_impl_of(aval.dtype)
      data_dtype = np.dtype(np.uint32)
      shape = tuple(aval.shape) + tuple(impl.key_shape)
    else:
      data_dtype = aval.dtype
      shape = tuple(aval.shape)
    if any(type(d) is not int for d in shape):
      raise FormatError("an array value needs a concrete shape")
    count = 1
    for d in shape:
      count *= d
    nbytes = count * data_dtype.itemsize
    if which == "inline":
      raw = m.inline
    elif which == "blob":
      raw = self._blob(m.blob)
    else:
      raise FormatError("array has no data")
    if len(raw) != nbytes:
      raise FormatError(f"array of type {aval.str_short()} needs {nbytes} "
                      f"bytes but has {len(raw)}")
    if data_dtype.itemsize:
      data = np.frombuffer(raw, dtype=data_dtype).reshape(shape)
    elif count <= _MAX_ZERO_SIZE_ELEMENTS:  # float0: no bytes at all
      data = np.zeros(shape, data_dtype)
    else:
      raise FormatError(f"array of type {aval.str_short()} has {count} "
                        f"elements, over the limit of "
                        f"{_MAX_ZERO_SIZE_ELEMENTS} for zero-size elements")
    if compat.is_prng_key_dtype(aval.dtype):
      return compat.wrap_key_data(data, compat.key_impl_of(aval.dtype))
    if kind == pb.HostKind["TYPED_NDARRAY"]:
      return compat.TypedNdArray(data, aval)
    if kind == pb.HostKind["NUMPY_ARRAY"]:
      return data
    if kind == pb.HostKind["NUMPY_SCALAR"]:
      if shape:
        raise FormatError("a numpy scalar must have shape ()")
      return data[()]
    if kind == pb.HostKind["JAX_ARRAY"]:
      import jax  # pylint: disable=g-import-not-at-top
      try:
        value = jax.device_put(data)
      except RuntimeError as e:
        raise FormatError(f"array of type {aval.str_short()} cannot be "
                          f"placed on a device: {e}") from None
      return compat.weak_jax_array(value) if aval.weak_type else value
    raise FormatError(f"host kind {_KIND_NAMES.get(kind, kind)} does not fit "
                    "array data")

  def _python_scalar(self, kind, value_msg, aval):
    which = value_msg.WhichOneof("kind")
    value = params.decode_value(self, value_msg)
    if aval.shape:
      raise FormatError("a scalar value needs a rank-0 type")
    dtype = aval.dtype
    if not _scalar_fits(which, value, dtype):
      raise FormatError(f"a Python {which} value {value!r} cannot be a "
                        f"scalar of type {aval.str_short()}")
    if kind == pb.HostKind["TYPED_SCALAR"] and which in _TYPED_SCALARS:
      return _TYPED_SCALARS[which](value, dtype)
    if kind == pb.HostKind["PYTHON_SCALAR"] and which in _PYTHON_SCALARS:
      return value
    raise FormatError(f"host kind {_KIND_NAMES.get(kind, kind)} cannot hold a "
                    f"{which} value")

  def _blob(self, i: int) -> memoryview:
    blob = self.msg.blobs[self._index(i, len(self.msg.blobs), "blob")]
    if self.verify_blobs:
      checksum = blob.crc32
    else:
      checksum = None
      self.pending_blobs.add(i)
    return self.container.blob(blob.offset, blob.length, checksum,
                               f"blob {i}")

  def verify_pending_blobs(self) -> None:
    """Checks the checksums of blobs read without checking."""
    for i in sorted(self.pending_blobs):
      blob = self.msg.blobs[i]
      self.container.blob(blob.offset, blob.length, blob.crc32, f"blob {i}")
    self.pending_blobs.clear()

  # --------------------------------------------------- contexts, names
  def decode_contexts(self) -> None:
    """Builds every equation context."""
    for i, m in enumerate(self.msg.eqn_contexts[:]):
      try:
        self.contexts[i] = self._eqn_context(m)
      except validate.DECODE_ERRORS as e:
        raise FormatError(f"eqn context {i}: "
                          f"{validate.describe_error(e)}") from None

  def _eqn_context(self, m):
    """The `JaxprEqnContext` of an `EqnContext` message."""
    compute_type = (None if m.compute_type == 0
                    else self.string(m.compute_type - 1))
    mesh = params.decode_value(self, m.cur_abstract_mesh)
    if type(mesh) is not compat.AbstractMesh:
      raise FormatError("an equation context's mesh is not an AbstractMesh")
    xla_metadata = (params.decode_value(self, m.xla_metadata)
                    if m.HasField("xla_metadata") else None)
    if xla_metadata is not None:
      try:
        xla_metadata = dict(xla_metadata)
      except (TypeError, ValueError):
        raise FormatError("xla_metadata is not a tuple of pairs") from None
    layout_mode = ("AUTO" if m.layout_mode == 0
                   else self.string(m.layout_mode - 1))
    no_collectives = (params.decode_value(self, m.no_collectives)
                      if m.HasField("no_collectives") else frozenset())
    if type(no_collectives) is not frozenset:
      raise FormatError("no_collectives is not a frozenset")
    extra = compat.ADAPTER.context_from_format(layout_mode, no_collectives,
                                               self.where)
    return compat.new_eqn_context(
        **extra,
        compute_type=compute_type,
        threefry_partitionable=m.threefry_partitionable,
        cur_abstract_mesh=mesh,
        remove_size_one_mesh_axis=m.remove_size_one_mesh_axis,
        xla_metadata=None if xla_metadata is None
        else tuple(sorted(xla_metadata.items())))

  def source_info_array(self) -> np.ndarray:
    """`source_infos` as an object array (equations gather from it)."""
    if self._source_info_array is None:
      self._source_info_array = equations.objects(self.source_infos)
    return self._source_info_array

  def context_array(self) -> np.ndarray:
    """`contexts` as an object array (equations gather from it)."""
    if self._context_array is None:
      self._context_array = equations.objects(self.contexts)
    return self._context_array

  def _name_entry(self, kind: int, name: int):
    # Entries are immutable and repeat across stacks; building one is slow
    # on JAX 0.12 (a frozen dataclass), so each is built once.
    entry = self._name_entries.get((kind, name))
    if entry is None:
      cls = _NAME_ENTRY_TYPES.get(kind)
      if cls is None:
        raise FormatError(f"unknown name stack entry kind {kind}")
      entry = self._name_entries[kind, name] = cls(self.string(name))
    return entry

  def decode_name_stacks(self) -> None:
    """Builds every name stack and its `SourceInfo`."""
    if self.msg.format_version < 3:
      if self.msg.HasField("name_stack_table"):
        raise FormatError("a file before version 3 has a name stack table")
      for i, m in enumerate(self.msg.name_stacks):
        self.source_infos[i] = compat.SourceInfo(None, compat.NameStack(
            tuple(self._name_entry(e.kind, e.name) for e in m.entries)))
      return
    if self.msg.name_stacks:
      raise FormatError(f"a version {self.msg.format_version} file stores "
                        "`name_stacks` messages; from version 3 on, name "
                        "stacks are in `name_stack_table`")
    table = self.msg.name_stack_table
    parents, kinds, names = (equations.column(table, field, "<u4")
                             for field in ("parents", "kinds", "names"))
    n = len(parents)
    if len(kinds) != n or len(names) != n:
      raise FormatError(f"the name stack table's columns have {n}, "
                        f"{len(kinds)} and {len(names)} entries")
    if n and np.any(parents > np.arange(n)):
      i = int(np.flatnonzero(parents > np.arange(n))[0])
      raise FormatError(f"name stack {i}'s parent {int(parents[i]) - 1} does "
                        "not come before it")
    # Each stack holds a tuple of all its entries: charge them first (a
    # chain of stacks would otherwise cost the square of its length).
    depths = [0] * n
    for i, parent in enumerate(parents.tolist()):
      depths[i] = depths[parent - 1] + 1 if parent else 1
    self.charge(8 * sum(depths), "the name stacks")
    if np.any((kinds == 0) & ((parents != 0) | (names != 0))):
      i = int(np.flatnonzero((kinds == 0) & ((parents != 0) | (names != 0)))[0])
      raise FormatError(f"name stack {i} has no entry of its own but is not "
                        "the empty stack")
    known, entry_of = self._name_entries, self._name_entry
    entries = [(known.get((kind, name)) or entry_of(kind, name)) if kind
               else None for kind, name in zip(kinds.tolist(), names.tolist())]
    tuples: list[tuple] = []  # each stack's entries
    append = tuples.append
    for parent, entry in zip(parents.tolist(), entries):
      prefix = tuples[parent - 1] if parent else ()
      append(prefix if entry is None else prefix + (entry,))
    new_stack, new_info = compat.NameStack, compat.SourceInfo
    self.source_infos = [new_info(None, new_stack(t)) for t in tuples]

  def param_set(self, i: int, name: str):
    """The params dict of param set `i`, used by primitive `name`.

    Decoded once and cached; every equation gets its own shallow copy."""
    entry = self._param_sets[self._index(i, len(self._param_sets),
                                         "param set")]
    if entry is None:
      outer_refs, self._refs = self._refs, []
      values: dict[str, Any] = {}
      coded = []
      skipped = compat.ADAPTER.skipped_params
      decoders, shared = params.DECODERS, params.SHARED_KINDS
      for p in self.msg.param_sets[i].params[:]:
        key = self.string(p.name)
        if key in values:
          raise FormatError(f"param set {i}: param {key!r} appears twice")
        if skipped and (name, key) in skipped:
          continue
        value = p.value
        kind = value.WhichOneof("kind")
        try:
          if kind in decoders and kind not in shared:
            # Scalars and other unshared kinds: straight to their decoder
            # (what decode_value would do, without its prologue).
            values[key] = decoders[kind](self, value, 0)
          elif kind == "param_codec":
            codec = registry.EQN_PARAM_CODECS.get((name, key))
            if codec is None:
              raise FormatError(f"{name!r} has no codec for param {key!r}")
            coded.append((codec, key, params.decode_value(
                self, value.param_codec)))
            values[key] = None
          else:
            values[key] = params.decode_value(self, value, 0, kind)
        except validate.DECODE_ERRORS as e:
          raise FormatError(f"param set {i}, param {key!r}: "
                            f"{validate.describe_error(e)}") from None
      for codec, key, stored in coded:
        try:
          values[key] = codec.decode(stored, values)
        except validate.DECODE_ERRORS as e:
          raise FormatError(f"param set {i}, param {key!r}: "
                            f"{validate.describe_error(e)}") from None
      try:
        validate.check_param_values(values)
      except FormatError as e:
        raise FormatError(f"param set {i}: {e}") from None
      entry = self._param_sets[i] = (name, values, tuple(self._refs))
      self._refs = outer_refs
    if entry[0] != name and any(
        (entry[0], key) in registry.EQN_PARAM_CODECS for key in entry[1]):
      raise FormatError(f"param set {i} holds params coded for "
                        f"{entry[0]!r} but is used by {name!r}")
    return dict(entry[1]), entry[2]

  # ----------------------------------------------------- equation kinds
  def legacy_kind(self, primitive: int, param_set: int, n_in: int,
                  n_out: int) -> int:
    """The kind index of an equation of a version 1-2 file."""
    key = (primitive, param_set, n_in, n_out)
    k = self._kind_index.get(key)
    if k is None:
      k = self._kind_index[key] = len(self.kind_keys)
      self.kind_keys.append(key)
      self.kinds.append(None)
    return k

  def kind_arity(self) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, outputs) of each kind, as arrays."""
    if self._kind_arity is None or len(self._kind_arity[0]) != len(
        self.kind_keys):
      keys = np.array(self.kind_keys, np.int64).reshape(-1, 4)
      self._kind_arity = (keys[:, 2].copy(), keys[:, 3].copy())
    return self._kind_arity

  # ------------------------------------------------------------ jaxprs
  def jaxpr(self, i: int):
    """A jaxpr referenced from the jaxpr being built: it must come before."""
    if not 0 <= i < len(self.jaxprs):
      raise FormatError(
          f"jaxpr index {i} does not refer to an earlier jaxpr (only "
          f"{len(self.jaxprs)} are built); sub-jaxprs must precede their "
          "users")
    self.jaxpr_refs_seen += 1
    if self._refs is not None:
      self._refs.append(i)
    return self.jaxprs[i]

  def closed_jaxpr(self, i: int):
    self._index(i, len(self._closed), "closed jaxpr")
    self.jaxpr_refs_seen += 1
    if self._closed[i] is None:
      m = self.msg.closed_jaxprs[i]
      try:
        jaxpr = self.jaxpr(m.jaxpr)
        n_constvars = len(self.msg.jaxprs[m.jaxpr].constvars)
        if len(m.consts) != n_constvars:
          raise FormatError(f"{len(m.consts)} constants for "
                          f"{n_constvars} constvars")
        consts = []
        for var, c in zip(compat.leading_vars(jaxpr, n_constvars), m.consts):
          value = self.array(c)
          aval = self.aval(self.msg.arrays[c].aval)
          if aval != var.aval:
            raise FormatError(f"constant of type {aval.str_short()} for a "
                            f"constvar of type {var.aval.str_short()}")
          consts.append(value)
      except FormatError as e:
        raise FormatError(f"closed jaxpr {i}: {e}") from None
      self._closed[i] = compat.make_closed(jaxpr, consts)
    elif self._refs is not None:
      self._refs.append(self.msg.closed_jaxprs[i].jaxpr)
    return self._closed[i]

  def build_jaxprs(self) -> None:
    messages = self.msg.jaxprs[:]
    decoders, columns = [], []
    for i, m in enumerate(messages):
      decoder = _JaxprDecoder(self, m)
      try:
        decoder.bind_inputs()
        columns.append(equations.columns_of(self, m))
      except FormatError as e:
        raise FormatError(f"jaxpr {i}: {e}") from None
      decoders.append(decoder)
    try:
      batch = equations.prepare(self, [d.env for d in decoders], columns)
    except validate.DECODE_ERRORS as e:
      raise FormatError(validate.describe_error(e)) from None
    for i, (m, decoder, cols) in enumerate(zip(messages, decoders, columns)):
      try:
        self.jaxprs.append(decoder.decode(batch, i, cols))
      except FormatError as e:
        raise FormatError(f"jaxpr {i}: {e}") from None
      if m.eqns:  # versions 1-2: outputs beyond one per equation
        self.charge(max(0, len(decoder.env) - len(m.eqns) - len(m.constvars)
                        - len(m.invars)) * _VAR_COST, f"jaxpr {i}")
      depth = 1 + max((self._depths[j] for j in decoder.refs), default=0)
      if depth > MAX_JAXPR_DEPTH:
        raise FormatError(f"jaxpr {i} nests {depth} levels deep, over the "
                          f"limit of {MAX_JAXPR_DEPTH}")
      self._depths.append(depth)
      self.sizes.append(min(decoder.size, _SIZE_CAP))

  @property
  def expanded_size(self) -> int:
    """Equations of the root program with every use of a shared sub-jaxpr
    counted (what a recursive walk such as JAX's type checker visits)."""
    return self.sizes[self.msg.closed_jaxprs[self.msg.root].jaxpr]

  def literal(self, index: int):
    """A new `Literal` of array `index` (its value and type checked once)."""
    literal = self._literals.get(index)
    if literal is None:
      literal = self._literals[index] = (
          self.array(index), self.aval(self.msg.arrays[index].aval))
    return compat.Literal(*literal)

  def effect(self, m, env, bound: int | None = None):
    """The effect of message `m`; an input effect may name the first
    `bound` variables of `env` (all of them by default)."""
    name = self.string(m.name)
    singleton = compat.SINGLETON_EFFECTS.get(name)
    if singleton is not None:
      return singleton
    payload = (params.decode_value(self, m.payload)
               if m.HasField("payload") else None)
    if name == "jax.NamedAxisEffect":
      return compat.NamedAxisEffect(payload)
    codec = registry.EFFECTS.by_name.get(name)
    if codec is not None:
      return codec.decode(payload)
    cls = compat.INPUT_EFFECTS.get(name)
    if cls is not None:
      if (type(payload) is tuple and len(payload) == 2
          and type(payload[1]) is int):
        if payload[0] == "position":
          return cls(payload[1])
        if payload[0] == "var" and 0 <= payload[1] < (
            len(env) if bound is None else bound):
          return cls(env[payload[1]])
      raise FormatError(f"effect {name!r} has a bad payload {payload!r}")
    raise FormatError(f"unknown effect {name!r}")


class _JaxprDecoder:
  """Rebuilds one jaxpr, binding variables in order and checking uses."""

  def __init__(self, reader: Reader, msg):
    self.r = reader
    self.msg = msg
    self.env: list[Any] = []
    self.constvars: list[Any] = []
    self.invars: list[Any] = []
    self.refs: list[int] = []   # sub-jaxprs referenced by the equations
    self.size = 0               # equations, sub-jaxprs inlined

  def bind(self, aval_index: int, cls=compat.Var):
    var = cls(self.r.aval(aval_index))
    self.env.append(var)
    return var

  def bind_all(self, aval_indices) -> list:
    """Binds a variable of each aval in turn."""
    avals, var = self.r.avals, compat.Var
    try:
      variables = list(map(var, map(avals.__getitem__, aval_indices)))
    except IndexError:
      return [self.bind(a) for a in aval_indices]  # raises the error
    self.env += variables
    return variables

  def atom(self, ref: int):
    r = self.r
    if ref >= 0:
      if ref >= len(self.env):
        raise FormatError(f"variable {ref} is used before it is bound (only "
                     f"{len(self.env)} are bound here)")
      var = self.env[ref]
      if type(var) is compat.DropVar:
        raise FormatError(f"variable {ref} is a dropped output and cannot be used")
      return var
    return r.literal(-1 - ref)

  def effects(self, messages):
    if not messages:
      return compat.no_effects
    return {self.r.effect(m, self.env) for m in messages}

  def bind_inputs(self) -> None:
    """Binds the jaxpr's constvars and invars (variables 0, 1, ...)."""
    m = self.msg
    self.constvars = self.bind_all(m.constvars[:])
    self.invars = self.bind_all(m.invars[:])

  def decode(self, batch, i: int, cols):
    """Jaxpr `i` of the program, its equations from `batch`
    (equations.prepare), after `bind_inputs`."""
    r, m = self.r, self.msg
    constvars, invars = self.constvars, self.invars
    try:
      eqns = equations.build(self, batch, i, cols)
    except validate.DECODE_ERRORS as e:
      raise FormatError(validate.describe_error(e)) from None
    try:
      outvars = [self.atom(a) for a in m.outvars[:]]
      effects = self.effects(m.effects)
      info = m.debug_info
      # JAX asserts these lengths deep inside transformations (DCE).
      if info.has_arg_names and len(info.arg_names) != len(invars):
        raise FormatError(f"debug info names {len(info.arg_names)} "
                          f"arguments for {len(invars)} inputs")
      if info.has_result_paths and len(info.result_paths) != len(outvars):
        raise FormatError(f"debug info names {len(info.result_paths)} "
                          f"results for {len(outvars)} outputs")
      debug_info = compat.DebugInfo(
          r.string(info.traced_for), r.string(info.func_src_info),
          r.string_tuple(info.arg_names) if info.has_arg_names else None,
          r.string_tuple(info.result_paths) if info.has_result_paths
          else None)
      return compat.new_jaxpr(constvars, invars, outvars, eqns, effects,
                              debug_info, m.is_high)
    except validate.DECODE_ERRORS as e:
      raise FormatError(f"outputs: {validate.describe_error(e)}") from None


def read(data_container: container.Container, *, verify_blobs: bool,
         trusted: bool = False):
  """(closed jaxpr, in_tree, out_tree, message, reader) of a container."""
  # Rebuilding a program allocates tens of thousands of small acyclic
  # objects; the cyclic collector would rescan them many times over (about
  # a quarter of the time of a large load). Reference counting still frees
  # everything; collection resumes, as it was, afterwards.
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    return _read(data_container, verify_blobs=verify_blobs, trusted=trusted)
  finally:
    if was_enabled:
      gc.enable()


def _read(data_container: container.Container, *, verify_blobs: bool,
          trusted: bool):
  source = data_container.source
  msg = parse_program(data_container.program, source)
  if msg.format_version != data_container.format_version:
    raise FormatError(
        f"{source}: the header says format version "
        f"{data_container.format_version} but the program message says "
        f"{msg.format_version}")
  reader = Reader(msg, data_container, verify_blobs=verify_blobs,
                  trusted=trusted)
  try:
    reader.charge_tables()
    reader.decode_avals()
    reader.decode_name_stacks()
    reader.decode_contexts()
    reader.build_jaxprs()
    closed = reader.closed_jaxpr(msg.root)
    in_tree, is_call = pytrees.decode_call_signature(reader, msg.in_tree)
    out_tree = pytrees.decode_treedef(reader, msg.out_tree)
  except RecursionError:
    raise FormatError(f"{source}: the program nests too deeply") from None
  except validate.DECODE_ERRORS as e:
    raise FormatError(f"{source}: {validate.describe_error(e)}") from None
  if not is_call:
    raise FormatError(f"{source}: the input signature {in_tree} is not the "
                      "structure of (args tuple, kwargs dict with string "
                      "keys); the program could not be called")
  if in_tree.num_leaves != len(closed.jaxpr.invars):
    raise FormatError(
        f"{source}: the input signature has {in_tree.num_leaves} leaves but "
        f"the program takes {len(closed.jaxpr.invars)} inputs")
  if out_tree.num_leaves != len(closed.jaxpr.outvars):
    raise FormatError(
        f"{source}: the output signature has {out_tree.num_leaves} leaves "
        f"but the program returns {len(closed.jaxpr.outvars)} outputs")
  return closed, in_tree, out_tree, msg, reader
