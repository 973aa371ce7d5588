"""Test-wide setup: 8 host CPU devices, so sharded programs (meshes,
shard_map, pmap) run on a machine without accelerators. Set before JAX
creates its backends, which happens lazily on first use."""

import os

import pytest

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                             _FLAG).strip()

# Keras 3 picks its backend when first imported, possibly by another library
# (tests/support/zoo2.py's keras3_mlp needs the JAX backend).
os.environ["KERAS_BACKEND"] = "jax"


@pytest.fixture(scope="session", autouse=True)
def read_back_every_write():
  """jaxpr_io's debug mode for the whole suite: every `dumps` and `save`
  reads its output back (jaxpr_io/api/program.py, `READ_BACK`), so no test
  program is written that the reader refuses. Through the environment, so
  that the fresh processes tests start check too; session-scoped, so that
  it is on before any module-scoped fixture writes. JAXPR_IO_READ_BACK=0
  in the environment switches it off (to time the suite without it)."""
  if "JAXPR_IO_READ_BACK" in os.environ:
    yield
    return
  os.environ["JAXPR_IO_READ_BACK"] = "1"
  yield
  del os.environ["JAXPR_IO_READ_BACK"]


# Primitive coverage (issue 12: "covered" means a test program that uses the
# primitive round-trips). With JAXPR_IO_COVERAGE=FILE, every program that
# jaxpr_io's reader rebuilds in this pytest process is walked, and at the end
# the census keys (tests/support/primitive_census.py) of the primitives it used are
# added to FILE, one per line. `python -m tests.support.primitive_census --coverage
# FILE` then names every storable primitive that no test round-tripped.
# Only programs read back count; programs in subprocesses are not seen.
_COVERAGE = os.environ.get("JAXPR_IO_COVERAGE")
_SEEN_PRIMITIVES: set = set()

if _COVERAGE:
  from jaxpr_io.read import reader as _reader
  from jaxpr_io.safety import validate as _validate

  _original_read = _reader.read

  def _recording_read(*args, **kwargs):
    result = _original_read(*args, **kwargs)
    for jaxpr in _validate.walk_jaxprs(result[0].jaxpr):
      _SEEN_PRIMITIVES.update(eqn.primitive for eqn in jaxpr.eqns)
    return result

  _reader.read = _recording_read


def pytest_sessionfinish(session, exitstatus):
  del session, exitstatus
  if not _COVERAGE:
    return
  from tests.support import primitive_census
  primitive_census.add_coverage(_COVERAGE, _SEEN_PRIMITIVES)
