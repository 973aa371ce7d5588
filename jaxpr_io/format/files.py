"""Writing a container file atomically: a temporary file in the target's
directory (an anonymous `O_TMPFILE` where Linux has one), written with the
data section overlapping its checksums, fsynced and renamed into place.
A crash leaves the old file or the new one, and no temporary outlives its
process.

The converters' artifacts, written by other libraries to a path they are
given, take the same way (`replaced_file`, `replaced_directory`): built and
checked under a temporary name next to the target, renamed into place only
when the caller's block succeeds.
"""

from __future__ import annotations

import contextlib
import errno
import os
import queue
import re
import shutil
import socket
import stat
import sys
import threading
from typing import Any, Iterator

from jaxpr_io.format import container
from jaxpr_io.format import crc
from jaxpr_io.format import version

# Files are created as open() would create them; the temporary file's 0600
# is for the writing only. (Reading the umask means setting it: do it once.)
_UMASK = os.umask(0)
os.umask(_UMASK)
_FILE_MODE = 0o666 & ~_UMASK


def _mode_for(path: str) -> int:
  """The permission bits the file at `path` gets: those of the file it
  replaces (private weights stay private), else the umask's default."""
  try:
    return stat.S_IMODE(os.stat(path).st_mode)
  except FileNotFoundError:
    return _FILE_MODE


def write_file(path: str | os.PathLike, program: bytes | container.PendingProgram,
               layout: container.DataLayout,
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
  directory, base = _target(path)
  mode = _mode_for(path)
  _remove_stale_temporaries(directory, base)
  if _use_tmpfile and hasattr(os, "O_TMPFILE"):
    tmp = _write_anonymous(directory, base, program, layout, format_version,
                           mode)
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


def _target(path: str) -> tuple[str, str]:
  """(directory, name) of `path`; FileNotFoundError naming the user's path
  if the directory is missing (the error would otherwise name the
  temporary file)."""
  directory, base = os.path.split(os.path.abspath(path))
  if not os.path.isdir(directory):
    raise FileNotFoundError(
        errno.ENOENT, f"cannot write {path}: no such directory "
        f"{os.path.dirname(path) or directory}", path)
  return directory, base


def _write_anonymous(directory: str, base: str, program, layout,
                     format_version: int, mode: int) -> str | None:
  """Writes the file as an anonymous `O_TMPFILE` in `directory`, then names
  it; the name, or None where the filesystem or /proc refuses (then files
  are named from the start: `_use_tmpfile` is cleared when naming fails)."""
  global _use_tmpfile  # pylint: disable=global-statement
  try:
    fd = os.open(directory, os.O_TMPFILE | os.O_WRONLY | os.O_CLOEXEC, 0o600)
  except OSError:
    return None  # this filesystem refuses it (EOPNOTSUPP, EISDIR, EINVAL)
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
          return tmp
        except FileExistsError:
          continue
        except OSError:
          # No /proc, or linking refused: name files from the start.
          _use_tmpfile = False
          return None
    finally:
      os.close(dir_fd)
  finally:
    os.close(fd)


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
_OVERLAP_CRC_THREADS = max(1, crc.CRC_THREADS - 1)


def _host_token() -> str:
  """Names the pid namespace a temporary file's pid belongs to: pids of
  another host (a shared filesystem) or container are not ours to test."""
  try:
    namespace = os.stat("/proc/self/ns/pid").st_ino
  except OSError:
    namespace = 0
  return f"{crc.crc32(f'{socket.gethostname()}/{namespace}'.encode()):08x}"


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
  """Removes the temporary `name`: a file, or a directory tree (a staged
  SavedModel, or the one it replaced); a symlink is unlinked, never
  followed."""
  try:
    if stat.S_ISDIR(os.lstat(name).st_mode):
      shutil.rmtree(name, ignore_errors=True)
    else:
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


@contextlib.contextmanager
def replaced_file(path: str | os.PathLike) -> Iterator[str]:
  """A temporary name next to `path`, for a library that writes a file to
  a path it is given (a converter's artifact). The block writes the file
  there, and may check it; when the block returns, the file is fsynced,
  gets the permission bits of the file it replaces (else the umask's
  default) and is renamed over `path`. When the block raises, the
  temporary is removed and `path` is left as it was. Temporaries are named
  as `write_file`'s (`.NAME.jaxpr_io-HOST-PID-RANDOM.tmp`), so the next
  write of `path` removes one that a killed process left."""
  path = os.fspath(path)
  directory, base = _target(path)
  if os.path.isdir(path):
    raise IsADirectoryError(errno.EISDIR, f"cannot write {path}: it is a "
                            "directory", path)
  mode = _mode_for(path)
  _remove_stale_temporaries(directory, base)
  tmp = _temp_name(directory, base)
  try:
    yield tmp
    fd = os.open(tmp, os.O_RDONLY | _O_CLOEXEC)
    try:
      os.fchmod(fd, mode)
      os.fsync(fd)
    finally:
      os.close(fd)
  except BaseException:
    _unlink_quietly(tmp)
    raise
  _rename_into_place(tmp, path, directory)


@contextlib.contextmanager
def replaced_directory(path: str | os.PathLike) -> Iterator[str]:
  """As `replaced_file`, for an artifact that is a directory (a
  SavedModel): the block fills an empty temporary directory next to
  `path`, which then takes `path`'s place: renamed over it if `path` is
  missing or an empty directory, else exchanged with it in one step
  (Linux's `renameat2(RENAME_EXCHANGE)`), the old tree then removed. Where
  the exchange is unavailable (other systems, filesystems that refuse it),
  the old directory is renamed aside and the new one into place: between
  those two renames `path` is absent. A symlink to a directory is followed
  (the directory it names is replaced); a `path` that is anything else but
  a directory is refused before the block runs."""
  path = os.fspath(path)
  if os.path.islink(path) and os.path.isdir(path):
    path = os.path.realpath(path)
  directory, base = _target(path)
  if os.path.lexists(path) and not os.path.isdir(path):
    raise NotADirectoryError(errno.ENOTDIR, f"cannot write {path}: it "
                             "exists and is not a directory", path)
  _remove_stale_temporaries(directory, base)
  tmp = _temp_name(directory, base)
  os.mkdir(tmp)
  try:
    yield tmp
  except BaseException:
    _unlink_quietly(tmp)
    raise
  _swap_into_place(tmp, path, directory, base)


def _swap_into_place(tmp: str, path: str, directory: str, base: str) -> None:
  """Puts the directory `tmp` at `path` (see `replaced_directory`)."""
  try:
    os.rename(tmp, path)  # `path` missing or empty: one atomic step
  except OSError as e:
    if e.errno not in (errno.ENOTEMPTY, errno.EEXIST):
      _unlink_quietly(tmp)
      raise
    if not _exchange(tmp, path):
      old = _temp_name(directory, base)
      os.rename(path, old)
      try:
        os.rename(tmp, path)
      except BaseException:
        os.rename(old, path)
        _unlink_quietly(tmp)
        raise
      tmp = old
    _unlink_quietly(tmp)  # the old tree, now at the temporary name
  dir_fd = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(dir_fd)
  finally:
    os.close(dir_fd)


_RENAME_EXCHANGE = 2  # linux/fs.h
_AT_FDCWD = -100


def _exchange(a: str, b: str) -> bool:
  """Swaps the paths `a` and `b` atomically (`renameat2` with
  RENAME_EXCHANGE); False where the system or filesystem cannot."""
  if not sys.platform.startswith("linux"):
    return False
  try:
    import ctypes  # pylint: disable=g-import-not-at-top
    function = ctypes.CDLL(None, use_errno=True).renameat2
  except (ImportError, OSError, AttributeError):
    return False  # a libc without renameat2 (glibc < 2.28)
  function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int,
                       ctypes.c_char_p, ctypes.c_uint]
  function.restype = ctypes.c_int
  if function(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b),
              _RENAME_EXCHANGE) == 0:
    return True
  code = ctypes.get_errno()
  if code in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
    return False
  raise OSError(code, f"cannot replace {b}: {os.strerror(code)}", b)


def _write_contents(fd: int, program: bytes | container.PendingProgram,
                    layout: container.DataLayout, format_version: int,
                    mode: int) -> None:
  """The file's bytes, then its mode, then fsync."""
  writeback = _Writeback(fd)
  try:
    if isinstance(program, container.PendingProgram):
      if layout.size >= _OVERLAP_BYTES:
        _write_overlapped(fd, program, layout, format_version, writeback)
      else:
        program = program.finish(layout.crcs())
    if not isinstance(program, container.PendingProgram):
      _write_views(fd, container.parts(program, layout, format_version), 0,
                   writeback)
  finally:
    writeback.close()
  os.fchmod(fd, mode)
  os.fsync(fd)


def _write_overlapped(fd: int, program: container.PendingProgram,
                      layout: container.DataLayout,
                      format_version: int, writeback: _Writeback) -> None:
  """The data section first, at its final offset, while threads checksum it;
  then the header and the finished message, at offset 0."""
  length = program.length()
  data_offset = container.align(container.HEADER_SIZE + length)
  crcs = crc.BackgroundCrcs(layout, _OVERLAP_CRC_THREADS)
  try:
    _write_views(fd, container.data_parts(layout), data_offset, writeback)
  except BaseException:
    crcs.cancel()
    raise
  message = program.finish(crcs.result())
  if container.align(container.HEADER_SIZE + len(message)) != data_offset:
    # A checksum was 0, which the message leaves out, and the data section
    # moves to a lower offset: write the file again, as to_bytes has it.
    os.ftruncate(fd, 0)
    _write_views(fd, container.parts(message, layout, format_version), 0,
                 writeback)
    return
  # (A shorter message with the same data offset has more zero padding.)
  _write_views(fd, container.head_parts(message, layout, format_version), 0,
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
