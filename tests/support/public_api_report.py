"""Summary of a public-API sweep's log (`JAXPR_IO_API_SWEEP_LOG`, one JSON
line per call: tests/read_write/test_public_api_sweep.py):

    python -m tests.support.public_api_report /tmp/api.jsonl

prints the count of each outcome (a call logged more than once counts by
its last line), then every failure grouped by its cause
(the error with the equation's place taken out), each with the calls
(function, dtype, variant) that hit it.
"""

from __future__ import annotations

import collections
import json
import re
import sys

# The place in a message ("jaxpr 1: equation 9 (conj)", "equation 0 (jit),
# param 'jaxpr': " nested to any depth) differs between calls that fail for
# one cause.
_PLACE = re.compile(r"jaxpr \d+: equation \d+ |"
                    r"(equation \d+ \(\w+\), param '\w+': )+")
_PREFIX = re.compile(r"^.*?just wrote \(.*?\): <bytes>: ")


def cause(error: str) -> str:
  first = error.splitlines()[0] if error else ""
  return _PLACE.sub("", _PREFIX.sub("", first))[:300]


def summarize(lines) -> str:
  # A call run again (after a fix) counts by its last run.
  last = {}
  for line in lines:
    if line.strip():
      r = json.loads(line)
      last[(r["function"], r["dtype"], r["variant"])] = r
  records = list(last.values())
  outcomes = collections.Counter(r["outcome"] for r in records)
  functions = {r["function"] for r in records if r["outcome"] == "failed"}
  out = [", ".join(f"{k}: {v}" for k, v in sorted(outcomes.items()))
         + f"; calls {len(records)}, failing functions {len(functions)}"]
  by_cause = collections.defaultdict(list)
  for r in records:
    if r["outcome"] == "failed":
      call = f"{r['function']} {r['dtype']}" + (
          f" {r['variant']}" if r["variant"] else "")
      by_cause[cause(r["error"])].append(call)
  for why, calls in sorted(by_cause.items(), key=lambda kv: -len(kv[1])):
    out.append(f"\n{len(calls)} x {why}\n    " + "\n    ".join(calls))
  return "\n".join(out)


if __name__ == "__main__":
  with open(sys.argv[1], encoding="utf-8") as f:
    print(summarize(f))
