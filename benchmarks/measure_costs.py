"""What the objects of a load cost in memory: the measurements behind the
charges of jaxpr_io/safety/costs.py (docs/trust-model.md, "## Cost model").

Two measurements, each in a fresh process:

1. ``objects``: the bytes that each JAX object a load builds keeps alive,
   built the way the reader builds it (through jaxpr_io.compat's
   constructors), 100,000 of each, measured with ``tracemalloc``
   (retained, after a collection): an equation (``JaxprEqn`` with its
   input and output lists), a variable (``Var`` with its slots in the
   environment and its equation's list), an input reference (a list
   slot), an aval (``ShapedArray`` of a 1-d shape), a sub-jaxpr
   (``Jaxpr``, ``ClosedJaxpr``, ``DebugInfo`` and their lists, with the
   param set of the equation that holds it), and a pytree node (JAX's
   ``PyTreeDef`` keeps its nodes in C++, which tracemalloc does not see:
   measured by the growth of the resident set).
2. ``loads``: ``jaxpr_io.loads`` of the three shapes of
   tests/support/scale_programs.py at ``--equations``, the growth of the
   peak resident set (``/proc/self/clear_refs``) and ``tracemalloc``'s
   peak, per stored equation, against the floor that
   jaxpr_io/safety/costs.py charges for the file (``stored_cost``): the
   charge must cover the peak, transient objects of the reader included.

Run from the repository root, under each supported release::

    python benchmarks/measure_costs.py [--equations 100000] [--only objects|loads]
"""

import argparse
import gc
import os
import subprocess
import sys
import tracemalloc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

N = 100_000


def _retained(build) -> float:
  """Bytes per object that `build(N)` keeps alive (tracemalloc)."""
  gc.collect()
  tracemalloc.start()
  kept = build(N)
  gc.collect()
  size = tracemalloc.get_traced_memory()[0]
  tracemalloc.stop()
  del kept
  return size / N


def _status_bytes(field: str) -> int:
  """A /proc/self/status memory field (VmRSS, VmHWM), in bytes."""
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise RuntimeError(f"no {field}")


def measure_objects() -> dict[str, float]:
  """Retained bytes of each object of a load, built as the reader does."""
  import jax  # lazy: measured in a child process after its own imports
  import jax.numpy as jnp
  from jax import lax
  from jaxpr_io import compat
  aval = compat.ShapedArray((8,), jnp.float32)
  closed = jax.make_jaxpr(lambda x: jax.jit(lambda y: -y)(x))(
      jnp.zeros(8, jnp.float32))
  (jit_eqn,) = closed.jaxpr.eqns
  prim, params, src, ctx = (jit_eqn.primitive, jit_eqn.params,
                            jit_eqn.source_info, jit_eqn.ctx)
  neg = lax.neg_p
  inner = params["jaxpr"].jaxpr
  var = compat.Var(aval)

  def equations(n):
    return [compat.JaxprEqn([var], [var], neg, {}, compat.no_effects, src,
                            ctx) for _ in range(n)]

  def variables(n):
    env = [compat.Var(aval) for _ in range(n)]
    return env, list(env)  # the environment and the equations' lists

  def references(n):
    return [var] * n

  def avals(n):
    return [compat.ShapedArray((i,), jnp.float32) for i in range(n)]

  def sub_jaxprs(n):
    out = []
    for _ in range(n):
      j = compat.new_jaxpr([], [var], [var], [], compat.no_effects,
                           compat.DebugInfo("jit", "f", None, None),
                           False)
      out.append((compat.make_closed(j, []), dict(params, jaxpr=None)))
    return out

  del inner
  costs = {name: _retained(fn) for name, fn in (
      ("equation", equations), ("variable", variables),
      ("input reference", references), ("aval", avals),
      ("sub-jaxpr", sub_jaxprs))}
  gc.collect()
  before = _status_bytes("VmRSS")
  # Large enough that the allocator takes fresh pages for it.
  tree = jax.tree_util.tree_structure([(0, None)] * (30 * N))
  costs["pytree node (RSS)"] = ((_status_bytes("VmRSS") - before)
                                / tree.num_nodes)
  return costs


def measure_loads(shape: str, n: int) -> dict[str, float]:
  """Peak growth of `loads` of `shape` at `n` equations, per equation,
  beside the floor charged for the file."""
  import jaxpr_io  # lazy: as above
  from jaxpr_io.format import container
  from jaxpr_io.read import reader
  from jaxpr_io.safety import costs
  from tests.support import scale_programs
  closed = scale_programs.build(shape, n)
  stored = scale_programs.count_equations(closed.jaxpr)
  data = jaxpr_io.dumps(closed)
  del closed
  msg = reader.parse_program(container.Container(data).program, "x")
  program_bytes = len(container.Container(data).program)
  floor = costs.stored_cost(costs.stored_counts(msg, program_bytes))
  del msg
  # Families, JAX's tables, caches: not the file's. A small file of the
  # same shape, so that the allocator has no freed memory of this size.
  jaxpr_io.loads(jaxpr_io.dumps(scale_programs.build(shape, 100)))
  gc.collect()
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # resets VmHWM
  base = _status_bytes("VmRSS")
  prog = jaxpr_io.loads(data)
  peak = _status_bytes("VmHWM") - base
  del prog
  gc.collect()
  tracemalloc.start()
  prog = jaxpr_io.loads(data)
  traced = tracemalloc.get_traced_memory()[1]
  tracemalloc.stop()
  return {"equations": stored, "file bytes": len(data),
          "peak RSS growth / eq": peak / stored,
          "tracemalloc peak / eq": traced / stored,
          "charged floor / eq": floor / stored,
          "peak / file": peak / len(data),
          "charged / peak": floor / max(peak, traced)}


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--equations", type=int, default=100_000)
  parser.add_argument("--only", choices=("objects", "loads"))
  parser.add_argument("--child", nargs="*", help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child is not None:
    what = args.child[0]
    result = (measure_objects() if what == "objects"
              else measure_loads(what, int(args.child[1])))
    for key, value in result.items():
      print(f"  {key:<24}{value:12,.1f}")
    return
  import jax  # lazy: the parent only prints the release
  print(f"python {sys.version.split()[0]}, jax {jax.__version__}")
  runs = []
  if args.only in (None, "objects"):
    runs.append(("objects retained (bytes each)", ["objects"]))
  if args.only in (None, "loads"):
    runs += [(f"loads of the {s} shape", [s, str(args.equations)])
             for s in ("chain", "transformer", "nested")]
  for title, child in runs:
    print(title)
    out = subprocess.run([sys.executable, __file__, "--child", *child],
                         capture_output=True, text=True, cwd=ROOT,
                         check=False)
    print(out.stdout, end="")
    if out.returncode:
      sys.exit(out.stderr)


if __name__ == "__main__":
  main()
