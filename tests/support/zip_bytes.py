"""Zip archives written byte by byte, for files that `zipfile` would not
write: member names as given (NULs, backslashes, `..`), declared sizes and
CRCs that disagree with the data, deflate streams built by hand."""

from __future__ import annotations

import struct


def archive(members) -> bytes:
  """A zip archive of (name bytes, general-purpose flags, method (0 stored,
  8 deflated), CRC-32, body, declared uncompressed size) members, in
  order, each with its local header, then the central directory."""
  out, central = bytearray(), bytearray()
  for name, flags, method, crc, body, size in members:
    fields = (20, flags, method, 0, 0, crc, len(body), size, len(name), 0)
    offset = len(out)
    out += struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", *fields) + name
    out += body
    central += struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20,
                           *fields, 0, 0, 0, 0, offset) + name
  end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, len(members),
                    len(members), len(central), len(out), 0)
  return bytes(out + central + end)
