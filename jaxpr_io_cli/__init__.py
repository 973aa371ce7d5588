"""The entry points of the console scripts `jaxpr-dump` and `jaxpr-load`.

They sit outside the `jaxpr_io` package so that a failure to import it (a
JAX release outside the supported range, a broken install) is reported as
the tools report every error, one line on stderr and exit status 1, not as
the traceback Python prints for an import error in a console script
(`--debug` shows it). Nothing else belongs here: the tools are
jaxpr_io/tools/.
"""

from __future__ import annotations

import importlib
import sys


def _run(tool: str, prog: str) -> int:
  try:
    module = importlib.import_module(f"jaxpr_io.tools.{tool}")
  except ImportError as e:
    if "--debug" in sys.argv[1:]:
      raise
    message = str(e).splitlines()[0] if str(e) else type(e).__name__
    print(f"{prog}: error: {message}", file=sys.stderr)
    return 1
  return module.main()


def dump() -> int:
  """`jaxpr-dump`."""
  return _run("dump", "jaxpr-dump")


def load() -> int:
  """`jaxpr-load`."""
  return _run("load", "jaxpr-load")
