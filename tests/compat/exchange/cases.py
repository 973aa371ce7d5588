"""The programs every release writes for the exchange.

`enumerate_cases()` yields `(name, builder)` pairs in a stable order; a
builder takes no arguments and returns a `Case`. Names are stable across
releases (`harness.<group>`, `zoo.<name>`, `programs.<name>`, ...), so
expected failures (tests/compat/exchange/expected.py) can refer to them.

Everything here must run unchanged on JAX 0.10, 0.11 and 0.12: only public
JAX APIs, apart from JAX's own primitive harnesses (jax._src), which exist in
all three.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable, Iterator

import jax
import jax.numpy as jnp
import numpy as np

from tests.support import harness_list

F32 = np.float32


@dataclasses.dataclass
class Case:
  """One program to exchange.

  Attributes:
    fn: the function: `jaxpr_io.trace(fn, *trace_args, **kwargs)`.
    args, kwargs: concrete inputs the program is run on (pytrees of arrays;
      PRNG key arrays allowed).
    trace_args: what the program is traced with, when not `args` (the
      symbolic-shape case traces `ShapeDtypeStruct`s and runs arrays).
    info: free text for the manifest (e.g. the harness's full name).
    checks: the results to record (tests/compat/exchange/common.py CHECKS), where
      the original program supports them.
  """
  fn: Callable
  args: tuple
  kwargs: dict = dataclasses.field(default_factory=dict)
  trace_args: tuple | None = None
  info: str = ""
  checks: tuple[str, ...] = ("out", "grad", "jvp", "vmap")


class SkipCase(Exception):
  """Raised by a builder when JAX itself cannot trace the program on this
  release: the case is not part of this release's set."""


# ---------------------------------------------------------------- harnesses
def _harness_list() -> list:
  """JAX's primitive harnesses that run on the CPU, built without x64."""
  return harness_list.cpu_harnesses(False)


def _harness_case(harness) -> Case:
  """The harness as a Case; SkipCase if JAX cannot trace or print it (the
  readers load with check=True, which proves the program prints; some
  harnesses bind primitives without params JAX's printer expects)."""
  args = harness.dyn_args_maker(np.random.RandomState(0))
  try:
    str(jax.make_jaxpr(harness.dyn_fun)(*args))
  except Exception as e:  # pylint: disable=broad-except
    raise SkipCase(f"JAX itself does not trace or print {harness.fullname}: "
                   f"{type(e).__name__}: {e}") from None
  # Outputs and gradients only: jvp and vmap of a single primitive add
  # little and would double the exchange's compile time (130 groups).
  return Case(harness.dyn_fun, tuple(args), info=harness.fullname,
              checks=("out", "grad"))


def _harness_builders() -> Iterator[tuple[str, Callable[[], Case]]]:
  """One builder per harness group: the group's first harness that JAX
  traces (later ones are tried only when an earlier one cannot be)."""
  groups: dict[str, list] = {}
  for h in _harness_list():
    groups.setdefault(h.group_name, []).append(h)

  def first_traceable(harnesses):
    reasons = []
    for h in harnesses:
      try:
        return _harness_case(h)
      except SkipCase as e:
        reasons.append(str(e))
    raise SkipCase("; ".join(reasons[:3]))
  for group, harnesses in groups.items():
    yield f"harness.{group}", functools.partial(first_traceable, harnesses)


# ------------------------------------------------- zoo and round-trip fixtures
def _zoo_builders() -> Iterator[tuple[str, Callable[[], Case]]]:
  from tests.support import zoo  # pylint: disable=g-import-not-at-top

  def build(make):
    fn, args, kwargs = make()
    return Case(fn, tuple(args), dict(kwargs))
  for name in sorted(zoo.ZOO):
    yield f"zoo.{name}", functools.partial(build, zoo.ZOO[name])
  # The second zoo's programs of JAX's own features (format version 4); its
  # ecosystem programs are tested per release in tests/read_write/test_zoo.py.
  from tests.support import zoo2  # pylint: disable=g-import-not-at-top
  for name in ZOO2_EXCHANGED:
    yield f"zoo2.{name}", functools.partial(build, zoo2.ZOO2[name])


ZOO2_EXCHANGED = ("ragged_moe", "composite_gelu", "bcoo_matmul", "bcsr_matmul",
                  "refs_accumulate", "run_state_loop", "checkify_checks",
                  "equinox_bounded_loop", "pallas_kernel")


def _program_builders() -> Iterator[tuple[str, Callable[[], Case]]]:
  from tests.support import programs  # pylint: disable=g-import-not-at-top

  def build(name):
    fn, args, kwargs = programs.PROGRAMS[name]
    return Case(fn, tuple(args), dict(kwargs))
  for name in sorted(programs.PROGRAMS):
    yield f"programs.{name}", functools.partial(build, name)


# ------------------------------------------------------------ custom rules
def _rng(seed: int) -> np.random.RandomState:
  return np.random.RandomState(seed)


def custom_nn() -> Case:
  """jax.nn's custom_jvp functions (relu, silu via sigmoid, softplus) and
  gelu in both forms."""
  def f(x, w):
    h = jax.nn.relu(x @ w)
    return (jax.nn.gelu(h) + jax.nn.gelu(h, approximate=False) +
            jax.nn.softplus(h - 1.0) + jax.nn.silu(x).sum())
  r = _rng(1)
  return Case(f, (r.randn(3, 4).astype(F32), r.randn(4, 5).astype(F32)))


@jax.custom_vjp
def _clip_gradient(x, bound):
  return x


def _clip_gradient_fwd(x, bound):
  return x, bound


def _clip_gradient_bwd(bound, g):
  # Not the derivative of the identity: the rule must come from the file.
  return jnp.clip(g, -bound, bound), jnp.zeros_like(bound)


_clip_gradient.defvjp(_clip_gradient_fwd, _clip_gradient_bwd)


@jax.custom_jvp
def _soft_log(x):
  return jnp.log(x)


@_soft_log.defjvp
def _soft_log_jvp(primals, tangents):
  x, = primals
  t, = tangents
  # Bounded near 0, unlike log's derivative; calls itself, as relu's does.
  return _soft_log(x), t / jnp.maximum(x, 1e-2)


def custom_user() -> Case:
  """A user custom_vjp (gradient clipping) and custom_jvp (soft log)."""
  def f(x, bound):
    y = _clip_gradient(x * 3.0, bound)
    return (y ** 2).sum() + _soft_log(jnp.abs(x) + 1e-3).sum()
  return Case(f, (_rng(2).randn(6).astype(F32), F32(0.5)))


def remat_dots_saveable() -> Case:
  """jax.checkpoint with the dots_saveable policy, applied twice."""
  w = (_rng(3).randn(6, 6) / 3).astype(F32)

  @functools.partial(jax.checkpoint,
                     policy=jax.checkpoint_policies.dots_saveable)
  def block(w, x):
    return jnp.sin(jnp.tanh(x @ w) @ w.T)

  def f(w, x):
    return block(w, block(w, x)).sum()
  return Case(f, (w, _rng(4).randn(2, 6).astype(F32)))


# ------------------------------------------------------------------- PRNG
def _key_program(key, x):
  k1, k2 = jax.random.split(key)
  k3 = jax.random.fold_in(k1, 7)
  noise = jax.random.normal(k2, x.shape) + jax.random.uniform(k3, ())
  return k3, x * noise, jax.random.bits(k1, (3,))


def random_key(impl: str) -> Case:
  """Typed keys of `impl` in, keys and random values out."""
  return Case(_key_program, (jax.random.key(5, impl=impl),
                             _rng(5).randn(4).astype(F32)))


# --------------------------------------------------------------- sharding
def _need_8_devices() -> None:
  if jax.device_count() < 8:
    raise RuntimeError(
        f"needs 8 devices, this process has {jax.device_count()}: set "
        "XLA_FLAGS=--xla_force_host_platform_device_count=8 before JAX "
        "starts (importing tests.compat.exchange does)")


def sharded_jit() -> Case:
  """jit with NamedShardings over a concrete Mesh of the 8 host devices."""
  _need_8_devices()
  P = jax.sharding.PartitionSpec
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]).reshape(4, 2),
                           ("a", "b"))
  ns = functools.partial(jax.sharding.NamedSharding, mesh)

  @functools.partial(jax.jit, in_shardings=(ns(P("a", None)), ns(P(None, "b"))),
                     out_shardings=ns(P("a")))
  def f(x, w):
    h = jax.lax.with_sharding_constraint(jnp.tanh(x @ w), ns(P("a", "b")))
    return h.sum(axis=1)
  r = _rng(6)
  return Case(f, (r.randn(8, 4).astype(F32), r.randn(4, 6).astype(F32)))


def shard_map_collectives() -> Case:
  """shard_map over a 2x4 mesh with psum, all_gather and axis_index."""
  _need_8_devices()
  P = jax.sharding.PartitionSpec
  mesh = jax.make_mesh((2, 4), ("x", "y"),
                       axis_types=(jax.sharding.AxisType.Auto,) * 2)

  def body(b):
    total = jax.lax.psum(jnp.sin(b), "y")
    gathered = jax.lax.all_gather(b, "y", axis=1, tiled=True)
    return total * (jax.lax.axis_index("x") + 1), gathered
  # out_specs shard the gathered axis: shard_map cannot infer that
  # all_gather's result is replicated over "y" (0.10 refuses P("x", None)).
  f = jax.shard_map(body, mesh=mesh, in_specs=P("x", "y"),
                    out_specs=(P("x", None), P("x", "y")))
  return Case(f, (np.arange(32, dtype=F32).reshape(8, 4) / 7,))


# --------------------------------------------------------------- symbolic
def symbolic_batch() -> Case:
  """Traced with shape ("b, 4"), run at b=3."""
  w = _rng(7).randn(4, 3).astype(F32)

  def f(x):
    y = jnp.concatenate([x, 2 * x]).reshape(-1, 2)
    return jnp.tanh(x @ w), y.sum(0) + x.shape[0]
  spec = jax.ShapeDtypeStruct(jax.export.symbolic_shape("b, 4"), jnp.float32)
  return Case(f, (_rng(8).randn(3, 4).astype(F32),), trace_args=(spec,))


# ----------------------------------------------------- jax.experimental
def scheduling_group() -> Case:
  """xla_metadata_call: JAX 0.10 stores its metadata as params of their
  own, 0.11+ as pairs; every release writes the vocabulary's pairs."""
  from jax.experimental import scheduling_groups  # pylint: disable=g-import-not-at-top

  def f(x):
    return scheduling_groups.scheduling_group(name="layer1")(
        lambda a: jnp.sin(a) * 2.0)(x) + 1.0
  return Case(f, (_rng(9).randn(8).astype(F32),))


def compute_on_host() -> Case:
  """compute_on (compute_on2 in JAX 0.10) with an output memory space."""
  from jax.experimental import compute_on as compute_on_api  # pylint: disable=g-import-not-at-top
  transform = getattr(compute_on_api, "compute_on2", compute_on_api.compute_on)

  def f(x):
    return transform(compute_type="device_host",
                     out_memory_spaces=jax.memory.Space.Device)(
                         lambda a: jnp.cos(a) * 3.0)(x) - 1.0
  return Case(f, (_rng(10).randn(8).astype(F32),))


# ------------------------------------------------------------- polyfills
def newer_primitives() -> Case:
  """Functions whose traces hold primitives newer releases added: log2
  (0.11+), one_minus_square (0.11+ differentiate tanh and asin with it)
  and polynomial (0.12's polyval); older readers rebuild them from their own
  primitives (jaxpr_io/compat/polyfills.py)."""
  coeffs = np.array([1.5, -2.0, 0.5, 3.0], F32)

  def f(x):
    inner = jax.grad(lambda v: (jnp.tanh(v) + jnp.arcsin(v / 4)).sum())(x)
    return jnp.log2(x + 2.0) * inner + jnp.polyval(coeffs, x)
  return Case(f, (np.linspace(-1.5, 1.5, 8, dtype=F32),))


_OTHERS: dict[str, Callable[[], Case]] = {
    "custom.nn": custom_nn,
    "custom.user_rules": custom_user,
    "remat.dots_saveable": remat_dots_saveable,
    "random.key_threefry": functools.partial(random_key, "threefry2x32"),
    "random.key_rbg": functools.partial(random_key, "rbg"),
    "sharding.named_jit": sharded_jit,
    "sharding.shard_map": shard_map_collectives,
    "symbolic.batch": symbolic_batch,
    "experimental.scheduling_group": scheduling_group,
    "experimental.compute_on": compute_on_host,
    "polyfill.newer_primitives": newer_primitives,
}


def enumerate_cases() -> Iterator[tuple[str, Callable[[], Case]]]:
  """Every case of this release, in a stable order: (name, builder).

  A builder raises SkipCase when JAX cannot trace the program on this
  release, and may raise anything else when the program cannot be built
  (which the writer records as a failure of that case)."""
  yield from _harness_builders()
  yield from _zoo_builders()
  yield from _program_builders()
  yield from _OTHERS.items()


def flat_inputs(case: Case) -> list[Any]:
  """The leaves of `(args, kwargs)`: the program's flat inputs."""
  return jax.tree_util.tree_leaves((case.args, case.kwargs))
