"""Checking a converted artifact in its own runtime against JAX.

A converter's output is run by another runtime (ONNX Runtime, the LiteRT
interpreter) with other kernels, so it is compared with the loaded program
under `jax.jit` within a tolerance, not bit for bit: |actual - expected| <=
ATOL + RTOL * |expected| elementwise for inexact outputs, equality for
integer and boolean ones.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxpr_io.compat import symbolic
from jaxpr_io.errors import JaxprIoError

# float32 kernels of two runtimes agree to a few ulps per operation; a
# 48-layer transformer accumulates to ~1e-5 relative.
RTOL = 1e-4
ATOL = 1e-4
# The size each symbolic dimension takes in the example inputs.
EXAMPLE_DIM = 2


class MismatchError(JaxprIoError, ValueError):
  """A converted artifact computes other values than the program."""


def example_inputs(closed) -> list[np.ndarray]:
  """Zeros of the program's flat input avals, each dimension variable
  (a symbolic dimension that is a plain name, `b`) EXAMPLE_DIM; expressions
  of them (`2*b`) follow. A program whose constraints exclude EXAMPLE_DIM
  needs explicit inputs."""
  env = {str(d): EXAMPLE_DIM for aval in closed.in_avals for d in aval.shape
         if type(d) is symbolic.DimExpr and str(d).isidentifier()}
  return [np.zeros(concrete_shape(a.shape, env), a.dtype)
          for a in closed.in_avals]


def concrete_shape(shape, env) -> tuple[int, ...]:
  return tuple(symbolic.evaluate_dim(d, env) if type(d) is symbolic.DimExpr
               else int(d) for d in shape)


def expected_outputs(prog, inputs) -> list[np.ndarray]:
  """The flat outputs of `prog` (a `Program`) under `jax.jit` on the flat
  `inputs` (symbolic dimensions take the inputs' sizes)."""
  args, kwargs = jax.tree_util.tree_unflatten(prog.in_tree, list(inputs))
  return [np.asarray(o) for o in jax.tree_util.tree_leaves(
      jax.jit(prog)(*args, **kwargs))]


@dataclasses.dataclass
class Verdict:
  """The largest difference between an artifact's outputs and JAX's."""
  runtime: str
  max_abs_diff: float
  ok: bool
  detail: str

  def line(self) -> str:
    return (f"verified in {self.runtime}: largest difference from JAX "
            f"{self.max_abs_diff:.3g} (tolerance: atol {ATOL:g} + rtol "
            f"{RTOL:g} x |JAX|)")


def compare(runtime: str, expected, actual) -> Verdict:
  """The verdict on `actual` (the runtime's flat outputs) against
  `expected` (JAX's)."""
  if len(actual) != len(expected):
    return Verdict(runtime, float("inf"), False,
                   f"{runtime} returned {len(actual)} outputs, JAX "
                   f"{len(expected)}")
  worst, problems = 0.0, []
  for i, (e, a) in enumerate(zip(expected, actual)):
    e, a = np.asarray(e), np.asarray(a)
    if a.shape != e.shape:
      problems.append(f"out{i} has shape {list(a.shape)}, JAX "
                      f"{list(e.shape)}")
      worst = float("inf")
      continue
    if e.size == 0:
      continue
    # jax.numpy's issubdtype: numpy's says bfloat16 and float8 are not
    # inexact, and NaN against NaN would count as a difference.
    if jnp.issubdtype(e.dtype, jnp.inexact):
      e64, a64 = _as_float64(e), _as_float64(np.asarray(a, e.dtype))
      # NaN where JAX has NaN, and an infinity equal to JAX's, agree.
      same = (np.isnan(e64) & np.isnan(a64)) | (a64 == e64)
      with np.errstate(invalid="ignore"):
        diff = np.where(same, 0.0, np.abs(a64 - e64))
      diff = np.where(np.isnan(diff), np.inf, diff)  # NaN on one side only
      worst = max(worst, float(np.max(diff)))
      bad = ~(same | (diff <= ATOL + RTOL * np.abs(e64)))
    else:
      diff = np.abs(a.astype(np.float64) - e.astype(np.float64))
      worst = max(worst, float(diff.max()))
      bad = diff != 0
    if bad.any():
      problems.append(f"out{i} differs at {int(bad.sum())} of {e.size} "
                      f"elements (largest difference {float(diff.max()):.3g})")
  return Verdict(runtime, worst, not problems, "; ".join(problems))


def _as_float64(x: np.ndarray) -> np.ndarray:
  """Real values as float64; a complex value as its (real, imaginary) pair
  on a last axis, each part compared on its own."""
  if np.iscomplexobj(x):
    return np.stack([x.real, x.imag], axis=-1).astype(np.float64)
  return x.astype(np.float64)


def check(verdict: Verdict, artifact: str) -> Verdict:
  """`verdict`, or MismatchError if it failed."""
  if not verdict.ok:
    raise MismatchError(
        f"{artifact}: the artifact run by {verdict.runtime} does not match "
        f"JAX beyond the tolerance (atol {ATOL:g}, rtol {RTOL:g}): "
        f"{verdict.detail}")
  return verdict
