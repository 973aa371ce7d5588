"""`custom_jvp_call`'s `jvp_jaxpr_fun`: the JVP rule stored as one jaxpr per
pattern of symbolic-zero tangents, and loaded as a rule that returns them
(the format: jaxpr_io/families/custom_rules/registrations.py).
"""

from __future__ import annotations

from jaxpr_io import compat
# What custom_jvp and custom_vjp rules share: the family's internals, hence
# the private names.
from jaxpr_io.families.custom_rules.common import (
    _add_raising, _bools, _check_consts, _check_wrapped, _closed,
    _decode_stored, _Definer, _Definition, encode_debug, _Eqn, _fingerprint,
    _inputless_key, _link_refs, _loaded, _PLACEHOLDER, raised_error,
    RaisingRule, _Ref, _STATE, symbolic_patterns, _wrap)
from jaxpr_io.errors import FormatError, UnsupportedError
from jaxpr_io.families.custom_rules import common
from jaxpr_io.families.custom_rules import rule_types
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.families.custom_rules import wide


class _JvpRule(_Definer):
  """`jvp_jaxpr_fun`: tangent zero pattern -> (jaxpr, consts, out_zeros)."""

  family = "jvp"
  __slots__ = ("rules", "widened")

  def __call__(self, *in_zeros):
    pattern = tuple(bool(z) for z in in_zeros)
    rule = self.rules.get(pattern) or self._widened(pattern)
    if rule is None:
      raise UnsupportedError(
          f"the JVP rule of custom_jvp function {self.eqn_name!r} was saved "
          f"for the symbolic-zero tangent patterns {sorted(self.rules)}, but "
          f"JAX asks for {pattern}")
    if type(rule) is RaisingRule:
      rule.throw()
    return rule

  def _widened(self, pattern):
    """The rule for `pattern` made from a stored one with fewer zero
    tangents (over MAX_PATTERN_INPUTS inputs), or None."""
    covering = wide.covering_pattern(self.rules, pattern, False)
    if covering is None or type(self.rules[covering]) is RaisingRule:
      return self.rules.get(covering)
    if pattern not in self.widened:
      self.widened[pattern] = wide.widened_jvp(self.rules[covering],
                                               covering, pattern)
    return self.widened[pattern]


class _JvpRef(_Ref):
  family = "jvp"
  __slots__ = ()

  def __call__(self, *in_zeros):
    return self.resolved()(*in_zeros)

  def definition(self):
    return self.resolved()


def _trace_jvp(fun, pattern, eqn: _Eqn) -> tuple:
  try:
    jaxpr, consts, out_zeros = compat_custom_rules.call_isolated(
        fun, *pattern)
  except UnsupportedError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # The user's rule runs here and may raise anything; some raise on
    # purpose (Equinox's `nondifferentiable`): the original program raises
    # when this derivative is asked for, and so will the loaded one.
    return (pattern, raised_error(e))
  _check_consts(consts, "JVP rule", fun, eqn)
  out_zeros = tuple(bool(z) for z in out_zeros)
  if len(out_zeros) != eqn.n_out:
    raise UnsupportedError(
        f"the JVP rule of custom_jvp function {eqn.name!r} reports "
        f"{len(out_zeros)} outputs for a function with {eqn.n_out}")
  return (pattern, compat.make_closed(jaxpr, consts), out_zeros)


def _widest(avals, eqn: _Eqn) -> tuple[bool, ...]:
  """The pattern with the fewest zero tangents JAX can ask for, which
  serves every other (`_JvpRule._widened`)."""
  if not eqn.symbolic_zeros:
    return (False,) * eqn.n_in
  free = set(common.free_inputs(avals))
  return tuple(i not in free for i in range(eqn.n_in))


def encode_jvp_rule(fun, params: dict):
  """The stored `jvp_jaxpr_fun` (see jaxpr_io/families/custom_rules/registrations.py)."""
  if _STATE.fingerprinting:
    return _PLACEHOLDER
  rule = _loaded(fun)
  if rule is not None:
    return rule.encode()
  eqn = _Eqn("custom_jvp", params, UnsupportedError)
  _check_wrapped(fun, eqn, "jvp_jaxpr_fun")
  debug = encode_debug(fun.debug_info)
  if not eqn.in_avals:
    return ("jvp", _inputless_key("custom_jvp", eqn, debug), debug, ())
  avals = eqn.in_avals[eqn.num_consts:]
  rules = None
  if eqn.symbolic_zeros and wide.over_limit(avals):
    rules = tuple(wide.widest_rules(
        avals, True, lambda p: _trace_jvp(fun, p, eqn),
        lambda rule: len(rule) == 2, fun))
    patterns, first = tuple(rule[0] for rule in rules), rules[0]
  else:
    # Without symbolic zeros, JVPTrace and LinearizeTrace instantiate zero
    # tangents, so `lift_jvp` only ever asks for the all-False pattern.
    patterns = (symbolic_patterns(avals, eqn, "differentiable inputs", True)
                if eqn.symbolic_zeros else ((False,) * eqn.n_in,))
    first = _trace_jvp(fun, patterns[0], eqn)  # no zeros: the widest
    patterns = wide.affordable(patterns, first, fun)
  key = _fingerprint(("custom_jvp", debug, eqn.num_consts,
                      eqn.symbolic_zeros, eqn.call_jaxpr, patterns, first))
  if ("jvp", key) in _STATE.definitions:
    return ("jvp_ref", key, debug)
  if common.beyond_order():
    return ("jvp", key, debug, ((_widest(avals, eqn), common.unsaved_rule_error(
        "JVP rule", "custom_jvp", eqn.name)),))
  if rules is None:
    rules = (first, *(_trace_jvp(fun, p, eqn) for p in patterns[1:]))
  return _Definition(("jvp", key), ("jvp", key, debug, rules))


def decode_jvp_rule(stored, params: dict):
  """The `jvp_jaxpr_fun` of a stored value: an `lu.WrappedFun`."""
  eqn, key, debug_info, rules, ref = _decode_stored(
      stored, params, "custom_jvp", "jvp", "JVP rule", _JvpRef)
  if ref is not None:
    return ref
  table = {}
  for i, rule in enumerate(rules):
    if type(rule) is tuple and len(rule) == 2:  # a rule that raises
      _add_raising(table, _bools(rule[0], eqn.n_in,
                                 f"JVP rule {i}'s in_zeros"), rule[1],
                   f"JVP rule {i}")
      continue
    if type(rule) is not tuple or len(rule) != 3:
      raise FormatError(f"JVP rule {i} is not (in_zeros, jaxpr, out_zeros) "
                        "or (in_zeros, error)")
    in_zeros = _bools(rule[0], eqn.n_in, f"JVP rule {i}'s in_zeros")
    closed = _closed(rule[1], f"JVP rule {i}")
    out_zeros = _bools(rule[2], eqn.n_out, f"JVP rule {i}'s out_zeros")
    n_in = eqn.n_in + in_zeros.count(False)
    n_out = eqn.n_out + out_zeros.count(False)
    if (len(closed.jaxpr.invars) != n_in
        or len(closed.jaxpr.outvars) != n_out):
      raise FormatError(
          f"JVP rule {i} of {eqn.name!r} takes {len(closed.jaxpr.invars)} "
          f"inputs and returns {len(closed.jaxpr.outvars)} outputs; its "
          f"zero patterns need {n_in} and {n_out}")
    if in_zeros in table:
      raise FormatError(f"JVP rule {i} repeats the pattern {in_zeros}")
    rule_types.jvp_rule(eqn, i, in_zeros, closed.jaxpr, out_zeros)
    table[in_zeros] = (closed.jaxpr, closed.consts, list(out_zeros))
  if table and not eqn.symbolic_zeros and list(table) != [
      (False,) * eqn.n_in]:
    raise FormatError("a JVP rule with symbolic_zeros=False is stored for "
                      "the all-False pattern only")
  rule = _JvpRule(stored, key, eqn)
  rule.rules = table
  rule.widened = {}
  rule.bodies = [r[1] for r in rules if len(r) == 3]
  _link_refs(rule, rule)
  return _wrap(rule, debug_info)
