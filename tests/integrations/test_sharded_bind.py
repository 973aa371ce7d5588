"""Sharded binding on several hosts (issue 40): weights sharded over the 8
devices of a 2-process job (2 x 4 CPU devices, gloo) are saved with Orbax
beside a program of them; a fresh 2-process job loads the program and binds
the weights on every process, each process reading only its own shards.

The jobs are tests/integrations/sharded_bind_job.py (its doc says what
each does), run as tests/integrations/test_multiprocess.py runs its own.

What each process read while binding is measured twice, during a second
bind (the first imports what the restore imports lazily): `rchar` of
/proc/self/io, every byte read() and pread() returned to the process (page
cache included: a cached file counts as read), and TensorStore's own
count of the bytes its file driver read. Both must stay within the bytes
of the shards the process's devices hold, plus the checkpoint's metadata;
with random weights, Orbax's compression saves almost nothing, so reading
the other process's shards too would exceed that by half the checkpoint.
"""

from __future__ import annotations

import json
import os

import numpy as np

from tests.integrations.test_multiprocess import run_job

MODULE = "sharded_bind_job"
# The checkpoint's metadata (_METADATA, _sharding, array_metadatas, OCDBT
# manifests and b-tree nodes) and the program file: a few kB here; a read
# of the other process's shards would be 4 MiB.
METADATA_ALLOWANCE = 256 << 10
WAYS = ("bind_source", "program_restore", "bind_given", "bind_arrays",
        "exported")


def _checkpoint_bytes(root: str) -> int:
  return sum(os.path.getsize(os.path.join(parent, name))
             for parent, _, names in os.walk(root) for name in names)


def test_each_process_binds_only_its_own_shards(tmp_path):
  outdir = str(tmp_path)
  run_job("save", outdir, module=MODULE, devices=4)
  run_job("load", outdir, module=MODULE, devices=4)
  on_disk = _checkpoint_bytes(os.path.join(outdir, "ckpt", "1", "state"))
  for i in range(2):
    original = np.load(os.path.join(outdir, f"save-{i}.npz"))
    loaded = np.load(os.path.join(outdir, f"load-{i}.npz"))
    for way in WAYS:
      source = "plain" if way == "bind_given" else "served"
      for key in ("out", "grad"):
        # Bit-identical: the same program on the same devices and XLA.
        np.testing.assert_array_equal(
            loaded[f"{way}/{key}"], original[f"{source}/{key}"],
            err_msg=f"process {i}, {way}: {key}")
    assert np.any(original["served/grad"] != 0)
    with open(os.path.join(outdir, f"load-{i}.json")) as f:
      reads = json.load(f)
    assert "Orbax" in reads["dumps_refused"]
    assert "export the program unbound" in reads["export_refused"]
    for way in WAYS[:3]:
      read = reads[way]
      # Half the weights are this process's; the test means something only
      # if reading all of them would break the bound.
      assert read["own"] * 2 == read["global"]
      assert read["own"] + METADATA_ALLOWANCE < on_disk
      for counter in ("rchar", "tensorstore"):
        assert read[counter] <= read["own"] + METADATA_ALLOWANCE, (
            f"process {i}, {way}: {counter} {read[counter]:,} bytes, over "
            f"its shards' {read['own']:,} + {METADATA_ALLOWANCE:,} (the "
            f"checkpoint: {on_disk:,} bytes on disk)")
      # The counters see the reads (a counter that stays 0 proves nothing).
      assert read["tensorstore"] > read["own"] // 2
      assert read["rchar"] >= read["tensorstore"]
