"""Adapter for JAX 0.10.x: this release's objects <-> the format vocabulary.

The format's vocabulary (jaxpr_io/vocabulary.py) was first written from JAX
0.10, so most primitives and params pass through unchanged. What differs:

* `jit`'s `inline` is a bool here and one of the vocabulary's inline modes
  in the file: False is "auto", True is "jax_late" (the mapping JAX 0.11
  itself applies to `inline=True`). The modes "jax_early", "xla_early" and
  "xla_late" have no bool and are refused on load.
* `scan`'s optional `ft_in`/`ft_out` (how JAX 0.11+ groups the operands) are
  dropped: this release reads the grouping from `num_consts`/`num_carry`.
"""

from __future__ import annotations

from jaxpr_io import vocabulary
from jaxpr_io.errors import FormatError

RELEASE_LINE = "0.10"

# Record types that only this release has: (class, name, encode, decode).
RECORD_CODECS: list = []


def _jit_to_format(params):
  inline = params.get("inline")
  if type(inline) is bool:
    params = dict(params)
    params["inline"] = "jax_late" if inline else "auto"
  return params


def _jit_from_format(params, where):
  inline = params.get("inline")
  if type(inline) is str:
    if inline not in _INLINE_TO_BOOL:
      raise FormatError(vocabulary.unrepresentable(
          where, "jit", "inline", inline,
          "this JAX has only inline=False ('auto') and inline=True "
          "('jax_late')"))
    params["inline"] = _INLINE_TO_BOOL[inline]
  return params


_INLINE_TO_BOOL = {"auto": False, "jax_late": True}


def _scan_from_format(params, where):
  del where
  params.pop("ft_in", None)
  params.pop("ft_out", None)
  return params


_TO_FORMAT = {"jit": _jit_to_format}
_FROM_FORMAT = {"jit": _jit_from_format, "scan": _scan_from_format}


def to_format(name: str, params: dict) -> tuple[str, dict]:
  """(vocabulary name, vocabulary params) of an equation of this release.
  Returns `params` itself when nothing changes (the writer caches by it)."""
  rule = _TO_FORMAT.get(name)
  return name, (params if rule is None else rule(params))


def from_format(name: str, params: dict, where) -> tuple[str, dict]:
  """(this release's primitive name, params) of a vocabulary equation.
  `params` is a fresh dict the rule may change; `where` describes the file
  for error messages (`vocabulary.Where`)."""
  rule = _FROM_FORMAT.get(name)
  return name, (params if rule is None else rule(params, where))


def jaxpr_slot_is_closed(name: str, param: str, value) -> bool:
  """Unused on this release: closed and open jaxprs are different types."""
  del name, param, value
  raise NotImplementedError
