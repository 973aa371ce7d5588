"""One process of a 2-process JAX job on CPU (2 x 4 devices), for
tests/integrations/test_sharded_bind.py.

    python -m tests.integrations.sharded_bind_job ROLE PROCESS_ID PORT DIR

Weights sharded over all 8 devices of a global mesh (axis `model`) and two
programs of them: `served` (a `jit` whose `in_shardings` declare the
weights' shardings) and `plain` (no `jit`: it declares none). Then:

* ROLE `save`: an Orbax checkpoint, step 1 of DIR/ckpt, holds the weights
  (`state`, each process writing its shards) and `served`
  (`jaxpr_io.orbax.ProgramSave`); process 0 saves `plain` to
  DIR/plain.jaxpr. Every process records what the original functions
  compute (DIR/save-<PROCESS_ID>.npz).
* ROLE `load` (a fresh job): loads both programs, calls `served` exported
  with `jax.export` (`converters.to_exported`) on the global weights, and
  binds the weights on every process, four ways: `Program.bind` of the checkpoint (`served`:
  the shardings it declares), `ProgramRestore(bind={0: "state:params"})`,
  `Program.bind` of the checkpoint with shardings given as a mesh and
  PartitionSpecs (`plain`), and `Program.bind` of global arrays. For each
  it records the outputs and `grad` (DIR/load-<PROCESS_ID>.npz), checks the
  bound constants' shardings, and measures the bytes the process read
  while binding (DIR/load-<PROCESS_ID>.json, see `_measured`).

Prints "done" at the end.
"""

from __future__ import annotations

import json
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from tests.integrations import multiprocess_job

N_PROCESSES, DEVICES_PER_PROCESS = 2, 4
BATCH, FEATURES, HIDDEN = 8, 512, 2048
STEP = 1


def _start(process_id: int, port: int) -> jax.sharding.Mesh:
  return multiprocess_job.start(process_id, port, N_PROCESSES,
                                DEVICES_PER_PROCESS, "model")


SPECS = {"w1": P(None, "model"), "b": P("model"), "w2": P("model", None)}


def _numbers():
  """The weights and the batch, the same in every job (random, so that
  the checkpoint's compression saves next to nothing)."""
  rng = np.random.RandomState(0)
  params = {"w1": rng.randn(FEATURES, HIDDEN).astype(np.float32) * 0.05,
            "b": rng.randn(HIDDEN).astype(np.float32),
            "w2": rng.randn(HIDDEN, FEATURES).astype(np.float32) * 0.05}
  x = rng.randn(BATCH, FEATURES).astype(np.float32)
  return params, x


def _global(array: np.ndarray, sharding) -> jax.Array:
  return jax.make_array_from_callback(array.shape, sharding,
                                      lambda index: array[index])


def _inputs(mesh):
  params, x = _numbers()
  shardings = {k: NamedSharding(mesh, s) for k, s in SPECS.items()}
  return ({k: _global(v, shardings[k]) for k, v in params.items()},
          _global(x, NamedSharding(mesh, P())), shardings)


def _forward(params, x):
  h = jnp.tanh(x @ params["w1"] + params["b"])
  return h @ params["w2"]


def _functions(mesh, shardings):
  replicated = NamedSharding(mesh, P())
  served = jax.jit(_forward, in_shardings=(shardings, replicated),
                   out_shardings=replicated)
  return served, _forward


def _local(a) -> np.ndarray:
  # Replicated: every process holds the whole value.
  return np.asarray(a.addressable_data(0))


def _record(fn, x) -> dict[str, np.ndarray]:
  """What `fn` of the batch alone computes, and its gradient, called
  outside `jit`: JAX refuses to close a `jit` over an array with shards in
  other processes (`Closing over jax.Array that spans non-addressable
  devices is not allowed`), and a bound program's weights are what it
  closes over."""
  out = fn(x)
  grad = jax.grad(lambda x: jnp.sum(fn(x) ** 2))(x)
  return {"out": _local(out), "grad": _local(grad)}


def _manager(outdir: str):
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  import jaxpr_io.orbax  # pylint: disable=g-import-not-at-top,unused-import
  return ocp.CheckpointManager(os.path.join(outdir, "ckpt"))


def save(process_id: int, mesh, outdir: str) -> None:
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  import jaxpr_io.orbax  # pylint: disable=g-import-not-at-top
  params, x, shardings = _inputs(mesh)
  served, plain = _functions(mesh, shardings)
  prog = jaxpr_io.trace(served, params, x)
  with _manager(outdir) as mngr:
    mngr.save(STEP, args=ocp.args.Composite(
        state=ocp.args.StandardSave({"params": params}),
        program=jaxpr_io.orbax.ProgramSave(prog)))
    mngr.wait_until_finished()
  if process_id == 0:
    jaxpr_io.save(os.path.join(outdir, "plain.jaxpr"),
                  jaxpr_io.trace(plain, params, x))
  record = {f"served/{k}": v for k, v in
            _record(lambda x: served(params, x), x).items()}
  record.update({f"plain/{k}": v for k, v in
                 _record(lambda x: plain(params, x), x).items()})
  np.savez(os.path.join(outdir, f"save-{process_id}.npz"), **record)


def _rchar() -> int:
  with open("/proc/self/io") as f:
    for line in f:
      if line.startswith("rchar:"):
        return int(line.split()[1])
  raise SystemExit("/proc/self/io has no rchar")


def _tensorstore_bytes() -> int:
  import tensorstore as ts  # pylint: disable=g-import-not-at-top
  for metric in ts.experimental_collect_matching_metrics(
      "/tensorstore/kvstore/file/bytes_read"):
    return sum(v.get("value", 0) for v in metric["values"])
  return 0


def _measured(bind):
  """`bind()` run twice, and the bytes this process read during the
  second run: `rchar` of /proc/self/io (every byte that read() and
  pread() returned to the process, page cache included, the checkpoint's
  metadata and the program file too) and TensorStore's own count of the
  bytes its file driver read. The first run imports what the restore
  imports lazily (megabytes of Python), which is no read of the
  checkpoint; Orbax and TensorStore keep no cache between restores, so
  the second run reads the checkpoint again in full."""
  bind()
  rchar, ts_bytes = _rchar(), _tensorstore_bytes()
  bound = bind()
  return bound, {"rchar": _rchar() - rchar,
                 "tensorstore": _tensorstore_bytes() - ts_bytes}


def own_bytes(arrays) -> int:
  """The bytes of the distinct shards this process's devices hold."""
  total = 0
  for a in arrays:
    seen = set()
    for shard in a.addressable_shards:
      key = tuple((s.start, s.stop) for s in shard.index)
      if key not in seen:
        seen.add(key)
        total += shard.data.nbytes
  return total


def _check_consts(bound, shardings, where: str) -> list:
  """The bound program's constants, checked to be jax.Arrays with the
  expected shardings (in the order of `shardings`' keys, sorted)."""
  consts = list(bound.closed_jaxpr.consts)
  expected = [shardings[k] for k in sorted(shardings)]
  if len(consts) != len(expected):
    raise SystemExit(f"{where}: {len(consts)} constants, expected "
                     f"{len(expected)}")
  for i, (c, s) in enumerate(zip(consts, expected)):
    if not isinstance(c, jax.Array) or c.is_fully_addressable:
      raise SystemExit(f"{where}: constant {i} is {type(c).__name__}, not "
                       "a global jax.Array")
    if not c.sharding.is_equivalent_to(s, c.ndim):
      raise SystemExit(f"{where}: constant {i} is sharded as {c.sharding}, "
                       f"expected {s}")
  return consts


def _expect_dumps_refused(bound, where: str) -> str:
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  try:
    jaxpr_io.dumps(bound)
  except jaxpr_io.UnsupportedError as e:
    if "\n" in str(e) or "Orbax" not in str(e):
      raise SystemExit(f"{where}: dumps' message is not one line naming "
                       f"what to do: {e}") from None
    return str(e)
  raise SystemExit(f"{where}: dumps of a program bound to global arrays "
                   "was not refused")


def load(process_id: int, mesh, outdir: str) -> None:
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  import jaxpr_io.orbax  # pylint: disable=g-import-not-at-top
  from jaxpr_io import converters  # pylint: disable=g-import-not-at-top
  from jaxpr_io.api import bind_sources  # pylint: disable=g-import-not-at-top
  params, x, shardings = _inputs(mesh)
  step_dir = os.path.join(outdir, "ckpt", str(STEP))
  served = jaxpr_io.load(os.path.join(step_dir, "program", "program.jaxpr"),
                         check=True)
  plain = jaxpr_io.load(os.path.join(outdir, "plain.jaxpr"), check=True)
  source = os.path.join(step_dir, "state") + ":params"
  record, reads = {}, {}

  def restore():
    with _manager(outdir) as mngr:
      return mngr.restore(STEP, args=ocp.args.Composite(
          program=jaxpr_io.orbax.ProgramRestore(
              bind={0: "state:params"}))).program

  ways = {
      "bind_source": lambda: served.bind(bind_sources.load_source(source)),
      "program_restore": restore,
      "bind_given": lambda: plain.bind(bind_sources.load_source(
          source, mesh=mesh, shardings=dict(SPECS))),
  }
  for way, bind in ways.items():
    bound, reads[way] = _measured(bind)
    consts = _check_consts(bound, shardings, way)
    reads[way]["own"] = own_bytes(consts)
    reads[way]["global"] = sum(c.nbytes for c in consts)
    record.update({f"{way}/{k}": v for k, v in _record(bound, x).items()})
    _expect_dumps_refused(bound, way)
  bound = served.bind(params)
  consts = _check_consts(bound, shardings, "bind_arrays")
  if any(c is not params[k] for c, k in zip(consts, sorted(params))):
    raise SystemExit("bind_arrays: the bound constants are not the arrays "
                     "given")
  record.update({f"bind_arrays/{k}": v for k, v in _record(bound, x).items()})
  reads["dumps_refused"] = _expect_dumps_refused(bound, "bind_arrays")
  # Served with jax.export on the mesh: exported unbound (a bound weight
  # with shards elsewhere cannot be baked in), the weights passed in.
  try:
    converters.to_exported(bound)
    raise SystemExit("to_exported of a program bound to global arrays was "
                     "not refused")
  except jaxpr_io.UnsupportedError as e:
    reads["export_refused"] = str(e)
  exported = converters.to_exported(served)
  record.update({f"exported/{k}": v for k, v in _record(
      lambda x: exported.call(params, x), x).items()})
  np.savez(os.path.join(outdir, f"load-{process_id}.npz"), **record)
  with open(os.path.join(outdir, f"load-{process_id}.json"), "w") as f:
    json.dump(reads, f)


def main(argv: list[str]) -> int:
  role, process_id, port, outdir = argv
  process_id, port = int(process_id), int(port)
  mesh = _start(process_id, port)
  if role == "save":
    save(process_id, mesh, outdir)
  elif role == "load":
    load(process_id, mesh, outdir)
  else:
    raise SystemExit(f"unknown role {role!r}")
  # Every process leaves together (the coordinator, process 0, last).
  jax.distributed.shutdown()
  print("done", flush=True)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
