"""The same program writes the same bytes every time (issue 37): twice in
one process, after the original has been differentiated, jitted or run,
and in another process. Writing leaves no state behind that a later write,
or JAX's own differentiation of the original, would read: JAX memoizes the
rule thunks of custom_jvp and custom_vjp equations, and a custom_vjp's
backward rule reads what the forward rule's last fresh trace stored
(jaxpr_io/compat/custom_rules.py, `isolated_rules`).

The reference is the first write's bytes, and the original program's
results for the loaded file.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from tests.support.groups import grouped
from tests.support.roundtrip import assert_bit_identical, scalar
from tests.support.zoo import ZOO as ZOO1
from tests.support.zoo2 import REFUSED, ZOO2

ZOO = {**ZOO1, **ZOO2}


def _written(build):
  fn, args, kwargs = build()
  prog = jaxpr_io.trace(fn, *args, **kwargs)
  return prog, args, kwargs, jaxpr_io.dumps(prog)


def _run_original(prog, args, kwargs):
  """The call, and `jit` of `jax.grad` of the summed outputs with respect
  to the first argument (where the program is not differentiable, `jit` of
  the call): what users do with the original before saving it. Returns
  the gradient, or None."""
  loss = lambda a0, *rest: scalar(prog(a0, *rest, **kwargs))
  jax.block_until_ready(prog(*args, **kwargs))
  try:
    return jax.block_until_ready(jax.jit(jax.grad(loss))(*args))
  except Exception:  # pylint: disable=broad-except
    # Not differentiable (integer outputs, a refusing rule): jit it.
    jax.block_until_ready(jax.jit(lambda *a: prog(*a, **kwargs))(*args))
    return None


@pytest.fixture(scope="module", params=grouped(sorted(ZOO), "zoo"))
def zoo_written(request):
  name = request.param
  if name in REFUSED and REFUSED[name][0]:
    pytest.skip(f"{name}: refused on this JAX release (test_zoo.py)")
  return _written(ZOO[name])


def test_zoo_dumps_twice(zoo_written):
  prog, _, _, first = zoo_written
  assert jaxpr_io.dumps(prog) == first


def test_zoo_dumps_after_running_the_original(zoo_written):
  prog, args, kwargs, first = zoo_written
  before = _run_original(prog, args, kwargs)
  assert jaxpr_io.dumps(prog) == first
  # The write left nothing that changes JAX's own use of the original.
  after = _run_original(prog, args, kwargs)
  assert (after is None) == (before is None)
  if before is not None:
    assert_bit_identical(after, before)


def _diffrax_checkpointed():
  """The issue's program: an ODE solve with
  `RecursiveCheckpointAdjoint(checkpoints=16)`, an adaptive PIDController
  and `SaveAt(ts=...)`. Its checkpointed while loop's custom_vjp holds, in
  its forward rule, Equinox custom_vjps whose forward rules JAX reaches
  through thunks of thunks (`lift_fwd`): a second write read what the
  first left in their memos."""
  dfx = pytest.importorskip("diffrax")
  term = dfx.ODETerm(lambda t, y, k: -k * y + jnp.sin(t) * 0.5)

  def f(y0, k):
    sol = dfx.diffeqsolve(
        term, dfx.Tsit5(), 0.0, 1.0, 0.1, y0, args=k,
        stepsize_controller=dfx.PIDController(rtol=1e-4, atol=1e-6),
        saveat=dfx.SaveAt(ts=jnp.linspace(0.0, 1.0, 5)), max_steps=64,
        adjoint=dfx.RecursiveCheckpointAdjoint(checkpoints=16))
    return sol.ys
  return f, (np.array([1.0, -0.5, 0.25], np.float32), np.float32(0.7)), {}


@pytest.mark.xdist_group("deterministic:diffrax")
def test_diffrax_checkpointed_solve_writes_the_same_bytes_twice():
  prog, args, _, first = _written(_diffrax_checkpointed)
  assert jaxpr_io.dumps(prog) == first
  loaded = jaxpr_io.loads(first, check=True)
  assert_bit_identical(jax.jit(loaded)(*args), jax.jit(prog)(*args))
  grad = lambda p: jax.jit(jax.grad(lambda y0, k: p(y0, k).sum()))
  assert_bit_identical(grad(loaded)(*args), grad(prog)(*args))
  # After JAX differentiated the original, and the loaded file.
  assert jaxpr_io.dumps(prog) == first


# Programs written in fresh processes: one with Equinox and Optimistix
# custom rules, one with a Flax model, one with sparse matrices.
FRESH_SAMPLE = ("optimistix_newton", "nnx", "bcoo_matmul", "ode")

WRITE = textwrap.dedent("""
    import sys
    import jaxpr_io
    from tests.support.zoo import ZOO as ZOO1
    from tests.support.zoo2 import ZOO2
    zoo = {**ZOO1, **ZOO2}
    for name in sys.argv[2:]:
      fn, args, kwargs = zoo[name]()
      with open(f"{sys.argv[1]}/{name}.jaxpr", "wb") as f:
        f.write(jaxpr_io.dumps(jaxpr_io.trace(fn, *args, **kwargs)))
""")


@pytest.mark.xdist_group("deterministic:fresh")
def test_fresh_processes_write_the_same_bytes(tmp_path):
  names = [n for n in FRESH_SAMPLE if not (n in REFUSED and REFUSED[n][0])]
  root = os.path.dirname(os.path.dirname(os.path.dirname(
      os.path.abspath(__file__))))
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8",
             PYTHONPATH=os.pathsep.join(
                 [root] + [p for p in os.environ.get(
                     "PYTHONPATH", "").split(os.pathsep) if p]),
             PYTHONHASHSEED="random")
  for run in ("a", "b"):
    (tmp_path / run).mkdir()
    subprocess.run([sys.executable, "-c", WRITE, str(tmp_path / run), *names],
                   check=True, env=env, timeout=600, cwd=root)
  for name in names:
    here = _written(ZOO[name])[3]
    assert (tmp_path / "a" / f"{name}.jaxpr").read_bytes() == here, name
    assert (tmp_path / "b" / f"{name}.jaxpr").read_bytes() == here, name
