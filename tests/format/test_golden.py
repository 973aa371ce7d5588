"""Golden files: every jaxpr_io, under every supported JAX release, must keep
reading the files of every earlier format version, written by every release
(tests/golden/v<N>/[jax-<version>/], by tests/golden/make_golden.py).

For each file: it loads with check=True, computes what the original function
computed on the stored inputs, and, when the loading JAX is the one that
wrote the file, prints exactly as the original did and (for the current
format version) re-dumps to identical bytes.
"""

from __future__ import annotations

import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.compat import hi_mutable as compat_hi_mutable
from tests.support import paths

GOLDEN = paths.GOLDEN
FILES = sorted(glob.glob(os.path.join(GOLDEN, "v*", "*.jaxpr"))
               + glob.glob(os.path.join(GOLDEN, "v*", "jax-*", "*.jaxpr")))
# The releases that write golden files from format version 2 on.
RELEASES = ("0.10.2", "0.11.2", "0.12.0.1")
# Cases of JAX 0.10's boxes and logs (format version 8), which releases
# without jax._src.hijax.Box refuse.
NEEDS_BOXES = frozenset({"hijax_boxes"})
# The argnums of the cases whose files store the original's gradient
# (tests/golden/make_golden.py's GRADS).
_GRADS = {"perturbed_flags": 0}


def _format_version(path):
  rel = os.path.relpath(path, GOLDEN)
  return int(rel.split(os.sep)[0][1:])


def test_every_format_version_has_golden_files():
  versions = {_format_version(f) for f in FILES}
  assert versions == set(range(jaxpr_io.format.version.OLDEST_READABLE_FORMAT_VERSION,
                               jaxpr_io.FORMAT_VERSION + 1))


def test_every_release_wrote_the_current_version():
  current = os.path.join(GOLDEN, f"v{jaxpr_io.FORMAT_VERSION}")
  writers = {os.path.basename(os.path.dirname(f)) for f in FILES
             if f.startswith(current + os.sep)}
  assert writers == {f"jax-{r}" for r in RELEASES}


@pytest.mark.parametrize("path", FILES, ids=lambda p: os.path.relpath(p, GOLDEN))
def test_golden_file(path):
  stem = path[:-len(".jaxpr")]
  if os.path.basename(stem) in NEEDS_BOXES and not compat_hi_mutable.SUPPORTED:
    # A JAX without boxes refuses the file, naming a release that has them.
    with pytest.raises(jaxpr_io.FormatError,
                       match=f"load it with JAX {compat_hi_mutable.RELEASE_WITH_BOXES}"):
      jaxpr_io.load(path, check=True)
    return
  prog = jaxpr_io.load(path, check=True)
  assert prog.metadata["golden"] == os.path.basename(stem)
  data = np.load(stem + ".npz", allow_pickle=False)
  n_in = prog.in_tree.num_leaves
  args, kwargs = jax.tree_util.tree_unflatten(
      prog.in_tree, [data[f"arg{i}"] for i in range(n_in)])
  outputs = jax.tree_util.tree_leaves(prog(*args, **kwargs))
  assert len(outputs) == prog.out_tree.num_leaves
  for i, out in enumerate(outputs):
    np.testing.assert_allclose(np.asarray(out, np.float64),
                               np.asarray(data[f"out{i}"], np.float64),
                               rtol=1e-6, atol=1e-6)
  grads = sorted((f for f in data.files if f.startswith("grad")),
                 key=lambda f: int(f[4:]))
  if grads:  # the original's gradient (make_golden.py's GRADS)
    argnums = _GRADS[os.path.basename(stem)]
    got = jax.tree_util.tree_leaves(jax.grad(lambda *a: sum(
        jnp.sum(o) for o in jax.tree_util.tree_leaves(prog(*a, **kwargs))),
                                             argnums=argnums)(*args))
    assert len(got) == len(grads)
    for g, name in zip(got, grads):
      np.testing.assert_allclose(np.asarray(g, np.float64),
                                 np.asarray(data[name], np.float64),
                                 rtol=1e-6, atol=1e-6)
  if prog.producer["jax_version"] != jax.__version__:
    return
  with open(stem + ".txt") as f:
    assert str(prog.closed_jaxpr) + "\n" == f.read()
  if prog.producer["format_version"] == jaxpr_io.FORMAT_VERSION:
    with open(path, "rb") as f:
      assert jaxpr_io.dumps(prog) == f.read()
