"""ClosedJaxpr + signature -> file bytes.

The writer walks the program depth-first and fills the tables of the
`Program` message in first-use order (strings, avals, arrays, blobs, eqn
contexts, name stacks, jaxprs, closed jaxprs), so the same program always
gives the same bytes. Sub-jaxprs are stored once per object: a jaxpr used by
many equations is written once and referenced by index, and the reader
rebuilds the same sharing (which JAX's printer shows as `let` bindings).
"""

from __future__ import annotations

import gc
import struct
from typing import Any

import numpy as np

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io import families
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.format import container
from jaxpr_io.write import arrays
from jaxpr_io.write import avals
from jaxpr_io.write import jaxprs
from jaxpr_io.format import crc
from jaxpr_io.compat import symbolic
from jaxpr_io.codec import dtypes
from jaxpr_io.codec import library_table as libraries
from jaxpr_io.families.libraries import codecs as library_codecs
from jaxpr_io.families.pallas import refs as pallas_refs
from jaxpr_io.codec import params
from jaxpr_io.pytree import codec as pytrees  # noqa: F401  (registers the treedef param codecs)
from jaxpr_io.codec import registry
from jaxpr_io.pytree import write as tree_write
from jaxpr_io.format import version
from jaxpr_io.format import vocabulary
from jaxpr_io.format import limits
from jaxpr_io.safety import costs
from jaxpr_io.safety import validate
from jaxpr_io.errors import FormatError, UnsupportedError

_DOUBLE = struct.Struct("<d")
# Arrays of at most this many bytes are stored inside the message.
INLINE_LIMIT = 64
MAX_JAXPR_DEPTH = limits.MAX_JAXPR_DEPTH




# The checksum a blob's entry holds until the message is finished: any value
# but 0 (which proto3 leaves out) gives the message its final length.
_PLACEHOLDER_CRC = 0xFFFFFFFF


# The input types of the equation whose params are being encoded (see
# `jaxpr_io.equation_in_avals`).
equation_in_avals = registry.equation_in_avals


class Writer:
  """Builds one `Program` message and its data section."""

  def __init__(self):
    # The families whose objects a program of this process can hold.
    families.load_imported()
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
    # (id(jaxpr), registry.encoding_context()) -> index; closed alike.
    self._jaxprs: dict[tuple, int] = {}
    self._closed: dict[tuple, int] = {}
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
    # `jaxpr_io.format.vocabulary.OPEN_JAXPR_PARAMS`); matters on JAX releases
    # where open and closed jaxprs are one type.
    self.open_jaxpr_slot = False
    # Whether it holds a jaxpr closed over the equation's inputs
    # (`jaxpr_io.format.vocabulary.CLOSURE_FROM_INPUTS_PARAMS`).
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
      key = ((aval, pallas_refs.stored_ref_kind(aval)) if pallas_refs.is_ref_class(t)
             else (aval, compat.ADAPTER.future_done(aval))
             if t is compat.AbstractFuture else aval)
      index = self._avals.get(key)
      if index is None:
        message = pb.Aval()
        avals.encode_aval(self, aval, message)
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
                    n_out: int, prim=None, release_params=None) -> int:
    """Index of an equation kind. `prim` and `release_params` (the
    equation's primitive and params as this release binds them): checked
    as the reader checks a kind (`validate.check_equation`) when new."""
    key = (self.string(name), param_set, n_in, n_out)
    index = self._eqn_kinds.get(key)
    if index is None:
      if prim is not None:
        _as_written(validate.check_equation, name, prim, n_in, n_out,
                    release_params)
      index = self._eqn_kinds[key] = len(self.msg.equation_kinds)
      self.msg.equation_kinds.add(primitive=key[0], param_set=param_set,
                                  num_invars=n_in, num_outvars=n_out)
    return index

  def param_set(self, name: str, values: dict, in_avals=None) -> int:
    """Index of an equation's params in the param-set table. `in_avals`:
    the equation's input types, for primitives whose param codecs need them
    (`registry.register_eqn_param_codec(needs_in_avals=True)`); they are
    part of the key, and `equation_in_avals()` gives them to the codecs."""
    key = (name, tuple([(k, _value_key(v)) for k, v in values.items()]),
           registry.encoding_context())
    if in_avals is not None:
      key = (key, tuple([_value_key(a) for a in in_avals]))
    index = self._param_sets.get(key)
    if index is None:
      saved_avals = registry.EQUATION_INPUTS.in_avals
      registry.EQUATION_INPUTS.in_avals = in_avals
      try:
        index = self._new_param_set(key, name, values)
      finally:
        registry.EQUATION_INPUTS.in_avals = saved_avals
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
    # What the reader checks of every param set it decodes, and of every
    # equation kind's params: refused here, before any byte is written, so
    # that no file the writer writes is refused by its reader.
    _as_written(validate.check_param_values, values)
    _as_written(validate.check_param_schema, name, values)
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

  def dim_expr(self, d) -> int:
    """String index of a symbolic dimension; all must share one scope."""
    if type(d) is not symbolic.DimExpr:
      raise UnsupportedError(f"dimension {d!r} of type {type(d).__name__} "
                             "is neither an int nor a symbolic dimension")
    scope = symbolic.scope_of(d)
    if self._scope is None:
      self._scope = scope
    elif scope is not self._scope:
      # A file holds one scope. Scopes that do not constrain differently
      # merge (a custom_vmap rule's axis size is traced in a scope of its
      # own, beside the program's); the constrained one is kept.
      mine = symbolic.scope_constraints(self._scope)
      theirs = symbolic.scope_constraints(scope)
      if mine and theirs and mine != theirs:
        raise UnsupportedError(
            f"symbolic dimension {d} comes from a different symbolic scope "
            "than the program's other dimensions, with other constraints; "
            "create all symbolic shapes with one jax.export.symbolic_shape "
            "call or a shared `scope=`")
      if theirs and not mine:
        self._scope = scope
    return self.string(str(d))

  def array(self, value, kind: int, aval=None) -> int:
    """Index of `value` in the arrays table (dedup by content)."""
    if aval is None:
      aval = compat.ShapedArray(np.shape(value), np.result_type(value))
    aval_index = self.aval(aval)
    if kind in (arrays.TYPED_SCALAR, arrays.PYTHON_SCALAR):
      scalar = pb.Value()
      params.encode_value(self, arrays.PYTHON_VALUE.get(type(value), arrays.same)(value),
                          scalar)
      key = (aval_index, kind, scalar.SerializeToString())
      index = self._arrays.get(key)
      if index is None:
        index = self._arrays[key] = len(self.msg.arrays)
        message = self.msg.arrays.add(aval=aval_index, kind=kind)
        message.python_value.CopyFrom(scalar)
      return index
    data = arrays.array_bytes(value, aval)
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
    candidates = self._blobs.setdefault((data.nbytes, arrays.sample_key(view)), [])
    checksum = None
    if candidates:
      # Large buffers are checksummed by several threads (jaxpr_io/format/crc.py).
      checksum = crc.crc32(view)
      for index in candidates:
        if (self._blob_crc(index) == checksum
            and arrays.same_bytes(self._blob_data[index], view)):
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
      known[index] = crc.crc32(self._blob_data[index])
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
    key = (id(closed), registry.encoding_context())
    index = self._closed.get(key)
    if index is None:
      jaxpr_index = self.jaxpr(closed.jaxpr)
      message = pb.ClosedJaxpr(jaxpr=jaxpr_index)
      for i, (var, const) in enumerate(zip(closed.jaxpr.constvars,
                                           closed.consts)):
        try:
          message.consts.append(self.array(const, arrays.TYPED_NDARRAY, var.aval))
        except UnsupportedError as e:
          raise UnsupportedError(f"constant {i}: {e}") from None
      self._keepalive.append(closed)
      index = self._closed[key] = len(self.msg.closed_jaxprs)
      self.msg.closed_jaxprs.append(message)
    return index

  def jaxpr(self, jaxpr) -> int:
    key = (id(jaxpr), registry.encoding_context())
    index = self._jaxprs.get(key)
    if index is None:
      if self._depth >= MAX_JAXPR_DEPTH:
        raise UnsupportedError(
            f"jaxprs nest deeper than {MAX_JAXPR_DEPTH} levels")
      self._depth += 1
      try:
        message = jaxprs.JaxprEncoder(self, jaxpr).encode()
      finally:
        self._depth -= 1
      self._keepalive.append(jaxpr)
      index = self._jaxprs[key] = len(self.msg.jaxprs)
      self.msg.jaxprs.append(message)
    return index

  # ------------------------------------------------------------ program
  def program(self, closed, in_tree, out_tree,
              metadata: dict[str, str]) -> None:
    with registry.writing_program(closed, in_tree):
      self._program(closed, in_tree, out_tree, metadata)

  def _program(self, closed, in_tree, out_tree,
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


_NAME_ENTRY_KINDS = {compat.NameScope: pb.NameStackKind["SCOPE"],
                     compat.NameTransform: pb.NameStackKind["TRANSFORM"]}

# Param values whose equality is their value; everything else (jaxprs,
# arrays, records, ...) is compared by identity, which is always safe.
_VALUE_KEYED = frozenset({bool, int, str, type(None), *(
    type(d) for d in dtypes.DTYPE_TO_ENUM), *compat_tables.ENUMS.values()})
_NUMPY_SCALARS = frozenset(d.type for d in dtypes.DTYPE_TO_ENUM)


def _as_written(check, *args) -> None:
  """Runs one of the reader's checks on what is being written; what it
  refuses is an UnsupportedError (the callers add the equation's index and
  primitive)."""
  try:
    check(*args)
  except FormatError as e:
    text = str(e).split("; the file was damaged")[0]
    raise UnsupportedError(
        f"{text}: its reader would refuse this equation, so it is not "
        "written (if JAX binds it so, the param schema lacks it: "
        "regenerate jaxpr_io/format/param_schema.json as docs/format.md "
        "says, or report it)") from None


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
  if t is tuple or t in registry.VALUE_KEYED_TUPLES:
    return (t, tuple([_value_key(x) for x in v]))
  if t is np.ndarray or t in _NUMPY_SCALARS:
    # By content: the arrays table stores equal arrays once, so after a
    # load they are one object; keying by identity here would then merge
    # param sets that were distinct, and re-dumping would change the bytes.
    return (t, v.dtype, v.shape, v.tobytes())
  return (t, id(v))


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
      for blob, value in zip(blobs, real):
        blob.crc32 = value
    return self._length

  def finish(self, crcs: list[int]) -> bytes:
    blobs = self._msg.blobs
    if len(crcs) != len(blobs):
      raise ValueError(f"{len(crcs)} checksums for {len(blobs)} blobs")
    for blob, value in zip(blobs, crcs):
      blob.crc32 = value
    return self._msg.SerializeToString(deterministic=True)


def write_pending(closed, in_tree, out_tree, metadata: dict[str, str]):
  """(program message, data layout) of a closed jaxpr; the message is a
  `container.PendingProgram`, to be finished with the layout's checksums
  (`container.to_bytes` and `files.write_file` do)."""
  if not compat.is_closed_jaxpr(closed):
    raise UnsupportedError(
        f"expected a jax ClosedJaxpr, got {type(closed).__name__}")
  # As the reader does (read/reader.py `read`): writing allocates many
  # small acyclic objects (messages, keys, caches), and the cyclic
  # collector rescanning them made `dumps` of nested programs superlinear
  # (a full collection was 1.98 s of 5.62 s at 100k equations). Reference
  # counting still frees everything; collection resumes as it was.
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    writer = Writer()
    writer.program(closed, in_tree, out_tree, metadata)
    pending = PendingMessage(writer.msg)
    _check_load_budget(writer.msg, pending.length())
    return pending, writer.layout
  finally:
    if was_enabled:
      gc.enable()


def write(closed, in_tree, out_tree, metadata: dict[str, str]):
  """(program message bytes, data layout) of a closed jaxpr."""
  message, layout = write_pending(closed, in_tree, out_tree, metadata)
  return message.finish(layout.crcs()), layout


def _check_load_budget(msg, program_bytes: int) -> None:
  """Raises UnsupportedError if an untrusted load would refuse the file for
  its memory: what its reader charges beyond the objects the file stores
  (jaxpr_io/safety/costs.py `writer_charge`) against the budget of a file
  no larger than its program message (`expansion_budget`; the file is
  larger, so its budget too). Only pytrees whose shared nodes expand past
  the budget can be refused."""
  charge = costs.writer_charge(msg)
  budget = costs.expansion_budget(costs.stored_counts(msg, program_bytes),
                                  program_bytes)
  if charge > budget:
    raise UnsupportedError(
        f"the program's pytrees expand to {charge - budget:,} bytes more "
        "than an untrusted load of its file would allow (its reader would "
        "refuse the file without trusted=True), so it is not written: "
        "flatten the program's inputs and outputs into fewer leaves")


# The param codecs that must encode a value apart (custom rules' fingerprints)
# make their writer with `registry.new_writer()`.
registry.set_writer_factory(Writer)
