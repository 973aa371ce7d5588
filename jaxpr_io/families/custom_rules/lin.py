"""Storing `custom_lin`: the linearized `jax.custom_vjp` call.

`jax.linearize` (and the linearization inside `grad` and `vjp`) replaces a
`custom_vjp_call` by its forward rule and one `custom_lin` equation: the
linear part, which takes the residuals and the non-zero input tangents and
returns the output tangents. It cannot run forward (its impl, batching rule
and lowering raise "can't apply forward-mode autodiff (jvp) to a custom_vjp
function", on purpose); its transpose calls `bwd` on the residuals and the
output cotangents. Params (JAX 0.10 to 0.12): `num_res` (int), `bwd` (an
`lu.WrappedFun`: the custom_vjp's backward rule, as `custom_vjp_call`'s
`bwd` wrapped to also give the function's constants zero cotangents; from
JAX 0.11 on it returns `(cotangents, logs)`), `out_avals` (a list of the
output tangent types), `symbolic_zeros` (bool) and `in_zeros` (a list of
bools, one per input of the custom_vjp function, True where its tangent is
a symbolic zero and so not an input of the equation).

What is stored, per param (inside `Value.param_codec`):

* `bwd`: `("lin_bwd", debug, n_in, n_out, rules)`: `debug` the rule's debug
  info as in jaxpr_io/families/custom_rules/registrations.py (JAX prints `bwd=` its function
  name), `n_in` the number of cotangents it returns (`len(in_zeros)`),
  `n_out` the number of cotangents it takes (`len(out_avals)`), and `rules`
  the backward rule traced over the residual types (the equation's first
  `num_res` inputs) and the cotangent types (`to_ct_aval` of `out_avals`),
  in the form custom_rules.py stores `custom_vjp_call`'s backward rules:
  `(ct_zeros, jaxpr, cts_in_zeros, zero_types)`, or `(ct_zeros, error)`
  for a pattern the rule raises for when traced (the loaded rule raises it
  when the program is transposed, as the original does; `RaisingRule`).
  One rule with `symbolic_zeros=False`, one per pattern of zero
  cotangents (at most `MAX_PATTERN_INPUTS` differentiable outputs) with
  `symbolic_zeros=True`.
* `out_avals`: a tuple of avals; `in_zeros`: a tuple of bools. Both are
  Python lists in JAX (so JAX prints `in_zeros=[False]`), a type the value
  codecs do not store; they are rebuilt as lists.

The rules' jaxprs are data, like any other sub-jaxpr; a custom_vjp call
inside them is stored by custom_rules.py. No code is stored. Added after the
first release of format version 7, without a schema change (an older
reader refuses such a file, naming the param it has no codec for).
Importing this module registers the codecs.
"""

from __future__ import annotations

from typing import Any

from jaxpr_io import compat
from jaxpr_io.families.custom_rules import common as custom_rule_common
from jaxpr_io.families.custom_rules import bwd_table
from jaxpr_io.families.custom_rules import rule_types
from jaxpr_io.families.custom_rules import vjp as custom_vjp
from jaxpr_io.families.custom_rules import wide
from jaxpr_io.codec import registry
from jaxpr_io.compat import specialize
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.errors import FormatError, UnsupportedError

PRIMITIVE = "custom_lin"


class _LinEqn:
  """What the backward-rule helpers of bwd_table.py use of an equation:
  the function's name for messages, and the rule's shape."""

  __slots__ = ("kind", "name", "n_in", "n_out", "symbolic_zeros")

  def __init__(self, name: str, n_in: int, n_out: int, symbolic_zeros: bool):
    self.kind = "linearized custom_vjp"
    self.name = name
    self.n_in = n_in
    self.n_out = n_out
    self.symbolic_zeros = symbolic_zeros


class _LinBwd(rule_types.LinRule):
  """A loaded `bwd`: (*residuals, *cotangents) -> input cotangents. `stored`
  is the decoded value, which a re-dump stores unchanged. Its types are
  checked against each equation that holds it (`rule_types.lin_problem`,
  jaxpr_io/read/equations.py)."""

  __slots__ = ("stored", "table", "n_res", "eqn")

  def __init__(self, stored, table: dict, n_res: int | None, eqn: _LinEqn):
    self.stored = stored
    self.table = table
    self.n_res = n_res
    self.eqn = eqn

  def __call__(self, *args):
    return bwd_table.call_bwd_table(self.table, self.eqn.n_out,
                                     self.eqn.symbolic_zeros,
                                     self.eqn.name, args)


def _loaded(value):
  if compat_custom_rules.is_plain_wrapped(value) and type(value.f) is _LinBwd:
    return value.f
  return None


def _marked(stored: tuple) -> tuple:
  """The stored value with the rules' `zero_types` marked open, so every
  release writes the same bytes (custom_rule_common.mark_bwd_rules)."""
  kind, debug, n_in, n_out, rules = stored
  return (kind, debug, n_in, n_out, custom_rule_common.mark_bwd_rules(rules))


def _plain(params: dict, error: type) -> tuple[int, bool]:
  num_res, symbolic_zeros = params.get("num_res"), params.get(
      "symbolic_zeros")
  if type(num_res) is not int or num_res < 0 or type(
      symbolic_zeros) is not bool:
    raise error("a custom_lin equation needs an int num_res >= 0 and a bool "
                "symbolic_zeros")
  return num_res, symbolic_zeros


def encode_bwd(fun, params: dict):
  """The stored `bwd` (see the module docstring): the rule traced at the
  equation's residual and cotangent types."""
  rule = _loaded(fun)
  if rule is not None:
    return _marked(rule.stored)
  if not isinstance(fun, compat_custom_rules.WrappedFun):
    raise UnsupportedError(
        f"bwd is a {type(fun).__name__}, not the lu.WrappedFun JAX makes; "
        "only equations traced by JAX can be stored")
  num_res, symbolic_zeros = _plain(params, UnsupportedError)
  in_avals = registry.equation_in_avals()
  out_avals, in_zeros = params.get("out_avals"), params.get("in_zeros")
  if (type(out_avals) is not list or type(in_zeros) is not list
      or in_avals is None or len(in_avals) < num_res):
    raise UnsupportedError("the custom_lin equation's out_avals, in_zeros "
                           "or residuals do not fit num_res")
  debug = custom_rule_common.encode_debug(fun.debug_info)
  eqn = _LinEqn(fun.debug_info.func_name, len(in_zeros), len(out_avals),
                symbolic_zeros)
  ct_avals = [a.to_ct_aval() for a in out_avals]
  if symbolic_zeros:
    patterns = wide.stored_patterns(
        ct_avals, eqn, "differentiable outputs", True, fun)
  else:
    # JAX instantiates zero cotangents for these rules (0.10's
    # `_custom_lin_transpose`; from 0.11 on the rule itself does).
    patterns = ((False,) * eqn.n_out,)
  rules = tuple(bwd_table.trace_bwd(fun, eqn, list(in_avals[:num_res]),
                                     ct_avals, p) for p in patterns)
  return _marked(("lin_bwd", debug, eqn.n_in, eqn.n_out, rules))


def decode_bwd(stored, params: dict):
  """The `bwd` of a stored value: an `lu.WrappedFun`."""
  _, symbolic_zeros = _plain(params, FormatError)
  if (type(stored) is not tuple or len(stored) != 5
      or stored[0] != "lin_bwd" or type(stored[2]) is not int
      or type(stored[3]) is not int or stored[2] < 0 or stored[3] < 0
      or type(stored[4]) is not tuple):
    raise FormatError("the stored custom_lin bwd is not ('lin_bwd', debug, "
                      "n_in, n_out, rules)")
  _, debug, n_in, n_out, rules = stored
  debug_info = custom_rule_common.decode_debug(debug)
  limit = (1 << min(n_out, custom_rule_common.MAX_PATTERN_INPUTS)
           if symbolic_zeros else 1)
  if not 0 < len(rules) <= limit:
    raise FormatError(f"the custom_lin backward rule needs 1 to {limit} "
                      f"jaxprs, not {len(rules)}")
  eqn = _LinEqn(debug_info.func_name, n_in, n_out, symbolic_zeros)
  table, n_res = bwd_table.decode_bwd_table(rules, eqn)
  rule = _LinBwd(stored, table, n_res, eqn)
  bwd = compat_custom_rules.wrap_init(rule, debug_info)
  _cross_check(dict(params, bwd=bwd))
  return bwd


def encode_list(value, params: dict):
  """`out_avals` or `in_zeros`: a list, stored as a tuple."""
  del params
  if type(value) is not list:
    raise UnsupportedError(f"expected a list, got a {type(value).__name__}")
  return tuple(value)


def _decode_list(param: str, check):
  def decode(stored, params: dict):
    if type(stored) is not tuple or not all(map(check, stored)):
      raise FormatError(f"custom_lin's {param} is not a tuple of the "
                        "expected values")
    value = list(stored)
    _cross_check(dict(params, **{param: value}))
    return value
  return decode


def _cross_check(params: dict) -> None:
  """Checks `bwd`'s shape against `out_avals`, `in_zeros` and `num_res`
  once all three are decoded (they are decoded one by one, in file order).
  The equation's own inputs and outputs are checked by validate.py."""
  rule = _loaded(params.get("bwd"))
  out_avals, in_zeros = params.get("out_avals"), params.get("in_zeros")
  if rule is None or type(out_avals) is not list or type(in_zeros) is not list:
    return
  num_res = params.get("num_res")
  if (rule.eqn.n_in != len(in_zeros) or rule.eqn.n_out != len(out_avals)
      or rule.n_res not in (num_res, None)):
    raise FormatError(
        f"custom_lin's backward rule takes {rule.n_res} residuals and "
        f"{rule.eqn.n_out} cotangents and returns {rule.eqn.n_in}; the "
        f"equation has num_res={num_res}, {len(out_avals)} outputs and "
        f"{len(in_zeros)} in_zeros")


_AVAL_TYPES = (compat.ShapedArray, compat.AbstractToken, compat.AbstractRef)


def _is_aval(value: Any) -> bool:
  return isinstance(value, _AVAL_TYPES)


# `bwd` is traced at the equation's residual types: its first inputs.
registry.register_eqn_param_codec(PRIMITIVE, "bwd", encode=encode_bwd,
                                  decode=decode_bwd, needs_in_avals=True)
registry.register_eqn_param_codec(
    PRIMITIVE, "out_avals", encode=encode_list,
    decode=_decode_list("out_avals", _is_aval))
registry.register_eqn_param_codec(
    PRIMITIVE, "in_zeros", encode=encode_list,
    decode=_decode_list("in_zeros", lambda b: type(b) is bool))


specialize.register_specializer(
    value_type=_LinBwd,
    specialize=lambda rule, sp: custom_vjp.SpecializedBwd(
        lambda: (rule.table, rule.eqn.n_out, rule.eqn.symbolic_zeros,
                 rule.eqn.name), sp))
