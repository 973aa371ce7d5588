"""JAX's own hi primitives round-trip (jaxpr_io/families/hijax/prims.py).

`call_hi_primitive`'s `_prim` param is an object of a JAX-defined class
(jax._src.numpy.hijax.SearchSorted, ...). jax.numpy binds them from JAX 0.12
(searchsorted, interp, digitize, histogram, nonzero/argwhere with a size,
ldexp, frexp); every supported release defines SearchSorted and Nonzero,
which jax._src.numpy.hijax's functions bind. Each program here survives
dumps -> loads exactly (same printing, same bytes on re-dump), gives
bit-identical results to the original function under jit, and the same
vmap, jvp and grad. Crafted files with an unknown class or bad constructor
arguments fail with FormatError naming the param; a user's hi primitive is
refused at dumps.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import hijax
from jax._src.numpy import hijax as numpy_hijax

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io.codec import dtypes
from jaxpr_io.safety import validate
from tests.support import proto_edit
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome, ones_like, scalar)

# JAX 0.12's jax.numpy binds hi primitives; earlier releases' do not.
_JNP_BINDS = "jax.numpy.Ldexp" in compat.ADAPTER.hi_prim_classes
needs_jnp = pytest.mark.skipif(
    not _JNP_BINDS, reason="this JAX's jax.numpy binds no hi primitive")

SORTED = jnp.array([-2.0, -0.5, 0.0, 0.0, 1.5, 3.0, 7.25, 9.0], jnp.float32)
QUERY = jnp.array([0.0, -3.0, 9.0, 2.0, 7.25, 10.0], jnp.float32)
SORTED_2D = jnp.stack([SORTED, SORTED * 2 + 1])
QUERY_2D = jnp.stack([QUERY, QUERY[::-1]])
SPARSE = jnp.array([0.0, 1.5, 0.0, -2.0, 0.0, 3.0], jnp.float32)
MATRIX = jnp.array([[0.0, 1.0, 0.0], [2.0, 0.0, 3.0]], jnp.float32)
X = jnp.array([0.3, -1.5, 6.0, 1e-3, 0.0, -0.0, 1e30, 3.0], jnp.float32)
N = jnp.array([3, -2, 0, 10, 5, 1, -100, 7], jnp.int32)


def _hi_prims(prog) -> list[str]:
  return [type(e.params["_prim"]).__name__
          for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
          for e in j.eqns if e.primitive.name == "call_hi_primitive"]


# name -> (function, args, the hi primitive class it binds, the indices of
# its float arguments, which grad and jvp differentiate).
PROGRAMS = {
    # Every release: jax._src.numpy.hijax's functions.
    "hijax_searchsorted_left": (
        lambda a, v: numpy_hijax.searchsorted(a, v),
        (SORTED, QUERY), "SearchSorted", (0, 1)),
    "hijax_searchsorted_right_sort": (
        lambda a, v: numpy_hijax.searchsorted(a, v, side="right",
                                              method="sort"),
        (SORTED, QUERY), "SearchSorted", (0, 1)),
    "hijax_searchsorted_batched": (
        lambda a, v: numpy_hijax.searchsorted(a, v, batch_dims=1,
                                              dimension=1,
                                              method="compare_all",
                                              dtype=jnp.int16),
        (SORTED_2D, QUERY_2D), "SearchSorted", (0, 1)),
    "hijax_nonzero": (
        lambda x: numpy_hijax.nonzero(x, size=4),
        (SPARSE,), "Nonzero", (0,)),
    "hijax_nonzero_axes": (
        lambda x: numpy_hijax.nonzero(x, size=2, axes=(1,)),
        (MATRIX,), "Nonzero", (0,)),
}
# JAX 0.11+: jax._src.numpy.hijax.einsum binds Einsum.
if hasattr(numpy_hijax, "Einsum"):
  PROGRAMS.update({
      "hijax_einsum_matmul": (
          lambda a, b: numpy_hijax.einsum("ij,jk->ik", a, b),
          (MATRIX, MATRIX.T * 2 - 1), "Einsum", (0, 1)),
      "hijax_einsum_options": (
          lambda a, b: numpy_hijax.einsum(
              "ij,kj->i", a, b, optimize="greedy", precision="highest",
              preferred_element_type=np.dtype(np.float32)),
          (MATRIX, MATRIX + 1), "Einsum", (0, 1)),
      "hijax_einsum_path": (
          lambda a, b, c: numpy_hijax.einsum(
              "ij,jk,k->i", a, b, c, optimize=[(0, 1), (0, 1)],
              precision=(jax.lax.Precision.HIGHEST,
                         jax.lax.Precision.DEFAULT)),
          (MATRIX, MATRIX.T, SORTED[:2]), "Einsum", (0, 1, 2)),
  })

JNP_PROGRAMS = {
    # JAX 0.12+: jax.numpy itself.
    "searchsorted_left": (lambda a, v: jnp.searchsorted(a, v),
                          (SORTED, QUERY), "SearchSorted", (0, 1)),
    "searchsorted_right": (lambda a, v: jnp.searchsorted(a, v, side="right"),
                           (SORTED, QUERY), "SearchSorted", (0, 1)),
    "interp": (lambda x: jnp.interp(x, SORTED, jnp.sin(SORTED)),
               (QUERY,), "SearchSorted", (0,)),
    "digitize": (lambda x: jnp.digitize(x, SORTED[::2]), (QUERY,),
                 "SearchSorted", (0,)),
    "histogram": (lambda x: jnp.histogram(x, bins=SORTED[::2]), (QUERY,),
                  "SearchSorted", (0,)),
    "nonzero": (lambda x: jnp.nonzero(x, size=4, fill_value=-1), (SPARSE,),
                "Nonzero", (0,)),
    "argwhere": (lambda x: jnp.argwhere(x, size=5), (MATRIX,), "Nonzero",
                 (0,)),
    "ldexp": (lambda x, n: jnp.ldexp(x, n), (X, N), "Ldexp", (0,)),
    "frexp": (lambda x: jnp.frexp(x), (X,), "Frexp", (0,)),
}


def _round_trips(f, args, cls_name):
  prog = jaxpr_io.trace(f, *args)
  assert cls_name in _hi_prims(prog), _hi_prims(prog)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(*args), jax.jit(f)(*args))
  return loaded


def _same_transforms(f, loaded, args, float_args):
  # vmap: a batch of two, the second scaled (integers kept as they are).
  batch = [jnp.stack([a, a * 2 if jnp.issubdtype(a.dtype, jnp.floating)
                      else a]) for a in args]
  assert_same_outcome(jax.vmap, f, loaded, *batch)
  assert_same_outcome(
      lambda g: lambda *a: jax.jvp(g, a, ones_like(a)), f, loaded, *args)
  assert_same_outcome(
      lambda g: jax.grad(lambda *a: scalar(g(*a)), argnums=float_args),
      f, loaded, *args)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hijax_functions_round_trip(name):
  f, args, cls_name, float_args = PROGRAMS[name]
  loaded = _round_trips(f, args, cls_name)
  _same_transforms(f, loaded, args, float_args)


@needs_jnp
@pytest.mark.parametrize("name", sorted(JNP_PROGRAMS))
def test_jax_numpy_round_trips(name):
  f, args, cls_name, float_args = JNP_PROGRAMS[name]
  loaded = _round_trips(f, args, cls_name)
  _same_transforms(f, loaded, args, float_args)


@needs_jnp
def test_loaded_program_transforms_again():
  # A loaded program is dumped under vmap and grad: its hi primitives'
  # batch and jvp rules build new objects of the same classes, which are
  # stored in turn.
  f = lambda x, n: jnp.frexp(jnp.ldexp(x, n))[0] * jnp.interp(x, SORTED,
                                                            SORTED)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(f, X, N)))
  for g, args in ((jax.vmap(loaded), (jnp.stack([X, -X]), jnp.stack([N, N]))),
                  (jax.grad(lambda x, n: loaded(x, n).sum()), (X, N))):
    again = _round_trips(g, args, "Ldexp")
    del again


# --------------------------------------------------------- crafted files
def _searchsorted_file(**kwargs) -> bytes:
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda a, v: numpy_hijax.searchsorted(a, v, **kwargs), SORTED, QUERY))


def _record(msg, name: str):
  names = list(msg.strings)
  (record,) = [v.record for v in proto_edit.values(msg)
               if v.WhichOneof("kind") == "record"
               and names[v.record.type] == name]
  return record


def _edited(data: bytes, edit) -> bytes:
  msg = proto_edit.message(data)
  edit(_record(msg, "jax.numpy.SearchSorted"))
  return proto_edit.reframe(msg, data)


def test_file_names_the_class_it_stores():
  data = _searchsorted_file(side="right")
  assert "jax.numpy.SearchSorted" in proto_edit.message(data).strings
  loaded = jaxpr_io.loads(data)
  assert _hi_prims(loaded) == ["SearchSorted"]


@pytest.mark.parametrize("old,new,match", [
    ("jax.numpy.SearchSorted", "jax.numpy.SearchSortedV2",
     r"param '_prim'.*unknown param record type 'jax.numpy.SearchSortedV2'"),
    ("right", "middle", r"param '_prim'.*side must be one of"),
    ("sort", "bisect", r"param '_prim'.*method must be one of"),
])
def test_bad_names_in_the_file(old, new, match):
  data = proto_edit.rename_string(
      _searchsorted_file(side="right", method="sort"), old, new)
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(data)


@pytest.mark.skipif("jax.numpy.Ldexp" in compat.ADAPTER.hi_prim_classes,
                    reason="this JAX has the class")
def test_a_class_of_a_newer_jax_says_which_release_has_it():
  """A file written under JAX 0.12 with `jnp.ldexp` names
  `jax.numpy.Ldexp`, which older releases lack: crafted here by renaming
  a SearchSorted record."""
  data = proto_edit.rename_string(_searchsorted_file(),
                                  "jax.numpy.SearchSorted", "jax.numpy.Ldexp")
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"param '_prim': 'jax.numpy.Ldexp' is a hi "
                           r"primitive class of JAX 0.12 and later.*load it "
                           r"under jax >= 0.12"):
    jaxpr_io.loads(data)


def _set_dtype(field, dtype):
  field.dtype.dtype = dtypes.DTYPE_TO_ENUM[np.dtype(dtype)]


@pytest.mark.parametrize("edit,match", [
    # out_dtype, the last field, a float dtype.
    (lambda r: _set_dtype(r.fields[-1], np.float32),
     r"param '_prim'.*out_dtype must be an integer dtype"),
    # dimension out of the sorted array's range: the class's own check.
    (lambda r: setattr(r.fields[2], "int", 3),
     r"param '_prim'.*cannot be built.*dimension=3"),
    # dimension, a string.
    (lambda r: setattr(r.fields[2], "str", 0),
     r"param '_prim'.*dimension must be an int"),
    # in_avals, not a tuple of avals.
    (lambda r: setattr(r.fields[0], "int", 0),
     r"param '_prim'.*in_avals .* is not a tuple"),
    # a field too few.
    (lambda r: r.fields.pop(),
     r"param '_prim'.*expected the fields \(in_avals, side"),
], ids=["float_out_dtype", "dimension_range", "dimension_str", "in_avals",
        "missing_field"])
def test_bad_constructor_arguments(edit, match):
  data = _edited(_searchsorted_file(), edit)
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(data)


def test_out_dtype_that_disagrees_with_the_outputs():
  # The class builds int16 outputs; the equation's outputs say int32.
  data = _edited(_searchsorted_file(),
                 lambda r: _set_dtype(r.fields[-1], np.int16))
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"equation 0 \(call_hi_primitive\): output 0 has "
                           r"type int32\[6\], but its '_prim' \(SearchSorted\) "
                           r"returns int16\[6\]"):
    jaxpr_io.loads(data)


def test_input_avals_that_disagree_with_the_inputs():
  # Both stored in_avals made the query's (float32[6]): the class accepts
  # them, but the equation's first input is the float32[8] sorted array.
  data = _searchsorted_file()
  msg = proto_edit.message(data)
  items = _record(msg, "jax.numpy.SearchSorted").fields[0].tuple.items
  items[0].aval = items[1].aval
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"equation 0 \(call_hi_primitive\): input 0 has "
                           r"type float32\[8\], but its '_prim' "
                           r"\(SearchSorted\) takes float32\[6\]"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_in_avals_the_class_refuses():
  # The only input aval dropped from Nonzero's `in_avals`: its constructor
  # needs one.
  data = jaxpr_io.dumps(jaxpr_io.trace(
      lambda a: numpy_hijax.nonzero(a, size=2), SPARSE))
  msg = proto_edit.message(data)
  record = _record(msg, "jax.numpy.Nonzero")
  del record.fields[0].tuple.items[0]
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"param '_prim'.*'jax.numpy.Nonzero' cannot be "
                           r"built from in_avals \(\)"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


# ------------------------------------------------ user-defined: refused
def _user_hi_primitive(v):
  # The public base class: jax.experimental.hijax's VJPHiPrimitive (0.10),
  # HiPrim (0.11+).
  base = getattr(hijax, "HiPrim", None) or hijax.VJPHiPrimitive

  class Sin(base):

    def __init__(self, aval):
      self.in_avals, self.out_aval, self.params = (aval,), aval, {}
      super().__init__()

    def expand(self, x):
      return jnp.sin(x)

  return Sin(jax.typeof(v))(v) * 2


def test_user_hi_primitive_is_refused_by_name():
  prog = jaxpr_io.trace(jax.jit(_user_hi_primitive), X)
  with pytest.raises(
      jaxpr_io.UnsupportedError,
      match=r"equation 0 \(jit\).*\(call_hi_primitive\).*param '_prim'.*"
            r"Sin is a class of its own.*only JAX's own hi primitives.*"
            r"jax.numpy.SearchSorted"):
    jaxpr_io.dumps(prog)


@needs_jnp
def test_in_avals_fewer_than_the_inputs():
  # jnp.nonzero's fill value is an input of Nonzero; dropped from the stored
  # in_avals, the class builds a Nonzero without one, which takes one input
  # fewer than the equation has.
  data = jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: jnp.nonzero(x, size=4, fill_value=-1), SPARSE))
  msg = proto_edit.message(data)
  record = _record(msg, "jax.numpy.Nonzero")
  assert len(record.fields[0].tuple.items) == 2
  del record.fields[0].tuple.items[1]
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"call_hi_primitive has 2 inputs and 1 outputs but "
                           r"its '_prim' takes 1 and returns 1"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


# ------------------------------------------- user-defined, registered
_BASE = getattr(hijax, "HiPrim", None) or hijax.VJPHiPrimitive


class _Scale(_BASE):
  """x * factor: a user's hi primitive with a batch rule."""

  def __init__(self, aval, *, factor):
    self.in_avals, self.out_aval = (aval,), aval
    self.params = dict(factor=factor)
    super().__init__()

  def expand(self, x):
    return x * self.factor

  def batch(self, axis_data, args, dims):
    del axis_data
    (x,), (d,) = args, dims
    return _Scale(jax.typeof(x), factor=self.factor)(x), d


# Both the writing and the loading process register it (here: one process).
jaxpr_io.register_hi_primitive(_Scale, name="tests.Scale", fields=("factor",))


def test_registered_user_hi_primitive_round_trips():
  f = lambda x: _Scale(jax.typeof(x), factor=2.5)(x) + 1
  prog = jaxpr_io.trace(f, X)
  loaded = assert_roundtrip(prog)
  assert _hi_prims(loaded) == ["_Scale"]
  assert_bit_identical(jax.jit(loaded)(X), jax.jit(f)(X))
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([X, -X]))


def test_registered_user_hi_primitive_with_state_it_does_not_store():
  # `fields` leaves out `factor`: the constructor cannot rebuild the object.
  class Shift(_BASE):

    def __init__(self, aval, *, by=0.0):
      self.in_avals, self.out_aval = (aval,), aval
      self.params = dict(by=by)
      super().__init__()

    def expand(self, x):
      return x + self.by

  jaxpr_io.register_hi_primitive(Shift, name="tests.Shift")
  prog = jaxpr_io.trace(lambda x: Shift(jax.typeof(x), by=1.0)(x), X)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"param '_prim'.*'tests.Shift'.*is not rebuilt "
                           r"exactly"):
    jaxpr_io.dumps(prog)


def test_register_hi_primitive_refuses_bad_registrations():
  with pytest.raises(TypeError, match="expected a subclass"):
    jaxpr_io.register_hi_primitive(int, name="tests.Int")
  with pytest.raises(TypeError, match="fields must be a tuple"):
    jaxpr_io.register_hi_primitive(_Scale, name="tests.Scale2",
                                   fields=["factor"])
  with pytest.raises(ValueError, match="already registered"):
    jaxpr_io.register_hi_primitive(_Scale, name="tests.Scale3",
                                   fields=("factor",))
  with pytest.raises(ValueError, match="already registered"):
    jaxpr_io.register_hi_primitive(
        type("Other", (_BASE,), {}), name="jax.numpy.SearchSorted")


# ----------------------------------------------------------------- Einsum
needs_einsum = pytest.mark.skipif(not hasattr(numpy_hijax, "Einsum"),
                                  reason="JAX 0.10 has no Einsum")


@needs_einsum
@pytest.mark.parametrize("old,new,match", [
    ("greedy", "bogus",
     r"param '_prim'.*'jax.numpy.Einsum': optimize must be a bool, one of "
     r"opt_einsum's path strategies"),
    ("highest", "loudest",
     r"param '_prim'.*'jax.numpy.Einsum': precision must be None, a "
     r"Precision \(or its name\)"),
    ("ij,kj->i", "ij,kj->q",
     r"param '_prim'.*'jax.numpy.Einsum' cannot be built"),
])
def test_bad_einsum_arguments_in_the_file(old, new, match):
  f, args, _, _ = PROGRAMS["hijax_einsum_options"]
  data = proto_edit.rename_string(jaxpr_io.dumps(jaxpr_io.trace(f, *args)),
                                  old, new)
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(data)


@needs_einsum
@pytest.mark.parametrize("scalar_type", [jnp.float32, np.float32])
def test_einsum_scalar_type_preferred_element_type(scalar_type):
  # The class keeps what the caller passed, unconverted (JAX's DTypeLike),
  # as ragged_dot's param does: stored as it is, the loaded program prints,
  # computes and re-dumps as the original.
  _round_trips(lambda a: numpy_hijax.einsum(
      "ij->i", a, preferred_element_type=scalar_type), (MATRIX,), "Einsum")


# ------------------------------------------ checkpoint names (jax_remat3)
def _named(x):
  from jax._src import ad_checkpoint  # pylint: disable=import-outside-toplevel
  y = ad_checkpoint.checkpoint_name(jnp.sin(x), "a")
  if hasattr(ad_checkpoint, "CheckpointNameFwd"):
    y = ad_checkpoint.checkpoint_name_fwd(y * 2, "b")
  return jnp.cos(y) * x


def _left_right(x):
  from jax._src import ad_checkpoint  # pylint: disable=import-outside-toplevel
  return ad_checkpoint.primal_left_tangent_right(jnp.sin(x), x * 3)


@pytest.mark.parametrize("f,cls_name", [
    (_named, "CheckpointName"),
    pytest.param(_left_right, "PrimalLeftTangentRight",
                 marks=pytest.mark.skipif(
        "jax.ad_checkpoint.PrimalLeftTangentRight"
        not in compat.ADAPTER.hi_prim_classes, reason="JAX 0.10 binds a "
        "custom_jvp function")),
], ids=["checkpoint_name", "primal_left_tangent_right"])
def test_checkpoint_names_round_trip(f, cls_name):
  from jax._src import config  # pylint: disable=import-outside-toplevel
  with config.remat3(True):
    loaded = _round_trips(f, (X,), cls_name)
    _same_transforms(f, loaded, (X,), (0,))
    if f is _named:
      # Traced under grad: the names, as the class's jvp rule binds them.
      g = jax.grad(lambda x: f(x).sum())
      _round_trips(g, (X,), cls_name)


def _chain(n: int) -> str:
  """The subscripts of a chain of n matrix products."""
  letters = "abcdefghijklmnopqrstuvwxyz"
  return ",".join(letters[i:i + 2] for i in range(n)) + f"->a{letters[n]}"


@pytest.mark.skipif(not hasattr(numpy_hijax, "Einsum"),
                    reason="JAX 0.11+ binds Einsum")
@pytest.mark.parametrize("optimize, operands, refused", [
    ("optimal", 5, False), ("optimal", 6, True), (True, 6, True),
    ("Branch-All", 7, True), ("branch-2", 8, False), ("branch-2", 9, True),
    ("dp", 16, False), ("greedy", 12, False), ([(0, 1)] * 8, 9, False)])
def test_an_untrusted_einsum_path_search_is_bounded(optimize, operands,
                                                    refused):
  args = [np.full((2, 2), 0.5 + i / 8, np.float32) for i in range(operands)]
  fn = lambda *a: numpy_hijax.einsum(_chain(operands), *a, optimize=optimize)
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, *args))
  expected = jax.jit(fn)(*args)
  assert_bit_identical(jaxpr_io.loads(data, trusted=True)(*args), expected)
  if refused:
    with pytest.raises(jaxpr_io.FormatError,
                       match=rf"equation 0 \(call_hi_primitive\): its einsum "
                       rf"of {operands} operands asks for opt_einsum's "
                       r"'[\w-]+' path search .* at most \d+ operands"):
      jaxpr_io.loads(data)
  else:
    assert_bit_identical(jaxpr_io.loads(data)(*args), expected)


def test_einsum_search_bounds_are_opt_einsums_own():
  # The most operands for each exponential search: where opt_einsum's own
  # "auto" or "auto-hq" still picks it.
  from opt_einsum import paths  # pylint: disable=g-import-not-at-top
  from jaxpr_io.format import limits  # pylint: disable=g-import-not-at-top
  auto = [*paths._AUTO_CHOICES.items(), *paths._AUTO_HQ_CHOICES.items()]  # pylint: disable=protected-access
  for name, most in limits.EINSUM_SEARCH_OPERANDS.items():
    fn = paths.get_path_fn(name)
    assert max(n for n, f in auto if f is fn) == most, name
