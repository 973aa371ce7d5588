"""The file container: header, program message, aligned data section.

Layout and field meanings are specified in schema/jaxpr.proto ("Container").
This module knows bytes and offsets only; it does not know what a jaxpr is.
"""

from __future__ import annotations

import mmap
import os
import struct

from jaxpr_io.format import version
from jaxpr_io.format import crc
from jaxpr_io.errors import FormatError

MAGIC = b"\x89JAXPR\r\n"
HEADER_SIZE = 64
ALIGNMENT = 64
# magic, format_version, header_size, program_offset, program_length,
# data_offset, data_length, program_crc32, reserved (8 bytes)
_HEADER = struct.Struct("<8sIIQQQQI8s")
_HEADER_CRC = struct.Struct("<I")
assert _HEADER.size + _HEADER_CRC.size == HEADER_SIZE


# The Program message is parsed into memory; bound it so a corrupt length
# cannot ask for more than protobuf's own 2 GiB limit.
MAX_PROGRAM_BYTES = (2 << 30) - 1


def align(n: int) -> int:
  return -(-n // ALIGNMENT) * ALIGNMENT


class DataLayout:
  """Places blobs in the data section: each at the next aligned offset."""

  def __init__(self):
    self.chunks: list = []      # buffers, in order
    self.offsets: list[int] = []
    # The CRC-32 of each chunk where it is already known, else None.
    self.known_crcs: list[int | None] = []
    self.size = 0

  def add(self, buffer, crc: int | None = None) -> int:
    """Appends a bytes-like buffer (and its CRC-32, if known); returns its
    offset in the section."""
    offset = align(self.size)
    self.chunks.append(buffer)
    self.offsets.append(offset)
    self.known_crcs.append(crc)
    self.size = offset + memoryview(buffer).nbytes
    return offset

  def crcs(self) -> list[int]:
    """The CRC-32 of each chunk, in order (large ones on several cores)."""
    return [crc.crc32(chunk) if known is None else known
            for chunk, known in zip(self.chunks, self.known_crcs)]


class PendingProgram:
  """A program message that is complete but for the CRC-32s of the data
  section's blobs, one per chunk of its `DataLayout`, in order.

  The message stores them as `fixed32` fields, which take the same space
  whatever their value, except 0, which proto3 leaves out: `length()` is
  the message's size when no checksum is 0. This lets `write_file` place
  the data section, and write it, before the checksums are known."""

  def length(self) -> int:
    """The message's size in bytes if no checksum is 0."""
    raise NotImplementedError

  def finish(self, crcs: list[int]) -> bytes:
    """The message's bytes, with these checksums."""
    raise NotImplementedError


def header(format_version: int, program_length: int, data_offset: int,
            data_length: int, program_crc: int) -> bytes:
  head = _HEADER.pack(MAGIC, format_version, HEADER_SIZE, HEADER_SIZE,
                      program_length, data_offset, data_length, program_crc,
                      bytes(8))
  return head + _HEADER_CRC.pack(crc.crc32(head))


def head_parts(program: bytes, layout: DataLayout, format_version: int):
  """Header, program message and padding: the bytes before the data."""
  data_offset = align(HEADER_SIZE + len(program))
  return [header(format_version, len(program), data_offset, layout.size,
                  crc.crc32(program)),
          program, bytes(data_offset - HEADER_SIZE - len(program))]


def data_parts(layout: DataLayout):
  """The data section as a sequence of byte chunks."""
  position = 0
  for offset, chunk in zip(layout.offsets, layout.chunks):
    if offset > position:
      yield bytes(offset - position)
    yield chunk
    position = offset + memoryview(chunk).nbytes


def parts(program: bytes, layout: DataLayout, format_version: int):
  """The file as a sequence of byte chunks."""
  yield from head_parts(program, layout, format_version)
  yield from data_parts(layout)


def to_bytes(program: bytes | PendingProgram, layout: DataLayout,
             format_version: int = version.FORMAT_VERSION) -> bytes:
  """The file's bytes. A `PendingProgram` is finished with the checksums of
  the layout's chunks."""
  if isinstance(program, PendingProgram):
    program = program.finish(layout.crcs())
  return b"".join(parts(program, layout, format_version))


class Container:
  """A parsed, verified header; `program` bytes; a view of the data section.

  `buffer` is the whole file (bytes or a read-only mmap); `data` is a
  memoryview of the data section that array views are made from, without
  copying.
  """

  def __init__(self, buffer, *, source: str = "<bytes>"):
    self.buffer = buffer
    self.source = source
    view = memoryview(buffer)
    if len(view) < HEADER_SIZE:
      raise FormatError(
          f"{source}: {len(view)} bytes is too short for a jaxpr_io file "
          f"(the header alone is {HEADER_SIZE} bytes)")
    head = bytes(view[:HEADER_SIZE])
    if head[:8] != MAGIC:
      raise FormatError(f"{source}: not a jaxpr_io file (bad magic at "
                        f"offset 0: {head[:8]!r})")
    (_, self.format_version, header_size, program_offset, program_length,
     data_offset, data_length, program_crc, reserved) = _HEADER.unpack(
         head[:_HEADER.size])
    (header_crc,) = _HEADER_CRC.unpack(head[_HEADER.size:])
    if header_crc != crc.crc32(head[:_HEADER.size]):
      raise FormatError(f"{source}: header checksum mismatch (bytes 0-63 "
                        "are corrupt)")
    if self.format_version > version.FORMAT_VERSION:
      raise FormatError(
          f"{source}: written in format version {self.format_version}, but "
          f"this jaxpr_io {version.__version__} reads versions "
          f"{version.OLDEST_READABLE_FORMAT_VERSION} to "
          f"{version.FORMAT_VERSION}; upgrade jaxpr_io to load it")
    if self.format_version < version.OLDEST_READABLE_FORMAT_VERSION:
      raise FormatError(
          f"{source}: format version {self.format_version} is older than "
          f"the oldest this reader supports "
          f"({version.OLDEST_READABLE_FORMAT_VERSION})")
    if header_size != HEADER_SIZE or reserved != bytes(8):
      raise FormatError(f"{source}: header size {header_size} or reserved "
                        "bytes (offset 52) are not those of this version")
    size = len(view)
    if not (program_offset == HEADER_SIZE
            and program_length <= MAX_PROGRAM_BYTES
            and program_offset + program_length <= data_offset
            and data_offset % ALIGNMENT == 0
            and data_offset + data_length == size):
      raise FormatError(
          f"{source}: part bounds are inconsistent with the file size "
          f"{size} (program at {program_offset}+{program_length}, data at "
          f"{data_offset}+{data_length}); the file is truncated or corrupt")
    padding = view[program_offset + program_length:data_offset]
    if any(padding):
      raise FormatError(f"{source}: the padding before the data section "
                        f"(offset {program_offset + program_length}) is not "
                        "zero; the file is corrupt")
    self.program = bytes(view[program_offset:program_offset + program_length])
    if crc.crc32(self.program) != program_crc:
      raise FormatError(f"{source}: program checksum mismatch (bytes "
                        f"{program_offset}-{program_offset + program_length}"
                        " are corrupt)")
    self.data_offset = data_offset
    self.data = view[data_offset:data_offset + data_length]

  def blob(self, offset: int, length: int, checksum: int | None,
           where: str) -> memoryview:
    """A view of one blob; verifies its checksum unless `checksum` is None."""
    if offset % ALIGNMENT or offset + length > len(self.data):
      raise FormatError(
          f"{self.source}: {where}: blob at data offset {offset} with "
          f"length {length} is misaligned or past the data section's end "
          f"({len(self.data)} bytes)")
    view = self.data[offset:offset + length]
    if checksum is not None and crc.crc32(view) != checksum:
      raise FormatError(
          f"{self.source}: {where}: checksum mismatch for the blob at file "
          f"offset {self.data_offset + offset} ({length} bytes); the file "
          "is corrupt")
    return view


def read_file(path: str | os.PathLike) -> Container:
  """Reads `path` into memory: unlike a mapping, the bytes do not change
  when the file is rewritten in place afterwards (a change during the read
  fails the header's bounds or a checksum: FormatError)."""
  path = os.fspath(path)
  with open(path, "rb") as f:
    if os.fstat(f.fileno()).st_size == 0:
      raise FormatError(f"{path}: the file is empty")
    data = f.read()
  return Container(data, source=path)


def map_file(path: str | os.PathLike) -> Container:
  """Maps `path` read-only; array data is paged in when first read."""
  path = os.fspath(path)
  with open(path, "rb") as f:
    size = os.fstat(f.fileno()).st_size
    if size == 0:
      raise FormatError(f"{path}: the file is empty")
    buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
  return Container(buffer, source=path)
