"""What both command-line tools share: error reporting and progress."""

from __future__ import annotations

import sys
import time
from typing import Callable, Sequence

from jaxpr_io.errors import JaxprIoError


class CliError(Exception):
  """A user error: printed as one line, exit status 2."""


def stage(prog: str, what: str):
  """Context manager printing `what ...` and its duration to stderr, so long
  traces, writes and conversions show progress."""
  class _Stage:
    def __enter__(self):
      self.start = time.perf_counter()
      print(f"{prog}: {what} ...", file=sys.stderr, flush=True)

    def __exit__(self, exc_type, exc, tb):
      if exc_type is None:
        print(f"{prog}: {what} done in "
              f"{time.perf_counter() - self.start:.2f}s", file=sys.stderr,
              flush=True)
  return _Stage()


def run_main(prog: str, body: Callable[[Sequence[str]], int],
             argv: Sequence[str] | None) -> int:
  """Runs `body(argv)`; errors become one line on stderr and exit status 1
  (a bad file or program) or 2 (bad usage), with a traceback only under
  --debug."""
  argv = list(sys.argv[1:] if argv is None else argv)
  debug = "--debug" in argv
  try:
    return body(argv)
  except (CliError, FileNotFoundError, IsADirectoryError,
          PermissionError) as e:
    if debug:
      raise
    print(f"{prog}: error: {e}", file=sys.stderr)
    return 2
  except (JaxprIoError, TypeError, ValueError) as e:
    if debug:
      raise
    message = str(e).splitlines()[0] if str(e) else type(e).__name__
    print(f"{prog}: error: {type(e).__name__}: {message}", file=sys.stderr)
    return 1
