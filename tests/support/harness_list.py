"""JAX's own primitive harnesses that run on the CPU (no jaxpr_io needed).

`jax._src.internal_test_util.test_harnesses` builds its list from the x64
flag at import time, with dtype lists that test_util caches: a separate copy
of the module is executed under each setting (a copy, not a reload, so each
list keeps its own classes).
"""

from __future__ import annotations

import importlib.util

import jax
from jax._src import test_util as jtu
from jax._src.internal_test_util import test_harnesses


def cpu_harnesses(x64: bool) -> list:
  """Every harness of the suite that runs on the CPU, built under `x64`."""
  spec = importlib.util.find_spec(test_harnesses.__name__)
  module = importlib.util.module_from_spec(spec)
  saved = jtu.dtypes
  jtu.dtypes = type(saved)()
  try:
    with jax.enable_x64(x64):
      spec.loader.exec_module(module)
  finally:
    jtu.dtypes = saved
  return [h for h in module.all_harnesses if h.filter("cpu")]
