"""Host callbacks and debug printing round-trip.

`jax.debug.print` / `jax.debug.log` are stored completely and print the same
text after loading. `jax.pure_callback`, `io_callback` and
`jax.debug.callback` are stored by the registered name of their Python
function: unregistered functions are refused when saving, and a loading
process that has not registered the name gets a FormatError naming it (shown
in a fresh subprocess).
"""

from __future__ import annotations

import json
import logging
import textwrap
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jax.experimental import io_callback

import jaxpr_io
from jaxpr_io.compat import tables as compat_tables
import jaxpr_io.families.callbacks as callbacks
from jaxpr_io.compat import tree_tuples
from jaxpr_io import FormatError, UnsupportedError, compat
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             run_fresh_python)

X = np.array([0.5, -1.25, 3.0], np.float32)
F32_3 = jax.ShapeDtypeStruct((3,), np.float32)


# ------------------------------------------------ registered host functions
@callbacks.register_callback("tests.families.test_callbacks.host_sin_cos")
def host_sin_cos(x, *, shift):
  x = np.asarray(x)
  return {"sin": np.sin(x) + shift, "cos": np.cos(x).astype(np.float32)}


IO_LOG: list = []


def host_record(x, tag):
  IO_LOG.append((int(tag), np.asarray(x).tolist()))
  return np.asarray(x).sum(keepdims=True).astype(np.float32)


callbacks.register_callback("tests.families.test_callbacks.host_record", host_record)


def host_show(x, y=None, *, label, scale):
  print(f"[{label}] x={np.asarray(x)} y={y} scale={np.asarray(scale)}")


callbacks.register_callback("tests.families.test_callbacks.host_show", host_show)


def host_triple(x):
  return np.asarray(x) * np.float32(3)


callbacks.register_callback("tests.families.test_callbacks.host_triple", host_triple)


class Point(NamedTuple):
  x: object
  y: object


jax.export.register_namedtuple_serialization(
    Point, serialized_name="tests.families.test_callbacks.Point")


def _run_captured(capfd, fn, *args):
  """stdout of `fn(*args)`, after all its callbacks ran."""
  capfd.readouterr()
  jax.block_until_ready(fn(*args))
  jax.effects_barrier()
  return capfd.readouterr().out


# ------------------------------------------------------------ debug.print
@pytest.mark.parametrize("ordered", [False, True])
def test_debug_print_same_text(capfd, ordered):
  def fn(x):
    y = jnp.sin(x)
    jax.debug.print("x={x} sum={} tag={t} {{braces}}", y.sum(), x=x,
                    t="static", ordered=ordered)
    return y * 2
  original = jaxpr_io.trace(fn, X)
  loaded = assert_roundtrip(original)
  [eqn] = [e for e in loaded.closed_jaxpr.jaxpr.eqns
           if e.primitive.name == "debug_print"]
  assert eqn.params["ordered"] is ordered
  assert eqn.params["fmt"] == "x={x} sum={} tag={t} {{braces}}"
  expected = _run_captured(capfd, jax.jit(original), X)
  assert expected.startswith("x=[ 0.5  -1.25  3.  ] sum=")
  assert "tag=static {braces}" in expected
  assert _run_captured(capfd, jax.jit(loaded), X) == expected
  assert _run_captured(capfd, loaded, X) == expected
  assert_bit_identical(loaded(X), original(X))


def test_debug_print_ordered_under_vmap_and_grad(capfd):
  def fn(x):
    jax.debug.print("first {}", x, ordered=True)
    jax.debug.print("second {a}", a=x * 2, ordered=True)
    return jnp.sum(x ** 2)
  original = jaxpr_io.trace(fn, np.float32(1.5))
  loaded = assert_roundtrip(original)
  xs = np.array([1.0, 2.0], np.float32)
  for transform in (jax.vmap, jax.grad):
    arg = xs if transform is jax.vmap else np.float32(1.5)
    expected = _run_captured(capfd, jax.jit(transform(original)), arg)
    assert expected.count("first") >= 1
    assert _run_captured(capfd, jax.jit(transform(loaded)), arg) == expected


def test_debug_print_pytree_arguments(capfd):
  def fn(x):
    jax.debug.print("tree={} none={n} point={p}",
                    {1: x, 2: [x[0], (x[1],)]}, n=None, p=Point(x[2], "s"))
    return x
  original = jaxpr_io.trace(fn, X)
  loaded = assert_roundtrip(original)
  expected = _run_captured(capfd, jax.jit(original), X)
  assert "point=Point(x=Array(3." in expected and "none=None" in expected
  assert _run_captured(capfd, jax.jit(loaded), X) == expected


def test_debug_log_same_record(caplog):
  def fn(x):
    jax.debug.log("logged {}", x)
    return x + 1
  original = jaxpr_io.trace(fn, X)
  loaded = assert_roundtrip(original)
  [eqn] = [e for e in loaded.closed_jaxpr.jaxpr.eqns
           if e.primitive.name == "debug_print"]
  record = eqn.params["logging_record"]
  assert record.pathname == __file__ and record.levelno == logging.INFO
  messages = []
  for program in (original, loaded):
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="jax._src.debugging"):
      jax.block_until_ready(jax.jit(program)(X))
      jax.effects_barrier()
    messages.append([(r.levelno, r.pathname, r.lineno, r.getMessage())
                     for r in caplog.records])
  assert messages[0] and messages[0][0][3].startswith("logged [")
  assert messages[1] == messages[0]


# ---------------------------------------------------------- debug.callback
def test_debug_callback_registered(capfd):
  def fn(x):
    jax.debug.callback(host_show, x, label="L", scale=2.0)
    jax.debug.callback(host_show, x, "static-y", label="M", scale=x[0],
                       ordered=True)
    return x * 2
  original = jaxpr_io.trace(fn, X)
  loaded = assert_roundtrip(original)
  eqns = [e for e in loaded.closed_jaxpr.jaxpr.eqns
          if e.primitive.name == "debug_callback"]
  assert [str(e.params["effect"]) for e in eqns] == ["Debug", "OrderedDebug"]
  expected = _run_captured(capfd, jax.jit(original), X)
  assert "[L] x=[ 0.5  -1.25  3.  ] y=None scale=2.0" in expected
  assert "[M] x=[ 0.5  -1.25  3.  ] y=static-y scale=0.5" in expected
  assert sorted(_run_captured(capfd, jax.jit(loaded), X).splitlines()) == (
      sorted(expected.splitlines()))


# -------------------------------------------- pure_callback, io_callback
def test_pure_callback_registered():
  def fn(x):
    out = jax.pure_callback(
        host_sin_cos, {"sin": F32_3, "cos": F32_3}, x, shift=np.float32(1.0),
        vmap_method="sequential")
    return out["sin"] * out["cos"]
  original = jaxpr_io.trace(fn, X)
  loaded = assert_roundtrip(original)
  [eqn] = [e for e in loaded.closed_jaxpr.jaxpr.eqns
           if e.primitive.name == "pure_callback"]
  assert eqn.params["callback"].callback_func is host_sin_cos
  assert eqn.params["result_avals"] == (compat.ShapedArray((3,), np.float32),) * 2
  assert_bit_identical(jax.jit(loaded)(X), jax.jit(original)(X))
  xs = np.stack([X, -X])
  assert_bit_identical(jax.jit(jax.vmap(loaded))(xs),
                       jax.jit(jax.vmap(original))(xs))


def test_io_callback_ordered_registered():
  def fn(x):
    a = io_callback(host_record, jax.ShapeDtypeStruct((1,), np.float32), x,
                    1, ordered=True)
    b = io_callback(host_record, jax.ShapeDtypeStruct((1,), np.float32),
                    x * a, tag=2, ordered=True)
    return a + b
  original = jaxpr_io.trace(fn, X)
  loaded = assert_roundtrip(original)
  runs = []
  for program in (original, loaded):
    IO_LOG.clear()
    out = jax.jit(program)(X)
    jax.effects_barrier()
    runs.append((list(IO_LOG), out))
  assert runs[0][0] == runs[1][0] and [t for t, _ in runs[0][0]] == [1, 2]
  assert_bit_identical(runs[1][1], runs[0][1])


@pytest.mark.skipif(
    "jax.io_callback.unordered" not in compat_tables.SINGLETON_EFFECTS,
    reason="jaxpr_io.compat does not find JAX's unordered IO effect "
           "(jax._src.callback._IOEffect)")
def test_io_callback_unordered_registered():
  def fn(x):
    return io_callback(host_record, jax.ShapeDtypeStruct((1,), np.float32), x,
                       3)
  original = jaxpr_io.trace(fn, X)
  loaded = assert_roundtrip(original)
  IO_LOG.clear()
  assert_bit_identical(jax.jit(loaded)(X), jax.jit(original)(X))
  jax.effects_barrier()
  assert IO_LOG == [(3, X.tolist())] * 2


# ------------------------------------------------------------ refusals
def _unregistered(x):
  return np.asarray(x)


@pytest.mark.parametrize("api", ["pure_callback", "io_callback",
                                 "debug_callback"])
def test_unregistered_function_is_refused(api):
  def fn(x):
    y = jnp.cos(x)
    if api == "pure_callback":
      return jax.pure_callback(_unregistered, F32_3, y)
    if api == "io_callback":
      return io_callback(_unregistered, F32_3, y)
    jax.debug.callback(_unregistered, y)
    return y
  with pytest.raises(UnsupportedError) as info:
    jaxpr_io.dumps(jaxpr_io.trace(fn, X))
  message = str(info.value)
  assert message.startswith(f"equation 1 ({api}), param 'callback': ")
  assert "tests.families.test_callbacks._unregistered" in message
  assert "register_callback" in message


def test_lambda_is_refused_with_its_qualname():
  def fn(x):
    return jax.pure_callback(lambda v: v, F32_3, x)
  with pytest.raises(UnsupportedError, match=r"test_lambda_is_refused_with_its"
                     r"_qualname\.<locals>\.fn\.<locals>\.<lambda>"):
    jaxpr_io.dumps(jaxpr_io.trace(fn, X))


def test_debug_callback_unstorable_static_argument():
  def fn(x):
    jax.debug.callback(host_show, x, object(), label="L", scale=1.0)
    return x
  with pytest.raises(UnsupportedError, match="param 'callback'.*object"):
    jaxpr_io.dumps(jaxpr_io.trace(fn, X))


# ------------------------------------------------------------ registry
def test_duplicate_registrations_name_the_earlier_one():
  with pytest.raises(ValueError, match="already registered for .*host_triple"):
    callbacks.register_callback("tests.families.test_callbacks.host_triple",
                                lambda x: x)
  with pytest.raises(ValueError, match="already registered under the name "
                     "'tests.families.test_callbacks.host_triple'"):
    callbacks.register_callback("tests.other.name", host_triple)
  with pytest.raises(TypeError, match="needs a callable"):
    callbacks.register_callback("tests.not_callable", 3)
  with pytest.raises(ValueError, match="non-empty string"):
    callbacks.register_callback("", lambda x: x)
  assert callbacks.registered_name(host_triple) == (
      "tests.families.test_callbacks.host_triple")


# ------------------------------------------------------------ subprocess
_CHILD = textwrap.dedent("""
    import json, sys
    import numpy as np
    import jaxpr_io
    import jaxpr_io.families.callbacks as callbacks
    path = sys.argv[1]
    try:
      jaxpr_io.load(path)
      print("ERROR: loaded without the callback registered")
    except jaxpr_io.FormatError as e:
      print("FORMAT-ERROR:", e)
    # An equivalent function: the file holds only the name.
    callbacks.register_callback("tests.families.test_callbacks.host_triple",
                                lambda x: np.asarray(x) * np.float32(3))
    program = jaxpr_io.load(path)
    out = program(np.array([1.0, 2.0, 4.0], np.float32))
    print("OUT:", json.dumps(np.asarray(out).tolist()), flush=True)
""")


def test_fresh_process_needs_the_registration(tmp_path):
  def fn(x):
    jax.debug.print("child sees {}", x)
    return jax.pure_callback(host_triple, F32_3, x) + 1
  path = str(tmp_path / "callback.jaxpr")
  jaxpr_io.save(path, jaxpr_io.trace(fn, X))
  result = run_fresh_python(_CHILD, path, timeout=120)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  [error] = [line for line in lines if line.startswith("FORMAT-ERROR:")]
  assert "'tests.families.test_callbacks.host_triple'" in error
  assert "not registered in this process" in error
  assert "register_callback" in error and "param 'callback'" in error
  assert "child sees [1. 2. 4.]" in lines
  assert "OUT: [4.0, 7.0, 13.0]" in lines


# ------------------------------------------------- stored values, bad input
@pytest.mark.parametrize("tree", [
    3, None, (), [], {}, (1, [2, None], {"a": 3, "b": (4,)}, {7: 1, -2: None}),
    ((1, 2), {"k": Point(1, [2])}),
])
def test_treedef_values(tree):
  treedef = jax.tree_util.tree_structure(tree)
  assert tree_tuples.decode_treedef(tree_tuples.encode_treedef(treedef)) == treedef


def test_unregistered_pytree_node_is_refused():
  class Opaque(NamedTuple):
    a: object
  treedef = jax.tree_util.tree_structure(Opaque(1))
  with pytest.raises(UnsupportedError, match="register_namedtuple_serial"):
    tree_tuples.encode_treedef(treedef)


@pytest.mark.parametrize("stored, match", [
    ("leaf", "not a \\(kind, ...\\) tuple"),
    (("branch", ()), "not a known node kind"),
    (("tuple",), "not a known node kind"),
    (("tuple", [("leaf",)]), "children .* not a tuple"),
    (("dict", ("a",), ()), "keys"),
    (("dict", ("a", 1), (("leaf",), ("leaf",))), "cannot be rebuilt"),
    (("custom", "no.such.node", np.zeros(0, np.uint8), ()), "not registered"),
    (("custom", "tests.families.test_callbacks.Point", np.zeros(2, np.int32), ()),
     "uint8 auxdata"),
])
def test_bad_treedef_values(stored, match):
  with pytest.raises(FormatError, match=match):
    tree_tuples.decode_treedef(stored)


def _codec(primitive, param):
  from jaxpr_io.codec import registry  # pylint: disable=g-import-not-at-top
  return registry.EQN_PARAM_CODECS[(primitive, param)]


@pytest.mark.parametrize("primitive, param, stored, match", [
    ("pure_callback", "callback", ("nobody.registered", ("leaf",)),
     "'nobody.registered', which is not registered"),
    ("io_callback", "callback", ("x",), "not a \\(name, in_tree\\) pair"),
    ("pure_callback", "callback", (3, ("leaf",)), "not a string"),
    ("debug_callback", "callback", ("tests.families.test_callbacks.host_show",
                                    ("leaf",), ((5, "s"),)),
     "not that of \\(args tuple"),
    ("debug_callback", "callback", (
        "tests.families.test_callbacks.host_show",
        ("tuple", (("tuple", (("leaf",),)), ("dict", (), ()))), ((5, "s"),)),
     "out of range"),
    ("debug_callback", "callback", ("tests.families.test_callbacks.host_show",
                                    ("tuple", (("leaf",), ("leaf",))),
                                    ((1, "a"), (0, "b"))), "increasing"),
    ("debug_callback", "callback", ("n", ("leaf",), ("bad",)),
     "not \\(position, value\\) pairs"),
    ("debug_callback", "effect", "jax.io_callback.ordered",
     "not a debug effect"),
    ("debug_callback", "effect", "made.up", "not a debug effect"),
    ("debug_print", "logging_record", ("name", "INFO", "f.py", 1, ""),
     "not \\(name, level"),
    ("pure_callback", "result_avals", ((((3,), np.float32),),), "6-tuple"),
    ("pure_callback", "result_avals", (((3,), "f32", False, None,
                                        compat.MemorySpace.Device, None),),
     "cannot be rebuilt"),
    ("pure_callback", "result_avals", (((-1,), np.dtype(np.float32), False,
                                        None, compat.MemorySpace.Device,
                                        None),), "cannot be rebuilt"),
])
def test_bad_stored_values(primitive, param, stored, match):
  with pytest.raises(FormatError, match=match):
    _codec(primitive, param).decode(stored, {})


def test_stored_values():
  def fn(x):
    jax.debug.callback(host_show, x, label="L", scale=2.0)
    return jax.pure_callback(host_triple, F32_3, x)
  closed = jax.make_jaxpr(fn)(X)
  debug_eqn, pure_eqn = [e for e in closed.jaxpr.eqns
                         if e.primitive.name in ("debug_callback",
                                                 "pure_callback")]
  assert _codec("debug_callback", "callback").encode(
      debug_eqn.params["callback"], debug_eqn.params) == (
          "tests.families.test_callbacks.host_show",
          ("tuple", (("tuple", (("leaf",),)),
                     ("dict", ("label", "scale"), (("leaf",), ("leaf",))))),
          ((1, "L"),))
  assert _codec("debug_callback", "effect").encode(
      debug_eqn.params["effect"], debug_eqn.params) == "jax.debug"
  assert _codec("pure_callback", "callback").encode(
      pure_eqn.params["callback"], pure_eqn.params) == (
          "tests.families.test_callbacks.host_triple",
          ("tuple", (("tuple", (("leaf",),)), ("dict", (), ()))))
  assert _codec("pure_callback", "result_avals").encode(
      pure_eqn.params["result_avals"], pure_eqn.params) == (
          ((3,), np.dtype(np.float32), False, None, compat.MemorySpace.Device,
           None),)


_ATOMS = st.one_of(
    st.none(), st.booleans(), st.integers(-3, 8), st.text(max_size=4),
    st.sampled_from(["leaf", "none", "tuple", "list", "dict", "custom",
                     "jax.debug", "tests.families.test_callbacks.host_show",
                     "tests.families.test_callbacks.host_triple",
                     "tests.families.test_callbacks.Point", np.dtype(np.float32),
                     compat.MemorySpace.Device]),
    st.just(np.zeros(3, np.uint8)))
_VALUES = st.recursive(
    _ATOMS, lambda inner: st.one_of(
        st.lists(inner, max_size=4).map(tuple),
        st.frozensets(st.one_of(st.integers(0, 3), st.text(max_size=2)),
                      max_size=3)),
    max_leaves=12)


@settings(max_examples=300, deadline=None, database=None,
          derandomize=True, suppress_health_check=list(HealthCheck))
@given(key=st.sampled_from(sorted(k for k in callbacks.registry.EQN_PARAM_CODECS
                                  if k[0] in ("pure_callback", "io_callback",
                                              "debug_callback",
                                              "debug_print"))),
       stored=_VALUES)
def test_arbitrary_stored_values_load_or_raise_format_error(key, stored):
  try:
    _codec(*key).decode(stored, {})
  except FormatError:
    pass
