"""Program message tables -> avals and arrays: the types and constant values
a load builds before its jaxprs.

`AvalReader` is a part of `jaxpr_io.read.reader.Reader` (a mixin of it, so that
the hot lookups `aval`, `array` and `literal` stay one method call): it
rebuilds the aval table (shaped arrays with their dtypes, symbolic
dimensions in the program's one scope, memory spaces, shardings and
layouts; refs, futures, pinned linear values, tokens) and the arrays that
literals and constants hold (inline or in checksummed blobs of the
container). Every size, rank and reference is bounded and checked before
JAX sees it; violations raise `FormatError` without a location, which the
reader's loops prefix. The state it works on (`avals`, `_arrays`,
`_array_done`, `_literals`, `_dims`, `_scope`, `_dim_costs`,
`pending_blobs`) is set up by `Reader.__init__`.
"""

from __future__ import annotations

import tokenize

import numpy as np
from jax import numpy as jnp

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.compat import symbolic
from jaxpr_io.format import dim_cost
from jaxpr_io.format import limits
from jaxpr_io.format import dim_grammar
from jaxpr_io.codec import dtypes
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.families.pallas import refs as pallas_refs
from jaxpr_io.codec import params
from jaxpr_io.codec import registry
from jaxpr_io.safety import validate
from jaxpr_io.errors import FormatError

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
_MAX_RANK = 64
_MAX_DIM = 1 << 62
_MAX_CONSTRAINTS = 100
_MAX_ZERO_SIZE_ELEMENTS = 1 << 31
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


def _shaped_array(shape: tuple, dtype, weak_type: bool, kwargs: dict):
  try:
    return compat.ShapedArray(shape, dtype, weak_type, **kwargs)
  except (TypeError, ValueError, AssertionError) as e:
    raise FormatError(f"aval cannot be rebuilt: {e}") from None


class AvalReader:
  """The avals and arrays of a `Reader`'s program (see the module doc)."""

  def aval(self, i: int):
    return self.avals[self._index(i, len(self.avals), "aval")]

  def decode_avals(self) -> None:
    if self.msg.symbolic_constraints:
      self.build_scope()  # its errors name the constraint, not an aval
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
    if kind == "hi_mutable":
      return hi_mutable.decode_aval(self, m.hi_mutable)
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
    shape, texts = [], []
    for d in dims:
      kind = d.WhichOneof("kind")
      if kind == "expr":
        texts.append(self.string(d.expr))
        shape.append(self.dim(texts[-1]))
      elif kind == "size" and 0 <= d.size <= _MAX_DIM:
        shape.append(d.size)
      else:
        value = d.size if kind == "size" else "(unset)"
        raise FormatError(f"aval dimension {value} is not a valid size "
                          f"(0 to 2**62)")
    if len(texts) > 1:
      self.charge(self._dim_costs.shape_cost(texts) * dim_cost.DIM_WORK_COST,
                  "a symbolic shape's size")
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
      return pallas_refs.build_ref(inner, memory_space, kind)
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
      done = compat_tables.FUTURE_DONES.get(name)
      if done is None:
        raise FormatError(
            f"a future's done primitive {name!r:.80} is not one this JAX "
            f"has (it has {', '.join(compat_tables.FUTURE_DONES)})")
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

  def build_scope(self) -> None:
    """The program's one symbolic scope, from its constraints: each
    checked against the grammar and bounded (dim_cost.py) before JAX parses
    it."""
    constraints = self.msg.symbolic_constraints
    if len(constraints) > _MAX_CONSTRAINTS:
      raise FormatError(f"{len(constraints)} symbolic constraints are "
                        f"over the limit of {_MAX_CONSTRAINTS}")
    for c in constraints:
      dim_grammar.check(c, constraint=True)
    self._dim_costs = dim_cost.Scope(constraints)
    self.charge(sum(self._dim_costs.constraint_work)
                * dim_cost.DIM_WORK_COST, "the symbolic constraints")
    try:
      self._scope = self._decided("the symbolic constraints",
                                  symbolic.new_scope, constraints)
    except FormatError:
      raise
    except (ValueError, TypeError, RecursionError,
            tokenize.TokenError) as e:
      raise FormatError(f"symbolic constraints are invalid: {e}") from None

  def _decided(self, what: str, fn, *args):
    """`fn(*args)`, with JAX's decision procedure held to what is left of
    the load's steps (`limits.DECISION_STEPS`; none if trusted)."""
    with symbolic.decision_budget(self.decision_steps):
      try:
        return fn(*args)
      except symbolic.DecisionBudgetExceeded:
        raise FormatError(
            f"{what}: JAX's decision procedure (which simplifies `max` and "
            "`min` and compares dimensions against the constraints) would "
            f"take over {limits.DECISION_STEPS:,} steps, the limit of an untrusted "
            "file; load it with trusted=True if you know where it comes "
            "from") from None
      finally:
        self.decision_steps = symbolic.steps_left()

  def dim(self, text: str):
    """The symbolic dimension `text`, in the program's one scope."""
    dim = self._dims.get(text)
    if dim is None:
      # JAX's parser trusts its input: bound what it gets, and what it
      # computes from it (dim_cost.py), before it runs.
      dim_grammar.check(text)
      if self._scope is None:
        self.build_scope()
      self.charge(self._dim_costs.cost(text) * dim_cost.DIM_WORK_COST,
                  f"symbolic dimension {text[:80]!r}")
      try:
        dim = self._decided(f"symbolic dimension {text[:80]!r}",
                            symbolic.parse_dim, text, self._scope)
      except FormatError:
        raise
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


  def literal(self, index: int):
    """A new `Literal` of array `index` (its value and type checked once)."""
    literal = self._literals.get(index)
    if literal is None:
      literal = self._literals[index] = (
          self.array(index), self.aval(self.msg.arrays[index].aval))
    return compat.Literal(*literal)


def check_boundary_memory_spaces(closed, source: str) -> None:
  """The program's inputs and outputs are arrays, whose memory space is one
  an array has (`compat.ARRAY_MEMORY_SPACES`): JAX maps it to a memory
  kind where they cross a jit boundary (`jax.export`'s call, a sharded
  `jit`) and has none for `Any` (fuzz case 22529: an input of memory space
  Any passed `check=True`, and its `Exported` could not be called)."""
  for what, variables in (("input", closed.jaxpr.invars),
                          ("output", closed.jaxpr.outvars)):
    for i, var in enumerate(variables):
      space = getattr(getattr(var, "aval", None), "memory_space", None)
      if (isinstance(space, compat.MemorySpace)
          and space not in compat.ARRAY_MEMORY_SPACES):
        raise FormatError(
            f"{source}: program {what} {i} has memory space {space.name}, "
            "which no array has (arrays are in "
            f"{' or '.join(sorted(s.name for s in compat.ARRAY_MEMORY_SPACES))}"
            " memory); the file is damaged or was not written by jaxpr_io")
