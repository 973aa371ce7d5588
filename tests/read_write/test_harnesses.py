"""Round trip of JAX's own primitive test suite.

Every harness in `jax._src.internal_test_util.test_harnesses.all_harnesses`
that traces on the CPU, with and without `jax_enable_x64`: the file must
load as a user loads it (`loads(data, check=True)`, untrusted: every param
screened, the program type-checked and compiled), and the loaded program
must print like the original, re-dump to the same bytes and compute
bit-identical results.

CI runs a deterministic sample (every harness whose stable hash modulo
JAXPR_IO_HARNESS_SAMPLE, default 25, is JAXPR_IO_HARNESS_SHARD, default 0,
plus the first of each group). The whole suite (5,483 harnesses without x64
and 7,414 with it):

    JAXPR_IO_HARNESS_SAMPLE=1 python -m pytest tests/read_write/test_harnesses.py -q

or in N pieces (shards 0 to N-1; on several machines, or one at a time on a
busy one): JAXPR_IO_HARNESS_SAMPLE=N JAXPR_IO_HARNESS_SHARD=k.
"""

from __future__ import annotations

import os
import zlib

import jax
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import compat
from tests.support import harness_list
from tests.support import transform_refusal
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip

SAMPLE = int(os.environ.get("JAXPR_IO_HARNESS_SAMPLE", "25"))
SHARD = int(os.environ.get("JAXPR_IO_HARNESS_SHARD", "0"))


_harnesses = harness_list.cpu_harnesses


def _cases():
  seen_groups = set()
  cases = []
  for x64 in (False, True):
    # In name order: the suite's own order varies with the hash seed, and
    # the first harness of each group must be the same in every process
    # (pytest-xdist's workers collect separately).
    for h in sorted(_harnesses(x64), key=lambda h: h.fullname):
      picked = zlib.crc32(h.fullname.encode()) % SAMPLE == SHARD
      first_of_group = (h.group_name, x64) not in seen_groups
      if picked or first_of_group:
        seen_groups.add((h.group_name, x64))
        cases.append(pytest.param(h, x64, id=f"{h.fullname}-x64={x64}"))
  return cases


@pytest.mark.parametrize("harness,x64", _cases())
def test_harness_roundtrip(harness, x64):
  with jax.enable_x64(x64):
    args = harness.dyn_args_maker(np.random.RandomState(0))
    try:
      closed = jax.make_jaxpr(harness.dyn_fun)(*args)
    except Exception as e:  # pylint: disable=broad-except
      pytest.skip(f"JAX itself does not trace this harness: {e}")
    try:
      loaded = assert_roundtrip(closed, as_user=True)
    except jaxpr_io.FormatError as e:
      own = transform_refusal.refused(e)
      if own is None:
        raise
      # JAX's own transformation of the harness fails alike.
      transform_refusal.assert_transform_fails(
          compat.jaxpr_as_fun(closed), args, own[1], own[0])
      loaded = assert_roundtrip(closed, check=False)
    expected = jax.jit(compat.jaxpr_as_fun(closed))(*args)
    actual = jax.jit(compat.jaxpr_as_fun(loaded.closed_jaxpr))(*args)
    assert_bit_identical(actual, expected)

