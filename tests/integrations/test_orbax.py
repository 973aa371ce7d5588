"""Programs inside Orbax checkpoints: async saves of three steps restore to
programs that compute what the originals did on their steps' states, and a
save that fails midway leaves no half step behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pytest

import jaxpr_io
import jaxpr_io.orbax
from jaxpr_io.format import files


def _step_program(scale):
  # A program that differs per step (its constant), so mixing steps shows.
  bias = np.full((3,), scale, np.float32)

  def apply(state, x):
    return jnp.tanh(x @ state["w"] + state["b"] + bias)
  return apply


def _state(step):
  rng = np.random.RandomState(step)
  return {"w": jnp.asarray(rng.randn(4, 3).astype(np.float32)),
          "b": jnp.asarray(rng.randn(3).astype(np.float32))}


def _manager(path):
  return ocp.CheckpointManager(
      path, options=ocp.CheckpointManagerOptions(
          enable_async_checkpointing=True, max_to_keep=10))


X = np.random.RandomState(9).randn(2, 4).astype(np.float32)


def test_async_steps_restore_to_matching_programs(tmp_path):
  expected = {}
  with _manager(tmp_path) as mngr:
    for step in (1, 2, 3):
      state, apply = _state(step), _step_program(float(step))
      prog = jaxpr_io.trace(apply, state, X)
      expected[step] = np.asarray(apply(state, X))
      mngr.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state),
          program=jaxpr_io.orbax.ProgramSave(prog)))
    mngr.wait_until_finished()
    assert list(mngr.all_steps()) == [1, 2, 3]
  with _manager(tmp_path) as mngr:
    for step in (1, 2, 3):
      restored = mngr.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(_state(0)),
          program=jaxpr_io.orbax.ProgramRestore(check=True)))
      out = restored.program(restored.state, X)
      np.testing.assert_array_equal(np.asarray(out), expected[step])


def test_restore_in_a_process_without_the_model_code(tmp_path):
  state, apply = _state(5), _step_program(5.0)
  with _manager(tmp_path) as mngr:
    mngr.save(5, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        program=jaxpr_io.orbax.ProgramSave(jaxpr_io.trace(apply, state, X))))
    mngr.wait_until_finished()
  np.save(tmp_path / "x.npy", X)
  script = textwrap.dedent(f"""
      import numpy as np, orbax.checkpoint as ocp, jaxpr_io.orbax
      mngr = ocp.CheckpointManager({str(tmp_path)!r})
      step = mngr.latest_step()
      r = mngr.restore(step, args=ocp.args.Composite(
          state=ocp.args.StandardRestore(),
          program=jaxpr_io.orbax.ProgramRestore()))
      out = r.program(r.state, np.load({str(tmp_path / 'x.npy')!r}))
      np.save({str(tmp_path / 'out.npy')!r}, np.asarray(out))
  """)
  subprocess.run([sys.executable, "-c", script], check=True, timeout=300)
  np.testing.assert_array_equal(np.load(tmp_path / "out.npy"),
                                np.asarray(apply(state, X)))


def test_failed_save_leaves_earlier_steps_intact(tmp_path, monkeypatch):
  with _manager(tmp_path) as mngr:
    for step in (1, 2):
      state = _state(step)
      mngr.save(step, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state),
          program=jaxpr_io.orbax.ProgramSave(
              jaxpr_io.trace(_step_program(step), state, X))))
    mngr.wait_until_finished()

    def disk_full(*args, **kwargs):
      raise OSError("disk full while writing the program")
    monkeypatch.setattr(files, "write_file", disk_full)
    state = _state(3)
    with pytest.raises(Exception, match="disk full"):
      mngr.save(3, args=ocp.args.Composite(
          state=ocp.args.StandardSave(state),
          program=jaxpr_io.orbax.ProgramSave(
              jaxpr_io.trace(_step_program(3.0), state, X))))
      mngr.wait_until_finished()
    monkeypatch.undo()
  with _manager(tmp_path) as mngr:
    assert list(mngr.all_steps()) == [1, 2]
    restored = mngr.restore(2, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(_state(0)),
        program=jaxpr_io.orbax.ProgramRestore()))
    np.testing.assert_array_equal(
        np.asarray(restored.program(restored.state, X)),
        np.asarray(_step_program(2.0)(_state(2), X)))
