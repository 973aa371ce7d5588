"""The public functions of `jax.numpy` (with `linalg` and `fft`),
`jax.scipy.special`, `jax.nn` and `jax.lax`, called as users call them on
float32, complex64, int32 and bool arrays (`tests/support/public_api.py`:
found by introspection, argument recipes where arrays alone do not do).

Every call that JAX traces and runs is traced with `jaxpr_io.trace`, written
with `dumps`, and loaded as a user loads a file (`loads(data, check=True)`,
untrusted); the loaded program must print like the original, re-dump to the
same bytes and compute bit-identical results (values of the same types for
the functions of `public_api.NONDETERMINISTIC`, whose original differs from
call to call). Calls that JAX itself refuses to trace or run are skipped
(JAX's limit, not jaxpr_io's).

CI runs a deterministic sample (every call with a stable hash that falls in
1/JAXPR_IO_API_SWEEP_SAMPLE, default 1/25, plus `MUST_RUN`). The whole
sweep, with one JSON line per call appended to a log (function, dtype,
variant, outcome, error):

    JAXPR_IO_API_SWEEP_SAMPLE=1 JAXPR_IO_API_SWEEP_LOG=/tmp/api.jsonl \\
        python -m pytest tests/read_write/test_public_api_sweep.py -q
"""

from __future__ import annotations

import json
import os
import zlib

import jax
import pytest

import jaxpr_io
from jaxpr_io import compat
from tests.support import public_api
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip

SAMPLE = int(os.environ.get("JAXPR_IO_API_SWEEP_SAMPLE", "25"))
LOG = os.environ.get("JAXPR_IO_API_SWEEP_LOG")

# Calls the sample always makes: the binding sites issue 37 found unloadable
# (params that a trace-made schema did not know), and one of each module.
MUST_RUN = frozenset({
    "jnp.conj-complex64",
    "jnp.std-complex64",
    "jnp.cbrt-float32",
    "jnp.linalg.eigh-complex64",
    "lax.ragged_dot-float32-preferred_element_type=float32",
    "lax.dot_general-int32-preferred_element_type=float32",
    "jnp.fft.hfft-complex64",
    "jax.scipy.special.gammaln-float32",
    "jax.nn.dot_product_attention-float32",
    "lax.scan-bool",
    # Fixed by issue 37's branches: a rule that calls its function again
    # with k + 1 (sinc on 0.10, i0 on 0.12), AccuracyMode (0.12), 0.12's
    # CustomRoot hi primitive.
    "jnp.sinc-float32",
    "jnp.i0-float32",
    "jax.scipy.special.erfcx-float32",
    "lax.custom_root-float32",
})


def _param(case):
  known = public_api.open_failure(case)
  marks = () if known is None else pytest.mark.xfail(reason=known[0],
                                                      strict=known[1])
  return pytest.param(case, id=case.id, marks=marks)


def _cases():
  return [_param(case) for case in public_api.cases()
          if zlib.crc32(case.id.encode()) % SAMPLE == 0
          or case.id in MUST_RUN]


def _record(case, outcome: str, error: BaseException | None = None) -> None:
  if LOG is None:
    return
  line = {"function": case.qualname, "dtype": case.dtype,
          "variant": case.variant, "outcome": outcome,
          "error": None if error is None else
                   f"{type(error).__name__}: {error}"[:2000]}
  with open(LOG, "a", encoding="utf-8") as f:
    f.write(json.dumps(line) + "\n")


def _traced(case):
  """(program, arrays, expected outputs) of the first candidate call that
  JAX traces and runs, or skips the case."""
  if case.id in public_api.JAX_ABORTS:
    why = public_api.JAX_ABORTS[case.id]
    _record(case, "refused by JAX", RuntimeError(why))
    pytest.skip(why)
  refusal = None
  for arrays, fun in public_api.candidates(case):
    try:
      program = jaxpr_io.trace(fun, *arrays)
      expected = jax.jit(compat.jaxpr_as_fun(program.closed_jaxpr))(*arrays)
    except Exception as e:  # pylint: disable=broad-except
      # The first refusal says most (later candidates take more arrays).
      refusal = refusal or e
      continue
    return program, arrays, expected
  _record(case, "refused by JAX", refusal)
  pytest.skip(f"JAX itself does not trace or run this call: "
              f"{type(refusal).__name__}: {refusal}")


def _types(outputs) -> list:
  return [(str(x.dtype), x.shape) for x in jax.tree_util.tree_leaves(outputs)]


def test_sample_holds_the_must_run_calls():
  """A must-run id that no longer names a call (a renamed variant, a
  function a release dropped) would silently leave the sample."""
  ids = {case.id for case in public_api.cases()}
  assert MUST_RUN <= ids, sorted(MUST_RUN - ids)


@pytest.mark.parametrize("case", _cases())
def test_public_function_roundtrip(case):
  program, arrays, expected = _traced(case)
  try:
    loaded = assert_roundtrip(program, as_user=True)
    actual = jax.jit(compat.jaxpr_as_fun(loaded.closed_jaxpr))(*arrays)
    if case.qualname in public_api.NONDETERMINISTIC:
      assert _types(actual) == _types(expected)
    else:
      assert_bit_identical(actual, expected)
  except Exception as e:
    _record(case, "failed", e)
    raise
  _record(case, "passed")
