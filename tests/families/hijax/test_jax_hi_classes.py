"""Every hi primitive class that the running JAX defines is in
jaxpr_io/families/hijax/jax_classes.py's table, enumerated from JAX's
source (compat/hi_prim_census.py: every module of jax._src that names a
base class, imported, and every subclass of the bases walked). A release
that adds a class fails here until the table says what jaxpr_io does with
it; a class the table stores must be the adapter's, by the same name.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io.compat import hi_prim_census
from jaxpr_io.families.hijax import jax_classes


@pytest.fixture(scope="module")
def defined():
  classes, failed = hi_prim_census.defined_classes()
  assert not failed, f"modules of JAX that did not import: {failed}"
  return classes


def test_every_class_jax_defines_is_in_the_table(defined):
  # Not vacuous: every supported release defines the jax.numpy classes.
  assert "jax._src.numpy.hijax.SearchSorted" in defined, sorted(defined)
  missing = sorted(set(defined) - set(jax_classes.CLASSES))
  assert not missing, (
      f"hi primitive classes of JAX {jax.__version__} that "
      f"jaxpr_io/families/hijax/jax_classes.py does not list: {missing}; "
      "store each (families/hijax/prims.py) or list why it is refused")


def test_stored_classes_are_the_adapters(defined):
  stored = {entry.detail: name for name, entry in
            jax_classes.CLASSES.items() if entry.kind == "stored"}
  for name, cls in compat.ADAPTER.hi_prim_classes.items():
    # The adapter's table holds JAX's own classes, listed as stored.
    assert stored.get(name) == hi_prim_census.qualified_name(cls), name
    assert defined[stored[name]] is cls
  for name, cls in defined.items():
    entry = jax_classes.CLASSES[name]
    if entry.kind == "stored":
      assert compat.ADAPTER.hi_prim_classes[entry.detail] is cls, name
    elif entry.kind == "primitive":
      # 0.10's HiPrimitive: a primitive, bound by name.
      assert issubclass(cls, compat.Primitive), name
    else:
      assert entry.kind == "refused" and len(entry.detail) > 40, name


@pytest.mark.skipif(
    "jax._src.hijax.VmapOf" not in hi_prim_census.defined_classes()[0]
    or "jax.lax.CustomRoot" not in compat.ADAPTER.hi_prim_classes,
    reason="this JAX's custom_root batches itself (0.12) or binds no hi "
           "primitive (0.10)")
def test_a_refused_class_is_refused_with_its_reason():
  # JAX 0.11 batches CustomRoot as VmapOf(CustomRoot, ...), which the
  # table refuses.
  root = lambda x: lax.custom_root(lambda y: y * y - x, 1.0,
                                   lambda g, y: y, lambda g, y: y / 2.0)
  prog = jaxpr_io.trace(jax.vmap(root), jnp.ones(3, np.float32))
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"jax._src.hijax.VmapOf is JAX's own, but "
                           r"jaxpr_io does not store it: not stored yet: it "
                           r"is the batch of another hi primitive"):
    jaxpr_io.dumps(prog)
