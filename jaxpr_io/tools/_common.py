"""What both command-line tools share: error reporting and progress."""

from __future__ import annotations

import os
import sys
import time
import traceback
from typing import Callable, Sequence

from jaxpr_io.errors import JaxprIoError


class CliError(Exception):
  """A user error: printed as one line, exit status 2."""


class UserCodeError(Exception):
  """An exception raised by the user's code (the target file or module of
  jaxpr-dump): printed as one line with its file:line, exit status 1."""


def user_code_error(e: BaseException, filename: str | None = None
                    ) -> UserCodeError:
  """`e`, raised while running the user's code, as one line naming where:
  the innermost frame in `filename` (the target file), else the innermost
  frame outside JAX, jaxpr_io and the Python library, else the error's own
  location (a SyntaxError's file and line)."""
  frames = traceback.extract_tb(e.__traceback__)
  where = None
  if isinstance(e, SyntaxError) and e.filename:
    where = f"{e.filename}:{e.lineno}"
  else:
    target = os.path.abspath(filename) if filename else None
    mine = [f for f in frames if target and os.path.abspath(f.filename) ==
            target]
    if not mine:
      mine = [f for f in frames if not _is_library_frame(f.filename)]
    if mine:
      where = f"{mine[-1].filename}:{mine[-1].lineno}"
  text = (e.msg if isinstance(e, SyntaxError) and e.msg else str(e))
  text = text.splitlines()[0] if text else ""
  message = f"{type(e).__name__}: {text}" if text else type(e).__name__
  return UserCodeError(f"{where}: {message}" if where else message)


_LIBRARY_PARTS = (f"{os.sep}jax{os.sep}", f"{os.sep}jaxlib{os.sep}",
                  f"{os.sep}jaxpr_io{os.sep}", f"{os.sep}tools{os.sep}",
                  f"{os.sep}importlib{os.sep}", "<frozen ")


def _is_library_frame(filename: str) -> bool:
  return any(part in filename for part in _LIBRARY_PARTS)


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
  """Runs `body(argv)`; every error becomes one line on stderr and exit
  status 1 (a bad file or program, a missing package, an error in the
  user's code) or 2 (bad usage), with a traceback only under --debug."""
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
  except (UserCodeError, ImportError) as e:
    # ImportError: a missing extra; the message names the pip command.
    if debug:
      raise
    print(f"{prog}: error: {e}", file=sys.stderr)
    return 1
  except Exception as e:  # pylint: disable=broad-except
    # Anything else (a JAX or TensorFlow error while converting, ...) is
    # still one line; --debug shows where it came from.
    if debug:
      raise
    message = str(e).splitlines()[0] if str(e) else ""
    print(f"{prog}: error: {type(e).__name__}: {message} (run with --debug "
          "for the traceback)", file=sys.stderr)
    return 1
