"""One process of a 2-process JAX job on CPU, for tests/integrations/test_multiprocess.py.

    python -m tests.integrations.multiprocess_job ROLE PROCESS_ID PORT DIR

Joins a job of 2 processes (`jax.distributed`, coordinator on
127.0.0.1:PORT, gloo collectives), each with 2 CPU devices (XLA_FLAGS set
by the caller), and makes a global mesh over the 4 devices. The inputs of a
sharded train step (data split over the mesh, weights replicated) are the
same numbers in every job. Then:

* ROLE `trace`: traces the train step; process 0 saves it to DIR/step.jaxpr.
  Every process records what the original function computes.
* ROLE `load`: loads DIR/step.jaxpr (check=True) and records what the loaded
  program computes.

What is recorded, in DIR/<ROLE>-<PROCESS_ID>.npz: `jit` of the step (new
weights and loss) and `grad` of its loss with respect to the weights, each
process's own copy of the replicated results. Prints "done" at the end.
"""

from __future__ import annotations

import functools
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

N_PROCESSES = 2
DEVICES_PER_PROCESS = 2
BATCH, FEATURES, HIDDEN = 16, 8, 4


def start(process_id: int, port: int, n_processes: int,
          devices_per_process: int, axis: str) -> jax.sharding.Mesh:
  """Joins the job as `process_id` (coordinator on `port`), checks the
  devices XLA_FLAGS gave, and returns a mesh of one Auto axis `axis` over
  every process's devices."""
  # Gloo is JAX's default for CPU collectives in 0.10 to 0.12; said
  # explicitly, since without it a cross-process program cannot run.
  jax.config.update("jax_cpu_collectives_implementation", "gloo")
  jax.distributed.initialize(coordinator_address=f"127.0.0.1:{port}",
                             num_processes=n_processes,
                             process_id=process_id,
                             initialization_timeout=60)
  n = n_processes * devices_per_process
  if jax.device_count() != n or jax.local_device_count() != (
      devices_per_process):
    raise SystemExit(f"expected {n} devices, {devices_per_process} local; "
                     f"got {jax.device_count()}, {jax.local_device_count()}"
                     " (XLA_FLAGS?)")
  # Auto axes (GSPMD), as most train steps are written: the step places
  # its values with in/out shardings and sharding constraints.
  return jax.make_mesh((n,), (axis,), devices=jax.devices(),
                       axis_types=(jax.sharding.AxisType.Auto,))


def _start(process_id: int, port: int) -> jax.sharding.Mesh:
  return start(process_id, port, N_PROCESSES, DEVICES_PER_PROCESS, "data")


def _global(array: np.ndarray, sharding) -> jax.Array:
  """The global array of `array`, each process holding its shards."""
  return jax.make_array_from_callback(array.shape, sharding,
                                      lambda index: array[index])


def _inputs(mesh):
  rng = np.random.RandomState(0)
  w = rng.randn(FEATURES, HIDDEN).astype(np.float32)
  x = rng.randn(BATCH, FEATURES).astype(np.float32)
  y = rng.randn(BATCH, HIDDEN).astype(np.float32)
  rows = NamedSharding(mesh, P("data"))
  replicated = NamedSharding(mesh, P())
  return (_global(w, replicated), _global(x, rows), _global(y, rows)), (
      replicated, rows)


def _train_step(mesh):
  replicated = NamedSharding(mesh, P())
  rows = NamedSharding(mesh, P("data"))

  def loss(w, x, y):
    pred = jnp.tanh(x @ w)
    return jnp.mean((pred - y) ** 2)

  @functools.partial(jax.jit, in_shardings=(replicated, rows, rows),
                     out_shardings=(replicated, replicated))
  def step(w, x, y):
    x = jax.lax.with_sharding_constraint(x, rows)
    value, grad = jax.value_and_grad(loss)(w, x, y)
    new_w = jax.lax.with_sharding_constraint(w - 0.1 * grad, replicated)
    return new_w, value
  return step


def _local(a: jax.Array) -> np.ndarray:
  # Replicated: every process holds the whole value.
  return np.asarray(a.addressable_data(0))


def _record(fn, args) -> dict[str, np.ndarray]:
  new_w, value = jax.jit(fn)(*args)
  grad = jax.jit(jax.grad(lambda w, x, y: fn(w, x, y)[1]))(*args)
  return {"new_w": _local(new_w), "loss": _local(value),
          "grad": _local(grad)}


def main(argv: list[str]) -> int:
  role, process_id, port, outdir = argv
  process_id, port = int(process_id), int(port)
  mesh = _start(process_id, port)
  args, _ = _inputs(mesh)
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  path = os.path.join(outdir, "step.jaxpr")
  if role == "trace":
    step = _train_step(mesh)
    if process_id == 0:
      jaxpr_io.save(path, jaxpr_io.trace(step, *args))
    fn = step
  elif role == "load":
    fn = jaxpr_io.load(path, check=True)
  else:
    raise SystemExit(f"unknown role {role!r}")
  np.savez(os.path.join(outdir, f"{role}-{process_id}.npz"),
           **_record(fn, args))
  # Every process leaves together (the coordinator, process 0, last).
  jax.distributed.shutdown()
  print("done", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
