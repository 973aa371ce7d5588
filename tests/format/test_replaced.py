"""`files.replaced_file` and `files.replaced_directory`: the converters'
artifacts take their path only when their block succeeds (issue 38), with
the old artifact kept and no temporary left otherwise.

The converters and the CLI on real artifacts: tests/hostile/test_hostile_cli.py
(a mismatching model, a violated constraint, a file-size limit halfway
through each of the four conversions).
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys

import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.format import files

pytestmark = pytest.mark.once


class Boom(Exception):
  pass


def _temporaries(directory) -> list[str]:
  return sorted(n for n in os.listdir(directory) if ".jaxpr_io-" in n)


def test_a_file_takes_its_path_only_when_the_block_succeeds(tmp_path):
  path = tmp_path / "m.onnx"
  path.write_bytes(b"old")
  os.chmod(path, 0o640)
  with pytest.raises(Boom):
    with files.replaced_file(path) as tmp:
      assert os.path.dirname(tmp) == str(tmp_path)
      with open(tmp, "wb") as f:
        f.write(b"half")
      raise Boom
  assert path.read_bytes() == b"old" and os.listdir(tmp_path) == ["m.onnx"]
  with files.replaced_file(path) as tmp:
    with open(tmp, "wb") as f:
      f.write(b"new")
    assert path.read_bytes() == b"old"  # not until the block returns
  assert path.read_bytes() == b"new" and os.listdir(tmp_path) == ["m.onnx"]
  # The permission bits of the file it replaced; a new one the umask's.
  assert stat.S_IMODE(os.stat(path).st_mode) == 0o640
  with files.replaced_file(tmp_path / "fresh") as tmp:
    open(tmp, "wb").close()
  assert stat.S_IMODE(os.stat(tmp_path / "fresh").st_mode) == (
      files._FILE_MODE)  # pylint: disable=protected-access


def test_a_block_that_writes_nothing_fails_and_leaves_nothing(tmp_path):
  with pytest.raises(FileNotFoundError):
    with files.replaced_file(tmp_path / "m.onnx"):
      pass
  assert os.listdir(tmp_path) == []


def test_paths_that_cannot_be_replaced_are_refused_first(tmp_path):
  (tmp_path / "d").mkdir()
  (tmp_path / "f").write_bytes(b"x")
  with pytest.raises(IsADirectoryError, match="is a directory"):
    with files.replaced_file(tmp_path / "d"):
      pytest.fail("the block ran")
  with pytest.raises(NotADirectoryError, match="not a directory"):
    with files.replaced_directory(tmp_path / "f"):
      pytest.fail("the block ran")
  with pytest.raises(FileNotFoundError, match="no such directory"):
    with files.replaced_file(tmp_path / "missing" / "m.onnx"):
      pytest.fail("the block ran")
  assert sorted(os.listdir(tmp_path)) == ["d", "f"]


@pytest.mark.parametrize("exchange", [True, False],
                         ids=["renameat2", "two renames"])
def test_a_directory_is_replaced_as_a_whole(tmp_path, monkeypatch, exchange):
  if not exchange:
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
  sm = tmp_path / "sm"
  sm.mkdir()
  (sm / "saved_model.pb").write_bytes(b"old")
  (sm / "variables").mkdir()
  (sm / "variables" / "old.index").write_bytes(b"old")
  with pytest.raises(Boom):
    with files.replaced_directory(sm) as tmp:
      assert os.listdir(tmp) == []
      (sm.parent / tmp / "saved_model.pb").write_bytes(b"half")
      raise Boom
  assert (sm / "saved_model.pb").read_bytes() == b"old"
  assert os.listdir(tmp_path) == ["sm"]
  with files.replaced_directory(sm) as tmp:
    with open(os.path.join(tmp, "saved_model.pb"), "wb") as f:
      f.write(b"new")
  assert os.listdir(sm) == ["saved_model.pb"]  # old entries gone
  assert (sm / "saved_model.pb").read_bytes() == b"new"
  assert os.listdir(tmp_path) == ["sm"]
  # A missing or empty directory is renamed over in one step.
  for name in ("new", "empty"):
    if name == "empty":
      (tmp_path / name).mkdir()
    with files.replaced_directory(tmp_path / name) as tmp:
      with open(os.path.join(tmp, "x"), "wb") as f:
        f.write(b"1")
    assert os.listdir(tmp_path / name) == ["x"]
  assert _temporaries(tmp_path) == []


def test_a_symlink_to_a_directory_replaces_the_directory(tmp_path):
  (tmp_path / "real").mkdir()
  (tmp_path / "real" / "old").write_bytes(b"x")
  os.symlink(tmp_path / "real", tmp_path / "link")
  with files.replaced_directory(tmp_path / "link") as tmp:
    with open(os.path.join(tmp, "new"), "wb") as f:
      f.write(b"y")
  assert os.path.islink(tmp_path / "link")
  assert os.listdir(tmp_path / "real") == ["new"]


@pytest.mark.skipif(not sys.platform.startswith("linux"),
                    reason="temporaries name the pid of this host")
def test_temporaries_of_dead_processes_are_removed(tmp_path):
  """A process killed while it built an artifact leaves its temporary
  (a file, or a directory tree): the next conversion removes it."""
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True)
  pid = int(dead.stdout)
  token = files._host_token()  # pylint: disable=protected-access
  stale_file = tmp_path / f".m.onnx.jaxpr_io-{token}-{pid}-00ff.tmp"
  stale_file.write_bytes(b"half")
  stale_dir = tmp_path / f".sm.jaxpr_io-{token}-{pid}-00ff.tmp"
  (stale_dir / "variables").mkdir(parents=True)
  (stale_dir / "variables" / "v").write_bytes(b"half")
  mine = tmp_path / f".sm.jaxpr_io-{token}-{os.getpid()}-00ee.tmp"
  mine.mkdir()  # this process's: another thread may be building it
  with files.replaced_file(tmp_path / "m.onnx") as tmp:
    open(tmp, "wb").close()
  with files.replaced_directory(tmp_path / "sm"):
    pass
  assert _temporaries(tmp_path) == [mine.name]


def test_load_can_read_instead_of_mapping(tmp_path):
  path = tmp_path / "p.jaxpr"
  w = np.arange(4096, dtype=np.float32)
  jaxpr_io.save(path, jaxpr_io.trace(lambda x: x * w, w))
  prog = jaxpr_io.load(path, mapped=False)
  os.truncate(path, 0)  # would be SIGBUS for a mapped program
  np.testing.assert_array_equal(np.asarray(prog(w)), w * w)
  with pytest.raises(jaxpr_io.FormatError, match="the file is empty"):
    jaxpr_io.load(path, mapped=False)
