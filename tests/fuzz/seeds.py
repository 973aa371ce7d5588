"""Seed files for the fuzzer: small but varied real programs, dumped with
`jaxpr_io.dumps` by the process that runs the campaign (or read back from a
cache directory).

Every seed compiles in well under a second. Together they hold: first-order
primitives of many dtypes, constants inline (<= 64 bytes) and in the data
section, literals of every Python scalar kind, `jit` (shared sub-jaxprs),
`cond`/`switch`, `while`, `scan`, `remat` with and without policies,
`custom_jvp`/`custom_vjp` rules (`jax.nn.relu`, `gelu`, `softplus`, a user
`custom_vjp`), `debug_print` (ordered and not), registered host callbacks,
`jit` with `NamedSharding`s, `shard_map` with collectives, symbolic shapes
with constraints, typed and legacy PRNG keys, pytree signatures with dicts,
kwargs and NamedTuples (GENERIC nodes), `reduce` with a computation, records
(gather dimension numbers), enums (precision), optional params (`top_k`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
import warnings

import jax
import jax.numpy as jnp
import numpy as np
from jax import ad_checkpoint

import jaxpr_io
from jaxpr_io.compat import hi_mutable as compat_hi_mutable
from tests.support import programs
from tests.fuzz import hostfns

F32 = np.float32
_rng = np.random.RandomState(7)


def _normal(*shape, dtype=F32):
  return _rng.randn(*shape).astype(dtype)


# --------------------------------------------------------------- builders
# Each builder returns (fn, args, kwargs) for `jaxpr_io.trace`.

def _from_programs(name):
  def build():
    fn, args, kwargs = programs.PROGRAMS[name]
    return fn, args, kwargs
  return build


@jax.custom_vjp
def _clip_gradient(x):
  return x


_clip_gradient.defvjp(lambda x: (x, None),
                      lambda _, g: (jnp.clip(g, -0.5, 0.5),))


@jax.custom_jvp
def _safe_log(x):
  return jnp.log(x)


@_safe_log.defjvp
def _safe_log_jvp(primals, tangents):
  (x,), (t,) = primals, tangents
  return _safe_log(x), t / jnp.maximum(x, 1e-3)


def custom_rules():
  w = _normal(6, 8)

  def f(x):
    h = x @ w
    return (_clip_gradient(jax.nn.relu(h)) + jax.nn.softplus(h)
            + jax.nn.gelu(h, approximate=False) + jax.nn.gelu(h)
            + _safe_log(jnp.abs(h) + 1.0))
  return f, (_normal(3, 6),), {}


def grad_custom():
  w = _normal(4, 4)

  def loss(x):
    h = jax.nn.relu(x @ w)
    return jnp.sum(_clip_gradient(h) ** 2) + jnp.sum(jax.nn.gelu(x))
  return jax.grad(loss), (_normal(2, 4),), {}


def grad_scan_pytree():
  def loss(p, x):
    def step(c, e):
      return jax.nn.relu(c * p["w"] + e), c
    c, ys = jax.lax.scan(step, x[0], x)
    return jnp.sum(ys) + c + p["b"][0][0]
  params = {"w": F32(0.5), "b": (np.ones(2, F32), None)}
  return jax.grad(loss), (params, np.arange(4.0, dtype=F32)), {}


def debug_print():
  def f(x):
    jax.debug.print("x={x} sum={}", x.sum(), x=x)
    y = jnp.cos(x) * 3.0
    jax.debug.print("y[0]={a!r:>8}", a=y[0], ordered=True)
    return y
  return f, (_normal(3),), {}


def callbacks():
  hostfns.register()

  def f(x):
    y = jax.pure_callback(hostfns.host_double,
                          jax.ShapeDtypeStruct(x.shape, x.dtype), x)
    jax.debug.callback(hostfns.host_log, y)
    return y + 1.0
  return f, (_normal(4),), {}


def sharded_jit():
  P = jax.sharding.PartitionSpec
  mesh = jax.make_mesh((2, 4), ("data", "model"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)
  xs = jax.sharding.NamedSharding(mesh, P("data", None))
  ws = jax.sharding.NamedSharding(mesh, P(None, "model"))

  @functools.partial(jax.jit, in_shardings=(xs, ws),
                     out_shardings=jax.sharding.NamedSharding(mesh, P()))
  def f(x, w):
    h = jax.lax.with_sharding_constraint(jnp.tanh(x @ w), xs)
    return h.sum()
  return f, (jax.device_put(_normal(4, 8), xs),
             jax.device_put(_normal(8, 16), ws)), {}


def shard_map():
  P = jax.sharding.PartitionSpec
  mesh = jax.make_mesh((2, 4), ("x", "y"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)

  def body(b):
    i = jax.lax.axis_index("x")
    total = jax.lax.psum(b, "y")
    gathered = jax.lax.all_gather(b, "y", axis=1, tiled=True)
    shifted = jax.lax.ppermute(b, "x", [(0, 1), (1, 0)])
    return total * i + shifted, gathered
  fn = jax.shard_map(body, mesh=mesh, in_specs=P("x", "y"),
                     out_specs=(P("x", "y"), P("x", "y")))
  return fn, (np.arange(32, dtype=F32).reshape(8, 4) / 7,), {}


def symbolic():
  b, = jax.export.symbolic_shape("b", constraints=("b >= 2",))

  def f(x):
    y = x.reshape(-1) * 2.0
    half = x[: x.shape[0] // 2]
    return jnp.sum(y) + x[0, 0], jnp.concatenate([y, y]), half.sum(axis=0)
  return f, (jax.ShapeDtypeStruct((b, 4), F32),), {}


def symbolic_two_vars():
  a, c = jax.export.symbolic_shape("a, c", constraints=("a >= c", "c >= 1"))

  def f(x, y):
    return jnp.dot(x, y).sum(axis=1), jnp.pad(x, ((0, 1), (0, 0)))
  return f, (jax.ShapeDtypeStruct((a, c), F32),
             jax.ShapeDtypeStruct((c, 3), F32)), {}


def remat_policy():
  ws = _normal(3, 4, 4) / 3
  policy = jax.checkpoint_policies.save_only_these_names("hidden")

  @functools.partial(jax.checkpoint, policy=policy)
  def layer(h, w):
    h = ad_checkpoint.checkpoint_name(jnp.tanh(h @ w), "hidden")
    return h * 2.0, None

  def net(ws, x):
    h, _ = jax.lax.scan(layer, x, ws)
    return h.sum()
  return jax.grad(net), (ws, _normal(2, 4)), {}


def misc_params():
  def f(x):
    r = jax.lax.reduce(x, np.float32(0), lambda a, b: a * b + 1, (0,))
    m = x.reshape(2, 2)
    d = jnp.dot(m, m.T, precision=jax.lax.Precision.HIGHEST).reshape(4)
    g = x[jnp.array([0, 2, 3, 1])]
    vals, idx = jax.lax.top_k(x, 2)
    e = jax.scipy.special.erfc(x)
    return (r + d + g + e, jnp.sort(x), jnp.argmax(x), jnp.cumsum(x), vals,
            idx)
  return f, (np.arange(4.0, dtype=F32),), {}


def literals():
  big_i8 = np.arange(100, dtype=np.int8)              # 100 bytes: a blob
  small_u32 = np.array([1, 2, 3], np.uint32)            # 12 bytes: inline
  big_bf16 = np.linspace(0, 1, 48).astype(jnp.bfloat16)  # 96 bytes: a blob
  small_bool = np.array([True, False, True])
  small_c64 = np.array([1 + 2j, -0.5j], np.complex64)

  big_key_data = np.arange(40, dtype=np.uint32).reshape(20, 2)  # 160 bytes
  key_const = jax.random.key(3)                                  # a key constant

  def f(x, n):
    # jnp.asarray: constants of the jaxpr (numpy would fold them at trace).
    i8, u32 = jnp.asarray(big_i8), jnp.asarray(small_u32)
    bf, bo, c64 = (jnp.asarray(big_bf16), jnp.asarray(small_bool),
                   jnp.asarray(small_c64))
    keys = jax.random.wrap_key_data(jnp.asarray(big_key_data))
    y = x * 2 + 1.5 - (x > 0.25) * 3
    y = y + i8[:4].astype(F32).sum() + u32.sum().astype(F32)
    y = y + bf[:4].astype(F32).sum() * jnp.where(bo[0], 1, 0)
    y = y + jax.random.uniform(keys[n % 20], (4,))
    y = y + jax.random.normal(key_const, (4,))
    z = (x.astype(jnp.complex64) * c64[0] + 1j).real
    k = n + 7 - (n >> 1) * np.int32(-3)
    return y + z, k, jnp.float32(np.nan) * x[0], jnp.uint8(255) + n.astype(
        jnp.uint8), jnp.full((2,), -0.0)
  return f, (np.linspace(-1, 1, 4).astype(F32), np.int32(5)), {}


class Point(typing.NamedTuple):
  x: typing.Any
  y: typing.Any


@dataclasses.dataclass
class Pair:
  left: typing.Any
  right: typing.Any


jax.tree_util.register_dataclass(Pair, data_fields=["left", "right"],
                                 meta_fields=[])


def pytree_generic():
  def f(p, pair, *, scale):
    return {"sum": (p.x + p.y) * scale, "pair": Pair(pair.left * 2,
                                                      pair.right - 1)}
  return f, (Point(_normal(2), _normal(2)), Pair(_normal(3), np.int32(2))), {
      "scale": F32(3.0)}


def cond_effects():
  def f(x, i):
    def a(v):
      jax.debug.print("branch a {}", v[0], ordered=True)
      return jnp.sin(v)

    def b(v):
      jax.debug.print("branch b {}", v[0], ordered=True)
      return v * 2
    y = jax.lax.cond(i > 0, a, b, x)
    return jax.lax.fori_loop(0, 3, lambda j, acc: acc + y * j, y)
  return f, (_normal(3), np.int32(1)), {}


SEEDS = {
    # tests/support/programs.py
    "mlp": _from_programs("mlp"),
    "shared_jit": _from_programs("shared_jit"),
    "cond": _from_programs("cond"),
    "switch": _from_programs("switch"),
    "while": _from_programs("while"),
    "fori": _from_programs("fori"),
    "scan": _from_programs("scan"),
    "remat": _from_programs("remat"),
    "remat_scan": _from_programs("remat_scan"),
    "pytree": _from_programs("pytree"),
    "numerics": _from_programs("numerics"),
    "dtypes": _from_programs("dtypes"),
    "indexing": _from_programs("indexing"),
    "conv": _from_programs("conv"),
    "random_typed": _from_programs("random_typed"),
    "random_legacy": _from_programs("random_legacy"),
    # here
    "custom_rules": custom_rules,
    "grad_custom": grad_custom,
    "grad_scan_pytree": grad_scan_pytree,
    "debug_print": debug_print,
    "callbacks": callbacks,
    "sharded_jit": sharded_jit,
    "shard_map": shard_map,
    "symbolic": symbolic,
    "symbolic_two_vars": symbolic_two_vars,
    "remat_policy": remat_policy,
    "misc_params": misc_params,
    "literals": literals,
    "pytree_generic": pytree_generic,
    "cond_effects": cond_effects,
}


def _from_zoo2(name):
  def build():
    from tests.support import zoo2  # pylint: disable=g-import-not-at-top
    return zoo2.ZOO2[name]()
  return build


def checkify_check():
  """A program with checkify `check`s and their error effects."""
  from jax.experimental import checkify  # pylint: disable=g-import-not-at-top

  def f(x):
    checkify.check(jnp.all(x > -5), "x too small: {} and {y}", x[0], y=x[1])
    return jnp.log(jnp.abs(x) + 1.0)
  return f, (_normal(3),), {}


# Format version 4: refs, treedef params, avals as params, Pallas records,
# checkify's error tree and effects, the library table.
SEEDS.update({
    "refs": _from_zoo2("refs_accumulate"),
    "run_state": _from_zoo2("run_state_loop"),
    "ragged": _from_zoo2("ragged_moe"),
    "composite": _from_zoo2("composite_gelu"),
    "bcoo": _from_zoo2("bcoo_matmul"),
    "pallas": _from_zoo2("pallas_kernel"),
    "equinox": _from_zoo2("equinox_bounded_loop"),
    "checkify_check": checkify_check,
})


def async_collectives():
  """Futures of JAX's asynchronous collectives (format version 7)."""
  from tests.golden import make_golden  # pylint: disable=import-outside-toplevel
  return make_golden.async_collectives, (_normal(4, 3),), {}


def relayout():
  """An array layout (format version 7; JAX 0.11+, compiled by 0.12)."""
  from jax._src import pjit  # pylint: disable=import-outside-toplevel
  from jax.experimental import layout  # pylint: disable=import-outside-toplevel
  return (lambda v: pjit.relayout(v, layout.Layout((0,))),
          (_normal(8),), {})


def _compiles_relayout() -> bool:
  from jax._src import pjit  # pylint: disable=import-outside-toplevel
  if not hasattr(pjit, "relayout"):
    return False  # JAX 0.10
  from jax.experimental import layout  # pylint: disable=import-outside-toplevel
  try:
    jax.jit(lambda v: pjit.relayout(v, layout.Layout((0,)))).lower(
        np.zeros(8, F32)).compile()
  except NotImplementedError:
    return False  # JAX 0.11 traces relayout but cannot compile it on a CPU
  return True


# Format version 7: futures and layouts. (Pinned linear values have no seed:
# XLA:CPU cannot compile `pin`, so `check=True` refuses every program with
# one; the mutator still makes `lin_val` avals by switching `Aval.kind`.)
SEEDS["async_collectives"] = async_collectives
if _compiles_relayout():
  SEEDS["relayout"] = relayout


def hi_prims():
  """`call_hi_primitive` with its `_prim` record (JAX's own hi primitive
  classes: searchsorted on every release; JAX 0.12's jax.numpy binds frexp
  and ldexp too)."""
  from jax._src.numpy import hijax as numpy_hijax  # pylint: disable=import-outside-toplevel

  def f(a, v, x):
    i = numpy_hijax.searchsorted(a, v, side="right", method="sort")
    mantissa, exponent = jnp.frexp(x)
    return i, jnp.ldexp(mantissa, exponent + 1)
  # A generator of its own, so that the other seeds' values stay as they were.
  rng = np.random.RandomState(7)
  a, v, x = (rng.normal(size=n).astype(F32) for n in (8, 5, 4))
  return f, (np.sort(a), v, x), {}


def custom_root():
  """`lax.custom_root` with a tangent solve that applies its linear map: on
  JAX 0.11+ the `CustomRoot` and `RootLinearMap` records, whose fields hold
  jaxprs, treedefs and names (families/hijax/solves.py)."""
  def f(x):
    def solve(g, y0):
      return jax.lax.fori_loop(0, 4, lambda _, y: y - g(y) / (2 * y), y0)
    return jax.lax.custom_root(lambda y: y * y - x, jnp.ones_like(x),
                               solve, lambda g, y: y / g(jnp.ones_like(y)))
  return f, (np.array([2.0, 0.5, 9.0], F32),), {}


SEEDS["custom_root"] = custom_root


# (`custom_lin` has no seed, for the reason `pinned` has none: a program
# that holds it cannot run forward or be lowered, so `check=True` refuses
# the unmutated seed; tests/families/custom_rules/test_custom_lin.py crafts its bad files.)
SEEDS["hi_prims"] = hi_prims


def hijax_boxes():
  """JAX 0.10's boxes and logs, made in the program and passed to a jit-ted
  step: box and log avals, and quasi-dynamic data on both jaxprs."""
  def f(x, y):
    box, log = compat_hi_mutable.Box({"acc": x}), compat_hi_mutable.Log()

    @jax.jit
    def step(b, l, v):
      b.set({"acc": b.get()["acc"] * 2.0 + v})
      l.append("seen", v)
      return v.sum()
    t = step(box, log, y) + step(box, log, y * 3.0)
    return box.get()["acc"] + t
  return f, (_normal(3), _normal(3)), {}


# Format version 8: box and log avals, variables' quasi-dynamic data; only
# where JAX has them (0.10).
if compat_hi_mutable.SUPPORTED:
  SEEDS["hijax_boxes"] = hijax_boxes


def build_one(name: str) -> bytes:
  fn, args, kwargs = SEEDS[name]()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    prog = jaxpr_io.trace(fn, *args, **kwargs)
    prog.metadata["seed"] = name
    prog.metadata["source"] = "tests/fuzz"
    return jaxpr_io.dumps(prog)


def build(names=None, cache_dir: str | None = None):
  """{name: file bytes} of the seeds that build, and {name: why} of those
  that do not (a builder or `dumps` failing is reported, not raised).

  With `cache_dir`, seeds are read from and written to
  `cache_dir/jax-<version>/<name>.jaxpr`.
  """
  hostfns.register()
  names = sorted(SEEDS) if names is None else list(names)
  sub = None
  if cache_dir:
    sub = os.path.join(cache_dir, f"jax-{jax.__version__}")
    os.makedirs(sub, exist_ok=True)
  files, failed = {}, {}
  for name in names:
    path = sub and os.path.join(sub, f"{name}.jaxpr")
    if path and os.path.exists(path):
      with open(path, "rb") as f:
        files[name] = f.read()
      continue
    try:
      files[name] = build_one(name)
    except Exception as e:  # pylint: disable=broad-except
      failed[name] = f"building/dumping failed: {type(e).__name__}: {e}"
      continue
    if path:
      with open(path + ".tmp", "wb") as f:
        f.write(files[name])
      os.replace(path + ".tmp", path)
  return files, failed
