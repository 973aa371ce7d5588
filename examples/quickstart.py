"""Quick start: trace a model, save it, load it back, transform it.

    python examples/quickstart.py [--out DIR]

Prints the saved file's size, the loaded program, and checks that the loaded
program agrees bit for bit with the original under jit, grad and vmap.
"""

from __future__ import annotations

import argparse
import os
import tempfile

import jax
import jax.numpy as jnp
import numpy as np

import jaxpr_io


def init_params(key, sizes=(4, 32, 32, 1)):
  params = []
  for n_in, n_out in zip(sizes[:-1], sizes[1:]):
    key, sub = jax.random.split(key)
    params.append({"w": jax.random.normal(sub, (n_in, n_out)) / n_in ** 0.5,
                   "b": jnp.zeros(n_out)})
  return params


def predict(params, x):
  for layer in params[:-1]:
    x = jax.nn.tanh(x @ layer["w"] + layer["b"])
  return (x @ params[-1]["w"] + params[-1]["b"])[..., 0]


def loss(params, x, y):
  return jnp.mean((predict(params, x) - y) ** 2)


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--out", help="directory for loss.jaxpr (default: a "
                      "temporary directory)")
  args = parser.parse_args()
  out_dir = args.out or tempfile.mkdtemp(prefix="jaxpr_io-")
  os.makedirs(out_dir, exist_ok=True)

  params = init_params(jax.random.key(0))
  x = np.random.RandomState(0).randn(16, 4).astype(np.float32)
  y = np.sin(x.sum(axis=1))

  prog = jaxpr_io.trace(loss, params, x, y)
  prog.metadata["description"] = "MSE loss of a 3-layer MLP"
  path = os.path.join(out_dir, "loss.jaxpr")
  jaxpr_io.save(path, prog)
  print(f"saved {path} ({os.path.getsize(path)} bytes, "
        f"{len(prog.closed_jaxpr.eqns)} equations)")

  loaded = jaxpr_io.load(path, check=True)
  print(f"loaded: {loaded!r}, metadata {loaded.metadata}")
  print(loaded.closed_jaxpr)

  checks = {
      "jit": lambda p: jax.jit(p)(params, x, y),
      "grad": lambda p: jax.jit(jax.grad(p))(params, x, y),
      "vmap": lambda p: jax.jit(jax.vmap(p, in_axes=(None, 0, 0)))(
          params, x[None].repeat(3, 0), y[None].repeat(3, 0)),
  }
  for name, run in checks.items():
    same = jax.tree_util.tree_all(jax.tree_util.tree_map(
        lambda a, b: np.array_equal(np.asarray(a), np.asarray(b)),
        run(loaded), run(prog)))
    print(f"{name:5s} of the loaded program matches the original: {same}")
    if not same:
      raise SystemExit(f"{name} differs")
  print(f"loss = {float(loaded(params, x, y)):.6f}")


if __name__ == "__main__":
  main()
