"""What both command-line tools share: error reporting, progress, and the
escaping of what they print."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import sys
import time
import traceback
import warnings
from typing import Callable, Iterator, Sequence

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


class _EscapedStream:
  """A text stream that passes on what it is given with every control
  character escaped (`escape(lines=True)`); everything else is the
  wrapped stream's."""

  def __init__(self, stream):
    self._stream = stream

  def write(self, text: str) -> int:
    # Escaping is per character, so text split across writes (print's
    # text, then its newline) escapes as the whole would.
    self._stream.write(escape(text, lines=True))
    return len(text)

  def writelines(self, lines) -> None:
    for line in lines:
      self.write(line)

  def __getattr__(self, name):
    return getattr(self._stream, name)


class _EscapedRecords(logging.Filter):
  """Escapes, in place, the text of a record that a program logs: its
  message with its arguments, the names a stored record carries (a trusted
  file's `jax.debug.log` keeps its logger name and source location), and
  the traceback text of a failed callback's report."""

  def filter(self, record: logging.LogRecord) -> bool:
    try:
      message = record.getMessage()
    except Exception:  # pylint: disable=broad-except
      # Arguments the message cannot take: logging would report the
      # formatting error; the text is what there is.
      message = f"{record.msg} {record.args}"
    record.msg, record.args = escape(message, lines=True), ()
    for name in ("name", "pathname", "filename", "module", "funcName"):
      value = getattr(record, name, None)
      if isinstance(value, str):
        setattr(record, name, escape(value))
    if record.exc_info and not record.exc_text:
      record.exc_text = logging.Formatter().formatException(record.exc_info)
    if record.exc_text:
      record.exc_text = escape(record.exc_text, lines=True)
    if record.stack_info:
      record.stack_info = escape(record.stack_info, lines=True)
    return True


# The loggers through which JAX hands on what a program logs:
# `jax.debug.log`'s records (`logger.handle` of the stored record) and the
# reports of callbacks that failed, which quote their error.
PROGRAM_LOGGERS = ("jax._src.debugging", "jax._src.callback")


@contextlib.contextmanager
def escaped_output() -> Iterator[None]:
  """While the block runs, what reaches `sys.stdout` and `sys.stderr` (a
  program's `jax.debug.print` output, JAX writes it there; log records of
  handlers that write to them) is escaped, and so is every record of JAX's
  program loggers, whatever handler takes it: text from a file, never
  terminal control sequences. Restored afterwards: a Python caller of the
  library sees what the program prints as it is."""
  stdout, stderr = sys.stdout, sys.stderr
  records = _EscapedRecords()
  loggers = [logging.getLogger(name) for name in PROGRAM_LOGGERS]
  sys.stdout, sys.stderr = (s if s is None else _EscapedStream(s)
                            for s in (stdout, stderr))
  for logger in loggers:
    logger.addFilter(records)
  try:
    yield
  finally:
    for logger in loggers:
      logger.removeFilter(records)
    sys.stdout, sys.stderr = stdout, stderr


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
  except (CliError, FileNotFoundError, FileExistsError, IsADirectoryError,
          NotADirectoryError, PermissionError) as e:
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
