"""Polyfills (jaxpr_io/compat/polyfills.py): files that hold primitives the
reading JAX lacks (`log2`, `one_minus_square`: JAX 0.11+; `polynomial`:
0.12) load as programs of the reader's own primitives.

The files (tests/compat/cross_release/polyfills-*, by
tests/compat/make_polyfill_files.py under jax 0.12.0.1) carry what the
original function and its gradient computed under the writing release.
Under a release that lacks a primitive the test checks the load warns and
lists the polyfilled equations, that call, jit, grad, vmap and jvp match
the writer's results (to a few ulp: a polyfill is not bit-identical), and
that re-dumping writes the original primitives (the program message is the
file's but for the producer). Under a release that has them, nothing is
polyfilled and the results are bit-identical; there, each polyfill is also
compared with the primitive itself.
"""

from __future__ import annotations

import glob
import os
import warnings

import jax
import jax.extend.core  # noqa: F401  (jaxpr_as_fun)
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

import jaxpr_io
from jaxpr_io.compat import polyfills
from jaxpr_io.format import _proto as pb
from jaxpr_io.format import container
from jaxpr_io.format import vocabulary
from tests.support import paths

FILES = sorted(glob.glob(os.path.join(paths.CROSS_RELEASE,
                                      "polyfills-*.jaxpr")))
# The primitives each file holds.
HOLDS = {"mixed": {"log2", "one_minus_square", "polynomial"},
         "types": {"log2", "one_minus_square", "polynomial"},
         "symbolic": {"log2", "polynomial"}}
LINE = vocabulary.release_line(jax.__version__)


def _lacks(names) -> set[str]:
  return {n for n in names if polyfills.lookup(n) is not None}


def _case(path) -> str:
  return os.path.basename(path).split("-")[1]


def _load(path):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    prog = jaxpr_io.load(path, check=True)
  return prog, [w for w in caught
                if issubclass(w.category, jaxpr_io.PolyfillWarning)]


def _close(got, want, exact: bool, what: str) -> None:
  got, want = np.asarray(got), np.asarray(want)
  assert got.dtype == want.dtype and got.shape == want.shape, what
  if exact:
    np.testing.assert_array_equal(got, want, err_msg=what)
  else:
    # A few ulp of the dtype: the polyfill's operations round apart.
    eps = np.finfo(want.dtype).eps if np.issubdtype(
        want.dtype, np.inexact) else 0
    np.testing.assert_allclose(got, want, rtol=8 * eps, atol=8 * eps,
                               err_msg=what)


def _message(data: bytes):
  m = pb.Program()
  m.ParseFromString(container.Container(data).program)
  return m


def test_the_files_exist():
  assert {_case(p) for p in FILES} == set(HOLDS)


@pytest.mark.parametrize("path", FILES, ids=_case)
def test_file_loads_with_polyfills_where_needed(path):
  case = _case(path)
  prog, caught = _load(path)
  lacking = _lacks(HOLDS[case])
  assert {name for _, _, name in prog.polyfilled} == lacking
  if lacking:
    assert len(caught) == 1, caught
    message = str(caught[0].message)
    assert all(n in message for n in lacking) and "bit-identical" in message
  else:
    assert not caught
  data = np.load(path[:-len(".jaxpr")] + ".npz")
  args = [data[f"arg{i}"] for i in range(prog.in_tree.num_leaves)]
  # Exact where the reader is the writer and nothing was polyfilled.
  exact = not lacking and prog.producer["jax_version"] == jax.__version__
  # The files hold what the original computed under jit.
  outs = jax.tree_util.tree_leaves(prog(*args))
  jit_outs = jax.tree_util.tree_leaves(jax.jit(prog)(*args))
  for i, (o, j) in enumerate(zip(outs, jit_outs)):
    _close(o, data[f"out{i}"], False, f"out{i}")
    _close(j, data[f"out{i}"], exact, f"jit out{i}")
  if "grad0" in data:
    def loss(*a):
      return sum(o.sum() for o in jax.tree_util.tree_leaves(prog(*a)))
    _close(jax.jit(jax.grad(loss))(*args), data["grad0"], exact, "grad")
    # jvp agrees with the gradient; vmap with the call.
    tangent = np.ones_like(args[0])
    _, dot = jax.jvp(lambda x: loss(x, *args[1:]), (args[0],), (tangent,))
    np.testing.assert_allclose(dot, np.sum(data["grad0"]), rtol=1e-5)
    batched = jax.vmap(lambda x: prog(x, *args[1:]))(args[0][None])
    _close(batched[0], data["out0"], exact, "vmap")


@pytest.mark.parametrize("path", FILES, ids=_case)
def test_redump_writes_the_original_primitives(path):
  with open(path, "rb") as f:
    original = f.read()
  prog, _ = _load(path)
  again = jaxpr_io.dumps(prog)
  want, got = _message(original), _message(again)
  # Who wrote it, and the format version (a re-dump writes the current one).
  for msg in (want, got):
    msg.ClearField("producer")
    msg.ClearField("format_version")
  assert got == want
  # So the round trip through this release loads as the original again.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", jaxpr_io.PolyfillWarning)
    assert jaxpr_io.loads(again).polyfilled == prog.polyfilled


def test_symbolic_program_calls_at_several_sizes():
  path, = [p for p in FILES if _case(p) == "symbolic"]
  prog, _ = _load(path)
  for n in (1, 3, 6):
    x = np.linspace(0.5, 2.0, 3 * n, dtype=np.float32).reshape(n, 3)
    want = np.log2(x) * (1.0 + x * (0.5 + x * 0.25))
    np.testing.assert_allclose(prog(x), want, rtol=1e-6)


def _no_budget(nbytes, what):
  del nbytes, what


_INPUTS = {
    "log2": lambda: [np.float32([0.1, 1.0, 2.0, 3.7, 1e-30, 1e30])],
    "one_minus_square": lambda: [np.float32([-1.5, -1.0, 0.0, 1e-8, 0.999,
                                             3.0])],
    "polynomial": lambda: [np.float32([-2.0, -0.5, 0.0, 1.5, 4.0, 7.0]),
                           np.float32(0.25), np.float32(-1.5),
                           np.float32(2.0), np.float32(0.125)],
}


@pytest.mark.parametrize("name", sorted(polyfills.POLYFILLS))
def test_polyfill_matches_the_primitive(name):
  # Where this JAX has the primitive, the polyfill's value is compared with
  # the primitive's own, both compiled by this XLA: each polyfill follows
  # JAX's lowering of the primitive, so they agree bit for bit on CPU.
  fill = polyfills.POLYFILLS[name]
  if LINE < fill.since:
    pytest.skip(f"jax {jax.__version__} has no {name}")
  args = _INPUTS[name]()
  avals = [jax.core.ShapedArray(np.shape(a), np.asarray(a).dtype)
           for a in args]
  params = {"accuracy": None} if name == "log2" else {}
  prim = getattr(lax, f"{name}_p")
  want = jax.jit(lambda *a: prim.bind(*a, **params))(*args)
  closed = polyfills.build(name, params, avals, [jax.core.ShapedArray(
      want.shape, want.dtype)], _no_budget)
  got = jax.jit(jax.extend.core.jaxpr_as_fun(closed))(*args)[0]
  np.testing.assert_array_equal(got, want)


def test_polyfill_of_the_wrong_type_is_a_format_error():
  # (A crafted file's equation types reach `build` the same way.)
  f32 = jax.core.ShapedArray((3,), np.float32)
  f16 = jax.core.ShapedArray((3,), np.float16)
  with pytest.raises(jaxpr_io.FormatError, match="polyfill of 'log2' returns"):
    polyfills.build("log2", {"accuracy": None}, [f32], [f16], _no_budget)
  i32 = jax.core.ShapedArray((3,), np.int32)
  with pytest.raises(jaxpr_io.FormatError, match="does not apply"):
    polyfills.build("log2", {"accuracy": None}, [i32], [i32], _no_budget)


def test_a_traced_program_is_not_mistaken_for_a_polyfill():
  # Only the jaxprs that `build` made are written as the original.
  prog = jaxpr_io.trace(lambda x: jnp.log(x) * 2.0, np.float32([1.0, 2.0]))
  assert not prog.polyfilled
  for eqn in prog.closed_jaxpr.jaxpr.eqns:
    assert polyfills.original(eqn.primitive, eqn.params) is None


def test_building_polyfills_is_charged_to_an_untrusted_load(monkeypatch):
  # Each new polyfill jaxpr is charged to the memory budget before it is
  # built: a file of many distinct equation types is refused, not traced
  # without bound. A trusted load has no budget.
  path, = [p for p in FILES if _case(p) == "mixed"]
  if not _lacks(HOLDS["mixed"]):
    pytest.skip(f"jax {jax.__version__} polyfills nothing in the file")
  monkeypatch.setattr(polyfills, "BUILD_COST", 1 << 40)
  polyfills._BY_KEY.clear()  # no jaxpr left from another test to reuse
  with pytest.raises(jaxpr_io.FormatError, match="the polyfill of"):
    jaxpr_io.load(path)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", jaxpr_io.PolyfillWarning)
    assert jaxpr_io.load(path, trusted=True).polyfilled
