"""Reads every release's exchange set under this release.

    python -m tests.compat.exchange.read OUTDIR [--only GLOB[,GLOB...]]

For every OUTDIR/<writer version>/manifest.json (this release's own set
included), loads each written case with `jaxpr_io.load(path, check=True)`,
computes its results on the saved inputs exactly as the writer did (one
jitted function: outputs, jax.grad of the loss, jvp, vmap; see
tests/compat/exchange/common.py) and compares them with the writer's: bit for bit
when the writer ran this same JAX version, within tight tolerances
otherwise (integers, bools and keys exactly).

Writes OUTDIR/results-<jax version>.json:

    {"reader": {"jax_version": ..., ...}, "fatal": null or error record,
     "writers": {writer version: {"fatal": ..., "cases": {name:
         {"status": "pass" | "fail" | "error", "seconds": ...,
          "polyfilled": primitives this JAX rebuilt from its own
              (jaxpr_io/compat/polyfills.py; results then compared with
              the cross-release tolerances, never bit for bit),
          + for pass: "notes" (elements left out of the comparison)
          + for fail/error: "stage", "error_type", "is_format_error",
            "message", "traceback"}}}}}

"fail" means the program ran and computed different results; "error" that
loading or running raised. Exit status 0 unless nothing could be read
(jaxpr_io does not import); the table command judges the cases.
"""

from __future__ import annotations

import fnmatch
import json
import pathlib
import platform
import sys
import time
import warnings

import tests.compat.exchange  # noqa: F401  (8 host devices, before JAX starts)
import jax
import jaxlib

from tests.compat.exchange import common
from tests.compat.exchange import versions


def _run(prog, flat: list, meta: dict, checks: list[str]) -> dict:
  """The results of `checks`, computed as the writer did (one jit)."""
  fn = common.make_results_fn(prog, prog.in_tree, checks,
                              meta["float_inputs"])
  return jax.jit(fn)(flat)


def _run_what_this_jax_can(prog, flat: list, meta: dict,
                           notes: list[str]) -> dict:
  """Like `_run` of every recorded check, except the derived ones (grad,
  jvp) that this JAX release cannot compute because it has no
  differentiation rule that the writer's release has (0.12 differentiates
  `nextafter`, 0.10 and 0.11 do not): those are left out with a note.
  Only for another release's files; raises what `_run` raises otherwise."""
  try:
    return _run(prog, flat, meta, meta["checks"])
  except NotImplementedError as e:
    error = e  # re-raised below unless a derived check explains it
  kept = []
  for check in meta["checks"]:
    if check in common.DERIVED_CHECKS:
      fn = common.make_results_fn(prog, prog.in_tree, [check],
                                  meta["float_inputs"])
      try:
        jax.eval_shape(fn, flat)
      except NotImplementedError as e:
        notes.append(f"{check}: not compared: jax {jax.__version__} cannot "
                     f"compute it ({e})")
        continue
    kept.append(check)
  if kept == meta["checks"]:
    raise error
  return _run(prog, flat, meta, kept)


_BUILDERS: dict | None = None


def _own_trace_text(name: str) -> str | None:
  """How this release prints its own trace of case `name` (None when this
  release does not build the case)."""
  global _BUILDERS
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  from tests.support import roundtrip  # pylint: disable=g-import-not-at-top
  from tests.compat.exchange import cases  # pylint: disable=g-import-not-at-top
  if _BUILDERS is None:
    _BUILDERS = dict(cases.enumerate_cases())
  builder = _BUILDERS.get(name)
  if builder is None:
    return None
  try:
    case = builder()
  except cases.SkipCase:
    return None
  prog = jaxpr_io.trace(case.fn, *(case.trace_args or case.args),
                        **case.kwargs)
  return roundtrip.normalized_text(prog.closed_jaxpr)


def _print_note(prog, name: str) -> list[str]:
  """A note when the loaded program does not print like this release's own
  trace of the same function (the releases' JAX may trace it differently,
  e.g. another derivative rule; the computation is compared separately)."""
  from tests.support import roundtrip  # pylint: disable=g-import-not-at-top
  own = _own_trace_text(name)
  loaded = roundtrip.normalized_text(prog.closed_jaxpr)
  if own is None or loaded == own:
    return []
  first = next((i for i, (a, b) in enumerate(
      zip(own.splitlines(), loaded.splitlines())) if a != b), None)
  where = ("" if first is None else
           f": line {first + 1} is {loaded.splitlines()[first].strip()!r}, "
           f"its own {own.splitlines()[first].strip()!r}")
  return [f"prints unlike jax {jax.__version__}'s own trace of it{where}"]


def _load_checked(path: pathlib.Path, notes: list[str]):
  """`load(path, check=True)`; a program that check=True refuses because a
  transformation rule of one of its primitives cannot take its params
  (JAX's own harnesses bind `mul_p` without `out_dtype`) is loaded
  unchecked, with a note, once JAX's own transformation of it is seen to
  fail alike."""
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  from jaxpr_io import compat  # pylint: disable=g-import-not-at-top
  from tests.support import transform_refusal  # pylint: disable=g-import-not-at-top
  try:
    return jaxpr_io.load(path, check=True)
  except jaxpr_io.FormatError as e:
    refused = transform_refusal.refused(e)
    if refused is None:
      raise
    error = e
  prog = jaxpr_io.load(path)
  groups, _ = common.load_npz(path.with_suffix(".npz"))
  param, role = refused
  transform_refusal.assert_transform_fails(
      compat.jaxpr_as_fun(prog.closed_jaxpr), groups["in"], role, param)
  notes.append(f"check=True refuses it ({str(error).splitlines()[0][:200]}"
               f"); JAX's own {role} transformation of it fails alike")
  return prog


def read_case(path: pathlib.Path, *, exact: bool) -> dict:
  """Loads, runs and compares the case whose program is `path` (its data
  beside it, `.npz`). `exact`: the file was written by this JAX version,
  so results must be bit-identical and every check must run. Returns its
  result record; never raises for a failure of the case itself."""
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  stage, notes, polyfilled = "load", [], []
  try:
    with warnings.catch_warnings():
      # Recorded instead: the table flags the case.
      warnings.simplefilter("ignore", jaxpr_io.PolyfillWarning)
      prog = _load_checked(path, notes)
    polyfilled = sorted({name for _, _, name in prog.polyfilled})
    stage = "load_npz"
    groups, meta = common.load_npz(path.with_suffix(".npz"))
    flat = groups.pop("in")
    stage = "run"
    actual = (_run(prog, flat, meta, meta["checks"]) if exact else
              _run_what_this_jax_can(prog, flat, meta, notes))
    stage = "compare"
    expected = {k: v for k, v in groups.items() if k in actual}
    notes += common.assert_results_close(actual, expected, exact=exact)
    if not exact:
      stage = "print"
      notes += _print_note(prog, path.stem)
  except AssertionError as e:
    return dict(common.error_record(e, stage), status="fail",
                polyfilled=polyfilled)
  except Exception as e:  # pylint: disable=broad-except
    return dict(common.error_record(e, stage), status="error",
                polyfilled=polyfilled)
  return {"status": "pass", "notes": notes, "polyfilled": polyfilled}


def _selected(name: str, only: list[str] | None) -> bool:
  return not only or any(fnmatch.fnmatchcase(name, g) for g in only)


def read_set(release_dir: pathlib.Path, only: list[str] | None = None,
             log=print) -> dict:
  """Reads one writer's set; returns {"writer": version, "cases": ...}."""
  manifest = json.loads((release_dir / "manifest.json").read_text())
  writer = manifest["jax_version"]
  exact = writer == jax.__version__
  out = {"writer": writer, "exact": exact, "cases": {}}
  for name, entry in manifest["cases"].items():
    if entry["status"] != "written" or not _selected(name, only):
      continue
    t = time.time()
    result = read_case(release_dir / f"{name}.jaxpr", exact=exact)
    result["seconds"] = round(time.time() - t, 3)
    out["cases"][name] = result
    if result["status"] != "pass":
      log(f"[read {jax.__version__} <- {writer}] {name}: {result['status']} "
          f"at {result['stage']}: {result['error_type']}: "
          f"{result['message'][:300]}")
  return out


def writer_dirs(outdir: pathlib.Path) -> list[pathlib.Path]:
  """The writer release directories in OUTDIR, oldest release first."""
  dirs = [p.parent for p in outdir.glob("*/manifest.json")]
  return sorted(dirs, key=lambda p: versions.version_key(p.name))


def read_all(outdir: pathlib.Path, only: list[str] | None = None,
             log=print) -> dict:
  """Reads every writer's set in OUTDIR and saves the results as
  OUTDIR/results-<jax version>.json (after each set, so a crash leaves the
  sets read so far). Returns the results."""
  results = {"reader": {"jax_version": jax.__version__,
                        "jaxlib_version": jaxlib.__version__,
                        "python": platform.python_version(),
                        "device_count": jax.device_count()},
             "fatal": None, "writers": {}}
  path = outdir / f"results-{jax.__version__}.json"
  start = time.time()
  try:
    import jaxpr_io  # pylint: disable=g-import-not-at-top
    results["reader"]["jaxpr_io_version"] = jaxpr_io.__version__
    for release_dir in writer_dirs(outdir):
      t = time.time()
      read = read_set(release_dir, only, log)
      read["seconds"] = round(time.time() - t, 1)
      results["writers"][read.pop("writer")] = read
      passed = sum(r["status"] == "pass" for r in read["cases"].values())
      log(f"[read {jax.__version__} <- {release_dir.name}] "
          f"{passed}/{len(read['cases'])} passed in {read['seconds']} s")
      path.write_text(json.dumps(results, indent=1, sort_keys=True))
  except Exception as e:  # pylint: disable=broad-except
    results["fatal"] = common.error_record(e, "setup")
    log(f"[read {jax.__version__}] FATAL: {results['fatal']['traceback']}")
  results["seconds"] = round(time.time() - start, 1)
  path.write_text(json.dumps(results, indent=1, sort_keys=True))
  return results


def main(argv: list[str] | None = None) -> int:
  outdir, only = common.parse_cli(__doc__, argv)
  results = read_all(outdir, only)
  return 1 if results["fatal"] else 0


if __name__ == "__main__":
  sys.exit(main())
