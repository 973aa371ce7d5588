"""What the converters share: the program's signature as specs."""

from __future__ import annotations

import jax

from jaxpr_io.program import Program, as_program


def input_specs(prog: Program):
  """(args, kwargs) of `jax.ShapeDtypeStruct`s, symbolic dims included."""
  flat = [jax.ShapeDtypeStruct(a.shape, a.dtype)
          for a in prog.closed_jaxpr.in_avals]
  return jax.tree_util.tree_unflatten(prog.in_tree, flat)


__all__ = ["as_program", "input_specs"]
