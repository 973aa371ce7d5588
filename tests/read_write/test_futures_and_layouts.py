"""Format version 7: two new kinds of abstract value.

* `Aval.future` (`core.AbstractFuture`): JAX's asynchronous collectives
  (jax._src.lax.parallel's `*_start` functions, no public API) output a
  future that their `*_done` equation resolves. Programs with them
  round-trip (same printing, same bytes on re-dump) and compute
  bit-identical results on the 8 host CPU devices of tests/conftest.py;
  `pbroadcast_start` (JAX 0.10 only) lowers for GPUs only, so it is lowered
  for CUDA and the loaded program's async ops must equal the original's.
* `Aval.lin_val` (`state.AbstractLinVal`): `pin`, `unpin` and
  `create_linear` (jax._src.state.primitives). XLA:CPU has no `Pin`,
  `Unpin` or `CreateBuffer` custom calls, so the loaded program must lower
  to the original's StableHLO instead of running.

Crafted files that misuse the new fields raise `FormatError`.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import pytest
from jax._src.lax import parallel
from jax._src.state import primitives as state
from jax.sharding import PartitionSpec as P

import jaxpr_io
from jaxpr_io.api import program as program_api
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io import compat
from jaxpr_io import converters
from jaxpr_io.safety import validate
from tests.support import proto_edit
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)

if jax.device_count() < 8:
  pytest.skip("needs 8 devices (tests/conftest.py forces 8 host CPU devices "
              "unless JAX was initialized before it ran)",
              allow_module_level=True)

X = jnp.arange(16, dtype=jnp.float32).reshape(8, 2) / 7
_RING = tuple((i, (i + 1) % 8) for i in range(8))
_FUTURES_HOLD_DONE = compat.ADAPTER.release_line != "0.10"


def _primitives(prog) -> set[str]:
  return {e.primitive.name for j in validate.walk_jaxprs(
      prog.closed_jaxpr.jaxpr) for e in j.eqns}


def _has(primitive: str) -> bool:
  return hasattr(parallel, primitive + "_p")


@pytest.fixture(scope="module")
def auto_mesh():
  return jax.make_mesh((8,), ("i",), axis_types=(jax.sharding.AxisType.Auto,))


@pytest.fixture(scope="module")
def explicit_mesh():
  return jax.make_mesh((8,), ("i",),
                       axis_types=(jax.sharding.AxisType.Explicit,))


def _tiled(v):
  return jnp.tile(v, (8, 1))


# (body, check_vma, explicit mesh?, in spec, out spec, start, done)
_ASYNC = {
    "ppermute": (lambda v: parallel.ppermute_start(v, "i", _RING).done(),
                 True, False, P("i"), P("i"), "ppermute_start",
                 "ppermute_done"),
    "psum_invariant": (lambda v: parallel.psum_start(v, "i").done(), True,
                       False, P("i"), P("i"), "psum_invariant_start",
                       "psum_done"),
    "all_gather": (lambda v: parallel.all_gather_start(
        v, "i", tiled=True).done()[3:4] * 2.0, True, False, P("i"), P("i"),
                   "all_gather_start", "all_gather_done"),
    "all_to_all": (lambda v: parallel.all_to_all_start(
        _tiled(v) * jnp.arange(8.0)[:, None], "i", 0, 0,
        tiled=True).done()[5:6], True, False, P("i"), P("i"),
                   "all_to_all_start", "all_to_all_done"),
    "reduce_scatter": (lambda v: parallel.psum_scatter_start(
        _tiled(v) * jnp.arange(8.0)[:, None], "i", tiled=True).done(), False,
                       False, P("i"), P("i"), "reduce_scatter_start",
                       "reduce_scatter_done"),
    "all_gather_reduced": (lambda v: jax.lax.pcast(parallel.all_gather_start(
        v, "i", tiled=True, to="reduced").done(), "i", to="varying"), True,
                           True, P("i"), P("i"), "all_gather_reduced_start",
                           "all_gather_done"),
    # JAX 0.10 only: 0.11+ binds the synchronous primitives for these.
    "psum": (lambda v: parallel.psum_start(v, "i").done(), False, False,
             P("i"), P("i"), "psum_start", "psum_done"),
    "unreduced_psum": (lambda v: parallel.psum_start(
        jax.lax.pcast(v, "i", to="unreduced"), "i").done(), True, True,
                       P("i"), P(), "unreduced_psum_start", "psum_done"),
    "unreduced_reduce_scatter": (lambda v: parallel.psum_scatter_start(
        jax.lax.pcast(_tiled(v), "i", to="unreduced"), "i",
        tiled=True).done(), True, True, P("i"), P("i"),
                                 "unreduced_reduce_scatter_start",
                                 "reduce_scatter_done"),
}


def _async_program(name, auto_mesh, explicit_mesh):
  body, check_vma, explicit, in_spec, out_spec, start, done = _ASYNC[name]
  if not _has(start):
    pytest.skip(f"JAX {jax.__version__} has no {start}")
  mesh = explicit_mesh if explicit else auto_mesh
  f = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=in_spec,
                            out_specs=out_spec, check_vma=check_vma))
  x = jax.device_put(X, jax.NamedSharding(mesh, in_spec))
  prog = jaxpr_io.trace(f, x)
  if start not in _primitives(prog):
    pytest.skip(f"JAX {jax.__version__} binds no {start} here")
  assert done in _primitives(prog)
  return f, x, prog


@pytest.mark.parametrize("name", list(_ASYNC))
def test_async_collective_round_trips_and_computes_alike(
    name, auto_mesh, explicit_mesh):
  f, x, prog = _async_program(name, auto_mesh, explicit_mesh)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(loaded(x), f(x))
  assert_bit_identical(jax.jit(loaded)(x), f(x))
  # The future's value type (and, from JAX 0.11, its done function) come
  # back: the done equation's output aval is the future's inner aval.
  start, done = _ASYNC[name][5:]
  (future,) = [e.outvars[0].aval for j in validate.walk_jaxprs(
      loaded.closed_jaxpr.jaxpr) for e in j.eqns if e.primitive.name == start]
  assert type(future) is compat.AbstractFuture
  if _FUTURES_HOLD_DONE:
    assert future.done_fun == compat_tables.FUTURE_DONES[done].bind
  # What JAX supports of vmap and grad on these, the loaded program does
  # alike (or fails alike).
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([x, x * 2]))
  assert_same_outcome(jax.grad, lambda v: f(v).sum(),
                      lambda v: loaded(v).sum(), x)


_SSA = re.compile(r"%[\w#]+")
_LOC = re.compile(r"\s*loc\(.*\)$")


def _lines_with(text: str, marker: str) -> list[str]:
  """The StableHLO lines that hold `marker`, without value names and
  locations (the loaded program wraps the original in one more jit)."""
  return [_SSA.sub("%", _LOC.sub("", line)).strip()
          for line in text.splitlines() if marker in line]


@pytest.mark.skipif(not _has("pbroadcast_start"),
                    reason="pbroadcast_start is JAX 0.10's")
def test_pbroadcast_start_round_trips_and_lowers_for_cuda(auto_mesh):
  f = jax.jit(jax.shard_map(
      lambda v: parallel.pbroadcast_start(v, "i", 3).done(), mesh=auto_mesh,
      in_specs=P("i"), out_specs=P("i")))
  prog = jaxpr_io.trace(f, X)
  assert {"pbroadcast_start", "pbroadcast_done"} <= _primitives(prog)
  loaded = assert_roundtrip(prog, check=False)  # XLA:CPU cannot compile it
  got = converters.to_exported(loaded, platforms=("cuda",)).mlir_module()
  want = jax.export.export(f, platforms=("cuda",))(X).mlir_module()
  for marker in ("async_start", "collective_broadcast", "async_done"):
    assert _lines_with(got, marker), marker
    assert _lines_with(got, marker) == _lines_with(want, marker)


# ------------------------------------------------- pinned linear values
def _pinned(v):
  return state.unpin(state.pin(v * 2.0)) + 1.0


def _pinned_to_hbm(v):
  return state.unpin(state.pin(v, to="hbm")) * 3.0


def _created(v):
  return state.unpin(state.create_linear(jax.typeof(v))) + v


@pytest.mark.parametrize("f,primitives,markers", [
    (_pinned, {"pin", "unpin"}, ["@Pin", "@Unpin"]),
    (_pinned_to_hbm, {"pin", "unpin"}, ["@Pin", "@Unpin"]),
    (_created, {"create_linear", "unpin"}, ["@CreateBuffer", "@Unpin"]),
], ids=["pin", "pin_to_hbm", "create_linear"])
def test_pinned_linear_values_round_trip_and_lower_alike(f, primitives,
                                                         markers):
  f = jax.jit(f)
  prog = jaxpr_io.trace(f, X)
  assert primitives <= _primitives(prog)
  # XLA:CPU has no Pin/Unpin/CreateBuffer: load without compiling.
  loaded = assert_roundtrip(prog, check=False)
  (lin_val,) = {v.aval for j in validate.walk_jaxprs(
      loaded.closed_jaxpr.jaxpr) for e in j.eqns for v in e.outvars
                if type(v.aval) is compat.AbstractLinVal}
  assert lin_val.inner_aval == jax.typeof(X)
  _same_lowering(lambda g: g, f, loaded, X, markers)
  # Batching and differentiating: what JAX supports, the loaded program
  # lowers alike (or fails alike).
  _same_lowering(jax.vmap, f, loaded, jnp.stack([X, X]), markers)
  _same_lowering(jax.grad, lambda v: f(v).sum(), lambda v: loaded(v).sum(),
                 X, markers)


def _same_lowering(transform, original, loaded, x, markers):
  """`transform(loaded)` lowers to the StableHLO lines with `markers` that
  `transform(original)` lowers to, or fails with the same exception."""
  try:
    want = jax.jit(transform(original)).lower(x).as_text()
  except Exception as e:  # pylint: disable=broad-except
    # E.g. JAX 0.10's create_linear lowering rule, which takes no `ty` (a
    # JAX bug), or a transformation JAX has no rule for.
    with pytest.raises(type(e)):
      jax.jit(transform(loaded)).lower(x)
    return
  got = jax.jit(transform(loaded)).lower(x).as_text()
  for marker in markers:
    assert _lines_with(got, marker), marker
    assert _lines_with(got, marker) == _lines_with(want, marker)


# ---------------------------------------------------------- crafted files
def _future_prog(auto_mesh):
  f = jax.jit(jax.shard_map(
      lambda v: parallel.ppermute_start(v, "i", _RING).done(), mesh=auto_mesh,
      in_specs=P("i"), out_specs=P("i")))
  return jaxpr_io.trace(f, X)


def _crafted(prog, mutate, format_version=None):
  return proto_edit.edited(jaxpr_io.dumps(prog), mutate, format_version)


def _of_kind(msg, kind):
  return [a for a in msg.avals if a.WhichOneof("kind") == kind]


def test_a_future_is_stored_as_its_value_type_and_done_primitive(auto_mesh):
  msg = proto_edit.message(jaxpr_io.dumps(_future_prog(auto_mesh)))
  (aval,) = _of_kind(msg, "future")
  inner = msg.avals[aval.future.inner_aval]
  assert inner.WhichOneof("kind") == "shaped_array"
  assert list(inner.shaped_array.sizes) == [1, 2]
  if _FUTURES_HOLD_DONE:
    assert msg.strings[aval.future.done - 1] == "ppermute_done"
  else:
    assert aval.future.done == 0  # JAX 0.10's futures hold no done function


@pytest.mark.parametrize("mutate,match", [
    (lambda msg: setattr(_of_kind(msg, "future")[0].future, "inner_aval",
                         len(msg.avals) - 1 + 5), "does not come before"),
    (lambda msg: setattr(_of_kind(msg, "future")[0].future, "done",
                         len(msg.strings) + 7), "string index"),
    (lambda msg: (msg.strings.append("exp"),
                  setattr(_of_kind(msg, "future")[0].future, "done",
                          len(msg.strings))), "done primitive 'exp'"),
], ids=["later_inner_aval", "done_out_of_range", "done_not_a_done"])
def test_bad_futures_are_refused(auto_mesh, mutate, match):
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(_crafted(_future_prog(auto_mesh), mutate))


def test_a_future_of_a_future_is_refused(auto_mesh):
  def mutate(msg):
    futures = _of_kind(msg, "future")
    index = [i for i, a in enumerate(msg.avals)
             if a.WhichOneof("kind") == "future"][0]
    msg.avals.add().future.inner_aval = index  # a new, later future
    futures[0].future.inner_aval = index  # itself: not earlier
  with pytest.raises(jaxpr_io.FormatError, match="does not come before"):
    jaxpr_io.loads(_crafted(_future_prog(auto_mesh), mutate))

  def to_token(msg):
    msg.avals.add().token.SetInParent()
    msg.avals.add().future.inner_aval = len(msg.avals) - 2
  with pytest.raises(jaxpr_io.FormatError, match="not an array type"):
    jaxpr_io.loads(_crafted(_future_prog(auto_mesh), to_token))


def test_new_aval_kinds_before_version_7_are_refused(auto_mesh):
  with pytest.raises(jaxpr_io.FormatError, match="before version 7"):
    jaxpr_io.loads(_crafted(_future_prog(auto_mesh), lambda msg: None,
                            format_version=6))
  prog = jaxpr_io.trace(jax.jit(_pinned), X)
  with pytest.raises(jaxpr_io.FormatError, match="before version 7"):
    jaxpr_io.loads(_crafted(prog, lambda msg: None, format_version=6))


@pytest.mark.skipif(not _FUTURES_HOLD_DONE,
                    reason="JAX 0.10's futures hold no done function")
def test_a_future_without_its_done_primitive_loads_as_the_same_program(
    auto_mesh):
  # What a JAX 0.10 writer stores: the program is the same (JAX compares
  # futures by value type; the done equation resolves the future).
  prog = _future_prog(auto_mesh)
  data = _crafted(prog, lambda msg: setattr(
      _of_kind(msg, "future")[0].future, "done", 0))
  loaded = jaxpr_io.loads(data, check=True)
  assert str(loaded.closed_jaxpr) == str(prog.closed_jaxpr)
  assert_bit_identical(loaded(X), prog(X))
  # Re-dumped here, it holds no done primitive either (the crafted file
  # keeps the name in its strings table, so its bytes differ), and that
  # file re-dumps to itself.
  again = jaxpr_io.dumps(loaded)
  assert _of_kind(proto_edit.message(again), "future")[0].future.done == 0
  assert jaxpr_io.dumps(jaxpr_io.loads(again)) == again


def test_bad_lin_vals_are_refused(monkeypatch):
  prog = jaxpr_io.trace(jax.jit(_pinned), X)

  def bad_space(msg):
    _of_kind(msg, "lin_val")[0].lin_val.memory_space = 9
  with pytest.raises(jaxpr_io.FormatError, match="unknown memory space 9"):
    jaxpr_io.loads(_crafted(prog, bad_space))

  def later(msg):
    _of_kind(msg, "lin_val")[0].lin_val.inner_aval = len(msg.avals) + 3
  with pytest.raises(jaxpr_io.FormatError, match="does not come before"):
    jaxpr_io.loads(_crafted(prog, later))

  data = jaxpr_io.dumps(prog)
  # A JAX release without the type: the file says what it needs.
  monkeypatch.setattr(compat, "AbstractLinVal", None)
  with pytest.raises(jaxpr_io.FormatError, match="AbstractLinVal"):
    jaxpr_io.loads(data)


def test_what_the_format_cannot_hold_is_refused_at_dumps():
  prog = jaxpr_io.trace(jax.jit(_pinned), X)
  (eqn,) = [e for e in prog.closed_jaxpr.jaxpr.eqns[0].params["jaxpr"]
            .jaxpr.eqns if e.primitive.name == "pin"]
  eqn.outvars[0].aval = compat.AbstractLinVal(jax.typeof(X), "sram")
  with pytest.raises(jaxpr_io.UnsupportedError, match="'sram'"):
    jaxpr_io.dumps(prog)


@pytest.mark.skipif(not _FUTURES_HOLD_DONE,
                    reason="JAX 0.10's futures hold no done function")
def test_a_future_with_a_done_function_of_its_own_is_refused(auto_mesh):
  prog = _future_prog(auto_mesh)
  for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr):
    for e in j.eqns:
      if e.primitive.name == "ppermute_start":
        e.outvars[0].aval = compat.AbstractFuture(
            e.outvars[0].aval.inner_aval, lambda x: x)
  with pytest.raises(jaxpr_io.UnsupportedError, match="done primitives"):
    jaxpr_io.dumps(prog)


# ----------------------------------------- array layouts (JAX 0.11+)
def _relayout(x):
  from jax._src import pjit  # pylint: disable=g-import-not-at-top
  from jax.experimental import layout  # pylint: disable=g-import-not-at-top
  # (JAX 0.12 cannot yet add to a value with a layout: relayout comes last.)
  return pjit.relayout(x * 2.0, layout.Layout((1, 0), tiling=((2, 2),)))


def _layout_avals(msg):
  return [a.shaped_array for a in msg.avals
          if a.WhichOneof("kind") == "shaped_array"
          and a.shaped_array.HasField("layout")]


@pytest.mark.skipif(not compat.ARRAYS_HAVE_LAYOUT,
                    reason="relayout and ShapedArray.layout are JAX 0.11+'s")
def test_a_value_with_a_layout_round_trips_and_computes_alike():
  f = jax.jit(_relayout)
  prog = jaxpr_io.trace(f, X)
  assert "relayout" in _primitives(prog)
  try:
    expected = f(X)
  except NotImplementedError:
    expected = None  # JAX 0.11 traces relayout but cannot compile it
  loaded = assert_roundtrip(prog, check=expected is not None)
  (eqn,) = [e for j in validate.walk_jaxprs(loaded.closed_jaxpr.jaxpr)
            for e in j.eqns if e.primitive.name == "relayout"]
  (original,) = [e for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
                 for e in j.eqns if e.primitive.name == "relayout"]
  assert eqn.outvars[0].aval.layout == original.outvars[0].aval.layout
  assert eqn.outvars[0].aval.layout == eqn.params["dst_layout"]
  (stored,) = _layout_avals(proto_edit.message(jaxpr_io.dumps(prog)))
  assert stored.layout.WhichOneof("kind") == "record"
  if expected is None:
    with pytest.raises(NotImplementedError):
      jax.jit(loaded)(X)
    return
  assert_bit_identical(loaded(X), expected)
  assert_bit_identical(jax.jit(loaded)(X), f(X))
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([X, X * 2]))
  assert_same_outcome(jax.grad, lambda v: f(v).sum(),
                      lambda v: loaded(v).sum(), X)


def _layout_prog(monkeypatch):
  """A program whose output aval has a layout: relayout, or on a release
  without layouts the file a 0.11+ writer would make (the writer is
  shown a layout on the output's aval)."""
  if compat.ARRAYS_HAVE_LAYOUT:
    return jaxpr_io.trace(jax.jit(_relayout), X)
  prog = jaxpr_io.trace(jax.jit(lambda x: x * 2.0), X)
  out = prog.closed_jaxpr.jaxpr.outvars[0].aval
  fixed = compat.Layout((1, 0), tiling=((2, 2),))
  original = compat.aval_layout
  monkeypatch.setattr(compat, "aval_layout",
                      lambda a: fixed if a is out else original(a))
  # The file holds what this release's own reader refuses (a layout), so
  # the writer's debug read-back (tests/conftest.py) is off for it.
  monkeypatch.setattr(program_api, "READ_BACK", False)
  return prog


def test_a_layout_is_refused_where_arrays_carry_none(monkeypatch):
  prog = _layout_prog(monkeypatch)
  data = jaxpr_io.dumps(prog)
  monkeypatch.undo()
  assert _layout_avals(proto_edit.message(data))
  monkeypatch.setattr(compat, "ARRAYS_HAVE_LAYOUT", False)
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"layout.*cannot carry; load the file with JAX "
                           r"0\.11"):
    jaxpr_io.loads(data)


def test_bad_layouts_are_refused(monkeypatch):
  prog = _layout_prog(monkeypatch)
  with pytest.raises(jaxpr_io.FormatError, match="before version 7"):
    jaxpr_io.loads(_crafted(prog, lambda msg: None, format_version=6))

  def not_a_layout(msg):
    sa = _layout_avals(msg)[0]
    sa.layout.Clear()
    sa.layout.int = 3
  with pytest.raises(jaxpr_io.FormatError, match="is not a jax.experimental"):
    jaxpr_io.loads(_crafted(prog, not_a_layout))

  def wrong_rank(msg):
    sa = _layout_avals(msg)[0]
    del sa.sizes[1:]  # a rank-1 array with a rank-2 layout
  with pytest.raises(jaxpr_io.FormatError, match="rank 1 has the layout"):
    jaxpr_io.loads(_crafted(prog, wrong_rank))


def test_a_start_whose_output_is_no_future_does_not_type_check(auto_mesh):
  # The start equation's output aval replaced by the array it resolves to:
  # the done equation then gets an array. check=True (what untrusted files
  # are loaded with) refuses the program.
  def mutate(msg):
    (index,) = [i for i, a in enumerate(msg.avals)
                if a.WhichOneof("kind") == "future"]
    msg.avals[index].CopyFrom(msg.avals[msg.avals[index].future.inner_aval])
  with pytest.raises(jaxpr_io.FormatError, match="does not type-check"):
    jaxpr_io.loads(_crafted(_future_prog(auto_mesh), mutate), check=True)


@pytest.mark.parametrize("kind", ["future", "lin_val"])
def test_a_program_that_takes_a_future_or_lin_val_cannot_be_called(kind):
  """No caller can pass a future or a pinned linear value (only JAX's
  primitives make them, inside a program): a file whose program takes one
  loads (its jaxpr is well formed) but fails check=True, which promises a
  program that can be called (found by the fuzzer)."""
  def mutate(msg):
    # The root jaxpr's input, retyped: a new aval of `kind` holding its
    # array type.
    root = msg.jaxprs[msg.closed_jaxprs[msg.root].jaxpr]
    new = msg.avals.add()
    if kind == "future":
      new.future.inner_aval = root.invars[0]
    else:
      new.lin_val.inner_aval = root.invars[0]
    root.invars[0] = len(msg.avals) - 1
  data = _crafted(jaxpr_io.trace(lambda x: x, X), mutate)
  loaded = jaxpr_io.loads(data)
  assert type(loaded.in_avals[0]).__name__ == {
      "future": "AbstractFuture", "lin_val": "AbstractLinVal"}[kind]
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"cannot be called: an input has type .*which no "
                           r"caller can pass"):
    jaxpr_io.loads(data, check=True)
