"""What a converter copies, charged before it runs.

A file stores each jaxpr once and refers to it by index, however many
equations call it. JAX keeps that sharing down to XLA (a jitted function is
lowered once per distinct body). ONNX's and LiteRT's converters do not:
jax2onnx inlines every call (`converters.simplify`) and converts a loop or
branch body once per equation that holds it, and TensorFlow's LiteRT
converter inlines every function of the SavedModel. A chain of ten bodies,
each calling the next twice, is 26 equations in a 4 kB file and 6,144
equations for the converter (2**10 copies), which jax2onnx took 100
seconds to convert; each further level doubles it.

`check(prog, converter)` counts the equations the converter gets: an
inlined call (`jit`, `custom_jvp_call`, ...: `simplify.INLINED`) counts
its body's equations, any other equation 1 plus the equations of each of
its sub-jaxprs; each distinct jaxpr is counted once and its count reused
(so the count itself costs what the file does). The total is charged
against 64x the equations the program stores (each distinct jaxpr once) +
2,048, and a program over it is refused with a `FormatError` naming the
equation that contributes most: the "equations a conversion copies" row of
docs/trust-model.md's cost table.

As for `converters.folding`, the charge applies to programs loaded without
`trusted=True` (and those `bind` and `specialize` make of them), unless the
converter is given `trusted=True`. `to_exported` and `to_saved_model` keep
the sharing (StableHLO functions) and are not charged.
"""

from __future__ import annotations

from jaxpr_io import compat
from jaxpr_io.converters import simplify
from jaxpr_io.errors import FormatError
from jaxpr_io.format import limits

FACTOR = limits.CONVERSION_COPY_FACTOR
FIXED_EQUATIONS = limits.CONVERSION_FIXED_EQUATIONS


def _open(jaxpr):
  return compat.open_jaxpr(jaxpr) if compat.is_closed_jaxpr(jaxpr) else jaxpr


class _Counts:
  """Stored and converted equation counts, each distinct jaxpr once."""

  def __init__(self):
    self._converted: dict[int, tuple] = {}  # id -> (jaxpr, count)
    self._stored: dict[int, object] = {}

  def converted(self, jaxpr) -> int:
    """The equations a converter gets for `jaxpr`, copies included."""
    key = id(jaxpr)
    if key not in self._converted:
      total = sum(self.of_equation(eqn) for eqn in jaxpr.eqns)
      self._converted[key] = (jaxpr, total)  # keeps jaxpr alive: ids stay
    return self._converted[key][1]

  def of_equation(self, eqn) -> int:
    body = simplify.inlined_body(eqn)
    if body is not None:
      return self.converted(body[0])
    return 1 + sum(self.converted(_open(sub))
                   for _, _, sub in simplify.sub_jaxprs(eqn))

  def stored(self, jaxpr) -> int:
    """The equations of `jaxpr` and of the jaxprs it refers to, each
    distinct jaxpr once."""
    if id(jaxpr) in self._stored:
      return 0
    self._stored[id(jaxpr)] = jaxpr
    total = len(jaxpr.eqns)
    for eqn in jaxpr.eqns:
      body = simplify.inlined_body(eqn)
      if body is not None:
        total += self.stored(body[0])
      for _, _, sub in simplify.sub_jaxprs(eqn):
        total += self.stored(_open(sub))
    return total


def counts(closed) -> tuple[int, int, tuple[int, int] | None]:
  """(stored, converted, (converted count, index) of the top-level
  equation contributing most) of `closed`."""
  jaxpr = compat.open_jaxpr(closed)
  c = _Counts()
  per_equation = [c.of_equation(eqn) for eqn in jaxpr.eqns]
  largest = max(((n, i) for i, n in enumerate(per_equation)),
                key=lambda t: (t[0], -t[1]), default=None)
  return c.stored(jaxpr), sum(per_equation), largest


def budget(stored: int) -> int:
  """The equations a conversion of a program storing `stored` equations
  may get."""
  return FACTOR * stored + FIXED_EQUATIONS


def check(prog, converter: str, trusted: bool = False) -> None:
  """FormatError, naming the equation contributing most, if what
  `converter` gets of `prog` (a `Program`) is over `budget`; nothing for
  a trusted program (see the module doc)."""
  if trusted or not prog.untrusted:
    return
  closed = prog.closed_jaxpr
  stored, converted, largest = counts(closed)
  allowed = budget(stored)
  if converted <= allowed:
    return
  n, i = largest
  eqn = compat.open_jaxpr(closed).eqns[i]
  raise FormatError(
      f"equation {i}: primitive {eqn.primitive.name} expands to {n:,} "
      f"equations for {converter}, which copies each call and loop body "
      f"once per place that holds it: the program's {stored:,} stored "
      f"equations expand to {converted:,}, over the {allowed:,} that an "
      f"untrusted program may ({FACTOR}x its stored "
      f"equations + {FIXED_EQUATIONS:,}); load it with trusted=True "
      "(jaxpr-load --trusted), or convert it with trusted=True, if you "
      "wrote it")
