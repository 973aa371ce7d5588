"""Param values <-> `Value` messages: one codec pair per Python type.

`ENCODERS` is keyed by the exact type of a value (`type(v)`, never an
isinstance chain, so a `bool` is never stored as an `int` and a subclass
never passes for its base). Enum and record types come from the registries in
`jaxpr_io.codec.registry`. Decoding dispatches on the `Value` oneof.

The encoder side works against a writer `w` that interns table entries
(`w.string`, `w.jaxpr`, `w.closed_jaxpr`, `w.array`, `w.primitive`); the
decoder side against a reader `r` with the inverse lookups. Both live in
jaxpr_io/write/writer.py and jaxpr_io/read/reader.py.
"""

from __future__ import annotations

import builtins
from typing import Any, Callable

import numpy as np

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.codec import dtypes
from jaxpr_io.codec import records  # noqa: F401  (registers JAX's record codecs)
from jaxpr_io.codec import registry
from jaxpr_io.compat import dead_consts
from jaxpr_io.compat import symbolic
from jaxpr_io.codec import unloaded
from jaxpr_io.format import limits
from jaxpr_io.errors import FormatError, UnsupportedError

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_MAX_BIG_INT_DIGITS = 4000
# How deep records and tuples nest (jaxpr_io/format/limits.py).
MAX_VALUE_DEPTH = limits.MAX_VALUE_DEPTH

Encoder = Callable[[Any, Any, Any, int], None]


def encode_none(w, v, out, depth):
  del w, v, depth
  out.none.SetInParent()


def decode_none(r, msg, depth):
  del r, msg, depth
  return None


def encode_bool(w, v, out, depth):
  del w, depth
  out.bool = v


def decode_bool(r, msg, depth):
  del r, depth
  return msg.bool


def encode_int(w, v, out, depth):
  del w, depth
  if _INT64_MIN <= v <= _INT64_MAX:
    out.int = v
  else:
    out.big_int = str(v)


def decode_int(r, msg, depth):
  del r, depth
  return msg.int


def decode_big_int(r, msg, depth):
  del r, depth
  text = msg.big_int
  if len(text) > _MAX_BIG_INT_DIGITS:
    raise FormatError(f"integer param with {len(text)} digits is too long")
  try:
    return int(text, 10)
  except ValueError:
    raise FormatError(f"integer param {text[:40]!r} is not a decimal "
                      "integer") from None


def encode_float(w, v, out, depth):
  del w, depth
  out.float = v


def decode_float(r, msg, depth):
  del r, depth
  return msg.float


def encode_complex(w, v, out, depth):
  del w, depth
  out.complex.real = v.real
  out.complex.imag = v.imag


def decode_complex(r, msg, depth):
  del r, depth
  return complex(msg.complex.real, msg.complex.imag)


def encode_str(w, v, out, depth):
  del depth
  out.str = w.string(v)


def decode_str(r, msg, depth):
  del depth
  return r.string(msg.str)


def _encode_items(w, items, out_tuple, depth):
  for item in items:
    encode_value(w, item, out_tuple.items.add(), depth + 1)


def _decode_items(r, msg_tuple, depth):
  # Most items are ints (shapes, axes): read those inline. Items are never
  # shared (see decode_value), so the others go straight to their decoder.
  depth += 1
  if depth > MAX_VALUE_DEPTH:
    raise FormatError(f"param value nests deeper than {MAX_VALUE_DEPTH}")
  items = []
  append = items.append
  for item in msg_tuple.items[:]:
    kind = item.WhichOneof("kind")
    if kind == "int":
      append(item.int)
    else:
      append((DECODERS.get(kind) or _unknown_kind(kind))(r, item, depth))
  return items


def encode_tuple(w, v, out, depth):
  # Tuples of only ints or only bools (shapes, axes, donated_invars) are one
  # packed field (version 5): equal values, equal bytes, and fast to read.
  if v:
    kinds = set(map(type, v))
    if kinds == {int} and _INT64_MIN <= min(v) and max(v) <= _INT64_MAX:
      out.ints.items.extend(v)
      return
    if kinds == {bool}:
      out.bools.items.extend(v)
      return
  out.tuple.SetInParent()
  _encode_items(w, v, out.tuple, depth)


def decode_tuple(r, msg, depth):
  return tuple(_decode_items(r, msg.tuple, depth))


def decode_ints(r, msg, depth):
  del depth
  items = msg.ints.items[:]
  _packed_tuple_since_5(r, items, "ints")
  return tuple(items)


def decode_bools(r, msg, depth):
  del depth
  items = msg.bools.items[:]
  _packed_tuple_since_5(r, items, "bools")
  return tuple(items)


def _packed_tuple_since_5(r, items, kind: str) -> None:
  if r.format_version < 5:
    raise FormatError(f"a {kind!r} value in a version {r.format_version} "
                      "file (added in version 5)")
  if not items:
    raise FormatError(f"an empty {kind!r} value (an empty tuple is stored "
                      "as `tuple`)")


def canonical_key(v):
  """A sort key for set elements that does not depend on the process: set
  iteration order follows string hashes, which change with PYTHONHASHSEED,
  and table indices follow the order things are first written."""
  t = type(v)
  if t is tuple:
    return ("tuple", tuple(canonical_key(x) for x in v))
  if t is frozenset:
    return ("frozenset", tuple(sorted(canonical_key(x) for x in v)))
  return (f"{t.__module__}.{t.__qualname__}", repr(v))


def encode_frozenset(w, v, out, depth):
  out.frozenset.SetInParent()
  _encode_items(w, sorted(v, key=canonical_key), out.frozenset, depth)


def decode_frozenset(r, msg, depth):
  try:
    return frozenset(_decode_items(r, msg.frozenset, depth))
  except TypeError as e:
    raise FormatError(f"frozenset param holds an unhashable value: {e}") from None


def encode_dtype(w, v, out, depth):
  dtypes.encode_dtype(v, out.dtype, w.string,
                      lambda value, field: encode_value(w, value, field,
                                                        depth + 1))


def decode_dtype(r, msg, depth):
  return dtypes.decode_dtype(
      msg.dtype, r.string, lambda value: decode_value(r, value, depth + 1))


_BUILTIN_TYPES = {t.__name__: t for t in (bool, int, float, complex)}


def encode_type(w, v, out, depth):
  del depth
  if v in _BUILTIN_TYPES.values():
    out.type.builtin = w.string(v.__name__)
  elif isinstance(v, type) and issubclass(v, np.generic):
    dtypes.encode_dtype(np.dtype(v), out.type.numpy_scalar, w.string)
  else:
    raise UnsupportedError(
        f"type object {v!r} cannot be stored; only numpy scalar types and "
        "bool/int/float/complex can")


def decode_type(r, msg, depth):
  del depth
  if msg.type.HasField("numpy_scalar"):
    return dtypes.decode_dtype(msg.type.numpy_scalar, r.string).type
  name = r.string(msg.type.builtin)
  if name not in _BUILTIN_TYPES:
    raise FormatError(f"unknown builtin type {name!r} in a param")
  return _BUILTIN_TYPES[name]


def encode_numpy_array(w, v, out, depth):
  del depth
  out.array = w.array(v, pb.HostKind["NUMPY_ARRAY"])


def encode_numpy_scalar(w, v, out, depth):
  del depth
  out.array = w.array(v, pb.HostKind["NUMPY_SCALAR"])


def decode_array(r, msg, depth):
  del depth
  return r.array(msg.array)


def encode_jaxpr(w, v, out, depth):
  del depth
  out.jaxpr = w.jaxpr(v)


def decode_jaxpr(r, msg, depth):
  del depth
  jaxpr = r.jaxpr(msg.jaxpr)
  if getattr(r, "unvalued_consts_slot", False):
    # Equinox's closure-converted jaxpr (see encode_merged_jaxpr): a merged
    # release gets dead tracers as its constants, as its own trace has.
    jaxpr = dead_consts.with_dead_consts(
        jaxpr, len(r.msg.jaxprs[msg.jaxpr].constvars))
  return jaxpr


def encode_closed_jaxpr(w, v, out, depth):
  del depth
  out.closed_jaxpr = w.closed_jaxpr(v)


def encode_merged_jaxpr(w, v, out, depth):
  """A jaxpr on releases where open and closed jaxprs are one type: the
  param's slot in the vocabulary says which one the file stores."""
  if w.open_jaxpr_slot:
    if v.consts:
      raise UnsupportedError(
          f"a jaxpr with {len(v.consts)} constants sits where the format "
          "stores jaxprs without constants (see "
          "jaxpr_io/format/vocabulary.py:OPEN_JAXPR_PARAMS)")
    encode_jaxpr(w, v, out, depth)
  elif (w.closure_from_inputs_slot and v.consts
        and all(compat.is_tracer(c) or type(c) is compat.Var
                for c in v.consts)):
    # A Pallas `run_scoped` body closed over the kernel's refs, which are
    # also the equation's inputs: stored open, its constvars unvalued, as
    # JAX 0.10 has it (jaxpr_io.format.vocabulary.CLOSURE_FROM_INPUTS_PARAMS). A
    # loaded one holds the enclosing jaxpr's variables as its constants.
    encode_jaxpr(w, v, out, depth)
  elif w.unvalued_consts_slot and dead_consts.holds_dead_consts(v):
    # Equinox's closure-converted jaxpr, its constants the (dead) tracers
    # of the trace that made it, their values the equation's inputs: stored
    # open, as JAX 0.10 has it (jaxpr_io/compat/dead_consts.py).
    encode_jaxpr(w, v, out, depth)
  else:
    if any(map(compat.is_tracer, v.consts)):
      # E.g. a Pallas `run_scoped` body that closes over the kernel's refs:
      # JAX 0.11+ keeps the enclosing trace's refs as its constants.
      raise UnsupportedError(
          "a jaxpr holds tracers of the trace that made it as constants "
          "(under JAX 0.11+, a Pallas `run_scoped` body that closes over "
          "the kernel's refs); allocate the scratch with `scratch_shapes` "
          "or pass the refs to the body instead of closing over them")
    encode_closed_jaxpr(w, v, out, depth)


def decode_closed_jaxpr(r, msg, depth):
  del depth
  return r.closed_jaxpr(msg.closed_jaxpr)


def encode_primitive(w, v, out, depth):
  del depth
  out.primitive = w.string(w.primitive(v))


def decode_primitive(r, msg, depth):
  del depth
  return r.primitive(r.string(msg.primitive))


def encode_dim_expr(w, v, out, depth):
  del depth
  out.dim_expr = w.dim_expr(v)


def decode_dim_expr(r, msg, depth):
  del depth
  return r.dim(r.string(msg.dim_expr))


def encode_enum(w, v, out, depth):
  del depth
  out.enum.type = w.string(registry.ENUMS.by_key[type(v)])
  out.enum.member = w.string(v.name)


def decode_enum(r, msg, depth):
  del depth
  type_name = r.string(msg.enum.type)
  member = r.string(msg.enum.member)
  enum_type = registry.ENUMS.by_name.get(type_name)
  if enum_type is None and registry.load_more():
    enum_type = registry.ENUMS.by_name.get(type_name)
  if enum_type is None:
    raise FormatError(f"unknown enum type {type_name!r}; register it with "
                      "jaxpr_io.register_enum before loading")
  value = getattr(enum_type, member, None)
  if type(value) is not enum_type:
    raise FormatError(f"{type_name!r} has no member {member!r}")
  return value


def encode_record(w, v, out, depth):
  codec = registry.RECORDS.by_name[registry.RECORDS.by_key[type(v)]]
  out.record.type = w.string(codec.name)
  fields = codec.to_fields(v)
  for field in fields:
    encode_value(w, field, out.record.fields.add(), depth + 1)


def decode_record(r, msg, depth):
  name = r.string(msg.record.type)
  codec = registry.RECORDS.by_name.get(name)
  if codec is None:
    # A record of a library in jaxpr_io's table (an Equinox sentinel):
    # registered once that library is imported, from the table.
    try:
      codec = registry.resolve_record(name)
    except unloaded.MissingLibraryError:
      if not getattr(r, "unloaded_records_ok", False):
        raise
      # In a pytree node's auxdata: the node loads as a plain container.
      fields = tuple(decode_value(r, f, depth + 1) for f in msg.record.fields[:])
      return unloaded.UnloadedRecord(name, fields)
  if codec is None and registry.load_more():  # a family not loaded yet
    codec = registry.RECORDS.by_name.get(name)
  if codec is None:
    for explain in _MISSING_RECORD_EXPLAINERS:
      if (why := explain(name)) is not None:
        raise FormatError(why)
  if codec is None:
    raise FormatError(f"unknown param record type {name!r}; register it "
                      "with jaxpr_io.register_param_codec (a Pallas fusion "
                      "dtype: jaxpr_io.register_fusion_dtype) before loading")
  fields = tuple(decode_value(r, f, depth + 1) for f in msg.record.fields[:])
  try:
    return codec.from_fields(fields)
  except FormatError:
    raise
  except (TypeError, ValueError, *compat.JAX_VALIDATION_ERRORS) as e:
    raise FormatError(f"record {name!r} with fields {fields!r} cannot be "
                      f"rebuilt: {type(e).__name__}: {e}") from None


def encode_aval(w, v, out, depth):
  del depth
  out.aval = w.aval(v)


def decode_aval(r, msg, depth):
  del depth
  if r.msg.format_version < 4:
    raise FormatError("an aval param value in a file before version 4")
  return r.aval(msg.aval)


# Exact type -> encoder. Types of dtypes and numpy scalars are filled in from
# the dtype table below; enums and records are looked up in the registries.
ENCODERS: dict[type, Encoder] = {
    type(None): encode_none,
    bool: encode_bool,
    int: encode_int,
    float: encode_float,
    complex: encode_complex,
    str: encode_str,
    tuple: encode_tuple,
    frozenset: encode_frozenset,
    type: encode_type,
    np.ndarray: encode_numpy_array,
    **({compat.Jaxpr: encode_merged_jaxpr} if compat.MERGED_JAXPRS else
       {compat.Jaxpr: encode_jaxpr, compat.ClosedJaxpr: encode_closed_jaxpr}),
    symbolic.DimExpr: encode_dim_expr,
    compat.ShapedArray: encode_aval,
    compat.AbstractRef: encode_aval,
    compat.AbstractToken: encode_aval,
}
for _dtype in dtypes.DTYPE_TO_ENUM:
  ENCODERS[type(_dtype)] = encode_dtype
  if _dtype.itemsize:  # not float0, whose scalar type is numpy.void
    ENCODERS[_dtype.type] = encode_numpy_scalar
ENCODERS[type(compat.prng_key_dtype(compat.prng_impls["threefry2x32"]))] = (
    encode_dtype)



def register_aval_type(cls: type) -> None:
  """Params of exactly type `cls` (an aval class of a primitive family, such
  as a Pallas ref subclass) are stored as avals."""
  ENCODERS[cls] = encode_aval


DECODERS: dict[str, Callable[[Any, Any, int], Any]] = {
    "none": decode_none,
    "bool": decode_bool,
    "int": decode_int,
    "big_int": decode_big_int,
    "float": decode_float,
    "complex": decode_complex,
    "str": decode_str,
    "tuple": decode_tuple,
    "ints": decode_ints,
    "bools": decode_bools,
    "frozenset": decode_frozenset,
    "dtype": decode_dtype,
    "type": decode_type,
    "array": decode_array,
    "jaxpr": decode_jaxpr,
    "closed_jaxpr": decode_closed_jaxpr,
    "primitive": decode_primitive,
    "enum": decode_enum,
    "record": decode_record,
    "dim_expr": decode_dim_expr,
    "aval": decode_aval,
}


def register_value_encoder(cls: type, encoder: Encoder) -> None:
  """Adds an encoder that works against the writer itself, for the internal
  value types of jaxpr_io's own codecs (e.g. custom_rules' rule
  definitions, which must run code around writing their jaxprs). Values of
  such types only ever appear inside what a param codec returns."""
  if cls in ENCODERS:
    raise ValueError(f"{cls.__qualname__} already has the encoder "
                     f"{ENCODERS[cls].__name__}")
  ENCODERS[cls] = encoder


# ------------------------------------------------- unloadable records
def encode_unloaded_record(w, v, out, depth):
  out.record.type = w.string(v.name)
  for field in v.fields:
    encode_value(w, field, out.record.fields.add(), depth + 1)


register_value_encoder(unloaded.UnloadedRecord, encode_unloaded_record)


# Families that say why a value or a record name has no codec here (a hi
# primitive of a user's class; a class of a newer JAX): first answer wins.
_REFUSAL_EXPLAINERS: list[Callable[[Any], str | None]] = []
_MISSING_RECORD_EXPLAINERS: list[Callable[[str], str | None]] = []


def register_explainers(*, refusal: Callable[[Any], str | None],
                        missing_record: Callable[[str], str | None]) -> None:
  """`refusal(value)` says why `dumps` cannot store `value`, or None;
  `missing_record(name)` says why a file's record `name` cannot load here,
  or None. The errors name what the user can do."""
  _REFUSAL_EXPLAINERS.append(refusal)
  _MISSING_RECORD_EXPLAINERS.append(missing_record)


def _refusal(value) -> str | None:
  for explain in _REFUSAL_EXPLAINERS:
    if (why := explain(value)) is not None:
      return why
  return None


def register_value_decoder(kind: str, decoder) -> None:
  """The decoder of `Value` kind `kind` for an encoder registered with
  `register_value_encoder` by a module that builds on this one."""
  if kind in DECODERS:
    raise ValueError(f"Value kind {kind!r} already has the decoder "
                     f"{DECODERS[kind].__name__}")
  DECODERS[kind] = decoder


def _describe(v) -> str:
  t = type(v)
  return f"{t.__module__}.{t.__qualname__}"


def encode_value(w, v, out, depth: int = 0) -> None:
  """Fills the `Value` message `out` with `v`."""
  if depth > MAX_VALUE_DEPTH:
    raise UnsupportedError(f"param value nests deeper than {MAX_VALUE_DEPTH}")
  t = type(v)
  encoder = ENCODERS.get(t)
  if encoder is None:
    if t in registry.ENUMS.by_key:
      encoder = encode_enum
    elif t in registry.RECORDS.by_key:
      encoder = encode_record
    elif isinstance(v, compat.Primitive):
      encoder = encode_primitive
    elif (why := _refusal(v)) is not None:
      raise UnsupportedError(why)
    else:
      raise UnsupportedError(
          f"a param value of type {_describe(v)} ({_short_repr(v)}) cannot be "
          "stored; register a codec for it with "
          "jaxpr_io.register_param_codec (or jaxpr_io.register_enum; a Pallas "
          "fusion dtype: jaxpr_io.register_fusion_dtype)")
  encoder(w, v, out, depth)


def decode_value(r, msg, depth: int = 0, kind: str | None = None):
  """The Python value of the `Value` message `msg` (whose oneof `kind` a
  caller that has read it may pass: each read of a message is slow).

  Top-level tuples and records are decoded once per load (`r.value_memo`,
  keyed by their bytes): equal params of many equations (shardings,
  dimension numbers, shapes) become one object, as values are immutable.
  The writer stores param sets with equal bytes once, so this does not
  change what a re-dump writes. Values that refer to jaxprs are not shared:
  reading them records the reference."""
  if depth > MAX_VALUE_DEPTH:
    raise FormatError(f"param value nests deeper than {MAX_VALUE_DEPTH}")
  if kind is None:
    kind = msg.WhichOneof("kind")
  decoder = DECODERS.get(kind) or _unknown_kind(kind)
  # Not shared while placeholders of unloaded library records may be made
  # (a pytree node's auxdata): a param of the same bytes must not get one.
  memo = (r.value_memo if depth == 0 and kind in SHARED_KINDS
          and not getattr(r, "unloaded_records_ok", False) else None)
  if memo is None:
    return decoder(r, msg, depth)
  key = msg.SerializeToString()
  value = memo.get(key, _MISSING)
  if value is _MISSING:
    n_refs = r.jaxpr_refs_seen
    value = decoder(r, msg, depth)
    if r.jaxpr_refs_seen == n_refs:
      memo[key] = value
  return value


def _unknown_kind(kind: str | None):
  raise FormatError(f"param value has no known kind ({kind!r})")


# Kinds of values that `decode_value` shares between equal params.
SHARED_KINDS = frozenset({"tuple", "record", "treedef"})
_MISSING = object()


def _short_repr(v) -> str:
  text = builtins.repr(v)
  return text if len(text) <= 80 else text[:77] + "..."
