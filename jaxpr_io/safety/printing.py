"""What `jax.debug.print` and `jax.debug.log` may do from an untrusted file.

A `debug_print` equation formats its operands with `str.format` under the
numpy print options stored in it (`np_printoptions`), and a `jax.debug.log`
equation hands the text to JAX's logger in a `logging.LogRecord` stored in
it (`logging_record`). A file chooses both, and its program may build the
arrays it prints itself, as large as their avals say. For an untrusted file:

* **printed characters**: the most that one call can print is computed from
  the equation's format string, print options and operand avals
  (`call_bound`), and an equation whose bound exceeds
  `limits.MAX_PRINTED_CHARACTERS` is refused with a FormatError naming it.
  Refused rather than clamped: the program prints exactly what it printed
  when it was saved, or does not load; `trusted=True` lifts the limit.
  The bound is an upper bound of numpy's and JAX's output, elements,
  brackets, separators, line breaks and summary markers included
  (tests/hostile/test_printing.py compares it with what they print).
* **log records**: the stored logger name, level and source location are
  replaced by `UNTRUSTED_LOGGER` at INFO (the level `jax.debug.log` logs at)
  with no source location, so that a file cannot log as the application's
  own loggers or at its levels (`untrusted_record`).
"""

from __future__ import annotations

import logging
import math
import string
from typing import Any

import jax
import ml_dtypes
import numpy as np

from jaxpr_io.format import limits

# The logger name of the records an untrusted program logs.
UNTRUSTED_LOGGER = "jaxpr_io.program"

# JAX's own text around a printed array: `Array(`, `, dtype=float32,
# weak_type=True)`, a key array's `overlaying:` line, ...
_PER_ARRAY = 160
# Around each element: separators, the brackets, line breaks and indentation
# of the blocks it closes, a wrapped line's indentation; per dimension and
# fixed. An upper bound of numpy's `_formatArray` (see the test).
_PER_ELEMENT_PER_DIM = 6
_PER_ELEMENT = 44
# A container's text around each of its leaves (a field name, `, `).
_PER_LEAF = 64
# Numbers that a 0-d operand's own format spec (`{x:>20.5f}`) may add.
_SPEC_EXTRA = 16


def untrusted_record(record: Any) -> logging.LogRecord:
  """The record an untrusted program logs instead of the stored `record`:
  jaxpr_io's logger name, level INFO, no source location."""
  del record
  return logging.LogRecord(UNTRUSTED_LOGGER, logging.INFO, "(unknown file)",
                           0, "", (), None)


# ------------------------------------------------------------ element widths
def _float_digits(dtype) -> tuple[int, int]:
  """(fraction digits of the smallest subnormal, significant digits that
  tell values apart) of a float dtype."""
  info = ml_dtypes.finfo(dtype)
  tiny = float(getattr(info, "smallest_subnormal", info.tiny))
  frac_digits = int(math.ceil(-math.log10(tiny))) + 1
  return frac_digits, int(info.precision) + 3


def _int_width(dtype) -> int:
  info = ml_dtypes.iinfo(dtype)
  return max(len(str(int(info.min))), len(str(int(info.max))) + 1)


# numpy prints an array positionally only when its largest magnitude is
# below 1e8 (FloatingFormat.fillFormat); otherwise in scientific notation.
_POSITIONAL_INT_DIGITS = 8


def _float_width(dtype, opts: dict) -> int:
  """Characters of one float as numpy prints it under `opts`: positional or
  scientific, padded to the widest element, or nan/inf."""
  frac_digits, sig_digits = _float_digits(dtype)
  precision = opts.get("precision")
  precision = 8 if type(precision) is not int else precision
  if opts.get("floatmode") == "unique":
    # The precision is ignored: the shortest digits that tell values apart,
    # positionally below 1e-4 only with `suppress`.
    frac = (frac_digits if opts.get("suppress") else 4) + sig_digits
    digits = sig_digits
  else:
    frac = digits = precision
  positional = 2 + _POSITIONAL_INT_DIGITS + 1 + frac
  scientific = 2 + 1 + 1 + digits + 6
  special = 1 + max(len(str(opts.get("nanstr", "nan"))),
                    len(str(opts.get("infstr", "inf"))))
  return max(positional, scientific, special)


def element_width(dtype, opts: dict) -> int:
  """The most characters numpy prints for one element of `dtype`."""
  try:
    dtype = np.dtype(dtype)
  except TypeError:
    # A JAX extended dtype (a PRNG key): its data as uint32s.
    return 48 + 12 * max(1, int(getattr(dtype, "itemsize", 16) or 16))
  if dtype == np.bool_:
    return 6
  try:
    if dtype.kind in "iu" or _is_ml_int(dtype):
      return _int_width(dtype)
    if dtype.kind == "c":
      half = np.dtype(f"f{dtype.itemsize // 2}")
      return 2 * _float_width(half, opts) + 2
    if dtype.kind == "f" or _is_ml_float(dtype):
      # numpy prints types it does not know (bfloat16, float8) with repr.
      return max(_float_width(dtype, opts), 48)
  except (ValueError, TypeError):
    pass
  # Anything else (a key's or float0's data, ...): its bytes as uint32s.
  return 48 + 12 * max(1, dtype.itemsize)


def _is_ml_int(dtype) -> bool:
  try:
    ml_dtypes.iinfo(dtype)
    return True
  except (ValueError, TypeError):
    return False


def _is_ml_float(dtype) -> bool:
  try:
    ml_dtypes.finfo(dtype)
    return True
  except (ValueError, TypeError):
    return False


# ------------------------------------------------------------ arrays
def printed_elements(shape, opts: dict) -> tuple[int, int]:
  """(elements, `...` markers) numpy prints of an array of `shape` under
  `opts`. A symbolic dimension (not an int) counts as larger than any
  threshold and any 2 * edgeitems."""
  threshold = opts.get("threshold", 1000)
  edge = opts.get("edgeitems", 3)
  concrete = all(type(d) is int for d in shape)
  size = math.prod(shape) if concrete else None
  summarized = [(type(d) is not int or d > 2 * edge) for d in shape]
  if concrete and size <= threshold:
    return size, 0
  elements, markers, blocks = 1, 0, 1
  for d, summary in zip(shape, summarized):
    if summary:
      markers += blocks
      m = 2 * edge
    else:
      m = d
    blocks *= m
    elements *= m
  if not concrete:
    # Not summarized at all when the actual size is within the threshold.
    elements = max(elements, threshold)
  return elements, markers


def array_bound(shape, dtype, opts: dict) -> int:
  """The most characters of `str` or `repr` of one JAX array."""
  ndim = len(shape)
  elements, markers = printed_elements(shape, opts)
  per = element_width(dtype, opts) + _PER_ELEMENT_PER_DIM * ndim + (
      _PER_ELEMENT)
  width = max(opts.get("linewidth", 75), 1)
  # JAX's repr of an empty array spells out its shape: `[], shape=(0, 7)`.
  return _PER_ARRAY + 24 * ndim + (elements + markers + 1) * per + width


def _spec_bound(aval, spec: str) -> int:
  """A 0-d operand formatted with its own spec (`{x:>20.5f}`): Python's
  `format` of the scalar, which prints every integer digit (1e308 with
  `.2f` is 312 characters), grouped, then padded to the width."""
  widest = _spec_width(spec)
  digits = _max_digits(getattr(aval, "dtype", None))
  # Real and imaginary parts, each with grouping, sign, point, exponent.
  return max(widest, 2 * (digits + digits // 3 + widest + _SPEC_EXTRA))


def _max_digits(dtype) -> int:
  """Integer digits of the largest magnitude of `dtype`."""
  try:
    dtype = np.dtype(dtype)
    if dtype.kind == "c":
      dtype = np.dtype(f"f{dtype.itemsize // 2}")
    if dtype.kind == "f" or _is_ml_float(dtype):
      return int(math.log10(float(ml_dtypes.finfo(dtype).max))) + 1
  except (TypeError, ValueError):
    pass
  return 64


class _Leaf:
  """A printed operand: its bound with and without a spec."""

  def __init__(self, aval, opts):
    self.aval, self.opts = aval, opts
    shape = tuple(getattr(aval, "shape", ()))
    self.plain = array_bound(shape, getattr(aval, "dtype", np.uint8), opts)

  def bound(self, spec: str) -> int:
    if spec and len(getattr(self.aval, "shape", ())) == 0:
      return max(self.plain, _spec_bound(self.aval, spec))
    return self.plain


class _Static:
  """A stored static argument (a string, a number): printed as it is."""

  def __init__(self, value):
    self.value = value
    self.plain = max(_safe_len(str, value), _safe_len(repr, value))

  def bound(self, spec: str) -> int:
    if not spec:
      return self.plain
    return max(self.plain, _safe_len(lambda v: format(v, spec), self.value))


def _safe_len(fn, value) -> int:
  try:
    return len(fn(value))
  except (TypeError, ValueError, OverflowError):
    return 0


def _subtree_bound(obj, spec: str) -> int:
  """An argument of `(args, kwargs)`: a leaf, or a container, printed with
  the repr of its leaves within its own text (brackets, keys, field
  names: its treedef's text, and some per leaf)."""
  if isinstance(obj, (_Leaf, _Static)):
    return obj.bound(spec)
  leaves, treedef = jax.tree_util.tree_flatten(
      obj, is_leaf=lambda x: isinstance(x, (_Leaf, _Static)))
  return (sum(leaf.bound("") for leaf in leaves) + len(str(treedef))
          + _PER_LEAF * len(leaves) + _PER_ARRAY)


# ------------------------------------------------------------ one call
def options_of(params: dict) -> dict:
  """The print options a call runs under: the stored ones over the process's
  current ones (JAX applies the stored ones with `np.printoptions`, in which
  None keeps the current value)."""
  opts = dict(np.get_printoptions())
  for item in params.get("np_printoptions", ()) or ():
    if type(item) is tuple and len(item) == 2 and item[1] is not None:
      opts[item[0]] = item[1]
  return opts


def call_bound(params: dict, avals) -> int:
  """The most characters one call of a `debug_print` equation with `params`
  and operands of `avals` prints."""
  fmt = params.get("fmt") or ""
  in_tree = params.get("in_tree")
  has_placeholders = params.get("has_placeholders", True)
  # Without placeholders JAX prints `str` of each argument under the
  # process's own options.
  opts = (options_of(params) if has_placeholders
          else dict(np.get_printoptions()))
  statics = dict(params.get("static_args", ()) or ())
  avals = list(avals)
  if in_tree is None:
    return len(fmt) + sum(_Leaf(a, opts).plain + 1 for a in avals)
  leaves, dynamic = [], iter(avals)
  for i in range(in_tree.num_leaves):
    leaves.append(_Static(statics[i]) if i in statics
                  else _Leaf(next(dynamic, None), opts))
  args, kwargs = in_tree.unflatten(leaves)
  if not has_placeholders:
    return len(fmt) + sum(_subtree_bound(a, "") + 1 for a in args)
  total, auto = len(fmt), 0
  for _, field, spec, conversion in string.Formatter().parse(fmt):
    if field is None:
      continue
    if field == "":
      obj, auto = (args[auto] if auto < len(args) else None), auto + 1
    elif field.isdigit():
      obj = args[int(field)] if int(field) < len(args) else None
    else:
      obj = kwargs.get(field)
    if obj is None:
      continue
    # A conversion (!r) formats the text, whose width the spec may pad.
    text = _subtree_bound(obj, "" if conversion else (spec or ""))
    total += max(text, _spec_width(spec)) if conversion else text
  return total


def _spec_width(spec: str | None) -> int:
  """The widest number in a format spec: at least its width."""
  numbers = "".join(c if c.isdigit() else " " for c in (spec or "")).split()
  return max((int(n) for n in numbers), default=0)


def equation_problem(eqn) -> str | None:
  """Why an untrusted file may not hold this `debug_print` equation, or
  None: one call could print more than `limits.MAX_PRINTED_CHARACTERS`."""
  avals = [getattr(v, "aval", None) for v in eqn.invars]
  bound = call_bound(eqn.params, avals)
  if bound <= limits.MAX_PRINTED_CHARACTERS:
    return None
  shapes = ", ".join(a.str_short() if hasattr(a, "str_short") else str(a)
                     for a in avals[:4])
  return (f"param 'np_printoptions': one call could print up to {bound:,} "
          f"characters (operands {shapes}{', ...' if len(avals) > 4 else ''};"
          f" print options threshold={options_of(eqn.params).get('threshold')}"
          f", edgeitems={options_of(eqn.params).get('edgeitems')}, "
          f"precision={options_of(eqn.params).get('precision')}), over the "
          f"limit of {limits.MAX_PRINTED_CHARACTERS:,} for an untrusted "
          "file; load it with trusted=True if you wrote it")
