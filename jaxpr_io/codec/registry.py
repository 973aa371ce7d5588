"""Explicit registries: primitives, enum types and record types.

Each registry maps a stable serialized name to a Python object and back. The
names are part of the file format: they MUST stay the same across releases.
Registering a name or an object twice is an error that names the earlier
registration, as `jax.export.register_pytree_node_serialization` does.

JAX's own primitives, enums and NamedTuples are registered from the tables in
`jaxpr_io.compat`; users register their own with the `register_*` functions,
before `dumps`/`loads`.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from typing import Any, Callable, Generic, Hashable, TypeVar

from jaxpr_io import compat
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.codec import library_table as libraries

K = TypeVar("K", bound=Hashable)

# The families' loaders (jaxpr_io/families/__init__.py installs them): the
# codecs of a primitive family register when its module is imported, which
# happens on first use, not when jaxpr_io is imported.
_load_core: Callable[[], None] | None = None
_load_more: Callable[[], bool] | None = None


def set_family_loaders(*, core: Callable[[], None],
                       more: Callable[[], bool]) -> None:
  """`core()` loads the families every program may need (called on the
  first use of the registries); `more()` loads the rest and says whether
  it loaded anything (called when a file names something unregistered)."""
  global _load_core, _load_more
  _load_core, _load_more = core, more


def load_more() -> bool:
  """Loads the families not loaded yet; whether any was. A reader that
  finds a name no registry holds calls this, then looks again."""
  return _load_more() if _load_more is not None else False


class Registry(Generic[K]):
  """A two-way map between stable names and keys, refusing duplicates."""

  def __init__(self, what: str):
    self.what = what
    self.by_name: dict[str, Any] = {}
    self.by_key: dict[K, str] = {}

  def add(self, key: K, name: str, entry: Any) -> None:
    if not isinstance(name, str) or not name:
      raise ValueError(f"a {self.what} needs a non-empty string name, got "
                       f"{name!r}")
    if key in self.by_key:
      raise ValueError(
          f"{self.what} {key!r} is already registered under the name "
          f"{self.by_key[key]!r}")
    if name in self.by_name:
      raise ValueError(
          f"the {self.what} name {name!r} is already registered for "
          f"{self.by_name[name]!r}")
    self.by_key[key] = name
    self.by_name[name] = entry


# ------------------------------------------------------------- primitives
class _Primitives:
  """Primitive name <-> `Primitive`, keyed by object identity: JAX's own
  (`compat.tables.PRIMITIVE_MODULES`), those the user registers, and those
  of the library table (jaxpr_io/codec/library_table.py).

  Built lazily, and without importing a JAX module a program or a file does
  not need: the first use scans the modules this process has imported; a
  primitive object that is not found rescans the imported modules (its
  module is imported, or the object would not exist); a name that is not
  found imports the rest of the fixed module list (never a module a file
  names). Registering a primitive imports them all first, so a user's name
  that clashes with JAX's is refused at once, whatever was imported.
  """

  def __init__(self):
    self._lock = threading.RLock()
    self._registry: Registry[int] = Registry("primitive")
    self._scanned_all = False
    self._scanned: set[str] = set()

  def _scan(self, *, import_all: bool) -> None:
    with self._lock:
      if self._scanned_all:
        return
      todo = [m for m in compat_tables.PRIMITIVE_MODULES
              if m not in self._scanned
              and (import_all or m in sys.modules)]
      found = compat_tables.builtin_primitives(todo,
                                               imported_only=not import_all)
      self._scanned.update(todo)
      self._scanned_all = import_all
      for name, prim in found.items():
        if self._registry.by_name.get(name) is not prim:
          self._registry.add(id(prim), name, prim)

  def _table(self) -> Registry[int]:
    if not self._scanned:
      self._scan(import_all=False)
      if _load_core is not None:
        _load_core()
    return self._registry

  def all(self) -> dict[str, Any]:
    """Every primitive of the table, JAX's modules all imported."""
    self._scan(import_all=True)
    return dict(self._registry.by_name)

  def register(self, primitive, name: str) -> None:
    self._scan(import_all=True)
    self._registry.add(id(primitive), name, primitive)

  def name_of(self, primitive) -> str | None:
    table = self._table()
    name = table.by_key.get(id(primitive))
    if name is None and not self._scanned_all:
      self._scan(import_all=False)
      name = table.by_key.get(id(primitive))
    if name is None:
      name = libraries.name_of(primitive)
    return name

  def lookup(self, name: str):
    """The primitive of serialized name `name`, or None. A name of the
    library table (jaxpr_io/codec/library_table.py) imports the table's module."""
    name = compat_tables.PRIMITIVE_RENAMES.get(name, name)
    table = self._table()
    primitive = table.by_name.get(name)
    if primitive is None and libraries.is_library_name(name):
      # Its library's module, not the rest of JAX's (Pallas, sparse, ...).
      return libraries.load(name)
    if primitive is None and not self._scanned_all:
      self._scan(import_all=True)
      load_more()  # the families of the modules just imported
      primitive = table.by_name.get(name)
    return primitive


PRIMITIVES = _Primitives()


def register_primitive(primitive, *, name: str | None = None) -> None:
  """Makes a user-defined `Primitive` storable, under a stable name.

  The name defaults to `primitive.name`. The loading process MUST register
  the same primitive under the same name before loading a file that uses it
  (as with custom ops in other formats); loading never imports code.
  """
  if not isinstance(primitive, compat.Primitive):
    raise TypeError(f"expected a jax Primitive, got {type(primitive)}")
  PRIMITIVES.register(primitive, primitive.name if name is None else name)


# ------------------------------------------------------ enums and records
class RecordCodec:
  """How one record type maps to a tuple of field values and back."""

  __slots__ = ("cls", "name", "to_fields", "from_fields")

  def __init__(self, cls: type, name: str,
               to_fields: Callable[[Any], tuple],
               from_fields: Callable[[tuple], Any]):
    self.cls = cls
    self.name = name
    self.to_fields = to_fields
    self.from_fields = from_fields

  def __repr__(self):
    return f"{self.cls.__module__}.{self.cls.__qualname__}"


ENUMS: Registry[type] = Registry("enum type")
RECORDS: Registry[type] = Registry("param record type")


def register_enum(enum_type: type, *, name: str) -> None:
  """Makes members of `enum_type` storable as params, by member name."""
  ENUMS.add(enum_type, name, enum_type)


def register_param_codec(cls: type, *, name: str,
                         encode: Callable[[Any], tuple],
                         decode: Callable[[tuple], Any]) -> None:
  """Makes instances of exactly `cls` storable as params.

  `encode(value)` returns a tuple of storable values (ints, strings, tuples,
  dtypes, other registered types, ...); `decode(fields)` rebuilds the value.
  Lookup is by exact type: a subclass needs its own registration.
  """
  RECORDS.add(cls, name, RecordCodec(cls, name, encode, decode))


# Families that register record codecs on demand (a library's, once the
# library is imported): name -> codec or None; they may raise FormatError.
_RECORD_RESOLVERS: list[Callable[[str], Any]] = []


def register_record_resolver(resolve: Callable[[str], Any]) -> None:
  """`resolve(name)` gives the record codec of `name` that it can register
  now (importing a library of jaxpr_io's table), or None."""
  _RECORD_RESOLVERS.append(resolve)


def resolve_record(name: str):
  """The codec of record `name` from the resolvers, or None."""
  for resolve in _RECORD_RESOLVERS:
    codec = resolve(name)
    if codec is not None:
      return codec
  return None


def register_named_tuple(cls: type, *, name: str) -> None:
  """Registers a NamedTuple class field by field."""
  register_param_codec(cls, name=name, encode=tuple,
                       decode=lambda fields: cls(*fields))


# JAX's own NamedTuples (compat.tables.NAMED_TUPLES and those of the
# families): the writer compares their param values by value, as tuples.
VALUE_KEYED_TUPLES: set[type] = set()


def register_jax_named_tuple(cls: type, *, name: str) -> None:
  """Registers one of JAX's NamedTuples (compared by value when the writer
  stores each distinct param set once)."""
  register_named_tuple(cls, name=name)
  VALUE_KEYED_TUPLES.add(cls)


# ------------------------------------------------------------ effects
class EffectCodec:
  """How instances of one effect type map to a payload value and back."""

  __slots__ = ("cls", "name", "encode", "decode")

  def __init__(self, cls: type, name: str, encode, decode):
    self.cls = cls
    self.name = name
    self.encode = encode
    self.decode = decode

  def __repr__(self):
    return f"the effect codec {self.name!r}"


EFFECTS: Registry[type] = Registry("effect type")


def register_effect_codec(cls: type, *, name: str,
                          encode: Callable[[Any], Any],
                          decode: Callable[[Any], Any]) -> None:
  """Makes effects of exactly type `cls` storable, under `name`.

  `encode(effect)` returns a storable value (the `Effect.payload`);
  `decode(payload)` rebuilds the effect and raises FormatError for a payload
  it does not accept."""
  EFFECTS.add(cls, name, EffectCodec(cls, name, encode, decode))


# ------------------------------------------------- per-param codecs
class EqnParamCodec:
  """How one (primitive, param) pair whose value is not plain data is stored.

  `encode(value, params)` returns a storable value (anything the param codecs
  handle: tuples, ints, strings, closed jaxprs, ...); `decode(stored, params)`
  rebuilds the value. `params` is the equation's params dict (on decode: the
  params that are plain data, already decoded).
  """

  __slots__ = ("key", "encode", "decode")

  def __init__(self, key, encode, decode):
    self.key = key
    self.encode = encode
    self.decode = decode

  def __repr__(self):
    return f"the codec of param {self.key[1]!r} of {self.key[0]!r}"


EQN_PARAM_CODECS: dict[tuple[str, str], EqnParamCodec] = {}


class _EquationInputs(threading.local):
  """The input types of the equation whose params the writer is encoding,
  for the codecs registered with `needs_in_avals=True` (None otherwise)."""

  def __init__(self):
    self.in_avals = None


EQUATION_INPUTS = _EquationInputs()


def equation_in_avals() -> tuple | None:
  """The input types of the equation whose params are being encoded, for a
  param codec registered with `needs_in_avals=True`; None for other codecs."""
  return EQUATION_INPUTS.in_avals


class _WrittenProgram(threading.local):
  """The program the outermost writer of this thread is writing, and what
  codecs computed once about it (`written_program_cache`)."""

  def __init__(self):
    self.program = None  # (closed jaxpr, in_tree)
    self.cache: dict[str, Any] = {}


_WRITTEN = _WrittenProgram()


# Contexts entered around the writing of every program (families register
# them): what a family must set up before a write and undo after it.
_PROGRAM_SCOPES: list[Callable[[], Any]] = []


def register_program_scope(scope: Callable[[], Any]) -> None:
  """Enters the context manager `scope()` around the writing of each
  program (the outermost `writing_program` of a thread), innermost the last
  registered."""
  _PROGRAM_SCOPES.append(scope)


# Functions of the writing thread's state that the writer's caches of
# jaxprs and param sets are keyed on besides the objects (families register
# them): state under which a family's codecs encode the same object
# otherwise, so that an object met under two such states is written twice.
_ENCODING_CONTEXTS: list[Callable[[], Any]] = []


def register_encoding_context(context: Callable[[], Any]) -> None:
  """Keys the writer's jaxpr and param-set caches on `context()` (a
  hashable) too."""
  _ENCODING_CONTEXTS.append(context)


def encoding_context() -> tuple:
  """The values of the registered encoding contexts, now."""
  return tuple([context() for context in _ENCODING_CONTEXTS])


@contextlib.contextmanager
def writing_program(closed, in_tree):
  """The context in which the writer writes the program `closed` (with
  inputs `in_tree`); a nested one (a value encoded apart) changes nothing."""
  if _WRITTEN.program is not None:
    yield
    return
  _WRITTEN.program, _WRITTEN.cache = (closed, in_tree), {}
  try:
    with contextlib.ExitStack() as scopes:
      for scope in _PROGRAM_SCOPES:
        scopes.enter_context(scope())
      yield
  finally:
    _WRITTEN.program, _WRITTEN.cache = None, {}


def written_program() -> tuple | None:
  """(closed jaxpr, in_tree) of the program being written, or None (a
  value encoded apart from any program)."""
  return _WRITTEN.program


def written_program_cache() -> dict:
  """A dict that lives while the current program is written: for analyses
  of the whole program that codecs compute once (key: the module's name)."""
  return _WRITTEN.cache


# The writer's class (jaxpr_io/write/writer.py sets it): a param codec that
# encodes a value apart from the file being written makes one.
_writer_factory: Callable[[], Any] | None = None


def set_writer_factory(factory: Callable[[], Any]) -> None:
  global _writer_factory
  _writer_factory = factory


def new_writer():
  """A fresh writer, for encoding a value apart from the file."""
  if _writer_factory is None:
    raise RuntimeError("jaxpr_io.write.writer is not imported")
  return _writer_factory()
# Primitives (serialized names) with a codec registered with
# `needs_in_avals=True`.
INPUT_TYPED_PRIMITIVES: set[str] = set()


def register_eqn_param_codec(primitive: str, param: str, *,
                             encode: Callable[[Any, dict], Any],
                             decode: Callable[[Any, dict], Any],
                             needs_in_avals: bool = False) -> None:
  """Stores param `param` of primitive `primitive` (serialized names) with
  `encode`/`decode` instead of the codec of its Python type. For params whose
  values are callables or rules that can be traced or named. With
  `needs_in_avals`, `encode` may call `jaxpr_io.equation_in_avals()`
  for the equation's input types (e.g. to trace a rule at them), and
  equations whose inputs differ in type never share a param set."""
  key = (primitive, param)
  if key in EQN_PARAM_CODECS:
    raise ValueError(f"param {param!r} of {primitive!r} already has "
                     f"{EQN_PARAM_CODECS[key]!r}")
  EQN_PARAM_CODECS[key] = EqnParamCodec(key, encode, decode)
  if needs_in_avals:
    INPUT_TYPED_PRIMITIVES.add(primitive)


for _key, _rebuild in compat_tables.DERIVED_PARAMS.items():
  register_eqn_param_codec(
      *_key, encode=lambda value, params: None,
      decode=lambda stored, params, _rebuild=_rebuild: _rebuild(params))

for _name, _enum in compat_tables.ENUMS.items():
  register_enum(_enum, name=_name)
for _name, _cls in compat_tables.NAMED_TUPLES.items():
  register_jax_named_tuple(_cls, name=_name)
# Record types that only the running JAX release has (e.g. 0.11's FlatTree).
for _cls, _name, _encode, _decode in compat.ADAPTER.record_codecs:
  register_param_codec(_cls, name=_name, encode=_encode, decode=_decode)
