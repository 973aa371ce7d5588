"""Prints the writer x reader table of an exchange directory.

    python -m tests.compat.exchange.table OUTDIR [--releases 0.10,0.11,0.12]

Rows are writer releases, columns reader releases; each cell is
"passed/total", where total counts every case the writer meant to write
(a case it failed to write fails in every column of its row) and
expected failures (tests/compat/exchange/expected.py) that failed as expected
count as passed. "(n poly)" counts the passes whose reader rebuilt a
primitive it lacks from its own (jaxpr_io/compat/polyfills.py). Below the table: every failure by name with its error.

Exit status 1 if any failure is unexpected, if a writer or reader could not
run at all, if a reader's results are missing, or if a release named by
--releases has no set or no results; 0 otherwise.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib
import sys

from tests.compat.exchange import versions
from tests.compat.exchange import expected as expected_lib


@dataclasses.dataclass
class Outcome:
  """One case in one cell.

  ok: passed, or failed exactly as expected.
  expected: the expected-failure text, when the case is listed.
  text: the error, for failures ("" when it passed).
  notes: for a pass, the elements its comparison left out, and why.
  polyfilled: the primitives the reader rebuilt from its own
    (jaxpr_io/compat/polyfills.py): flagged in the table.
  """
  ok: bool
  expected: str | None
  text: str
  notes: list[str] = dataclasses.field(default_factory=list)
  polyfilled: list[str] = dataclasses.field(default_factory=list)


def _error_text(record: dict) -> str:
  """'status at stage: Type: message', then the innermost frames."""
  message = record.get("message", "")
  if len(message) > 800:
    message = message[:800] + " [...]"
  lines = [f"{record['status']} at {record.get('stage')}: "
           f"{record.get('error_type')}: {message}"]
  lines += record.get("where", [])
  return "\n      ".join("\n      ".join(lines).splitlines())


def judge(writer: str, reader: str, case: str, record: dict | None
          ) -> Outcome:
  """The outcome of `case` from `writer` read by `reader`. `record` is the
  reader's result ({"status": ...}), a write failure, or None when the
  reader has no result for it."""
  want = expected_lib.expected_failure(versions.release_series(writer),
                                       versions.release_series(reader), case)
  if record is None:
    return Outcome(False, want, "no result: the reader did not get to it")
  if record["status"] == "pass":
    return Outcome(True, want, "", record.get("notes", []),
                   record.get("polyfilled", []))
  text = _error_text(record)
  ok = (want is not None and record["status"] == "error"
        and record.get("is_format_error", False)
        and want in record.get("message", ""))
  return Outcome(ok, want, text)


def _load_json(path: pathlib.Path) -> dict | None:
  return json.loads(path.read_text()) if path.exists() else None


def collect(outdir: pathlib.Path) -> tuple[dict, dict]:
  """({writer version: manifest}, {reader version: results}) in OUTDIR."""
  manifests = {}
  for path in outdir.glob("*/manifest.json"):
    m = json.loads(path.read_text())
    manifests[m["jax_version"]] = m
  results = {}
  for path in outdir.glob("results-*.json"):
    r = json.loads(path.read_text())
    results[r["reader"]["jax_version"]] = r
  return manifests, results


def cell(manifest: dict, results: dict | None, reader: str
         ) -> dict[str, Outcome]:
  """{case: Outcome} for one writer's set read by `reader`."""
  writer = manifest["jax_version"]
  read = ((results or {}).get("writers") or {}).get(writer) or {}
  read_cases = read.get("cases", {})
  outcomes = {}
  for case, entry in manifest["cases"].items():
    if entry["status"] == "skipped":
      continue
    if entry["status"] == "write_failed":
      record = dict(entry, status="write_failed")
    else:
      record = read_cases.get(case)
    outcomes[case] = judge(writer, reader, case, record)
  return outcomes


_COLUMN = 20


def _cell_text(outcomes: dict[str, Outcome]) -> str:
  """'passed/total', counting expected failures as passed, with their
  number, and the passes that needed polyfills: '170/170',
  '168/170 (2 xfail)' or '170/170 (2 poly)'."""
  ok = sum(o.ok for o in outcomes.values())
  xfail = sum(o.ok and bool(o.text) for o in outcomes.values())
  poly = sum(o.ok and not o.text and bool(o.polyfilled)
             for o in outcomes.values())
  flags = [f"{xfail} xfail"] * bool(xfail) + [f"{poly} poly"] * bool(poly)
  return f"{ok}/{len(outcomes)}" + (f" ({', '.join(flags)})" if flags
                                    else "")


def _problems(manifests: dict, results: dict,
              releases: list[str] | None) -> list[str]:
  """Releases missing from OUTDIR, and writers or readers that could not
  run at all."""
  problems = []
  for series in releases or []:
    for kind, have in (("writer set", manifests), ("reader results", results)):
      if not any(versions.release_series(v) == series for v in have):
        problems.append(f"no {kind} for release {series}")
  for kind, runs in (("writer", manifests), ("reader", results)):
    for v, run in runs.items():
      if run.get("fatal"):
        problems.append(f"{kind} {v} could not run: "
                        + _error_text(dict(run["fatal"], status="fatal")))
  return problems


@dataclasses.dataclass
class Report:
  """What the table prints below the grid, one line per case and cell."""
  failures: list[str] = dataclasses.field(default_factory=list)
  expected: list[str] = dataclasses.field(default_factory=list)
  stale: list[str] = dataclasses.field(default_factory=list)
  notes: list[str] = dataclasses.field(default_factory=list)
  polyfilled: list[str] = dataclasses.field(default_factory=list)
  problems: list[str] = dataclasses.field(default_factory=list)

  def add(self, w: str, r: str, case: str, o: Outcome) -> None:
    where = f"  {w} -> {r}  {case}"
    self.notes += [f"{where}: {n}" for n in o.notes]
    if o.polyfilled and not o.text:
      self.polyfilled.append(f"{where}: {', '.join(o.polyfilled)}")
    if o.expected and not o.text:
      self.stale.append(where)
    if o.text and o.ok:
      self.expected.append(f"{where}: {o.text}")
    elif o.text:
      want = (f" [expected a FormatError containing {o.expected!r}]"
              if o.expected else "")
      self.failures.append(f"{where}{want}: {o.text}")

  def lines(self) -> list[str]:
    out = [f"Unexpected failures ({len(self.failures)}):" if self.failures
           else "Unexpected failures: none"]
    out += self.failures
    sections = (
        ("Expected failures", self.expected),
        ("Listed in tests/compat/exchange/expected.py but passed (remove them "
         "there)", self.stale),
        ("Passed with polyfills (jaxpr_io/compat/polyfills.py: not "
         "bit-identical; compared with the cross-release tolerances)",
         self.polyfilled),
        ("Passed with notes", self.notes),
        ("Problems", [f"  {p}" for p in self.problems]))
    for title, items in sections:
      if items:
        out += [f"{title} ({len(items)}):"] + items
    return out


def render(outdir: pathlib.Path, releases: list[str] | None = None
           ) -> tuple[str, bool]:
  """(the report text, whether everything passed or failed as expected)."""
  manifests, results = collect(outdir)
  writers = sorted(manifests, key=versions.version_key)
  readers = sorted(results, key=versions.version_key)
  report = Report(problems=_problems(manifests, results, releases))
  width = max([len("writer \\ reader")] + [len(v) for v in writers]) + 2
  grid = ["writer \\ reader".ljust(width)
          + "".join(v.rjust(_COLUMN) for v in readers)]
  for w in writers:
    row = w.ljust(width)
    for r in readers:
      if w not in results[r].get("writers", {}):
        # One line, not one per case: the reader never got to this set.
        row += "not read".rjust(_COLUMN)
        report.problems.append(f"reader {r} has no results for writer "
                               f"{w}'s set")
        continue
      outcomes = cell(manifests[w], results[r], r)
      row += _cell_text(outcomes).rjust(_COLUMN)
      for case, o in outcomes.items():
        report.add(w, r, case, o)
    grid.append(row)
  ok = not report.failures and not report.problems
  return "\n".join(grid + [""] + report.lines()), ok


def main(argv: list[str] | None = None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("outdir", type=pathlib.Path)
  parser.add_argument("--releases",
                      help="comma-separated release series that must have "
                           "both a set and results, e.g. 0.10,0.11,0.12")
  ns = parser.parse_args(argv)
  text, ok = render(ns.outdir,
                    ns.releases.split(",") if ns.releases else None)
  print(text)
  return 0 if ok else 1


if __name__ == "__main__":
  sys.exit(main())
