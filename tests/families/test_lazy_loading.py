"""Primitive families load when a program or a file needs them, not when
jaxpr_io is imported (jaxpr_io/families/__init__.py).

Each check runs in a fresh process: in this one, other tests have loaded
every family already.
"""

from __future__ import annotations

import glob
import json
import os

import jax
import pytest

import jaxpr_io
from jaxpr_io import families
from tests.support import paths
from tests.support.roundtrip import run_fresh_python

# JAX modules that `import jax` does not import and that only programs with
# kernels, sparse arrays or checks need.
_HEAVY_JAX_MODULES = ("jax._src.pallas.core", "jax.experimental.sparse",
                      "jax._src.checkify", "jax.experimental.mosaic.gpu",
                      "jax._src.thunky.thunky")

_REPORT = """
import json, sys
import jaxpr_io
from jaxpr_io import families
def report(**extra):
  print(json.dumps(dict(
      families=sorted(families.loaded()),
      heavy=[m for m in {heavy!r} if m in sys.modules], **extra)))
""".format(heavy=_HEAVY_JAX_MODULES)

# The golden files this release wrote in the current format version: a
# fresh process must load each and re-dump it to the file's own bytes.
_CURRENT = sorted(glob.glob(os.path.join(
    paths.GOLDEN, f"v{jaxpr_io.FORMAT_VERSION}", f"jax-{jax.__version__}",
    "*.jaxpr")))


def _run(code: str, *args: str) -> dict:
  proc = run_fresh_python(_REPORT + code, *args)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.strip().splitlines()[-1])


def test_import_loads_no_family_and_no_kernel_module():
  out = _run("report()")
  assert out == {"families": [], "heavy": []}


def test_a_plain_program_loads_only_the_core_families():
  out = _run("""
import jax.numpy as jnp
prog = jaxpr_io.trace(lambda w, x: jnp.tanh(x @ w).sum(), jnp.ones((3, 2)),
                      jnp.ones((4, 3)))
again = jaxpr_io.loads(jaxpr_io.dumps(prog))
report(same=str(again) == str(prog))
""")
  assert out["same"]
  assert out["families"] == sorted(families.CORE)
  assert out["heavy"] == []


def test_specializing_a_traced_program_loads_the_core_families():
  # A program never dumped or loaded may hold objects that a family
  # specializes (jax 0.11+'s nonzero hi primitive in tril_indices(n)).
  out = _run("""
import jax, numpy as np
import jax.numpy as jnp
n, = jax.export.symbolic_shape("n")
f = lambda x: x[jnp.tril_indices(x.shape[0])]
prog = jaxpr_io.trace(f, jax.ShapeDtypeStruct((n, n), jnp.float32))
before = sorted(families.loaded())
x = np.arange(9, dtype=np.float32).reshape(3, 3)
report(before=before, same=np.array_equal(prog(x), f(x)))
""")
  assert out["before"] == [] and out["same"]
  assert out["families"] == sorted(families.CORE)


def test_a_kernel_program_loads_the_pallas_family_when_written():
  out = _run("""
import jax, jax.numpy as jnp
from jax.experimental import pallas as pl
def add_one(x_ref, o_ref):
  o_ref[...] = x_ref[...] + 1.0
def f(x):
  return pl.pallas_call(add_one, out_shape=jax.ShapeDtypeStruct(x.shape,
                        x.dtype), interpret=True)(x)
prog = jaxpr_io.trace(f, jnp.ones((8, 128), jnp.float32))
data = jaxpr_io.dumps(prog)
report(same=jaxpr_io.dumps(jaxpr_io.loads(data)) == data)
""")
  assert out["same"]
  assert "pallas.core" in out["families"]


@pytest.mark.skipif(not _CURRENT, reason=f"no golden files of the current "
                    f"format version written by jax {jax.__version__}")
@pytest.mark.parametrize("path", _CURRENT, ids=os.path.basename)
def test_a_fresh_process_reads_a_golden_file_and_redumps_its_bytes(path):
  """Whatever families the file needs load as the reader meets them."""
  out = _run("""
import sys
data = open(sys.argv[1], "rb").read()
prog = jaxpr_io.loads(data)
report(same=jaxpr_io.dumps(prog) == data)
""", path)
  assert out["same"], path
  if os.path.basename(path) == "pallas_kernel.jaxpr":
    assert "pallas.core" in out["families"]
