"""How `dumps`, `loads` and `check=True` scale, from 1k to 1M equations.

Three shapes (tests/support/scale_programs.py): an unrolled chain of
elementwise equations, an unrolled LLaMA-shaped transformer (each layer
its own weights) and nested `jit > scan > cond > scan > jit` blocks (each
block its own sub-jaxprs). For each shape and size, in a fresh process
(so that its peak RSS is its own), the script reports:

* the CPU time (`time.process_time`, median of the runs) of `dumps`,
  `loads` and `loads(check=True)` without lowering and compiling (the last
  step of `check=True`, which is XLA's and not jaxpr_io's, is stubbed out);
* the file size and the peak RSS growth of `loads` (`/proc/self/clear_refs`);
* `loads` against its floor: the CPU time of building the same objects
  directly, with no decoding (benchmarks/bench_format.py `construct`: the
  avals, name stacks and `SourceInfo`s, every `Var`, `Literal`,
  `JaxprEqn`, `Jaxpr` and `ClosedJaxpr`, each params dict with its tuples
  and records, the signature treedefs, through the constructors the reader
  uses, from plain Python data prepared in advance), both with the cyclic
  collector paused, as `loads` pauses it;
* `loads` against `jax.export.deserialize` of the same program's
  `jax.export` artifact plus parsing its StableHLO module (up to 100k
  equations: lowering a million takes JAX many minutes);
* whether the default (untrusted) `loads` accepted the file;

then, per shape, the log-log slope of each quantity over the sizes (least
squares). Targets (issue 40): every slope <= 1.1, nested loads <= 1.5x its
floor, every file accepted.

Run from the repository root::

    python benchmarks/bench_scale.py [--quick] [--shapes chain,nested] [--full]

`--quick`: sizes up to 10k. By default the chain runs to 1M equations and
the other shapes to 100k; `--full` runs all three to 1M (the nested shape
at 1M needs several GiB and many minutes).
"""

import argparse
import gc
import json
import math
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

SIZES = (1_000, 10_000, 100_000, 1_000_000)
EXPORT_LIMIT = 100_000


def _cpu(fn, runs: int) -> float:
  """Median CPU seconds of `runs` calls of `fn`, a collection between
  runs (untimed)."""
  times = []
  for _ in range(runs):
    gc.collect()
    start = time.process_time()
    fn()
    times.append(time.process_time() - start)
  return statistics.median(times)


def _rss(field: str) -> int:
  with open("/proc/self/status") as f:
    for line in f:
      if line.startswith(field + ":"):
        return int(line.split()[1]) * 1024
  raise RuntimeError(f"no {field}")


class _NoCompile:
  """`jax` for jaxpr_io/api/program.py's `check=True`, its `jax.jit(...)
  .lower(...).compile()` step a no-op: XLA's compile is not jaxpr_io's."""

  def __init__(self, jax):
    self._jax = jax

  def __getattr__(self, name):
    return getattr(self._jax, name)

  def jit(self, *args, **kwargs):
    del args, kwargs
    return self

  def lower(self, *args, **kwargs):
    del args, kwargs
    return self

  def compile(self):
    return None


def _export_floor(closed, runs: int) -> float:
  """CPU time of `jax.export.deserialize` of the program's artifact plus
  parsing its StableHLO module."""
  import jax  # lazy: in the child only
  from jax._src.interpreters import mlir
  from jax._src.lib.mlir import ir
  from jaxpr_io import compat
  fun = compat.jaxpr_as_fun(closed)
  args = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]
  blob = jax.export.export(jax.jit(fun))(*args).serialize()

  def read():
    exported = jax.export.deserialize(blob)
    with mlir.make_ir_context() as context:
      ir.Module.parse(exported.mlir_module_serialized, context=context)
  return _cpu(read, runs)


def measure(shape: str, n: int) -> dict:
  """The figures of one shape and size (run in a child process)."""
  import jax  # lazy: in the child only
  import jaxpr_io
  from jaxpr_io.api import program as program_module
  from jaxpr_io.errors import FormatError
  import bench_format
  from tests.support import scale_programs
  runs = 5 if n <= 10_000 else 3 if n <= 100_000 else 1
  jaxpr_io.loads(jaxpr_io.dumps(scale_programs.build(shape, 100)))  # warm
  closed = scale_programs.build(shape, n)
  out = {"shape": shape, "equations": scale_programs.count_equations(
      closed.jaxpr)}
  out["dumps_s"] = _cpu(lambda: jaxpr_io.dumps(closed), runs)
  data = jaxpr_io.dumps(closed)
  out["bytes"] = len(data)
  gc.collect()
  with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
  base = _rss("VmRSS")
  try:
    loaded = jaxpr_io.loads(data)
    out["accepted"] = True
  except FormatError as e:
    out["accepted"] = False
    out["refusal"] = str(e)[:200]
    loaded = jaxpr_io.loads(data, trusted=True)
  out["loads_peak_rss"] = _rss("VmHWM") - base
  del loaded
  gc.collect()
  was_enabled = gc.isenabled()
  out["loads_s"] = _cpu(lambda: jaxpr_io.loads(data, trusted=True), runs)
  plan = bench_format.construction_plan(data)
  gc.disable()
  try:
    out["floor_s"] = _cpu(lambda: bench_format.construct(plan), runs)
  finally:
    if was_enabled:
      gc.enable()
  del plan
  program_module.jax = _NoCompile(jax)
  try:
    out["check_s"] = _cpu(lambda: jaxpr_io.loads(data, check=True,
                                                 trusted=True), runs)
  finally:
    program_module.jax = jax
  if n <= EXPORT_LIMIT:
    out["export_s"] = _export_floor(closed, runs)
  return out


LLAMA_7B = {"layers": 32, "d_model": 4096, "heads": 32, "ffn": 11008,
            "vocab": 32000, "seq": 2048}


def _llama_layer(x, p, heads):
  """A LLaMA decoder layer: RMSNorm, causal attention, SwiGLU MLP."""
  import jax  # lazy: in the child only
  import jax.numpy as jnp

  def norm(x, w):
    return x * jax.lax.rsqrt(jnp.mean(x * x, -1, keepdims=True) + 1e-6) * w
  seq, d = x.shape
  h = norm(x, p["n1"])
  q, k, v = (jnp.reshape(h @ p[w], (seq, heads, d // heads))
             for w in ("wq", "wk", "wv"))
  s = jnp.einsum("qhd,khd->hqk", q, k) / jnp.sqrt(d / heads)
  s = jnp.where(jnp.tril(jnp.ones((seq, seq), bool)), s, -1e9)
  a = jnp.einsum("hqk,khd->qhd", jax.nn.softmax(s, -1), v)
  x = x + jnp.reshape(a, (seq, d)) @ p["wo"]
  h = norm(x, p["n2"])
  return x + (jax.nn.silu(h @ p["w1"]) * (h @ p["w3"])) @ p["w2"]


def llama(scan: bool):
  """(figures) of a LLaMA-7B-shaped program traced on ShapeDtypeStructs,
  its layers unrolled or stacked under `lax.scan`."""
  import jax  # lazy: in the child only
  import jax.numpy as jnp
  import jaxpr_io
  from tests.support import scale_programs
  c = LLAMA_7B
  d, f, n = c["d_model"], c["ffn"], c["layers"]
  shapes = {"wq": (d, d), "wk": (d, d), "wv": (d, d), "wo": (d, d),
            "w1": (d, f), "w3": (d, f), "w2": (f, d), "n1": (d,), "n2": (d,)}
  layer = {k: jax.ShapeDtypeStruct(v, jnp.bfloat16) for k, v in
           shapes.items()}
  stacked = {k: jax.ShapeDtypeStruct((n, *v), jnp.bfloat16) for k, v in
             shapes.items()}
  params = {"embed": jax.ShapeDtypeStruct((c["vocab"], d), jnp.bfloat16),
            "layers": stacked if scan else [layer] * n}
  tokens = jax.ShapeDtypeStruct((c["seq"],), jnp.int32)

  def model(params, tokens):
    x = params["embed"][tokens]
    if scan:
      x, _ = jax.lax.scan(lambda x, p: (_llama_layer(x, p, c["heads"]), None),
                          x, params["layers"])
    else:
      for p in params["layers"]:
        x = _llama_layer(x, p, c["heads"])
    return x @ params["embed"].T

  start = time.process_time()
  prog = jaxpr_io.trace(model, params, tokens)
  trace_s = time.process_time() - start
  data = jaxpr_io.dumps(prog)
  return {"layers": "scan" if scan else "unrolled",
          "equations": scale_programs.count_equations(
              prog.closed_jaxpr.jaxpr),
          "bytes": len(data), "trace_s": trace_s,
          "dumps_s": _cpu(lambda: jaxpr_io.dumps(prog), 5),
          "loads_s": _cpu(lambda: jaxpr_io.loads(data), 5)}


def report_llama(rows: list[dict]) -> None:
  c = LLAMA_7B
  print(f"== LLaMA-7B-shaped ({c['layers']} layers, d_model {c['d_model']}, "
        f"ffn {c['ffn']}, vocab {c['vocab']}, seq {c['seq']}, bfloat16 "
        "ShapeDtypeStructs) ==")
  print(f"{'layers':<10}{'equations':>10}{'bytes':>10}{'trace ms':>10}"
        f"{'dumps ms':>10}{'loads ms':>10}")
  for r in rows:
    print(f"{r['layers']:<10}{r['equations']:10,}{r['bytes']:10,}"
          f"{r['trace_s'] * 1e3:10.1f}{r['dumps_s'] * 1e3:10.1f}"
          f"{r['loads_s'] * 1e3:10.1f}")
  print(flush=True)


def _slope(xs, ys) -> float:
  lx, ly = [math.log(x) for x in xs], [math.log(max(y, 1e-9)) for y in ys]
  mx, my = statistics.mean(lx), statistics.mean(ly)
  return (sum((a - mx) * (b - my) for a, b in zip(lx, ly))
          / sum((a - mx) ** 2 for a in lx))


def report(shape: str, rows: list[dict]) -> None:
  print(f"== {shape} ==")
  print(f"{'equations':>10}{'bytes':>13}{'dumps ms':>11}{'loads ms':>11}"
        f"{'check ms':>11}{'floor ms':>11}{'loads/floor':>12}"
        f"{'export ms':>11}{'loads/exp':>10}{'RSS MiB':>9}  accepted")
  for r in rows:
    export = (f"{r['export_s'] * 1e3:11.1f}{r['loads_s'] / r['export_s']:10.2f}"
              if "export_s" in r else f"{'-':>11}{'-':>10}")
    print(f"{r['equations']:10,}{r['bytes']:13,}{r['dumps_s'] * 1e3:11.1f}"
          f"{r['loads_s'] * 1e3:11.1f}{r['check_s'] * 1e3:11.1f}"
          f"{r['floor_s'] * 1e3:11.1f}{r['loads_s'] / r['floor_s']:12.2f}"
          f"{export}{r['loads_peak_rss'] / 2**20:9.1f}  "
          f"{'yes' if r['accepted'] else 'NO: ' + r['refusal']}")
  if len(rows) > 1:
    xs = [r["equations"] for r in rows]
    slopes = {k: _slope(xs, [r[k] for r in rows]) for k in (
        "dumps_s", "loads_s", "check_s", "bytes")}
    # RSS under a MiB is the allocator's reuse of freed memory, not the
    # file's: the slope is over the sizes above it.
    big = [r for r in rows if r["loads_peak_rss"] >= 2**20]
    if len(big) > 1:
      slopes["loads_peak_rss"] = _slope([r["equations"] for r in big],
                                        [r["loads_peak_rss"] for r in big])
    print("log-log slopes: " + ", ".join(
        f"{k.removesuffix('_s')} {v:.2f}" for k, v in slopes.items())
          + f"; all <= 1.1: {'yes' if max(slopes.values()) <= 1.1 else 'NO'}")
  print(flush=True)


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--quick", action="store_true", help="sizes to 10k")
  parser.add_argument("--full", action="store_true",
                      help="every shape to 1M equations")
  parser.add_argument("--shapes", default="chain,transformer,nested")
  parser.add_argument("--llama", action="store_true",
                      help="only the LLaMA-7B-shaped scan vs unrolled figures")
  parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    shape, n = args.child
    result = (llama(n == "scan") if shape == "llama"
              else measure(shape, int(n)))
    print("RESULT " + json.dumps(result))
    return
  import jax  # lazy: the parent only prints the release
  print(f"python {sys.version.split()[0]}, jax {jax.__version__}; CPU "
        f"times, {os.cpu_count()} cores\n")
  if args.llama:
    report_llama([_child("llama", kind) for kind in ("unrolled", "scan")])
    return
  for shape in args.shapes.split(","):
    top = 10_000 if args.quick else (
        1_000_000 if shape == "chain" or args.full else 100_000)
    report(shape, [_child(shape, str(n)) for n in SIZES if n <= top])


def _child(*argv: str) -> dict:
  """The RESULT of this script run with `--child *argv` in a fresh
  process."""
  child = subprocess.run([sys.executable, __file__, "--child", *argv],
                         cwd=ROOT, capture_output=True, text=True,
                         check=False)
  lines = [l for l in child.stdout.splitlines() if l.startswith("RESULT ")]
  if child.returncode or not lines:
    sys.exit(f"{' '.join(argv)}: {child.stderr[-2000:]}")
  return json.loads(lines[-1][len("RESULT "):])


if __name__ == "__main__":
  main()
