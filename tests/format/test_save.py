"""`jaxpr_io.save`: the bytes of `dumps`, atomic replacement, permission
bits, and no temporary file left behind by a save that was killed.

The kill tests run a real save in a child process, stall it after its first
large write (so the kill lands mid-file, deterministically), SIGKILL it and
look at the directory. Timing is not tested here: see
benchmarks/bench_format.py.
"""

from __future__ import annotations

import os
import select
import signal
import stat
import subprocess
import sys
import threading
import zlib

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.format import container
from jaxpr_io.format import crc
from jaxpr_io.format import files
from tests.support import paths

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="uses /proc and O_TMPFILE")

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

# Saves a program closing over `MB` megabytes to `PATH`; after the first
# write of at least 1 MiB it reports whether it writes to an anonymous
# (O_TMPFILE) or a named file, and stalls, until killed.
_CHILD = r"""
import os, sys, time
import numpy as np
import jax, jax.numpy as jnp
import jaxpr_io

path, megabytes, mode = sys.argv[1], int(sys.argv[2]), sys.argv[3]
if mode == "named" and hasattr(os, "O_TMPFILE"):
  del os.O_TMPFILE  # as on a system without it
w = np.full((megabytes << 20) // 4, 0.5, np.float32)
prog = jaxpr_io.trace(lambda x: x * w,
                      jax.ShapeDtypeStruct(w.shape, jnp.float32))

def stalling(write):
  def wrapper(fd, *args):
    n = write(fd, *args)
    if n >= 1 << 20:
      target = os.readlink(f"/proc/self/fd/{fd}")
      kind = "anonymous" if target.endswith("(deleted)") else "named"
      print("writing", kind, os.path.basename(target), flush=True)
      time.sleep(3600)
    return n
  return wrapper

os.write = stalling(os.write)
os.writev = stalling(os.writev)
if hasattr(os, "pwritev"):
  os.pwritev = stalling(os.pwritev)
jaxpr_io.save(path, prog)
print("finished", flush=True)
"""


class _Saver:
  """A child process stalled in the middle of `jaxpr_io.save(path, ...)`."""

  def __init__(self, path, megabytes: int, mode: str):
    self.proc = subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(path), str(megabytes), mode],
        stdout=subprocess.PIPE, text=True,
        cwd=paths.ROOT)
    ready, _, _ = select.select([self.proc.stdout], [], [], 300)
    if not ready:
      self.kill()
      pytest.fail("the saving child did not start writing in 300 s")
    line = self.proc.stdout.readline().split()
    if line[:1] != ["writing"]:
      self.kill()
      pytest.fail(f"the saving child said {line!r}")
    self.kind, self.target = line[1], line[2]

  @property
  def pid(self) -> int:
    return self.proc.pid

  def kill(self) -> None:
    if self.proc.poll() is None:
      self.proc.send_signal(signal.SIGKILL)
    self.proc.wait()
    self.proc.stdout.close()


def _small_program(value: float = 2.0):
  w = np.linspace(0, 1, 1000, dtype=np.float32) * value
  return jaxpr_io.trace(lambda x: x * w, np.ones(1000, np.float32))


def _temporaries(directory) -> list[str]:
  return sorted(n for n in os.listdir(directory) if ".jaxpr_io-" in n)


@pytest.fixture
def named_temporaries(monkeypatch):
  """Saves in this process as where O_TMPFILE does not exist."""
  monkeypatch.delattr(os, "O_TMPFILE", raising=False)


# ------------------------------------------------------------- killed saves
@linux_only
def test_a_killed_save_leaves_no_temporary_and_the_old_file(tmp_path):
  path = tmp_path / "p.jaxpr"
  old = _small_program()
  jaxpr_io.save(path, old)
  original = path.read_bytes()

  saver = _Saver(path, 300, "anonymous")
  try:
    if saver.kind != "anonymous":
      pytest.skip("this filesystem refuses O_TMPFILE")
    # Mid-write: 64 MiB of 300 are written, to a file with no name.
    assert os.listdir(tmp_path) == ["p.jaxpr"]
  finally:
    saver.kill()
  assert os.listdir(tmp_path) == ["p.jaxpr"]
  assert path.read_bytes() == original
  np.testing.assert_array_equal(jaxpr_io.load(path)(np.ones(1000, np.float32)),
                                old(np.ones(1000, np.float32)))

  new = _small_program(3.0)
  jaxpr_io.save(path, new)
  assert os.listdir(tmp_path) == ["p.jaxpr"]
  assert path.read_bytes() == jaxpr_io.dumps(new)


@linux_only
def test_named_temporaries_of_dead_savers_are_removed_not_live_ones(
    tmp_path, named_temporaries):
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, _small_program())
  original = path.read_bytes()
  (tmp_path / "unrelated.tmp").write_bytes(b"x")

  live = _Saver(path, 8, "named")
  try:
    dead = _Saver(path, 8, "named")
    dead.kill()
    assert live.kind == dead.kind == "named"
    assert str(live.pid) in live.target and str(dead.pid) in dead.target
    assert _temporaries(tmp_path) == sorted([live.target, dead.target])
    assert path.read_bytes() == original  # the killed save changed nothing
    # A leftover of a dead process for another target is that target's.
    other = ".q.jaxpr" + dead.target[len(".p.jaxpr"):]
    os.link(tmp_path / dead.target, tmp_path / other)

    prog = _small_program(5.0)
    jaxpr_io.save(path, prog)
    assert path.read_bytes() == jaxpr_io.dumps(prog)
    assert _temporaries(tmp_path) == sorted([live.target, other])
    assert (tmp_path / "unrelated.tmp").read_bytes() == b"x"
  finally:
    live.kill()
  jaxpr_io.save(path, prog)
  assert _temporaries(tmp_path) == [other]
  jaxpr_io.save(tmp_path / "q.jaxpr", prog)
  assert _temporaries(tmp_path) == []
  assert sorted(os.listdir(tmp_path)) == ["p.jaxpr", "q.jaxpr",
                                          "unrelated.tmp"]


def test_a_temporary_of_this_process_is_kept(tmp_path, named_temporaries):
  """A save running in another thread of this process owns it."""
  path = tmp_path / "p.jaxpr"
  mine = os.path.basename(files._temp_name(str(tmp_path), "p.jaxpr"))
  (tmp_path / mine).write_bytes(b"in progress")
  jaxpr_io.save(path, _small_program())
  assert _temporaries(tmp_path) == [mine]


# ------------------------------------------------------------ file contents
def _program_with_many_blobs():
  rng = np.random.default_rng(0)
  big = rng.standard_normal((70 << 20) // 4, dtype=np.float32)  # > a chunk
  mid = rng.standard_normal((300, 200)).astype(ml_dtypes.bfloat16)
  shared = rng.integers(0, 100, (64, 64), dtype=np.int32)
  twin = shared.copy()                     # equal bytes: one blob
  strided = rng.standard_normal((50, 40), dtype=np.float32).T  # not C order
  small = np.arange(3, dtype=np.float32)   # stored inline
  key = jax.random.key(1)

  def fn(x):
    return (x[0] * big[:4].sum() + mid.astype(jnp.float32).sum()
            + shared.sum() + shared.sum() + twin.sum() + strided.sum()
            + small.sum() + jax.random.uniform(key)
            + jnp.asarray(big)[-1])
  return jaxpr_io.trace(fn, np.ones(4, np.float32))


@pytest.mark.parametrize("mode", ["default", "named"])
def test_saved_bytes_are_the_bytes_of_dumps(tmp_path, monkeypatch, mode):
  if mode == "named":
    monkeypatch.delattr(os, "O_TMPFILE", raising=False)
  prog = _program_with_many_blobs()
  expected = jaxpr_io.dumps(prog)
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, prog)
  assert path.read_bytes() == expected
  assert os.listdir(tmp_path) == ["p.jaxpr"]
  jaxpr_io.save(path, prog)  # over itself
  assert path.read_bytes() == expected
  x = np.ones(4, np.float32)
  np.testing.assert_array_equal(jaxpr_io.load(path)(x), prog(x))


def test_blobs_are_shared_by_content_not_by_address():
  rng = np.random.default_rng(1)
  a = rng.standard_normal(1 << 16, dtype=np.float32)
  b = a.copy()
  c = a + 1
  prog = jaxpr_io.trace(lambda x: x * a + x * b + x * a + x * c,
                        np.ones(1 << 16, np.float32))
  data = jaxpr_io.dumps(prog)
  assert len(container.Container(data).data) == 2 * a.nbytes
  assert data == jaxpr_io.dumps(prog)
  x = np.full(1 << 16, 2.0, np.float32)
  np.testing.assert_array_equal(jaxpr_io.loads(data)(x), prog(x))


@linux_only
def test_on_linux_the_file_has_no_name_until_it_is_complete(tmp_path,
                                                             monkeypatch):
  try:
    os.close(os.open(tmp_path, os.O_TMPFILE | os.O_WRONLY, 0o600))
  except OSError:
    pytest.skip("this filesystem refuses O_TMPFILE")
  monkeypatch.setattr(files, "_use_tmpfile", True)
  created, real_open = [], os.open
  def recording_open(path, flags, *args, **kwargs):
    if flags & os.O_CREAT:
      created.append(path)
    return real_open(path, flags, *args, **kwargs)
  monkeypatch.setattr(os, "open", recording_open)
  prog = _program_with_many_blobs()
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, prog)
  assert created == []  # no named temporary was written
  assert files._use_tmpfile  # naming the anonymous file worked
  assert path.read_bytes() == jaxpr_io.dumps(prog)
  assert os.listdir(tmp_path) == ["p.jaxpr"]


def test_a_refused_link_falls_back_to_a_named_temporary(tmp_path,
                                                          monkeypatch):
  def refuse(*args, **kwargs):
    raise PermissionError(1, "link refused")
  monkeypatch.setattr(os, "link", refuse)
  monkeypatch.setattr(files, "_use_tmpfile", files._use_tmpfile)
  prog = _small_program()
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, prog)
  assert path.read_bytes() == jaxpr_io.dumps(prog)
  assert os.listdir(tmp_path) == ["p.jaxpr"]


def test_checksums_of_large_buffers_are_zlibs(monkeypatch):
  """Large buffers are checksummed in slices by several threads."""
  monkeypatch.setattr(crc, "_PARALLEL_CRC_BYTES", 1 << 20)
  monkeypatch.setattr(crc, "CRC_THREADS", 3)
  rng = np.random.default_rng(2)
  for n in [1 << 20, (1 << 20) + 1, (5 << 20) + 17, 3 << 20, 7 << 20]:
    data = rng.integers(0, 256, n, dtype=np.uint8)
    assert crc.crc32(data) == zlib.crc32(data), n
    assert crc.crc32(memoryview(data).cast("B", (n,))) == zlib.crc32(
        data)
  words = rng.integers(0, 1 << 31, 1 << 19, dtype=np.int32)  # format "i"
  assert crc.crc32(words) == zlib.crc32(words.tobytes())


# ------------------------------------- checksums computed while writing
def test_serialize_reads_no_blob_whole(monkeypatch):
  """Blobs of distinct content are told apart without checksumming them:
  their checksums are computed when the file is written."""
  rng = np.random.default_rng(3)
  ws = [rng.standard_normal(1 << 18, dtype=np.float32) for _ in range(3)]
  prog = jaxpr_io.trace(lambda x: x * ws[0] + x * ws[1] + x * ws[2],
                        np.ones(1 << 18, np.float32))
  calls = []
  real = crc.crc32
  monkeypatch.setattr(crc, "crc32",
                      lambda data: calls.append(1) or real(data))
  message, layout = jaxpr_io.api.program.serialize(prog)
  assert calls == [] and len(layout.chunks) == 3
  assert isinstance(message, container.PendingProgram)
  assert jaxpr_io.loads(container.to_bytes(message, layout))(
      np.ones(1 << 18, np.float32)).tolist() == sum(ws).tolist()


def test_blobs_alike_where_sampled_are_compared_whole():
  """Blobs of one size that agree in the sampled windows (start, middle,
  end) but differ elsewhere stay apart; equal ones are shared."""
  n = 1 << 20  # 4 MiB of float32
  a = np.zeros(n, np.float32)
  b = a.copy()
  b[12345] = 1.0       # outside every sampled window
  c = a.copy()         # equal to a
  d = a.copy()
  d[n - 12345] = 2.0
  e = d.copy()         # equal to d
  prog = jaxpr_io.trace(lambda x: x * a + x * b + x * c + x * d + x * e,
                        np.ones(n, np.float32))
  data = jaxpr_io.dumps(prog)
  assert len(container.Container(data).data) == 3 * a.nbytes
  x = np.full(n, 2.0, np.float32)
  np.testing.assert_array_equal(jaxpr_io.loads(data)(x), prog(x))


def test_checksums_from_slices_on_several_threads(tmp_path, monkeypatch):
  """Slices of odd sizes, several threads, small blobs too: the file is the
  bytes of dumps."""
  monkeypatch.setattr(files, "_OVERLAP_BYTES", 0)
  monkeypatch.setattr(crc, "CRC_SLICE", (1 << 20) + 7)
  monkeypatch.setattr(files, "_OVERLAP_CRC_THREADS", 3)
  prog = _program_with_many_blobs()
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, prog)
  assert path.read_bytes() == jaxpr_io.dumps(prog)
  jaxpr_io.save(path, _small_program())
  assert path.read_bytes() == jaxpr_io.dumps(_small_program())


def _with_zero_crc(prefix: bytes) -> bytes:
  """`prefix` and 4 bytes more, such that zlib's CRC-32 of it all is 0.

  From the register r that zlib holds after `prefix`, four bytes x leave
  L(r ^ x) for a linear, invertible L (the register's update over four zero
  bytes); the CRC is the register inverted, so r ^ x = L^-1(0xFFFFFFFF)."""
  mask = 0xFFFFFFFF
  def update(v):  # L: the register after four zero bytes from register v
    return ~zlib.crc32(bytes(4), ~v & mask) & mask
  basis = {}  # highest bit -> (L(combination), combination)
  for i in range(32):
    v, combination = update(1 << i), 1 << i
    while v:
      top = v.bit_length() - 1
      if top not in basis:
        basis[top] = (v, combination)
        break
      v ^= basis[top][0]
      combination ^= basis[top][1]
  v, solution = mask, 0
  while v:
    vector, combination = basis[v.bit_length() - 1]
    v ^= vector
    solution ^= combination
  register = ~zlib.crc32(prefix) & mask
  data = prefix + (solution ^ register).to_bytes(4, "little")
  assert zlib.crc32(data) == 0
  return data


@pytest.mark.parametrize("moves", [False, True])
def test_a_blob_whose_checksum_is_zero(tmp_path, monkeypatch, moves):
  """proto3 leaves a zero checksum out, so the message is 5 bytes shorter
  than the space kept for it: the same data offset, with more padding, or,
  where the offset moves, the file written again. Either way the bytes of
  dumps."""
  monkeypatch.setattr(files, "_OVERLAP_BYTES", 0)
  rng = np.random.default_rng(4)
  zero = np.frombuffer(_with_zero_crc(rng.bytes((1 << 16) - 4)), np.float32)
  other = rng.standard_normal(1 << 14, dtype=np.float32)
  closed = jax.make_jaxpr(lambda x: (x * zero).sum() + (x[:1 << 14] * other))(
      np.ones(1 << 14, np.float32))
  for pad in range(200):
    prog = jaxpr_io.Program(closed, *jaxpr_io.api.program._flat_trees(closed),
                            {"pad": "x" * pad})
    length = jaxpr_io.api.program.serialize(prog)[0].length()
    if (container.align(container.HEADER_SIZE + length - 5)
        != container.align(container.HEADER_SIZE + length)) == moves:
      break
  expected = jaxpr_io.dumps(prog)
  msg = jaxpr_io.format._proto.Program.FromString(
      container.Container(expected).program)
  assert sorted(blob.crc32 == 0 for blob in msg.blobs) == [False, True]
  truncations = []
  real_ftruncate = os.ftruncate
  monkeypatch.setattr(os, "ftruncate", lambda fd, n: (
      truncations.append(n), real_ftruncate(fd, n)))
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, prog)
  assert truncations == ([0] if moves else [])
  assert path.read_bytes() == expected
  x = np.ones(1 << 14, np.float32)
  np.testing.assert_array_equal(jaxpr_io.load(path)(x), prog(x))


def test_a_failed_write_stops_the_checksum_threads(tmp_path, monkeypatch):
  monkeypatch.setattr(files, "_OVERLAP_BYTES", 0)
  monkeypatch.setattr(crc, "CRC_SLICE", 1 << 16)
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, _small_program())
  original = path.read_bytes()
  def fail(*args):
    raise OSError("disk full")
  monkeypatch.setattr(os, "pwritev" if hasattr(os, "pwritev") else "writev",
                      fail)
  before = threading.active_count()
  with pytest.raises(OSError, match="disk full"):
    jaxpr_io.save(path, _program_with_many_blobs())
  assert threading.active_count() == before
  assert os.listdir(tmp_path) == ["p.jaxpr"]
  assert path.read_bytes() == original


# ---------------------------------------------------------- permission bits
@pytest.mark.parametrize("mode", ["default", "named"])
def test_permission_bits(tmp_path, monkeypatch, mode):
  if mode == "named":
    monkeypatch.delattr(os, "O_TMPFILE", raising=False)
  prog = _small_program()
  fresh = tmp_path / "fresh.jaxpr"
  jaxpr_io.save(fresh, prog)
  assert stat.S_IMODE(os.stat(fresh).st_mode) == files._FILE_MODE
  private = tmp_path / "private.jaxpr"
  private.write_bytes(b"old")
  os.chmod(private, 0o600)
  jaxpr_io.save(private, prog)
  assert stat.S_IMODE(os.stat(private).st_mode) == 0o600
  assert private.read_bytes() == jaxpr_io.dumps(prog)


@pytest.mark.parametrize("mode", ["default", "named"])
def test_a_failed_rename_leaves_the_old_file_and_no_temporary(
    tmp_path, monkeypatch, mode):
  if mode == "named":
    monkeypatch.delattr(os, "O_TMPFILE", raising=False)
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, _small_program())
  original = path.read_bytes()
  def crash(*args):
    raise OSError("disk full")
  monkeypatch.setattr(os, "replace", crash)
  with pytest.raises(OSError, match="disk full"):
    jaxpr_io.save(path, _small_program(3.0))
  assert os.listdir(tmp_path) == ["p.jaxpr"]
  assert path.read_bytes() == original
