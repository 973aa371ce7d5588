"""The committed coverage page (docs/runtime-coverage.md, written by
`python -m tests.support.runtime_coverage --write docs/runtime-coverage.md`)
agrees with a fresh measurement of a small sample, and its summary, shown
in docs/serving.md, is the one its rows give.

The sample: the first harness case of a primitive every runtime accepts
(`sin`) and of the first primitive the page says ONNX refuses, measured in
StableHLO and ONNX (the two cheap runtimes; the page was generated with the
same code for all four).
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


def test_summary_is_the_pages_own_and_serving_shows_it():
  page_summary = coverage.summary_from_page(PAGE)
  assert "\n".join(page_summary) in PAGE
  assert "\n".join(page_summary) in (DOCS / "serving.md").read_text()


def test_page_covers_the_harness_groups_and_zoos():
  prims, zoo = coverage.parse_page(PAGE)
  assert len(prims) > 100 and len(zoo) > 20
  assert prims["sin"][1] == dict.fromkeys(coverage.RUNTIMES, "yes")


def _first_case(group):
  for name, g, h in coverage.harness_programs():
    if g == group:
      return lambda: coverage._harness_case(h)  # pylint: disable=protected-access
  raise AssertionError(f"no harness case of {group}")


def test_a_fresh_measurement_agrees_with_the_page():
  if not os.environ.get("JAXPR_IO_REQUIRE_RUNTIMES"):
    pytest.importorskip("jax2onnx")
  prims, _ = coverage.parse_page(PAGE)
  refused = sorted(g for g, (_, cells) in prims.items()
                   if cells["ONNX"] == "no" and cells["StableHLO"] == "yes")
  assert refused, "the page lists no primitive ONNX refuses"
  for group in ("sin", refused[0]):
    measured = coverage.case_result("harness", group, _first_case(group),
                                    runtimes=("StableHLO", "ONNX"))
    for runtime in ("StableHLO", "ONNX"):
      cell = prims[group][1][runtime]
      if cell in ("yes", "no"):
        assert (measured[runtime] == "ok") == (cell == "yes"), (
            group, runtime, measured[runtime])
