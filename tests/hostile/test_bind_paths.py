"""Bind sources that name files outside the directory the user gave
(issue 38): an absolute or `..` key in an Orbax `_METADATA`, a URL key, a
chunk or array directory that links out of the checkpoint, an OCDBT data
file that does, a FIFO, `.npz` members named as paths, and
`jaxpr_io.orbax.ProgramRestore` reading a program or an item through a link
out of the step.

Each checkpoint is written by orbax-checkpoint, then tampered with at the
filesystem level. A "secret" file beside it stands for `~/.ssh/id_ed25519`,
and a second checkpoint for the user's other private weights. Each case
runs `jaxpr-load --bind ... --save` in a process under the address-space
limit of tests/hostile/test_hostile_io.py and must end in one line naming
the path, with neither the secret nor the private weights in the output
or in any saved file (jaxpr_io/api/source_paths.py refuses them before
Orbax reads anything). A checkpoint whose links stay inside it still binds,
as `tarfile`'s `data` filter keeps links inside the destination.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil

import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.api import bind_sources
from jaxpr_io.api import source_paths
from tests.hostile.test_hostile_io import (_CLI_CHILD, W, assert_within,
                                           budget_mib, npz_member,
                                           predict_file, run_limited, write,
                                           zip_archive)

ocp = pytest.importorskip("orbax.checkpoint")
pytestmark = pytest.mark.once

# 48 bytes: a float32[4, 3] chunk stored raw, as the tampered array
# declares, would be exactly this file.
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r"
PRIVATE = (np.arange(12, dtype=np.float32).reshape(4, 3) + 1000.25)


def _save(where: pathlib.Path, tree, ocdbt: bool) -> pathlib.Path:
  """An item `where/1/state` of `tree`, written by Orbax."""
  with ocp.CheckpointManager(where, item_handlers={
      "state": ocp.PyTreeCheckpointHandler(use_ocdbt=ocdbt,
                                           use_zarr3=False)}) as mngr:
    mngr.save(1, args=ocp.args.Composite(state=ocp.args.PyTreeSave(tree)))
    mngr.wait_until_finished()
  return where / "1" / "state"


def _rekey(item: pathlib.Path, old: str, new: str) -> None:
  """Renames key `old` of the item's `_METADATA` tree to `new`."""
  path = item / "_METADATA"
  meta = json.loads(path.read_text())
  tree = {}
  for name, entry in meta["tree_metadata"].items():
    keys = [k["key"] for k in entry["key_metadata"]]
    for k in entry["key_metadata"]:
      if k["key"] == old:
        k["key"] = new
    tree[str(tuple(new if k == old else k for k in keys))] = entry
  meta["tree_metadata"] = tree
  path.write_text(json.dumps(meta))


def _link(path: pathlib.Path, target) -> None:
  if path.is_dir() and not path.is_symlink():
    shutil.rmtree(path)
  else:
    path.unlink()
  path.symlink_to(target)


@pytest.fixture(scope="module")
def world(tmp_path_factory):
  """The secret, the user's other checkpoint, and a fresh copy of a
  benign checkpoint per case (`world["copy"](name, ocdbt)`)."""
  root = tmp_path_factory.mktemp("bind_paths")
  (root / "id_ed25519").write_bytes(SECRET)
  other = _save(root / "other", {"params": {"w": PRIVATE}}, ocdbt=False)
  originals = {o: _save(root / f"orig{int(o)}", {"params": {"w": W}}, o)
               for o in (False, True)}
  write(root / "predict.jaxpr", predict_file())

  def copy(name: str, ocdbt: bool = False) -> pathlib.Path:
    dest = root / name / "1" / "state"
    shutil.copytree(originals[ocdbt], dest, symlinks=True)
    return dest
  return {"root": root, "secret": root / "id_ed25519", "other": other,
          "copy": copy}


def _tampered(world) -> dict[str, tuple[pathlib.Path, str]]:
  """name -> (item to bind, what the error must name)."""
  root, other, copy = world["root"], world["other"], world["copy"]
  cases = {}
  item = copy("absolute")
  _rekey(item, "params", str(other / "params"))
  cases["absolute key"] = (item, str(other / "params"))
  item = copy("dotdot")
  _rekey(item, "params", "../../../other/1/state/params")
  cases["'..' key"] = (item, "../../../other")
  item = copy("url")
  _rekey(item, "params", "gs://bucket/ckpt/params")
  cases["URL key"] = (item, "gs://bucket")
  item = copy("chunk")
  zarray = json.loads((item / "params.w" / ".zarray").read_text())
  zarray["compressor"] = None  # the chunk read raw: the secret's bytes
  (item / "params.w" / ".zarray").write_text(json.dumps(zarray))
  _link(item / "params.w" / "0.0", world["secret"])
  cases["chunk link"] = (item, "params.w/0.0")
  item = copy("dir")
  _link(item / "params.w", other / "params.w")
  cases["directory link"] = (item, "params.w")
  item = copy("ocdbt", ocdbt=True)
  (data,) = (item / "d").iterdir()
  _link(data, world["secret"])
  cases["OCDBT data file link"] = (item, f"d/{data.name}")
  item = copy("fifo")
  (item / "params.w" / "0.0").unlink()
  os.mkfifo(item / "params.w" / "0.0")
  cases["FIFO"] = (item, "params.w/0.0")
  item = copy("dangling")
  _link(item / "params.w" / "0.0", item / "missing")
  cases["dangling link"] = (item, "does not exist")
  return cases


def _assert_nothing_leaked(world, child, out_dir: pathlib.Path) -> None:
  secret_text = SECRET[:30].decode()
  private = [f"{v:g}" for v in PRIVATE.ravel()[:4]]
  for text in (child.out, child.err):
    assert secret_text not in text and "b3BlbnNzaC1rZXkt" not in text
    assert not any(p in text for p in private), text
  for path in out_dir.rglob("*"):
    if path.is_file() and not path.is_symlink():
      data = path.read_bytes()
      assert SECRET[:16] not in data and PRIVATE.tobytes()[:16] not in data


def _bind_each(root: pathlib.Path, cases: dict, out: pathlib.Path):
  """(child, its one-line results) of `jaxpr-load --bind 0=ITEM:params`
  of predict.jaxpr for each case's item, saving into `out`, in one
  process under the address-space limit."""
  out.mkdir()
  runs = [f"{root}/predict.jaxpr|--bind|0={item}:params|-o|"
          f"{out}/{i}.jaxpr" for i, (item, _) in enumerate(cases.values())]
  child = run_limited(_CLI_CHILD, *runs)
  results = child.lines("RC:")
  assert len(results) == len(cases), str(child)
  return child, results


def test_bind_sources_read_nothing_outside_the_named_checkpoint(world):
  root = world["root"]
  cases = _tampered(world)
  out = root / "out"
  child, results = _bind_each(root, cases, out)
  for (name, (item, named)), result in zip(cases.items(), results):
    assert re.fullmatch(r"1 jaxpr-load: error: UnsafeSourceError: .*",
                        result), (name, result)
    assert named in result and "\n" not in result, (name, result)
  assert not list(out.iterdir()), list(out.iterdir())  # nothing saved
  _assert_nothing_leaked(world, child, out)
  assert_within(child, budget_mib(len(predict_file())))


def test_links_inside_the_checkpoint_still_bind(world, tmp_path):
  """A chunk moved to a folder of the checkpoint and linked from its
  place, relatively, binds and runs as the original; so does the default
  (OCDBT) format, and an item reached through a link the user names."""
  item = world["copy"]("inside")
  (item / "blobs").mkdir()
  shutil.move(item / "params.w" / "0.0", item / "blobs" / "chunk")
  (item / "params.w" / "0.0").symlink_to(os.path.join("..", "blobs",
                                                      "chunk"))
  ocdbt = world["copy"]("inside_ocdbt", ocdbt=True)
  named = tmp_path / "named"
  named.symlink_to(item)
  x = np.ones((2, 4), np.float32)
  prog = jaxpr_io.loads(predict_file())
  for source in (item, ocdbt, named):
    served = prog.bind(bind_sources.load_source(f"{source}:params"))
    np.testing.assert_allclose(served(x), x @ W, rtol=1e-6)
  # The size charged counts a link at its target's size.
  assert source_paths.check_tree(str(item)) >= 2 * (
      item / "blobs" / "chunk").stat().st_size


def test_npz_members_named_as_paths_are_refused(tmp_path):
  for i, name in enumerate(["../args[0]['w']", "/etc/args[0]['w']",
                            "sub\\..\\args[0]['w']"]):
    path = write(tmp_path / f"bad{i}.npz",
                 zip_archive([npz_member(name, W)]))
    with pytest.raises(source_paths.UnsafeSourceError,
                       match=r"member .* is named as a path"):
      bind_sources.load_source(path)
  # A dict key may hold '/' and '..' (Haiku names its modules 'mlp/~/0').
  ok = write(tmp_path / "ok.npz", zip_archive([
      npz_member("args[0]['mlp/~/../0']", W)]))
  assert set(bind_sources.load_source(ok)) == {"args[0]['mlp/~/../0']"}


def test_program_restore_reads_only_inside_the_step(world, tmp_path):
  import jaxpr_io.orbax  # pylint: disable=g-import-not-at-top
  prog = jaxpr_io.trace(lambda params, x: x @ params["w"], {"w": W},
                        np.ones((2, 4), np.float32))
  state = {"params": {"w": W}}
  with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
    mngr.save(1, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        program=jaxpr_io.orbax.ProgramSave(prog)))
    mngr.wait_until_finished()
  step = tmp_path / "ckpt" / "1"

  def restore():
    with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
      return mngr.restore(1, args=ocp.args.Composite(
          program=jaxpr_io.orbax.ProgramRestore(bind={0: "state:params"})))
  x = np.ones((2, 4), np.float32)
  np.testing.assert_allclose(restore().program(x), x @ W, rtol=1e-6)
  # The item `state` linked to the user's other checkpoint.
  shutil.move(step / "state", tmp_path / "state_moved")
  (step / "state").symlink_to(world["other"])
  with pytest.raises(source_paths.UnsafeSourceError, match="outside the "
                     "checkpoint step"):
    restore()
  (step / "state").unlink()
  shutil.move(tmp_path / "state_moved", step / "state")
  # The program file linked to the secret.
  (step / "program" / "program.jaxpr").unlink()
  (step / "program" / "program.jaxpr").symlink_to(world["secret"])
  with pytest.raises(source_paths.UnsafeSourceError,
                     match="program.jaxpr resolves to .*outside"):
    restore()


def test_chunks_a_zarray_declares_are_charged_before_orbax_reads(world):
  """Fuzz case 5616 (seed 1): a `.zarray` declaring chunks of 2**30 x 2**30
  for the 4 x 3 array made TensorStore allocate one chunk of 2**60 floats
  inside Orbax's restore, and the process aborted (`std::bad_alloc`).
  The chunks are charged with the array against the source's limit, so
  the CLI ends in one line, within its budget; damaged chunk shapes are
  refused in one line too. Both checkpoint formats still bind."""
  root = world["root"]
  cases = {}
  for name, chunks, named in [
      ("huge chunks", [1 << 30, 1 << 30], "chunks their storage declares"),
      # TensorStore itself refuses these when Orbax reads the metadata.
      ("zero chunk", [0, 3], "cannot read its metadata"),
      ("short chunks", [4], "cannot read its metadata")]:
    item = world["copy"](name.replace(" ", "_"))
    zarray = json.loads((item / "params.w" / ".zarray").read_text())
    zarray["chunks"] = chunks
    (item / "params.w" / ".zarray").write_text(json.dumps(zarray))
    cases[name] = (item, named)
  out = root / "out_chunks"
  child, results = _bind_each(root, cases, out)
  for (name, (item, named)), result in zip(cases.items(), results):
    assert re.fullmatch(r"1 jaxpr-load: error: SourceError: .*", result), (
        name, result)
    assert named in result and str(item) in result, (name, result)
  assert not list(out.iterdir()), list(out.iterdir())
  assert_within(child, budget_mib(len(predict_file())))
  # What is charged: the array and the chunk grid covering it.
  leaf = bind_sources.load_source(f"{cases['huge chunks'][0]}:params")["w"]
  assert leaf.read_bytes == W.nbytes + (1 << 60) * 4
  x = np.ones((2, 4), np.float32)
  for ocdbt in (False, True):
    item = world["copy"](f"chunked{int(ocdbt)}", ocdbt=ocdbt)
    source = bind_sources.load_source(f"{item}:params")
    assert source["w"].read_bytes == 2 * W.nbytes, source["w"].chunks
    served = jaxpr_io.loads(predict_file()).bind(source)
    np.testing.assert_allclose(served(x), x @ W, rtol=1e-6)
  # An Orbax release that reports chunks without validating them.
  with pytest.raises(bind_sources.SourceError, match=r"declares chunks "
                     r"\(0, 3\) for an array of shape \[4, 3\]"):
    _ = bind_sources._OrbaxLeaf(source["w"].source, ("w",), W.shape, W.dtype,  # pylint: disable=protected-access
                                (0, 3)).read_bytes
