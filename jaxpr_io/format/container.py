"""The file container: header, program message, aligned data section.

Layout and field meanings are specified in schema/jaxpr.proto ("Container").
This module knows bytes and offsets only; it does not know what a jaxpr is.
"""

from __future__ import annotations

import errno
import mmap
import os
import queue
import re
import socket
import stat
import struct
import sys
import threading
import zlib
from typing import Any

from jaxpr_io.format import version
from jaxpr_io.errors import FormatError

MAGIC = b"\x89JAXPR\r\n"
HEADER_SIZE = 64
ALIGNMENT = 64
# magic, format_version, header_size, program_offset, program_length,
# data_offset, data_length, program_crc32, reserved (8 bytes)
_HEADER = struct.Struct("<8sIIQQQQI8s")
_HEADER_CRC = struct.Struct("<I")
assert _HEADER.size + _HEADER_CRC.size == HEADER_SIZE

# Files are created as open() would create them; the temporary file's 0600
# is for the writing only. (Reading the umask means setting it: do it once.)
_UMASK = os.umask(0)
os.umask(_UMASK)
_FILE_MODE = 0o666 & ~_UMASK

# The Program message is parsed into memory; bound it so a corrupt length
# cannot ask for more than protobuf's own 2 GiB limit.
MAX_PROGRAM_BYTES = (2 << 30) - 1


# Buffers at least this large are checksummed by several threads at once
# (zlib.crc32 releases the GIL), each over one slice; the slices' CRCs are
# then combined (`_crc32_combine`), which gives exactly zlib's result.
_PARALLEL_CRC_BYTES = 32 << 20
_CRC_THREADS = max(1, min(8, os.cpu_count() or 1))


def crc32(data) -> int:
  view = memoryview(data)
  if view.nbytes >= _PARALLEL_CRC_BYTES and _CRC_THREADS > 1:
    return _parallel_crc32(view)
  return zlib.crc32(view) & 0xFFFFFFFF


def _gf2_times(matrix: list[int], vector: int) -> int:
  total, i = 0, 0
  while vector:
    if vector & 1:
      total ^= matrix[i]
    vector >>= 1
    i += 1
  return total


# [k]: the GF(2) matrix (as its 32 columns) that advances a CRC-32 over
# 2**k zero bytes; built on first use, each the square of the one before.
_ZERO_POWERS: list[list[int]] = []
_ZERO_POWERS_LOCK = threading.Lock()


def _zero_power(k: int) -> list[int]:
  if k >= len(_ZERO_POWERS):
    with _ZERO_POWERS_LOCK:
      while len(_ZERO_POWERS) <= k:
        if _ZERO_POWERS:
          matrix = _ZERO_POWERS[-1]
          squarings = 1
        else:  # one zero bit (zlib's crc32_combine), squared to 8 bits
          matrix = [0xEDB88320] + [1 << n for n in range(31)]
          squarings = 3
        for _ in range(squarings):
          matrix = [_gf2_times(matrix, column) for column in matrix]
        _ZERO_POWERS.append(matrix)
  return _ZERO_POWERS[k]


def _crc32_combine(crc1: int, crc2: int, length2: int) -> int:
  """CRC-32 of A + B from crc1 = CRC(A), crc2 = CRC(B) and len(B)."""
  k = 0
  while length2:
    if length2 & 1:
      crc1 = _gf2_times(_zero_power(k), crc1)
    length2 >>= 1
    k += 1
  return crc1 ^ crc2


def _parallel_crc32(view: memoryview) -> int:
  view = view.cast("B") if view.format != "B" or view.ndim != 1 else view
  n = view.nbytes
  step = -(-n // _CRC_THREADS)  # one slice per thread, in whole MiB
  step = -(-step // (1 << 20)) << 20
  bounds = [(start, min(start + step, n)) for start in range(0, n, step)]
  results: list = [None] * len(bounds)

  def run(k):
    start, stop = bounds[k]
    try:
      results[k] = zlib.crc32(view[start:stop])
    except BaseException as e:  # pylint: disable=broad-except
      results[k] = e  # raised below, in the calling thread

  threads = [threading.Thread(target=run, args=(k,), daemon=True)
             for k in range(1, len(bounds))]
  for t in threads:
    t.start()
  run(0)
  for t in threads:
    t.join()
  for part in results:
    if not isinstance(part, int):
      raise part
  total = results[0]
  for (start, stop), part in zip(bounds[1:], results[1:]):
    total = _crc32_combine(total, part, stop - start)
  return total & 0xFFFFFFFF


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
    return [crc32(chunk) if known is None else known
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


def _header(format_version: int, program_length: int, data_offset: int,
            data_length: int, program_crc: int) -> bytes:
  head = _HEADER.pack(MAGIC, format_version, HEADER_SIZE, HEADER_SIZE,
                      program_length, data_offset, data_length, program_crc,
                      bytes(8))
  return head + _HEADER_CRC.pack(crc32(head))


def _head_parts(program: bytes, layout: DataLayout, format_version: int):
  """Header, program message and padding: the bytes before the data."""
  data_offset = align(HEADER_SIZE + len(program))
  return [_header(format_version, len(program), data_offset, layout.size,
                  crc32(program)),
          program, bytes(data_offset - HEADER_SIZE - len(program))]


def _data_parts(layout: DataLayout):
  """The data section as a sequence of byte chunks."""
  position = 0
  for offset, chunk in zip(layout.offsets, layout.chunks):
    if offset > position:
      yield bytes(offset - position)
    yield chunk
    position = offset + memoryview(chunk).nbytes


def _parts(program: bytes, layout: DataLayout, format_version: int):
  """The file as a sequence of byte chunks."""
  yield from _head_parts(program, layout, format_version)
  yield from _data_parts(layout)


def to_bytes(program: bytes | PendingProgram, layout: DataLayout,
             format_version: int = version.FORMAT_VERSION) -> bytes:
  """The file's bytes. A `PendingProgram` is finished with the checksums of
  the layout's chunks."""
  if isinstance(program, PendingProgram):
    program = program.finish(layout.crcs())
  return b"".join(_parts(program, layout, format_version))


def _mode_for(path: str) -> int:
  """The permission bits the file at `path` gets: those of the file it
  replaces (private weights stay private), else the umask's default."""
  try:
    return stat.S_IMODE(os.stat(path).st_mode)
  except FileNotFoundError:
    return _FILE_MODE


def write_file(path: str | os.PathLike, program: bytes | PendingProgram,
               layout: DataLayout,
               format_version: int = version.FORMAT_VERSION) -> None:
  """Writes atomically: a temporary file in the same directory, fsynced, then
  renamed over `path`, then the directory fsynced. A crash leaves the old
  file or the new one, never a half-written one. The file keeps the
  permission bits of the file it replaces (else the umask's default).

  No temporary file outlives its process, even one killed with SIGKILL:
  on Linux the bytes go into an anonymous file (`O_TMPFILE`) in the target's
  directory, which the kernel discards if the process dies, and which gets a
  name (`.NAME.jaxpr_io-HOST-PID-RANDOM.tmp`) only once it is complete and
  fsynced, for the moment before it is renamed over `path`. Where
  `O_TMPFILE` is unavailable (other systems; filesystems that refuse it)
  the temporary file has that name from the start. Either way, each save
  first deletes the temporary files of the same target that were left by
  processes of this host that no longer exist (`os.kill(pid, 0)` fails
  with ProcessLookupError); those of live processes are never touched.

  Array data is written from the arrays' own buffers (no copies), in large
  `os.pwritev` calls; on Linux, write-back to the disk is started as each
  chunk is written (`sync_file_range`), so the final fsync has little left
  to wait for. Given a `PendingProgram` and a large data section, the data
  section is written first, at its final offset, while other threads compute
  the blobs' checksums; the header and the finished message are written
  last, at the start of the file. The bytes are those of `to_bytes`."""
  path = os.fspath(path)
  directory, base = os.path.split(os.path.abspath(path))
  if not os.path.isdir(directory):
    # Named here: the error would otherwise name the temporary file.
    raise FileNotFoundError(
        errno.ENOENT, f"cannot write {path}: no such directory "
        f"{os.path.dirname(path) or directory}", path)
  mode = _mode_for(path)
  _remove_stale_temporaries(directory, base)
  global _use_tmpfile  # pylint: disable=global-statement
  if _use_tmpfile and hasattr(os, "O_TMPFILE"):
    try:
      fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC,
                   0o600)
    except OSError:
      fd = None  # this filesystem refuses it (EOPNOTSUPP, EISDIR, EINVAL)
    if fd is not None:
      try:
        _write_contents(fd, program, layout, format_version, mode)
        dir_fd = os.open(directory, os.O_RDONLY | os.O_CLOEXEC)
        try:
          while True:
            tmp = _temp_name(directory, base)
            try:
              # linkat(AT_SYMLINK_FOLLOW): a dir_fd makes os.link use linkat;
              # plain link() would link the /proc symlink itself (EXDEV).
              os.link(f"/proc/self/fd/{fd}", os.path.basename(tmp),
                      dst_dir_fd=dir_fd, follow_symlinks=True)
              break
            except FileExistsError:
              continue
            except OSError:
              # No /proc, or linking refused: name files from the start.
              _use_tmpfile = False
              tmp = None
              break
        finally:
          os.close(dir_fd)
      finally:
        os.close(fd)
      if tmp is not None:
        _rename_into_place(tmp, path, directory)
        return
  tmp = _temp_name(directory, base)
  try:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _O_CLOEXEC,
                 0o600)
  except OSError as e:  # e.g. a read-only directory: name the user's path
    raise type(e)(e.errno, f"cannot write {path}: {e.strerror}",
                  path) from None
  try:
    try:
      _write_contents(fd, program, layout, format_version, mode)
    finally:
      os.close(fd)
  except BaseException:
    _unlink_quietly(tmp)
    raise
  _rename_into_place(tmp, path, directory)


# Whether to try O_TMPFILE (where os has it); cleared if naming such a file
# through /proc fails.
_use_tmpfile = os.path.isdir("/proc/self/fd")
_TEMP_MARK = ".jaxpr_io-"
_O_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_TEMP_SUFFIX = re.compile(r"([0-9a-f]{8})-([0-9]{1,10})-[0-9a-f]{1,32}\.tmp\Z")
_MAX_TEMP_BASE = 160  # of the target's name, so temporary names fit NAME_MAX
# Data is written and handed to write-back in pieces of this size.
_WRITE_CHUNK = 64 << 20
_IOV_MAX = 512
# From this size of data section on, a `PendingProgram`'s checksums are
# computed while the data is written (below it, first).
_OVERLAP_BYTES = 8 << 20
# While the data is written, its checksums are computed by this many threads
# (the writing thread is busy copying into the page cache), each taking
# slices of this size in turn; the writing thread joins them when it is done.
_OVERLAP_CRC_THREADS = max(1, _CRC_THREADS - 1)
_CRC_SLICE = 16 << 20


def _host_token() -> str:
  """Names the pid namespace a temporary file's pid belongs to: pids of
  another host (a shared filesystem) or container are not ours to test."""
  try:
    namespace = os.stat("/proc/self/ns/pid").st_ino
  except OSError:
    namespace = 0
  return f"{crc32(f'{socket.gethostname()}/{namespace}'.encode()):08x}"


def _temp_name(directory: str, base: str) -> str:
  return os.path.join(directory, f".{base[:_MAX_TEMP_BASE]}{_TEMP_MARK}"
                      f"{_host_token()}-{os.getpid()}-{os.urandom(8).hex()}"
                      ".tmp")


def _pid_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except (OSError, OverflowError, ValueError):
    return True  # e.g. PermissionError: another user's live process
  return True


def _remove_stale_temporaries(directory: str, base: str) -> None:
  """Deletes temporary files for `base` left by dead processes of this
  host (a process killed while saving with named temporaries, or killed
  between naming an O_TMPFILE file and renaming it)."""
  if os.name != "posix":
    return  # os.kill(pid, 0) would not test for life elsewhere
  prefix = f".{base[:_MAX_TEMP_BASE]}{_TEMP_MARK}"
  try:
    names = [n for n in os.listdir(directory) if n.startswith(prefix)]
  except OSError:
    return
  if not names:
    return
  token, me = _host_token(), os.getpid()
  for name in names:
    match = _TEMP_SUFFIX.match(name, len(prefix))
    if match is None or match.group(1) != token:
      continue
    pid = int(match.group(2))
    if pid <= 0 or pid == me or _pid_alive(pid):
      continue
    _unlink_quietly(os.path.join(directory, name))


def _unlink_quietly(name: str) -> None:
  try:
    os.unlink(name)
  except OSError:
    pass


def _rename_into_place(tmp: str, path: str, directory: str) -> None:
  try:
    os.replace(tmp, path)
  except BaseException:
    _unlink_quietly(tmp)
    raise
  dir_fd = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(dir_fd)
  finally:
    os.close(dir_fd)


def _write_contents(fd: int, program: bytes | PendingProgram,
                    layout: DataLayout, format_version: int,
                    mode: int) -> None:
  """The file's bytes, then its mode, then fsync."""
  writeback = _Writeback(fd)
  try:
    if isinstance(program, PendingProgram):
      if layout.size >= _OVERLAP_BYTES:
        _write_overlapped(fd, program, layout, format_version, writeback)
      else:
        program = program.finish(layout.crcs())
    if not isinstance(program, PendingProgram):
      _write_views(fd, _parts(program, layout, format_version), 0,
                   writeback)
  finally:
    writeback.close()
  os.fchmod(fd, mode)
  os.fsync(fd)


def _write_overlapped(fd: int, program: PendingProgram, layout: DataLayout,
                      format_version: int, writeback: _Writeback) -> None:
  """The data section first, at its final offset, while threads checksum it;
  then the header and the finished message, at offset 0."""
  length = program.length()
  data_offset = align(HEADER_SIZE + length)
  crcs = _BackgroundCrcs(layout, _OVERLAP_CRC_THREADS)
  try:
    _write_views(fd, _data_parts(layout), data_offset, writeback)
  except BaseException:
    crcs.cancel()
    raise
  message = program.finish(crcs.result())
  if align(HEADER_SIZE + len(message)) != data_offset:
    # A checksum was 0, which the message leaves out, and the data section
    # moves to a lower offset: write the file again, as to_bytes has it.
    os.ftruncate(fd, 0)
    _write_views(fd, _parts(message, layout, format_version), 0,
                 writeback)
    return
  # (A shorter message with the same data offset has more zero padding.)
  _write_views(fd, _head_parts(message, layout, format_version), 0,
               writeback)


def _write_views(fd: int, parts, offset: int, writeback: _Writeback) -> int:
  """Writes the buffers `parts`, one after another from `offset`, in calls
  of at most _WRITE_CHUNK bytes; returns the offset after them."""
  batch: list[memoryview] = []
  batch_bytes = 0
  for part in parts:
    view = memoryview(part)
    if view.ndim != 1 or view.format != "B":
      view = view.cast("B")
    for start in range(0, view.nbytes, _WRITE_CHUNK):
      piece = view[start:start + _WRITE_CHUNK]
      if batch_bytes + piece.nbytes > _WRITE_CHUNK or len(batch) >= _IOV_MAX:
        offset = _write_batch(fd, batch, offset, writeback)
        batch, batch_bytes = [], 0
      batch.append(piece)
      batch_bytes += piece.nbytes
  return _write_batch(fd, batch, offset, writeback)


def _write_at(fd: int, views: list, offset: int) -> int:
  """One positioned write of (a prefix of) `views`; the bytes written."""
  if hasattr(os, "pwritev"):
    return os.pwritev(fd, views, offset)
  os.lseek(fd, offset, os.SEEK_SET)
  return (os.writev(fd, views) if hasattr(os, "writev")
          else os.write(fd, views[0]))


def _write_batch(fd: int, views: list, offset: int,
                 writeback: _Writeback) -> int:
  """Writes `views` at `offset`; starts their write-back if they are large;
  returns the offset after them."""
  start = offset
  while views:
    n = _write_at(fd, views, offset)
    if n <= 0:
      raise OSError(errno.EIO, "write wrote nothing")
    offset += n
    while views and n >= views[0].nbytes:
      n -= views[0].nbytes
      views = views[1:]
    if views and n:
      views = [views[0][n:], *views[1:]]
  if offset - start >= _WRITE_CHUNK // 2:
    writeback.start(start, offset - start)
  return offset


_sync_file_range: Any = None


def _start_writeback(fd: int, offset: int, length: int) -> None:
  """Asks the kernel to start writing this range to the disk now, rather
  than at fsync, so that writing to the page cache and to the disk overlap.
  A hint: ignored where sync_file_range is unavailable or fails."""
  global _sync_file_range  # pylint: disable=global-statement
  if _sync_file_range is None:
    _sync_file_range = False
    if sys.platform.startswith("linux"):
      try:
        import ctypes  # pylint: disable=g-import-not-at-top
        if ctypes.sizeof(ctypes.c_void_p) == 8:
          function = ctypes.CDLL(None, use_errno=True).sync_file_range
          function.argtypes = [ctypes.c_int, ctypes.c_int64, ctypes.c_int64,
                               ctypes.c_uint]
          function.restype = ctypes.c_int
          _sync_file_range = function
      except (ImportError, OSError, AttributeError):
        pass
  if _sync_file_range:
    _sync_file_range(fd, offset, length, 2)  # SYNC_FILE_RANGE_WRITE


# Whether write-back is started from a thread of its own (`_Writeback`).
_WRITEBACK_THREAD = True


class _Writeback:
  """Starts the disk write-back of each large range written to `fd` (see
  `_start_writeback`) from a thread of its own: queueing the range's I/O
  takes the kernel a while, during which the writing thread goes on copying
  the next range into the page cache. `close()` before the fd is closed."""

  def __init__(self, fd: int):
    self._fd = fd
    self._ranges: queue.SimpleQueue = queue.SimpleQueue()
    self._thread: threading.Thread | None = None

  def start(self, offset: int, length: int) -> None:
    if not _WRITEBACK_THREAD or not sys.platform.startswith("linux"):
      _start_writeback(self._fd, offset, length)
      return
    if self._thread is None:
      self._thread = threading.Thread(target=self._run, daemon=True)
      self._thread.start()
    self._ranges.put((offset, length))

  def _run(self) -> None:
    while True:
      item = self._ranges.get()
      if item is None:
        return
      try:
        _start_writeback(self._fd, *item)
      except Exception:  # pylint: disable=broad-except
        pass  # a hint

  def close(self) -> None:
    if self._thread is not None:
      self._ranges.put(None)
      self._thread.join()
      self._thread = None


class _BackgroundCrcs:
  """The CRC-32 of each chunk of a layout, computed by `threads` threads
  started at once (zlib.crc32 releases the GIL), each taking the next
  _CRC_SLICE-byte slice of the chunks in turn; `result()` has the calling
  thread take slices too, until none is left, and combines each chunk's."""

  def __init__(self, layout: DataLayout, threads: int):
    self._layout = layout
    self._views: list = []
    self._jobs: list[tuple[int, int, int]] = []  # (chunk, start, stop)
    for i, (chunk, known) in enumerate(zip(layout.chunks,
                                           layout.known_crcs)):
      view = memoryview(chunk)
      if view.ndim != 1 or view.format != "B":
        view = view.cast("B")
      self._views.append(view)
      if known is None:
        n = view.nbytes
        self._jobs.extend((i, start, min(start + _CRC_SLICE, n))
                          for start in range(0, max(n, 1), _CRC_SLICE))
    self._results: list = [None] * len(self._jobs)
    self._taken = 0  # jobs handed out
    self._lock = threading.Lock()
    self._cancelled = False
    self._threads = [threading.Thread(target=self._work, daemon=True)
                     for _ in range(min(threads, len(self._jobs)))]
    for thread in self._threads:
      thread.start()

  def _work(self) -> None:
    while not self._cancelled:
      with self._lock:
        k = self._taken
        if k == len(self._jobs):
          return
        self._taken = k + 1
      chunk, start, stop = self._jobs[k]
      try:
        self._results[k] = zlib.crc32(self._views[chunk][start:stop])
      except BaseException as e:  # pylint: disable=broad-except
        self._results[k] = e  # raised by result(), in the calling thread

  def cancel(self) -> None:
    self._cancelled = True
    for thread in self._threads:
      thread.join()

  def result(self) -> list[int]:
    try:
      self._work()
    finally:
      self.cancel()  # waits for the slices other threads are on
    crcs = list(self._layout.known_crcs)
    for (chunk, start, stop), part in zip(self._jobs, self._results):
      if not isinstance(part, int):
        raise part
      crcs[chunk] = (part if start == 0
                     else _crc32_combine(crcs[chunk], part, stop - start))
    return [value & 0xFFFFFFFF for value in crcs]


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
    if header_crc != crc32(head[:_HEADER.size]):
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
    if crc32(self.program) != program_crc:
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
    if checksum is not None and crc32(view) != checksum:
      raise FormatError(
          f"{self.source}: {where}: checksum mismatch for the blob at file "
          f"offset {self.data_offset + offset} ({length} bytes); the file "
          "is corrupt")
    return view


def map_file(path: str | os.PathLike) -> Container:
  """Maps `path` read-only; array data is paged in when first read."""
  path = os.fspath(path)
  with open(path, "rb") as f:
    size = os.fstat(f.fileno()).st_size
    if size == 0:
      raise FormatError(f"{path}: the file is empty")
    buffer = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
  return Container(buffer, source=path)
