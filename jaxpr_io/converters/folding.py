"""What a converter may fold into constants, charged before it runs.

ONNX's and LiteRT's converters evaluate at conversion time what they can:
jax2onnx turns a broadcast of a literal into an initializer, TensorFlow's
LiteRT converter folds an iota and its sum. A file of a few hundred bytes
whose program broadcasts a literal to float32[8192, 8192], or sums an iota
of 2**28, asks them for gigabytes, which the loading cost model never saw
(JAX runs such a program in a fraction of it: XLA fuses the broadcast into
its consumer).

`check(prog, converter)` charges, before the converter runs, the output
bytes of every equation whose inputs are all literals or constants, with
the outputs of such equations counting as constants in turn (an iota, the
broadcast of a literal, and their consumers). Calls that the converters
inline (`jit`, `custom_jvp_call`, ...: `simplify.INLINED`) are walked with
their operands' constness; a loop body or branch is walked once per
equation that holds it, its own constants and literals being what it
knows. An output with a symbolic dimension is not a constant (its size is
a call's). The total is charged against 16x the bytes of the program's
constants (its weights: a loaded file's data section and what
`Program.bind` added) + 64 MiB, and a program over it is refused with a
`FormatError` naming its largest such equation: the "constants a
conversion folds" row of docs/trust-model.md's cost table.

The charge applies to programs loaded without `trusted=True` (and those
`bind` and `specialize` make of them), unless the converter is given
`trusted=True`; a program traced in this process is the caller's own.
"""

from __future__ import annotations

import dataclasses
import math

from jaxpr_io import compat
from jaxpr_io.compat import symbolic
from jaxpr_io.converters import simplify
from jaxpr_io.errors import FormatError
from jaxpr_io.format import limits


@dataclasses.dataclass
class _Folded:
  """What one jaxpr folds, given which of its inputs are constants: the
  total bytes, its largest equation (bytes, place relative to the jaxpr,
  equation) and which of its outputs are constants."""
  total: int = 0
  largest: tuple | None = None
  outs: tuple = ()

  def add(self, nbytes: int, place: str, eqn) -> None:
    self.total += nbytes
    if self.largest is None or nbytes > self.largest[0]:
      self.largest = (nbytes, place, eqn)

  def add_nested(self, other: "_Folded", place: str) -> None:
    self.total += other.total
    if other.largest is not None and (
        self.largest is None or other.largest[0] > self.largest[0]):
      nbytes, inner, eqn = other.largest
      self.largest = (nbytes, f"{place} > {inner}", eqn)


def _nbytes(aval) -> int | None:
  """The bytes of an array of `aval`; None for one whose size is not
  known before a call (a symbolic dimension) or that is no array."""
  shape = getattr(aval, "shape", None)
  dtype = getattr(aval, "dtype", None)
  if shape is None or dtype is None:
    return None
  if any(type(d) is symbolic.DimExpr for d in shape):
    return None
  itemsize = getattr(dtype, "itemsize", None) or 8
  return math.prod(int(d) for d in shape) * int(itemsize)


class _Walk:
  """`folded(jaxpr, known)` of each (jaxpr, constant inputs) once: a shared
  body called from many places costs one walk (the charge is still added
  at each place, as an inlining converter folds each copy)."""

  def __init__(self):
    self._done: dict = {}

  def folded(self, jaxpr, known: tuple | None) -> _Folded:
    """`known`: whether each constvar and then each invar is a constant;
    None: the constvars are (a closed jaxpr's consts), the invars not."""
    if known is None:
      known = (True,) * len(jaxpr.constvars) + (False,) * len(jaxpr.invars)
    key = (id(jaxpr), known)
    if key not in self._done:
      self._done[key] = (jaxpr, self._walk(jaxpr, known))  # keeps jaxpr alive
    return self._done[key][1]

  def _walk(self, jaxpr, known: tuple) -> _Folded:
    result = _Folded()
    constant = {v for v, k in zip((*jaxpr.constvars, *jaxpr.invars), known)
                if k}

    def is_constant(atom) -> bool:
      return type(atom) is compat.Literal or atom in constant

    for i, eqn in enumerate(jaxpr.eqns):
      body = simplify.inlined_body(eqn)
      if body is not None:
        self._inlined(eqn, body, str(i), is_constant, constant, result)
        continue
      if all(map(is_constant, eqn.invars)) and not eqn.effects:
        sizes = [_nbytes(v.aval) for v in eqn.outvars]
        if None not in sizes:
          result.add(sum(sizes), str(i), eqn)
          constant.update(eqn.outvars)
      for _, _, sub in simplify.sub_jaxprs(eqn):
        sub_jaxpr = compat.open_jaxpr(sub) if compat.is_closed_jaxpr(
            sub) else sub
        result.add_nested(self.folded(sub_jaxpr, None),
                          f"{i} ({eqn.primitive.name})")
    result.outs = tuple(map(is_constant, jaxpr.outvars))
    return result

  def _inlined(self, eqn, body, place, is_constant, constant,
               result) -> None:
    """An inlined call: its body walked with the constness of its
    operands (an open body's leading operands are its constvars)."""
    sub, sub_consts = body
    operands = tuple(is_constant(a) for a in eqn.invars)
    if sub_consts or len(sub.invars) == len(operands):
      known = (True,) * len(sub.constvars) + operands
    else:  # the leading operands are the constvars
      known = operands
    inner = self.folded(sub, known)
    result.add_nested(inner, f"{place} ({eqn.primitive.name})")
    constant.update(v for v, k in zip(eqn.outvars, inner.outs) if k)


def _const_bytes(closed) -> int:
  total = 0
  for c in closed.consts:
    try:
      total += int(c.nbytes)
    except (AttributeError, TypeError):
      pass  # no array (a key array's data is counted by its own)
  return total


def folded_bytes(closed) -> tuple[int, tuple | None]:
  """(total bytes, (bytes, place, equation) of the largest) of what a
  converter may fold in `closed` (see the module doc)."""
  jaxpr = compat.open_jaxpr(closed)
  folded = _Walk().folded(jaxpr, None)
  largest = folded.largest
  if largest is not None:
    largest = (largest[0], f"equation {largest[1]}", largest[2])
  return folded.total, largest


def budget(closed) -> int:
  """The bytes a conversion of `closed` may fold: 16x its constants' bytes
  + 64 MiB, as a load's budget is of the file's size."""
  return limits.MEMORY_FACTOR * _const_bytes(closed) + limits.FIXED_OVERHEAD


def check(prog, converter: str, trusted: bool = False) -> None:
  """FormatError, naming the largest equation, if what `converter` may
  fold of `prog` (a `Program`) is over `budget`; nothing for a trusted
  program (see the module doc)."""
  if trusted or not prog.untrusted:
    return
  closed = prog.closed_jaxpr
  total, largest = folded_bytes(closed)
  allowed = budget(closed)
  if total <= allowed:
    return
  nbytes, place, eqn = largest
  shapes = ", ".join(v.aval.str_short() for v in eqn.outvars)
  raise FormatError(
      f"{place}: primitive {eqn.primitive.name} computes {shapes} "
      f"({nbytes:,} bytes) from constants alone, which {converter} folds "
      f"into the model: the program's foldable values total {total:,} "
      f"bytes, over the {allowed:,} that an untrusted program with "
      f"{_const_bytes(closed):,} bytes of constants may fold "
      f"({limits.MEMORY_FACTOR}x + {limits.FIXED_OVERHEAD >> 20} MiB); "
      "load it with trusted=True (jaxpr-load --trusted), or convert it "
      "with trusted=True, if you wrote it")
