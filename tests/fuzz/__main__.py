"""python -m tests.fuzz: run a fuzz campaign (see tests/fuzz/README.md)."""

from __future__ import annotations

import argparse
import shlex
import sys

import tests.fuzz  # noqa: F401  (sets XLA_FLAGS before JAX is imported)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(
      prog="python -m tests.fuzz",
      description="Format-aware fuzzing of jaxpr_io files: mutates fields "
                  "of real files' Program messages, fixes the checksums, "
                  "and runs loads / check / str / dumps / the first call "
                  "in worker subprocesses.")
  parser.add_argument("--cases", type=int, default=1000)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--first", type=int, default=0, metavar="I",
                      help="run cases I .. I+cases-1 of the seed: a long "
                           "campaign in chunks, each its own --out")
  parser.add_argument("--workers", type=int, default=2)
  parser.add_argument("--out", required=True,
                      help="output directory (summary.json, failures)")
  parser.add_argument("--timeout", type=float, default=20.0,
                      help="seconds per case before the worker is killed")
  parser.add_argument("--mem-gib", type=float, default=4.0,
                      help="address space a worker may add after start-up "
                           "(RLIMIT_AS); 0: no limit")
  parser.add_argument("--keep", type=int, default=1000,
                      help="failure cases kept per cluster")
  parser.add_argument("--recycle", type=int, default=400,
                      help="restart each worker after this many cases")
  parser.add_argument("--max-edits", type=int, default=3)
  parser.add_argument("--seeds", default=None,
                      help="comma-separated seed programs (default: all)")
  parser.add_argument("--seed-cache", default=None,
                      help="directory to read/write seed files from/to")
  parser.add_argument("--write-case", type=int, default=None, metavar="I",
                      help="only write case I of this seed to OUT and "
                           "print its edits (no run)")
  parser.add_argument("--mutations", default=None,
                      help="comma-separated structural mutations that every "
                           "case starts with (default: 30%% of the cases "
                           "start with any); e.g. rule-retype,rule-key,"
                           "dim-blowup")
  parser.add_argument("--quiet", action="store_true")
  args = parser.parse_args(argv)
  only = args.seeds.split(",") if args.seeds else None
  mutations = tuple(args.mutations.split(",")) if args.mutations else None

  if args.write_case is not None:
    import os  # pylint: disable=import-outside-toplevel
    from tests.fuzz import mutate, seeds  # pylint: disable=import-outside-toplevel
    files, _ = seeds.build(only, cache_dir=args.seed_cache)
    name, data, edits, _ = mutate.CaseFactory(
        files, args.seed, args.max_edits,
        mutations=mutations).make(args.write_case)
    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, f"case-{args.write_case}.jaxpr")
    with open(path, "wb") as f:
      f.write(data)
    print(f"{path}: seed {name}")
    for e in edits:
      print(f"  {e}")
    print("note: case numbering assumes no seed was dropped by the "
          "campaign's baseline run")
    return 0

  from tests.fuzz import runner  # pylint: disable=import-outside-toplevel
  command = "python -m tests.fuzz " + " ".join(
      shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv))
  summary = runner.run_campaign(
      cases=args.cases, seed=args.seed, first=args.first,
      workers=args.workers, out=args.out,
      timeout=args.timeout, mem_gib=args.mem_gib, keep=args.keep,
      recycle=args.recycle, seed_cache=args.seed_cache, only_seeds=only,
      max_edits=args.max_edits, progress=not args.quiet, command=command,
      mutations=mutations)
  if args.quiet:
    print(runner.format_summary(summary))
  return 1 if summary["failure_count"] else 0


if __name__ == "__main__":
  sys.exit(main())
