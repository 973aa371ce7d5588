"""Every hi primitive class that the running JAX release defines, read from
its source: the census that jaxpr_io/families/hijax/jax_classes.py must
cover (tests/families/hijax/test_jax_hi_classes.py). Test time only: it
imports every module of jax._src that names a hi primitive base class.

The bases are those of jax._src.hijax: `HiPrimitive` (JAX 0.10: a
`core.Primitive` subclass, bound by name) and `VJPHiPrimitive` (0.10), and
`HiPrim` (0.11+), whose objects are `call_hi_primitive`'s `_prim`.
"""

from __future__ import annotations

import importlib
import pathlib
import re

import jax
from jax._src import hijax

BASE_NAMES = ("HiPrimitive", "VJPHiPrimitive", "HiPrim")
_MENTIONS_BASE = re.compile(r"\b(%s)\b" % "|".join(BASE_NAMES))


def bases() -> tuple[type, ...]:
  """The hi primitive base classes of this release."""
  return tuple(getattr(hijax, n) for n in BASE_NAMES if hasattr(hijax, n))


def defining_modules() -> list[str]:
  """The modules of jax._src whose source names a base class (where any
  class of JAX's that subclasses one directly is defined)."""
  root = pathlib.Path(jax.__file__).parent
  found = []
  for path in sorted((root / "_src").rglob("*.py")):
    text = path.read_text(encoding="utf-8", errors="replace")
    if "class " in text and _MENTIONS_BASE.search(text):
      found.append(".".join(("jax", *path.relative_to(root)
                             .with_suffix("").parts)))
  return found


def qualified_name(cls: type) -> str:
  return f"{cls.__module__}.{cls.__qualname__}"


def defined_classes() -> tuple[dict[str, type], dict[str, str]]:
  """({qualified name: class} of every subclass, direct or not, of a base
  class that JAX itself defines, {module: why it failed to import})."""
  failed = {}
  for module in defining_modules():
    try:
      importlib.import_module(module)
    except Exception as e:  # pylint: disable=broad-except
      # Any failure of a module of JAX's to import (a missing optional
      # dependency) is reported, not hidden: the caller decides.
      failed[module] = f"{type(e).__name__}: {e}"[:300]
  classes: dict[str, type] = {}
  seen, stack = set(bases()), list(bases())
  while stack:
    for sub in stack.pop().__subclasses__():
      if sub not in seen:
        seen.add(sub)
        stack.append(sub)
        if sub.__module__.startswith("jax."):
          classes[qualified_name(sub)] = sub
  return classes, failed
