"""Benchmark of the converters, for the example models of tests/support/models.py.

For each model it prints the size of the `.jaxpr` file, and for each
conversion (jax.export StableHLO, TensorFlow SavedModel) its time, the
artifact's size, and the time of the artifact's first call (load included),
next to the time of the first call of `jax.jit` on the original function
(tracing and compilation included).

    python benchmarks/bench_converters.py [--models cnn,transformer,custom_rules,ode,linalg]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

import jax
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jaxpr_io  # noqa: E402
from jaxpr_io import converters  # noqa: E402
from tests.support import models  # noqa: E402

MODELS = {"cnn": models.cnn, "transformer": models.transformer,
          "custom_rules": models.custom_rules,
          "ode": models.ode_integrator, "linalg": models.linalg}


def timed(fn):
  start = time.perf_counter()
  out = fn()
  jax.block_until_ready(out) if not hasattr(out, "numpy") else out.numpy()
  return time.perf_counter() - start, out


def dir_size(path):
  return sum(os.path.getsize(os.path.join(root, f))
             for root, _, files in os.walk(path) for f in files)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--models", default=",".join(MODELS))
  args = parser.parse_args()
  import tensorflow as tf  # pylint: disable=g-import-not-at-top

  rows = []
  with tempfile.TemporaryDirectory() as tmp:
    for name in args.models.split(","):
      fn, x = MODELS[name]()
      jit_first, expected = timed(lambda: jax.jit(lambda v: fn(v))(x))  # pylint: disable=unnecessary-lambda
      path = os.path.join(tmp, f"{name}.jaxpr")
      jaxpr_io.save(path, jaxpr_io.trace(fn, x))
      prog = jaxpr_io.load(path)

      exp_path = os.path.join(tmp, f"{name}.exported")
      t_exp, _ = timed(lambda: converters.save_exported(prog, exp_path))
      t_exp_call, out = timed(lambda: jax.export.deserialize(
          open(exp_path, "rb").read()).call(x))
      np.testing.assert_allclose(np.asarray(out), np.asarray(expected),
                                 rtol=1e-5, atol=1e-5)

      sm_path = os.path.join(tmp, f"{name}_sm")
      try:
        t_sm, _ = timed(lambda: converters.to_saved_model(prog, sm_path))
      except jaxpr_io.UnsupportedError as e:
        # LAPACK-backed linalg: TensorFlow's XLA cannot run it.
        print(f"{name}: no SavedModel: {str(e)[:90]}...")
        t_sm = sm_size = t_sm_call = float("nan")
      else:
        t_sm_call, out = timed(lambda: tf.saved_model.load(
            sm_path).signatures["serving_default"](arg0=tf.constant(x))[
                "out0"])
        np.testing.assert_allclose(out.numpy(), np.asarray(expected),
                                   rtol=1e-5, atol=1e-5)
        sm_size = dir_size(sm_path)
      rows.append((name, os.path.getsize(path), jit_first,
                   t_exp, os.path.getsize(exp_path), t_exp_call,
                   t_sm, sm_size, t_sm_call))

  print(f"jax {jax.__version__}, tensorflow {tf.__version__}, backend "
        f"{jax.default_backend()}")
  header = ("model", ".jaxpr B", "jit 1st call", "export", "exported B",
            "1st call", "savedmodel", "savedmodel B", "1st call")
  print(("{:<12}" + "{:>13}" * 8).format(*header))
  for (name, size, jit_first, t_exp, exp_size, t_exp_call, t_sm, sm_size,
       t_sm_call) in rows:
    no_sm = sm_size != sm_size  # NaN: no SavedModel
    sm = "n/a" if no_sm else f"{int(sm_size):,d}"
    t_sm, t_sm_call = (("n/a", "n/a") if no_sm else
                       (f"{t_sm:.3f}s", f"{t_sm_call:.3f}s"))
    print(("{:<12}{:>13,d}{:>12.3f}s{:>12.3f}s{:>13,d}{:>12.3f}s{:>13}"
           "{:>13}{:>13}").format(name, size, jit_first, t_exp, exp_size,
                                  t_exp_call, t_sm, sm, t_sm_call))


if __name__ == "__main__":
  main()
