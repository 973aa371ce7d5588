"""`python -m jaxpr_io` works from a checkout that was never installed: the
tools and converters are modules of the package, not folders that only an
installation maps into it."""

from __future__ import annotations

import pytest
import os
import shutil
import subprocess
import sys

import jax.numpy as jnp
import numpy as np

import jaxpr_io
from tests.support import paths

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once


def _checkout_python(tmp_path, *args):
  """Runs `python *args` with only a copy of the package on the path, in a
  directory that holds that copy (as a fresh clone of the repository)."""
  if not (tmp_path / "jaxpr_io").exists():
    shutil.copytree(os.path.join(paths.ROOT, "jaxpr_io"),
                    tmp_path / "jaxpr_io",
                    ignore=shutil.ignore_patterns("__pycache__"))
  env = dict(os.environ, PYTHONPATH=str(tmp_path))
  return subprocess.run([sys.executable, *args], cwd=tmp_path, env=env,
                        capture_output=True, text=True, timeout=300,
                        check=False)


def test_python_m_jaxpr_io_runs_from_a_checkout(tmp_path):
  where = _checkout_python(tmp_path, "-c",
                           "import jaxpr_io.tools, jaxpr_io.converters; "
                           "print(jaxpr_io.tools.__file__)")
  assert where.returncode == 0, where.stderr
  assert where.stdout.strip().startswith(str(tmp_path / "jaxpr_io"))
  (tmp_path / "model.py").write_text(
      "import jax.numpy as jnp\n\ndef f(x):\n  return jnp.sin(x) * 2.0\n")
  dump = _checkout_python(tmp_path, "-m", "jaxpr_io", "dump", "model.py:f",
                          "--args", "f32[3]", "-o", "f.jaxpr")
  assert dump.returncode == 0, dump.stderr
  prog = jaxpr_io.load(tmp_path / "f.jaxpr")
  x = np.linspace(0, 1, 3, dtype=np.float32)
  np.testing.assert_allclose(prog(x), jnp.sin(x) * 2.0, rtol=1e-6)
  load = _checkout_python(tmp_path, "-m", "jaxpr_io", "load", "f.jaxpr",
                          "--text")
  assert load.returncode == 0, load.stderr
  assert "sin" in load.stdout
  usage = _checkout_python(tmp_path, "-m", "jaxpr_io")
  assert usage.returncode == 2 and "dump,load" in usage.stderr
