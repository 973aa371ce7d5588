"""What `import jaxpr_io` costs on top of `import jax`, and what the first
`loads` of a plain file and of a Pallas kernel file add (the families they
load), each in fresh processes.

    python benchmarks/bench_import.py [--repeats 15]

Prints, per measure, the minimum and median over the repeats (seconds); the
target for `import jaxpr_io - import jax` is at most 0.15 s (issue 26).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_CHILD = r"""
import json, sys, time
t0 = time.perf_counter()
import jax
t1 = time.perf_counter()
import jaxpr_io
t2 = time.perf_counter()
out = {"import jax": t1 - t0, "import jaxpr_io - import jax": t2 - t1}
for label, path in (("first loads, plain file", sys.argv[1]),
                    ("first loads, Pallas kernel file", sys.argv[2])):
  if path:
    data = open(path, "rb").read()
    t = time.perf_counter()
    jaxpr_io.loads(data)
    out[label] = time.perf_counter() - t
    break  # one file per process: the second would find families loaded
print(json.dumps(out))
"""


def _golden(name: str) -> str:
  import jax  # pylint: disable=g-import-not-at-top
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  found = glob.glob(os.path.join(
      ROOT, "tests", "golden", f"v{jaxpr_io.FORMAT_VERSION}",
      f"jax-{jax.__version__}", f"{name}.jaxpr"))
  return found[0] if found else ""


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--repeats", type=int, default=15)
  args = parser.parse_args(argv)
  plain, kernel = _golden("mlp_constants"), _golden("pallas_kernel")
  runs: dict[str, list[float]] = {}
  for i in range(args.repeats):
    # Alternate the file so each process measures one first load.
    files = (plain, "") if i % 2 == 0 else ("", kernel)
    proc = subprocess.run([sys.executable, "-c", _CHILD, *files],
                          capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=ROOT))
    for key, value in json.loads(proc.stdout.splitlines()[-1]).items():
      runs.setdefault(key, []).append(value)
  import jax  # pylint: disable=g-import-not-at-top
  print(f"python {sys.version.split()[0]}, jax {jax.__version__}, "
        f"{args.repeats} fresh processes")
  for key, values in runs.items():
    print(f"  {key:<34} min {min(values):.3f} s   median "
          f"{statistics.median(values):.3f} s   ({len(values)} runs)")
  return 0


if __name__ == "__main__":
  sys.exit(main())
