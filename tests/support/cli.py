"""Running the installed console scripts in tests (tests/cli/)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

# The scripts of the venv running the tests, else whatever PATH finds.
BIN = os.path.dirname(sys.executable)
DUMP = shutil.which("jaxpr-dump", path=BIN) or "jaxpr-dump"
LOAD = shutil.which("jaxpr-load", path=BIN) or "jaxpr-load"


def run(*args, ok=True, cwd=None) -> subprocess.CompletedProcess:
  """Runs a command and captures its text; with `ok`, it must succeed."""
  proc = subprocess.run(list(args), capture_output=True, text=True,
                        timeout=300, cwd=cwd)
  if ok:
    assert proc.returncode == 0, proc.stderr
  return proc
