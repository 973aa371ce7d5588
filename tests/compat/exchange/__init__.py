"""Cross-release exchange test: files written under one JAX release are
loaded and run under every other one.

    python -m tests.compat.exchange.write OUTDIR   # under each release's Python
    python -m tests.compat.exchange.read OUTDIR    # under each release's Python
    python -m tests.compat.exchange.table OUTDIR   # writer x reader table; exit 1
                                            # on an unexpected failure

`tests/compat/exchange/run_all.sh` runs the whole exchange ($PY010, $PY011, $PY012).
Layout of OUTDIR:

    OUTDIR/<jax version>/manifest.json       what the writer wrote, and why
                                             some cases could not be written
    OUTDIR/<jax version>/<case>.jaxpr        the program
    OUTDIR/<jax version>/<case>.npz          inputs and the writer's results
    OUTDIR/results-<jax version>.json        one reader's verdict per case

Every module of this package sets the 8 host CPU devices that the sharded
cases need: importing the package sets XLA_FLAGS, which JAX reads when it
creates its backends (lazily, on first use), so the flag takes effect unless
the importing process already ran a JAX computation.
"""

import os

# Full tracebacks in the recorded errors: a failure's innermost frames
# (inside jaxpr_io or JAX) are what points to the bug.
os.environ.setdefault("JAX_TRACEBACK_FILTERING", "off")

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                             _FLAG).strip()
