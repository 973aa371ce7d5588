"""The cost model (jaxpr_io/safety/costs.py): its table in
docs/trust-model.md is the registry's, and its counts are those of the trees
JAX builds.

tests/hostile/test_expansion.py crafts the files that the model refuses and
runs them in subprocesses with a memory limit; these tests check the model's
pieces in-process.
"""

import os
import re

import pytest

from jaxpr_io.safety import costs
from tests.support import paths

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

ROOT = paths.ROOT


def test_docs_cost_table_matches_the_registry():
  with open(os.path.join(ROOT, "docs", "trust-model.md")) as f:
    page = f.read()
  assert "\n## Cost model\n" in page
  table = re.search(r"<!-- cost-table -->\n(.*?)<!-- /cost-table -->",
                    page, re.S)
  assert table is not None
  assert table.group(1) == costs.cost_table()
  rows = table.group(1).splitlines()[2:]
  assert [row.split(" | ")[0].lstrip("| ") for row in rows] == list(
      costs.QUANTITIES)


def test_a_quantity_is_registered_once():
  name = next(iter(costs.QUANTITIES))
  with pytest.raises(ValueError, match="twice"):
    costs.register_quantity(name=name, counted="x", limit="y")


def test_a_cell_cannot_break_the_table():
  with pytest.raises(ValueError, match="cannot hold"):
    costs.register_quantity(name="a | b", counted="x", limit="y")
  assert "a | b" not in costs.QUANTITIES
