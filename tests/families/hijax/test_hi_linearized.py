"""Linear jaxprs that hold `call_hi_primitive_linearized` round-trip.

JAX binds the primitive (jax._src.hijax.fake_linear_op) when it linearizes
a hi primitive for `jax.vjp` (`is_vjp=True`): the linear jaxpr that
`ad.linearize_jaxpr` returns, and that the backward pass transposes, holds
it. Its `_prim` is stored as `call_hi_primitive`'s (jaxpr_io/families/hijax/prims.py),
its `residuals_tree` as a treedef param; the params that only newer
releases have are mapped by jaxpr_io/compat/hi_linearized.py.

Each linear jaxpr here is built by JAX's own linearization, survives
dumps -> loads exactly (same printing, same bytes on re-dump), and its
transpose gives bit-identical cotangents to the original's, which are
`jax.vjp`'s. Files written under JAX 0.10.2 and 0.12.0.1, whose params
differ, load under each release. An unregistered user class is refused at
dumps; crafted files whose params disagree with the equation raise
FormatError naming the equation and param.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import core as jax_core
from jax._src import hijax
from jax._src.interpreters import ad

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io.compat import hi_linearized
from tests.support import proto_edit
from tests.support import paths
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             normalized_text)

NAME = "call_hi_primitive_linearized"
_EQN = rf"equation 0 \({NAME}\)"
X = jnp.array([0.3, -1.5, 6.0, 1e-3, 0.0, -2.25], jnp.float32)
Y = jnp.asarray(-1.75, jnp.float32)
N = jnp.array([3, -2, 0, 10, 5, 1], jnp.int32)
_BASE = getattr(hijax, "HiPrim", None) or hijax.VJPHiPrimitive


class _MulSin(_BASE):
  """sin(x) * y for a scalar y, with reverse-mode rules of its own whose
  residuals are a dict (a treedef with keys)."""

  def __init__(self, x_aval, y_aval):
    self.in_avals, self.out_aval, self.params = (x_aval, y_aval), x_aval, {}
    super().__init__()

  def expand(self, x, y):
    return jnp.sin(x) * y

  def vjp_fwd(self, nzs_in, x, y):
    del nzs_in
    return self(x, y), {"cos": jnp.cos(x), "sin": jnp.sin(x), "y": y}

  def vjp_bwd_retval(self, res, g):
    return g * res["y"] * res["cos"], jnp.sum(g * res["sin"])


# Both the writing and the loading process register it (here: one process).
jaxpr_io.register_hi_primitive(_MulSin, name="tests.MulSin")


def _mul_sin(x, y):
  return jnp.exp(_MulSin(jax.typeof(x), jax.typeof(y))(x, y))


def _linear(f, args, nonzeros):
  """(linear jaxpr, its residual values) of `f` at `args`, as `jax.vjp`
  linearizes it. The forward jaxpr returns the primal outputs, the
  residuals that are not forwarded inputs (`fwds`), then the structured
  residuals' leaves; the linear jaxpr takes the residuals, the tangents,
  then the structured residuals."""
  closed = jax.make_jaxpr(f)(*args)
  fwd, _, nzs_out, fwds, lin = ad.linearize_jaxpr(closed, nonzeros,
                                                  is_vjp=True)
  outs = jax_core.jaxpr_as_fun(fwd)(*args)
  computed = iter(outs[len(nzs_out):])
  residuals = [args[i] if i is not None else next(computed) for i in fwds]
  structured = list(computed)
  assert NAME in [e.primitive.name for e in compat.open_jaxpr(lin).eqns]
  return lin, (residuals, structured)


def _transpose(lin, residuals, cts):
  """The cotangents of `lin`'s tangent inputs, given its outputs' `cts`."""
  fun = jax_core.jaxpr_as_fun(lin)
  res, sres = residuals
  invars = compat.open_jaxpr(lin).invars
  tangents = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype)
              for v in invars[len(res):len(invars) - len(sres)]]
  return jax.linear_transpose(lambda *t: fun(*res, *t, *sres), *tangents)(
      list(cts))


def _cotangent(aval, scale):
  if aval.dtype == jax.dtypes.float0:
    return np.zeros(aval.shape, jax.dtypes.float0)
  return jnp.full(aval.shape, scale, aval.dtype)


def _round_trips(f, args, nonzeros):
  """Round-trips `f`'s linear jaxpr; returns (its transpose's cotangents,
  the loaded program's), which must be bit-identical."""
  lin, residuals = _linear(f, args, nonzeros)
  # Not check=True: that compiles the program, and JAX cannot lower this
  # primitive (its to_lojax raises); a linear jaxpr is only transposed.
  loaded = assert_roundtrip(lin, check=False)
  cts = [_cotangent(v.aval, 0.75 + i)
         for i, v in enumerate(compat.open_jaxpr(lin).outvars)]
  expected = _transpose(lin, residuals, cts)
  assert_bit_identical(_transpose(loaded.closed_jaxpr, residuals, cts),
                       expected)
  return expected, cts


@pytest.mark.parametrize("nonzeros", [(True, True), (True, False),
                                      (False, True)])
def test_user_hi_primitive_round_trips(nonzeros):
  cts_in, (ct,) = _round_trips(_mul_sin, (X, Y), list(nonzeros))
  # The transpose is jax.vjp's backward pass, for the non-zero tangents.
  reference = jax.vjp(_mul_sin, X, Y)[1](ct)
  assert_bit_identical(cts_in, [g for g, nz in zip(reference, nonzeros)
                                if nz])


def _frexp_ldexp(x, n):
  # JAX 0.12's own classes, bound directly: jnp.frexp and jnp.ldexp bind
  # them inside a jit, whose linearization is a `vjp_node[jit]` primitive.
  from jax._src.numpy import ufuncs  # pylint: disable=import-outside-toplevel
  m, e = ufuncs.Frexp(jax.typeof(x))(jnp.sin(x))
  return jnp.cos(ufuncs.Ldexp(jax.typeof(m), jax.typeof(n))(m, n)), e


@pytest.mark.skipif("jax.numpy.Ldexp" not in compat.ADAPTER.hi_prim_classes,
                    reason="this JAX has no Frexp and Ldexp classes")
def test_jax_hi_primitives_round_trip():
  # Frexp's integer output has a float0 tangent; Ldexp's integer input
  # none (nz_in_flat=(True, False)).
  cts_in, (ct, _) = _round_trips(_frexp_ldexp, (X, N), [True, False])
  assert_bit_identical(cts_in, jax.vjp(lambda x: _frexp_ldexp(x, N)[0],
                                       X)[1](ct))


class _SresSin(_BASE):
  """sin(x), whose forward rule also returns structured residuals (JAX
  0.11.1+: `has_sres`)."""

  def __init__(self, x_aval):
    self.in_avals, self.out_aval, self.params = (x_aval,), x_aval, {}
    super().__init__()

  def expand(self, x):
    return jnp.sin(x)

  def vjp_fwd(self, nzs_in, x):
    del nzs_in
    return self(x), (jnp.sin(x),), True, {"cos": jnp.cos(x)}

  def vjp_bwd(self, res, sres, g, x_accum):
    del res
    x_accum.accum(g * sres["cos"])


jaxpr_io.register_hi_primitive(_SresSin, name="tests.SresSin")


@pytest.mark.skipif(not hi_linearized.HAS_SRES,
                    reason="this JAX has no structured residuals")
def test_structured_residuals_round_trip():
  f = lambda x: jnp.exp(_SresSin(jax.typeof(x))(x))
  lin, _ = _linear(f, (X,), [True])
  assert [e.params["has_sres"] for e in compat.open_jaxpr(lin).eqns
          if e.primitive.name == NAME] == [True]
  (cts_in,), (ct,) = _round_trips(f, (X,), [True])
  assert_bit_identical(cts_in, jax.vjp(f, X)[1](ct)[0])


def test_unregistered_hi_primitive_is_refused_by_name():
  class Cube(_BASE):  # registered nowhere: its rules are Python code

    def __init__(self, aval):
      self.in_avals, self.out_aval, self.params = (aval,), aval, {}
      super().__init__()

    def expand(self, x):
      return x ** 3

    def vjp_fwd(self, nzs_in, x):
      del nzs_in
      return self(x), 3 * x ** 2

    def vjp_bwd_retval(self, res, g):
      return (g * res,)

  lin, _ = _linear(lambda x: Cube(jax.typeof(x))(x), (X,), [True])
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=rf"{_EQN}.*param '_prim'.*Cube is a class of its "
                           r"own.*register_hi_primitive"):
    jaxpr_io.dumps(lin)


# --------------------------------------------------------- crafted files
def _file() -> bytes:
  return jaxpr_io.dumps(_linear(_mul_sin, (X, Y), [True, False])[0])


def _param(msg, name: str):
  names = list(msg.strings)
  (value,) = [p.value for ps in msg.param_sets for p in ps.params
              if names[p.name] == name]
  return value


def _crafted(edit) -> bytes:
  return proto_edit.edited(_file(), edit)


def _drop_a_residual(msg):
  # The dict of three residuals loses its first key: two leaves, where the
  # equation has three residual inputs.
  node = msg.tree_nodes[_param(msg, "residuals_tree").treedef.shared - 1]
  del node.children[0]
  del node.keys[0]


def _nz_in_of_length_one(msg):
  _param(msg, "nz_in_flat").CopyFrom(_param(msg, "nz_out_flat"))


def _all_nz_in(msg):
  _param(msg, "nz_in_flat").bools.items[1] = True


def _has_sres(msg):
  _param(msg, "has_sres").bool = True


def _no_output_tangent(msg):
  _param(msg, "nz_out_flat").bools.items[0] = False


def _prim_a_bool(msg):
  _param(msg, "_prim").CopyFrom(_param(msg, "has_sres"))


_NOT_HERE = r"has no equivalent in jax .*Load the file with the JAX release"


@pytest.mark.parametrize("edit,match", [
    (_drop_a_residual,
     rf"{NAME} has 4 inputs and 1 outputs, but param 'residuals_tree' has 2 "
     r"leaves, param 'nz_in_flat' 1 non-zero tangents in"),
    (_all_nz_in,
     rf"{NAME} has 4 inputs .* 'residuals_tree' has 3 leaves, param "
     r"'nz_in_flat' 2 non-zero tangents in"),
    (_nz_in_of_length_one,
     rf"{NAME} param 'nz_in_flat' must be a tuple of 2 bools \(one per "
     r"input of its '_prim'\), got \(True,\)"),
    (_has_sres,
     rf"{NAME} param 'has_sres' is True, but param 'residuals_tree' is not "
     r"a pair" if hi_linearized.HAS_SRES else rf"'has_sres'=True.*{_NOT_HERE}"),
    (_no_output_tangent,
     rf"{NAME} has 4 inputs and 1 outputs, .* and 'nz_out_flat' 0 out"
     if hi_linearized.HAS_NZ_OUT
     else rf"'nz_out_flat'=\(False,\).*{_NOT_HERE}"),
    (_prim_a_bool,
     rf"{NAME} param '_prim' is not a hi primitive: False"),
], ids=["residuals_tree_leaves", "nz_in_count", "nz_in_length", "has_sres",
        "nz_out", "prim"])
def test_params_that_disagree_with_the_equation(edit, match):
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(_crafted(edit))


def test_tangent_type_that_disagrees_with_the_prim():
  # The stored `_prim` is built from the scalar y's aval for x too: it
  # takes and returns float32[], where the equation has float32[6].
  def edit(msg):
    names = list(msg.strings)
    (record,) = [v.record for v in proto_edit.values(msg)
                 if v.WhichOneof("kind") == "record"
                 and names[v.record.type] == "tests.MulSin"]
    avals = record.fields[0].tuple.items
    avals[0].aval = avals[1].aval
  with pytest.raises(jaxpr_io.FormatError,
                     match=rf"{_EQN}: tangent input 0 has type float32\[6\], "
                           r"but its '_prim' \(_MulSin\) takes float32\[\]"):
    jaxpr_io.loads(_crafted(edit))


# ------------------------------------------------------- across releases
# The same linear jaxpr (`_mul_sin`'s, zero tangent for y), as written by
# JAX 0.10.2 (no nz_out_flat or has_sres: written as every output's and
# False) and 0.12.0.1: each loads under every release as the linear jaxpr
# that release builds. Rewrite them with `python -m tests.families.hijax.test_hi_linearized`
# under each release.
ACROSS = paths.CROSS_RELEASE


def _across_path(jax_version: str) -> str:
  return os.path.join(ACROSS, f"hi_linearized-jax-{jax_version}.jaxpr")


def _across_jaxpr():
  return _linear(_mul_sin, (X, Y), [True, False])


@pytest.mark.parametrize("writer", ["0.10.2", "0.12.0.1"])
def test_files_of_other_releases_load_as_this_ones(writer):
  lin, residuals = _across_jaxpr()
  loaded = jaxpr_io.load(_across_path(writer))
  assert loaded.producer["jax_version"] == writer
  assert normalized_text(loaded.closed_jaxpr) == normalized_text(lin)
  (ct,) = [_cotangent(v.aval, 0.5) for v in compat.open_jaxpr(lin).outvars]
  assert_bit_identical(_transpose(loaded.closed_jaxpr, residuals, [ct]),
                       _transpose(lin, residuals, [ct]))


if __name__ == "__main__":
  os.makedirs(ACROSS, exist_ok=True)
  jaxpr_io.save(_across_path(jax.__version__), _across_jaxpr()[0])
