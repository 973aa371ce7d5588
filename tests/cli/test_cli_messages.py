"""The console scripts' own messages where a new user stumbles (issue 27):
no Orbax warning on --bind, the JAX-range ImportError as one line, and
--to-exported of a program whose signature holds Equinox modules."""

from __future__ import annotations

import importlib.metadata
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import jaxpr_io
from tests.support.cli import LOAD
from tests.support.cli import run as _run

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once




def _dense(params, x):
  return jax.numpy.tanh(x @ params["w"] + params["b"])


def test_bind_from_orbax_prints_no_orbax_warning(tmp_path):
  ocp = pytest.importorskip("orbax.checkpoint")
  params = {"w": np.full((4, 3), 0.5, np.float32),
            "b": np.arange(3, dtype=np.float32)}
  x = np.ones((2, 4), np.float32)
  jaxpr_io.save(tmp_path / "dense.jaxpr", jaxpr_io.trace(_dense, params, x))
  with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
    mngr.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave(
        {"params": params})))
    mngr.wait_until_finished()
  np.savez(tmp_path / "x.npz", arg0=x)
  proc = _run(LOAD, "dense.jaxpr", "--bind", "0=ckpt/1/state:params",
              "--run", "x.npz", "--out", "out.npz", cwd=tmp_path)
  # The restore did read the checkpoint's shardings (the warning's case),
  # and stderr has only the tool's progress lines.
  assert "Sharding info" not in proc.stderr, proc.stderr
  assert all(line.startswith("jaxpr-load: ")
             for line in proc.stderr.splitlines()), proc.stderr
  np.testing.assert_allclose(np.load(tmp_path / "out.npz")["out0"],
                             _dense(params, x), rtol=1e-6)


# Imports the console script's entry point as the installed script does,
# with the JAX release the version check sees set outside the range.
_OLD_JAX = textwrap.dedent("""
    import sys
    import jax
    jax.__version__ = "0.9.0"
    sys.argv = ["jaxpr-load", "model.jaxpr"] + sys.argv[1:]
    import jaxpr_io_cli
    sys.exit(jaxpr_io_cli.load())
""")


def test_jax_outside_the_supported_range_is_one_line():
  proc = subprocess.run([sys.executable, "-c", _OLD_JAX], capture_output=True,
                        text=True, timeout=300)
  assert proc.returncode == 1
  assert proc.stderr.splitlines() == [
      "jaxpr-load: error: jaxpr_io supports jax >=0.10.2,<0.13; this is jax "
      "0.9.0. Upgrade with: pip install -U jax"], proc.stderr
  # --debug shows the traceback.
  debug = subprocess.run([sys.executable, "-c", _OLD_JAX, "--debug"],
                         capture_output=True, text=True, timeout=300)
  assert "Traceback" in debug.stderr and debug.returncode == 1


def test_the_installed_scripts_use_that_entry_point():
  scripts = {e.name: e.value
             for e in importlib.metadata.entry_points(group="console_scripts")
             if e.name in ("jaxpr-dump", "jaxpr-load")}
  assert scripts == {"jaxpr-dump": "jaxpr_io_cli:dump",
                     "jaxpr-load": "jaxpr_io_cli:load"}


def test_to_exported_of_an_equinox_program_without_bind(tmp_path):
  eqx = pytest.importorskip("equinox")
  model = eqx.nn.MLP(3, 2, 8, 2, key=jax.random.key(0))
  x = np.linspace(-1, 1, 3, dtype=np.float32)

  def apply(model, x):
    return model(x)
  prog = jaxpr_io.trace(apply, model, x)
  jaxpr_io.save(tmp_path / "mlp.jaxpr", prog)
  proc = _run(LOAD, "mlp.jaxpr", "--to-exported", "mlp.exported",
              cwd=tmp_path)
  notes = [l for l in proc.stderr.splitlines() if ": note: " in l]
  assert len(notes) == 1 and "equinox" in notes[0] and "arg0" in notes[0]
  exported = jax.export.deserialize((tmp_path / "mlp.exported").read_bytes())
  leaves = jax.tree_util.tree_leaves(eqx.filter(model, eqx.is_array))
  out = exported.call(*leaves, x)
  np.testing.assert_allclose(out[0], model(x), rtol=1e-5, atol=1e-6)
