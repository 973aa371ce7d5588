"""The committed coverage page (docs/runtime-coverage.md, written by
`python -m tests.support.runtime_coverage --write docs/runtime-coverage.md`)
agrees with a fresh measurement of a small sample, and its summary, shown
in docs/serving.md, is the one its rows give.

The sample: the first harness case of the first primitive (in name order)
the page says StableHLO and ONNX both accept, and of the first one it says
ONNX refuses, measured in StableHLO and ONNX (the two cheap runtimes; the
page was generated with the same code for all four).
"""

from __future__ import annotations

import os
import pathlib

import pytest

from tests.support import paths
from tests.support import runtime_coverage as coverage

# Generated under one release (the page says which): CI checks it there.
pytestmark = pytest.mark.once

DOCS = pathlib.Path(paths.ROOT) / "docs"
PAGE = (DOCS / "runtime-coverage.md").read_text()


def test_summary_is_the_pages_own_and_serving_and_readme_show_it():
  page_summary = coverage.summary_from_page(PAGE)
  assert "\n".join(page_summary) in PAGE
  assert "\n".join(page_summary) in (DOCS / "serving.md").read_text()
  readme = (DOCS.parent / "README.md").read_text()
  assert "\n".join(page_summary) in readme


def _first_case(group):
  for _, g, h in coverage.harness_programs():
    if g == group:
      return lambda: coverage._harness_case(h)  # pylint: disable=protected-access
  raise AssertionError(f"no harness case of {group}")


def test_a_fresh_measurement_agrees_with_the_page():
  if not os.environ.get("JAXPR_IO_REQUIRE_RUNTIMES"):
    pytest.importorskip("jax2onnx")
  prims, _ = coverage.parse_page(PAGE)
  both = [g for g, (_, c) in sorted(prims.items())
          if c["StableHLO"] == "yes" and c["ONNX"] == "yes"]
  refused = [g for g, (_, c) in sorted(prims.items())
             if c["StableHLO"] == "yes" and c["ONNX"] == "no"]
  assert both, "the page lists no primitive both runtimes accept"
  for group in both[:1] + refused[:1]:
    measured = coverage.case_result("harness", group, _first_case(group),
                                    runtimes=("StableHLO", "ONNX"))
    for runtime in ("StableHLO", "ONNX"):
      cell = prims[group][1][runtime]
      assert (measured[runtime] == "ok") == (cell == "yes"), (
          group, runtime, measured[runtime])
