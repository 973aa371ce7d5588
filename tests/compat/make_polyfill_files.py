"""Writes the files of tests/compat/test_polyfills.py: programs that hold
primitives JAX 0.10.2 (and, for `polynomial`, 0.11.x) lacks, written by a
release that has them.

    python tests/compat/make_polyfill_files.py     # under jax 0.12.x

Creates tests/compat/cross_release/polyfills-<name>-jax-<version>.{jaxpr,npz}:
the file, and the inputs (arg0, ...) with what the original function and
its gradient computed under jit in the writing release (out0, ...,
grad0).
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import jaxpr_io  # noqa: E402  pylint: disable=g-import-not-at-top
from tests.support import paths  # noqa: E402  pylint: disable=g-import-not-at-top


def mixed(x, c):
  # log2, one_minus_square (JAX 0.11+'s derivative of tanh) and polynomial
  # (JAX 0.12's polyval) at top level and inside a jit.
  dtanh = jax.grad(lambda v: jnp.tanh(v).sum())(x)
  return (jnp.log2(x) + lax.one_minus_square(x) + dtanh
          + lax.polynomial(x, [c, 2.0, -3.0], unroll=2)
          + jnp.polyval(jnp.array([1.5, -2.0, 3.0], x.dtype), x))


def types(z, h, w, i, cs):
  # complex and half precision log2, a weak-typed input, integers, and
  # coefficients with size-1 dimensions.
  return (jnp.log2(z), jnp.log2(h), jnp.log2(w), lax.one_minus_square(i),
          lax.polynomial(h.astype(np.float32)[:, None], [cs, cs * 2, 1.0]))


def symbolic(x):
  return jnp.log2(x) * lax.polynomial(x, [1.0, 0.5, 0.25])


def _cases():
  rng = np.random.RandomState(0)
  pos = lambda *s: (rng.rand(*s) * 3 + 0.1).astype(np.float32)  # noqa: E731
  x = pos(2, 5)
  z = (rng.randn(4) + 1j * rng.randn(4)).astype(np.complex64)
  h = pos(4).astype(np.float16)
  cs = rng.randn(1, 3).astype(np.float32)
  b, = jax.export.symbolic_shape("b")
  return {
      "mixed": (mixed, (x, np.float32(0.5)), (x, np.float32(0.5)), 0),
      "types": (types,
                (z, h, jax.ShapeDtypeStruct((3,), np.float32, weak_type=True),
                 np.arange(-3, 3, dtype=np.int32), cs),
                (z, h, pos(3), np.arange(-3, 3, dtype=np.int32), cs), None),
      "symbolic": (symbolic, (jax.ShapeDtypeStruct((b, 3), np.float32),),
                   (pos(4, 3),), 0),
  }


def main():
  for name, (fn, specs, args, grad_arg) in _cases().items():
    stem = os.path.join(paths.CROSS_RELEASE,
                        f"polyfills-{name}-jax-{jax.__version__}")
    jaxpr_io.save(stem + ".jaxpr", jaxpr_io.trace(fn, *specs))
    arrays = {f"arg{i}": a for i, a in enumerate(args)}
    # Under jit, as a loaded program runs (op by op, XLA rounds apart).
    outs = jax.tree_util.tree_leaves(jax.jit(fn)(*args))
    arrays.update({f"out{i}": o for i, o in enumerate(outs)})
    if grad_arg is not None:
      grad = jax.jit(jax.grad(lambda *a: sum(
          o.sum() for o in jax.tree_util.tree_leaves(fn(*a))),
                              argnums=grad_arg))(*args)
      arrays["grad0"] = grad
    np.savez(stem + ".npz", **arrays)
    print(stem)


if __name__ == "__main__":
  main()
