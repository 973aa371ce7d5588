"""python -m tests.shape_poly: JAX's shape-polymorphism harnesses through
jaxpr_io (tests/shape_poly/campaign.py says what each step checks).

  python -m tests.shape_poly --out build/shape_poly/results-$(python -c 'import jax; print(jax.__version__)').jsonl

prints the table of docs/symbolic-shapes.md and every harness that
jax.export handles and jaxpr_io fails, with the reason. Single process.
The whole list (1523 harnesses on jax 0.10.2, 1525 on 0.12) took about 1.5
hours a release, two runs beside each other on a 2-core machine
(2026-11-27): the list proper is slow (12 to 19 s a harness), the vmap_*
harnesses fast (about 1 s). `--vmap-per-group 1` runs the list proper and
the first of each vmap_* group (417 and 419 harnesses); `--skip-done FILE`
then runs the rest, or resumes a run (`--out` appends). `--shard 0/2` and
`--shard 1/2` split the list between two processes of even load.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import time
import zlib

from tests.shape_poly import campaign
from tests.shape_poly import suite


def summarize(records) -> str:
  """The markdown table: per step, the harnesses where the step applies,
  and how many pass with jax.export and with jaxpr_io."""
  handled = [r for r in records if r.get("export") == "ok"]
  lines = [f"harnesses: {len(records)}; jax.export handles {len(handled)} "
           f"(refused by design: "
           f"{sum(str(r.get('export')).startswith('refuses') for r in records)}"
           f", failing: "
           f"{sum(str(r.get('export')).startswith(('fails', 'no ')) for r in records)})",
           "",
           "| step | applies | jax.export passes | jaxpr_io passes |",
           "| --- | --- | --- | --- |"]
  for step in campaign.STEPS:
    cells = [r["steps"][step] for r in handled if step in r["steps"]]
    applies = [c for c in cells if c[0] != "n/a"]
    theirs = sum(c[2] == "pass" for c in applies)
    mine = sum(c[0] == "pass" for c in applies)
    lines.append(f"| {step} | {len(applies)} | {theirs} | {mine} |")
  return "\n".join(lines)


def failures(records) -> list[str]:
  """Every step jaxpr_io fails on a harness jax.export handles (the goal is
  none), saying whether jax.export's own step passes, and every error of
  the campaign itself."""
  out = []
  for r in records:
    if r.get("error"):
      out.append(f"{r['name']}: campaign error: {r['error'].splitlines()[0]}")
    for step, (mine, why, theirs) in r.get("steps", {}).items():
      if mine == "fail":
        out.append(f"{r['name']}: {step} (jax.export: {theirs}): {why}")
  return out


def _read(paths: str) -> dict:
  """{harness name: record} of comma-separated JSON lines files, a later
  record of a name replacing an earlier one; a missing file holds none."""
  records = {}
  for path in paths.split(","):
    if not os.path.exists(path):  # a run not yet started: nothing done
      continue
    with open(path) as f:
      for line in f:
        if line.strip():
          record = json.loads(line)
          records[record["name"]] = record
  return records


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m tests.shape_poly",
                                   description=__doc__.splitlines()[0])
  parser.add_argument("--source", default=None,
                      help="a local shape_poly_test.py (default: fetched "
                           f"from the jax {suite.SDIST_VERSION} sdist)")
  parser.add_argument("--only", default="",
                      help="harnesses whose name contains this (or one "
                           "of these, comma-separated)")
  parser.add_argument("--limit", type=int, default=0)
  parser.add_argument("--vmap-per-group", type=int, default=0, metavar="N",
                      help="of the vmap_* harnesses (JAX's primitive "
                           "harnesses under vmap, 1232 of the 1523), only "
                           "the first N of each group by name (default: "
                           "all)")
  parser.add_argument("--sample", type=int, default=1, metavar="K",
                      help="only the harnesses whose name's CRC-32 is 0 "
                           "modulo K (deterministic; default: all)")
  parser.add_argument("--skip-saved-model", action="store_true")
  parser.add_argument("--skip-done", default=None, metavar="JSONL[,...]",
                      help="leave out the harnesses these JSON lines files "
                           "(earlier --outs) hold: resume a run, or "
                           "run the rest of the list after a sample")
  parser.add_argument("--shard", default=None, metavar="I/N",
                      help="only every N-th harness of the list, from the "
                           "I-th (0-based): N processes of even load")
  parser.add_argument("--reverse", action="store_true",
                      help="run the list from its end: a second process "
                           "beside a first one, the two meeting halfway")
  parser.add_argument("--out", default=None,
                      help="JSON lines, per harness, appended to (with "
                           "--skip-done on the same file, a run resumes)")
  parser.add_argument("--summary", default=None, metavar="JSONL[,...]",
                      help="only summarize these JSON lines files (a "
                           "harness in several: the last file's record)")
  args = parser.parse_args(argv)
  if args.summary:
    records = list(_read(args.summary).values())
    print(summarize(records))
    print("\n".join(failures(records)))
    return 0
  tf = None
  if not args.skip_saved_model:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  only = args.only.split(",")
  harnesses = [h for h in suite.harnesses(args.source)
               if any(o in h.fullname for o in only)]
  harnesses.sort(key=lambda h: h.fullname)
  harnesses = [h for h in harnesses
               if zlib.crc32(h.fullname.encode()) % args.sample == 0]
  if args.vmap_per_group:
    taken = collections.Counter()
    kept = []
    for h in harnesses:
      if h.group_name.startswith("vmap_"):
        taken[h.group_name] += 1
        if taken[h.group_name] > args.vmap_per_group:
          continue
      kept.append(h)
    harnesses = kept
  if args.shard:
    index, count = (int(n) for n in args.shard.split("/"))
    harnesses = harnesses[index::count]
  if args.skip_done:
    done = _read(args.skip_done)
    harnesses = [h for h in harnesses if h.fullname not in done]
  if args.reverse:
    harnesses.reverse()
  if args.limit:
    harnesses = harnesses[:args.limit]
  out = open(args.out, "a") if args.out else None
  records = []
  start = time.time()
  for i, h in enumerate(harnesses):
    record = campaign.run_harness(h, tf)
    records.append(record)
    if out:
      out.write(json.dumps(record) + "\n")
      out.flush()
    bad = [s for s, c in record["steps"].items() if c[0] == "fail"]
    print(f"[{i + 1}/{len(harnesses)} {time.time() - start:.0f}s] "
          f"{record['name']}: export {record.get('export')}"
          + (f"; FAILS {bad}" if bad else "")
          + ("; ERROR" if record.get("error") else ""), flush=True)
  print(summarize(records))
  lines = failures(records)
  print(f"\n{len(lines)} jaxpr_io failures on harnesses jax.export handles:")
  print("\n".join(lines))
  return 1 if lines else 0


if __name__ == "__main__":
  sys.exit(main())
