"""One saved program in every serving runtime: the 48-layer transformer of
bench_format.py (weights bound, so the artifacts take the tokens alone) as
a `.jaxpr` file, converted to StableHLO (`jax.export`), a TensorFlow
SavedModel, an ONNX model and a LiteRT flatbuffer, each then loaded and run
in its own runtime on the CPU.

For each runtime it prints the time to load the artifact, the first
inference (compilation or planning included) and the steady-state latency
(median of --repeats calls), each also as a ratio to `jax.jit` of the
loaded `.jaxpr` program (load: `jaxpr_io.load`; first call: tracing and
XLA compilation), and the conversion time and artifact size. Every
runtime's output is checked against JAX's (atol 1e-4 + rtol 1e-4).

    python benchmarks/bench_runtimes.py [--layers 48] [--repeats 20] [--runtimes jax,stablehlo,savedmodel,onnx,litert]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)

import jaxpr_io  # noqa: E402
from jaxpr_io import converters  # noqa: E402
from jaxpr_io.converters import verify  # noqa: E402
import bench_format  # noqa: E402  (the transformer)

RUNTIMES = ("jax", "stablehlo", "savedmodel", "onnx", "litert")


def _size(path):
  if os.path.isdir(path):
    return sum(os.path.getsize(os.path.join(r, f))
               for r, _, fs in os.walk(path) for f in fs)
  return os.path.getsize(path)


def _timed(fn):
  start = time.perf_counter()
  out = fn()
  return time.perf_counter() - start, out


def _steady(call, repeats):
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    call()
    times.append(time.perf_counter() - start)
  return statistics.median(times)


def _ready(out):
  return [np.asarray(o) for o in jax.tree_util.tree_leaves(out)]


def _jax(prog_path, tokens, tmp):
  del tmp
  load, fn = _timed(lambda: jax.jit(jaxpr_io.load(prog_path)))
  return 0.0, None, load, lambda: _ready(fn(tokens))


def _stablehlo(prog, tokens, tmp):
  path = os.path.join(tmp, "m.exported")
  convert, _ = _timed(lambda: converters.save_exported(prog, path))
  data = open(path, "rb").read()
  load, exp = _timed(lambda: jax.export.deserialize(data))
  return convert, path, load, lambda: _ready(exp.call(tokens))


def _savedmodel(prog, tokens, tmp):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(tmp, "sm")
  convert, _ = _timed(lambda: converters.to_saved_model(prog, path))
  load, serve = _timed(
      lambda: tf.saved_model.load(path).signatures["serving_default"])
  t = tf.constant(tokens)
  return convert, path, load, lambda: [serve(arg0=t)["out0"].numpy()]


def _onnx(prog, tokens, tmp):
  import onnxruntime as ort  # pylint: disable=g-import-not-at-top
  path = os.path.join(tmp, "m.onnx")
  convert, _ = _timed(lambda: converters.to_onnx(prog, path))
  load, session = _timed(lambda: ort.InferenceSession(
      path, providers=["CPUExecutionProvider"]))
  return convert, path, load, lambda: session.run(None, {"arg0": tokens})


def _litert(prog, tokens, tmp):
  from jaxpr_io.converters import litert  # pylint: disable=g-import-not-at-top
  path = os.path.join(tmp, "m.tflite")
  convert, _ = _timed(lambda: converters.to_tflite(prog, path))
  load, runner = _timed(lambda: litert.interpreter(path).get_signature_runner(
      "serving_default"))
  return convert, path, load, lambda: [runner(arg0=tokens)["out0"]]


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--layers", type=int, default=48)
  parser.add_argument("--repeats", type=int, default=20)
  parser.add_argument("--runtimes", default=",".join(RUNTIMES))
  args = parser.parse_args()
  model = bench_format.Transformer(args.layers)
  tokens = np.asarray(np.random.RandomState(0).randint(
      0, bench_format.VOCAB, (bench_format.BATCH, bench_format.SEQ_LEN)),
                      np.int32)
  params = model.init(jax.random.key(0), jnp.asarray(tokens))
  expected = np.asarray(jax.jit(model.apply)(params, tokens))
  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    prog_path = os.path.join(tmp, "model.jaxpr")
    prog = jaxpr_io.trace(lambda p, t: model.apply(p, t), params,
                          tokens).bind(params)
    jaxpr_io.save(prog_path, prog)
    loaded = jaxpr_io.load(prog_path)
    for name in args.runtimes.split(","):
      make = {"jax": _jax, "stablehlo": _stablehlo, "savedmodel": _savedmodel,
              "onnx": _onnx, "litert": _litert}[name]
      convert, path, load, call = make(
          prog_path if name == "jax" else loaded, tokens, tmp)
      first, out = _timed(call)
      verdict = verify.compare(name, [expected], out)
      steady = _steady(call, args.repeats)
      rows.append((name, convert, _size(path or prog_path), load, first,
                   steady, verdict))
  print(f"jax {jax.__version__}, {args.layers}-layer transformer "
        f"(d_model={bench_format.D_MODEL}, seq={bench_format.SEQ_LEN}, "
        f"batch={bench_format.BATCH}), CPU, {os.cpu_count()} cores, "
        f"steady = median of {args.repeats}")
  base = {r[0]: r for r in rows}.get("jax")
  print(f"{'runtime':<11}{'convert':>9}{'size':>12}{'load':>10}{'x jit':>7}"
        f"{'1st call':>10}{'x jit':>7}{'steady':>10}{'x jit':>7}"
        f"  max |diff|")
  for name, convert, size, load, first, steady, verdict in rows:
    ratio = (lambda v, i: f"{v / base[i]:.2f}" if base else "-")
    print(f"{name:<11}{convert:>8.2f}s{size:>12,}{load * 1e3:>8.1f}ms"
          f"{ratio(load, 3):>7}{first * 1e3:>8.1f}ms{ratio(first, 4):>7}"
          f"{steady * 1e3:>8.2f}ms{ratio(steady, 5):>7}"
          f"  {verdict.max_abs_diff:.2g}{'' if verdict.ok else ' MISMATCH'}")


if __name__ == "__main__":
  main()
