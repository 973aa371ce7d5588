"""Test-wide setup: 8 host CPU devices, so sharded programs (meshes,
shard_map, pmap) run on a machine without accelerators. Set before JAX
creates its backends, which happens lazily on first use."""

import os
import shutil
import tempfile

import pytest

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                             _FLAG).strip()

# One XLA compilation cache per test run, in a fresh directory removed at
# the end. A loaded program lowers to the same HLO as its original, and many
# tests compile the same small programs, so this saves about a fifth of the
# suite's compile time. A hit needs identical HLO (JAX's cache key), so no
# comparison is weakened. Through the environment, so that pytest-xdist's
# workers and the fresh processes tests start share it;
# JAXPR_IO_TEST_COMPILE_CACHE=0 switches it off.
_OWN_CACHE = None
if ("JAX_COMPILATION_CACHE_DIR" not in os.environ
    and os.environ.get("JAXPR_IO_TEST_COMPILE_CACHE", "1") != "0"):
  _OWN_CACHE = tempfile.mkdtemp(prefix="jaxpr_io-tests-xla-cache-")
  os.environ["JAX_COMPILATION_CACHE_DIR"] = _OWN_CACHE
  os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"
  os.environ["JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES"] = "0"


def pytest_configure(config):
  del config
  # A plugin may have imported JAX before this file set the environment.
  if "JAX_COMPILATION_CACHE_DIR" in os.environ:
    import jax  # pylint: disable=g-import-not-at-top
    jax.config.update("jax_compilation_cache_dir",
                      os.environ["JAX_COMPILATION_CACHE_DIR"])
    for flag, kind in (("jax_persistent_cache_min_compile_time_secs", float),
                       ("jax_persistent_cache_min_entry_size_bytes", int)):
      value = os.environ.get(flag.upper())
      if value is not None:
        jax.config.update(flag, kind(value))


def pytest_unconfigure(config):
  del config
  if _OWN_CACHE is not None:
    shutil.rmtree(_OWN_CACHE, ignore_errors=True)


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
