"""Primitives of lax, lax.linalg, jax.random, custom rules, calls and export
that the rest of the suite did not round-trip (issue 12: a storable
primitive is covered when a test program that uses it round-trips). Each
program binds the primitive through JAX's public API where one exists (else
through the function JAX itself binds it with), survives dumps -> loads
exactly (same printing, same bytes on re-dump) and, where it runs on this
CPU machine, gives bit-identical results to the original function, also
jitted and under the transformations it supports cheaply."""

from __future__ import annotations

import jax
import jax.experimental
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax
from jax._src import xla_metadata
from jax._src.lax import linalg as lax_linalg
from jax._src.random import philox2x32, philox4x32, threefry4x32
from jax.extend.random import threefry_2x32

import jaxpr_io
from jaxpr_io.families import callbacks
from jaxpr_io import compat
from jaxpr_io import converters
from jaxpr_io.safety import validate
from tests.support import proto_edit
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)

_JAX_010 = compat.JAX_VERSION.startswith("0.10.")
F = jnp.linspace(0.25, 2.0, 8, dtype=jnp.float32)
I = jnp.array([1, 7, -3, 1 << 20, 0, 255, -1, 42], jnp.int32)
U = jnp.array([1, 7, 3, 1 << 31, 0, 255, 0xFFFFFFFF, 42], jnp.uint32)
A = jnp.arange(16.0, dtype=jnp.float32).reshape(4, 4) / 7.0 + 3 * jnp.eye(4)
SPD = A @ A.T


def _primitives(prog) -> set[str]:
  return {e.primitive.name for j in validate.walk_jaxprs(
      prog.closed_jaxpr.jaxpr) for e in j.eqns}


def round_trips(f, primitive, *args, check=True, run=True):
  """Traces `f`, asserts that it uses `primitive`, round-trips it and (with
  `run`) compares the loaded program's results with `f`'s. Returns the loaded program."""
  prog = jaxpr_io.trace(f, *args)
  assert primitive in _primitives(prog), _primitives(prog)
  loaded = assert_roundtrip(prog, check=check)
  if run:
    # Jitted only: each eager call would compile every equation again, and
    # the same XLA computation gives the same bits either way.
    assert_bit_identical(jax.jit(loaded)(*args), jax.jit(f)(*args))
  return loaded


def _sum_grad_and_vmap(f, loaded, x):
  assert_same_outcome(jax.grad, lambda v: f(v).sum(),
                      lambda v: loaded(v).sum(), x)
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([x, x * 2]))


# -------------------------------------------------------------- plain lax
# (primitive, function, argument, also compare grad and vmap)
_LAX = [
    ("exp2", lambda x: lax.exp2(x) * 3.0, F, True),
    ("polygamma", lambda x: lax.polygamma(jnp.ones_like(x), x), F, False),
    ("zeta", lambda x: lax.zeta(x + 1.5, x), F, False),
    ("igamma_grad_a", lambda x: lax.igamma_grad_a(x, x + 0.5), F, False),
    ("clz", lax.clz, I, False),
    ("mulhi", lambda x: lax.mulhi(x, x + 3), U, False),
    ("tile", lambda x: lax.tile(x * 2.0, (3,)), F, True),
    ("reduce_xor", lambda x: lax.reduce(x, np.int32(0), lax.bitwise_xor,
                                        (0,)), I, False),
    ("scatter-sub", lambda x: x.at[jnp.array([1, 3, 1])].subtract(x[:3]),
     F, True),
    ("optimization_barrier",
     lambda x: lax.optimization_barrier((x, jnp.sin(x)))[1] * 2.0, F, True),
    ("empty", lambda x: (lax.empty((3,), jnp.float32), x)[1] + 1.0, F, False),
    ("xla_metadata_value",
     lambda x: xla_metadata.set_xla_metadata(jnp.sin(x), stage="fwd") * 2.0,
     F, True),
    ("geqrf", lambda a: lax_linalg.geqrf(a), A, False),
    ("geqp3", lambda a: lax_linalg.geqp3(a, jnp.zeros(4, jnp.int32)), A,
     False),
    ("householder_product",
     lambda a: lax_linalg.householder_product(*lax_linalg.geqrf(a)), A, False),
    ("ormqr", lambda a: lax_linalg.ormqr(*lax_linalg.geqrf(a), a, left=True,
                                         transpose=True), A, False),
    ("hessenberg", lax.linalg.hessenberg, A, False),
    ("schur", lax.linalg.schur, A, False),
    ("tridiagonal", lambda a: lax.linalg.tridiagonal(a @ a.T), A, False),
    ("symmetric_product", lambda a: lax.linalg.symmetric_product(a, SPD), A,
     False),
    ("cholesky_update",
     lambda a: lax.linalg.cholesky_update(jnp.linalg.cholesky(SPD).T, a[0]),
     A, False),
    ("lu_pivots_to_permutation",
     lambda a: lax.linalg.lu_pivots_to_permutation(
         jnp.argmax(a, axis=0).astype(jnp.int32), 6), A, False),
    ("random_clone",
     lambda x: jax.random.normal(jax.random.clone(jax.random.key(3)), (3,)),
     F, False),
    ("threefry2x32",
     lambda x: threefry_2x32(jnp.array([1, 2], jnp.uint32), x), U, False),
    ("threefry4x32", lambda x: threefry4x32.threefry4x32_random_bits(
        threefry4x32.threefry4x32_seed(x[0]), 32, (5,)), U, False),
    ("philox2x32", lambda x: philox2x32.philox2x32_random_bits(
        philox2x32.philox2x32_seed(x[0]), 32, (5,)), U, False),
    ("philox4x32", lambda x: philox4x32.philox4x32_random_bits(
        philox4x32.philox4x32_seed(x[0]), 32, (5,)), U, False),
]


@pytest.mark.parametrize("primitive,f,x,transforms", _LAX,
                         ids=[case[0] for case in _LAX])
def test_lax_primitive_round_trips(primitive, f, x, transforms):
  loaded = round_trips(f, primitive, x)
  if transforms:
    _sum_grad_and_vmap(f, loaded, x)


def _tokens(x):
  token = lax.after_all(lax.create_token(), lax.create_token())
  return token, x * 2.0


def test_token_primitives_round_trip():
  prog = jaxpr_io.trace(_tokens, F)
  assert {"create_token", "after_all"} <= _primitives(prog)
  loaded = assert_roundtrip(prog)
  for fn in (loaded, jax.jit(loaded)):
    token, value = fn(F)
    assert type(token) is type(_tokens(F)[0])
    assert_bit_identical(value, _tokens(F)[1])


def test_rng_uniform_round_trips_as_the_stateful_generator_it_is():
  # XLA's RngUniform draws fresh numbers on each run: compare shapes and
  # ranges, not values.
  f = lambda x: lax.rng_uniform(x[0], x[1], (16,))
  loaded = round_trips(f, "rng_uniform", F, run=False)
  out = np.asarray(jax.jit(loaded)(F))
  assert out.shape == (16,) and out.dtype == np.float32
  assert ((out >= F[0]) & (out < F[1])).all()


def test_dce_sink_keeps_its_effect():
  def f(x):
    y = jnp.sin(x)
    lax.dce_sink(y)
    return x * 2.0
  loaded = round_trips(f, "dce_sink", F)
  assert loaded.closed_jaxpr.jaxpr.effects == \
      jaxpr_io.trace(f, F).closed_jaxpr.jaxpr.effects
  assert loaded.closed_jaxpr.jaxpr.effects


# ------------------------------------------------------------------ calls
def _g(v):
  return jnp.sin(v) * 2.0


@pytest.mark.skipif(not _JAX_010, reason="JAX 0.10's call primitives; 0.11+ "
                    "has one, eval_jaxpr (below)")
def test_jax010_call_primitives_round_trip():
  from jax._src import api_util  # pylint: disable=g-import-not-at-top
  from jax._src import linear_util as lu  # pylint: disable=g-import-not-at-top
  from jax._src.lax.eval_jaxpr import eval_jaxpr_p  # pylint: disable=g-import-not-at-top
  from jax.extend.core.primitives import call_p  # pylint: disable=g-import-not-at-top

  def with_call(x):
    fun = lu.wrap_init(lambda v: [_g(v)],
                       debug_info=api_util.debug_info("call", _g, (x,), {}))
    return call_p.bind(x, subfuns=(fun,))[0] + 1.0

  # lax's eval_jaxpr (bound as custom_derivatives._lower_and_eval binds it)
  # is staged out as closed_call.
  closed = jax.make_jaxpr(_g)(F)

  def with_closed_call(x):
    return eval_jaxpr_p.bind(x, jaxpr=closed)[0] + 1.0

  for f, primitive in ((with_call, "call"), (with_closed_call, "closed_call")):
    loaded = round_trips(f, primitive, F)
    _sum_grad_and_vmap(f, loaded, F)


@pytest.mark.skipif(_JAX_010, reason="JAX 0.11+'s eval_jaxpr")
def test_eval_jaxpr_round_trips():
  traced = jax.jit(_g).trace(F)   # calling a Traced binds eval_jaxpr
  f = lambda x: traced(x) + 1.0
  loaded = round_trips(f, "eval_jaxpr", F)
  _sum_grad_and_vmap(f, loaded, F)


# ------------------------------------------------------ layouts, sharding
def test_layout_constraint_round_trips():
  from jax.experimental import layout  # pylint: disable=g-import-not-at-top
  f = lambda x: layout.with_layout_constraint(x * 2.0, layout.Layout((0,)))
  loaded = round_trips(f, "layout_constraint", F)
  _sum_grad_and_vmap(f, loaded, F)


def test_shard_alike_round_trips():
  shard_alike = pytest.importorskip(
      "jax.experimental.shard_alike",
      reason="JAX 0.12 has no shard_alike").shard_alike
  f = lambda x: shard_alike(x, jnp.cos(x))[1] * 2.0
  loaded = round_trips(f, "shard_alike", F)
  _sum_grad_and_vmap(f, loaded, F)


@pytest.mark.skipif(_JAX_010, reason="JAX 0.12's relayout")
def test_relayout_round_trips_with_its_layout():
  # relayout sets the output aval's layout (format version 7 stores it;
  # tests/read_write/test_futures_and_layouts.py has the crafted-file tests).
  from jax._src import pjit  # pylint: disable=g-import-not-at-top
  from jax.experimental import layout  # pylint: disable=g-import-not-at-top
  f = lambda x: pjit.relayout(x, layout.Layout((0,)))
  try:
    jax.jit(f)(F)
  except NotImplementedError:
    # JAX 0.11 traces relayout but cannot compile it: neither can the
    # loaded program.
    loaded = round_trips(f, "relayout", F, check=False, run=False)
    with pytest.raises(NotImplementedError):
      jax.jit(loaded)(F)
    return
  loaded = round_trips(f, "relayout", F)
  assert (loaded.closed_jaxpr.jaxpr.outvars[0].aval.layout
          == layout.Layout((0,)))


# ------------------------------------- sort comparators (JAX 0.10 only)
@pytest.mark.skipif(not _JAX_010, reason="JAX 0.11+ binds them only while "
                    "lowering (tests/support/primitive_census.py NEVER_TRACED)")
@pytest.mark.parametrize("side", ["left", "right"])
def test_searchsorted_comparators_round_trip(side):
  # Complex keys compare (real, imag) lexicographically: lt_to or le_to,
  # and eq_to.
  z = F + 1j * F[::-1]
  f = lambda q: jnp.searchsorted(jnp.sort(z), q, side=side)
  prog = jaxpr_io.trace(f, z)
  assert {"eq_to", "lt_to", "le_to"} & _primitives(prog) == (
      {"eq_to", "lt_to", "le_to"} if side == "left" else {"eq_to", "lt_to"})
  loaded = assert_roundtrip(prog)
  assert_bit_identical(jax.jit(loaded)(z), jax.jit(f)(z))
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([z, z * 2]))


# ---------------------------------------------- JAX 0.12's lax primitives
_LAX_012 = [
    ("log2", lambda x: lax.log2(x) * 3.0),
    ("one_minus_square", lambda x: lax.one_minus_square(x)),
    ("polynomial", lambda x: lax.polynomial(x, (1.0, -2.0, 3.0))),
]


@pytest.mark.parametrize("primitive,f", _LAX_012,
                         ids=[p for p, _ in _LAX_012])
def test_new_lax_primitive_round_trips(primitive, f):
  if not hasattr(lax, primitive):
    pytest.skip(f"this JAX has no lax.{primitive} (JAX 0.12)")
  _sum_grad_and_vmap(f, round_trips(f, primitive, F), F)


def test_program_order_round_trips():
  program_order = pytest.importorskip("jax._src.program_order",
                                      reason="JAX 0.12's program_order")
  f = program_order.program_order(enforce=True)(
      lambda x: jnp.sin(x) * 2.0)
  loaded = round_trips(f, "program_order", F)
  _sum_grad_and_vmap(f, loaded, F)


def test_scaled_dot_round_trips():
  a = (A / 4).astype(jnp.float8_e4m3fn)
  scale = jnp.full((4, 1), 2.0, jnp.float8_e8m0fnu)
  f = lambda lhs, rhs: lax.scaled_dot(lhs, rhs, lhs_scale=scale,
                                      rhs_scale=scale.T,
                                      preferred_element_type=jnp.float32)
  round_trips(f, "scaled_dot", a, a.T)


# -------------------------------------------------- reached through rules
def _branches(x):
  return lax.cond(x.sum() > 3, lambda v: jnp.sin(v) * jnp.exp(v),
                  lambda v: jnp.cos(v) ** 3, x)


def test_empty2_of_cond_residuals_round_trips():
  # grad of a cond whose branches keep different residuals fills the
  # missing ones with empty2 (conditionals.py, via ad_util.empty_like_aval).
  f = jax.grad(lambda x: _branches(x).sum())
  round_trips(f, "empty2", F)
  round_trips(f, "empty2", -F)


def test_extended_dtype_conversions_round_trip():
  pt = jax.experimental.primal_tangent_dtype(jnp.float32, jnp.float32)

  def f(x):
    y = lax.convert_element_type(x * 2.0, pt)
    return lax.convert_element_type(y, jnp.float32) + 1.0

  prog = jaxpr_io.trace(f, F)
  assert {"to_edtype", "from_edtype"} <= _primitives(prog)
  loaded = assert_roundtrip(prog)
  assert loaded.closed_jaxpr.jaxpr.eqns[1].params["edtype"] == pt
  assert_bit_identical(jax.jit(loaded)(F), jax.jit(f)(F))
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([F, F * 2]))


# ------------------------------------------------------- inspect_sharding
_SEEN_SHARDINGS: list = []


@callbacks.register_callback(
    "tests.read_write.test_coverage_lax.record_sharding")
def _record_sharding(sharding):
  _SEEN_SHARDINGS.append(sharding)


def _inspected(x):
  jax.debug.inspect_array_sharding(x, callback=_record_sharding)
  return x * 2.0


def test_inspect_sharding_calls_the_registered_function():
  round_trips(_inspected, "inspect_sharding", F)
  # Compiling calls the function: at another shape, so that nothing comes
  # from a compilation cache.
  _SEEN_SHARDINGS.clear()
  x = jnp.ones((3,), jnp.float32)
  jax.jit(jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(_inspected, x)))
          ).lower(x).compile()
  assert len(_SEEN_SHARDINGS) == 1
  jax.jit(_inspected).lower(x).compile()
  assert len(_SEEN_SHARDINGS) == 2
  assert _SEEN_SHARDINGS[0] == _SEEN_SHARDINGS[1]


def test_unregistered_inspect_sharding_callback_is_refused_at_dumps():
  def f(x):
    jax.debug.inspect_array_sharding(x, callback=lambda s: None)
    return x
  with pytest.raises(jaxpr_io.UnsupportedError, match="register_callback"):
    jaxpr_io.dumps(jaxpr_io.trace(f, F))


# ---------------------------------------------------------- cuDNN (CUDA)
@pytest.fixture
def pretend_cudnn(monkeypatch):
  """jax.nn's cuDNN paths ask the installed cuDNN for its version before
  tracing; this CPU machine has none. The version only picks among
  features (9.10 supports all these programs); programs lower for CUDA."""
  from jax._src.cudnn import fused_attention_stablehlo  # pylint: disable=g-import-not-at-top
  monkeypatch.setattr(fused_attention_stablehlo, "check_cudnn_version",
                      lambda: 91000)


_Q = (jnp.arange(1 * 128 * 2 * 64, dtype=jnp.float32).reshape(1, 128, 2, 64)
      % 7 / 7).astype(jnp.bfloat16)


def _attention(q):
  return jax.nn.dot_product_attention(q, q * 2, q, is_causal=True,
                                      implementation="cudnn")


def _attention_loss(q):
  return _attention(q).astype(jnp.float32).sum()


def _same_cuda_lowering(loaded, original, args, targets):
  """Both lower for CUDA to the same custom calls, among them `targets`."""
  from tests.families.test_experimental_primitives import _custom_calls  # pylint: disable=g-import-not-at-top
  checks = [jax.export.DisabledSafetyCheck.custom_call(t) for t in targets]
  got = converters.to_exported(loaded, platforms=["cuda"],
                               disabled_checks=checks)
  want = jax.export.export(jax.jit(original), platforms=["cuda"],
                           disabled_checks=checks)(*args)
  assert _custom_calls(got) == _custom_calls(want)
  for target in targets:
    assert any(f"@{target}(" in line for line in _custom_calls(got)), target


# FP8 attention: training needs head dim 128 and lengths that are multiples
# of 128; every scale 1.
_Q8 = _Q.reshape(1, 128, 1, 128).astype(jnp.float8_e4m3fn)


def _attention_fp8(q):
  from jax._src.cudnn import fused_attention_stablehlo as fa  # pylint: disable=g-import-not-at-top
  one = jnp.ones((1, 1, 1, 1), jnp.float32)
  return fa.dot_product_attention(
      q, q, q, fp8_params={k: one for k in fa.fp8_params_keys},
      use_fp8=True, mask_type=fa.MaskType.CAUSAL)[0]


def _scaled_matmul(a):
  scales = jnp.ones((2, 32, 2), jnp.float8_e8m0fnu)
  return jax.nn.scaled_matmul(a.astype(jnp.float8_e4m3fn),
                              a[:, ::-1].astype(jnp.float8_e4m3fn),
                              scales, scales)


@pytest.mark.parametrize("f,x,primitives,targets", [
    (_attention, _Q, {"dot_product_attention_fwd_wrapper"},
     ["__cudnn$fmhaSoftmax"]),
    (jax.grad(_attention_loss), _Q, {"dot_product_attention_fwd_wrapper",
                                     "dot_product_attention_bwd_wrapper"},
     ["__cudnn$fmhaSoftmax", "__cudnn$fmhaSoftmaxBackward"]),
    (_attention_fp8, _Q8, {"dot_product_attention_fp8_fwd_wrapper"},
     ["__cudnn$fmhaSoftmaxF8"]),
    (jax.grad(lambda q: _attention_fp8(q).astype(jnp.float32).sum()), _Q8,
     {"dot_product_attention_fp8_fwd_wrapper",
      "dot_product_attention_fp8_bwd_wrapper"},
     ["__cudnn$fmhaSoftmaxF8", "__cudnn$fmhaSoftmaxBackwardF8"]),
    (_scaled_matmul, jnp.linspace(-2, 2, 2 * 32 * 64).reshape(2, 32, 64),
     {"scaled_matmul_wrapper"}, ["__op$block_scaled_dot"]),
], ids=["fwd", "grad", "fp8_fwd", "fp8_grad", "scaled_matmul"])
def test_cudnn_primitives_round_trip_and_lower_for_cuda(pretend_cudnn, f, x,
                                                         primitives, targets):
  del pretend_cudnn
  prog = jaxpr_io.trace(f, x)
  assert primitives <= _primitives(prog)
  # No CPU lowering: check=True (which compiles here) cannot pass.
  loaded = assert_roundtrip(prog, check=False)
  _same_cuda_lowering(loaded, f, (x,), targets)


# ------------------------------- custom rules, calls, export
# (custom_partitioning, storable once its object is registered, and refused
# at dumps otherwise: tests/families/custom_rules/test_custom_partitioning.py.)
W = jnp.array([0.5, -1.5, 2.0, 3.0, 0.25, 1.0, -2.0, 4.0], jnp.float32)


def _remat_sin(v):
  """A custom_vjp with optimize_remat=True whose functions close over an
  array (the thunk's consts)."""
  f = jax.custom_vjp(lambda u: jnp.sin(u) * W)
  f.defvjp(lambda u: (jnp.sin(u) * W, jnp.cos(u)), lambda r, g: (g * r * W,),
           optimize_remat=True)
  return f(v)


def _with_remat_opt(x):
  # The forward pass of the gradient holds the remat_opt equation.
  return jax.grad(lambda v: _remat_sin(v).sum())(x)


def _scaled(r, t):
  return t * r * W  # linear in t; closes over W


def _with_linear_call(x):
  return jax.custom_derivatives.linear_call(_scaled, _scaled, np.float32(1.5),
                                            x)


def test_linear_call_round_trips_with_its_transpose():
  loaded = round_trips(_with_linear_call, "linear_call", F)
  # Transposing binds the stored transpose (its jaxpr and its consts).
  assert_bit_identical(jax.linear_transpose(loaded, F)(F),
                       jax.linear_transpose(_with_linear_call, F)(F))
  assert_same_outcome(jax.grad, lambda v: _with_linear_call(v).sum(),
                      lambda v: loaded(v).sum(), F)
  assert_same_outcome(jax.vmap, _with_linear_call, loaded, jnp.stack([F, F]))
  assert_same_outcome(lambda f, x: jax.jvp(f, (x,), (x * 3.0,)),
                      _with_linear_call, loaded, F)


def test_remat_opt_round_trips_with_its_primal_function():
  loaded = round_trips(_with_remat_opt, "remat_opt", F)
  # Batching and differentiating remat_opt trace its fun_jaxpr_thunk.
  assert_same_outcome(jax.vmap, _with_remat_opt, loaded, jnp.stack([F, F]))
  assert_same_outcome(lambda f, x: jax.jvp(f, (x,), (x * 3.0,)),
                      _with_remat_opt, loaded, F)
  jaxpr = loaded.closed_jaxpr.jaxpr
  (eqn,) = [e for j in validate.walk_jaxprs(jaxpr) for e in j.eqns
            if e.primitive.name == "remat_opt"]
  original = jaxpr_io.trace(_with_remat_opt, F).closed_jaxpr.jaxpr
  (first,) = [e for j in validate.walk_jaxprs(original) for e in j.eqns
              if e.primitive.name == "remat_opt"]
  # The loaded thunk gives the jaxpr and consts JAX's own thunk gives.
  (a, a_consts), (b, b_consts) = (e.params["fun_jaxpr_thunk"]()
                                  for e in (eqn, first))
  assert str(a) == str(b)
  assert_bit_identical(list(a_consts), list(b_consts))


def test_a_linear_call_whose_transpose_fails_to_trace_is_refused():
  def bad_transpose(r, t):
    raise ValueError("no transpose here")
  f = lambda x: jax.custom_derivatives.linear_call(_scaled, bad_transpose,
                                                   np.float32(1.5), x)
  prog = jaxpr_io.trace(f, F)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"\(linear_call\), param 'transpose_thunk'.*"
                           r"no transpose here"):
    jaxpr_io.dumps(prog)


def _with_call_exported(x):
  exported = jax.export.export(jax.jit(jnp.sin))(x)
  return exported.call(x)


def test_call_exported_is_refused_both_ways():
  """A serialized StableHLO module could call any native target: dumps
  refuses it, saying what to do, and a file that holds one (crafted: the
  writer never makes one) is a FormatError."""
  from tests.support import primitive_census  # pylint: disable=g-import-not-at-top
  assert "call_exported" in primitive_census.NOT_STORABLE
  prog = jaxpr_io.trace(_with_call_exported, F)
  assert "call_exported" in _primitives(prog)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"\(call_exported\), param 'exported'.*native "
                           r"custom-call target.*store the function"):
    jaxpr_io.dumps(prog)
  # A crafted file: a linear_call equation renamed, its coded param too.
  data = jaxpr_io.dumps(jaxpr_io.trace(_with_linear_call, F))
  data = proto_edit.rename_string(data, "linear_call", "call_exported")
  data = proto_edit.rename_string(data, "transpose_thunk", "exported")
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"param 'exported': the file stores a "
                           r"call_exported equation"):
    jaxpr_io.loads(data)


def test_a_bad_primal_tangent_dtype_record_is_a_format_error():
  from jaxpr_io.codec import records  # pylint: disable=g-import-not-at-top
  f32 = np.dtype(np.float32)
  for fields in ((f32, f32), (f32, "float32", "name"), (f32, f32, 3),
                 (jax.random.key(0).dtype, f32, "name")):
    with pytest.raises(jaxpr_io.FormatError, match="PrimalTangentDType"):
      records.decode_primal_tangent_dtype(fields)
  assert records.decode_primal_tangent_dtype((f32, f32, "pt")) == \
      jax.experimental.primal_tangent_dtype(f32, f32, "pt")


def _retyped_thunk(data: bytes, primitive: str, param: str, retype) -> bytes:
  """`data` with the closed jaxpr stored for `primitive`'s `param` made to
  take or return other types by `retype(jaxpr message, program message)`
  (a crafted file: the writer refuses such a thunk)."""
  msg = proto_edit.message(data)
  names = list(msg.strings)
  (param_set,) = {k.param_set for k in msg.equation_kinds
                  if names[k.primitive] == primitive}
  (p,) = [p for p in msg.param_sets[param_set].params
          if names[p.name] == param]
  closed = msg.closed_jaxprs[p.value.param_codec.closed_jaxpr]
  retype(msg.jaxprs[closed.jaxpr], msg)
  return proto_edit.reframe(msg, data)


def _drop_last_output(jaxpr_msg, msg):
  del msg
  del jaxpr_msg.outvars[-1]
  if jaxpr_msg.debug_info.has_result_paths:
    del jaxpr_msg.debug_info.result_paths[-1]


def _add_an_input(jaxpr_msg, msg):
  del msg
  jaxpr_msg.invars.append(0)  # any aval: the count is already wrong
  if jaxpr_msg.debug_info.has_arg_names:
    jaxpr_msg.debug_info.arg_names.append(0)


@pytest.mark.parametrize("f,primitive,param", [
    (_with_linear_call, "linear_call", "transpose_thunk"),
    (_with_remat_opt, "remat_opt", "fun_jaxpr_thunk"),
], ids=["linear_call", "remat_opt"])
@pytest.mark.parametrize("retype,side", [
    (_drop_last_output, "returns"), (_add_an_input, "takes")],
    ids=["fewer outputs", "more inputs"])
def test_a_stored_thunk_of_the_wrong_types_is_a_format_error(
    f, primitive, param, retype, side):
  """JAX binds the thunk's jaxpr without checking it: a crafted file whose
  transpose or primal function has other types than its equation needs
  would load and fail only when transformed, far from the cause."""
  data = jaxpr_io.dumps(jaxpr_io.trace(f, F))
  jaxpr_io.loads(data)  # the unedited file loads
  with pytest.raises(jaxpr_io.FormatError,
                     match=rf"\({primitive}\):.* param '{param}': "
                           rf"{primitive}'s {param} {side} \(.*\) where "
                           "the equation needs"):
    jaxpr_io.loads(_retyped_thunk(data, primitive, param, retype))


def test_a_linear_call_whose_transpose_has_other_types_is_refused():
  def wrong_transpose(r, t):
    return (t * r * W)[:4]  # the operand has 8 elements
  f = lambda x: jax.custom_derivatives.linear_call(_scaled, wrong_transpose,
                                                   np.float32(1.5), x)
  prog = jaxpr_io.trace(f, F)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"\(linear_call\), param 'transpose_thunk'.*"
                           r"returns \(float32\[4\]\) where the equation "
                           r"needs \(float32\[8\]\)"):
    jaxpr_io.dumps(prog)
