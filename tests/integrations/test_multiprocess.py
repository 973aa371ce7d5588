"""Several processes: a sharded train step traced in a 2-process JAX job
(`jax.distributed` on CPU, gloo collectives, a global mesh over 2 x 2
devices) and saved by process 0 loads in a fresh 2-process job, where `jit`
and `grad` compute in both processes exactly what the original did.

Each job is tests/integrations/multiprocess_job.py started twice with a
coordinator on a free local port; every process has a timeout, and a
failure shows what each process printed.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

from tests.support import paths

# Per job: both processes start JAX, meet at the coordinator, compile and
# run a small program (a few seconds each on an idle machine).
JOB_TIMEOUT_S = 120


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _env(devices: int) -> dict[str, str]:
  env = dict(os.environ)
  # `devices` CPU devices per process (the test session itself has 8).
  flags = [f for f in env.get("XLA_FLAGS", "").split()
           if not f.startswith("--xla_force_host_platform_device_count")]
  env["XLA_FLAGS"] = " ".join(
      flags + [f"--xla_force_host_platform_device_count={devices}"])
  env["JAX_PLATFORMS"] = "cpu"
  env["PYTHONPATH"] = os.pathsep.join(
      [paths.ROOT] + [p for p in [env.get("PYTHONPATH")] if p])
  return env


def run_job(role: str, outdir: str, module: str = "multiprocess_job",
            devices: int = 2) -> None:
  """Runs the 2 processes of one job (tests.integrations.`module`, with
  `devices` CPU devices each); fails with their output unless both
  finish in time and print "done". When one fails, the other (which would
  wait for it) is stopped at once."""
  port = _free_port()
  logs = [open(os.path.join(outdir, f"{role}-{i}.log"), "w+")
          for i in range(2)]
  procs = [subprocess.Popen(
      [sys.executable, "-m", f"tests.integrations.{module}", role,
       str(i), str(port), outdir],
      cwd=paths.ROOT, env=_env(devices), stdout=log,
      stderr=subprocess.STDOUT)
           for i, log in enumerate(logs)]
  deadline = time.monotonic() + JOB_TIMEOUT_S
  problems = []
  while any(p.poll() is None for p in procs):
    failed = [i for i, p in enumerate(procs) if p.poll() not in (None, 0)]
    if failed or time.monotonic() > deadline:
      problems.append(f"process {failed[0]} exited with "
                      f"{procs[failed[0]].returncode}" if failed else
                      f"the job did not finish in {JOB_TIMEOUT_S} s")
      for p in procs:
        if p.poll() is None:
          p.kill()
      break
    time.sleep(0.1)
  outputs = []
  for i, (proc, log) in enumerate(zip(procs, logs)):
    proc.wait()
    log.seek(0)
    outputs.append(log.read())
    log.close()
    if not problems and (proc.returncode != 0
                         or "done" not in outputs[i].splitlines()[-1:]):
      problems.append(f"process {i} exited with {proc.returncode} without "
                      "finishing its work")
  if problems:
    shown = "\n".join(f"--- process {i} of the {role} job ---\n{o[-4000:]}"
                      for i, o in enumerate(outputs))
    pytest.fail(f"{role} job: {'; '.join(problems)}\n{shown}")


def test_two_process_job_saves_and_a_fresh_job_loads(tmp_path):
  outdir = str(tmp_path)
  run_job("trace", outdir)
  assert os.path.exists(os.path.join(outdir, "step.jaxpr"))
  run_job("load", outdir)
  for i in range(2):
    original = np.load(os.path.join(outdir, f"trace-{i}.npz"))
    loaded = np.load(os.path.join(outdir, f"load-{i}.npz"))
    assert set(original) == set(loaded) == {"new_w", "loss", "grad"}
    for key in original:
      # Bit-identical: the same program on the same devices and XLA.
      np.testing.assert_array_equal(loaded[key], original[key],
                                    err_msg=f"process {i}: {key}")
    assert np.all(np.isfinite(original["grad"])) and np.any(
        original["grad"] != 0)
