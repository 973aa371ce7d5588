"""`custom_vjp_call`'s `fwd_jaxpr_thunk`, `bwd` and `out_trees`: rules
stored as jaxprs per pattern (format: registrations.py), traced once per
equation, loaded as rules returning them, residual counts cross-checked.
Backward rules are traced, read and called by bwd_table.py."""

from __future__ import annotations

from typing import Any

from jaxpr_io import compat
# What custom_jvp and custom_vjp rules share: the family's internals, hence
# the private names.
from jaxpr_io.families.custom_rules.common import (
    _add_raising, _bools, _check_consts, _check_wrapped, _closed,
    _decode_stored, _Definer, _Definition, encode_debug, _Eqn, _fingerprint,
    _inputless_key, _link_refs, _loaded, _pattern_detail, _PLACEHOLDER,
    raised_error, RaisingRule, _Ref, _rule_failed, _STATE, _wrap)
from jaxpr_io.families.custom_rules import bwd_table
from jaxpr_io.families.custom_rules import common
from jaxpr_io.families.custom_rules import requests
from jaxpr_io.families.custom_rules import rule_types
from jaxpr_io.families.custom_rules import wide
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.compat import specialize
from jaxpr_io.errors import FormatError, UnsupportedError


_VJP_CACHE_SIZE = 16


class _VjpRecord:
  """The forward and backward definitions of one custom_vjp key, the
  defining equation's stored `out_trees` once its rules are checked, and
  the refs linked to it (`_VjpRuleRef.link`)."""

  __slots__ = ("key", "fwd", "bwd", "out_info", "refs")

  def __init__(self, key: str):
    self.key = key
    self.fwd = None
    self.bwd = None
    self.out_info = None
    self.refs = []


class _FwdRule(_Definer):
  """`fwd_jaxpr_thunk`: perturbed-input pattern -> (jaxpr, consts)."""

  family = "vjp"
  __slots__ = ("rules", "record", "n_res_out")

  def __call__(self, *nonzeros):
    rule = self.rules.get(None)
    if rule is None:
      pattern = tuple(bool(z) for z in nonzeros)
      # Over MAX_PATTERN_INPUTS inputs, a stored wider pattern serves it.
      rule = self.rules.get(pattern) or self.rules.get(
          wide.covering_pattern(self.rules, pattern, True))
      if rule is None:
        raise UnsupportedError(
            f"the forward rule of custom_vjp function {self.eqn_name!r} was "
            f"saved for the perturbation patterns {sorted(self.rules)}, but "
            f"JAX asks for {pattern}")
    if type(rule) is RaisingRule:
      rule.throw()
    return rule


class _BwdRule(_Definer):
  """`bwd`: (*residuals, *cotangents) -> input cotangents (some ad.Zero)."""

  family = "vjp"
  __slots__ = ("rules", "record", "n_res", "n_out", "symbolic_zeros")

  def __call__(self, *args):
    return bwd_table.call_bwd_table(self.rules, self.n_out, self.symbolic_zeros,
                          self.eqn_name, args)


class SpecializedBwd:
  """A loaded backward rule in a program specialized to concrete sizes
  (jaxpr_io/compat/specialize.py): its jaxprs are specialized the first
  time it is called (a ref's definition is only known by then).
  `source()` gives (table, n_out, symbolic_zeros, name)."""

  __slots__ = ("source", "specializer", "parts")

  def __init__(self, source, specializer):
    self.source = source
    self.specializer = specializer
    self.parts = None

  def __call__(self, *args):
    if self.parts is None:
      table, n_out, symbolic_zeros, name = self.source()
      sp = self.specializer
      table = {pattern: rule if type(rule) is RaisingRule else (
          sp.jaxpr(rule[0]), rule[1], rule[2], [sp.aval(a) for a in rule[3]])
               for pattern, rule in table.items()}
      self.parts = (table, n_out, symbolic_zeros, name)
    return bwd_table.call_bwd_table(*self.parts, args)


def _bwd_parts(rule: "_BwdRule") -> tuple:
  return rule.rules, rule.n_out, rule.symbolic_zeros, rule.eqn_name


class _VjpRuleRef(_Ref):
  """A reference to the forward or backward rule (`rule` names which) of an
  enclosing custom_vjp definition."""
  family = "vjp"
  __slots__ = ("out_info",)
  rule = ""

  def __init__(self, stored, key: str, eqn: _Eqn):
    super().__init__(stored, key, eqn)
    # The stored `out_trees` of the ref's equation (`_cross_check`): its
    # residuals must be the definition's.
    self.out_info = None

  def __call__(self, *args):
    return self.definition()(*args)

  def link(self, target) -> None:
    if self.target is None:
      target.refs.append(self)
      _check_refs(target)
    super().link(target)

  def definition(self):
    rule = getattr(self.resolved(), self.rule)
    if rule is None:
      raise FormatError(f"custom_vjp definition {self.key!r} of "
                        f"{self.eqn_name!r} has no {self.rule} rule")
    return rule


class _FwdRef(_VjpRuleRef):
  __slots__ = ()
  rule = "fwd"


class _BwdRef(_VjpRuleRef):
  __slots__ = ()
  rule = "bwd"


class _OutTrees:
  """`out_trees`: flat trees with the stored leaf counts."""

  __slots__ = ("stored", "trees")

  def __init__(self, stored):
    self.stored = stored
    n_out, n_res, input_fwds = stored
    self.trees = (compat_custom_rules.flat_treedef(n_out), compat_custom_rules.flat_treedef(n_res),
                  input_fwds)

  def __call__(self):
    out_tree, res_tree, input_fwds = self.trees
    return out_tree, res_tree, list(input_fwds)


class _VjpAnalysis:
  """The rules of one custom_vjp equation, traced at its input types."""

  def __init__(self, params: dict, eqn: _Eqn):
    self.eqn = eqn
    self.fwd_fun = params.get("fwd_jaxpr_thunk")
    self.bwd_fun = params.get("bwd")
    self.out_trees = params.get("out_trees")
    _check_wrapped(self.fwd_fun, eqn, "fwd_jaxpr_thunk")
    _check_wrapped(self.bwd_fun, eqn, "bwd")
    if not callable(self.out_trees):
      raise UnsupportedError(f"out_trees of custom_vjp function {eqn.name!r} "
                             "is not callable")
    self.fwd_debug = encode_debug(self.fwd_fun.debug_info)
    self.bwd_debug = encode_debug(self.bwd_fun.debug_info)
    self.calls_with_values, self.with_values = (), None
    self.refreshed = False
    if not eqn.in_avals:
      self.fwd_rules, self.out_info, self.res_avals = (), (0, 0, ()), []
      self.ct_patterns, self.bwd_rules = (), []
      self.key = _inputless_key("custom_vjp", eqn, self.fwd_debug,
                                self.bwd_debug)
      return
    self._forward()
    # `_custom_lin_transpose` instantiates zero cotangents without symbolic
    # zeros; with them, the widest pattern (no zeros) comes first.
    self.ct_patterns = wide.stored_patterns(
        eqn.call_jaxpr.out_avals, eqn, "differentiable outputs", True,
        self.bwd_fun) if eqn.symbolic_zeros else ((False,) * eqn.n_out,)
    self.bwd_rules = [self._trace_bwd(self.ct_patterns[0])]
    self.ct_patterns = wide.affordable(self.ct_patterns, self.bwd_rules[0],
                                       self.bwd_fun)
    # The calls with constant residuals JAX made (bwd_table.py), if the
    # forward rules return any.
    self.calls_with_values = requests.requested_with_residuals(
        self.bwd_fun)[:common.MAX_CALLS_WITH_VALUES] if (
            eqn.symbolic_zeros) and any(
            type(r[1]) is not tuple and wide.constant_residuals(
                r[1].jaxpr, self.out_info[2]) for r in self.fwd_rules) else ()
    self.key = _fingerprint((
        "custom_vjp", self.fwd_debug, self.bwd_debug, eqn.num_consts,
        eqn.symbolic_zeros, eqn.call_jaxpr,
        tuple(p for p, _ in self.fwd_rules), self.fwd_rules[0][1],
        self.out_info, self.bwd_rules[0],
        *((tuple(c[:2] for c in self.calls_with_values),)
          if self.calls_with_values else ())))

  def _forward(self) -> None:
    eqn = self.eqn
    self.out_info, self.res_avals, self.failure = None, None, None
    avals = eqn.in_avals[eqn.num_consts:]
    if not eqn.symbolic_zeros:
      # `_flatten_fwd` drops the pattern when symbolic_zeros=False: one
      # jaxpr serves them all.
      rules = [self._trace_fwd(None, (True,) * eqn.n_in)]
    elif wide.over_limit(avals):
      rules = wide.widest_rules(avals, False, lambda p: self._trace_fwd(p, p),
                                lambda rule: type(rule[1]) is tuple,
                                self.fwd_fun)
    else:
      rules = [self._trace_fwd(p, p) for p in common.symbolic_patterns(
          avals, eqn, "differentiable inputs", False)]
    if self.out_info is None:
      raise self.failure
    # The key and the backward rules use the first rule that traced.
    rules.sort(key=lambda rule: type(rule[1]) is tuple)
    self.fwd_rules = tuple(rules)
    # With one traced rule standing for every pattern, the backward rule
    # sees the residuals it returns as constants (see `trace_bwd`).
    self.res_values = None
    if eqn.symbolic_zeros and wide.over_limit(avals):
      self.res_values = wide.constant_residuals(rules[0][1].jaxpr,
                                                self.out_info[2])

  def _trace_fwd(self, key, pattern) -> tuple:
    """`(key, closed jaxpr)` of the forward rule for perturbed inputs
    `pattern`, or `(key, error)` where it raises (symbolic zeros)."""
    eqn = self.eqn
    try:
      # Fresh: `out_trees` reads what this call stores (the probes of
      # requests.py may have made it before, in this write).
      jaxpr, consts = compat_custom_rules.call_fresh(self.fwd_fun, *pattern)
      out_tree, res_tree, input_fwds = self.out_trees()
    except UnsupportedError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      # The user's rule runs here and may raise anything. With symbolic
      # zeros, a rule may refuse some patterns (the original raises when
      # JAX asks for one; so will the loaded rule); every pattern failing
      # is an error of the rule.
      if self.failure is None:
        self.failure = _rule_failed(
            "forward rule", self.fwd_fun, eqn,
            _pattern_detail(eqn, "perturbed inputs", pattern), e)
      if not eqn.symbolic_zeros:
        raise self.failure from None
      return (key, raised_error(e))
    _check_consts(consts, "forward rule", self.fwd_fun, eqn)
    info = (out_tree.num_leaves, res_tree.num_leaves,
            tuple(None if f is None else int(f) for f in input_fwds))
    closed = compat.make_closed(jaxpr, consts)
    n_res_out = info[1] - sum(f is not None for f in info[2])
    if (len(info[2]) != info[1]
        or len(jaxpr.outvars) != n_res_out + eqn.n_out
        or any(f is not None and not 0 <= f < len(eqn.in_avals)
               for f in info[2])):
      raise UnsupportedError(
          f"the forward rule of custom_vjp function {eqn.name!r} returns "
          f"{len(jaxpr.outvars)} values, which do not match its "
          f"{eqn.n_out} outputs and residual structure {info}")
    pruned = iter(closed.out_avals[:n_res_out])
    res_avals = [next(pruned) if f is None else eqn.in_avals[f]
                 for f in info[2]]
    if self.out_info is None:
      self.out_info, self.res_avals = info, res_avals
    elif info != self.out_info or res_avals != self.res_avals:
      raise UnsupportedError(
          f"the forward rule of custom_vjp function {eqn.name!r} returns "
          "different residuals for different patterns of perturbed "
          "inputs (symbolic_zeros=True); jaxpr_io stores one backward "
          "rule, so the residuals must not depend on the pattern")
    return (key, closed)

  def _trace_bwd(self, pattern, values=None) -> tuple:
    eqn = self.eqn
    if requests.probed() and not self.refreshed:
      # The backward rule reads what the forward rule's last fresh call
      # stored: make that the call of the rule the analysis keeps again.
      self.refreshed = True
      kept = self.fwd_rules[0][0]
      compat_custom_rules.call_fresh(
          self.fwd_fun, *((True,) * eqn.n_in if kept is None else kept))
    # `_custom_lin_transpose` passes cotangents of these types.
    ct_avals = [a.to_ct_aval() for a in eqn.call_jaxpr.out_avals]
    return bwd_table.trace_bwd(self.bwd_fun, eqn, self.res_avals, ct_avals,
                               pattern, values or self.res_values)

  def unsaved(self) -> bool:
    """Whether the rules are stored for a derivative order beyond the
    writer's (`common.beyond_order`): the forward rule as the primal with
    no residuals, the backward rule as one that raises. A forward rule
    that raises cannot be stored alone (the format keeps one that traces),
    and one without the call's constants cannot compute its outputs, so
    with constants the rules are stored in full."""
    eqn = self.eqn
    return bool(eqn.in_avals and eqn.num_consts == 0
                and common.beyond_order()
                and ("vjp", self.key) not in _STATE.definitions)

  def unsaved_rules(self, kind: str) -> tuple:
    """The stored `kind` ("fwd" or "bwd") rules where `unsaved()`."""
    eqn = self.eqn
    if kind == "fwd":
      free = set(common.free_inputs(eqn.in_avals))
      # Every input perturbed: it serves every pattern (`_FwdRule`).
      pattern = tuple(i in free for i in range(eqn.n_in)) if (
          eqn.symbolic_zeros) else None
      return ((pattern, eqn.call_jaxpr),)
    return ((self.ct_patterns[0], common.unsaved_rule_error(
        "backward rule", "custom_vjp", eqn.name)),)

  def all_bwd_rules(self) -> tuple:
    while len(self.bwd_rules) < len(self.ct_patterns):
      self.bwd_rules.append(
          self._trace_bwd(self.ct_patterns[len(self.bwd_rules)]))
    if self.with_values is None:
      # Only where the plain entries do not serve the pattern (they raise):
      # a rule that traces with abstract residuals does not branch on them.
      plain = {rule[0]: rule for rule in self.bwd_rules}

      def served(pattern) -> bool:
        rule = plain.get(pattern) or plain.get(
            wide.covering_pattern(plain, pattern, False))
        return rule is not None and len(rule) != 2  # not (pattern, error)
      self.with_values = tuple(
          (*self._trace_bwd(p, passed), values)
          for p, values, passed in self.calls_with_values if not served(p))
    return (*self.bwd_rules, *self.with_values)


def _vjp_analysis(params: dict) -> _VjpAnalysis:
  """The analysis of a custom_vjp equation, shared by its three codecs."""
  objects = (params.get("fwd_jaxpr_thunk"), params.get("bwd"),
             params.get("out_trees"), params.get("call_jaxpr"))
  cache = _STATE.vjp_cache
  for i, (kept, analysis) in enumerate(cache):
    if all(a is b for a, b in zip(kept, objects)):
      cache.append(cache.pop(i))
      return analysis
  analysis = _VjpAnalysis(params, _Eqn("custom_vjp", params, UnsupportedError))
  cache.append((objects, analysis))
  del cache[:-_VJP_CACHE_SIZE]
  return analysis


def _encode_vjp_rule(fun, params: dict, kind: str, debug, rules):
  """The stored forward or backward rule (`kind` "fwd" or "bwd"); `debug`
  and `rules` read the rule's debug info and stored rules off the analysis."""
  if _STATE.fingerprinting:
    return _PLACEHOLDER
  rule = _loaded(fun)
  if rule is not None:
    return rule.encode()
  analysis = _vjp_analysis(params)
  if ("vjp", analysis.key) in _STATE.definitions:
    return (f"{kind}_ref", analysis.key, debug(analysis))
  if analysis.unsaved():
    return (kind, analysis.key, debug(analysis), analysis.unsaved_rules(kind))
  return _Definition(("vjp", analysis.key),
                     (kind, analysis.key, debug(analysis), rules(analysis)))


def encode_fwd_rule(fun, params: dict):
  """The stored `fwd_jaxpr_thunk` (see jaxpr_io/families/custom_rules/registrations.py)."""
  return _encode_vjp_rule(fun, params, "fwd", lambda a: a.fwd_debug,
                          lambda a: a.fwd_rules)


def encode_bwd_rule(fun, params: dict):
  """The stored `bwd` (see jaxpr_io/families/custom_rules/registrations.py)."""
  return _encode_vjp_rule(fun, params, "bwd", lambda a: a.bwd_debug,
                          lambda a: a.all_bwd_rules())


def encode_out_trees(fun, params: dict):
  """The stored `out_trees` (see jaxpr_io/families/custom_rules/registrations.py)."""
  if _STATE.fingerprinting:
    return _PLACEHOLDER
  if type(fun) is _OutTrees:
    return fun.stored
  analysis = _vjp_analysis(params)
  # Where the forward rule is stored as the primal, it has no residuals.
  out_info = (analysis.eqn.n_out, 0, ()) if analysis.unsaved() else (
      analysis.out_info)
  # JAX lists out_trees after the equation's two rules: its analysis is no
  # longer needed (if it is after all, it is recomputed, identically).
  _STATE.vjp_cache[:] = [entry for entry in _STATE.vjp_cache
                         if entry[0][2] is not fun]
  return out_info


def _vjp_record(key: str, params: dict) -> _VjpRecord:
  """The record the equation's other rule (if decoded already) made."""
  for name in ("fwd_jaxpr_thunk", "bwd"):
    other = _loaded(params.get(name))
    if isinstance(other, (_FwdRule, _BwdRule)) and other.key == key:
      return other.record
  return _VjpRecord(key)


def decode_fwd_rule(stored, params: dict):
  """The `fwd_jaxpr_thunk` of a stored value: an `lu.WrappedFun`."""
  eqn, key, debug_info, rules, ref = _decode_stored(
      stored, params, "custom_vjp", "fwd", "forward rule", _FwdRef)
  if ref is not None:
    return ref
  table: dict = {}
  n_res_out = None
  for i, rule in enumerate(rules):
    if type(rule) is not tuple or len(rule) != 2:
      raise FormatError(f"forward rule {i} is not (in_nonzeros, jaxpr) or "
                        "(in_nonzeros, error)")
    pattern = rule[0]
    if type(rule[1]) is tuple:  # a pattern the rule raises for
      if pattern is None or not eqn.symbolic_zeros or i == 0:
        raise FormatError(f"forward rule {i} raises, but only patterns "
                          "after a rule that traces may (symbolic_zeros)")
      _add_raising(table, _bools(pattern, eqn.n_in,
                                 f"forward rule {i}'s in_nonzeros"), rule[1],
                   f"forward rule {i}")
      continue
    if pattern is None:
      if eqn.symbolic_zeros or len(rules) != 1:
        raise FormatError("a forward rule for every pattern (None) must be "
                          "the only one, with symbolic_zeros=False")
    else:
      if not eqn.symbolic_zeros:
        raise FormatError("with symbolic_zeros=False the forward rule is "
                          "stored for every pattern (None)")
      _bools(pattern, eqn.n_in, f"forward rule {i}'s in_nonzeros")
    closed = _closed(rule[1], f"forward rule {i}")
    n_res = len(closed.jaxpr.outvars) - eqn.n_out
    if len(closed.jaxpr.invars) != eqn.n_in or n_res < 0 or (
        n_res_out is not None and n_res != n_res_out):
      raise FormatError(
          f"forward rule {i} of {eqn.name!r} takes "
          f"{len(closed.jaxpr.invars)} inputs and returns "
          f"{len(closed.jaxpr.outvars)} values; the function has "
          f"{eqn.n_in} inputs and {eqn.n_out} outputs (plus residuals, the "
          "same number for every pattern)")
    n_res_out = n_res
    if pattern in table:
      raise FormatError(f"forward rule {i} repeats the pattern {pattern}")
    rule_types.fwd_rule(eqn, i, pattern, closed.jaxpr, n_res)
    table[pattern] = (closed.jaxpr, closed.consts)
  rule = _FwdRule(stored, key, eqn)
  rule.rules = table
  rule.bodies = [r[1] for r in rules if type(r[1]) is not tuple]
  rule.n_res_out = n_res_out
  rule.record = _vjp_record(key, params)
  rule.record.fwd = rule
  _link_refs(rule, rule.record)
  _cross_check(params, eqn, {"fwd_jaxpr_thunk": rule})
  return _wrap(rule, debug_info)


def decode_bwd_rule(stored, params: dict):
  """The `bwd` of a stored value: an `lu.WrappedFun`."""
  eqn, key, debug_info, rules, ref = _decode_stored(
      stored, params, "custom_vjp", "bwd", "backward rule", _BwdRef)
  if ref is not None:
    return ref
  table, n_res = bwd_table.decode_bwd_table(
      rules, eqn, rule_types.vjp_cotangent_types(eqn))
  rule = _BwdRule(stored, key, eqn)
  rule.rules = table
  rule.bodies = [r[1] for r in rules if len(r) in (4, 5)]
  rule.n_res = n_res
  rule.n_out = eqn.n_out
  rule.symbolic_zeros = eqn.symbolic_zeros
  rule.record = _vjp_record(key, params)
  rule.record.bwd = rule
  _link_refs(rule, rule.record)
  _cross_check(params, eqn, {"bwd": rule})
  return _wrap(rule, debug_info)


def decode_out_trees(stored, params: dict):
  """The `out_trees` of a stored value: a thunk of flat trees."""
  eqn = _Eqn("custom_vjp", params, FormatError)
  if (type(stored) is not tuple or len(stored) != 3
      or type(stored[0]) is not int or type(stored[1]) is not int
      or stored[0] < 0 or stored[1] < 0 or type(stored[2]) is not tuple
      or len(stored[2]) != stored[1]
      or not all(f is None or (type(f) is int and 0 <= f < len(eqn.in_avals))
                 for f in stored[2])):
    raise FormatError("out_trees is not (out_leaves, res_leaves, "
                      "input_fwds) with one input index or None per residual")
  if stored[0] != eqn.n_out:   # before a flat tree of that size is built
    raise FormatError(f"out_trees has {stored[0]} output leaves for a "
                      f"custom_vjp function with {eqn.n_out} outputs")
  out_trees = _OutTrees(stored)
  _cross_check(params, eqn, {"out_trees": out_trees})
  return out_trees


def _cross_check(params: dict, eqn: _Eqn, decoded: dict) -> None:
  """Checks an equation's rules against each other and `out_trees` once
  all three are decoded (they are decoded one by one, in file order): the
  forward and backward rules are both definitions or both refs, of one
  key; the residuals the forward rules return are, in number and types,
  those `out_trees` gives and the backward rules take; a ref equation's
  `out_trees` is its definition's."""
  fwd = decoded.get("fwd_jaxpr_thunk") or _loaded(params.get(
      "fwd_jaxpr_thunk"))
  bwd = decoded.get("bwd") or _loaded(params.get("bwd"))
  out_trees = decoded.get("out_trees") or params.get("out_trees")
  if fwd is None or bwd is None or type(out_trees) is not _OutTrees:
    return
  if ((type(fwd), type(bwd)) not in ((_FwdRule, _BwdRule), (_FwdRef, _BwdRef))
      or fwd.key != bwd.key):
    raise FormatError(
        f"the forward and backward rules of custom_vjp function "
        f"{eqn.name!r} are not both definitions or both refs of one key")
  if type(fwd) is _FwdRef:
    fwd.out_info = bwd.out_info = out_trees.stored
    for ref in (fwd, bwd):
      if ref.target is not None:
        _check_refs(ref.target)
    return
  fwd.record.out_info = out_trees.stored
  _check_refs(fwd.record)
  if not fwd.rules:
    return
  _, n_res, input_fwds = out_trees.stored
  n_res_out = n_res - sum(f is not None for f in input_fwds)
  # A backward rule that raises for every pattern takes no residuals of its
  # own to check (n_res None).
  if fwd.n_res_out != n_res_out or bwd.n_res not in (n_res, None):
    raise FormatError(
        f"the rules of custom_vjp function {eqn.name!r} disagree on the "
        f"residuals: out_trees gives {n_res} ({n_res_out} computed), the "
        f"forward rule computes {fwd.n_res_out}, the backward rule takes "
        f"{bwd.n_res}")
  rule_types.residuals(eqn, fwd.rules, input_fwds, bwd.rules, n_res_out)


def _check_refs(record: _VjpRecord) -> None:
  """The refs linked to `record` hold its `out_trees` (a ref's rules are
  its definition's, which return and take the definition's residuals)."""
  if record.out_info is None:
    return
  for ref in record.refs:
    if ref.out_info is not None and ref.out_info != record.out_info:
      raise FormatError(
          f"a ref to custom_vjp definition {record.key!r} in an equation "
          f"of {ref.eqn_name!r} stores out_trees {ref.out_info}, where the "
          f"definition's are {record.out_info}: its residuals differ")


specialize.register_specializer(
    value_type=_BwdRule,
    specialize=lambda rule, sp: SpecializedBwd(lambda: _bwd_parts(rule), sp))
specialize.register_specializer(
    value_type=_BwdRef,
    specialize=lambda ref, sp: SpecializedBwd(
        lambda: _bwd_parts(ref.definition()), sp))
