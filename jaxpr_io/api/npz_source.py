"""An `.npz` bind source, read member by member with bounded work.

`np.load` of an `.npz` reads nothing until a member is asked for, but then
decompresses the whole member, whatever its size. A SOURCE is untrusted
data: a member of a few KB may inflate to gigabytes. Here each member the
program needs is first known by its `.npy` header alone (shape and dtype,
at most `_MAX_HEADER` bytes decompressed); only once every bound input has
matched the program does `read` decompress the members, each stopped at the
size its header declares. Members the program does not need are never
decompressed, and object arrays (which only pickle could read) are refused.
"""

from __future__ import annotations

import zipfile
import zlib

import numpy as np

from jaxpr_io.api import source_paths
from jaxpr_io.api.binding import Deferred, FlatSource, Lazy, SourceError

# numpy's own limit for `.npy` headers (np.lib.format.read_array_header_*).
_MAX_HEADER = 10000
# Bytes decompressed at a time.
_PIECE = 1 << 20


class NpzSourceError(SourceError):
  """An `.npz` member that cannot be bound (one line)."""


def is_npz(path: str) -> bool:
  return zipfile.is_zipfile(path)


class NpzMember(Deferred):
  """One array of an `.npz`: its shape and dtype from its header."""

  def __init__(self, source: "NpzSource", name: str, shape, dtype,
               fortran: bool):
    super().__init__(shape, dtype, source)
    self.name = name
    self.fortran = fortran


class NpzSource:
  """The members of an `.npz` archive, by key (the member's name without
  `.npy`): `member(key)` reads one's header, `read` decompresses members,
  each stopped at its declared size."""

  def __init__(self, path: str, limit: int | None):
    self.path = self.name = path
    self.limit = limit  # the most bytes `read` may decompress in all
    try:
      self.zip = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as e:
      raise NpzSourceError(f"{path} is not a readable .npz: {e}") from None
    infos = self.zip.infolist()
    try:
      source_paths.check_npz_members(path, [i.filename for i in infos])
    except source_paths.UnsafeSourceError:
      self.zip.close()
      raise
    self.infos = {}
    for info in infos:
      if info.filename.endswith(".npy") and not info.is_dir():
        self.infos[info.filename[:-4]] = info

  def member(self, key: str) -> NpzMember:
    """The member `key`, from its `.npy` header only."""
    info = self.infos[key]
    with self.zip.open(info) as f:
      shape, fortran, dtype = self._header(f, key)
    return NpzMember(self, key, shape, dtype, fortran)

  def _header(self, f, key: str):
    """(shape, fortran order, dtype) of a member stream, read up to the end
    of its header."""
    try:
      version = np.lib.format.read_magic(f)
      if version == (1, 0):
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(
            f, max_header_size=_MAX_HEADER)
      elif version in ((2, 0), (3, 0)):
        shape, fortran, dtype = np.lib.format.read_array_header_2_0(
            f, max_header_size=_MAX_HEADER)
      else:
        raise ValueError(f"unknown .npy version {version}")
    except (ValueError, OSError, EOFError, SyntaxError, zipfile.BadZipFile,
            TypeError) as e:
      raise NpzSourceError(f"{self.path}: member {key!r:.80} has no valid "
                           f".npy header ({type(e).__name__}: "
                           f"{str(e)[:200]})") from None
    if dtype.hasobject:
      raise NpzSourceError(f"{self.path}: member {key!r:.80} holds Python "
                           "objects, which only pickle could read; --bind "
                           "takes numeric arrays")
    return shape, fortran, dtype

  def read(self, members: list[NpzMember]) -> list[np.ndarray]:
    """The arrays of `members`, each decompressed up to its declared size
    and no further."""
    try:
      return [self._read_one(m) for m in members]
    finally:
      self.zip.close()

  def _read_one(self, m: NpzMember) -> np.ndarray:
    try:
      buffer = self._inflate(m)
    except (zipfile.BadZipFile, zlib.error, OSError, EOFError) as e:
      raise NpzSourceError(f"{self.path}: member {m.name!r:.80} cannot be "
                           f"read ({type(e).__name__}: {str(e)[:200]})"
                           ) from None
    array = np.frombuffer(buffer, dtype=m.dtype)
    return array.reshape(m.shape, order="F" if m.fortran else "C")

  def _inflate(self, m: NpzMember) -> bytearray:
    """The data of member `m`: exactly the bytes its header declares."""
    nbytes = m.nbytes
    with self.zip.open(self.infos[m.name]) as f:
      shape, fortran, dtype = self._header(f, m.name)
      if (tuple(shape), dtype, fortran) != (m.shape, m.dtype, m.fortran):
        raise NpzSourceError(f"{self.path}: member {m.name!r:.80} changed "
                             "while it was read")
      # In pieces: `ZipExtFile.readinto` would read the whole member into
      # a second buffer first.
      buffer = bytearray(nbytes)
      view = memoryview(buffer)
      got = 0
      while got < nbytes:
        piece = f.read(min(nbytes - got, _PIECE))
        if not piece:
          break
        view[got:got + len(piece)] = piece
        got += len(piece)
      if got != nbytes:
        raise NpzSourceError(
            f"{self.path}: member {m.name!r:.80} ends after {got:,} of the "
            f"{nbytes:,} bytes its header declares")
      if f.read(1):
        raise NpzSourceError(
            f"{self.path}: member {m.name!r:.80} holds more than the "
            f"{nbytes:,} bytes its header declares")
    return buffer


def open_npz(path: str, limit: int | None) -> FlatSource:
  """The arrays of the `.npz` at `path` by key, each known by its header
  only when the program needs it; binding reads at most `limit` bytes of
  them (None: no limit)."""
  source = NpzSource(path, limit)
  return FlatSource({key: _LazyMember(source, key) for key in source.infos},
                    path)


class _LazyMember(Lazy):
  """Stands for a member until its header is needed."""

  def __init__(self, source: NpzSource, key: str):
    self.source, self.key = source, key

  def resolve(self) -> NpzMember:
    return self.source.member(self.key)
