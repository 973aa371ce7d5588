"""Bad input: the reader fails with `FormatError`, fast, in bounded memory.

The contract (schema/jaxpr.proto, "Container", and jaxpr_io/read/reader.py's trust
model): whatever bytes it is given, `loads`/`load` either returns a program or
raises `jaxpr_io.FormatError`. It never raises another exception type, never
hangs and never allocates far beyond the input's size.

The first half of this file corrupts real files in specific, named ways and
checks the message says what is wrong. The second half is a hypothesis fuzz
test over mutated real files: random byte edits of the whole file, byte edits
of the program message with the checksums recomputed (so they reach the
protobuf parser and the reader), and field-level edits of the decoded
`Program` message (indices, shapes, dtypes, enum values, repeated fields).

The fuzz test is derandomized, so CI runs the same examples every time. Set
JAXPR_IO_FUZZ_EXAMPLES=N to run N examples per fuzz test, with a random seed.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import signal
import struct
import threading
import tracemalloc

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from google.protobuf import descriptor as pb_descriptor

import jaxpr_io
from jaxpr_io.format import _proto as pb
from jaxpr_io.format import container
from jaxpr_io.format import crc
from jaxpr_io.format import equation_edit
from jaxpr_io.codec import dtypes as io_dtypes
from tests.support import proto_edit
from tests.hostile import varint

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

FormatError = jaxpr_io.FormatError
FORMAT_VERSION = jaxpr_io.FORMAT_VERSION

# ---------------------------------------------------------------- the format
# The header layout, from schema/jaxpr.proto ("Container"). Written out here
# rather than taken from container.py, so the tests check the spec.
_HEADER = struct.Struct("<8sIIQQQQI8s")
_HEADER_FIELDS = ("magic", "format_version", "header_size", "program_offset",
                  "program_length", "data_offset", "data_length",
                  "program_crc32", "reserved")
HEADER_SIZE = 64
_CRC_OFFSET = 60


def header(data: bytes) -> dict:
  return dict(zip(_HEADER_FIELDS, _HEADER.unpack(data[:_HEADER.size])))


def program_bytes(data: bytes) -> bytes:
  h = header(data)
  start = h["program_offset"]
  return data[start:start + h["program_length"]]


def data_section(data: bytes) -> bytes:
  h = header(data)
  return data[h["data_offset"]:h["data_offset"] + h["data_length"]]


def patch_header(data: bytes, *, fix_crc: bool = True, **fields) -> bytes:
  """`data` with header fields replaced; the header CRC recomputed."""
  h = header(data)
  h.update(fields)
  head = _HEADER.pack(*(h[f] for f in _HEADER_FIELDS))
  checksum = (crc.crc32(head) if fix_crc
              else struct.unpack_from("<I", data, _CRC_OFFSET)[0])
  return head + struct.pack("<I", checksum) + data[HEADER_SIZE:]


def frame(program: bytes, section: bytes = b"",
          format_version: int = FORMAT_VERSION) -> bytes:
  """A well-framed file: valid header and checksums around `program` and a
  data section. Blob offsets are relative to the section, so an old file's
  section can be kept as one chunk."""
  layout = container.DataLayout()
  if section:
    layout.add(section)
  return container.to_bytes(program, layout, format_version)


def message(data: bytes):
  return pb.Program.FromString(program_bytes(data))


def reframe(msg, section: bytes = b"") -> bytes:
  return frame(msg.SerializeToString(deterministic=True), section)


def mutated(data: bytes, mutate) -> bytes:
  """`data` with its Program message changed by `mutate(msg)` in place, the
  data section kept, and every checksum but the blobs' recomputed."""
  msg = message(data)
  mutate(msg)
  proto_edit.store(msg)
  return reframe(msg, data_section(data))


def flip(data: bytes, offset: int, mask: int = 0x01) -> bytes:
  b = bytearray(data)
  b[offset] ^= mask
  return bytes(b)


# ------------------------------------------------------------ safety guards
class ReaderHung(Exception):
  """The reader ran past its time budget (not a FormatError: a failure)."""


@contextlib.contextmanager
def deadline(seconds: float):
  """Fails a hang instead of blocking CI (POSIX main thread only)."""
  if (not hasattr(signal, "setitimer")
      or threading.current_thread() is not threading.main_thread()):
    yield
    return

  def on_alarm(signum, frame_):
    del signum, frame_
    raise ReaderHung(f"the reader did not finish within {seconds} s")

  previous = signal.signal(signal.SIGALRM, on_alarm)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


@contextlib.contextmanager
def memory_bound(limit_bytes: int):
  """Asserts Python-visible allocations (numpy's included) peak under
  `limit_bytes` inside the block."""
  started = not tracemalloc.is_tracing()
  if started:
    tracemalloc.start()
  tracemalloc.reset_peak()
  base, _ = tracemalloc.get_traced_memory()
  try:
    yield
  finally:
    _, peak = tracemalloc.get_traced_memory()
    if started:
      tracemalloc.stop()
  assert peak - base < limit_bytes, (
      f"the reader allocated {(peak - base) / 2**20:.1f} MiB")


def load_fully(data: bytes, *, check: bool = False):
  """loads + the lazy part of loading (blob checksums)."""
  prog = jaxpr_io.loads(data, check=check)
  prog.closed_jaxpr  # pylint: disable=pointless-statement
  return prog


def assert_rejected(data: bytes, match: str, *, check: bool = False,
                    seconds: float = 20):
  with deadline(seconds):
    with pytest.raises(FormatError, match=match):
      load_fully(data, check=check)


# ----------------------------------------------------------- sample programs
# 32 float32s = 128 bytes: over the 64-byte inline limit, stored as a blob.
_BIG_CONST = np.arange(32, dtype=np.float32)
_SMALL_CONST = np.array([1.5, -2.0, 3.25], dtype=np.float32)  # 12 bytes


def _control_flow(x, y):
  z = jax.jit(lambda a: a * 2.0 + 1)(x)
  w = jax.lax.cond(y[0] > 0, lambda a: a + _BIG_CONST, lambda a: a - 1.0, z)

  def body(c):
    return c[0] + 1, c[1] * 1.5

  i, v = jax.lax.while_loop(lambda c: c[0] < 3, body, (0, w))
  s, ys = jax.lax.scan(lambda c, e: (c + e, c * e), 0.0, v)
  return s, ys, i


def _small(x):
  y = jnp.sin(x) * 2.0 + _SMALL_CONST
  z = jax.jit(lambda a: a - 1.0)(y)
  return z, x[0]


def _grad_scan(p, x):
  def step(c, e):
    return jax.nn.relu(c * p["w"] + e), c
  c, ys = jax.lax.scan(step, x[0], x)
  return jnp.sum(ys) + c + p["b"][0][0]


def _misc(x):
  """Params of many kinds: a coded param (`reduce`'s computation), enums
  (precision), records (gather dimension numbers), remat, switch."""
  r = jax.lax.reduce(x, np.float32(0), lambda a, b: a * b + 1, (0,))
  c = jax.checkpoint(lambda y: jnp.sin(y) * 2)(x)
  m = x.reshape(2, 2)
  d = jnp.dot(m, m.T, precision=jax.lax.Precision.HIGHEST).reshape(4)
  g = x[jnp.array([0, 2, 3, 1])]
  s = jax.lax.switch(1, [lambda a: a, lambda a: a * 2, lambda a: -a], x)
  return r + c + d + g + s, jnp.sort(x), jnp.argmax(x), jnp.cumsum(x)


def _symbolic(x):
  """Symbolic shapes: `Dim.expr`, dimension-valued params, constraints."""
  y = x.reshape(-1) * 2.0
  return jnp.sum(y) + x[0, 0], jnp.concatenate([y, y])


@functools.cache
def sample_files() -> dict[str, bytes]:
  f32 = jnp.float32
  files = {}
  files["control_flow"] = jaxpr_io.dumps(jaxpr_io.trace(
      _control_flow, jnp.ones(32, f32), jnp.ones(32, f32)))
  files["small"] = jaxpr_io.dumps(jaxpr_io.trace(_small, jnp.ones(3, f32)))
  params = {"w": jnp.float32(0.5), "b": (jnp.ones(2, f32), None)}
  files["grad_pytree"] = jaxpr_io.dumps(jaxpr_io.trace(
      jax.grad(_grad_scan), params, jnp.arange(4.0, dtype=f32)))
  files["misc"] = jaxpr_io.dumps(jaxpr_io.trace(
      _misc, jnp.arange(4.0, dtype=f32)))
  (b,) = jax.export.symbolic_shape("b", constraints=("b >= 2",))
  files["symbolic"] = jaxpr_io.dumps(jaxpr_io.trace(
      _symbolic, jax.ShapeDtypeStruct((b, 4), f32)))
  key = jax.random.key(0)
  files["prng_key"] = jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: x + jax.random.normal(key, (3,)), jnp.ones(3, f32)))
  return files


def small() -> bytes:
  return sample_files()["small"]


def control_flow() -> bytes:
  return sample_files()["control_flow"]


def eqn_by_primitive(msg, name: str):
  """The first equation of `msg` that binds primitive `name`."""
  eqns = proto_edit.by_primitive(msg, name)
  if not eqns:
    raise LookupError(name)
  return eqns[0]


def params_of(msg, eqn):
  """The repeated `Param` field of `eqn`'s params, private to `eqn` so that
  editing it changes no other equation. (Params live in the equation or, in
  newer schemas, in a shared `Program.param_sets` entry.)"""
  if "params" in eqn.DESCRIPTOR.fields_by_name:
    return eqn.params
  private = msg.param_sets.add()
  private.CopyFrom(msg.param_sets[eqn.param_set])
  eqn.param_set = len(msg.param_sets) - 1
  return private.params


def set_params(msg, eqn, params) -> None:
  """Gives `eqn` its own copy of the `Param` list `params`."""
  if "params" in eqn.DESCRIPTOR.fields_by_name:
    del eqn.params[:]
    eqn.params.extend(params)
    return
  private = msg.param_sets.add()
  private.params.extend(params)
  eqn.param_set = len(msg.param_sets) - 1


def param_named(msg, eqn, name: str):
  return next(p for p in params_of(msg, eqn) if msg.strings[p.name] == name)


def root_jaxpr(msg):
  return msg.jaxprs[msg.closed_jaxprs[msg.root].jaxpr]


def test_samples_load():
  """The unmutated samples load; else every test below tests nothing."""
  for name, data in sample_files().items():
    load_fully(data, check=True)
    assert frame(program_bytes(data), data_section(data)) == data, name
  assert len(message(control_flow()).blobs) == 1
  assert not message(small()).blobs


# ---------------------------------------------------------------- truncated
_CUTS = {
    "empty": lambda d: 0,
    "1_byte": lambda d: 1,
    "magic_only": lambda d: 8,
    "inside_header": lambda d: 33,
    "header_minus_1": lambda d: HEADER_SIZE - 1,
    "header_only": lambda d: HEADER_SIZE,
    "inside_program": lambda d: HEADER_SIZE + header(d)["program_length"] // 2,
    "program_minus_1": lambda d: (HEADER_SIZE + header(d)["program_length"]
                                  - 1),
    "in_padding": lambda d: HEADER_SIZE + header(d)["program_length"] + 1,
    "before_data": lambda d: header(d)["data_offset"],
    "inside_data": lambda d: header(d)["data_offset"] + 7,
    "last_byte": lambda d: len(d) - 1,
}


@pytest.mark.parametrize("cut", list(_CUTS))
def test_truncated(cut):
  data = control_flow()
  n = _CUTS[cut](data)
  assert 0 <= n < len(data)
  assert_rejected(data[:n], r"too short|truncated|empty")


@pytest.mark.parametrize("cut", ["empty", "inside_header", "inside_program",
                                 "inside_data"])
def test_truncated_file(tmp_path, cut):
  data = control_flow()
  path = tmp_path / "truncated.jaxpr"
  path.write_bytes(data[:_CUTS[cut](data)])
  with deadline(20), pytest.raises(FormatError,
                                   match=r"too short|truncated|empty"):
    jaxpr_io.load(path).closed_jaxpr  # pylint: disable=expression-not-assigned


def test_trailing_garbage():
  assert_rejected(control_flow() + b"\0" * 64, r"truncated or corrupt")


# -------------------------------------------------------------------- magic
@pytest.mark.parametrize("head", [
    b"\0" * 8,
    b"PK\x03\x04\x14\x00\x00\x00",          # a zip file
    b"\x89PNG\r\n\x1a\n",                    # a PNG
    b"\x89JAXPR\n\r",                        # line endings mangled
    b"\x89jaxpr\r\n",
])
def test_wrong_magic(head):
  data = head + control_flow()[8:]
  assert_rejected(data, r"not a jaxpr_io file \(bad magic")


def test_not_a_jaxpr_file_at_all():
  assert_rejected(b"{ lambda ; a:f32[]. let  in (a,) }\n" * 4,
                  r"not a jaxpr_io file")


# ------------------------------------------------------------------ version
# FORMAT_VERSION + 2: a later version that is not the next (a literal
# such as 7 becomes the current version at some bump).
@pytest.mark.parametrize("newer", [FORMAT_VERSION + 1, FORMAT_VERSION + 2,
                                   2**31, 2**32 - 1])
def test_newer_format_version_header_only(newer):
  """Only the header's version changes (CRC fixed): the version check must
  be what fails, naming the writer's version and the reader's."""
  data = patch_header(control_flow(), format_version=newer)
  with pytest.raises(FormatError) as info:
    load_fully(data)
  text = str(info.value)
  assert re.search(rf"\bformat version {newer}\b", text), text
  assert re.search(rf"\b{FORMAT_VERSION}\b", text), text
  assert "upgrade" in text, text


def test_newer_format_version_whole_file():
  """A consistent file from a future writer (header and message agree)."""
  newer = FORMAT_VERSION + 1
  msg = message(control_flow())
  msg.format_version = newer
  data = frame(msg.SerializeToString(deterministic=True),
               data_section(control_flow()), format_version=newer)
  assert_rejected(data, rf"written in format version {newer}\b.*reads "
                  rf"versions \d+ to {FORMAT_VERSION}\b")


def test_older_format_version():
  data = patch_header(control_flow(), format_version=0)
  assert_rejected(data, r"format version 0 is older than the oldest")


@pytest.mark.parametrize("version", [0, FORMAT_VERSION + 1, 12345])
def test_header_and_message_versions_differ(version):
  data = mutated(control_flow(),
                 lambda m: setattr(m, "format_version", version))
  assert_rejected(data, rf"header says format version {FORMAT_VERSION} but "
                  rf"the program message says {version}\b")


# ------------------------------------------------------------------- header
@pytest.mark.parametrize("offset", [8, 12, 16, 24, 33, 40, 48, 52, 59, 60, 63])
def test_header_checksum(offset):
  assert_rejected(flip(control_flow(), offset), r"header checksum mismatch")


@pytest.mark.parametrize("field,value", [
    ("header_size", 65),
    ("header_size", 0),
    ("reserved", b"\0\0\0\0\0\0\0\1"),
])
def test_header_fields_of_another_version(field, value):
  data = patch_header(control_flow(), **{field: value})
  assert_rejected(data, r"header size .* or reserved bytes")


@pytest.mark.parametrize("change", [
    {"program_offset": 0},
    {"program_offset": 128},
    {"program_length": 10**6},
    {"program_length": 2**64 - 1},
    {"data_offset": 1},
    {"data_offset": 2**63},
    {"data_length": 0},
    {"data_length": 2**64 - 1},
])
def test_bounds_inconsistent(change):
  data = patch_header(control_flow(), **change)
  assert_rejected(data, r"part bounds are inconsistent")


def test_program_checksum():
  data = control_flow()
  middle = HEADER_SIZE + header(data)["program_length"] // 2
  assert_rejected(flip(data, middle), r"program checksum mismatch")
  assert_rejected(flip(data, HEADER_SIZE, 0x80), r"program checksum mismatch")


def test_program_checksum_field():
  data = control_flow()
  stored = header(data)["program_crc32"]
  assert_rejected(patch_header(data, program_crc32=stored ^ 1),
                  r"program checksum mismatch")


# --------------------------------------------------------------- blob data
def _corrupt_blob() -> bytes:
  data = control_flow()
  blob = message(data).blobs[0]
  return flip(data, header(data)["data_offset"] + blob.offset + 5)


def test_corrupt_constant_detected_lazily():
  prog = jaxpr_io.loads(_corrupt_blob())  # lazy: not verified yet
  with pytest.raises(FormatError, match=r"checksum mismatch for the blob"):
    prog.closed_jaxpr  # pylint: disable=pointless-statement
  # A second look must not hand out the corrupt data either.
  with pytest.raises(FormatError, match=r"checksum mismatch for the blob"):
    prog.closed_jaxpr  # pylint: disable=pointless-statement


def test_corrupt_constant_detected_with_check():
  with pytest.raises(FormatError, match=r"checksum mismatch for the blob"):
    jaxpr_io.loads(_corrupt_blob(), check=True)


def test_corrupt_constant_detected_on_call(tmp_path):
  path = tmp_path / "corrupt.jaxpr"
  path.write_bytes(_corrupt_blob())
  prog = jaxpr_io.load(path)
  x = jnp.ones(32, jnp.float32)
  with pytest.raises(FormatError, match=r"checksum mismatch for the blob"):
    prog(x, x)


def test_corrupt_constant_detected_by_load(tmp_path):
  path = tmp_path / "corrupt.jaxpr"
  path.write_bytes(_corrupt_blob())
  with pytest.raises(FormatError, match=r"checksum mismatch for the blob"):
    jaxpr_io.load(path).closed_jaxpr  # pylint: disable=expression-not-assigned
  with pytest.raises(FormatError, match=r"checksum mismatch for the blob"):
    jaxpr_io.load(path, check=True)


def test_blob_checksum_field():
  def mutate(m):
    m.blobs[0].crc32 ^= 0x10
  assert_rejected(mutated(control_flow(), mutate),
                  r"checksum mismatch for the blob")


@pytest.mark.parametrize("offset,length,match", [
    (1, 128, r"misaligned or past the data section's end"),
    (64, 128, r"misaligned or past the data section's end"),
    (0, 129, r"misaligned or past the data section's end|needs 128 bytes"),
    (0, 2**40, r"misaligned or past the data section's end"),
    (2**63, 128, r"misaligned or past the data section's end"),
    (2**64 - 64, 128, r"misaligned or past the data section's end"),
    (0, 64, r"needs 128 bytes but has 64|checksum"),
])
def test_blob_bounds(offset, length, match):
  def mutate(m):
    m.blobs[0].offset = offset
    m.blobs[0].length = length
  with memory_bound(50 << 20):
    assert_rejected(mutated(control_flow(), mutate), match)


# ------------------------------------------------------ message-level edits
def test_unknown_primitive():
  def mutate(m):
    m.strings[list(m.strings).index("sin")] = "no_such_primitive"
  assert_rejected(mutated(small(), mutate),
                  r"unknown primitive 'no_such_primitive'")


def test_unknown_primitive_in_nested_jaxpr():
  def mutate(m):
    m.strings[list(m.strings).index("while")] = "no_such_while"
  assert_rejected(mutated(control_flow(), mutate),
                  r"unknown primitive 'no_such_while'")


def test_primitive_renamed_to_another():
  """`sin` renamed to `cond`: a known primitive without its params."""
  def mutate(m):
    m.strings[list(m.strings).index("sin")] = "cond"
  assert_rejected(mutated(small(), mutate), r"equation \d+ \(cond\)")


def _point_const_at_new_aval(m, dims):
  """Gives the small program's constant array a fresh f32 aval of `dims`."""
  const = m.arrays[m.closed_jaxprs[m.root].consts[0]]
  aval = m.avals.add()
  aval.CopyFrom(m.avals[const.aval])
  del proto_edit.dims(aval)[:]
  for d in dims:
    proto_edit.dims(aval).add().size = d
  const.aval = len(m.avals) - 1


def test_declared_shape_does_not_match_data():
  data = mutated(small(), lambda m: _point_const_at_new_aval(m, [4]))
  assert_rejected(data, r"array \d+: array of type (f32|float32)\[4\] needs 16 "
                  r"bytes but has 12")


def test_declared_shape_does_not_match_blob():
  def mutate(m):
    const = next(a for a in m.arrays if a.WhichOneof("data") == "blob")
    proto_edit.dims(m.avals[const.aval])[0].size = 33
  assert_rejected(mutated(control_flow(), mutate),
                  r"needs 132 bytes but has 128")


def test_inline_data_too_short():
  def mutate(m):
    const = m.arrays[m.closed_jaxprs[m.root].consts[0]]
    const.inline = const.inline[:-1]
  assert_rejected(mutated(small(), mutate), r"needs 12 bytes but has 11")


def test_literal_data_too_long():
  def mutate(m):
    literal = next(a for a in m.arrays if a.WhichOneof("data") == "inline"
                   and len(a.inline) == 4)
    literal.inline += b"\0\0\0\0"
  assert_rejected(mutated(small(), mutate), r"needs 4 bytes but has 8")


def test_constant_of_wrong_type_for_constvar():
  def mutate(m):
    const = m.arrays[m.closed_jaxprs[m.root].consts[0]]
    aval = m.avals.add()
    aval.CopyFrom(m.avals[const.aval])
    aval.shaped_array.dtype.dtype = pb.DType["INT32"]
    const.aval = len(m.avals) - 1
  assert_rejected(mutated(small(), mutate),
                  r"constant of type (i32|int32)\[3\] for a constvar of type "
                  r"(f32|float32)\[3\]")


@pytest.mark.parametrize("dims", [
    [2**40],
    [2**40, 2**40],
    [2**31] * 8,
    [2**62],
    [2**62] * 64,
    [0, 2**62],
])
def test_huge_declared_shape(dims):
  """A shape of 2**40+ elements with 12 bytes of data: rejected at once,
  without allocating for the declared size."""
  data = mutated(small(), lambda m: _point_const_at_new_aval(m, dims))
  # The memory bound is the check; the deadline only guards against a hang
  # (generous, so that a loaded machine cannot fail it: speed is measured in
  # benchmarks, not asserted in tests).
  with memory_bound(50 << 20):
    assert_rejected(data, r"needs \d+ bytes but has 12|has over 2\*\*62 bytes",
                    seconds=60)


def test_huge_declared_shape_of_zero_size_dtype():
  """float0 elements take 0 bytes: a huge float0 shape 'matches' 0 bytes of
  data, so the byte count alone cannot catch it."""
  def mutate(m):
    const = m.arrays[m.closed_jaxprs[m.root].consts[0]]
    _point_const_at_new_aval(m, [2**62, 2**62])
    m.avals[const.aval].shaped_array.dtype.dtype = pb.DType["FLOAT0"]
    const.inline = b""
  with memory_bound(50 << 20):
    assert_rejected(mutated(small(), mutate),
                    r"array \d+: .*float0|float0.* has over 2\*\*62 bytes",
                    seconds=10)


def test_zero_size_dtype_constant_is_valid():
  """The guard against the float0 bomb above must not reject real float0
  data: a float0 constant has 0 bytes, whatever its shape."""
  zeros = np.zeros((3,), dtype=jax.dtypes.float0)
  closed = jax.make_jaxpr(lambda x: (x, zeros))(1.0)
  prog = load_fully(jaxpr_io.dumps(closed))
  assert prog.out_avals[1].shape == (3,)


def test_huge_declared_shape_of_an_input_loads_lazily():
  """Shapes of inputs are types, not data: a huge one loads, allocating
  nothing, and type-checks to a mismatch rather than a crash."""
  def mutate(m):
    root = root_jaxpr(m)
    aval = m.avals.add()
    aval.CopyFrom(m.avals[root.invars[0]])
    for d in proto_edit.dims(aval):
      d.size = 2**40
    root.invars[0] = len(m.avals) - 1
  data = mutated(small(), mutate)
  with memory_bound(50 << 20), deadline(20):
    prog = load_fully(data)
    assert prog.in_avals[0].shape == (2**40,)
    with pytest.raises(FormatError, match=r"does not type-check"):
      jaxpr_io.loads(data, check=True)


@pytest.mark.parametrize("dim", [-1, -(2**63), 2**62 + 1, 2**63 - 1])
def test_invalid_dimension(dim):
  def mutate(m):
    proto_edit.dims(m.avals[0]).add().size = dim
  assert_rejected(mutated(small(), mutate),
                  rf"aval dimension\W.*{dim}\s*is not a valid size")


def _symbolic_input(text: str, constraints=()):
  """The small program with its input's dimension the symbolic expression
  `text` (a string-table entry), under `constraints`."""
  def mutate(m):
    m.strings.append(text)
    root = root_jaxpr(m)
    aval = m.avals.add()
    aval.CopyFrom(m.avals[root.invars[0]])
    proto_edit.dims(aval)[0].expr = len(m.strings) - 1
    root.invars[0] = len(m.avals) - 1
    if constraints:
      m.symbolic_constraints.extend(constraints)
  return mutated(small(), mutate)


_NOT_A_DIM = (r"does not parse|not a valid size|over the limit|"
              r"not well formed|unexpected character|is over")


def test_symbolic_dimension_string_index_out_of_range():
  def mutate(m):
    proto_edit.dims(m.avals[0]).add().expr = 99999
  assert_rejected(mutated(small(), mutate),
                  r"string index 99999 is out of range|not a valid size")


@pytest.mark.parametrize("text", ["", "+-*/", "b c", "b\x00", "9" * 5000,
                                  "import os", "__import__('os')"])
def test_symbolic_dimension_does_not_parse(text):
  assert_rejected(_symbolic_input(text), _NOT_A_DIM)


@pytest.mark.parametrize("text", [
    "(" * 10_000 + "b" + ")" * 10_000,
    "max(" * 2_000 + "b" + ", 1)" * 2_000,
    "mod(" * 500 + "b" + ", 3)" * 500,
], ids=["parentheses", "max", "mod"])
def test_symbolic_dimension_nesting_bomb(text):
  assert_rejected(_symbolic_input(text),
                  rf"nests too deeply|too long|{_NOT_A_DIM}", seconds=10)


def test_symbolic_dimension_length_bomb():
  """A 100 KB expression of 16,000 distinct variables: JAX's parser and
  normalizer take time superlinear in its length, so the reader must bound
  it rather than hand it over (or the load takes hours)."""
  text = "+".join(f"v{i}" for i in range(16_000))
  data = _symbolic_input(text)
  assert len(data) < 200_000
  with deadline(10), memory_bound(50 << 20):
    try:
      load_fully(data)
    except FormatError:
      pass


@pytest.mark.parametrize("constraints", [
    ("b >= ",), ("b", ), ("b >= 2 >= 1",), ("os.system('x')",),
    ("(" * 10_000 + "b" + ")" * 10_000 + " >= 2",),
])
def test_symbolic_constraints_invalid(constraints):
  assert_rejected(_symbolic_input("b", constraints),
                  rf"symbolic constraints are (?:invalid|too many)|nests too deeply|"
                  rf"constraint .* (?:is not well formed|has an unexpected)"
                  rf"|{_NOT_A_DIM}", seconds=10)


def test_constant_with_symbolic_shape():
  """Array data has a known size; a constant of symbolic shape cannot."""
  def mutate(m):
    m.strings.append("b")
    const = m.arrays[m.closed_jaxprs[m.root].consts[0]]
    aval = m.avals.add()
    aval.CopyFrom(m.avals[const.aval])
    proto_edit.dims(aval)[0].expr = len(m.strings) - 1
    const.aval = len(m.avals) - 1
  assert_rejected(mutated(small(), mutate),
                  rf"array \d+: .*(symbolic|needs .*b bytes|concrete shape)|{_NOT_A_DIM}")


def test_rank_too_high():
  def mutate(m):
    for _ in range(65):
      proto_edit.dims(m.avals[0]).add().size = 1
  assert_rejected(mutated(small(), mutate), r"aval of rank 6\d is over 64")


def test_out_of_range_variable():
  def mutate(m):
    eqn_by_primitive(m, "sin").invars[0] = 999
  assert_rejected(mutated(small(), mutate),
                  r"equation 0 \(sin\): variable 999 is used before it is "
                  r"bound")


def test_variable_used_before_bound():
  """An equation that reads its own output: the binder comes after."""
  def mutate(m):
    root = root_jaxpr(m)
    n_bound = len(root.constvars) + len(root.invars)
    proto_edit.equations(m, m.closed_jaxprs[m.root].jaxpr)[0].invars[0] = \
        n_bound
  assert_rejected(mutated(small(), mutate),
                  r"variable \d+ is used before it is bound")


def test_out_of_range_output_variable():
  def mutate(m):
    root_jaxpr(m).outvars[0] = 2**40
  assert_rejected(mutated(small(), mutate),
                  rf"outputs: variable {2**40} is used before it is bound")


@pytest.mark.parametrize("ref", [-1000, -(2**31)])  # int32 references
def test_out_of_range_literal(ref):
  def mutate(m):
    eqn_by_primitive(m, "mul").invars[1] = ref
  assert_rejected(mutated(small(), mutate),
                  rf"equation \d+ \(mul\): literal reference {ref} is out "
                  rf"of range \(array index {-ref - 1};")


def test_reference_to_later_jaxpr():
  """The root jaxpr's `jit` calls the root itself: a cycle."""
  def mutate(m):
    param = param_named(m, eqn_by_primitive(m, "jit"), "jaxpr")
    m.closed_jaxprs[param.value.closed_jaxpr].jaxpr = (
        m.closed_jaxprs[m.root].jaxpr)
  assert_rejected(mutated(small(), mutate),
                  r"does not refer to an earlier jaxpr")


def test_reference_to_out_of_range_jaxpr():
  def mutate(m):
    m.closed_jaxprs[0].jaxpr = 2**32 - 1
  assert_rejected(mutated(small(), mutate),
                  r"jaxpr index 4294967295 does not refer to an earlier "
                  r"jaxpr")


def test_open_jaxpr_param_cycle():
  """A `Value.jaxpr` param pointing at the jaxpr that holds it."""
  def mutate(m):
    param = param_named(m, eqn_by_primitive(m, "jit"), "jaxpr")
    param.value.jaxpr = m.closed_jaxprs[m.root].jaxpr
  assert_rejected(mutated(small(), mutate),
                  r"does not refer to an earlier jaxpr")


@pytest.mark.parametrize("root", [1000, 2**32 - 1])
def test_root_out_of_range(root):
  assert_rejected(mutated(small(), lambda m: setattr(m, "root", root)),
                  rf"closed jaxpr index {root} is out of range")


def test_string_index_out_of_range():
  def mutate(m):
    eqn_by_primitive(m, "sin").primitive = 99999
  assert_rejected(mutated(small(), mutate),
                  r"string index 99999 is out of range")


def test_param_name_index_out_of_range():
  def mutate(m):
    params_of(m, eqn_by_primitive(m, "jit"))[0].name = 2**32 - 1
  assert_rejected(mutated(small(), mutate),
                  r"string index 4294967295 is out of range")


def test_duplicate_param_name():
  def mutate(m):
    params = params_of(m, eqn_by_primitive(m, "jit"))
    params.add().CopyFrom(params[1])
  assert_rejected(mutated(small(), mutate),
                  r"equation \d+ \(jit\)\W.*param 'in_shardings' appears twice")


def test_duplicate_metadata_key():
  def mutate(m):
    for value in ("a", "b"):
      kv = m.metadata.add()
      kv.key, kv.value = "k", value
  assert_rejected(mutated(small(), mutate), r"metadata key 'k' appears twice")


@pytest.mark.parametrize("dropped", [[1000], [2**32 - 1], [0, 0], [1, 0]])
def test_dropped_position_out_of_range(dropped):
  """Positions (into the jaxpr's flat outputs column) past its end,
  repeated, or not ascending."""
  def mutate(m):
    root = root_jaxpr(m)
    root.equations.dropped = np.asarray(dropped, "<u4").tobytes()
  assert_rejected(mutated(small(), mutate),
                  r"dropped-output positions are out of range, repeat or "
                  r"are not ascending")


def test_dropped_position_of_a_later_equation():
  """An equation's position 1 is the next equation's output: dropping it
  makes that variable unusable, and its use is refused."""
  def mutate(m):
    eqn_by_primitive(m, "sin").dropped.append(1)
  assert_rejected(mutated(small(), mutate),
                  r"equation \d+ \(\w+\): variable \d+ is a dropped output "
                  r"and cannot be used")


def test_use_of_dropped_output():
  def mutate(m):
    eqn_by_primitive(m, "sin").dropped.append(0)
  assert_rejected(mutated(small(), mutate),
                  r"is a dropped output and cannot be used")


@pytest.mark.parametrize("field,value,match", [
    ("aval", 999, r"aval index 999 is out of range"),
    ("blob", 7, r"blob index 7 is out of range"),
    ("kind", 0, r"host kind"),
    ("kind", 99, r"host kind"),
])
def test_bad_array(field, value, match):
  def mutate(m):
    const = next(a for a in m.arrays if a.WhichOneof("data") == "blob")
    setattr(const, field, value)
  assert_rejected(mutated(control_flow(), mutate), match)


def test_array_without_data():
  def mutate(m):
    m.arrays[m.closed_jaxprs[m.root].consts[0]].ClearField("inline")
  assert_rejected(mutated(small(), mutate), r"array has no data")


def test_numpy_scalar_with_shape():
  def mutate(m):
    m.arrays[m.closed_jaxprs[m.root].consts[0]].kind = (
        pb.HostKind["NUMPY_SCALAR"])
  assert_rejected(mutated(small(), mutate), r"numpy scalar must have shape")


@pytest.mark.parametrize("dtype,match", [
    (0, r"dtype DTYPE_UNSPECIFIED"),
    (999, r"dtype number 999"),
    (pb.DType["PRNG_KEY"], r"PRNG implementation"),
])
def test_bad_dtype(dtype, match):
  def mutate(m):
    m.avals[0].shaped_array.dtype.dtype = dtype
    m.avals[0].shaped_array.dtype.key_impl = len(m.strings) - 1
  assert_rejected(mutated(small(), mutate), match)


def test_unknown_prng_impl():
  def mutate(m):
    m.strings[list(m.strings).index("threefry2x32")] = "no_such_prng"
  assert_rejected(mutated(sample_files()["prng_key"], mutate),
                  r"PRNG implementation 'no_such_prng'")


def test_prng_key_data_wrong_size():
  def mutate(m):
    key_aval = next(i for i, a in enumerate(m.avals)
                    if a.shaped_array.dtype.dtype == pb.DType["PRNG_KEY"])
    key = next(a for a in m.arrays if a.aval == key_aval)
    key.inline = key.inline[:4]
  assert_rejected(mutated(sample_files()["prng_key"], mutate),
                  r"needs 8 bytes but has 4")


def test_unknown_memory_space():
  def mutate(m):
    m.avals[0].shaped_array.memory_space = 0
  assert_rejected(mutated(small(), mutate), r"unknown memory space 0")


def test_aval_of_no_kind():
  def mutate(m):
    m.avals[0].Clear()
  assert_rejected(mutated(small(), mutate), r"aval of unknown kind None")


def test_constant_count_mismatch():
  def mutate(m):
    del m.closed_jaxprs[m.root].consts[:]
  assert_rejected(mutated(small(), mutate), r"0 constants for 1 constvars")


@pytest.mark.parametrize("field", ["ctx", "name_stack"])
def test_equation_table_index_out_of_range(field):
  def mutate(m):
    setattr(eqn_by_primitive(m, "sin"), field, 500)
  assert_rejected(mutated(small(), mutate),
                  r"(eqn context|name stack) index 500 is out of range")


def test_arity_mismatch_of_call():
  def mutate(m):
    jit = eqn_by_primitive(m, "jit")
    jit.invars.append(jit.invars[0])
  assert_rejected(mutated(small(), mutate), r"jit has 2 inputs and 1 outputs")


def test_single_result_primitive_with_two_outputs():
  def mutate(m):
    sin = eqn_by_primitive(m, "sin")
    sin.outvars.append(sin.outvars[0])
  assert_rejected(mutated(small(), mutate),
                  r"primitive 'sin' has one result, but the equation binds 2")


def test_unknown_effect():
  def mutate(m):
    m.strings.append("no.such.Effect")
    eqn_by_primitive(m, "sin").effects.add().name = len(m.strings) - 1
  assert_rejected(mutated(small(), mutate), r"unknown effect 'no.such.Effect'")


def test_coded_param_without_codec():
  """A param stored through a per-(primitive, param) codec that the reader
  has no entry for (`jit`'s `in_shardings` has none)."""
  def mutate(m):
    value = params_of(m, eqn_by_primitive(m, "jit"))[1].value
    if "derived" in value.DESCRIPTOR.fields_by_name:    # older schema
      value.derived.SetInParent()
    else:
      value.param_codec.none.SetInParent()
  assert_rejected(mutated(small(), mutate),
                  r"cannot be derived|'jit' has no codec for param "
                  r"'in_shardings'")


@pytest.mark.parametrize("kind", ["enum", "record"])
def test_unknown_registered_type(kind):
  def mutate(m):
    m.strings.append("no.such.Type")
    value = params_of(m, eqn_by_primitive(m, "jit"))[1].value
    getattr(value, kind).type = len(m.strings) - 1
  assert_rejected(mutated(small(), mutate),
                  rf"unknown (param )?{kind} type 'no.such.Type'")


def test_big_int_too_long():
  def mutate(m):
    params_of(m, eqn_by_primitive(m, "jit"))[1].value.big_int = "9" * 5000
  assert_rejected(mutated(small(), mutate), r"5000 digits is too long")


def test_big_int_not_decimal():
  def mutate(m):
    params_of(m, eqn_by_primitive(m, "jit"))[1].value.big_int = "0x10"
  assert_rejected(mutated(small(), mutate), r"is not a decimal integer")


def test_in_tree_does_not_match_inputs():
  def mutate(m):
    proto_edit.inline_trees(m)
    m.in_tree.children[0].children.add().kind = pb.PyTreeKind["LEAF"]
  assert_rejected(mutated(small(), mutate),
                  r"input signature has 2 leaves but the program takes 1")


def test_out_tree_does_not_match_outputs():
  def mutate(m):
    proto_edit.inline_trees(m)
    m.out_tree.kind = pb.PyTreeKind["LEAF"]
    del m.out_tree.children[:]
  assert_rejected(mutated(small(), mutate),
                  r"output signature has 1 leaves but the program returns 2")


def test_unregistered_pytree_node():
  def mutate(m):
    proto_edit.inline_trees(m)
    m.in_tree.kind = pb.PyTreeKind["CUSTOM"]
    m.in_tree.custom_name = "no.such.Node"
  assert_rejected(mutated(small(), mutate),
                  r"pytree node type 'no.such.Node' is not registered")


@pytest.mark.parametrize("kind", [0, 99])
def test_unknown_pytree_kind(kind):
  def mutate(m):
    proto_edit.inline_trees(m)
    m.out_tree.children[0].kind = kind
  assert_rejected(mutated(small(), mutate), rf"unknown pytree node kind {kind}")


def test_pytree_dict_keys_and_children_differ():
  def mutate(m):
    proto_edit.inline_trees(m)
    m.in_tree.children[1].keys.add().none.SetInParent()
  assert_rejected(mutated(small(), mutate), r"pytree dict has 1 keys and 0 "
                  r"children")


def test_invalid_utf8_string():
  """A string-table entry that is not UTF-8: appended as raw wire bytes
  (field 4, length-delimited), which the Python API cannot produce."""
  data = small()
  program = program_bytes(data) + b"\x22\x02\xff\xfe"
  assert_rejected(frame(program), r"program message does not parse")


@pytest.mark.parametrize("junk", [
    b"\xff",                      # a truncated varint tag
    b"\x0a\xff\xff\xff\xff\x0f",  # a length past the end
    b"\x07",                      # wire type 7 does not exist
    b"\x52\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # an over-long varint
])
def test_program_message_does_not_parse(junk):
  assert_rejected(frame(program_bytes(small()) + junk),
                  r"program message does not parse")


def test_empty_program_message():
  """A zero-length message: all defaults, format_version 0."""
  assert_rejected(frame(b""), r"message says 0|out of range")


def test_empty_program_message_right_version():
  msg = pb.Program(format_version=FORMAT_VERSION)
  assert_rejected(reframe(msg), r"closed jaxpr index 0 is out of range")


# ------------------------------------------------- every dtype, every kind
def _retype_const(m, dtype: int, kind: int) -> None:
  """The small program's constant as a (3,) array of `dtype` and host kind
  `kind`, with zero bytes of the right length."""
  const = m.arrays[m.closed_jaxprs[m.root].consts[0]]
  aval = m.avals.add()
  aval.CopyFrom(m.avals[const.aval])
  aval.shaped_array.dtype.dtype = dtype
  const.aval = len(m.avals) - 1
  const.kind = kind
  itemsize = {"PRNG_KEY": 8, "FLOAT0": 0, "EXTENDED": 4}.get(
      _DTYPE_NAMES[dtype], None)
  if itemsize is None:
    itemsize = np.dtype(io_dtypes.ENUM_TO_DTYPE[dtype]).itemsize
  if dtype == pb.DType["PRNG_KEY"]:
    m.strings.append("threefry2x32")
    aval.shaped_array.dtype.key_impl = len(m.strings) - 1
  if dtype == pb.DType["EXTENDED"]:  # a semaphore: no data is valid
    m.strings.append("jax.pallas.Semaphore")
    aval.shaped_array.dtype.extended.record.type = len(m.strings) - 1
  const.inline = bytes(3 * itemsize)


_DTYPE_NAMES = {v: k for k, v in pb.DType.items()}


@pytest.mark.parametrize("dtype", sorted(set(pb.DType) - {"DTYPE_UNSPECIFIED"}))
def test_every_dtype_and_host_kind(dtype):
  """A constant of each dtype in each host kind (most of them invalid for a
  constvar): loading and check=True give a program or a FormatError."""
  failures = []
  for kind_name, kind in sorted(pb.HostKind.items()):
    data = mutated(small(),
                   lambda m: _retype_const(m, pb.DType[dtype], kind))
    for check in (False, True):
      try:
        with deadline(20):
          load_fully(data, check=check)
      except FormatError:
        pass
      except Exception as e:  # pylint: disable=broad-except
        failures.append(f"{kind_name}, check={check}: "
                        f"{type(e).__name__}: {e}"[:300])
  assert not failures, "\n".join(failures)


def _python_scalar_literal(dtype: str, set_value):
  """The small program's 4-byte f32 literal (`2.0`) as a PYTHON_SCALAR of
  `dtype` holding the value `set_value(value_msg)` puts there."""
  def mutate(m):
    literal = next(a for a in m.arrays if a.WhichOneof("data") == "inline"
                   and len(a.inline) == 4)
    aval = m.avals.add()
    aval.CopyFrom(m.avals[literal.aval])
    aval.shaped_array.dtype.dtype = pb.DType[dtype]
    literal.aval = len(m.avals) - 1
    literal.kind = pb.HostKind["PYTHON_SCALAR"]
    set_value(literal.python_value)
  return mutated(small(), mutate)


@pytest.mark.parametrize("dtype,value", [
    ("BOOL", lambda v: setattr(v, "int", 7)),          # an int for a bool
    ("INT32", lambda v: setattr(v, "int", 2**40)),     # does not fit int32
    ("INT32", lambda v: setattr(v, "big_int", "9" * 400)),
    ("UINT8", lambda v: setattr(v, "int", -1)),
    ("FLOAT32", lambda v: v.complex.SetInParent()),   # a complex for a float
], ids=["int_for_bool", "int64_for_int32", "big_int_for_int32",
        "negative_for_uint8", "complex_for_float32"])
def test_python_scalar_does_not_fit_its_dtype(dtype, value):
  """The spec: a PYTHON_SCALAR is "a Python bool, int, float or complex, by
  the aval's dtype". A value of another kind, or out of the dtype's range,
  is data that does not match its declared type."""
  assert_rejected(_python_scalar_literal(dtype, value),
                  r"array \d+: .*(?i:does not fit|out of range|cannot hold"
                  r"|cannot be a scalar|overflow|needs)")


def _set_param(primitive: str, name: str, set_value):
  def mutate(m):
    value = param_named(m, eqn_by_primitive(m, primitive), name).value
    value.Clear()
    set_value(value)
  return mutate


_CHECK_TRIGGERS = {
    # JAX's check raises (scan's typecheck rule): a length that is not the
    # scanned arrays' (a bool there is refused at load, by the param
    # schema: tests/hostile/test_param_schema.py).
    "scan_length_wrong": (control_flow, _set_param(
        "scan", "length", lambda v: setattr(v, "int", v.int + 7))),
    # ValueError from squeeze's shape rule.
    "squeeze_bad_dimensions": (control_flow, _set_param(
        "squeeze", "dimensions",
        lambda v: v.tuple.items.add().__setattr__("int", 8))),
    # ValueError from an n-ary op's shape rule ("max() arg is an empty
    # sequence").
    "mul_without_operands": (small, lambda m: eqn_by_primitive(
        m, "mul").ClearField("invars")),
    # OverflowError building the literal's constant.
    "literal_out_of_range": (lambda: _python_scalar_literal(
        "INT32", lambda v: setattr(v, "int", 2**40)), None),
}


@pytest.mark.parametrize("trigger", list(_CHECK_TRIGGERS))
def test_type_check_fails_with_format_error(trigger):
  """check=True runs JAX's type checker, whose rules fail with TypeError,
  ValueError, AssertionError, OverflowError, KeyError, ...: every one is a
  FormatError to the caller."""
  source, mutate = _CHECK_TRIGGERS[trigger]
  data = source() if mutate is None else mutated(source(), mutate)
  with deadline(20):
    try:
      load_fully(data)   # without the check, loading may succeed
    except FormatError:
      pass
  assert_rejected(data, r"does not type-check|array \d+", check=True)


# ----------------------------------------------------------- nesting bombs
def _chain_of_jits(n: int, fanout: int = 1) -> bytes:
  """`n` jaxprs, jaxpr i calling jaxpr i-1 with `fanout` `jit` equations
  in a row. The `jit` params are a traced `jit`'s, with `jaxpr` pointed at
  the previous closed jaxpr."""
  src = message(small())
  jit_eqn = eqn_by_primitive(src, "jit")
  jit_params = list(params_of(src, jit_eqn))
  jaxpr_param = next(i for i, p in enumerate(jit_params)
                     if src.strings[p.name] == "jaxpr")
  msg = pb.Program()
  msg.CopyFrom(src)
  del msg.jaxprs[:]
  del msg.closed_jaxprs[:]
  f32 = next(i for i, a in enumerate(msg.avals)
             if not a.shaped_array.shape and not a.shaped_array.sizes
             and a.shaped_array.dtype.dtype == pb.DType["FLOAT32"])
  base = msg.jaxprs.add()
  base.invars.append(f32)
  base.outvars.append(0)
  msg.closed_jaxprs.add().jaxpr = 0
  kind_index = {}
  for i in range(1, n):
    params = [pb.Param() for _ in jit_params]
    for new, old in zip(params, jit_params):
      new.CopyFrom(old)
    params[jaxpr_param].value.closed_jaxpr = i - 1
    j = msg.jaxprs.add()
    j.invars.append(f32)
    eqns = []
    for k in range(fanout):
      eqn = pb.Equation()
      eqns.append(eqn)
      eqn.CopyFrom(jit_eqn)
      del eqn.invars[:]
      eqn.invars.append(k)   # the input, then the previous call's output
      del eqn.outvars[:]
      eqn.outvars.append(f32)
      set_params(msg, eqn, params)
    equation_edit.pack(msg, j, eqns, kind_index)
    j.outvars.append(fanout)
    msg.closed_jaxprs.add().jaxpr = i
  msg.root = n - 1
  msg.in_tree.Clear()
  msg.in_tree.kind = pb.PyTreeKind["TUPLE"]
  args = msg.in_tree.children.add()
  args.kind = pb.PyTreeKind["TUPLE"]
  args.children.add().kind = pb.PyTreeKind["LEAF"]
  msg.in_tree.children.add().kind = pb.PyTreeKind["DICT"]
  msg.out_tree.Clear()
  msg.out_tree.kind = pb.PyTreeKind["LIST"]
  msg.out_tree.children.add().kind = pb.PyTreeKind["LEAF"]
  return reframe(msg)


def test_jit_chain_loads():
  """The hand-built chain is valid when shallow: the bombs below fail for
  their depth, not for being malformed."""
  prog = load_fully(_chain_of_jits(5), check=True)
  assert float(prog(jnp.float32(3.0))[0]) == 3.0


@pytest.mark.parametrize("n", [250, 10_000])
def test_nesting_depth_bomb_jaxprs(n):
  data = _chain_of_jits(n)
  # As above: memory is bounded; the deadline is a generous hang guard.
  with memory_bound((50 << 20) + 50 * len(data)):
    assert_rejected(data, r"nests \d+ levels deep, over the limit"
                    r"|nests too deeply", seconds=120)


def test_shared_subjaxpr_dag_does_not_hang():
  """Each jaxpr calls the one before twice: a DAG of 2**150 paths in 150
  small jaxprs. Loading, the type check and the checksums must not walk
  every path."""
  data = _chain_of_jits(150, fanout=2)
  assert len(data) < 64_000
  with deadline(10):
    try:
      load_fully(data)
      jaxpr_io.loads(data, check=True)
    except FormatError:
      pass


def _nested_values(depth: int):
  value = pb.Value()
  inner = value
  for _ in range(depth):
    inner = inner.tuple.items.add()
  inner.int = 1
  return value


def _with_param_value(value) -> bytes:
  def mutate(m):
    params_of(m, eqn_by_primitive(m, "jit"))[1].value.CopyFrom(value)
  return mutated(small(), mutate)


@pytest.mark.parametrize("depth", [70, 1000, 10_000])
def test_nesting_depth_bomb_values(depth):
  data = _with_param_value(_nested_values(depth))
  assert_rejected(data, r"program message does not parse"
                  r"|param value nests deeper than", seconds=20)


def _nested_pytree(depth: int):
  tree = pb.PyTree(kind=pb.PyTreeKind["TUPLE"])
  inner = tree
  for _ in range(depth):
    inner = inner.children.add()
    inner.kind = pb.PyTreeKind["TUPLE"]
  return tree


@pytest.mark.parametrize("depth", [300, 10_000])
def test_nesting_depth_bomb_pytree(depth):
  msg = message(small())
  msg.out_tree.CopyFrom(_nested_pytree(depth))
  assert_rejected(reframe(msg), r"program message does not parse"
                  r"|pytree nests deeper than", seconds=20)


@pytest.mark.parametrize("depth", [60, 120])
def test_nesting_the_writer_accepts_is_readable(depth):
  """The depth limits that stop bombs must not stop real files: a pytree
  the writer accepts must load (protobuf's parser has its own depth limit
  of 100 messages, below the writer's pytree limit)."""
  x = jnp.float32(1)
  for _ in range(depth):
    x = (x,)
  try:
    data = jaxpr_io.dumps(jaxpr_io.trace(lambda t: 1.0, x))
  except jaxpr_io.UnsupportedError:
    return   # the writer refuses it: consistent
  prog = load_fully(data)
  assert prog.in_tree == jax.tree_util.tree_structure(((x,), {}))


def test_nesting_depth_bomb_raw_wire():
  """100,000 nested length-delimited Value.tuple fields written by hand."""
  depth = 100_000
  # Innermost: Value{int: 1} = field 3 varint, zigzag(1) = 2.
  payload = b"\x18\x02"
  # Wrap in Tuple{items: payload} (field 1) and Value{tuple: ...} (field 7)
  # repeatedly; build lengths from the inside out.
  chunks = [payload]
  size = len(payload)
  prefixes = []
  for _ in range(depth):
    for tag in (b"\x0a", b"\x3a"):
      prefix = tag + varint(size)
      prefixes.append(prefix)
      size += len(prefix)
  body = b"".join(reversed(prefixes)) + b"".join(chunks)
  # Program.metadata is not a Value; put it into Program.in_tree.keys
  # (PyTree field 3 = Value) of field 13.
  tree = b"\x08\x05" + b"\x1a" + varint(len(body)) + body
  program = (b"\x08" + varint(FORMAT_VERSION)
             + b"\x6a" + varint(len(tree)) + tree)
  with memory_bound((50 << 20) + 50 * len(program)):
    assert_rejected(frame(program), r"program message does not parse"
                    r"|nests", seconds=20)




# ===================================================================== fuzz
_EXAMPLES = int(os.environ.get("JAXPR_IO_FUZZ_EXAMPLES", "0"))
FUZZ = settings(
    max_examples=_EXAMPLES or 150,
    deadline=None,
    derandomize=not _EXAMPLES,
    database=None,
    print_blob=True,
    suppress_health_check=list(HealthCheck),
)
_PER_EXAMPLE_SECONDS = 10
_MEMORY_LIMIT = 64 << 20


def assert_loads_or_format_error(data: bytes) -> None:
  """The contract, for one input: success or FormatError, in bounded time
  and memory; with check=True too."""
  with deadline(_PER_EXAMPLE_SECONDS), memory_bound(
      _MEMORY_LIMIT + 16 * len(data)):
    try:
      load_fully(data)
    except FormatError:
      return
    try:
      jaxpr_io.loads(data, check=True)
    except FormatError:
      pass


_names = st.sampled_from(sorted(["control_flow", "small", "grad_pytree",
                                 "prng_key", "misc", "symbolic"]))


def _byte_mutation(data: st.DataObject, buf: bytes) -> bytes:
  """One random edit of `buf`: flip, overwrite, truncate, splice, duplicate,
  delete or insert."""
  n = len(buf)
  op = data.draw(st.sampled_from(["flip", "set", "overwrite", "truncate",
                                  "splice", "duplicate", "delete", "insert"]))
  b = bytearray(buf)
  if n == 0:
    op = "insert"
  if op == "flip":
    i = data.draw(st.integers(0, n - 1))
    b[i] ^= 1 << data.draw(st.integers(0, 7))
  elif op == "set":
    i = data.draw(st.integers(0, n - 1))
    b[i] = data.draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF]))
  elif op == "overwrite":
    i = data.draw(st.integers(0, n - 1))
    junk = data.draw(st.binary(min_size=1, max_size=16))
    b[i:i + len(junk)] = junk
  elif op == "truncate":
    del b[data.draw(st.integers(0, n - 1)):]
  elif op in ("splice", "duplicate"):
    i = data.draw(st.integers(0, n - 1))
    j = data.draw(st.integers(i, min(n, i + 64)))
    chunk = bytes(b[i:j])
    k = data.draw(st.integers(0, n))
    if op == "splice":
      b[k:k + len(chunk)] = chunk
    else:
      b[k:k] = chunk
  elif op == "delete":
    i = data.draw(st.integers(0, n - 1))
    del b[i:i + data.draw(st.integers(1, 16))]
  else:
    i = data.draw(st.integers(0, n))
    b[i:i] = data.draw(st.binary(min_size=1, max_size=16))
  note(f"{op} -> {len(b)} bytes")
  return bytes(b)


@FUZZ
@given(name=_names, data=st.data())
def test_fuzz_raw_file(name, data):
  """Random edits anywhere in the file, checksums left as they are."""
  buf = sample_files()[name]
  for _ in range(data.draw(st.integers(1, 3))):
    buf = _byte_mutation(data, buf)
  assert_loads_or_format_error(buf)


@FUZZ
@given(name=_names, data=st.data())
def test_fuzz_program_bytes(name, data):
  """Random edits of the program message, re-framed with fresh checksums so
  they reach the protobuf parser and the reader."""
  original = sample_files()[name]
  program = program_bytes(original)
  for _ in range(data.draw(st.integers(1, 3))):
    program = _byte_mutation(data, program)
  assert_loads_or_format_error(frame(program, data_section(original)))


# Field-level mutation of a decoded Program. A "site" is a place in the
# message tree: a scalar field, an element of a repeated scalar field, a
# repeated field as a whole, or a set sub-message.
_FD = pb_descriptor.FieldDescriptor


def _is_repeated(fd) -> bool:
  if hasattr(fd, "is_repeated"):   # protobuf >= 5.28
    return fd.is_repeated
  return fd.label == _FD.LABEL_REPEATED


def _sites(msg, out: list) -> list:
  for fd in msg.DESCRIPTOR.fields:
    if fd.message_type is not None:
      if _is_repeated(fd):
        seq = getattr(msg, fd.name)
        out.append(("repeated", msg, fd, None))
        for sub in seq:
          _sites(sub, out)
      elif msg.HasField(fd.name):
        out.append(("message", msg, fd, None))
        _sites(getattr(msg, fd.name), out)
    elif _is_repeated(fd):
      seq = getattr(msg, fd.name)
      out.append(("repeated", msg, fd, None))
      out.extend(("element", msg, fd, i) for i in range(len(seq)))
    else:
      out.append(("scalar", msg, fd, None))
  return out


_U32 = [0, 1, 2, 3, 5, 7, 8, 31, 63, 64, 65, 127, 255, 999, 2**31 - 1, 2**31,
        2**32 - 1]
_I64 = [0, 1, -1, -2, -3, 2, 3, 7, 64, 999, -1000, 2**31, 2**40, 2**62,
        2**62 + 1, 2**63 - 1, -(2**63)]


def _scalar_value(data: st.DataObject, fd, msg, current):
  t = fd.type
  if t == _FD.TYPE_BOOL:
    return not current if current is not None else True
  if t in (_FD.TYPE_UINT32, _FD.TYPE_FIXED32):
    near = [] if current is None else [max(current - 1, 0),
                                       min(current + 1, 2**32 - 1)]
    return data.draw(st.sampled_from(_U32 + near)
                     | st.integers(0, 2**32 - 1))
  if t in (_FD.TYPE_UINT64, _FD.TYPE_FIXED64):
    return data.draw(st.sampled_from([0, 1, 63, 64, 128, 2**32, 2**63,
                                      2**64 - 64, 2**64 - 1])
                     | st.integers(0, 2**64 - 1))
  if t in (_FD.TYPE_INT64, _FD.TYPE_SINT64, _FD.TYPE_SFIXED64):
    near = [] if current is None else [current - 1, current + 1]
    near = [v for v in near if -(2**63) <= v < 2**63]
    return data.draw(st.sampled_from(_I64 + near)
                     | st.integers(-(2**63), 2**63 - 1))
  if t in (_FD.TYPE_INT32, _FD.TYPE_ENUM):
    return data.draw(st.integers(-1, 40))
  if t == _FD.TYPE_DOUBLE:
    return data.draw(st.sampled_from([0.0, -0.0, 1.5, float("nan"),
                                      float("inf"), 1e308, -1e-308]))
  if t == _FD.TYPE_STRING:
    table = list(sample_files_strings())
    return data.draw(st.sampled_from(table) | st.text(max_size=12))
  if t == _FD.TYPE_BYTES:
    return data.draw(st.binary(max_size=80))
  raise AssertionError(f"unhandled field type {t} of {fd.full_name}")


@functools.cache
def sample_files_strings() -> tuple:
  """Every string in the samples' tables: renaming one primitive or param
  to another is a more telling edit than random text."""
  names = set()
  for data in sample_files().values():
    names.update(message(data).strings)
  return tuple(sorted(names)) + ("no_such_primitive", "", "\x00")


def _field_mutation(data: st.DataObject, msg) -> None:
  sites = _sites(msg, [])
  kind, owner, fd, index = sites[data.draw(st.integers(0, len(sites) - 1))]
  where = f"{owner.DESCRIPTOR.name}.{fd.name}"
  if kind == "scalar":
    value = _scalar_value(data, fd, owner, getattr(owner, fd.name))
    note(f"set {where} = {value!r}")
    setattr(owner, fd.name, value)
  elif kind == "element":
    seq = getattr(owner, fd.name)
    value = _scalar_value(data, fd, owner, seq[index])
    note(f"set {where}[{index}] = {value!r}")
    seq[index] = value
  elif kind == "message":
    note(f"clear {where}")
    owner.ClearField(fd.name)
  else:
    seq = getattr(owner, fd.name)
    ops = ["append"] + (["delete", "duplicate", "swap", "clear"]
                        if len(seq) else [])
    op = data.draw(st.sampled_from(ops))
    n = len(seq)
    if op == "delete":
      i = data.draw(st.integers(0, n - 1))
      note(f"delete {where}[{i}]")
      del seq[i]
    elif op == "clear":
      note(f"clear {where}")
      del seq[:]
    elif op == "swap":
      i, j = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
      note(f"swap {where}[{i}] and [{j}]")
      if fd.message_type is not None:
        a, b = type(seq[i])(), type(seq[j])()
        a.CopyFrom(seq[i])
        b.CopyFrom(seq[j])
        seq[i].CopyFrom(b)
        seq[j].CopyFrom(a)
      else:
        seq[i], seq[j] = seq[j], seq[i]
    elif op == "duplicate":
      i = data.draw(st.integers(0, n - 1))
      note(f"duplicate {where}[{i}] at the end")
      if fd.message_type is not None:
        seq.add().CopyFrom(seq[i])
      else:
        seq.append(seq[i])
    else:
      note(f"append to {where}")
      if fd.message_type is not None:
        seq.add()
      else:
        seq.append(_scalar_value(data, fd, owner, None))


@FUZZ
@given(name=_names, data=st.data())
def test_fuzz_message_fields(name, data):
  """Random edits of decoded fields: indices, variable references, shapes,
  dtypes, enum values, strings, repeated fields."""
  original = sample_files()[name]
  msg = message(original)
  for _ in range(data.draw(st.integers(1, 4))):
    _field_mutation(data, msg)
  try:
    program = msg.SerializeToString(deterministic=True)
  except Exception:  # pylint: disable=broad-except
    return  # not encodable (e.g. bad UTF-8 from a text edit): nothing to load
  assert_loads_or_format_error(frame(program, data_section(original)))


@FUZZ
@given(data=st.data())
def test_fuzz_blob_bytes(data):
  """Any edit of a blob's bytes is caught by its checksum, and only when the
  data is first used (or with check=True)."""
  original = control_flow()
  blob = message(original).blobs[0]
  start = header(original)["data_offset"] + blob.offset
  i = data.draw(st.integers(start, start + blob.length - 1))
  corrupt = flip(original, i, data.draw(st.integers(1, 255)))
  prog = jaxpr_io.loads(corrupt)
  with pytest.raises(FormatError, match=r"checksum mismatch for the blob"):
    prog.closed_jaxpr  # pylint: disable=pointless-statement
  with pytest.raises(FormatError, match=r"checksum mismatch for the blob"):
    jaxpr_io.loads(corrupt, check=True)


def test_program_inputs_are_in_an_array_memory_space():
  """Fuzz case 22529 (seed 0): an input of memory space Any (which only
  values inside `jax.experimental.fused` have) passed `check=True`, and
  the `Exported` of the program failed at its call (JAX has no memory kind
  for it). Outputs are checked by the same code."""
  data = jaxpr_io.dumps(jaxpr_io.trace(lambda x: x * 2.0,
                                       np.ones(3, np.float32)))

  def mutate(msg):
    jaxpr = msg.jaxprs[msg.closed_jaxprs[msg.root].jaxpr]
    aval = msg.avals[jaxpr.invars[0]]
    aval.shaped_array.memory_space = pb.MemorySpace["MEMORY_SPACE_ANY"]
  bad = proto_edit.edited(data, mutate)
  with pytest.raises(jaxpr_io.FormatError, match=(
      r"program input 0 has memory space Any, which no array has \(arrays "
      r"are in Device or Host memory\)")):
    jaxpr_io.loads(bad)
