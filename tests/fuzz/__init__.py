"""A format-aware fuzzer for jaxpr_io files (see tests/fuzz/README.md).

    python -m tests.fuzz --cases 3000 --seed 0 --workers 2 --out /tmp/fuzz-out

Modules: `seeds` (small real programs, dumped with jaxpr_io), `mutate`
(field-level edits of a file's `Program` message, checksums fixed
afterwards), `worker` (a subprocess that loads, checks, prints, re-dumps and
calls one case at a time) and `runner` (the campaign: a pool of workers,
timeouts, crash detection, the summary and failure clusters).

Sharded seeds need 8 host CPU devices: the flag is set here, before JAX is
imported (as tests/conftest.py does for pytest).
"""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                             _FLAG).strip()
