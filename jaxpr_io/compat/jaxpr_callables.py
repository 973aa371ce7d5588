"""JAX internals for params that are thunks returning `(jaxpr, consts)`.

Two of JAX's primitives hold a thunk instead of a jaxpr, traced only when a
transformation needs it: `linear_call`'s `transpose_thunk` (the transpose
function) and `remat_opt`'s `fun_jaxpr_thunk` (the primal function of a
`custom_vjp` with `optimize_remat=True`). The file stores what the thunk
returns as one closed jaxpr (the consts as its constants); these helpers
convert between that and the thunk's own form, which differs by release:

  thunk             0.10                              0.11+ (one Jaxpr type)
  transpose_thunk   ClosedJaxpr, consts as its        Jaxpr, consts as its
                    leading invars                    leading invars
  fun_jaxpr_thunk   Jaxpr with constvars              Jaxpr, consts as its
                                                      leading invars
"""

from __future__ import annotations

from typing import Any

from jax._src import core
from jax._src.interpreters import partial_eval as pe

# One Jaxpr type (JAX 0.11+; 0.11 keeps ClosedJaxpr as its alias).
_MERGED = getattr(core, "ClosedJaxpr", core.Jaxpr) is core.Jaxpr


def close_leading_invars(jaxpr, consts) -> Any:
  """The closed jaxpr of a jaxpr whose leading invars take `consts` (a
  `transpose_thunk`'s result)."""
  consts = list(consts)
  if _MERGED:
    return jaxpr.with_consts(consts)
  return core.ClosedJaxpr(
      pe.convert_invars_to_constvars(jaxpr.jaxpr, len(consts)), consts)


def to_leading_invars(closed) -> tuple[Any, list]:
  """`close_leading_invars`'s inverse: what a `transpose_thunk` returns."""
  jaxpr, consts = pe.separate_consts(closed)
  return jaxpr, list(consts)


def close_traced(jaxpr, consts) -> Any:
  """The closed jaxpr of a `fun_jaxpr_thunk`'s result."""
  consts = list(consts)
  if _MERGED:
    return jaxpr.with_consts(consts)
  return core.ClosedJaxpr(jaxpr, consts)


def to_traced(closed) -> tuple[Any, list]:
  """`close_traced`'s inverse: what a `fun_jaxpr_thunk` returns."""
  if _MERGED:
    jaxpr, consts = pe.separate_consts(closed)
    return jaxpr, list(consts)
  return closed.jaxpr, list(closed.consts)
