"""The README's tutorial runs as written: its `train.py` and each `$`
command of its `console` blocks, in order, in a fresh directory; each
command's output agrees with the output the README shows (the same lines;
numbers to float32 rounding, as another JAX release may train to other last
digits; version numbers aside), and TensorFlow's `saved_model_cli` computes
what JAX computed."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from tests.support import paths

pytest.importorskip("tensorflow")
pytest.importorskip("orbax.checkpoint")

README = Path(paths.ROOT) / "README.md"
BIN = os.path.dirname(sys.executable)
_BLOCK = re.compile(r"<!-- tutorial: (\S+) -->\n```\w+\n(.*?)```", re.DOTALL)
_FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
_VERSIONS = re.compile(r"jaxpr_io \S+, jax \S+, jaxlib [^)\s]+")


def _tutorial() -> tuple[str, list[tuple[str, list[str]]]]:
  """(train.py, [(command, expected output lines)]) of the README."""
  text = README.read_text()
  start = text.index("## Tutorial: from a training checkpoint")
  section = text[start:text.index("\n## ", start + 1)]
  train, commands = None, []
  for kind, body in _BLOCK.findall(section):
    if kind == "train.py":
      train = body
      continue
    assert kind == "run", kind
    for line in body.splitlines():
      if line.startswith("$ "):
        commands.append((line[2:], []))
      else:
        commands[-1][1].append(line)
  assert train and len(commands) >= 6
  return train, commands


def _shape(line: str) -> str:
  """A line without its numbers, versions and spacing."""
  line = _VERSIONS.sub("VERSIONS", line)
  # numpy pads numbers to a common width: spacing is not compared.
  return "".join(_FLOAT.sub("F", line).split())


def _numbers(lines) -> np.ndarray:
  return np.array([float(x) for l in lines for x in _FLOAT.findall(
      _VERSIONS.sub("", l))])


def _argv(command: str) -> list[str]:
  argv = shlex.split(command)
  if argv[0] == "python":
    argv[0] = sys.executable
  else:
    argv[0] = shutil.which(argv[0], path=BIN) or argv[0]
  return argv


def test_readme_tutorial_runs_as_written(tmp_path):
  train, commands = _tutorial()
  (tmp_path / "train.py").write_text(train)
  outputs = {}
  for command, expected in commands:
    proc = subprocess.run(_argv(command), capture_output=True, text=True,
                          cwd=tmp_path, timeout=600)
    assert proc.returncode == 0, (command, proc.stderr[-3000:])
    actual = proc.stdout.splitlines()
    outputs[command.split()[0] + " " + command.split()[1]] = actual
    assert [_shape(l) for l in actual] == [_shape(l) for l in expected], (
        command, proc.stdout)
    np.testing.assert_allclose(_numbers(actual), _numbers(expected),
                               rtol=1e-4, atol=1e-5, err_msg=command)
  # TensorFlow's answer is JAX's.
  jax_out = _numbers(outputs["python train.py"][2:])
  tf_out = _numbers(outputs["saved_model_cli run"][1:])
  np.testing.assert_allclose(tf_out, jax_out, rtol=1e-5, atol=1e-6)
  variables = tmp_path / "models" / "predict" / "1" / "variables"
  assert (variables / "variables.index").exists()
