"""Primitive families whose params are not plain data.

Each module of this folder registers the codecs of one family (custom rules,
callbacks, Pallas, hijax, sparse, ...) with `jaxpr_io.codec.registry` when it
is imported; nothing else registers codecs. A family is imported when a
program or a file needs it, not when jaxpr_io is:

  * the *core* families hold params of primitives that `import jax` defines
    (custom_jvp, remat, callbacks, ...): they load on the first `dumps` or
    `loads` (`load_core`);
  * the *extension* families hold objects of JAX modules that `import jax`
    does not import (Pallas, sparse, checkify, thunky). The writer loads those
    whose JAX modules this process has imported (`load_imported`: a program
    holds such objects only then); the reader loads them all when a file
    names a primitive outside the modules already imported (`load_all`).

The lists are fixed: a file never names a module to import.
"""

from __future__ import annotations

import importlib
import sys
import threading

from jaxpr_io.codec import registry
from jaxpr_io.compat import specialize

# Core families, by module under jaxpr_io.families.
CORE = (
    "callbacks",
    "custom_rules.registrations",  # custom_jvp, custom_vjp
    "custom_rules.lin",
    "custom_rules.vmap",
    "custom_rules.partitioning",
    "hijax.prims",
    "libraries.codecs",
    "remat",
    "sharding",
    "jaxpr_callables",  # linear_call, remat_opt
)

# Extension families -> the JAX modules whose objects they store; a family
# loads for writing once any of them is imported.
EXTENSIONS = {
    "checkify": ("jax._src.checkify",),
    "pallas.core": ("jax._src.pallas.core",),
    "pallas.sparsecore": ("jax._src.pallas.mosaic.sc_core",),
    "sparse": ("jax.experimental.sparse",),
    "thunky": ("jax._src.thunky.thunky",),
}

_lock = threading.RLock()
_loaded: set[str] = set()


def _load(names) -> None:
  with _lock:
    for name in names:
      if name not in _loaded:
        importlib.import_module(f"{__name__}.{name}")
        _loaded.add(name)


def load_core() -> None:
  """Imports the core families (idempotent; cheap once done)."""
  if not _loaded.issuperset(CORE):
    _load(CORE)


def load_imported() -> None:
  """The core families, and the extension families whose JAX modules this
  process has imported: what a live program can hold."""
  load_core()
  _load([name for name, modules in EXTENSIONS.items()
         if name not in _loaded and any(m in sys.modules for m in modules)])


def load_all() -> bool:
  """Every family (a file names something outside the core); whether any
  was not loaded before."""
  load_core()
  missing = [name for name in EXTENSIONS if name not in _loaded]
  _load(missing)
  return bool(missing)


def module(name: str):
  """The family module `name` (as in CORE or EXTENSIONS) if it is loaded,
  else None."""
  return sys.modules.get(f"{__name__}.{name}") if name in _loaded else None


def loaded() -> frozenset[str]:
  """The families imported so far (for tests and benchmarks)."""
  return frozenset(_loaded)


registry.set_family_loaders(core=load_core, more=load_all)
specialize.set_specializer_loader(load_core)
