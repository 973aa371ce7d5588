"""Primitives that well-known libraries define, by stable name.

Programs of the Equinox stack (Diffrax, Optimistix, Lineax) contain
primitives that those libraries define, not JAX. jaxpr_io ships this table
of them. Each entry gives the primitive a stable serialized name (the
library's name, a dot, the primitive's name), says which module defines it,
under which attribute, and which pip package provides that module.

* Writing: a primitive that is neither JAX's nor registered by the user is
  looked up here by identity, in the modules of the table that the writing
  process has already imported (the program was traced with them).
* Loading: a name from the file is looked up in this table, and the module
  of the entry is imported: the module comes from jaxpr_io's own table,
  never from the file. When the package is not installed, the load fails
  with a `FormatError` naming the package to install.

The same table names the library packages whose classes a file may ask
for (`LIBRARY_PACKAGES`): a pytree node type of module `lineax._operator`
(an Equinox module, say) may be looked up after importing `lineax`, the
package's module from this table, never the module the file names
(jaxpr_io/pytree/read.py). The codecs of those libraries' values are in
jaxpr_io/families/libraries/codecs.py.

`jaxpr_io.register_primitive` stays for every other primitive.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types
from typing import Any

from jaxpr_io import compat
from jaxpr_io.errors import FormatError


@dataclasses.dataclass(frozen=True)
class LibraryPrimitive:
  """One primitive of a library: `module.attribute` is the `Primitive`."""
  name: str        # stable serialized name, e.g. "equinox.unvmap_any"
  module: str      # the module that defines it
  attribute: str   # the module attribute that holds the Primitive
  package: str     # the pip package that provides the module
  # Made with Equinox's filter primitives (`filter_primitive_bind`): its
  # params `treedef`, `static` and `flatten` have the codecs of
  # jaxpr_io/families/libraries/codecs.py.
  filter_primitive: bool = False


# Library packages by top-level module name: (the module jaxpr_io imports
# for it, the pip package). Importing it defines the package's classes.
LIBRARY_PACKAGES: dict[str, tuple[str, str]] = {
    "equinox": ("equinox", "equinox"),
    "lineax": ("lineax", "lineax"),
    "optimistix": ("optimistix", "optimistix"),
    "diffrax": ("diffrax", "diffrax"),
}


def _equinox(name: str, module: str, attribute: str) -> LibraryPrimitive:
  return LibraryPrimitive(f"equinox.{name}", module, attribute, "equinox")


LIBRARY_PRIMITIVES: tuple[LibraryPrimitive, ...] = (
    _equinox("unvmap_any", "equinox._unvmap", "unvmap_any_p"),
    _equinox("unvmap_all", "equinox._unvmap", "unvmap_all_p"),
    _equinox("unvmap_max", "equinox._unvmap", "unvmap_max_p"),
    _equinox("nontraceable", "equinox.internal._nontraceable",
             "nontraceable_p"),
    _equinox("nondifferentiable_backward", "equinox.internal._nontraceable",
             "nondifferentiable_backward_p"),
    _equinox("nonbatchable", "equinox.internal._nontraceable",
             "nonbatchable_p"),
    _equinox("select_if_vmap", "equinox.internal._loop.common",
             "select_if_vmap_p"),
    _equinox("maybe_set", "equinox.internal._loop.common", "maybe_set_p"),
    LibraryPrimitive("lineax.linear_solve", "lineax._solve", "linear_solve_p",
                     "lineax", filter_primitive=True),
)

_BY_NAME = {entry.name: entry for entry in LIBRARY_PRIMITIVES}

# (primitive, param) slots holding Equinox's closure-converted jaxprs
# (`equinox.filter_closure_convert`, which Lineax's FunctionLinearOperator
# and so Optimistix's solves use), whose constants the equation gets as
# inputs: the filter primitives' `static`. The format stores such a jaxpr
# open, its constvars unvalued, as JAX 0.10 has it; JAX 0.11+ keep the
# writing trace's tracers on it as its constants, and a reader there
# attaches dead tracers of the same types (jaxpr_io/compat/dead_consts.py).
UNVALUED_CONSTS_PARAMS = frozenset(
    (entry.name, "static") for entry in LIBRARY_PRIMITIVES
    if entry.filter_primitive)
if len(_BY_NAME) != len(LIBRARY_PRIMITIVES):
  raise RuntimeError("two library primitives share a serialized name")


def name_of(primitive) -> str | None:
  """The serialized name of a library primitive, or None. Looks only in
  modules the process has imported already."""
  for entry in LIBRARY_PRIMITIVES:
    module = sys.modules.get(entry.module)
    if module is not None and vars(module).get(entry.attribute) is primitive:
      return entry.name
  return None


def is_library_name(name: str) -> bool:
  """Whether `name` is the serialized name of a library primitive."""
  return name in _BY_NAME


def load(name: str) -> Any | None:
  """The primitive of serialized name `name`, importing its module from the
  table; None when `name` is not in the table."""
  entry = _BY_NAME.get(name)
  if entry is None:
    return None
  try:
    module = importlib.import_module(entry.module)
  except ImportError as e:
    raise FormatError(
        f"the program uses primitive {name!r} of the {entry.package!r} "
        f"package, which cannot be imported here ({e}); install it with "
        f"`pip install {entry.package}`") from None
  primitive = vars(module).get(entry.attribute)
  if not isinstance(primitive, compat.Primitive):
    raise FormatError(
        f"the program uses primitive {name!r}, but this version of "
        f"{entry.package!r} has no {entry.module}.{entry.attribute}; "
        "install the version that wrote the file")
  return primitive


def import_package_of(module_name: str) -> str:
  """Imports the library package that `module_name` belongs to, from
  `LIBRARY_PACKAGES`, so that its classes can be found in `sys.modules`.
  Returns "" when it is imported, else why not. `module_name` is only
  compared with the table: what is imported is the table's module."""
  top = module_name.partition(".")[0]
  entry = LIBRARY_PACKAGES.get(top)
  if entry is None:
    return f"module {module_name} is not imported"
  module, package = entry
  try:
    importlib.import_module(module)
  except ImportError as e:
    return (f"module {module_name} is not imported, and its package cannot "
            f"be ({e}); install it with `pip install {package}`")
  return ""


# The library functions a file may name (in Equinox modules' static data:
# closure-converted loop bodies, rewritten objective functions, norms), by
# module and qualname. The program calls them with arguments the file
# gives, so, as for callbacks and FFI targets, a file picks among the
# functions this table allows, never any function of a library (e.g.
# `equinox.tree_serialise_leaves`, which writes files). Add an entry when a
# library's programs need one; each was read and does no I/O.
LIBRARY_FUNCTIONS: frozenset[tuple[str, str]] = frozenset({
    # Equinox's filter predicates (modules hold them as static fields).
    ("equinox._filters", "is_array"),
    ("equinox._filters", "is_array_like"),
    ("equinox._filters", "is_inexact_array"),
    ("equinox._filters", "is_inexact_array_like"),
    ("equinox.internal._loop.loop", "while_loop"),
    ("optimistix._ad", "_for_jac"),
    ("optimistix._misc", "max_norm"),
    ("optimistix._misc", "rms_norm"),
    ("optimistix._misc", "two_norm"),
    ("optimistix._misc", "_default_no_verbose"),
    ("optimistix._root_find", "_rewrite_fn"),
    ("optimistix._minimise", "_rewrite_fn"),
    ("optimistix._least_squares", "_rewrite_fn"),
    # Lineax's norms: the default `norm` of its iterative solvers (CG,
    # BiCGStab, GMRES: max_norm; LSMR: two_norm), and what a user passes.
    ("lineax._norm", "max_norm"),
    ("lineax._norm", "rms_norm"),
    ("lineax._norm", "two_norm"),
    # Optimistix's NonlinearCG `method`s (polak_ribiere is its default).
    ("optimistix._solver.nonlinear_cg", "polak_ribiere"),
    ("optimistix._solver.nonlinear_cg", "fletcher_reeves"),
    ("optimistix._solver.nonlinear_cg", "hestenes_stiefel"),
    ("optimistix._solver.nonlinear_cg", "dai_yuan"),
    # Diffrax: SaveAt's default `fn`, and the seminorm a PIDController of
    # a BacksolveAdjoint takes as its `norm`.
    ("diffrax._saveat", "save_y"),
    ("diffrax._misc", "adjoint_rms_seminorm"),
})


@dataclasses.dataclass(frozen=True)
class LibraryCallback:
  """A host callback a library makes itself (a closure, so no user can
  register it): stored by `name` and the values of its free variables
  `stored`, which must be plain data (strings, numbers, tuples of them);
  the loading process rebuilds the function from the library's own code,
  its free variables `rebuilt` given these fixed values (what describes only
  the writing process). The library's code is found by tracing the API
  that makes it (jaxpr_io/families/libraries/error_callbacks.py)."""
  name: str                 # stable name, e.g. "equinox.error_if.raises"
  module: str               # the function's __module__
  qualname: str             # its __qualname__
  package: str              # the pip package
  stored: tuple[str, ...]   # free variables stored as data
  rebuilt: tuple[tuple[str, Any], ...] = ()


# Equinox's runtime errors (`eqx.error_if`, `branched_error_if`, so
# Diffrax's `throw=True`, Optimistix's, Lineax's): `raises` raises
# Equinox's runtime error with `msgs[index]`; `tpu_msg` is the TPU's
# fallback (the TPU runtime cannot raise). `stack` is the writing process's
# Python stack at trace time, which Equinox's `filter_jit` prints: it names
# the writer's files and lines, so it is not stored.
LIBRARY_CALLBACKS: tuple[LibraryCallback, ...] = (
    LibraryCallback("equinox.error_if.raises", "equinox._errors",
                    "_error.<locals>.raises", "equinox", ("msgs",),
                    (("stack", ()),)),
    LibraryCallback("equinox.error_if.tpu_msg", "equinox._errors",
                    "_error.<locals>.tpu_msg", "equinox", ("msgs",)),
)
if len({c.name for c in LIBRARY_CALLBACKS}) != len(LIBRARY_CALLBACKS):
  raise RuntimeError("two library callbacks share a serialized name")


def find_function(module_name: str, qualname: str):
  """(the module-level function `module_name.qualname`, "") or (None, why
  not), found as `find_class` finds classes; only the functions of
  `LIBRARY_FUNCTIONS`."""
  if (module_name, qualname) not in LIBRARY_FUNCTIONS:
    return None, (f"{module_name}.{qualname} is not in jaxpr_io's table of "
                  "library functions a file may name "
                  "(jaxpr_io.codec.library_table.LIBRARY_FUNCTIONS)")
  module, reason = _find_module(module_name)
  if module is None:
    return None, reason
  fn = vars(module).get(qualname)
  if (type(fn) is not types.FunctionType or fn.__module__ != module_name
      or fn.__qualname__ != qualname):
    return None, f"{module_name} has no function {qualname}"
  return fn, ""


def _find_module(module_name: str):
  """(the module, "") if it is in `sys.modules` or comes with a table
  package's import, else (None, why not)."""
  module = sys.modules.get(module_name)
  if module is None:
    reason = import_package_of(module_name)
    if reason:
      return None, reason
    module = sys.modules.get(module_name)
  if not isinstance(module, types.ModuleType):
    return None, f"module {module_name} is not imported"
  return module, ""


def find_class(module_name: str, qualname: str) -> tuple[type | None, str]:
  """(the class `module_name.qualname` of the running process, "") or
  (None, why not). The module must be in `sys.modules`, or be a module of
  a table package once `import_package_of` has imported it; the qualname is
  resolved through module and class `__dict__`s (never `getattr`, so no
  module `__getattr__` hook runs), and what it finds must be a class with
  exactly that `__module__` and `__qualname__`."""
  if module_name == _STR2JAX_MODULE:
    return _str2jax_class(qualname)
  obj, reason = _find_module(module_name)
  if obj is None:
    return None, reason
  for part in qualname.split("."):
    obj = vars(obj).get(part)
    if not isinstance(obj, type):
      return None, f"{module_name} has no class {qualname}"
  if (getattr(obj, "__module__", None) != module_name or
      getattr(obj, "__qualname__", None) != qualname):
    return None, f"{module_name} has no class {qualname}"
  return obj, ""


# `equinox.internal.str2jax(msg)` makes a new class named `msg` in this
# module at each call: the libraries keep one instance each as a module
# global (lineax's `_lu_token`), and that instance's class is the one a
# file means.
_STR2JAX_MODULE = "equinox.internal._str2jax"


def _str2jax_class(qualname: str) -> tuple[type | None, str]:
  # Only imported modules are searched: the primitive whose params hold
  # such an object imported its library already.
  found = {type(v) for name, module in list(sys.modules.items())
           if isinstance(module, types.ModuleType)
           and name.partition(".")[0] in LIBRARY_PACKAGES
           for v in list(vars(module).values())
           if type(v).__module__ == _STR2JAX_MODULE
           and type(v).__qualname__ == qualname}
  if len(found) != 1:
    return None, (f"the libraries define {len(found)} objects of an "
                  f"equinox.internal.str2jax class {qualname!r}, not one")
  return found.pop(), ""
