"""Loaded programs and their StableHLO artifacts on a GPU (a manual check;
CI has no GPU).

    python -m tests.compat.exchange.write OUTDIR    # here, under each release
    python -m tests.compat.gpu_check OUTDIR [NAME,...]  # on the GPU machine

For each program of the exchange sets in OUTDIR (files written on a CPU by
each release), on the default device (a GPU):

  load      `jaxpr_io.load(path, check=True)`: checked, lowered and
            compiled for the GPU
  run       the program on the writer's saved inputs, compared with the
            writer's CPU results (float: within 1e-3 relative to the
            largest magnitude, as the GPU may contract and reassociate
            differently; integers, bools exactly)
  grad/jvp/vmap
            the transformations the exchange runs (tests/compat/exchange/
            common.py), compared alike
  exported  `converters.to_exported(prog, platforms=("cuda",))` (the
            default backend's platform), serialized,
            deserialized and called on the GPU: the same values as the
            loaded program there, bit for bit

Programs the GPU cannot run as written (8-device shardings, host-only
features) are listed with their reason. Writes OUTDIR/gpu-<jax>.json and
prints a summary line per status.
"""

from __future__ import annotations

import json
import pathlib
import sys
import time
import traceback
import warnings

import jax
import numpy as np

import jaxpr_io
from jaxpr_io import converters
from tests.compat.exchange import common
from tests.compat.exchange import read


# jax.export's name for the default backend ("cuda" on an NVIDIA GPU; the
# check runs on a CPU too, for trying it out).
_PLATFORM = {"gpu": "cuda"}.get(jax.default_backend(), jax.default_backend())


def _close(actual, expected) -> str | None:
  """Why the trees differ beyond the GPU tolerance, or None."""
  a_leaves = jax.tree_util.tree_leaves(actual)
  e_leaves = jax.tree_util.tree_leaves(expected)
  if len(a_leaves) != len(e_leaves):
    return f"{len(a_leaves)} leaves, expected {len(e_leaves)}"
  for i, (a, e) in enumerate(zip(a_leaves, e_leaves)):
    a, e = np.asarray(a), np.asarray(e)
    if a.shape != e.shape:
      return f"leaf {i}: shape {a.shape}, expected {e.shape}"
    if np.issubdtype(e.dtype, np.inexact):
      a64, e64 = a.astype(np.complex128), e.astype(np.complex128)
      finite = np.isfinite(e64)
      scale = max(float(np.max(np.abs(e64[finite]), initial=0.0)), 1.0)
      if not np.array_equal(np.isfinite(a64), finite) or np.max(
          np.abs(a64[finite] - e64[finite]), initial=0.0) > 1e-3 * scale:
        return f"leaf {i}: values differ beyond 1e-3 of {scale:g}"
    elif not np.array_equal(a, e):
      return f"leaf {i}: values differ"
  return None


def _bits(a_tree, b_tree) -> bool:
  return all(np.asarray(a).tobytes() == np.asarray(b).tobytes()
             for a, b in zip(jax.tree_util.tree_leaves(a_tree),
                             jax.tree_util.tree_leaves(b_tree)))


def check_case(path: pathlib.Path) -> dict:
  """The record of one exchange case on this device."""
  stage, notes = "load", []
  try:
    with warnings.catch_warnings():
      warnings.simplefilter("ignore", jaxpr_io.PolyfillWarning)
      prog = jaxpr_io.load(path, check=True)
    groups, meta = common.load_npz(path.with_suffix(".npz"))
    flat = groups.pop("in")
    stage = "run"
    got = read._run_what_this_jax_can(prog, flat, meta, notes)  # pylint: disable=protected-access
    problems = {k: why for k in groups
                if k in got and (why := _close(got[k], groups[k]))}
    stage = "exported"
    exported = converters.to_exported(prog, platforms=(_PLATFORM,))
    try:
      again = jax.export.deserialize(exported.serialize())
    except ValueError as e:
      if "Cannot serialize PyTreeDef" not in str(e):
        raise
      # jax.export serializes only registered pytree types (an Equinox
      # module in the signature): call the Exported itself.
      notes.append(f"exported: not serialized: {str(e)[:120]}")
      again = exported
    args, kwargs = jax.tree_util.tree_unflatten(prog.in_tree, flat)
    same = _bits(again.call(*args, **kwargs), jax.jit(prog)(*args, **kwargs))
    return {"status": "fail" if problems or not same else "pass",
            "compared": sorted(k for k in groups if k in got),
            "notes": notes, "problems": problems,
            "exported_bit_identical": same}
  except Exception as e:  # pylint: disable=broad-except
    # A record, not a crash: the summary lists every error.
    return {"status": "error", "stage": stage,
            "error": f"{type(e).__name__}: {str(e)[:300]}",
            "traceback": traceback.format_exc()[-2000:]}


def main(argv=None) -> int:
  argv = sys.argv[1:] if argv is None else argv
  out = pathlib.Path(argv[0])
  device = jax.devices()[0]
  record = {"jax": jax.__version__, "device": str(device),
            "platform": device.platform, "writers": {}}
  only = argv[1].split(",") if len(argv) > 1 else None
  for manifest in sorted(out.glob("*/manifest.json")):
    writer = manifest.parent.name
    cases = {}
    for path in sorted(manifest.parent.glob("*.jaxpr")):
      if only and not any(o in path.stem for o in only):
        continue
      start = time.monotonic()
      case = cases[path.stem] = dict(
          check_case(path), seconds=round(time.monotonic() - start, 2))
      print(f"{writer} {path.stem}: {case['status']} {case['seconds']} s "
            f"{case.get('error', '')}{case.get('problems') or ''}"[:300],
            flush=True)
      record["writers"][writer] = cases
      # After each case: a run stopped at its time limit keeps what it did.
      (out / f"gpu-{jax.__version__}.json").write_text(
          json.dumps(record, indent=1, sort_keys=True))
  print(f"jax {jax.__version__} on {device} ({device.platform})")
  for writer, cases in record["writers"].items():
    counts: dict[str, int] = {}
    for case in cases.values():
      counts[case["status"]] = counts.get(case["status"], 0) + 1
    print(f"written by {writer}: {counts}")
    for name, case in sorted(cases.items()):
      if case["status"] != "pass":
        print(f"  {name}: {case['status']} "
              f"{case.get('stage', '')} {case.get('error', '')}"
              f"{case.get('problems', '')}"[:400])
  return 0


if __name__ == "__main__":
  sys.exit(main())
