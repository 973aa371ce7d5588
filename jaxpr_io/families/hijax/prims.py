"""JAX's own hi primitives: the `_prim` param of `call_hi_primitive`.

From JAX 0.12, jax.numpy functions bind `call_hi_primitive` (searchsorted,
and so interp, digitize and histogram; nonzero and argwhere with a `size`;
ldexp; frexp); `lax.custom_root` binds it from 0.11, and other classes
are bound under experimental settings (jax_classes.py lists them all).
Its only param, `_prim`, is an instance of a JAX-defined class
(jax._src.numpy.hijax.SearchSorted, ...) whose methods are the
primitive's rules: `expand` (lowering), `jvp`, `batch`, `vjp_*`.

Such an object is stored as a record (`params.encode_record`) under the
class's stable name from the running release's table
(`compat.ADAPTER.hi_prim_classes`), with the fields

    (in_avals, *constructor keyword arguments, in the order of `_FIELDS`)

where `in_avals` is the tuple of the object's input avals (the classes of
`_NAME_FIRST` take their one field before them; their records, too, start
with `in_avals`). `lax.custom_root`'s classes, whose constructors take
callables, have records of their own (jaxpr_io/families/hijax/solves.py).
Loading looks the name up in that table only (never a module or class
named in a file), checks each stored value's type and allowed values, and
calls the class with them: the rules are JAX's own code, so a loaded
program's jit, grad, vmap and jvp behave as the original's. A class outside the table (the
user's, from jax.experimental.hijax) holds the user's Python code and is
refused at `dumps` (`refusal`) unless both the writing and the loading
process register it (`register_hi_primitive`), as with `register_primitive`.

`dumps` rebuilds each object from the fields it stores and refuses it
unless the rebuilt object equals the original (params, input and output
avals): a release that adds a constructor argument this table lacks fails
loudly instead of writing a file that loads as another program.
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax
import numpy as np

from opt_einsum import paths as opt_einsum_paths

from jaxpr_io import compat
from jaxpr_io.compat import specialize
from jaxpr_io.compat import symbolic
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.format import limits
from jaxpr_io.safety import validate
from jaxpr_io.errors import FormatError, UnsupportedError
from jaxpr_io.codec import params
from jaxpr_io.codec.registry import register_param_codec
from jaxpr_io.families.hijax import jax_classes, solves


class Field(NamedTuple):
  """One constructor keyword argument of a hi primitive class."""
  name: str
  get: Callable[[Any], Any]          # the value, from the object
  check: Callable[[type, Any], bool]  # (class, stored value) -> valid?
  expected: str                       # what `check` accepts, for messages


def _param(name: str) -> Callable[[Any], Any]:
  return lambda prim: prim.params[name]


def _is_int(cls, v) -> bool:
  del cls
  return type(v) is int and -(2**31) <= v < 2**31   # never a bool


def _is_int_dtype(cls, v) -> bool:
  del cls
  return isinstance(v, np.dtype) and np.issubdtype(v, np.integer)


def _is_size(cls, v) -> bool:
  del cls
  return (type(v) is int and 0 <= v < 2**63) or type(v) is symbolic.DimExpr


def _is_axes(cls, v) -> bool:
  return type(v) is tuple and all(_is_int(cls, a) for a in v)


def _one_of(values: Callable[[type], tuple]) -> Callable[[type, Any], bool]:
  return lambda cls, v: type(v) is str and v in values(cls)


def _is_einsum_path(cls, v) -> bool:
  """`optimize` of Einsum: a bool, a path strategy that opt_einsum (which
  its expand rule calls) knows, or an explicit path of index tuples."""
  del cls
  if type(v) is bool:
    return True
  if type(v) is str:
    try:
      opt_einsum_paths.get_path_fn(v)
    except KeyError:
      return False
    return True
  return type(v) is tuple and all(
      type(step) is tuple and all(type(i) is int and 0 <= i < 2**31
                                  for i in step) for step in v)


def search_problem(eqn) -> str | None:
  """Why an untrusted file may not ask for the einsum path search of a
  `call_hi_primitive` (or its linearized form) equation, if it may not:
  the search its `optimize` names takes time exponential in the number of
  operands, beyond `limits.EINSUM_SEARCH_OPERANDS` (read.equations runs
  this on untrusted loads)."""
  prim = eqn.params.get("_prim")
  if type(prim) is not compat.ADAPTER.hi_prim_classes.get("jax.numpy.Einsum"):
    return None
  optimize = "optimal" if prim.optimize is True else prim.optimize
  if type(optimize) is not str:
    return None
  most = limits.EINSUM_SEARCH_OPERANDS.get(optimize.lower())
  operands = len(prim.in_avals)
  if most is None or operands <= most:
    return None
  return (f"its einsum of {operands} operands asks for opt_einsum's "
          f"{optimize!r} path search (optimize={prim.optimize!r}), whose "
          f"time grows exponentially with them; an untrusted file may ask "
          f"for it for at most {most} operands. Save the program with "
          "optimize='greedy' or an explicit path, or load it with "
          "trusted=True if you know where it comes from")


def _is_precision(cls, v) -> bool:
  """`precision` of Einsum: what dot_general's param may be, or a string
  (or pair of strings) that names a `Precision`, as the caller may pass."""
  del cls
  ok, _ = validate.PARAM_VALUE_RULES["precision"]
  return ok(v) or _names_precision(v) or (
      type(v) is tuple and len(v) == 2 and all(map(_names_precision, v)))


def _names_precision(v) -> bool:
  return type(v) is str and v in compat_tables.PRECISION_NAMES


def _is_optional_dtype(cls, v) -> bool:
  del cls
  ok, _ = validate.PARAM_VALUE_RULES["preferred_element_type"]
  return ok(v)


_SEARCH_SIDES = ("left", "right")

# Stable name -> the keyword arguments its class's constructor takes after
# the input avals. Every release's classes of the same name take the same.
_FIELDS: dict[str, tuple[Field, ...]] = {
    "jax.numpy.SearchSorted": (
        Field("side", _param("side"), _one_of(lambda cls: _SEARCH_SIDES),
              f"one of {_SEARCH_SIDES}"),
        Field("dimension", _param("dimension"), _is_int, "an int"),
        Field("batch_dims", _param("batch_dims"), _is_int, "an int"),
        Field("method", _param("method"),
              _one_of(lambda cls: tuple(cls.valid_methods)),
              "one of the class's valid_methods"),
        # Not a param: the class derives its output dtype from it.
        Field("out_dtype", lambda prim: prim.out_aval.dtype, _is_int_dtype,
              "an integer dtype"),
    ),
    "jax.numpy.Nonzero": (
        Field("size", _param("size"), _is_size,
              "a non-negative int or a symbolic dimension"),
        Field("axes", _param("axes"), _is_axes, "a tuple of ints"),
        Field("out_dtype", _param("out_dtype"), _is_int_dtype,
              "an integer dtype"),
    ),
    # jax._src.numpy.hijax.einsum (JAX 0.11+): no public function binds it.
    "jax.numpy.Einsum": (
        Field("subscripts", _param("subscripts"),
              lambda cls, v: type(v) is str and len(v) <= 1000,
              "a string"),
        Field("optimize", _param("optimize"), _is_einsum_path,
              "a bool, one of opt_einsum's path strategies or a path"),
        Field("precision", _param("precision"), _is_precision,
              "None, a Precision (or its name), a DotAlgorithmPreset or a "
              "pair of Precisions"),
        Field("preferred_element_type", _param("preferred_element_type"),
              _is_optional_dtype, "None, a dtype or a scalar type such as "
              "jnp.float32"),
    ),
    # checkpoint_name under the experimental jax_remat3 setting; the
    # constructors take the name first (`_NAME_FIRST`).
    "jax.ad_checkpoint.CheckpointName": (
        Field("name", _param("name"), lambda cls, v: type(v) is str,
              "a string"),),
    "jax.ad_checkpoint.CheckpointNameFwd": (
        Field("name", _param("name"), lambda cls, v: type(v) is str,
              "a string"),),
    # Their params are their input avals: nothing beyond `in_avals`.
    "jax.ad_checkpoint.PrimalLeftTangentRight": (),
    "jax.numpy.Ldexp": (),
    "jax.numpy.Frexp": (),
}


# The first JAX release with each class of `_FIELDS` that not every
# supported release has. A file naming one was written under such a
# release; loading it under an older one says so (`missing_here`).
_SINCE = {"jax.numpy.Ldexp": "0.12", "jax.numpy.Frexp": "0.12",
          "jax.numpy.Einsum": "0.11",
          "jax.ad_checkpoint.CheckpointNameFwd": "0.11",
          "jax.ad_checkpoint.PrimalLeftTangentRight": "0.11",
          **solves.SINCE}


def missing_here(name: str) -> str | None:
  """Why a record named `name` cannot be loaded under this JAX release, if
  it names one of the table's classes that this release lacks; else None."""
  if name not in _SINCE or name in compat.ADAPTER.hi_prim_classes:
    return None
  return (f"{name!r} is a hi primitive class of JAX {_SINCE[name]} and "
          f"later (jaxpr_io/families/hijax/prims.py), which this JAX ({jax.__version__}) "
          "does not have: the file was written under a newer JAX; load it "
          f"under jax >= {_SINCE[name]}")


def _describe(cls: type) -> str:
  return f"{cls.__module__}.{cls.__qualname__}"


def _in_avals(prim) -> tuple:
  in_avals = prim.in_avals
  if type(in_avals) is not tuple or not all(
      type(a) is compat.ShapedArray for a in in_avals):
    raise UnsupportedError(
        f"hi primitive {_describe(type(prim))} has in_avals {in_avals!r:.200}"
        ", not a tuple of arrays' avals")
  return in_avals


def _same(a, b) -> bool:
  return (a == b and a.in_avals == b.in_avals and a.out_aval == b.out_aval
          and a.effects == b.effects)


def encode_hi_prim(name: str, fields: tuple[Field, ...], prim) -> tuple:
  """Fields: (in_avals, *the values of `fields`)."""
  in_avals = _in_avals(prim)
  values = tuple(field.get(prim) for field in fields)
  for field, value in zip(fields, values):
    # What the reader would refuse is not written.
    if not field.check(type(prim), value):
      raise UnsupportedError(f"hi primitive {name!r}: {field.name} is "
                             f"{value!r:.100}, which jaxpr_io stores only "
                             f"as {field.expected}")
  # Rebuilding the object from what the file will hold must give the same
  # object, or the file would load as another program.
  rebuilt = _construct(type(prim), name, in_avals, fields, values,
                       UnsupportedError)
  if not _same(rebuilt, prim):
    raise UnsupportedError(
        f"hi primitive {name!r} ({prim!r:.200}) is not rebuilt exactly from "
        f"its input avals and {[f.name for f in fields]}: this JAX release "
        "gave it state that jaxpr_io's table (jaxpr_io/families/hijax/prims.py) does not "
        "store")
  return (in_avals, *values)


def decode_hi_prim(name: str, fields: tuple[Field, ...], cls: type,
                   stored: tuple):
  names = ("in_avals", *(f.name for f in fields))
  if type(stored) is not tuple or len(stored) != len(names):
    raise FormatError(f"hi primitive {name!r}: expected the fields "
                      f"({', '.join(names)}), got {stored!r:.200}")
  in_avals, *values = stored
  if type(in_avals) is not tuple or not all(
      type(a) is compat.ShapedArray for a in in_avals):
    raise FormatError(f"hi primitive {name!r}: in_avals {in_avals!r:.200} "
                      "is not a tuple of arrays' avals")
  for field, value in zip(fields, values):
    if not field.check(cls, value):
      raise FormatError(f"hi primitive {name!r}: {field.name} must be "
                        f"{field.expected}, got {value!r:.100}")
  return _construct(cls, name, in_avals, fields, values, FormatError)


# Classes whose constructors take their one field before the input avals.
_NAME_FIRST = frozenset({"jax.ad_checkpoint.CheckpointName",
                         "jax.ad_checkpoint.CheckpointNameFwd"})


def _construct(cls, name, in_avals, fields, values, error: type):
  """`cls(*in_avals, **values)`; what its checks raise becomes `error`."""
  kwargs = {field.name: value for field, value in zip(fields, values)}
  try:
    if name in _NAME_FIRST:
      return cls(*values, *in_avals)
    return cls(*in_avals, **kwargs)
  except Exception as e:  # pylint: disable=broad-except
    # The constructor is the class's own code (its checks, and JAX's shape
    # rules it runs) on values from the file: whatever it raises means the
    # values do not make an object of the class.
    raise error(f"hi primitive {name!r} cannot be built from in_avals "
                f"{in_avals!r:.200} and {kwargs!r:.200}: "
                f"{type(e).__name__}: {e}"[:1000]) from None


def refusal(value) -> str | None:
  """Why `dumps` cannot store `value`, if it is a hi primitive outside
  jaxpr_io's table (a user's class); else None."""
  bases = compat.ADAPTER.hi_prim_bases
  if not bases or not isinstance(value, bases):
    return None
  known = (", ".join(sorted(compat.ADAPTER.hi_prim_classes))
           or "none in this JAX release")
  why = jax_classes.refusal_reason(_describe(type(value)))
  if why is not None:
    return (f"the hi primitive {_describe(type(value))} is JAX's own, but "
            f"jaxpr_io does not store it: {why} (jaxpr_io/families/hijax/"
            f"jax_classes.py lists JAX's classes; it stores {known})")
  return (f"the hi primitive {_describe(type(value))} is a class of its "
          "own, whose rules (expand, jvp, batch, vjp) are Python code that "
          "a file cannot hold. jaxpr_io stores only JAX's own hi primitives, "
          f"listed in its table (jaxpr_io/families/hijax/prims.py: {known}), and "
          "classes registered with jaxpr_io.register_hi_primitive by both "
          "the writing and the loading process. Register it, or express the operation with jax.numpy/lax, "
          "or as a jax.custom_vjp/custom_jvp function, which jaxpr_io stores")


def specialize_hi_prim(name: str, fields: tuple[Field, ...], prim,
                       specializer):
  """`prim` for a program specialized to concrete sizes (or re-expressed in
  another scope): rebuilt from its input avals and fields, specialized.

  Its symbolic dimensions (a `nonzero`'s `size=floordiv(n^2 + n, 2)` in
  `tril_indices(n)`) are not in any operand's shape that the program
  specializes: evaluated by the object's own rules (`expand` at call time),
  they would name variables of no argument."""
  in_avals = tuple(specializer.aval(a) for a in _in_avals(prim))
  values = tuple(specializer.value(field.get(prim)) for field in fields)
  return _construct(type(prim), name, in_avals, fields, values,
                    UnsupportedError)


def _register(cls: type, name: str, fields: tuple[Field, ...]) -> None:
  register_param_codec(
      cls, name=name,
      encode=lambda prim: encode_hi_prim(name, fields, prim),
      decode=lambda stored: decode_hi_prim(name, fields, cls, stored))
  specialize.register_specializer(
      value_type=cls,
      specialize=lambda prim, s: specialize_hi_prim(name, fields, prim, s))


def _is_anything(cls, v) -> bool:
  del cls, v
  return True   # a user's class: its constructor checks its arguments


def register_hi_primitive(cls: type, *, name: str,
                          fields: tuple[str, ...] = ()) -> None:
  """Makes objects of exactly `cls`, a user's hi primitive class
  (jax.experimental.hijax), storable as `call_hi_primitive`'s `_prim`.

  `cls(*in_avals, **{f: obj.params[f] for f in fields})` must rebuild an
  object equal to `obj` (`dumps` checks it), and each such param must be a
  storable value. The loading process MUST register the same class under
  the same name before loading (loading never imports code): the class's
  rules are the program's code, as a registered primitive's are.
  """
  bases = compat.ADAPTER.hi_prim_bases
  if not bases:
    raise ValueError("this JAX release has no hi primitives")
  if not isinstance(cls, type) or not issubclass(cls, bases):
    raise TypeError(f"expected a subclass of {bases[0].__qualname__}, got "
                    f"{cls!r}")
  if type(fields) is not tuple or not all(
      type(f) is str and f.isidentifier() for f in fields):
    raise TypeError(f"fields must be a tuple of keyword names, got "
                    f"{fields!r}")
  _register(cls, name, tuple(Field(f, _param(f), _is_anything,
                                   "a value its constructor accepts")
                             for f in fields))


for _name, _cls in compat.ADAPTER.hi_prim_classes.items():
  if _name in _FIELDS:
    _register(_cls, _name, _FIELDS[_name])
# Classes whose constructors take callables (lax.custom_root's).
solves.register(compat.ADAPTER.hi_prim_classes)


params.register_explainers(refusal=refusal, missing_record=missing_here)
