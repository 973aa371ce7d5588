"""Equations whose primitive the reading JAX lacks, rebuilt as calls of
polyfill jaxprs of its own primitives (jaxpr_io/compat/polyfills.py)."""

from __future__ import annotations

from jaxpr_io import compat
from jaxpr_io.compat import polyfills as compat_polyfills
from jaxpr_io.errors import FormatError


def polyfill_equations(r, j: int, kind_ids, eqns) -> None:
  """Replaces the equations of polyfilled kinds with calls of the polyfill
  built at their input types (compat/polyfills.py), and records them."""
  if not r.polyfilled_kinds:
    return
  for i, e in enumerate(eqns):
    name = r.polyfilled_kinds.get(int(kind_ids[i]))
    if name is None:
      continue
    try:
      closed = compat_polyfills.build(name, e.params,
                                      [a.aval for a in e.invars],
                                      [v.aval for v in e.outvars], r.charge)
    except FormatError as error:
      raise FormatError(f"equation {i} ({name}): {error}") from None
    eqns[i] = compat.JaxprEqn(e.invars, e.outvars, compat_polyfills.CALL,
                              compat_polyfills.equation_params(closed),
                              e.effects, e.source_info, e.ctx)
    r.polyfilled.append((j, i, name))
