"""The worker's stages for a bind-source case (tests/fuzz/bind_source.py).

    bind-world  once per worker: builds the world, binds each benign source
                once (imports and compiles are not a case's cost)
    bind-make   the case's source, from a fresh copy of a benign one
    bind-load   `bind_sources.load_source(spec)`
    bind        `Program.bind(source)` (reads the arrays)
    bind-call   the bound program called on ones

Outcomes: `bind-refused` (a `jaxpr_io` error: `FormatError`,
`UnsafeSourceError`, `UnsupportedError`, a `SourceError`, or `bind`'s own
`TypeError` for a mismatch, each what jaxpr-load prints as one line),
`bind-ok` (bound, ran, the original's values), `bind-ok-other-values`
(bound and ran, the edited data's own values: a flipped bit, a fill value).

Failures: `bind-exception-<stage>` (any other exception escaping jaxpr_io),
`memory-bind` / `memory-budget-bind` (load and bind together over 16x the
source's size on disk + 64 MiB), `bind-leak` (the secret's bytes, or the
private checkpoint's weights, in the bound program's constants or outputs,
or quoted in an error), `bind-refused-benign` (a source whose links all stay
inside it refused, or bound to other values), `bind-harness` (the world's
secret or private checkpoint changed); hangs and aborts as for every case.
The stage messages that restart the parent's clock (`restart_clock`) give
each of the world's build and the case its own timeout.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import warnings

import numpy as np

from tests.fuzz import bind_apply
from tests.fuzz import bind_source as bs

_WORLD = None
_SLACK = 64 << 20
_X = np.ones((2, 4), np.float32)


def _windows(data: bytes) -> list[bytes]:
  return [data[i:i + 8] for i in range(0, len(data) - 7, 4)]


_SECRET_WINDOWS = _windows(bs.SECRET)
_PRIVATE_WINDOWS = _windows(bs.PRIVATE.tobytes())
_PRIVATE_VALUES = set(bs.PRIVATE.ravel().tolist()) | set(
    bs.PRIVATE.sum(0).tolist())
_SECRET_VALUES = {v for dt in ("<f4", ">f4")
                  for v in np.frombuffer(bs.SECRET, dt).tolist()
                  if np.isfinite(v) and v != 0}


def leaks(arrays, message: str = "") -> str | None:
  """What of the secret or the private weights `arrays` (or an error
  message) hold, or None."""
  for text in (bs.SECRET[:24].decode(), "b3BlbnNzaC1r", "7777.125",
               "7778.125"):
    if text in message:
      return f"an error message quotes {text!r}"
  for a in arrays:
    a = np.asarray(a)
    data = a.tobytes()
    if any(w in data for w in _SECRET_WINDOWS):
      return f"the secret's bytes in a {a.dtype}{list(a.shape)}"
    if any(w in data for w in _PRIVATE_WINDOWS):
      return f"the private weights' bytes in a {a.dtype}{list(a.shape)}"
    if a.dtype.kind == "f":
      values = set(a.astype(np.float64).ravel().tolist())
      if values & _PRIVATE_VALUES:
        return f"private weights' values in a {a.dtype}{list(a.shape)}"
      if values & _SECRET_VALUES:
        return f"the secret read as float32 in a {a.dtype}{list(a.shape)}"
  return None


def refused(e: BaseException) -> bool:
  """A refusal jaxpr-load reports as one line of jaxpr_io's own."""
  from jaxpr_io.api import binding  # pylint: disable=import-outside-toplevel
  from jaxpr_io import errors  # pylint: disable=import-outside-toplevel
  if isinstance(e, (errors.JaxprIoError, binding.SourceError)):
    return True
  return isinstance(e, TypeError) and str(e).startswith("bind")


def _bind(prog, spec: str):
  from jaxpr_io.api import bind_sources  # pylint: disable=import-outside-toplevel
  return prog.bind(bind_sources.load_source(spec))


def world(report):
  """The worker's world, built (and each benign source bound) at first
  use."""
  global _WORLD
  if _WORLD is None:
    import jaxpr_io  # pylint: disable=import-outside-toplevel
    report("bind-world", {"restart_clock": True})
    w = bs.World(os.environ.get("JAXPR_IO_FUZZ_TMP"))
    atexit.register(w.close)
    prog = jaxpr_io.loads(w.program)
    for spec in (f"{w.benign[False]}:params", f"{w.benign[True]}:params",
                 w.npz):
      np.asarray(_bind(prog, spec)(_X))
    _WORLD = w
  return _WORLD


def _failure(cls, stage, exc=None, describe=None, message=""):
  if exc is not None:
    return dict(describe(exc), cls=cls, stage=stage)
  return {"cls": cls, "stage": stage, "type": cls, "message": message,
          "lib_frame": "", "last_frame": "", "traceback": ""}


def run_case(data: bytes, report, *, describe, peak) -> dict:
  """Runs one bind-source case (module doc); `describe` and `peak` are the
  worker's exception summary and memory measure."""
  import jaxpr_io  # pylint: disable=import-outside-toplevel
  w = world(report)
  case = bs.parse(data)
  info = {"kind": case["kind"]}
  result = {"outcome": None, "warnings": {}, "bind": info}
  report("bind-make", {"restart_clock": True})
  if not w.intact():
    result["outcome"] = "failure"
    result["failure"] = _failure("bind-harness", "bind-make", message=(
        "the world's secret or private checkpoint changed"))
    return result
  try:
    where, spec, skipped = bind_apply.materialize(w, case)
  except Exception as e:  # pylint: disable=broad-except
    result["outcome"] = "failure"
    result["failure"] = _failure("bind-harness", "bind-make", e, describe)
    return result
  info["skipped"] = skipped
  benign = bs.benign(case) and not skipped
  try:
    undo = _selftest(case)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      _stages(result, spec, benign, jaxpr_io.loads(w.program),
              report, describe, peak)
    for c in caught:
      name = c.category.__name__
      result["warnings"][name] = result["warnings"].get(name, 0) + 1
  finally:
    undo()
    shutil.rmtree(where, ignore_errors=True)
  return result


def _selftest(case: dict):
  """With JAXPR_IO_FUZZ_SELFTEST set, a case `{"selftest": "unconfined"}`
  runs with jaxpr_io's confinement of Orbax items switched off (for the
  test that the leak check can fail). Returns the undo."""
  if not (os.environ.get("JAXPR_IO_FUZZ_SELFTEST")
          and case.get("selftest") == "unconfined"):
    return lambda: None
  from jaxpr_io.api import source_paths  # pylint: disable=import-outside-toplevel
  checked = source_paths.check_orbax_item
  source_paths.check_orbax_item = lambda path, within=None: 1 << 20

  def undo():
    source_paths.check_orbax_item = checked
  return undo


def _stages(result, spec, benign, prog, report, describe, peak):
  info = result["bind"]
  path = spec[:-len(":params")] if spec.endswith(":params") else spec
  budget = 16 * bind_apply.disk_size(path) + _SLACK
  info["budget"] = budget
  stage = "bind-load"
  report(stage, {"restart_clock": True})
  with peak() as measured:
    try:
      from jaxpr_io.api import bind_sources  # pylint: disable=import-outside-toplevel
      source = bind_sources.load_source(spec)
      stage = "bind"
      report(stage, {})
      bound = prog.bind(source)
      error = None
    except MemoryError as e:
      result["outcome"] = "failure"
      result["failure"] = _failure("memory-bind", stage, e, describe)
      return
    except BaseException as e:  # pylint: disable=broad-except
      error = e
  info["memory"] = measured.grown
  if measured.grown is not None and measured.grown > budget:
    result["outcome"] = "failure"
    result["failure"] = _failure("memory-budget-bind", stage, message=(
        f"load_source + bind grew the resident memory by "
        f"{measured.grown / 2**20:.1f} MiB, over the budget of "
        f"{budget / 2**20:.1f} MiB"))
    return
  if error is not None:
    _refusal(result, stage, error, benign, describe)
    return
  stage = "bind-call"
  report(stage, {})
  try:
    out = np.asarray(bound(_X))
  except BaseException as e:  # pylint: disable=broad-except
    result["outcome"] = "failure"
    result["failure"] = _failure(f"bind-exception-{stage}", stage, e,
                                 describe)
    return
  consts = list(bound.closed_jaxpr.consts)
  leak = leaks(consts + [out])
  if leak:
    result["outcome"] = "failure"
    result["failure"] = _failure("bind-leak", stage, message=leak)
    return
  same = np.allclose(out, _X @ bs.W, rtol=1e-6)
  result["outcome"] = "bind-ok" if same else "bind-ok-other-values"
  if benign and not same:
    result["outcome"] = "failure"
    result["failure"] = _failure("bind-refused-benign", stage, message=(
        "a source whose links stay inside it bound to other values"))


def _refusal(result, stage, error, benign, describe) -> None:
  message = str(error)
  leak = leaks([], message)
  if leak:
    result["outcome"] = "failure"
    result["failure"] = _failure("bind-leak", stage, message=leak)
  elif not refused(error):
    result["outcome"] = "failure"
    result["failure"] = _failure(f"bind-exception-{stage}", stage, error,
                                 describe)
  elif benign:
    result["outcome"] = "failure"
    result["failure"] = _failure("bind-refused-benign", stage, error,
                                 describe)
  else:
    result["outcome"] = "bind-refused"
    first = re.sub(r"\S*/cases/c\d+", "<case>",
                   message.splitlines()[0] if message else "")
    result["bind"]["error"] = f"{type(error).__name__}: {first}"[:300]
