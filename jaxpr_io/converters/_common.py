"""What the converters share: the program's signature as specs."""

from __future__ import annotations

import jax

from jaxpr_io.api.program import Program, as_program


def input_specs(prog: Program):
  """(args, kwargs) of `jax.ShapeDtypeStruct`s, symbolic dims included."""
  flat = [jax.ShapeDtypeStruct(a.shape, a.dtype)
          for a in prog.closed_jaxpr.in_avals]
  return jax.tree_util.tree_unflatten(prog.in_tree, flat)


# The platforms `jax.export` lowers for.
PLATFORMS = ("cpu", "cuda", "rocm", "tpu")


def check_platforms(platforms) -> None:
  """ValueError, listing the valid ones, for an unknown platform (JAX's own
  error is a RuntimeError `Unknown backend` from deep inside lowering)."""
  for p in platforms or ():
    if p not in PLATFORMS:
      raise ValueError(f"unknown platform {p!r}: valid platforms are "
                       f"{', '.join(PLATFORMS)}")


__all__ = ["PLATFORMS", "as_program", "check_platforms", "input_specs"]
