"""The cross-release exchange (tests/compat/exchange/): files move between JAX
0.10, 0.11 and 0.12 in both directions.

`test_exchange_table` judges a finished exchange: set JAXPR_IO_EXCHANGE_DIR
to the OUTDIR of `tests/compat/exchange/run_all.sh` (skipped otherwise). Every
cell of the writer x reader table must pass, apart from the failures
listed in tests/compat/exchange/expected.py; the releases that must be present
are JAXPR_IO_EXCHANGE_RELEASES (default "0.10,0.11,0.12").

`test_self_exchange` needs nothing: it writes a sample of this release's
cases (every kind of case, a few harnesses and the small zoo programs) to a
temporary directory and reads them back in this process, where results
must be bit-identical.
"""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.compat.exchange import read, table, write

# Every kind of case, kept small: the full set is the exchange's job.
SELF_EXCHANGE_CASES = [
    "harness.abs", "harness.dot_general", "harness.scatter_add",
    "harness.sort", "harness.random_split", "harness.conv_general_dilated",
    "programs.*", "custom.*", "remat.*", "random.*", "sharding.*",
    "symbolic.*", "zoo.mixed_precision", "zoo.remat_scan_policy",
    "zoo.sharded", "zoo.sparse_cg",
]


def test_exchange_table():
  outdir = os.environ.get("JAXPR_IO_EXCHANGE_DIR")
  if not outdir:
    pytest.skip("set JAXPR_IO_EXCHANGE_DIR to the OUTDIR of "
                "tests/compat/exchange/run_all.sh")
  releases = os.environ.get("JAXPR_IO_EXCHANGE_RELEASES",
                            "0.10,0.11,0.12").split(",")
  text, ok = table.render(pathlib.Path(outdir), releases)
  assert ok, "\n" + text


def test_self_exchange(tmp_path):
  quiet = lambda *_: None
  manifest = write.write_all(tmp_path, SELF_EXCHANGE_CASES, log=quiet)
  assert manifest["fatal"] is None, manifest["fatal"]["traceback"]
  written = [n for n, e in manifest["cases"].items()
             if e["status"] == "written"]
  assert len(written) >= 30, sorted(manifest["cases"])
  results = read.read_all(tmp_path, SELF_EXCHANGE_CASES, log=quiet)
  assert results["fatal"] is None, results["fatal"]["traceback"]
  assert results["writers"][manifest["jax_version"]]["exact"]
  text, ok = table.render(tmp_path)
  assert ok, "\n" + text


@pytest.mark.once
def test_table_flags_polyfilled_passes():
  # A pass whose reader rebuilt a primitive from its own counts as passed
  # and is flagged in its cell and listed below the table.
  records = {"plain": {"status": "pass", "notes": []},
             "poly": {"status": "pass", "notes": [],
                      "polyfilled": ["log2"]}}
  outcomes = {case: table.judge("0.12.0.1", "0.10.2", case, record)
              for case, record in records.items()}
  assert table._cell_text(outcomes) == "2/2 (1 poly)"
  report = table.Report()
  for case, outcome in outcomes.items():
    report.add("0.12.0.1", "0.10.2", case, outcome)
  assert report.polyfilled == ["  0.12.0.1 -> 0.10.2  poly: log2"]
  assert any(line.startswith("Passed with polyfills") for line in
             report.lines())
