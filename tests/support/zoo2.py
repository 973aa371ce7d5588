"""The second zoo (issue 12): programs built on parts of JAX that the first
zoo (tests/support/zoo.py) leaves out, tested by tests/read_write/test_zoo.py in the same way.

Each entry maps a name to a zero-argument builder returning
(fn, args, kwargs); transformations are applied over args[0].
"""

from __future__ import annotations

import functools
import zlib

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.experimental import sparse

from tests.support import rule_programs

_rng = np.random.RandomState(12)


def _normal(*shape):
  return _rng.randn(*shape).astype(np.float32)


def _seeded(builder):
  """Each program's random data depends only on its name, not on which
  programs a process built before it (the exchange builds some)."""
  @functools.wraps(builder)
  def build():
    _rng.seed(zlib.crc32(builder.__name__.encode()))
    return builder()
  return build


@_seeded
def ragged_moe():
  """A mixture-of-experts layer: tokens routed to their top expert, sorted
  by expert, multiplied by each expert's weights with one `ragged_dot`,
  and put back in order, scaled by the router's probability."""
  n_tokens, d_model, d_ff, n_experts = 16, 8, 12, 4
  params = {"router": _normal(d_model, n_experts),
            "w_in": _normal(n_experts, d_model, d_ff) * 0.3,
            "w_out": _normal(n_experts, d_ff, d_model) * 0.3}
  x = _normal(n_tokens, d_model)

  def moe(params, x):
    probs = jax.nn.softmax(x @ params["router"], axis=-1)
    expert = jnp.argmax(probs, axis=-1)
    order = jnp.argsort(expert)
    sizes = jnp.bincount(expert, length=n_experts).astype(jnp.int32)
    h = lax.ragged_dot(x[order], params["w_in"], sizes)
    y = lax.ragged_dot(jax.nn.gelu(h), params["w_out"], sizes)
    y = jnp.zeros_like(y).at[order].set(y)
    return y * jnp.max(probs, axis=-1, keepdims=True)
  return moe, (params, x), {}


@_seeded
def composite_gelu():
  """`lax.composite`: a named decomposition with float, string and array
  attributes, as backends that match composites by name see it."""
  @functools.partial(lax.composite, name="zoo.scaled_gelu", version=2)
  def scaled_gelu(x, *, scale, mode, table):
    del mode
    return jax.nn.gelu(x) * scale + jnp.asarray(table)[0]

  def f(x):
    return scaled_gelu(x, scale=1.5, mode="tanh",
                       table=np.array([0.25, 0.5], np.float32)).sum(0)
  return f, (_normal(3, 5),), {}


@_seeded
def bcoo_matmul():
  """A BCOO sparse matrix (its nonzeros are the differentiated input) times
  a dense one, then a sparse-dense elementwise product and a reduction."""
  dense = np.where(_rng.rand(6, 5) < 0.4, _normal(6, 5), 0).astype(np.float32)
  m = sparse.BCOO.fromdense(dense)
  rhs = _normal(5, 3)

  def f(data, indices, rhs):
    mat = sparse.BCOO((data, indices), shape=m.shape)
    y = mat @ rhs
    z = sparse.bcoo_reduce_sum(mat * 2.0, axes=(1,)).todense()
    return y, z
  return f, (m.data, m.indices, rhs), {}


@_seeded
def bcsr_matmul():
  """A BCSR sparse matrix times a dense vector and matrix."""
  dense = np.where(_rng.rand(5, 7) < 0.4, _normal(5, 7), 0).astype(np.float32)
  m = sparse.BCSR.fromdense(dense)

  def f(data, indices, indptr, v, w):
    mat = sparse.BCSR((data, indices, indptr), shape=m.shape)
    return mat @ v, mat @ w
  return f, (m.data, m.indices, m.indptr, _normal(7), _normal(7, 2)), {}


@_seeded
def refs_accumulate():
  """Mutable array references (`jax.new_ref`): reads, whole and sliced
  writes, and an accumulation."""
  def f(x, y):
    acc = jax.new_ref(jnp.zeros_like(x))
    acc[...] += x * 2.0
    acc[1:3] = acc[1:3] + y[:2]
    acc[0] = acc[0] * y[0]
    return acc[...] + 1.0
  return f, (_normal(4), _normal(3)), {}


@_seeded
def run_state_loop():
  """`run_state`: a stateful computation over refs, discharged by JAX."""
  from jax._src.state.discharge import run_state  # pylint: disable=g-import-not-at-top

  def f(x, w):
    def body(refs):
      acc, out = refs
      for i in range(3):
        acc[...] = jnp.tanh(acc[...] @ w + i)
      out[...] = acc[...].sum(0)
    acc, out = run_state(body)((x, jnp.zeros(x.shape[1], x.dtype)))
    return acc, out
  return f, (_normal(2, 4), _normal(4, 4) * 0.5), {}


@_seeded
def checkify_checks():
  """`checkify.checkify` of a function with a user check, NaN, index and
  division checks: the program returns the error's arrays and the result.
  (A program with the `check`s themselves: tests/read_write/test_refs_and_treedefs.py.)"""
  from jax.experimental import checkify  # pylint: disable=g-import-not-at-top

  def f(x, i):
    checkify.check(jnp.all(x > -5), "x too small: {}", x.min())
    return jnp.log(x) + x[i] / x[0]
  errors = (checkify.user_checks | checkify.nan_checks
            | checkify.index_checks | checkify.div_checks)
  return checkify.checkify(f, errors=errors), (_normal(3) ** 2 + 0.5,
                                               np.int32(1)), {}


# ------------------------------------------------------- the ecosystem
@_seeded
def numpyro_log_density():
  """NumPyro: the log density of a hierarchical regression."""
  import numpyro  # pylint: disable=g-import-not-at-top
  import numpyro.distributions as dist  # pylint: disable=g-import-not-at-top
  from numpyro.infer.util import log_density  # pylint: disable=g-import-not-at-top

  def model(x, y):
    w = numpyro.sample("w", dist.Normal(jnp.zeros(3), 1.0).to_event(1))
    sigma = numpyro.sample("sigma", dist.HalfNormal(1.0))
    numpyro.sample("y", dist.Normal(x @ w, sigma), obs=y)

  def f(params, x, y):
    return log_density(model, (x, y), {}, params)[0]
  params = {"w": _normal(3), "sigma": np.float32(0.7)}
  return f, (params, _normal(10, 3), _normal(10)), {}


@_seeded
def numpyro_nuts_step():
  """NumPyro: one NUTS transition (tree building in while loops)."""
  import numpyro  # pylint: disable=g-import-not-at-top
  import numpyro.distributions as dist  # pylint: disable=g-import-not-at-top
  from numpyro.infer import NUTS  # pylint: disable=g-import-not-at-top

  def model(y):
    mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
    numpyro.sample("y", dist.Normal(mu, 1.0), obs=y)
  y = _normal(5)
  kernel = NUTS(model)
  state = kernel.init(jax.random.key(0), 10, model_args=(y,))

  def step(z, key):
    s = state._replace(z={"mu": z}, rng_key=key)
    return kernel.sample(s, (y,), {}).z["mu"]
  return step, (np.float32(0.1), jax.random.key(1)), {}


@_seeded
def blackjax_hmc_step():
  """BlackJAX: one HMC step on a correlated Gaussian."""
  import blackjax  # pylint: disable=g-import-not-at-top
  cov_inv = np.array([[2.0, 0.5], [0.5, 1.0]], np.float32)

  def logdensity(x):
    return -0.5 * x @ cov_inv @ x
  hmc = blackjax.hmc(logdensity, 0.1, jnp.ones(2), 5)

  def step(position, key):
    state, info = hmc.step(key, hmc.init(position))
    return state.position, info.acceptance_rate
  return step, (_normal(2), jax.random.key(3)), {}


@_seeded
def haiku_batchnorm_state():
  """Haiku: an MLP after BatchNorm, with its state updated (training)."""
  import haiku as hk  # pylint: disable=g-import-not-at-top

  def forward(x):
    x = hk.BatchNorm(True, True, 0.9)(x, is_training=True)
    return hk.nets.MLP([8, 2])(x)
  model = hk.transform_with_state(forward)
  x = _normal(4, 3)
  params, state = model.init(jax.random.key(0), x)

  def f(params, state, x):
    return model.apply(params, state, None, x)
  return f, (params, state, x), {}


@_seeded
def keras3_mlp():
  """Keras 3 on the JAX backend: a stateless call of a Sequential model."""
  import keras  # pylint: disable=g-import-not-at-top
  if keras.backend.backend() != "jax":
    raise RuntimeError(f"keras runs on the {keras.backend.backend()} "
                       "backend; set KERAS_BACKEND=jax (tests/conftest.py "
                       "does)")
  model = keras.Sequential([keras.Input((4,)),
                            keras.layers.Dense(8, activation="relu"),
                            keras.layers.Dropout(0.0),
                            keras.layers.Dense(2)])
  trainable = [np.asarray(v.value) for v in model.trainable_variables]
  fixed = [np.asarray(v.value) for v in model.non_trainable_variables]

  def f(trainable, x):
    y, _ = model.stateless_call(trainable, fixed, x)
    return y
  return f, (trainable, _normal(2, 4)), {}


@_seeded
def jaxmd_lennard_jones():
  """JAX-MD: Lennard-Jones energy with a neighbour list, in a periodic box."""
  from jax_md import energy, space  # pylint: disable=g-import-not-at-top
  box = 5.0
  displacement, _ = space.periodic(box)
  positions = (_rng.rand(16, 2) * box).astype(np.float32)
  neighbor_fn, energy_fn = energy.lennard_jones_neighbor_list(
      displacement, box, r_onset=1.0, r_cutoff=1.5)
  neighbors = neighbor_fn.allocate(positions)

  def f(positions):
    updated = neighbors.update(positions)
    return energy_fn(positions, updated), updated.did_buffer_overflow
  return f, (positions,), {}


@_seeded
def distrax_flow():
  """Distrax: log-probabilities of a Normal and of a tanh-transformed one."""
  import distrax  # pylint: disable=g-import-not-at-top

  def f(loc, x):
    base = distrax.Normal(loc, 1.0)
    flow = distrax.Transformed(base, distrax.Tanh())
    return base.log_prob(x).sum() + flow.log_prob(jnp.tanh(x) * 0.9).sum()
  return f, (np.zeros(3, np.float32), _normal(3) * 0.3), {}


@_seeded
def jaxopt_lbfgs():
  """jaxopt: five L-BFGS iterations of a regularized least squares."""
  import jaxopt  # pylint: disable=g-import-not-at-top
  a, b = _normal(6, 3), _normal(6)

  def objective(w, lam):
    return jnp.sum((a @ w - b) ** 2) + lam * jnp.sum(w ** 2)

  def f(w0, lam):
    return jaxopt.LBFGS(objective, maxiter=5).run(w0, lam=lam).params
  return f, (np.zeros(3, np.float32), np.float32(0.1)), {}


@_seeded
def equinox_bounded_loop():
  """Equinox internals as Optimistix and Diffrax use them: a bounded
  `while_loop` (its `select_if_vmap`, `maybe_set` and `unvmap_*` primitives,
  from jaxpr_io's library table), and a `nondifferentiable` input, whose
  JVP rule raises on purpose."""
  import equinox.internal as eqxi  # pylint: disable=g-import-not-at-top

  def f(x, scale):
    def body(carry):
      i, y = carry
      return i + 1, y * 0.9 + jnp.sin(y) * scale
    def cond(carry):
      return (carry[0] < 6) & eqxi.unvmap_any(jnp.abs(carry[1]) < 100)
    _, y = eqxi.while_loop(cond, body, (0, x), max_steps=8, kind="bounded")
    return y + eqxi.nondifferentiable(scale) * 0.0
  return f, (_normal(4), np.float32(0.5)), {}


@_seeded
def lineax_cholesky_solve():
  """Lineax: a positive definite solve with `Cholesky`, tagged so. Its
  `linear_solve` primitive (jaxpr_io's library table) takes Lineax's
  operator and solver as Equinox modules in a treedef param, with
  Equinox's `Static` wrapper, `ShapeDtypeStruct`s, a tag and the
  `RESULTS` enumeration."""
  import lineax as lx  # pylint: disable=g-import-not-at-top
  m = _normal(4, 4)
  a = m @ m.T + 4 * np.eye(4, dtype=np.float32)

  def f(b, a):
    op = lx.MatrixLinearOperator(a, lx.positive_semidefinite_tag)
    sol = lx.linear_solve(op, jnp.tanh(b), lx.Cholesky())
    return sol.value * 2.0, sol.result._value  # pylint: disable=protected-access
  return f, (_normal(4), a), {}


@_seeded
def optimistix_newton():
  """Optimistix: a Newton root find. Its linear solves are Lineax's
  `linear_solve` on a closure-converted Jacobian (library functions and a
  jaxpr in Equinox modules' static data), inside Equinox's while loop;
  its derivative is Optimistix's implicit-function JVP rule."""
  import optimistix as optx  # pylint: disable=g-import-not-at-top

  def f(y0, a):
    sol = optx.root_find(lambda y, a: jnp.tanh(y) + y * a - 0.3,
                         optx.Newton(rtol=1e-5, atol=1e-5), y0, args=a,
                         throw=False)
    return sol.value
  return f, (_normal(3) * 0.5, np.float32(0.7)), {}


@_seeded
def optimistix_bfgs():
  """Optimistix: a BFGS minimisation (its line search, its quasi-Newton
  state and `linear_solve` in the implicit-function JVP rule)."""
  import optimistix as optx  # pylint: disable=g-import-not-at-top

  def f(y0, a):
    sol = optx.minimise(lambda y, a: jnp.sum((y - a) ** 2 + 0.1 * y ** 4),
                        optx.BFGS(rtol=1e-5, atol=1e-5), y0, args=a,
                        throw=False)
    return sol.value
  return f, (_normal(3), np.float32(0.7)), {}


def _diffrax_ode(adjoint):
  import diffrax as dfx  # pylint: disable=g-import-not-at-top
  term = dfx.ODETerm(lambda t, y, k: -k * y + jnp.sin(t) * 0.5)

  def f(y0, k):
    sol = dfx.diffeqsolve(
        term, dfx.Tsit5(), 0.0, 1.0, 0.1, y0, args=k,
        stepsize_controller=dfx.PIDController(rtol=1e-4, atol=1e-6),
        max_steps=64, adjoint=adjoint(), throw=False)
    return sol.ys[-1]
  return f, (_normal(3), np.float32(0.7)), {}


@_seeded
def diffrax_ode_adaptive():
  """Diffrax: an ODE (Tsit5) with an adaptive PID step-size controller,
  differentiated through the solver's operations (`DirectAdjoint`: Equinox's
  bounded while loop), `throw=False` (the solver's error checks are Python
  callbacks otherwise)."""
  import diffrax as dfx  # pylint: disable=g-import-not-at-top
  return _diffrax_ode(dfx.DirectAdjoint)


@_seeded
def diffrax_sde():
  """Diffrax: an SDE (Euler-Maruyama on a drift term and a diagonal
  diffusion driven by a Brownian motion), fixed steps."""
  import diffrax as dfx  # pylint: disable=g-import-not-at-top
  import lineax as lx  # pylint: disable=g-import-not-at-top
  bm = dfx.UnsafeBrownianPath(shape=(3,), key=jax.random.key(3))
  terms = dfx.MultiTerm(
      dfx.ODETerm(lambda t, y, k: -k * y),
      dfx.ControlTerm(lambda t, y, k: lx.DiagonalLinearOperator(
          0.1 * jnp.cos(y)), bm))

  def f(y0, k):
    sol = dfx.diffeqsolve(terms, dfx.Euler(), 0.0, 1.0, 0.05, y0, args=k,
                          max_steps=32, adjoint=dfx.DirectAdjoint(),
                          throw=False)
    return sol.ys[-1]
  return f, (_normal(3), np.float32(0.7)), {}


@_seeded
def custom_vmap_rule():
  """`jax.custom_batching.custom_vmap`: a function with its own batching
  rule (which uses the axis size), stored as one jaxpr per pattern of
  batched inputs, traced with a symbolic axis size."""
  scaled_sin = rule_programs.scaled_sin_vmap()

  def f(x, s):
    return jnp.tanh(scaled_sin(x, s)).sum(-1) + s
  return f, (_normal(5), np.float32(1.5)), {}


@_seeded
def pallas_kernel():
  """A Pallas kernel in interpret mode: a grid of two blocks, BlockSpecs
  with index maps, a VMEM scratch ref and `program_id`."""
  from jax.experimental import pallas as pl  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas import tpu as pltpu  # pylint: disable=g-import-not-at-top

  def kernel(x_ref, w_ref, o_ref, acc_ref):
    i = pl.program_id(0)
    acc_ref[...] = jnp.tanh(x_ref[...]) * w_ref[...]
    o_ref[...] = acc_ref[...] + i.astype(jnp.float32)

  block = pl.BlockSpec((8, 128), lambda i: (i, 0))
  call = pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
      grid=(2,), in_specs=[block, pl.BlockSpec((8, 128), lambda i: (0, 0))],
      out_specs=block, scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
      interpret=True)
  return call, (_normal(16, 128), _normal(8, 128)), {}


ZOO2 = {
    "ragged_moe": ragged_moe,
    "composite_gelu": composite_gelu,
    "bcoo_matmul": bcoo_matmul,
    "bcsr_matmul": bcsr_matmul,
    "refs_accumulate": refs_accumulate,
    "run_state_loop": run_state_loop,
    "checkify_checks": checkify_checks,
    "numpyro_log_density": numpyro_log_density,
    "numpyro_nuts_step": numpyro_nuts_step,
    "blackjax_hmc_step": blackjax_hmc_step,
    "haiku_batchnorm_state": haiku_batchnorm_state,
    "keras3_mlp": keras3_mlp,
    "jaxmd_lennard_jones": jaxmd_lennard_jones,
    "distrax_flow": distrax_flow,
    "jaxopt_lbfgs": jaxopt_lbfgs,
    "equinox_bounded_loop": equinox_bounded_loop,
    "pallas_kernel": pallas_kernel,
    "lineax_cholesky_solve": lineax_cholesky_solve,
    "optimistix_newton": optimistix_newton,
    "optimistix_bfgs": optimistix_bfgs,
    "diffrax_ode_adaptive": diffrax_ode_adaptive,
    "diffrax_sde": diffrax_sde,
    "custom_vmap_rule": custom_vmap_rule,
}

# Programs that `dumps` refuses on some JAX releases, with an
# UnsupportedError matching the pattern (tests/read_write/test_zoo.py asserts it):
# name -> (whether this release refuses it, the pattern).
# Diffrax's default adjoint, once refused here, is stored (its rules over
# the pattern limit: jaxpr_io/families/custom_rules/wide.py) and tested in
# tests/families/libraries/test_ecosystem_defaults.py, in a fresh process.
REFUSED: dict[str, tuple[bool, str]] = {}
