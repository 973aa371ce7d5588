"""`lax.custom_root` and `lax.custom_linear_solve` round-trip.

On JAX 0.11+ `custom_root` binds the hi primitive `CustomRoot` (and its
tangent solve `_RootLinearMap`), whose constructors take callables
(jaxpr_io/families/hijax/solves.py); on 0.10 it binds ordinary primitives.
`custom_linear_solve` binds the primitive `custom_linear_solve` on every
release. Each program here loads with `check=True`, prints as the original,
re-dumps to the same bytes, and gives bit-identical results to the original
function when called, under jit, grad, vmap and jvp; programs traced under
those transforms (where JAX's batch and differentiation rules build new
objects) round-trip too. Crafted files whose CustomRoot record holds a
wrong-typed or mismatched field fail with FormatError naming it.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io.api import program as program_api
from tests.hostile import test_expansion as expansion
from tests.support import proto_edit
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                                     ones_like, scalar)

HI_ROOT = "jax.lax.CustomRoot" in compat.ADAPTER.hi_prim_classes
# JAX 0.11 batches CustomRoot and _RootLinearMap as a VmapOf, which
# jaxpr_io refuses (families/hijax/jax_classes.py); 0.12's batch rules build
# objects of the classes themselves.
VMAP_OF_ROOT = compat.ADAPTER.release_line == "0.11"

A = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.25], [0.5, 0.25, 2.0]],
             np.float32)              # symmetric positive definite
M = np.array([[3.0, 1.0, 0.0], [-1.0, 2.0, 0.5], [0.25, 0.0, 1.5]],
             np.float32)              # not symmetric
X3 = np.array([1.0, -2.0, 0.5], np.float32)


def _newton(f, y0, steps=8):
  """A solve for custom_root: Newton steps with f's scalar derivative."""
  def step(_, y):
    fy, dfy = jax.jvp(f, (y,), (jnp.ones_like(y),))
    return y - fy / dfy
  return lax.fori_loop(0, steps, step, y0)


def sqrt_root(x):
  # tangent_solve calls its linear map: a _RootLinearMap on 0.11+.
  return lax.custom_root(lambda y: y * y - x, jnp.ones_like(x), _newton,
                         lambda g, y: y / g(jnp.ones_like(y)))


def linear_root(x):
  # f(y) = A y - x, solved exactly; tangent_solve builds g's Jacobian.
  f = lambda y: A @ y - x
  solve = lambda f, y0: y0 - jnp.linalg.solve(jax.jacobian(f)(y0), f(y0))
  tangent_solve = lambda g, y: jnp.linalg.solve(jax.jacobian(g)(y), y)
  return lax.custom_root(f, jnp.zeros_like(x), solve, tangent_solve)


def pytree_aux_root(x):
  # A dict guess, and a solve that returns aux data (its residual).
  def f(y):
    return {"a": y["a"] ** 3 - x, "b": y["b"] * 2.0 - x.sum()}
  def solve(f, y0):
    y = _tree_newton(f, y0)
    return y, jnp.abs(f(y)["a"]).sum()
  def tangent_solve(g, y):
    diag = g(jax.tree_util.tree_map(jnp.ones_like, y))
    return jax.tree_util.tree_map(lambda t, d: t / d, y, diag)
  guess = {"a": jnp.ones_like(x), "b": jnp.float32(0.5)}
  return lax.custom_root(f, guess, solve, tangent_solve, has_aux=True)


def _tree_newton(f, y0):
  # Each leaf of f depends on its own leaf only (elementwise).
  def step(_, y):
    fy, dfy = jax.jvp(f, (y,), (jax.tree_util.tree_map(jnp.ones_like, y),))
    return jax.tree_util.tree_map(lambda a, b, c: a - b / c, y, fy, dfy)
  return lax.fori_loop(0, 8, step, y0)


def linear_solve_symmetric(b):
  return lax.custom_linear_solve(lambda v: A @ v, b,
                                 lambda mv, r: jnp.linalg.solve(A, r),
                                 symmetric=True)


def linear_solve_transpose(b):
  return lax.custom_linear_solve(
      lambda v: M @ v, b, lambda mv, r: jnp.linalg.solve(M, r),
      transpose_solve=lambda vm, r: jnp.linalg.solve(M.T, r))


def linear_solve_forward_only(b):
  # Without transpose_solve: forward-mode only (grad fails in JAX itself).
  return lax.custom_linear_solve(lambda v: M @ v, b,
                                 lambda mv, r: jnp.linalg.solve(M, r))


POSITIVE = np.array([2.0, 0.5, 9.0], np.float32)
# name -> (function, argument, whether reverse mode works).
PROGRAMS = {
    "custom_root_sqrt": (sqrt_root, POSITIVE, True),
    # tangent_solve's jax.jacobian vmaps the _RootLinearMap.
    **({} if VMAP_OF_ROOT else {
        "custom_root_linear_jacobian": (linear_root, X3, True)}),
    "custom_root_pytree_has_aux": (pytree_aux_root, POSITIVE, True),
    "custom_linear_solve_symmetric": (linear_solve_symmetric, X3, True),
    "custom_linear_solve_transpose_solve": (linear_solve_transpose, X3,
                                            True),
    "custom_linear_solve_forward_only": (linear_solve_forward_only, X3,
                                         False),
}


def _loss(f):
  return lambda x: scalar(f(x))


def _transforms(reverse: bool):
  """name -> transform of a function of one array, as users apply them."""
  out = {
      "call": lambda f: f,
      "vmap": jax.vmap,
      "jvp": lambda f: lambda x: jax.jvp(f, (x,), (ones_like(x),)),
  }
  if reverse:
    out["grad"] = lambda f: jax.grad(_loss(f))
    out["grad_of_vmap"] = lambda f: jax.grad(_loss(jax.vmap(f)))
  return out


def _batch(x):
  return np.stack([x, x * 1.5 + 0.25])


def _args(name, x):
  return (_batch(x),) if "vmap" in name else (x,)


def _structure_check(f, x, name):
  # custom_root binds the hi primitive where the release has it.
  text = str(jax.make_jaxpr(f)(x))
  if name.startswith("custom_root") and HI_ROOT:
    assert "CustomRoot" in text
  if name.startswith("custom_linear_solve"):
    assert "custom_linear_solve" in text


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_round_trips_and_transforms_alike(name):
  f, x, reverse = PROGRAMS[name]
  _structure_check(f, x, name)
  loaded = assert_roundtrip(jaxpr_io.trace(f, x))
  assert_bit_identical(loaded(x), f(x))
  for t_name, transform in _transforms(reverse).items():
    args = _args(t_name, x)
    expected = jax.jit(transform(f))(*args)
    assert_bit_identical(jax.jit(transform(loaded))(*args), expected)


def test_reverse_mode_without_transpose_solve_fails_alike():
  f, x, _ = PROGRAMS["custom_linear_solve_forward_only"]
  loaded = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(f, x)))
  with pytest.raises(TypeError, match="transpose_solve"):
    jax.grad(_loss(f))(x)
  with pytest.raises(TypeError, match="transpose_solve"):
    jax.grad(_loss(loaded))(x)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
@pytest.mark.parametrize("t_name", ["vmap", "jvp", "grad"])
def test_programs_traced_under_transforms_round_trip(name, t_name):
  # JAX's batch and differentiation rules build new objects (0.12's
  # CustomRoot.batch makes a CustomRoot of vmapped callables): stored, they
  # load as the same program.
  f, x, reverse = PROGRAMS[name]
  if t_name == "grad" and not reverse:
    pytest.skip("JAX itself cannot differentiate it in reverse mode")
  if t_name == "vmap" and VMAP_OF_ROOT and name.startswith("custom_root"):
    pytest.skip("JAX 0.11 batches CustomRoot as VmapOf, which is refused")
  g = _transforms(reverse)[t_name](f)
  args = _args(t_name, x)
  loaded = assert_roundtrip(jaxpr_io.trace(g, *args))
  assert_bit_identical(jax.jit(loaded)(*args), jax.jit(g)(*args))
  # And transformed again: jvp of the loaded program of a transform.
  jvp = lambda h: jax.jit(lambda a: jax.jvp(h, (a,), (ones_like(a),)))
  assert_bit_identical(jvp(loaded)(*args), jvp(g)(*args))


@pytest.mark.parametrize("name", ["custom_root_sqrt",
                                  "custom_root_pytree_has_aux",
                                  "custom_linear_solve_transpose_solve"])
def test_symbolic_sizes(name):
  # Traced at a symbolic size, called at a concrete one: the callables'
  # jaxprs are specialized with the program (families/hijax/solves.py).
  f, x, _ = PROGRAMS[name]
  vector = name.startswith("custom_linear_solve")
  g = jax.vmap(f) if vector else f
  b, = jax.export.symbolic_shape("b")
  spec = jax.ShapeDtypeStruct((b, 3) if vector else (b,), np.float32)
  loaded = assert_roundtrip(jaxpr_io.trace(g, spec))
  xs = _batch(x) if vector else x
  assert_bit_identical(loaded(xs), g(xs))
  for t_name, transform in _transforms(True).items():
    args = _args(t_name, xs)
    assert_bit_identical(jax.jit(transform(loaded))(*args),
                         jax.jit(transform(g))(*args))


@pytest.mark.parametrize("name", ["custom_root_sqrt",
                                  "custom_root_pytree_has_aux"])
def test_the_same_bytes_every_time(name):
  # dumps traces the callables: twice, and after the original was
  # differentiated and batched, it writes the same bytes.
  f, x, _ = PROGRAMS[name]
  prog = jaxpr_io.trace(f, x)
  first = jaxpr_io.dumps(prog)
  assert jaxpr_io.dumps(prog) == first
  jax.grad(_loss(f))(x)
  jax.vmap(f)(_batch(x))
  assert jaxpr_io.dumps(prog) == first
  assert jaxpr_io.dumps(jaxpr_io.trace(f, x)) == first


# --------------------------------------------------------- crafted files
needs_hi_root = pytest.mark.skipif(
    not HI_ROOT, reason="this JAX's custom_root binds no hi primitive")

# The fields of a CustomRoot record (families/hijax/solves.py).
_IN_TREE, _SOLVE, _F, _HAS_AUX, _NAMES = 1, 3, 4, 6, 7


def _record(msg, name):
  names = list(msg.strings)
  records = [v.record for v in proto_edit.values(msg)
             if v.WhichOneof("kind") == "record"
             and names[v.record.type] == name]
  assert records, name
  return records[0]


def _edited_root(edit) -> bytes:
  data = jaxpr_io.dumps(jaxpr_io.trace(sqrt_root, POSITIVE))
  msg = proto_edit.message(data)
  edit(_record(msg, "jax.lax.CustomRoot"))
  return proto_edit.reframe(msg, data)


@needs_hi_root
@pytest.mark.parametrize("edit,match", [
    (lambda r: setattr(r.fields[_HAS_AUX], "int", 1),
     r"param '_prim'.*'jax.lax.CustomRoot': has_aux must be a bool, got 1"),
    (lambda r: setattr(r.fields[_IN_TREE], "int", 0),
     r"param '_prim'.*'jax.lax.CustomRoot': in_tree must be a treedef"),
    (lambda r: setattr(r.fields[_SOLVE], "str", 0),
     r"param '_prim'.*'jax.lax.CustomRoot': solve_jaxpr must be a jaxpr"),
    # f's jaxpr where the tangent solve's belongs: another signature.
    (lambda r: r.fields[_F].CopyFrom(r.fields[_F + 1]),
     r"param '_prim'.*'jax.lax.CustomRoot': f_jaxpr takes .* but the "
     r"class calls it on"),
    (lambda r: setattr(r.fields[_NAMES], "int", 3),
     r"param '_prim'.*'jax.lax.CustomRoot': names must be 3 functions' "
     r"names"),
    (lambda r: r.fields.pop(),
     r"param '_prim'.*'jax.lax.CustomRoot': the record must be \(in_avals"),
], ids=["has_aux_int", "in_tree_int", "solve_str", "f_signature",
        "names_int", "missing_field"])
def test_wrong_fields_are_format_errors(edit, match):
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(_edited_root(edit))


@pytest.mark.skipif(HI_ROOT, reason="this JAX has the class")
def test_a_class_of_a_newer_jax_says_which_release_has_it():
  # A file written under JAX 0.11+ with custom_root names
  # `jax.lax.CustomRoot`, which 0.10 lacks: crafted by renaming a
  # SearchSorted record.
  from jax._src.numpy import hijax as numpy_hijax  # pylint: disable=import-outside-toplevel
  data = jaxpr_io.dumps(jaxpr_io.trace(numpy_hijax.searchsorted, A[0], X3))
  data = proto_edit.rename_string(data, "jax.numpy.SearchSorted",
                                  "jax.lax.CustomRoot")
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"'jax.lax.CustomRoot' is a hi primitive class of "
                           r"JAX 0.11 and later.*under jax >= 0.11"):
    jaxpr_io.loads(data)


@needs_hi_root
def test_root_linear_map_with_a_wrong_field():
  data = jaxpr_io.dumps(jaxpr_io.trace(sqrt_root, POSITIVE))
  msg = proto_edit.message(data)
  record = _record(msg, "jax.lax.RootLinearMap")
  record.fields[-2].str = 0   # transposed, a string
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"'jax.lax.RootLinearMap': transposed must be a "
                           r"bool"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def _leaf_zeros(avals):
  return [jnp.zeros(a.shape, a.dtype)
          for a in jax.tree_util.tree_leaves(avals)]


@needs_hi_root
def test_solve_outputs_that_are_no_arrays_are_format_errors():
  # dumps stores only arrays' avals as CustomRoot's outputs. A file whose
  # solve_jaxpr, f_jaxpr and tangent_solve_jaxpr all agree on a token root
  # (jaxprs of jit calls of the same file, with the class's input avals),
  # as does the equation's output, is refused as the writer refuses it.
  closed = jax.make_jaxpr(sqrt_root)(POSITIVE)
  (prim,) = [e.params["_prim"] for e in closed.jaxpr.eqns
             if e.primitive.name == "call_hi_primitive"]
  ins = prim.in_avals

  def program(x):
    token = lax.create_token()
    solve = jax.jit(lambda *a: lax.create_token())(*_leaf_zeros(ins[:2]))
    f = jax.jit(lambda *a: a[-1])(*_leaf_zeros(ins[2]), token)
    tangent = jax.jit(lambda *a: a[-1])(*_leaf_zeros(ins[3]), token, token)
    return sqrt_root(x), solve, f, tangent

  data = jaxpr_io.dumps(jaxpr_io.trace(program, POSITIVE))
  msg = proto_edit.message(data)
  calls = [e for e in proto_edit.all_equations(msg)
           if msg.strings[e.primitive] in ("jit", "pjit")]
  record = _record(msg, "jax.lax.CustomRoot")
  names = list(msg.strings)
  (token,) = [e.outvars[0] for e in proto_edit.all_equations(msg)
              if names[e.primitive] == "create_token"][:1]
  for eqn in proto_edit.by_primitive(msg, "call_hi_primitive"):
    if record in [p.value.record for p in
                  msg.param_sets[eqn.param_set].params]:
      eqn.outvars[0] = token
  for field, call in zip((_SOLVE, _F, _F + 1), calls):
    (param,) = [p for p in msg.param_sets[call.param_set].params
                if names[p.name] == "jaxpr"]
    record.fields[field].jaxpr = msg.closed_jaxprs[
        param.value.closed_jaxpr].jaxpr
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"'jax.lax.CustomRoot': solve_jaxpr's outputs "
                           r"must be a tuple of arrays' avals, got "
                           r"\(AbstractToken\(\),\)"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


# ------------------------------------------------------ hostile: expansion
def _root_call_graph_file(levels: int) -> bytes:
  """custom_root whose `f` calls `levels` nested jit functions, each calling
  the one below twice: the CustomRoot record's f_jaxpr inlines to
  2**levels equations in a few KB (what tests/hostile/test_expansion.py
  crafts for a program's own jaxprs). Written without the debug read-back,
  which is a load: the child measures that."""
  g = lambda y: -y  # noqa: E731
  for _ in range(levels):
    g = jax.jit(lambda y, g=g: g(y) + g(y))
  fn = lambda x: lax.custom_root(  # noqa: E731
      lambda y: g(y) - x, jnp.ones_like(x), _newton,
      lambda h, y: y / h(jnp.ones_like(y)))
  saved, program_api.READ_BACK = program_api.READ_BACK, False
  try:
    return jaxpr_io.dumps(jaxpr_io.trace(fn, POSITIVE))
  finally:
    program_api.READ_BACK = saved


_LOAD_PLAIN = """
    def ACT():
      prog = jaxpr_io.load(ARGS[0])
      print("EQNS:", len(prog.closed_jaxpr.jaxpr.eqns))
"""


@needs_hi_root
def test_a_record_jaxpr_that_expands_costs_its_size(tmp_path):
  # The record's jaxprs are type-checked where the program's are, by
  # check=True within its inlined-size limit; a plain load builds them
  # shared, within the budget and the child's time.
  data = _root_call_graph_file(expansion.CALL_LEVELS)
  assert len(data) < 16000, len(data)
  path = expansion._write(tmp_path, data)  # pylint: disable=protected-access
  child = expansion._run(_LOAD_PLAIN, path)  # pylint: disable=protected-access
  assert child.lines("EQNS:"), str(child)
  child = expansion._run(expansion._LOAD, path, "check")  # pylint: disable=protected-access
  message = expansion._format_error(child)  # pylint: disable=protected-access
  assert re.search(r"expands to [\d,]+ equations, inputs and outputs .* "
                   r"over the [\d,]+ that check=True walks", message), message


@needs_hi_root
def test_a_record_jaxpr_that_does_not_type_check_is_refused_by_check():
  # f_jaxpr (y * y - x) with its `mul` typed float32[4] where it computes a
  # float32[3]: its signature is the class's, so it loads; check=True
  # type-checks it as it does the program's sub-jaxprs.
  data = jaxpr_io.dumps(jaxpr_io.trace(sqrt_root, POSITIVE))
  msg = proto_edit.message(data)
  names = list(msg.strings)
  f = msg.closed_jaxprs[
      _record(msg, "jax.lax.CustomRoot").fields[_F].closed_jaxpr].jaxpr
  (mul,) = [e for e in proto_edit.equations(msg, f)
            if names[e.primitive] == "mul"]
  wrong = msg.avals.add()
  wrong.CopyFrom(msg.avals[mul.outvars[0]])
  assert list(wrong.shaped_array.sizes) == [3]
  wrong.shaped_array.sizes[:] = [4]
  mul.outvars[0] = len(msg.avals) - 1
  bad = proto_edit.reframe(msg, data)
  jaxpr_io.loads(bad)
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"param '_prim' of equation \d+ "
                           r"\(call_hi_primitive\) of .*the program does "
                           r"not type-check: JaxprTypeError: .*f32\[4\]"):
    jaxpr_io.loads(bad, check=True)
