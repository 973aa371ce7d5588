"""What both command-line tools share: error reporting, progress, and the
escaping of what they print."""

from __future__ import annotations

import os
import re
import sys
import time
import traceback
import warnings
from typing import Callable, Sequence

from jaxpr_io.errors import JaxprIoError


# What a terminal acts on instead of showing: the C0 controls (ESC starts
# the sequences that retitle the terminal, clear the screen or recolour what
# follows; CR and BS overwrite), DEL, the C1 controls (U+0080-U+009F: CSI,
# OSC, ... in one character) and Unicode's bidirectional overrides and
# isolates (which reorder what follows them on the line). Tab and newline
# are kept only in multi-line text (`lines=True`).
_CONTROLS = ("\x00-\x08\x0b-\x1f\x7f-\x9f"
             "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069")
_CONTROL = re.compile(f"[{_CONTROLS}\t\n]")
_CONTROL_IN_LINES = re.compile(f"[{_CONTROLS}]")


def _escaped(match: re.Match) -> str:
  code = ord(match.group())
  return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def escape(text: str, *, lines: bool = False) -> str:
  """`text` with every control character written as an escape (`\\x1b`,
  `\\x9b`, `\\u202e`), so that strings from a file or a source print as
  text: one line, or with `lines`, keeping its newlines and tabs. Every
  string the tools print that a file, a checkpoint or an error message may
  hold goes through it."""
  pattern = _CONTROL_IN_LINES if lines else _CONTROL
  return pattern.sub(_escaped, str(text))


def say(text: str = "", *, file=None) -> None:
  """Prints `text` (possibly several lines) escaped."""
  print(escape(text, lines=True), file=file)


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
      print(escape(f"{prog}: {what} ..."), file=sys.stderr, flush=True)

    def __exit__(self, exc_type, exc, tb):
      if exc_type is None:
        print(escape(f"{prog}: {what}") + " done in "
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
  shown = warnings.formatwarning
  warnings.formatwarning = _escaped_warning
  try:
    return body(argv)
  except (CliError, FileNotFoundError, IsADirectoryError,
          PermissionError) as e:
    if debug:
      raise
    _error(prog, str(e))
    return 2
  except (JaxprIoError, TypeError, ValueError) as e:
    if debug:
      raise
    message = _first_line(e) or type(e).__name__
    _error(prog, f"{type(e).__name__}: {message}")
    return 1
  except (UserCodeError, ImportError) as e:
    # ImportError: a missing extra; the message names the pip command.
    if debug:
      raise
    _error(prog, str(e))
    return 1
  except Exception as e:  # pylint: disable=broad-except
    # Anything else (a JAX or TensorFlow error while converting, ...) is
    # still one line; --debug shows where it came from.
    if debug:
      raise
    message = _first_line(e)
    _error(prog, f"{type(e).__name__}: {message} (run with --debug for the "
           "traceback)")
    return 1
  finally:
    warnings.formatwarning = shown


def _first_line(e: BaseException) -> str:
  """The first line of an error's message (up to a newline: other line
  breaks, such as a file's CR, are escaped)."""
  return str(e).split("\n", 1)[0]


def _error(prog: str, message: str) -> None:
  """The one line of an error; its message may quote a file."""
  print(f"{prog}: error: {escape(message)}", file=sys.stderr)


_format_warning = warnings.formatwarning


def _escaped_warning(message, category, filename, lineno, line=None) -> str:
  """A warning as Python shows it, its message escaped to one line (a
  warning may quote a file)."""
  return _format_warning(escape(str(message)), category, filename, lineno,
                         line)
