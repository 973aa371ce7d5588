"""Dead tracers as a jaxpr's constants (JAX 0.11+).

Equinox's closure conversion (`equinox.filter_closure_convert`) traces a
function into a jaxpr whose constants are the values it closes over, and
keeps those values beside the jaxpr (`_ClosureConvert.consts`): a filter
primitive that takes the converted function (Lineax's `linear_solve` of a
`FunctionLinearOperator`, as Optimistix's Newton steps make) gets them as
its inputs and evaluates `jax.core.eval_jaxpr(jaxpr, consts, *args)`.
Under JAX 0.10 the jaxpr in the equation's `static` param is open (its
constvars have no values). From 0.11 a `Jaxpr` carries its consts, so it
holds the enclosing trace's tracers, which are dead once that trace ends:
they only give the jaxpr its constvars (what it prints as `{ lambda a b;
c. ... }`); using one raises `UnexpectedTracerError`.

The format stores such a jaxpr open, as 0.10 has it. On a merged release
the reader attaches tracers of a trace that has finished, of the stored
constvars' types: the loaded jaxpr prints as the original, Equinox
evaluates it with the equation's inputs, and using its constants raises
as the original's would.
"""

from __future__ import annotations

import jax

from jaxpr_io.compat import DebugInfo, MERGED_JAXPRS
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.compat import is_tracer


def holds_dead_consts(jaxpr) -> bool:
  """Whether `jaxpr` (of a merged release) has constants and all of them
  are tracers: those of the trace that made it, or dead ones a reader
  attached (`with_dead_consts`)."""
  return bool(jaxpr.consts) and all(map(is_tracer, jaxpr.consts))


def with_dead_consts(jaxpr, n: int):
  """`jaxpr`, loaded with `n` stored constvars, with dead tracers of their
  types attached as its constants on a merged release; on JAX 0.10, whose
  open jaxprs keep their constvars without values, `jaxpr` itself."""
  if not MERGED_JAXPRS or n == 0:
    return jaxpr
  avals = [v.aval for v in jaxpr.invars[:n]]
  captured = []

  def capture(*tracers):
    captured.extend(tracers)
    return []
  # They outlive their trace on purpose, as the original's do: leak checks
  # (`jax.check_tracer_leaks`) would flag them.
  with jax.check_tracer_leaks(False):
    compat_custom_rules.trace_flat(capture, avals, DebugInfo(
        "jaxpr_io", "closure-converted constants",
        tuple(f"consts[{i}]" for i in range(n)), None))
  return jaxpr.with_consts(captured)
