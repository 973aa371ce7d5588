"""End-to-end demo: train, checkpoint program + state, serve without code.

    python examples/demo.py [--workdir DIR] [--steps N]

1. Trains a small Flax MLP classifier on synthetic data for a few steps with
   optax, saving the state and the traced `predict` program with Orbax at
   every step (asynchronously), and records the model's output at the end.
2. In a fresh Python process that imports no model code (only jaxpr_io,
   Orbax and NumPy), restores the latest step, runs the program on the
   restored state, and checks it against the training process's output.
3. Dumps the program with `jaxpr-dump` and inspects and runs it with
   `jaxpr-load`.
4. Converts it to a StableHLO artifact (jax.export) and, with the trained
   weights bound (`Program.bind`, `jaxpr-load --bind`), to TensorFlow
   SavedModels whose only input is the data, and runs them.

Exits non-zero if any check fails.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp

import jaxpr_io
import jaxpr_io.orbax
from jaxpr_io import converters

BATCH, FEATURES, CLASSES = 32, 16, 4


class MLP(nn.Module):
  @nn.compact
  def __call__(self, x):
    x = nn.relu(nn.Dense(64)(x))
    x = nn.relu(nn.Dense(64)(x))
    return nn.Dense(CLASSES)(x)


def data(seed):
  """Synthetic classification data: the class is the argmax of a fixed
  linear projection."""
  rng = np.random.RandomState(seed)
  x = rng.randn(BATCH, FEATURES).astype(np.float32)
  proj = np.random.RandomState(0).randn(FEATURES, CLASSES)
  return x, np.argmax(x @ proj, axis=1).astype(np.int32)


def predict(params, x):
  return MLP().apply({"params": params}, x)


def make_predict():
  """Factory for `jaxpr-dump examples/demo.py:make_predict`: (fn, args)."""
  params = MLP().init(jax.random.key(0), jnp.zeros((1, FEATURES)))["params"]
  b, = jax.export.symbolic_shape("b")
  return predict, (params, jax.ShapeDtypeStruct((b, FEATURES), jnp.float32))


def train(workdir: str, steps: int):
  params = MLP().init(jax.random.key(0), jnp.zeros((1, FEATURES)))["params"]
  opt = optax.adamw(1e-2)
  opt_state = opt.init(params)

  @jax.jit
  def step(params, opt_state, x, y):
    def loss_fn(p):
      logits = predict(p, x)
      return optax.softmax_cross_entropy_with_integer_labels(logits, y).mean()
    loss, grads = jax.value_and_grad(loss_fn)(params)
    updates, opt_state = opt.update(grads, opt_state, params)
    return optax.apply_updates(params, updates), opt_state, loss

  b, = jax.export.symbolic_shape("b")
  spec = jax.ShapeDtypeStruct((b, FEATURES), jnp.float32)
  # The program does not change while training; the state does.
  program = jaxpr_io.trace(predict, params, spec)
  program.metadata["model"] = "MLP(64, 64) classifier"
  options = ocp.CheckpointManagerOptions(max_to_keep=3,
                                         enable_async_checkpointing=True)
  with ocp.CheckpointManager(os.path.join(workdir, "ckpt"),
                             options=options) as mngr:
    for i in range(1, steps + 1):
      x, y = data(i)
      params, opt_state, loss = step(params, opt_state, x, y)
      mngr.save(i, args=ocp.args.Composite(
          state=ocp.args.StandardSave(params),
          program=jaxpr_io.orbax.ProgramSave(program)))
      print(f"step {i}: loss {float(loss):.4f}")
    mngr.wait_until_finished()
  x_eval, _ = data(1000)
  np.save(os.path.join(workdir, "x_eval.npy"), x_eval)
  np.save(os.path.join(workdir, "expected.npy"),
          np.asarray(jax.jit(predict)(params, x_eval)))
  return program, params, x_eval


SERVE = textwrap.dedent("""
    # A fresh process: no Flax, no model code. Only the checkpoint.
    import sys, numpy as np, orbax.checkpoint as ocp, jaxpr_io.orbax
    workdir = sys.argv[1]
    mngr = ocp.CheckpointManager(workdir + "/ckpt")
    step = mngr.latest_step()
    restored = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(),
        program=jaxpr_io.orbax.ProgramRestore(check=True)))
    out = np.asarray(restored.program(restored.state,
                                      np.load(workdir + "/x_eval.npy")))
    expected = np.load(workdir + "/expected.npy")
    assert "flax" not in sys.modules, "the model code was imported"
    np.testing.assert_allclose(out, expected, rtol=1e-6, atol=1e-6)
    print(f"fresh process: restored step {step}, program output matches "
          f"the training process (max diff {np.abs(out - expected).max():.2e})")
""")


def run(*cmd):
  shown = ["<serve script>" if i and cmd[i - 1] == "-c" else part
           for i, part in enumerate(cmd)]
  print("$", " ".join(shown))
  proc = subprocess.run(cmd, capture_output=True, text=True)
  if proc.returncode:
    sys.exit(f"command failed ({proc.returncode}):\n{proc.stderr}")
  print(textwrap.indent(proc.stdout.rstrip(), "  "))
  return proc.stdout


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--workdir", help="where to write (default: temporary)")
  parser.add_argument("--steps", type=int, default=5)
  args = parser.parse_args()
  workdir = args.workdir or tempfile.mkdtemp(prefix="jaxpr_io-demo-")
  if os.path.exists(os.path.join(workdir, "ckpt")):
    shutil.rmtree(os.path.join(workdir, "ckpt"))
  os.makedirs(workdir, exist_ok=True)
  print(f"== 1. training, checkpointing state + program in {workdir}")
  program, params, x_eval = train(workdir, args.steps)

  print("== 2. serving the latest checkpoint from a fresh process")
  run(sys.executable, "-c", SERVE, workdir)

  print("== 3. the command-line tools")
  bindir = os.path.dirname(sys.executable)
  dumped = os.path.join(workdir, "predict.jaxpr")
  run(os.path.join(bindir, "jaxpr-dump"), f"{os.path.abspath(__file__)}:"
      "make_predict", "-o", dumped, "--metadata", "source=demo")
  run(os.path.join(bindir, "jaxpr-load"), dumped)
  flat_params = jax.tree_util.tree_leaves(params)
  np.savez(os.path.join(workdir, "in.npz"),
           **{f"arg{i}": np.asarray(a) for i, a in enumerate(flat_params)},
           **{f"arg{len(flat_params)}": x_eval})
  run(os.path.join(bindir, "jaxpr-load"), dumped, "--check")
  run(os.path.join(bindir, "jaxpr-load"), dumped, "--run",
      os.path.join(workdir, "in.npz"), "--out",
      os.path.join(workdir, "out.npz"))
  cli_out = np.load(os.path.join(workdir, "out.npz"))["out0"]
  expected = np.load(os.path.join(workdir, "expected.npy"))
  np.testing.assert_allclose(cli_out, expected, rtol=1e-6, atol=1e-6)
  print("  jaxpr-load --run output matches the training process")

  print("== 4. converters: StableHLO and a TensorFlow SavedModel")
  exported_path = os.path.join(workdir, "predict.exported")
  converters.save_exported(program, exported_path, platforms=("cpu", "cuda"))
  exported = jax.export.deserialize(open(exported_path, "rb").read())
  out = np.asarray(exported.call(params, x_eval))
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
  print(f"  {exported_path}: platforms {exported.platforms}, runs and "
        "matches")
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
  except ImportError:
    print("  (tensorflow not installed: skipping the SavedModel)")
    return
  # For serving, the weights are bound: they become the SavedModel's
  # variables and serving_default takes only x. In Python:
  sm_dir = os.path.join(workdir, "models", "mlp", "1")
  converters.to_saved_model(program.bind(params), sm_dir)
  serving = tf.saved_model.load(sm_dir).signatures["serving_default"]
  out = serving(arg0=tf.constant(x_eval))["out0"].numpy()
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
  print(f"  {sm_dir}: serving_default(arg0) -> out0 runs and matches")
  # And from the shell, with the latest checkpoint's state:
  with ocp.CheckpointManager(os.path.join(workdir, "ckpt")) as mngr:
    step_dir = os.path.join(workdir, "ckpt", str(mngr.latest_step()))
  cli_dir = os.path.join(workdir, "models", "mlp_cli", "1")
  run(os.path.join(bindir, "jaxpr-load"),
      os.path.join(step_dir, "program", "program.jaxpr"), "--bind",
      f"0={os.path.join(step_dir, 'state')}", "--to-saved-model", cli_dir)
  serving = tf.saved_model.load(cli_dir).signatures["serving_default"]
  out = serving(arg0=tf.constant(x_eval))["out0"].numpy()
  np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
  print(f"  {cli_dir} (jaxpr-load --bind): runs and matches")
  print("demo OK")


if __name__ == "__main__":
  main()
