"""JAX 0.10's boxes and logs round-trip (format version 8, jaxpr_io/families/hijax/mutable.py).

`jax._src.hijax.Box` and `Log` are mutable hijax types: their variables
carry quasi-dynamic data (what a box holds when a jaxpr starts and ends).
Programs that make, read and write boxes and logs, that take them as
arguments, and that pass them to jit, scan and cond survive dumps -> loads
exactly (same printing, same bytes on re-dump, check=True); called on fresh
boxes and logs, the loaded program returns bit-identical results and leaves
the same contents in them as the original function, directly and under
jit. Crafted files with bad quasi-dynamic data, or a box where a primitive
expects none (or none where it expects one), fail with FormatError. A JAX
without boxes (0.11.1 and later) refuses a file that has them, naming the
release that can load it.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.compat import hi_mutable as compat_hi_mutable
from tests.support import proto_edit
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip, bits
from tests.support import paths

needs_boxes = pytest.mark.skipif(
    not compat_hi_mutable.SUPPORTED,
    reason=f"JAX {jax.__version__} has no jax._src.hijax.Box (JAX 0.10 has)")
Box, Log = compat_hi_mutable.Box, compat_hi_mutable.Log

X = np.array([0.5, -1.25, 3.0], np.float32)
XS = np.array([[1.0, 2.0, 3.0], [-4.0, 0.25, 6.0]], np.float32)
GOLDEN_BOXES = os.path.join(paths.GOLDEN, "v8",
                            "jax-0.10.2", "hijax_boxes.jaxpr")


# ------------------------------------------------------------ programs
def box_add(b, x):
  b.set(b.get() + x)
  return x * 2.0


def box_pytree(b, x):
  # The box's tree structure changes: its final QDD differs from its
  # initial one.
  s = b.get()
  b.set((s["w"] * x, s["n"] + 1))
  return s["w"].sum()


def box_made_inside(x):
  b = Box(x)
  b.set(b.get() * 3.0)
  return b.get() + 1.0


def box_in_jit(b, x):
  return jax.jit(box_add)(b, x) + 1.0


def box_in_scan(b, xs):
  def body(c, y):
    b.set(b.get() + y)
    return c + y.sum(), None
  c, _ = jax.lax.scan(body, jnp.float32(0.0), xs)
  return c


def box_in_cond(b, x):
  return jax.lax.cond(x.sum() > 0, lambda: b.get() * 2.0, lambda: x)


def log_arg(log, x):
  log.append("a", x)
  log.append("b", x * 2.0)
  return x + 1.0


def log_made_inside(x):
  log = Log()
  log.append("a", x)
  return x * 2.0


def box_and_log_in_jit(b, log, x):
  @jax.jit
  def step(b, log, v):
    b.set(b.get() * 2.0 + v)
    log.append("seen", v)
    return v.sum()
  return step(b, log, x) + step(b, log, x * 3.0)


def _fresh_box():
  return Box(jnp.asarray(X) * 0.5)


# name -> (function, a function making fresh arguments).
PROGRAMS = {
    "box_add": (box_add, lambda: (_fresh_box(), X)),
    "box_pytree": (box_pytree, lambda: (
        Box({"w": jnp.asarray(X), "n": jnp.int32(4)}), X)),
    "box_made_inside": (box_made_inside, lambda: (X,)),
    "box_in_jit": (box_in_jit, lambda: (_fresh_box(), X)),
    "box_in_scan": (box_in_scan, lambda: (_fresh_box(), XS)),
    "box_in_cond": (box_in_cond, lambda: (_fresh_box(), X)),
    "log_arg": (log_arg, lambda: (Log(), X)),
    "log_made_inside": (log_made_inside, lambda: (X,)),
    "box_and_log_in_jit": (box_and_log_in_jit, lambda: (_fresh_box(), Log(),
                                                        X)),
}


def _contents(args) -> list:
  """What the boxes and logs among `args` hold, as comparable bits."""
  out = []
  for a in args:
    if isinstance(a, Box):
      value = a.get()
      out.append((jax.tree_util.tree_structure(value),
                  [bits(v) for v in jax.tree_util.tree_leaves(value)]))
    elif isinstance(a, Log):
      out.append({k: [bits(v) for v in vs] for k, vs in a._dct.items()})  # pylint: disable=protected-access
  return out


@needs_boxes
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_program_round_trips_and_computes_alike(name):
  fn, make_args = PROGRAMS[name]
  prog = jaxpr_io.trace(fn, *make_args())
  loaded = assert_roundtrip(prog)
  for transform in (lambda f: f, jax.jit):
    want_args, got_args = make_args(), make_args()
    want = transform(fn)(*want_args)
    got = transform(loaded)(*got_args)
    assert_bit_identical(got, want)
    assert _contents(got_args) == _contents(want_args)


@needs_boxes
def test_the_quasi_dynamic_data_is_stored_on_every_jaxpr():
  prog = jaxpr_io.trace(box_and_log_in_jit, *PROGRAMS["box_and_log_in_jit"][1]())
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  outer = loaded.closed_jaxpr.jaxpr
  inner = outer.eqns[0].params["jaxpr"].jaxpr
  for jaxpr, original in ((outer, prog.closed_jaxpr.jaxpr),
                          (inner, prog.closed_jaxpr.jaxpr.eqns[0]
                           .params["jaxpr"].jaxpr)):
    got = [compat_hi_mutable.var_qdds(v) for v in jaxpr.invars]
    assert got == [compat_hi_mutable.var_qdds(v) for v in original.invars]
    assert got[0][0] is not None and got[1] == ((), ())


@needs_boxes
def test_new_box_output_keeps_its_initial_qdd():
  prog = jaxpr_io.trace(box_made_inside, X)
  (eqn,) = [e for e in jaxpr_io.loads(jaxpr_io.dumps(prog)).closed_jaxpr
            .jaxpr.eqns if e.primitive.name == "new_box"]
  initial, final = compat_hi_mutable.var_qdds(eqn.outvars[0])
  assert initial == compat_hi_mutable.BoxTypeState((), jax.tree_util.tree_structure(
      None)) and final is None


@needs_boxes
def test_a_loaded_program_refuses_a_box_that_holds_something_else():
  loaded = jaxpr_io.loads(jaxpr_io.dumps(
      jaxpr_io.trace(box_add, *PROGRAMS["box_add"][1]())))
  for bad, match in ((Box(jnp.zeros(4)), "is a box holding"),
                     (Box((jnp.zeros(3),)), "is a box holding"),
                     (Log(), "is of type LogTy"),
                     (jnp.zeros(3), "is of type ArrayImpl")):
    with pytest.raises(TypeError, match=match):
      loaded(bad, X)
  with pytest.raises(TypeError, match=r"input args\[1\] is of type BoxTy, "
                                      r"but the program takes a float32\[3\]"):
    loaded(_fresh_box(), _fresh_box())


@needs_boxes
@pytest.mark.parametrize("qdd, match", [
    # JAX cannot trace a box in a box; a jaxpr can still claim one.
    (lambda: compat_hi_mutable.BoxTypeState((compat_hi_mutable.BoxTy(),),
                                    jax.tree_util.tree_structure(0)),
     "a box holding a value of type BoxTy cannot be stored"),
    (lambda: (), r"its quasi-dynamic data \(\) is not what JAX gives a "
                 "BoxTy"),
])
def test_what_the_format_cannot_hold_is_refused_at_dumps(qdd, match):
  # A fresh function: JAX caches traces, and this edits the jaxpr's Var.
  closed = jax.make_jaxpr(lambda b, x: box_add(b, x))(
      *PROGRAMS["box_add"][1]())
  closed.jaxpr.invars[0].initial_qdd = qdd()
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match="variable 0 of type BoxTy: " + match):
    jaxpr_io.dumps(closed)


def weak_in_box(s):
  # The box holds a weakly typed f32[] (from a Python float), and the jit's
  # body takes a box holding one.
  b = Box(s)
  return jax.jit(lambda b: b.get() * 2.0)(b)


@needs_boxes
def test_a_strongly_typed_array_for_a_weakly_typed_input_is_accepted():
  # JAX asserts that a box holds exactly what the jit's body expects;
  # the loaded program gives its inputs the weak types it was traced with.
  loaded = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(weak_in_box, 2.5)))
  assert loaded.in_avals[0].weak_type
  for transform in (lambda f: f, jax.jit):
    assert_bit_identical(transform(loaded)(np.float32(2.5)),
                         transform(weak_in_box)(np.float32(2.5)))
  with pytest.raises(TypeError, match=r"input args\[0\] is int32\[\], but "
                                      r"the program takes float32\[\]"):
    loaded(np.int32(2))


@needs_boxes
def test_a_box_cannot_be_bound_but_the_rest_can():
  prog = jaxpr_io.trace(lambda x, b: box_add(b, x), X, _fresh_box())
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"bind args\[0\]: the input is a BoxTy"):
    jaxpr_io.trace(box_add, _fresh_box(), X).bind(_fresh_box())
  bound = prog.bind(X)
  want_box, got_box = _fresh_box(), _fresh_box()
  assert_bit_identical(bound(got_box), box_add(want_box, X))
  assert _contents([got_box]) == _contents([want_box])


# ----------------------------------------------------- crafted files
def _crafted(fn, make_args, mutate, format_version=None) -> bytes:
  return proto_edit.edited(jaxpr_io.dumps(jaxpr_io.trace(fn, *make_args())),
                           mutate, format_version)


def _root(msg):
  return msg.jaxprs[msg.closed_jaxprs[msg.root].jaxpr]


def _aval_of_kind(msg, kind: str) -> int:
  return next(i for i, a in enumerate(msg.avals)
              if a.WhichOneof("kind") == kind)


def _box_state(msg):
  return _root(msg).qdds[0].initial.box


def _extra_leaf(msg):
  box = _box_state(msg)
  box.leaf_avals.append(box.leaf_avals[0])


def _box_leaf(msg):
  _box_state(msg).leaf_avals[0] = _aval_of_kind(msg, "hi_mutable")


def _treedef_not_a_treedef(msg):
  _box_state(msg).treedef.Clear()
  _box_state(msg).treedef.int = 3


def _qdd_on_an_array(msg):
  _root(msg).qdds[0].var = 1


def _no_final(msg):
  _root(msg).qdds[0].ClearField("final")


def _log_state_for_a_box(msg):
  _root(msg).qdds[0].initial.log.SetInParent()


def _twice(msg):
  qdds = _root(msg).qdds
  qdds.add().CopyFrom(qdds[0])


def _out_of_range(msg):
  _root(msg).qdds[0].var = 99


def _unknown_kind(msg):
  msg.avals[_aval_of_kind(msg, "hi_mutable")].hi_mutable.kind = 0


def _box_get_of_an_array(msg):
  proto_edit.by_primitive(msg, "box_get")[0].invars[0] = 1


def _box_get_returns_a_box(msg):
  proto_edit.by_primitive(msg, "box_get")[0].outvars[0] = _aval_of_kind(
      msg, "hi_mutable")


def _box_set_stores_a_box(msg):
  proto_edit.by_primitive(msg, "box_set")[0].invars[1] = 0


def _log_extend_of_a_box(msg):
  # log_arg's log is variable 0: make its aval a box's.
  msg.avals[_aval_of_kind(msg, "hi_mutable")].hi_mutable.kind = 1


@needs_boxes
@pytest.mark.parametrize("fn, mutate, match", [
    (box_add, _extra_leaf, "has 1 leaves, but it holds 2 leaf avals"),
    (box_add, _box_leaf, "holds a leaf of type BoxTy, not an array type"),
    (box_add, _treedef_not_a_treedef, "not a PyTreeDef"),
    (box_add, _qdd_on_an_array, r"variable 1 of type float32\[3\] has "
                                "quasi-dynamic data"),
    (box_add, _no_final, "input variable 0 of type BoxTy has no initial or "
                         "no final"),
    (box_add, _log_state_for_a_box, "a box's quasi-dynamic data is log"),
    (box_add, _twice, "ascending order"),
    (box_add, _out_of_range, "variable 99, but the jaxpr binds"),
    (box_add, _unknown_kind, "unknown mutable hijax type kind 0"),
    (box_add, _box_get_of_an_array, r"equation 0 \(box_get\): its first "
                                    "input is a ShapedArray, not a BoxTy"),
    (box_add, _box_get_returns_a_box, r"box_get\): returns \['BoxTy'\]"),
    (box_add, _box_set_stores_a_box, "stores a value that is not an array"),
    (log_arg, _log_extend_of_a_box, r"equation 0 \(log_extend\): its first "
                                    "input is a BoxTy, not a LogTy"),
])
def test_bad_files_are_refused(fn, mutate, match):
  data = _crafted(fn, PROGRAMS[fn.__name__][1], mutate)
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(data)


@needs_boxes
def test_boxes_before_version_8_are_refused():
  data = _crafted(box_add, PROGRAMS["box_add"][1], lambda msg: None,
                  format_version=7)
  with pytest.raises(jaxpr_io.FormatError,
                     match="a box or log aval in a file before version 8"):
    jaxpr_io.loads(data)


def _add_of_the_box(msg):
  proto_edit.by_primitive(msg, "add")[0].invars[0] = 0


def _box_holds_another_shape(msg):
  # The input box holds f32[4] where box_get reads f32[3].
  aval = msg.avals.add()
  aval.CopyFrom(msg.avals[_box_state(msg).leaf_avals[0]])
  aval.shaped_array.sizes[0] = 4
  _box_state(msg).leaf_avals[0] = len(msg.avals) - 1


@needs_boxes
@pytest.mark.parametrize("mutate, match", [
    (_add_of_the_box, "the program does not type-check"),
    # JAX's checker does not follow what a box holds into box_get's
    # `avals`; lowering the program from its inputs' QDD fails.
    (_box_holds_another_shape, "the program cannot be lowered and compiled"),
])
def test_programs_that_do_not_type_check_are_refused_by_check(mutate, match):
  data = _crafted(box_add, PROGRAMS["box_add"][1], mutate)
  jaxpr_io.loads(data)  # the file's structure is sound
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(data, check=True)


# ------------------------------------------------ a JAX without boxes
@pytest.mark.skipif(compat_hi_mutable.SUPPORTED,
                    reason=f"JAX {jax.__version__} has boxes")
def test_a_jax_without_boxes_refuses_them_naming_the_release():
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"a Box \(jax._src.hijax.BoxTy\), a mutable hijax "
                           r"type that JAX \S+ does not have .*written with "
                           r"JAX 0\.10\.2\); load it with JAX 0\.10\.2"):
    jaxpr_io.load(GOLDEN_BOXES)
