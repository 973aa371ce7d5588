"""`call_hi_primitive_linearized`'s params in each release's form.

JAX binds it (jax._src.hijax.fake_linear_op) in the linear jaxpr that
`jax.vjp` builds for a hi primitive: its inputs are the leaves of the
`vjp_fwd` rule's residuals (`residuals_tree`), then the tangents that are
not symbolic zeros (`nz_in_flat`). Its params grew with the releases:

  JAX 0.10.x          _prim, residuals_tree, nz_in_flat
                      (a tangent output per output of `_prim`)
  JAX 0.11.0          + nz_out_flat (which outputs have a tangent)
  JAX 0.11.1 - 0.12   + has_sres (the residuals are a pair: the rule's
                      residuals and its structured residuals)

The vocabulary holds the newest form: a release without a param writes the
value under which its primitive behaves as it does (every output has a
tangent; no structured residuals) and, reading, drops the param when it
holds that value and refuses the file otherwise. The release's form is
read off the signature of its abstract evaluation rule, since the param
set changed within the 0.11 line.
"""

from __future__ import annotations

import inspect

from jax._src import hijax as jax_hijax

from jaxpr_io.format import vocabulary
from jaxpr_io.errors import FormatError

NAME = "call_hi_primitive_linearized"
_HERE = inspect.signature(
    jax_hijax._call_hi_primitive_linearized_abstract_eval).parameters  # pylint: disable=protected-access
HAS_NZ_OUT = "nz_out_flat" in _HERE
HAS_SRES = "has_sres" in _HERE


def _to_format(params):
  if not HAS_NZ_OUT:
    # A `_prim` that is no hi primitive is refused by its codec next.
    outs = getattr(params.get("_prim"), "out_avals_flat", ())
    params["nz_out_flat"] = (True,) * len(outs)
  if not HAS_SRES:
    params["has_sres"] = False
  return params


def _from_format(params, where):
  for param in ("nz_out_flat", "has_sres"):
    if param not in params:
      raise FormatError(f"{NAME} lacks param {param!r}, which every file "
                        "holds (jaxpr_io/compat/hi_linearized.py)")
  if not HAS_NZ_OUT:
    value = params.pop("nz_out_flat")
    if type(value) is not tuple or not all(v is True for v in value):
      raise FormatError(vocabulary.unrepresentable(
          where, NAME, "nz_out_flat", value,
          "this JAX's linearized hi primitives return a tangent for every "
          "output"))
  if not HAS_SRES:
    value = params.pop("has_sres")
    if value is not False:
      raise FormatError(vocabulary.unrepresentable(
          where, NAME, "has_sres", value,
          "this JAX's hi primitives have no structured residuals"))
  return params


# The adapters' rules for this release.
TO_FORMAT = {} if HAS_NZ_OUT and HAS_SRES else {NAME: _to_format}
FROM_FORMAT = {NAME: _from_format}
