"""Codecs for the values of the libraries in jaxpr_io's library table
(jaxpr_io/codec/library_table.py): what Equinox modules hold as static data, and the
params of the primitives that Equinox's filter primitives make.

## Records (registered once the library is imported)

An Equinox module is a pytree node whose auxdata is a tuple: Equinox's
`Missing` sentinel (or the wrapped function's attributes), then the values
of its static fields. With these records that auxdata is plain data, so the
node is stored exactly (a GENERIC node with its auxdata, jaxpr_io/pytree/write.py)
and comes back as its own class wherever the library can be imported.

  * `equinox.Missing` (no fields): `equinox._module._flatten.MISSING`.
  * `equinox.Enumeration` (module, qualname): a subclass of
    `equinox.Enumeration` (the class itself, as an `EnumerationItem` holds
    it). Found as pytree node types are: in `sys.modules`, or after
    importing the library package from the table; never by importing the
    module the file names.
  * `lineax.tag` (name,): one of Lineax's tag singletons
    (`lineax.symmetric_tag`, ...), by its name in `lineax._tags`.

The writer registers the records of every table library the writing process
has imported (`register_imported`); the reader registers a library's records
when a file names one of them (`load_record`), importing the library from
the table, or raises `FormatError` naming the package to install.

## Params of Equinox filter primitives

A primitive made with `equinox.internal.filter_primitive_bind` (Lineax's
`linear_solve`) binds the leaves of arbitrary pytrees: its params are

  * `treedef`: the `PyTreeDef` of all the arguments, stored as a treedef
    param (exactly, or refused; its Equinox modules as above);
  * `static`: one entry per leaf of `treedef`, Equinox's private
    "dynamic" sentinel for the leaves that are the equation's inputs, the
    leaf itself for the others. Stored as (which entries are the sentinel,
    the other entries in order). A closure-converted function's jaxpr
    among them is stored open, its constvars unvalued (the equation passes
    their values as inputs; `libraries.UNVALUED_CONSTS_PARAMS`, and
    jaxpr_io/compat/dead_consts.py for JAX 0.11+, which keep dead tracers
    on it); loading checks that it has one constvar per constant its
    `_ClosureConvert` node passes;
  * `flatten`: a `Flatten` object, which records the structure of the
    outputs when the primitive's rules first run. Stored as None when it
    has not run, else (the outputs' treedef, the treedef of their static
    part, the static part's leaves).
"""

from __future__ import annotations

import functools
import importlib
import sys
import threading
import types
import weakref

import jax

from jaxpr_io import compat
from jaxpr_io.codec import library_table as libraries
from jaxpr_io.codec import unloaded
from jaxpr_io.codec import registry
from jaxpr_io.compat import dead_consts
from jaxpr_io.errors import FormatError, UnsupportedError

_PRIMITIVE_MODULE = "equinox.internal._primitive"


# ------------------------------------------------------------ records
def _missing_codec():
  flatten = sys.modules.get("equinox._module._flatten")
  missing = None if flatten is None else vars(flatten).get("MISSING")
  if missing is None:  # another Equinox layout: nothing to register
    return None

  def encode_missing(value) -> tuple:
    del value
    return ()

  def decode_missing(fields):
    if fields != ():
      raise FormatError("equinox.Missing has no fields")
    return missing
  return type(missing), "equinox.Missing", encode_missing, decode_missing


def _enumeration_codec():
  enum_module = sys.modules.get("equinox._enum")
  meta = None if enum_module is None else vars(enum_module).get(
      "_EnumerationMeta")
  if not isinstance(meta, type):
    return None

  def encode_enumeration(cls) -> tuple:
    module, qualname = cls.__module__, cls.__qualname__
    if libraries.find_class(module, qualname)[0] is not cls:
      raise UnsupportedError(
          f"the Equinox enumeration {module}.{qualname} cannot be found by "
          "its module and name, so it cannot be stored; define it at the "
          "top level of a module")
    return (module, qualname)

  def decode_enumeration(fields):
    if (type(fields) is not tuple or len(fields) != 2
        or not all(type(f) is str for f in fields)):
      raise FormatError("equinox.Enumeration: the fields are not "
                        "(module, qualname)")
    cls, reason = libraries.find_class(*fields)
    if cls is None or type(cls) is not meta:
      raise FormatError(
          f"equinox.Enumeration: {fields[0]}.{fields[1]} is not an Equinox "
          f"enumeration here ({reason or 'another type'}); import the "
          "module that defines it before loading")
    return cls
  return meta, "equinox.Enumeration", encode_enumeration, decode_enumeration


def _lineax_tag_codec():
  tags = sys.modules.get("lineax._tags")
  tag_type = None if tags is None else vars(tags).get("_HasRepr")
  if not isinstance(tag_type, type):
    return None
  names = {id(v): k for k, v in vars(tags).items() if type(v) is tag_type}

  def encode_tag(tag) -> tuple:
    name = names.get(id(tag))
    if name is None:
      raise UnsupportedError(f"the Lineax tag {tag!r} is not one of "
                             "lineax's own tags; it cannot be stored")
    return (name,)

  def decode_tag(fields):
    name = fields[0] if type(fields) is tuple and len(fields) == 1 else None
    tag = vars(tags).get(name) if type(name) is str else None
    if type(tag) is not tag_type:
      raise FormatError(f"lineax.tag: {fields!r:.80} is not a Lineax tag")
    return tag
  return tag_type, "lineax.tag", encode_tag, decode_tag


def _function_codec():
  def encode_function(fn) -> tuple:
    module, qualname = fn.__module__, fn.__qualname__
    if (type(module) is not str
        or module.partition(".")[0] not in libraries.LIBRARY_PACKAGES
        or libraries.find_function(module, qualname)[0] is not fn):
      raise UnsupportedError(
          f"the function {module}.{qualname} cannot be stored: only the "
          "library functions of jaxpr_io's table "
          "(jaxpr_io.codec.library_table.LIBRARY_FUNCTIONS) can; a Python function "
          "of your own in a module's static data makes it a different "
          "program: pass it as a static leaf or partition it out")
    return (module, qualname)

  def decode_function(fields):
    if (type(fields) is not tuple or len(fields) != 2
        or not all(type(f) is str for f in fields)
        or fields[0].partition(".")[0] not in libraries.LIBRARY_PACKAGES):
      raise FormatError(f"library function {fields!r:.120} is not (module, "
                        "qualname) of a library in jaxpr_io's table")
    fn, reason = libraries.find_function(*fields)
    if fn is None:
      raise FormatError(f"library function {fields[0]}.{fields[1]} cannot "
                        f"be found: {reason}")
    return fn
  return (types.FunctionType, "library.function", encode_function,
          decode_function)


def _partial_codec():
  def encode_partial(value) -> tuple:
    if type(value.func) is not types.FunctionType or value.__dict__:
      raise UnsupportedError(f"the partial {value!r:.80} cannot be stored: "
                             "only a partial of a library function can")
    return (value.func, value.args, tuple(sorted(value.keywords.items())))

  def decode_partial(fields):
    if (type(fields) is not tuple or len(fields) != 3
        or type(fields[0]) is not types.FunctionType
        or type(fields[1]) is not tuple or type(fields[2]) is not tuple
        or not all(type(kv) is tuple and len(kv) == 2 and type(kv[0]) is str
                   for kv in fields[2])):
      raise FormatError("functools.partial: the fields are not (library "
                        "function, args, keyword items)")
    try:
      return _interned_partials[fields]
    except KeyError:
      pass
    except TypeError:  # unhashable arguments: not interned
      return functools.partial(fields[0], *fields[1], **dict(fields[2]))
    value = functools.partial(fields[0], *fields[1], **dict(fields[2]))
    _interned_partials[fields] = value
    return value
  return functools.partial, "functools.partial", encode_partial, decode_partial


# Equal partials read from files are one object: Equinox compares the
# static data of a closure-converted function with the arguments it is
# called with by `==`, which for partials is identity, and in the traced
# program both are the same object.
_interned_partials: weakref.WeakValueDictionary = weakref.WeakValueDictionary()


# Library package -> the codec makers of its records, and record name ->
# its package.
_RECORD_MAKERS = {
    "equinox": (_missing_codec, _enumeration_codec, _function_codec,
                _partial_codec),
    "lineax": (_lineax_tag_codec,),
}
_RECORD_PACKAGES = {"equinox.Missing": "equinox",
                    "equinox.Enumeration": "equinox",
                    "library.function": "equinox",
                    "functools.partial": "equinox",
                    "lineax.tag": "lineax"}
_registered: set[str] = set()
_lock = threading.Lock()


def _register(package: str) -> None:
  with _lock:
    if package in _registered:
      return
    for make in _RECORD_MAKERS[package]:
      codec = make()
      if codec is not None:
        cls, name, encode, decode = codec
        registry.register_param_codec(cls, name=name, encode=encode,
                                      decode=decode)
    _registered.add(package)


def register_imported() -> None:
  """Registers the records of each table library the process has imported
  (the writer calls this: values of a library exist only once it is)."""
  for package in _RECORD_MAKERS:
    if package not in _registered and package in sys.modules:
      _register(package)


def load_record(name: str):
  """The codec of library record `name`, importing its library from the
  table; None when `name` is not a library record. Raises
  `MissingLibraryError` when the library cannot be imported."""
  package = _RECORD_PACKAGES.get(name)
  if package is None:
    return None
  reason = libraries.import_package_of(package)
  if reason:
    raise unloaded.MissingLibraryError(
        f"the program holds a value of type {name!r} of the {package!r} "
        f"package, which cannot be used: {reason}")
  register_imported()  # the package's, and Equinox's, which it imports
  return registry.RECORDS.by_name.get(name)


registry.register_record_resolver(load_record)


# ------------------------------------------- filter primitive params
def _primitive_module():
  """equinox.internal._primitive, imported by its fixed name (the
  primitive that uses these codecs was found through the library table,
  which imported Equinox)."""
  try:
    return importlib.import_module(_PRIMITIVE_MODULE)
  except ImportError as e:
    raise FormatError(f"Equinox's filter primitives need equinox ({e}); "
                      "install it with `pip install equinox`") from None


def encode_static(value, params):
  del params
  module = sys.modules.get(_PRIMITIVE_MODULE)
  dynamic = None if module is None else vars(module).get("_missing_dynamic")
  if type(value) is not tuple or dynamic is None:
    raise UnsupportedError(f"the static param {value!r:.80} of an Equinox "
                           "filter primitive is not a tuple")
  for i, item in enumerate(value):
    if (compat.MERGED_JAXPRS and type(item) is compat.Jaxpr
        and any(map(compat.is_tracer, item.consts))
        and not dead_consts.holds_dead_consts(item)):
      # All tracers: stored open (params.encode_merged_jaxpr). Tracers
      # beside values: the values would be lost, and JAX 0.10 writers keep
      # no such jaxprs either.
      raise UnsupportedError(
          f"entry {i} of the static param is a closure-converted jaxpr "
          "whose constants are partly tracers of the trace that made it "
          "and partly values (arrays it closes over from outside the "
          "trace), which the format cannot store under JAX 0.11+; make "
          "those arrays arguments of the traced function (or pass them "
          "through the solver's `args`), or save it with JAX 0.10")
  mask = tuple(item is dynamic for item in value)
  return (mask, tuple(item for item in value if item is not dynamic))


def decode_static(stored, params):
  if (type(stored) is not tuple or len(stored) != 2
      or type(stored[0]) is not tuple or type(stored[1]) is not tuple
      or not all(type(b) is bool for b in stored[0])):
    raise FormatError("an Equinox filter primitive's static param is not "
                      "(mask, values)")
  mask, values = stored
  if len(mask) - sum(mask) != len(values):
    raise FormatError(f"an Equinox filter primitive's static param has "
                      f"{len(values)} values for {len(mask) - sum(mask)} "
                      "static entries")
  treedef = params.get("treedef")
  if (type(treedef) is not jax.tree_util.PyTreeDef
      or treedef.num_leaves != len(mask)):
    raise FormatError("an Equinox filter primitive's static param does not "
                      "have one entry per leaf of its treedef param")
  dynamic = vars(_primitive_module())["_missing_dynamic"]
  items = iter(values)
  static = tuple(dynamic if is_dynamic else next(items) for is_dynamic in mask)
  _check_closure_converts(treedef, static)
  return static


def _check_closure_converts(treedef, static: tuple) -> None:
  """Checks that each closure-converted jaxpr of `static` (an Equinox
  `_ClosureConvert` node of `treedef`: its leaves the jaxpr, then its
  constants) has one constvar per constant that the node passes, which
  Equinox gives it as `eval_jaxpr(jaxpr, consts, *args)`. The node is read
  from the treedef's structure (no Equinox code runs); another Equinox
  layout of the node is not checked."""
  ad = sys.modules.get("equinox._ad")
  converter = None if ad is None else vars(ad).get("_ClosureConvert")
  if converter is None:
    return
  stack, offset = [treedef], 0
  while stack:
    node = stack.pop()
    data = node.node_data()
    kids = node.children()
    if data is None or data[0] is not converter:
      stack.extend(reversed(kids))
      offset += 0 if kids else node.num_leaves  # a leaf, or an empty node
      continue
    if len(kids) == 2 and kids[0].num_leaves == 1:
      jaxpr, n_consts = static[offset], kids[1].num_leaves
      if type(jaxpr) is not compat.Jaxpr or len(
          jaxpr.constvars) != n_consts:
        what = (f"a jaxpr of {len(jaxpr.constvars)} constvars"
                if type(jaxpr) is compat.Jaxpr
                else f"not a jaxpr but {type(jaxpr).__name__}")
        raise FormatError(
            f"an Equinox filter primitive's static param: entry {offset} "
            f"(a closure-converted function's jaxpr) is {what} where the "
            f"function passes it {n_consts} constants; the file is "
            "inconsistent")
    offset += node.num_leaves


def encode_flatten(value, params):
  del params
  module = sys.modules.get(_PRIMITIVE_MODULE)
  if module is None or type(value) is not vars(module).get("Flatten"):
    raise UnsupportedError(f"the flatten param {value!r:.80} of an Equinox "
                           "filter primitive is not a Flatten object")
  if not value.called():
    return None
  treedef_out, static_out = value.get()
  leaves, static_tree = jax.tree_util.tree_flatten(static_out)
  return (treedef_out, static_tree, tuple(leaves))


def decode_flatten(stored, params):
  del params
  flatten = vars(_primitive_module())["Flatten"]()
  if stored is None:
    return flatten
  if type(stored) is not tuple or len(stored) != 3 or not all(
      type(t) is jax.tree_util.PyTreeDef for t in stored[:2]) or type(
          stored[2]) is not tuple:
    raise FormatError("an Equinox filter primitive's flatten param is not "
                      "(treedef, static treedef, static leaves)")
  treedef_out, static_tree, leaves = stored
  if static_tree.num_leaves != len(leaves):
    raise FormatError("an Equinox filter primitive's flatten param has "
                      f"{len(leaves)} static leaves for a structure of "
                      f"{static_tree.num_leaves}")
  flatten.treedef_out = treedef_out
  flatten.static_out = static_tree.unflatten(leaves)
  return flatten


for _entry in libraries.LIBRARY_PRIMITIVES:
  if _entry.filter_primitive:
    registry.register_eqn_param_codec(_entry.name, "static",
                                      encode=encode_static,
                                      decode=decode_static)
    registry.register_eqn_param_codec(_entry.name, "flatten",
                                      encode=encode_flatten,
                                      decode=decode_flatten)
