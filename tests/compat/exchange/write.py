"""Writes this JAX release's exchange set.

    python -m tests.compat.exchange.write OUTDIR [--only GLOB[,GLOB...]]

Creates OUTDIR/<jax version>/ with, per case, <case>.jaxpr (jaxpr_io.save
of the traced program) and <case>.npz (inputs, and the traced program's
outputs, gradient, jvp and vmap results: see tests/compat/exchange/common.py), and
manifest.json:

    {"jax_version": ..., "jaxlib_version": ..., "jaxpr_io_version": ...,
     "fatal": null or an error record (nothing could be written),
     "cases": {name: {"status": "written" | "write_failed" | "skipped", ...}}}

"skipped" cases are programs JAX itself cannot trace on this release (not
part of the set); "write_failed" ones carry the error record of the stage
that failed (build, trace, save, reference). Exit status 0 unless the whole
set could not be written (jaxpr_io does not import, the case list does not
build).
"""

from __future__ import annotations

import fnmatch
import json
import os
import pathlib
import platform
import sys
import time
from typing import Callable

import tests.compat.exchange  # noqa: F401  (8 host devices, before JAX starts)
import jax
import jaxlib

from tests.compat.exchange import cases as cases_lib
from tests.compat.exchange import common


def _available_checks(prog, flat: list, fidx: list[int], wanted
                      ) -> tuple[list[str], dict[str, str]]:
  """(the `wanted` checks whose function traces on the original program,
  {check: why not} for the others). Gradients and tangents need float
  inputs."""
  checks, unavailable = [], {}
  for check in wanted:
    if check in ("grad", "jvp") and not fidx:
      unavailable[check] = "no float inputs"
      continue
    fn = common.make_results_fn(prog, prog.in_tree, [check], fidx)
    try:
      jax.eval_shape(fn, flat)
    except Exception as e:  # pylint: disable=broad-except
      unavailable[check] = f"{type(e).__name__}: {e}"[:500]
      continue
    checks.append(check)
  return checks, unavailable


def _reference(prog, flat: list, fidx: list[int], checks: list[str],
               unavailable: dict[str, str]) -> tuple[dict, list[str]]:
  """The writer's results, computed as the reader will compute them: all
  checks in one jitted function. A check that traces but does not compile
  or run on the original is dropped (recorded in `unavailable`); raises if
  the outputs themselves cannot be computed."""
  def run(names):
    fn = common.make_results_fn(prog, prog.in_tree, names, fidx)
    return jax.jit(fn)(flat)
  try:
    return run(checks), checks
  except Exception:  # pylint: disable=broad-except
    pass  # find the checks that fail on their own, below
  kept = []
  for check in checks:
    try:
      run([check])
      kept.append(check)
    except Exception as e:  # pylint: disable=broad-except
      if check == "out":
        raise
      unavailable[check] = f"{type(e).__name__}: {e}"[:500]
  return run(kept), kept


def write_case(name: str, builder: Callable[[], cases_lib.Case],
               outdir: pathlib.Path) -> dict:
  """Builds, traces, saves and runs one case; returns its manifest entry.
  Never raises for a failure of the case itself: records it."""
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  stage = "build"
  try:
    case = builder()
    stage = "trace"
    prog = jaxpr_io.trace(case.fn, *(case.trace_args or case.args),
                          **case.kwargs)
    stage = "save"
    jaxpr_io.save(outdir / f"{name}.jaxpr", prog)
    stage = "reference"
    flat = cases_lib.flat_inputs(case)
    fidx = common.float_indices(flat)
    checks, unavailable = _available_checks(prog, flat, fidx,
                                                case.checks)
    if "out" not in checks:
      raise RuntimeError(f"the original program does not run: "
                         f"{unavailable.get('out')}")
    results, checks = _reference(prog, flat, fidx, checks, unavailable)
    stage = "save_npz"
    meta = {"case": name, "checks": checks, "unavailable": unavailable,
            "float_inputs": fidx}
    common.save_npz(outdir / f"{name}.npz", dict(results, **{"in": flat}),
                    meta)
  except cases_lib.SkipCase as e:
    return {"status": "skipped", "reason": str(e)[:1000]}
  except Exception as e:  # pylint: disable=broad-except
    return dict(common.error_record(e, stage), status="write_failed")
  return {"status": "written", "info": case.info, "checks": checks,
          "unavailable": unavailable}


def _selected(name: str, only: list[str] | None) -> bool:
  return not only or any(fnmatch.fnmatchcase(name, g) for g in only)


def write_all(outdir: pathlib.Path, only: list[str] | None = None,
              log=print) -> dict:
  """Writes the set of this release under outdir/<jax version>/ and returns
  the manifest (also saved there as manifest.json). `only`: glob patterns
  of case names to write (all when None)."""
  release_dir = outdir / jax.__version__
  release_dir.mkdir(parents=True, exist_ok=True)
  manifest = {"jax_version": jax.__version__,
              "jaxlib_version": jaxlib.__version__,
              "python": platform.python_version(),
              "device_count": jax.device_count(),
              "fatal": None, "cases": {}}
  start = time.time()
  try:
    import jaxpr_io  # pylint: disable=g-import-not-at-top
    manifest["jaxpr_io_version"] = jaxpr_io.__version__
    manifest["format_version"] = jaxpr_io.FORMAT_VERSION
    for name, builder in cases_lib.enumerate_cases():
      if not _selected(name, only):
        continue
      t = time.time()
      entry = write_case(name, builder, release_dir)
      entry["seconds"] = round(time.time() - t, 3)
      manifest["cases"][name] = entry
      log(f"[write {jax.__version__}] {name}: {entry['status']}"
          + (f" ({entry['error_type']}: {entry['message'][:200]})"
             if entry["status"] == "write_failed" else ""))
  except Exception as e:  # pylint: disable=broad-except
    manifest["fatal"] = common.error_record(e, "setup")
    log(f"[write {jax.__version__}] FATAL: {manifest['fatal']['traceback']}")
  manifest["seconds"] = round(time.time() - start, 1)
  (release_dir / "manifest.json").write_text(
      json.dumps(manifest, indent=1, sort_keys=True))
  return manifest


def main(argv: list[str] | None = None) -> int:
  outdir, only = common.parse_cli(__doc__, argv)
  manifest = write_all(outdir, only)
  counts = {}
  for entry in manifest["cases"].values():
    counts[entry["status"]] = counts.get(entry["status"], 0) + 1
  print(f"[write {jax.__version__}] {counts} in {manifest['seconds']} s -> "
        f"{os.path.join(outdir, jax.__version__)}")
  return 1 if manifest["fatal"] else 0


if __name__ == "__main__":
  sys.exit(main())
