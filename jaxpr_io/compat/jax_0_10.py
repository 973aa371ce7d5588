"""Adapter for JAX 0.10.x: this release's objects <-> the format vocabulary.

The format's vocabulary (jaxpr_io/vocabulary.py) was first written from JAX
0.10, so most primitives and params pass through unchanged. What differs:

* `jit`'s `inline` is a bool here and one of the vocabulary's inline modes
  in the file: False is "auto", True is "jax_late" (the mapping JAX 0.11
  itself applies to `inline=True`). The modes "jax_early", "xla_early" and
  "xla_late" have no bool and are refused on load.
* `scan`'s optional `ft_in`/`ft_out` (how JAX 0.11+ groups the operands) are
  skipped unread: this release groups by `num_consts`/`num_carry`.
* Params that later releases added (`vocabulary.OPTIONAL_PARAMS`) are
  dropped when they hold the value that means this release's behaviour.
"""

from __future__ import annotations

from jaxpr_io import vocabulary
from jaxpr_io.compat.adapter import Adapter
from jaxpr_io.errors import FormatError

_INLINE_TO_BOOL = {"auto": False, "jax_late": True}


def _jit_to_format(params):
  inline = params.get("inline")
  if type(inline) is bool:
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


class Jax010(Adapter):
  release_line = "0.10"
  params_to_format = {"jit": _jit_to_format}
  params_from_format = {"jit": _jit_from_format}
  # JAX 0.11+'s FlatTree grouping of scan's operands; the counts suffice.
  skipped_params = vocabulary.RELEASE_HINT_PARAMS
  # jaxlib 0.10's while-loop trip-count analysis takes `i + i` for
  # `i + constant` and fails a CHECK (found by tests/fuzz; fixed by 0.12).
  compiler_aborts = frozenset({"while_self_add_induction"})


ADAPTER = Jax010()
