"""A custom_vjp's (and custom_lin's) backward rule stored as one jaxpr per
pattern of zero cotangents: traced (`trace_bwd`), read back into a table
(`decode_bwd_table`) and called from it (`call_bwd_table`). The stored form
is in registrations.py.

JAX calls a backward rule with the residuals its forward rule returned,
and passes those the forward jaxpr returns as literals (Equinox's
`perturbed` flags) as values, not tracers: a rule may branch on them in
Python. The rule traced with abstract residuals can then raise where the
original does not (Diffrax's SDE solve under `jax.grad`: "t0 cannot be
autodifferentiated"). So where the writer saw JAX call the rule with such
constants (requests.py), it also stores the rule traced with them, keyed
by both (`ResidualKey`; format version 9); the loaded rule uses that entry
when it is called with the same constants.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.errors import FormatError, UnsupportedError
# What custom_jvp and custom_vjp rules share: the family's internals, hence
# the private names.
from jaxpr_io.families.custom_rules.common import (
    _add_raising, _bools, _check_consts, _closed, raised_error, RaisingRule)
from jaxpr_io.families.custom_rules import requests
from jaxpr_io.families.custom_rules import rule_types
from jaxpr_io.families.custom_rules import wide


class ResidualKey(NamedTuple):
  """The key of a table entry traced with constant residuals: the zero
  cotangents and, per residual, its value (a numpy scalar) or None."""
  ct_zeros: tuple
  values: tuple


def _constants_match(values: tuple, res) -> bool:
  """Whether residuals `res` hold the constants `values` (None: any)."""
  for value, r in zip(values, res):
    if value is None:
      continue
    r = requests.constant_residual(r)
    if r is None or r.dtype.kind != value.dtype.kind or r != value:
      return False
  return True


def _lookup(table: dict, pattern: tuple, res):
  for key, rule in table.items():
    if (type(key) is ResidualKey and key.ct_zeros == pattern
        and _constants_match(key.values, res)):
      return rule
  return table.get(pattern)


def call_bwd_table(table: dict, n_out: int, symbolic_zeros: bool, name: str,
                   args) -> Any:
  """What a `bwd` rebuilt from `table` (`decode_bwd_table`) returns for
  residuals and `n_out` output cotangents `args`: the input cotangents
  (some `ad.Zero`), in the form the running release expects."""
  n_res = len(args) - n_out
  res, cts = args[:n_res], args[n_res:]
  if symbolic_zeros:
    pattern = tuple(compat_custom_rules.is_zero(c) for c in cts)
    nonzero = [c for c in cts if not compat_custom_rules.is_zero(c)]
  else:
    # JAX instantiates cotangents for these rules; so do we, should a
    # caller pass a symbolic zero anyway.
    pattern = (False,) * n_out
    nonzero = [compat_custom_rules.zeros_like_aval(c.aval) if compat_custom_rules.is_zero(c) else c
               for c in cts]
  rule = _lookup(table, pattern, res)
  widened = None if rule else wide.widened_cotangents(table, pattern, cts)
  if widened is not None:  # over MAX_PATTERN_INPUTS outputs
    rule, nonzero = widened
  if rule is None:
    raise UnsupportedError(
        f"the backward rule of custom_vjp function {name!r} was "
        f"saved for the zero-cotangent patterns "
        f"{sorted(k for k in table if type(k) is tuple)}, but "
        f"JAX asks for {pattern}")
  if type(rule) is RaisingRule:
    rule.throw()
  jaxpr, consts, mask, zero_avals = rule
  # In place of JAX's `_flatten_bwd`, which checks what a rule returns.
  rule_types.check_call(lambda: (
      f"the backward rule of custom_vjp function {name!r} for zero "
      f"cotangents {pattern}"), jaxpr, [*res, *nonzero])
  outs = iter(compat_custom_rules.eval_jaxpr(jaxpr, consts, *res, *nonzero))
  zeros = iter(zero_avals)
  return compat_custom_rules.bwd_result([compat_custom_rules.Zero(next(zeros)) if z else next(outs)
                         for z in mask])


def trace_bwd(bwd, eqn, res_avals, ct_avals, pattern,
              res_values=None) -> tuple:
  """A stored backward rule for one pattern of zero cotangents `pattern`:
  `(pattern, closed jaxpr, cts_in_zeros, zero_types)`, or `(pattern,
  error)` when the rule raises as it is traced (see
  jaxpr_io/families/custom_rules/registrations.py). `bwd` is called on residuals of types
  `res_avals` and the cotangents of types `ct_avals` (symbolic zeros where
  `pattern` says) and must return `eqn.n_in` input cotangents; `eqn` names
  the function in messages (`kind`, `name`). `res_values`, where given,
  holds per residual the constant the stored forward rule returns for it
  (or None): `bwd` sees those values, as it does in JAX (whose transpose
  passes the forward jaxpr's literals), where abstract residuals would make
  a rule that branches on them in Python (Equinox's `perturbed` flags)
  fail to trace; the traced jaxpr still takes every residual."""
  n_res = len(res_avals)
  zeros: list = []

  def backward(*args):
    nonzero = iter(args[n_res:])
    cts = [compat_custom_rules.SymbolicZero(a) if z else next(nonzero)
           for a, z in zip(ct_avals, pattern)]
    res = args[:n_res] if res_values is None else [
        r if v is None else v for r, v in zip(args[:n_res], res_values)]
    outs, logs = compat_custom_rules.call_bwd(bwd, *res, *cts)
    if logs is not None:
      raise UnsupportedError(
          f"the backward rule {bwd.debug_info.func_name!r} of custom_vjp "
          f"function {eqn.name!r} returns backward-pass logs "
          "(defvjp_with_logs, custom_gradient(with_logs=True)), which "
          "jaxpr_io cannot store; save the program without logging, or "
          "log only where it is not saved")
    if len(outs) != eqn.n_in:
      raise TypeError(f"it returned {len(outs)} cotangents for "
                      f"{eqn.n_in} inputs")
    zeros[:] = [o.aval if compat_custom_rules.is_zero(o) else None for o in outs]
    return [o for o in outs if not compat_custom_rules.is_zero(o)]

  in_avals = [*res_avals,
              *(a for a, z in zip(ct_avals, pattern) if not z)]
  try:
    jaxpr, consts = compat_custom_rules.trace_flat(backward, in_avals, bwd.debug_info)
  except UnsupportedError:
    raise
  except Exception as e:  # pylint: disable=broad-except
    # The user's rule runs here and may raise anything; the loaded rule
    # raises it when JAX asks for this pattern, as the original does.
    return (pattern, raised_error(e))
  _check_consts(consts, "backward rule", bwd, eqn)
  mask = tuple(a is not None for a in zeros)
  zero_avals = [a for a in zeros if a is not None]
  zero_types = None
  if zero_avals:
    binders = [compat.Var(a) for a in zero_avals]
    zero_types = compat.new_jaxpr([], binders, binders, [],
                                  compat.no_effects, _ZERO_TYPES_DEBUG,
                                  False)
  return (pattern, compat.make_closed(jaxpr, consts), mask, zero_types)


_ZERO_TYPES_DEBUG = compat.DebugInfo("jaxpr_io", "zero_cotangent_types", None,
                                     None)


def decode_bwd_table(rules: tuple, eqn, types=None) -> tuple[dict,
                                                             int | None]:
  """(key -> (jaxpr, consts, cts_in_zeros, zero avals) or RaisingRule,
  residual count or None when every pattern raises) of stored backward
  rules (see registrations.py), checked against `eqn`'s `n_in`, `n_out`
  and `symbolic_zeros`; `eqn.name` names the function in messages. A key
  is a pattern of zero cotangents, or a `ResidualKey` for a rule stored
  with the constant residuals it was traced with. `types`, where given, is
  (the output cotangent types, the input cotangent types) every rule is
  typed against (`rule_types.bwd_rule`); the residuals' types are the
  caller's to check."""
  table = {}
  n_res = None
  with_values = []  # (index, its key) of rules stored with residuals
  for i, rule in enumerate(rules):
    if type(rule) is not tuple or len(rule) not in (2, 3, 4, 5):
      raise FormatError(
          f"backward rule {i} is not (ct_zeros, jaxpr, cts_in_zeros, "
          "zero_types) or (ct_zeros, error), each with the constant "
          "residuals it was traced with or not")
    ct_zeros = _bools(rule[0], eqn.n_out, f"backward rule {i}'s ct_zeros")
    key = ct_zeros
    if len(rule) in (3, 5):
      key = ResidualKey(ct_zeros, _residual_values(rule[-1], i))
      with_values.append((i, key))
      rule = rule[:-1]
    if len(rule) == 2:  # a pattern it raises for
      _add_raising(table, key, rule[1], f"backward rule {i}")
      continue
    closed = _closed(rule[1], f"backward rule {i}")
    mask = _bools(rule[2], eqn.n_in, f"backward rule {i}'s cts_in_zeros")
    zero_types = rule[3]
    n_zero = mask.count(True)
    if n_zero == 0 and zero_types is None:
      zero_avals = []
    elif type(zero_types) is compat.Jaxpr and len(
        zero_types.invars) == n_zero:
      zero_avals = [v.aval for v in zero_types.invars]
    else:
      raise FormatError(f"backward rule {i}'s zero_types do not give one "
                        f"type for each of its {n_zero} zero cotangents")
    rule_res = len(closed.jaxpr.invars) - ct_zeros.count(False)
    if (rule_res < 0 or (n_res is not None and rule_res != n_res)
        or len(closed.jaxpr.outvars) != mask.count(False)):
      raise FormatError(
          f"backward rule {i} of {eqn.name!r} takes "
          f"{len(closed.jaxpr.invars)} inputs and returns "
          f"{len(closed.jaxpr.outvars)} cotangents, which its patterns and "
          "the other rules' residuals do not allow")
    n_res = rule_res
    if key in table:
      raise FormatError(f"backward rule {i} repeats the pattern {key}")
    if types is not None:
      rule_types.bwd_rule(f"{rule_types.bwd_name(eqn, key)} (stored rule "
                          f"{i})", closed.jaxpr, n_res, ct_zeros, mask,
                          zero_avals, *types)
    table[key] = (closed.jaxpr, closed.consts, mask, zero_avals)
  if table and not eqn.symbolic_zeros and list(table) != [
      (False,) * eqn.n_out]:
    raise FormatError("a backward rule with symbolic_zeros=False is stored "
                      "for the all-False pattern only")
  for i, key in with_values:
    if n_res is not None and len(key.values) != n_res:
      raise FormatError(f"backward rule {i} gives {len(key.values)} "
                        f"constant residuals for {n_res} residuals")
  return table, n_res


_SCALAR_TYPES = frozenset(np.dtype(c).type for c in "?bBhHiIlLqQefd")


def _residual_values(stored, i: int) -> tuple:
  """The constant residuals of backward rule `i`: numpy scalars or None,
  at least one a scalar."""
  if (type(stored) is not tuple
      or not all(v is None or type(v) in _SCALAR_TYPES for v in stored)
      or all(v is None for v in stored)):
    raise FormatError(f"backward rule {i}'s constant residuals are not a "
                      "tuple of numpy scalars (bool, int, float) and Nones "
                      "with at least one scalar")
  return stored
