"""Fixture params that pytest-xdist keeps on one worker.

A module-scoped fixture with params (a program traced, saved and loaded
once, then checked under jit, grad, vmap, ...) is set up again on every
worker that runs one of its tests. Under `--dist loadgroup` (CI and the
README's command) the tests of one param share an `xdist_group`, so each
program is built once.
"""

from __future__ import annotations

import pytest


def grouped(values, prefix: str) -> list:
  """`values` as fixture params, each in its own xdist group."""
  return [pytest.param(v, id=str(v),
                       marks=pytest.mark.xdist_group(f"{prefix}:{v}"))
          for v in values]
