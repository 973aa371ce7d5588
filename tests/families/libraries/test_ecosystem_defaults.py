"""Ecosystem defaults (issue 27): Equinox's runtime errors (`eqx.error_if`,
`branched_error_if`, so Diffrax's `diffeqsolve` and Optimistix's solvers
with `throw=True`) are stored by name (library_table.LIBRARY_CALLBACKS) and
rebuilt from Equinox in the loading process, raising the same error on a
failing solve; the library functions that Lineax, Optimistix and Diffrax
hold in static data (norms, ...) are in LIBRARY_FUNCTIONS; a program of
jax.scipy.special functions round-trips.

The reference is the original program: the same outputs, bit for bit, and
on a failing input the same exception type carrying the library's message,
in this process and in a fresh one that imports only jaxpr_io (Equinox and
the libraries come from jaxpr_io's table).
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.codec import library_table as libraries
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                                     run_fresh_python)

eqx = pytest.importorskip("equinox")


def _error_of(fn, *args):
  """(exception type name, its message) of `jax.jit(fn)(*args)`."""
  try:
    jax.block_until_ready(jax.jit(fn)(*args))
  except Exception as e:  # pylint: disable=broad-except
    return type(e).__name__, str(e)
  raise AssertionError("the call did not fail")


def _assert_same_failure(original, loaded, args, message):
  want, got = _error_of(original, *args), _error_of(loaded, *args)
  assert want[0] == got[0], (want, got)
  assert message in want[1] and message in got[1], (want, got)


# ------------------------------------------------------------- programs
def error_if_program():
  def f(x):
    y = eqx.error_if(x, x > 10.0, "x is over ten")
    return jnp.sin(y) * 2.0
  return f, (np.array([1.0, 2.0, 3.0], np.float32),), (
      np.array([1.0, 20.0, 3.0], np.float32),), "x is over ten"


def branched_error_if_program():
  import equinox.internal as eqxi  # pylint: disable=g-import-not-at-top

  def f(x, i):
    return eqxi.branched_error_if(x * 3.0, i > 0, i,
                                  ["no error", "first", "second"]) + 1.0
  x = np.ones(2, np.float32)
  return f, (x, np.int32(0)), (x, np.int32(2)), "second"


def diffrax_ode(adjoint=None):
  """diffeqsolve with its defaults but the adjoint (`diffrax_ode_default`
  has that too): throw=True, so a solve that runs out of steps raises."""
  dfx = pytest.importorskip("diffrax")
  term = dfx.ODETerm(lambda t, y, k: -k * y + jnp.sin(t) * 0.5)
  adjoint = dfx.DirectAdjoint() if adjoint is None else adjoint

  def f(y0, k):
    sol = dfx.diffeqsolve(term, dfx.Tsit5(), 0.0, 1.0, 0.1, y0, args=k,
                          stepsize_controller=dfx.PIDController(
                              rtol=1e-4, atol=1e-6),
                          max_steps=16, adjoint=adjoint)
    return sol.ys[-1]
  y0 = np.array([1.0, -0.5, 0.25], np.float32)
  # A stiff k needs more than 16 steps at these tolerances.
  return f, (y0, np.float32(0.7)), (y0, np.float32(3000.0)), (
      "maximum number of solver steps")


def diffrax_ode_default():
  """The ODE with diffeqsolve's default adjoint, RecursiveCheckpointAdjoint:
  Equinox checkpointed while loops, symbolic-zeros custom_vjps with 16 and
  11 differentiable inputs (stored for their widest patterns), whose
  backward rule (8 float outputs, about a thousand equations a pattern) is
  over the equation budget: stored for no zero cotangents only."""
  dfx = pytest.importorskip("diffrax")
  return diffrax_ode(dfx.RecursiveCheckpointAdjoint())


def diffrax_sde():
  """An SDE with diffeqsolve's defaults (RecursiveCheckpointAdjoint, which
  needs a VirtualBrownianTree rather than an UnsafeBrownianPath)."""
  dfx = pytest.importorskip("diffrax")
  lx = pytest.importorskip("lineax")
  bm = dfx.VirtualBrownianTree(0.0, 2.0, tol=0.1, shape=(3,),
                               key=jax.random.key(3))
  terms = dfx.MultiTerm(
      dfx.ODETerm(lambda t, y, k: -k * y),
      dfx.ControlTerm(lambda t, y, k: lx.DiagonalLinearOperator(
          0.1 * jnp.cos(y)), bm))

  def f(y0, k, t1):
    sol = dfx.diffeqsolve(terms, dfx.Euler(), 0.0, t1, 0.05, y0, args=k,
                          max_steps=32)
    return sol.ys[-1]
  y0 = np.array([1.0, -0.5, 0.25], np.float32)
  # Fixed steps of 0.05: t1 = 1 takes 20 of the 32 allowed, t1 = 2 needs 40.
  return f, (y0, np.float32(0.7), np.float32(1.0)), (
      y0, np.float32(0.7), np.float32(2.0)), "maximum number of solver steps"


def _grad_of(build):
  """The summed outputs of `build`'s program and their gradient with
  respect to its first two inputs, traced in this process (so the stored
  program holds the backward pass: for Diffrax's default adjoint, the
  checkpointed loop's backward loop, whose recomputed steps hold the
  11-input custom_vjp). With the value among the outputs a failing solve
  raises the same error (a gradient alone leaves the check dead)."""
  def builder():
    fn, good, bad, message = build()
    return (jax.value_and_grad(lambda *a: fn(*a).sum(), argnums=(0, 1)),
            good, bad, message)
  return builder


def optimistix_newton():
  """An Optimistix Newton root find with throw=True: y**2 = a has no real
  root for a < 0, so the solve fails (its linear solves go non-finite)."""
  optx = pytest.importorskip("optimistix")

  def f(y0, a):
    sol = optx.root_find(lambda y, a: y ** 2 - a,
                         optx.Newton(rtol=1e-5, atol=1e-5), y0, args=a,
                         max_steps=16, throw=True)
    return sol.value
  y0 = np.array([1.0, 2.0, 0.5], np.float32)
  return f, (y0, np.float32(2.0)), (y0, np.float32(-1.0)), (
      "A linear solver returned non-finite")


def lineax_cg_max_norm():
  """A Lineax CG solve (throw=True by default): its `norm`, static data,
  is lineax._norm.max_norm. Two steps solve a multiple of the identity,
  not a general 4x4 system."""
  lx = pytest.importorskip("lineax")
  m = np.random.RandomState(0).randn(4, 4).astype(np.float32)
  spd = m @ m.T + 0.5 * np.eye(4, dtype=np.float32)

  def f(b, a):
    op = lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag)
    solver = lx.CG(rtol=1e-6, atol=1e-6, max_steps=2)
    return lx.linear_solve(op, b, solver).value
  b = np.arange(1, 5, dtype=np.float32)
  return f, (b, 2 * np.eye(4, dtype=np.float32)), (b, spd), (
      "maximum number of solver steps")


# Checked in this process (print, re-dump, outputs, the error).
PROGRAMS = {
    "error_if": error_if_program,
    "branched_error_if": branched_error_if_program,
    "lineax_cg_max_norm": lineax_cg_max_norm,
}
# Checked in a fresh process (the acceptance of issue 27): re-dump, outputs
# and the error there; tracing and compiling Diffrax is the cost, so once.
FRESH_PROGRAMS = {
    "diffrax_ode": diffrax_ode,
    "diffrax_ode_default": diffrax_ode_default,
    "diffrax_ode_grad": _grad_of(diffrax_ode_default),
    "diffrax_sde": diffrax_sde,
    "diffrax_sde_grad": _grad_of(diffrax_sde),
    "optimistix_newton": optimistix_newton,
    "lineax_cg_max_norm": lineax_cg_max_norm,
}


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_round_trip_and_the_same_error(name):
  fn, good, bad, message = PROGRAMS[name]()
  prog = jaxpr_io.trace(fn, *good)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(*good), jax.jit(prog)(*good))
  _assert_same_failure(prog, loaded, bad, message)


def test_the_callbacks_are_stored_by_name_not_registered():
  fn, good, _, _ = error_if_program()
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, *good))
  from tests.support import proto_edit  # pylint: disable=g-import-not-at-top
  strings = list(proto_edit.message(data).strings)
  assert "equinox.error_if.raises" in strings
  assert "x is over ten" in strings
  # The writer's Python stack, as Equinox formats it for its traceback, is
  # not stored.
  assert not any(f'File "{__file__}"' in s for s in strings)


def test_the_lineax_solve_stores_its_max_norm_by_name():
  fn, good, _, _ = lineax_cg_max_norm()
  from tests.support import proto_edit  # pylint: disable=g-import-not-at-top
  strings = list(proto_edit.message(jaxpr_io.dumps(jaxpr_io.trace(
      fn, *good))).strings)
  assert "lineax._norm" in strings and "max_norm" in strings


def test_grad_of_a_loaded_default_adjoint_ode_solve():
  """`jax.grad` of the loaded forward solve (the backward rule served from
  its widest pattern: the loss leaves 7 of its 8 float outputs unused) is
  the original's, bit for bit."""
  fn, good, _, _ = diffrax_ode_default()
  prog = jaxpr_io.trace(fn, *good)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  grad = lambda p: jax.jit(jax.grad(lambda *a: p(*a).sum(), argnums=(0, 1)))
  assert_bit_identical(grad(loaded)(*good), grad(fn)(*good))


def test_grad_of_a_loaded_sde_solve():
  """`jax.grad` of the loaded forward SDE solve is the original's, bit for
  bit. Each solver step is an Equinox custom_vjp whose backward rule
  branches on the `perturbed` flags its forward rule returns, and a JVP
  rule over 45 inputs: the writer stores them as JAX calls them when it
  differentiates the program (requests.py); served from the widest
  pattern instead, the step raised "t0 cannot be autodifferentiated"."""
  fn, good, _, _ = diffrax_sde()
  prog = jaxpr_io.trace(fn, *good)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  for argnums in ((0, 1), 0):
    grad = lambda p: jax.jit(jax.grad(lambda *a: p(*a).sum(), argnums))
    assert_bit_identical(grad(loaded)(*good), grad(fn)(*good))


FRESH = """
import json, sys
import jax, numpy as np
import jaxpr_io
workdir = sys.argv[1]
results = {}
for name in json.load(open(workdir + "/names.json")):
  prog = jaxpr_io.load(f"{workdir}/{name}.jaxpr")
  data = open(f"{workdir}/{name}.jaxpr", "rb").read()
  assert jaxpr_io.dumps(prog) == data, f"{name}: re-dump changed the bytes"
  inputs = np.load(f"{workdir}/{name}.npz")
  good = [inputs[f"good{i}"] for i in range(len(inputs.files) // 2)]
  bad = [inputs[f"bad{i}"] for i in range(len(inputs.files) // 2)]
  out = jax.tree_util.tree_leaves(jax.jit(prog)(*good))
  np.savez(f"{workdir}/{name}.out.npz", *map(np.asarray, out))
  try:
    jax.block_until_ready(jax.jit(prog)(*bad))
    results[name] = None
  except Exception as e:
    results[name] = [type(e).__name__, str(e)]
json.dump(results, open(workdir + "/errors.json", "w"))
"""


# In two shards, so that pytest-xdist spreads the tracing and compiling.
@pytest.mark.parametrize("shard", range(2))
def test_in_a_fresh_process(tmp_path, shard):
  """Stored, re-dumped, run and failing as the original, in a fresh
  process, bit-identical to the original's under jit."""
  expected, names = {}, []
  for name, build in sorted(FRESH_PROGRAMS.items())[shard::2]:
    fn, good, bad, message = build()
    prog = jaxpr_io.trace(fn, *good)
    jaxpr_io.save(tmp_path / f"{name}.jaxpr", prog)
    np.savez(tmp_path / f"{name}.npz",
             **{f"good{i}": np.asarray(a) for i, a in enumerate(good)},
             **{f"bad{i}": np.asarray(a) for i, a in enumerate(bad)})
    out = jax.tree_util.tree_leaves(jax.jit(prog)(*good))
    expected[name] = (out, _error_of(prog, *bad), message)
    names.append(name)
  (tmp_path / "names.json").write_text(json.dumps(names))
  proc = run_fresh_python(FRESH, str(tmp_path), timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  errors = json.loads((tmp_path / "errors.json").read_text())
  for name, (out, (kind, _), message) in expected.items():
    got = np.load(tmp_path / f"{name}.out.npz")
    assert len(got.files) == len(out), name
    for i, want in enumerate(out):
      assert_bit_identical(got[f"arr_{i}"], np.asarray(want))
    assert errors[name] is not None, name
    assert errors[name][0] == kind and message in errors[name][1], (
        name, errors[name])


# ------------------------------------------------- library functions
LIBRARIES = ("equinox", "lineax", "optimistix", "diffrax")


def _default_functions(package: str) -> set:
  """The module-level functions the public classes of `package` hold by
  default (dataclass field defaults and `__init__` defaults): what their
  instances carry as static data unless the user passes another."""
  module = pytest.importorskip(package)
  found = set()
  for value in vars(module).values():
    if not isinstance(value, type):
      continue
    defaults = []
    if dataclasses.is_dataclass(value):
      defaults += [f.default for f in dataclasses.fields(value)]
    try:
      defaults += [p.default for p in inspect.signature(
          value.__init__).parameters.values()]
    except (TypeError, ValueError):
      pass
    found.update(d for d in defaults if type(d) is types.FunctionType)
  return found


def _value_functions(package: str) -> set:
  """The public functions of `package` that a user passes to its classes
  as values: norms (`norm=`), and Optimistix's NonlinearCG methods."""
  module = pytest.importorskip(package)
  found = {v for k, v in vars(module).items()
           if type(v) is types.FunctionType and k.endswith("norm")}
  if package == "optimistix":
    found |= {v for k, v in vars(module).items()
              if k in ("polak_ribiere", "fletcher_reeves",
                       "hestenes_stiefel", "dai_yuan")}
  return found


@pytest.mark.parametrize("package", LIBRARIES)
def test_library_functions_that_static_data_holds_are_in_the_table(package):
  functions = _default_functions(package) | _value_functions(package)
  if package != "equinox":
    assert functions, f"no functions found in {package}: the test is blind"
  missing = sorted(f"{f.__module__}.{f.__qualname__}" for f in functions
                   if (f.__module__, f.__qualname__)
                   not in libraries.LIBRARY_FUNCTIONS)
  assert not missing, missing


def test_every_table_function_is_found():
  for module, qualname in sorted(libraries.LIBRARY_FUNCTIONS):
    if module.partition(".")[0] not in ("equinox", "lineax", "optimistix",
                                        "diffrax"):
      continue
    pytest.importorskip(module.partition(".")[0])
    fn, reason = libraries.find_function(module, qualname)
    assert fn is not None, reason


# ------------------------------------------------- jax.scipy.special
def test_scipy_special_program_round_trips():
  # The writer stored debug info naming 2 arguments for a jaxpr of 1
  # input, which the reader refuses:
  sp = jax.scipy.special

  # log_ndtr's JVP rule had the names (its static series_order).
  def f(x, a):
    return (sp.log_ndtr(x) + sp.gammaln(x) + sp.xlogy(x, a) + sp.erf(x)
            + sp.logsumexp(x) + sp.expit(x) + sp.entr(x))
  x = np.linspace(0.5, 3.0, 5).astype(np.float32)
  a = np.float32(1.5)
  prog = jaxpr_io.trace(f, x, a)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(x, a), jax.jit(prog)(x, a))
  grad = lambda p: jax.jit(jax.grad(lambda x, a: p(x, a).sum()))
  assert_bit_identical(grad(loaded)(x, a), grad(prog)(x, a))


# --------------------------------- Equinox's checkpointed while loop
def _checkpointed(x, w):
  import equinox.internal as eqxi  # pylint: disable=g-import-not-at-top

  def body(c):
    i, y, z = c
    return i + 1, jnp.tanh(w @ y) + z, z * 0.5
  return eqxi.while_loop(lambda c: c[0] < 6, body, (0, x, x * 2),
                         max_steps=8, kind="checkpointed")[1].sum()


def test_checkpointed_while_loop_under_grad_round_trips():
  x = np.linspace(-1, 1, 3).astype(np.float32)
  w = np.full((3, 3), 0.1, np.float32)
  prog = jaxpr_io.trace(jax.grad(_checkpointed, argnums=(0, 1)), x, w)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(x, w), jax.jit(prog)(x, w))
