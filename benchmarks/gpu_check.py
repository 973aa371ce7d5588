"""Files written on a CPU machine run on a GPU: a check for a lent GPU.

    # here (CPU), under each JAX release that should write files:
    python benchmarks/gpu_check.py write DIR
    # on the GPU machine (any supported JAX with a CUDA plugin):
    python benchmarks/gpu_check.py run DIR

`write` saves, for tests/support/models.py's models and some of the second zoo's
programs (tests/support/zoo2.py), `DIR/jax-<version>/<name>.jaxpr`, the inputs and
this machine's outputs (`<name>.npz`), and the program lowered for
`("cpu", "cuda")` with `jaxpr_io.converters.save_exported`
(`<name>.exported`).

`run` loads every file on the GPU and, per program, checks:
  * jit: `jax.jit(loaded)` on the GPU is bit-identical to `jax.jit` of the
    original function traced again there (the same computation on the same
    device), and close to the CPU's outputs (GPUs round differently:
    TF32 matmuls, other reduction orders);
  * grad (of the sum of the outputs) and vmap, where the original supports
    them: bit-identical to the original's on the GPU (close, where the
    original's own gradient differs from run to run there: XLA:GPU's
    scatter-adds are atomic unless --xla_gpu_deterministic_ops=true);
  * exported: the `.exported` artifact deserializes and runs on the GPU,
    close to the CPU's outputs; and `to_exported(loaded, ["cuda"])` made
    there runs too.
It prints a table and exits 1 if any check fails.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jaxpr_io  # noqa: E402
from jaxpr_io import converters  # noqa: E402
from tests.support import models  # noqa: E402
from tests.support import zoo2  # noqa: E402

_MODELS = {"cnn": models.cnn, "transformer": models.transformer,
           "custom_rules": models.custom_rules,
           "ode": models.ode_integrator, "linalg": models.linalg}
_ZOO2 = ("optimistix_newton", "diffrax_ode_adaptive",
         "lineax_cholesky_solve", "ragged_moe", "bcoo_matmul")


def _programs():
  """name -> (fn, args) of the original functions."""
  progs = {}
  for name, build in _MODELS.items():
    fn, x = build()
    progs[name] = (fn, (x,))
  for name in _ZOO2:
    fn, args, kwargs = zoo2.ZOO2[name]()
    if kwargs:
      raise ValueError(f"{name} takes keyword arguments")
    progs[name] = (fn, tuple(args))
  return progs


def _leaves(tree):
  return [np.asarray(v) for v in jax.tree_util.tree_leaves(tree)]


def _loss(f):
  def loss(*args):
    return sum(jnp.sum(v.astype(jnp.float32))
               for v in jax.tree_util.tree_leaves(f(*args))
               if jnp.issubdtype(v.dtype, jnp.inexact))
  return loss


def _float_argnums(args):
  return tuple(i for i, a in enumerate(args)
               if jax.tree_util.tree_leaves(a) and all(
                   jnp.issubdtype(v.dtype, jnp.floating)
                   for v in jax.tree_util.tree_leaves(a)))


def write(out_dir: str) -> None:
  sub = os.path.join(out_dir, f"jax-{jax.__version__}")
  os.makedirs(sub, exist_ok=True)
  for name, (fn, args) in _programs().items():
    prog = jaxpr_io.trace(fn, *args)
    jaxpr_io.save(os.path.join(sub, f"{name}.jaxpr"), prog)
    expected = _leaves(jax.jit(fn)(*args))
    np.savez(os.path.join(sub, f"{name}.npz"),
             **{f"arg{i}": v for i, v in enumerate(_leaves(args))},
             **{f"out{i}": v for i, v in enumerate(expected)})
    try:
      converters.save_exported(prog, os.path.join(sub, f"{name}.exported"),
                               platforms=("cpu", "cuda"))
    except Exception as e:  # pylint: disable=broad-except
      print(f"{name}: no .exported: {type(e).__name__}: {str(e)[:120]}")
    print(f"wrote {sub}/{name}")


def _same(a, b) -> bool:
  a, b = _leaves(a), _leaves(b)
  return len(a) == len(b) and all(
      x.dtype == y.dtype and x.shape == y.shape
      and np.array_equal(x, y, equal_nan=True) for x, y in zip(a, b))


def _close(a, expected, tol=2e-2) -> str:
  a = _leaves(a)
  if len(a) != len(expected):
    return "different outputs"
  worst = 0.0
  for x, y in zip(a, expected):
    if x.shape != y.shape:
      return f"shape {x.shape} != {y.shape}"
    if np.issubdtype(y.dtype, np.inexact):
      x64, y64 = x.astype(np.float64), y.astype(np.float64)
      worst = max(worst, float(np.max(np.abs(x64 - y64) / (1 + np.abs(y64)),
                                      initial=0.0)))
    elif not np.array_equal(x, y):
      return "integer outputs differ"
  return "" if worst <= tol else f"max rel. difference {worst:.2e}"


def run(in_dir: str, any_device: bool = False) -> int:
  gpu = jax.devices()[0]
  print(f"jax {jax.__version__} on {gpu.platform}: {gpu.device_kind}")
  if gpu.platform != "gpu" and not any_device:
    print("not a GPU (--any-device tries this script itself elsewhere)")
    return 1
  originals = _programs()
  failures = 0
  print(f"{'writer':<16} {'program':<22} {'jit':<6} {'grad':<6} "
        f"{'vmap':<6} {'cpu':<6} {'exported':<9} {'to_exported':<11}")
  for writer in sorted(os.listdir(in_dir)):
    sub = os.path.join(in_dir, writer)
    for name, (fn, args) in originals.items():
      path = os.path.join(sub, f"{name}.jaxpr")
      if not os.path.exists(path):
        continue
      row, notes = {}, []

      def check(col, thunk):
        try:
          verdict = thunk()
          verdict = "" if verdict is True else (
              "not bit-identical" if verdict is False else verdict)
        except Exception as e:  # pylint: disable=broad-except
          verdict = f"{type(e).__name__}: {str(e)[:160]}"
        row[col] = "ok" if verdict == "" else (
            "n/a" if verdict is None else "FAIL")
        if row[col] == "FAIL":
          notes.append(f"{col}: {verdict}")
      data = np.load(os.path.join(sub, f"{name}.npz"))
      stored = lambda prefix: [data[k] for k in sorted(  # pylint: disable=unnecessary-lambda-assignment,cell-var-from-loop
          (k for k in data.files if k.startswith(prefix)),
          key=lambda k: int(k[len(prefix):]))]
      expected = stored("out")
      # The inputs are rebuilt (tests/support/models.py and tests/support/zoo2.py are
      # seeded): the writer's, as the .npz has them.
      gpu_args = jax.tree_util.tree_map(jnp.asarray, args)
      if not _same(gpu_args, stored("arg")):
        print(f"{writer} {name}: the rebuilt inputs differ from the file's")
        failures += 1
        continue
      # The same computation as the original's only where the file was
      # written by this JAX: other releases trace other jaxprs.
      same = _same if writer == f"jax-{jax.__version__}" else (
          lambda a, b: _close(a, _leaves(b)))
      prog = jaxpr_io.load(path)
      check("jit", lambda: same(jax.jit(prog)(*gpu_args),
                                jax.jit(fn)(*gpu_args)))
      argnums = _float_argnums(gpu_args)

      def grad():
        g = lambda f: jax.jit(jax.grad(_loss(f), argnums=argnums))(*gpu_args)  # pylint: disable=unnecessary-lambda-assignment
        try:
          want = g(fn)
        except Exception:  # pylint: disable=broad-except
          return None     # the original has no gradient either
        if same is _same and not _same(g(fn), want):
          # The original's own gradient differs from run to run here (GPU
          # scatter-adds are atomic): bit identity cannot be asked.
          return _close(g(prog), _leaves(want), tol=1e-5)
        return same(g(prog), want)

      def vmap():
        batched = jax.tree_util.tree_map(lambda a: jnp.stack([a, a]),
                                         gpu_args)
        v = lambda f: jax.jit(jax.vmap(f))(*batched)  # pylint: disable=unnecessary-lambda-assignment
        try:
          want = v(fn)
        except Exception:  # pylint: disable=broad-except
          return None
        return same(v(prog), want)
      check("grad", grad if argnums else lambda: None)
      check("vmap", vmap)
      check("cpu", lambda: _close(jax.jit(prog)(*gpu_args), expected))
      exp_path = os.path.join(sub, f"{name}.exported")

      def exported():
        if not os.path.exists(exp_path):
          return None
        with open(exp_path, "rb") as f:
          exp = jax.export.deserialize(bytearray(f.read()))
        return _close(exp.call(*gpu_args), expected)
      check("exported", exported)
      def to_exported():
        try:
          exp = converters.to_exported(
              prog, platforms=[gpu.platform.replace("gpu", "cuda")])
        except jaxpr_io.UnsupportedError:
          return None   # e.g. host callbacks, which jax.export cannot store
        return _close(exp.call(*gpu_args), expected)
      check("to_exported", to_exported)
      failures += "FAIL" in row.values()
      print(f"{writer:<16} {name:<22} {row['jit']:<6} {row['grad']:<6} "
            f"{row['vmap']:<6} {row['cpu']:<6} {row['exported']:<9} "
            f"{row['to_exported']:<11}")
      for note in notes:
        print(f"    {note}")
  print(f"{failures} program(s) with a failed check")
  return 1 if failures else 0


def main() -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("mode", choices=("write", "run"))
  parser.add_argument("dir")
  parser.add_argument("--any-device", action="store_true",
                      help="run on a machine without a GPU too (to try the "
                           "script itself)")
  args = parser.parse_args()
  if args.mode == "write":
    write(args.dir)
    return 0
  try:
    return run(args.dir, args.any_device)
  except Exception:  # pylint: disable=broad-except
    traceback.print_exc()
    return 2


if __name__ == "__main__":
  sys.exit(main())
