"""JAX's shape-polymorphism harnesses (`PolyHarness`), fetched at run time.

The harness list is JAX's, not this project's: it is never committed. JAX's
`tests/shape_poly_test.py` is not in any package a registry serves (the jax
sdist on PyPI ships no `tests/`), but its predecessor is: the jax sdists up
to 0.5.0 ship `jax/experimental/jax2tf/tests/shape_poly_test.py`, the same
`PolyHarness` suite as jax2tf ran it (the harness list that
`tests/shape_poly_test.py` grew from). `fetch` downloads that sdist with
pip (`pip download jax==0.5.0 --no-binary :all: --no-deps`) into a cache
directory and extracts the three files the module needs; `--source` takes
a local copy of either file instead (e.g. a JAX checkout's
`tests/shape_poly_test.py`).

`harnesses` imports the module, as JAX's own test runner would, and returns
its flattened list. The jax2tf flavour imports TensorFlow (installed by
the `test-full` extra) and a helper module of jax2tf's tests whose
TensorFlow-side utilities the list does not use: a stand-in replaces it.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
import sys
import tarfile
import types

SDIST_VERSION = "0.5.0"
_MEMBER = "jax-{v}/jax/experimental/jax2tf/tests/{name}"
_FILES = ("shape_poly_test.py", "jax2tf_limitations.py", "__init__.py")
_PACKAGE = "jax.experimental.jax2tf.tests"


def default_cache() -> pathlib.Path:
  return pathlib.Path(os.environ.get(
      "JAXPR_IO_SHAPE_POLY_CACHE",
      pathlib.Path(__file__).resolve().parents[2] / "build" / "shape_poly"))


def fetch(cache: pathlib.Path) -> pathlib.Path:
  """The directory holding the suite's files, downloading them once."""
  target = cache / f"jax-{SDIST_VERSION}"
  if all((target / name).exists() for name in _FILES):
    return target
  cache.mkdir(parents=True, exist_ok=True)
  sdist = cache / f"jax-{SDIST_VERSION}.tar.gz"
  if not sdist.exists():
    subprocess.run(
        [sys.executable, "-m", "pip", "download", f"jax=={SDIST_VERSION}",
         "--no-binary", ":all:", "--no-deps", "-q", "-d", str(cache)],
        check=True)
  target.mkdir(exist_ok=True)
  with tarfile.open(sdist) as tar:
    for name in _FILES:
      member = tar.getmember(_MEMBER.format(v=SDIST_VERSION, name=name))
      data = tar.extractfile(member).read()
      (target / name).write_bytes(data)
  return target


def _install_jax2tf_stand_ins(directory: pathlib.Path) -> None:
  """Makes `jax.experimental.jax2tf.tests` importable from `directory`,
  with a stand-in for its `tf_test_util` (only its test-case base class is
  needed to define the module's classes)."""
  from jax._src import test_util as jtu  # pylint: disable=g-import-not-at-top
  package = types.ModuleType(_PACKAGE)
  package.__path__ = [str(directory)]
  sys.modules[_PACKAGE] = package
  util = types.ModuleType(f"{_PACKAGE}.tf_test_util")
  util.JaxToTfTestCase = jtu.JaxTestCase
  sys.modules[util.__name__] = util
  package.tf_test_util = util
  # jax2tf's table of its own limitations, per primitive harness group,
  # asserts that it knows every group; JAX's primitive harnesses (of the
  # installed JAX) have groups added since (0.12: `exp2`), which have none.
  limitations = importlib.import_module(f"{_PACKAGE}.jax2tf_limitations")
  table = limitations.Jax2TfLimitation
  known = table.limitations_for_harness.__func__

  def limitations_for_harness(cls, harness):
    try:
      return known(cls, harness)
    except AssertionError:
      return []
  table.limitations_for_harness = classmethod(limitations_for_harness)


def load_module(path: pathlib.Path):
  """Imports the harness module at `path` (either flavour)."""
  if "jax2tf" in path.read_text()[:4000]:
    _install_jax2tf_stand_ins(path.parent)
  spec = importlib.util.spec_from_file_location("jax_shape_poly_test", path)
  module = importlib.util.module_from_spec(spec)
  argv = sys.argv
  sys.argv = argv[:1]  # the module parses flags with absl
  try:
    spec.loader.exec_module(module)
  finally:
    sys.argv = argv
  return module


def harnesses(source: str | None = None) -> list:
  """The flattened `PolyHarness` list (vmap harnesses included)."""
  path = (pathlib.Path(source) if source
          else fetch(default_cache()) / "shape_poly_test.py")
  module = load_module(path)
  return module._flatten_harnesses(module._POLY_SHAPE_TEST_HARNESSES)  # pylint: disable=protected-access
