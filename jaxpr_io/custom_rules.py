"""Storing custom differentiation rules: `jax.custom_jvp` and `jax.custom_vjp`.

A `custom_jvp_call` or `custom_vjp_call` equation keeps its rules as Python
callables that JAX traces lazily, the first time a transformation asks for
them. A file cannot hold Python code, so the writer asks for every rule a
transformation can ask for, at the call's input types, and stores the
resulting jaxprs; `load` rebuilds callables that return those jaxprs. The
loaded program is then the same program under `jvp`, `grad` (every order the
original supports), `linearize`, `vjp` and `vmap`: JAX's own transformation
rules for the two primitives run unchanged and get the same jaxprs they
would get from the original rules.

What is stored, per param (inside `Value.param_codec`; "closed jaxpr" is a
reference to the closed-jaxpr table, so its constants are file constants):

`custom_jvp_call`, param `jvp_jaxpr_fun` (JAX: `in_zeros -> (jaxpr, consts,
out_zeros)`, with one bool per non-constant input saying whether its tangent
is a symbolic zero):

* `("jvp", key, debug, rules)`: `rules` is a tuple of
  `(in_zeros, rule, out_zeros)`: `in_zeros` a tuple of bools (one per
  input after the `num_consts` constants), `rule` the closed jaxpr of the
  JVP rule for that pattern (inputs: the primals, then the tangents that
  are not zeros; outputs: the primal outputs, then the output tangents
  that are not zeros), `out_zeros` a tuple of bools (one per output: the
  rule returned a symbolic zero). With `symbolic_zeros=False` JAX always
  passes instantiated tangents, so exactly one rule is stored, for the
  all-False pattern; with `symbolic_zeros=True` the rule is stored for all
  2**n patterns, in `itertools.product((False, True), repeat=n)` order, for
  at most `MAX_PATTERN_INPUTS` inputs (more raise `UnsupportedError`).
* `("jvp_ref", key, debug)`: the rule of an equation inside the rule of a
  definition with the same `key` (a rule that calls its own function, as
  `jax.nn.relu`'s does): the same rule, stored once (see "Recursion").

`custom_vjp_call`, param `fwd_jaxpr_thunk` (JAX: `in_nonzeros -> (jaxpr,
consts)`, one bool per non-constant input saying whether it is perturbed):

* `("fwd", key, debug, rules)`: `rules` is a tuple of `(in_nonzeros, fwd)`:
  `fwd` the closed jaxpr of the forward rule (inputs: the non-constant
  primal inputs; outputs: the residuals that are not forwarded inputs,
  then the primal outputs). With `symbolic_zeros=False` the forward rule
  never sees the pattern (`_flatten_fwd` drops it), so one rule is stored
  with `in_nonzeros = None`, meaning "every pattern" (traced with every
  input perturbed); with `symbolic_zeros=True` one rule per pattern (2**n,
  at most `MAX_PATTERN_INPUTS` inputs), whose residuals must not depend
  on the pattern.
* `("fwd_ref", key, debug)`: recursion, as for `jvp_ref`.

`custom_vjp_call`, param `bwd` (JAX: `(*residuals, *output_cotangents) ->
input_cotangents`, an input cotangent may be `ad.Zero`; JAX 0.11 and later
return `(input_cotangents, logs)`, `logs` the backward-pass logs of
`defvjp_with_logs`. The file stores the cotangents only, the same on every
release; a rule that returns logs other than None is refused, and a loaded
rule logs nothing):

* `("bwd", key, debug, rules)`: `rules` is a tuple of
  `(ct_zeros, bwd, cts_in_zeros, zero_types)`: `ct_zeros` a tuple of bools
  (one per output: its cotangent is a symbolic zero), `bwd` the closed
  jaxpr of the backward rule traced over the residual types (from the
  forward jaxpr's outputs and, for forwarded inputs, the inputs' types) and
  the cotangent types (`to_ct_aval` of the outputs) of the non-zero
  cotangents, whose outputs are the input cotangents that are not zeros;
  `cts_in_zeros` a tuple of bools (one per non-constant input: the rule
  gave no cotangent, rebuilt as `ad.Zero`); `zero_types` a jaxpr without
  equations whose inputs have the types of those zeros (None when there
  are none). With `symbolic_zeros=False` cotangents are always
  instantiated and one rule is stored for the all-False pattern; with
  `symbolic_zeros=True` one per pattern (at most `MAX_PATTERN_INPUTS`
  outputs).
* `("bwd_ref", key, debug)`: recursion, as for `jvp_ref`.

`custom_vjp_call`, param `out_trees` (JAX: `() -> (out_tree, res_tree,
input_fwds)`): `(out_leaves, res_leaves, input_fwds)`, two ints and a tuple
of (int or None) per residual: the index of the equation input the residual
forwards, or None. It is rebuilt as flat tuple trees of those sizes: every
caller of `out_trees` in JAX 0.10 to 0.12 (AD, batching, DCE, and
`_flatten_bwd`, which is part of the stored `bwd`) only uses the leaf counts
and `input_fwds`.

An equation without any inputs stores no rules (`rules == ()`) and
`out_trees` as `(0, 0, ())`: JAX never asks for them, since every tangent
is zero, and JAX's partial evaluation of `scan` leaves such dead equations
with rules of their former arity, which cannot be traced.

Where JAX has one type for open and closed jaxprs (0.11 and later), the
writer stores rule jaxprs closed (their params' slot in the vocabulary) and
is told that `zero_types` are open (see `_OpenJaxpr`), so every release
writes the same values.

`debug` is `(traced_for, func_src_info, arg_names)` of the rule's
`lu.DebugInfo` (`arg_names` a tuple of strings or None): JAX prints the
rule's `func_name` from it (`jvp=...`, `fwd=...`, `bwd=...`).

Recursion. A rule usually calls its own function (`relu`'s JVP rule calls
`relu`, a forward rule calls the primal), so the rule's jaxpr holds an
equation of the same kind, whose rule holds another, without end. Each
definition carries a `key`: a hash of the equation's call jaxpr, flags,
debug info and the first stored rule, with nested rules left out. An
equation met while that definition's jaxprs are being written, whose key is
the same, is stored as a `*_ref` to it; the reader links each ref to the
definition it lies inside (found by walking the definition's jaxprs). Like
JAX's tracing caches, this assumes a rule traced twice at the same types
gives the same jaxpr.

A JVP rule that raises when it is traced at the call's types (Equinox's
`nondifferentiable` does, on purpose) is stored, for that tangent pattern, as
`(in_zeros, (error type name, message))` in place of `(in_zeros, rule,
out_zeros)`: the loaded rule raises that error when JAX asks for it, as the
original does (`RaisingRule`; added in format version 4). A forward or
backward rule that cannot be traced at the call's types raises
`UnsupportedError` naming the function and the cause. Importing this module registers the
codecs.
"""

from __future__ import annotations

import hashlib
import itertools
import threading
from typing import Any

from jaxpr_io import _proto as pb
from jaxpr_io import compat
from jaxpr_io import params as param_codecs
from jaxpr_io import registry
from jaxpr_io import writer as writer_lib
from jaxpr_io.compat import custom_rules as jcr
from jaxpr_io.errors import FormatError, UnsupportedError

# Serialized names of the primitives (`custom_jvp_call_p.name`, ...).
JVP_PRIMITIVE = "custom_jvp_call"
VJP_PRIMITIVE = "custom_vjp_call"
# With symbolic_zeros=True a rule is stored once per pattern of zeros:
# 2**n jaxprs for n inputs (or outputs, for bwd). n is capped at this.
MAX_PATTERN_INPUTS = 8
_MAX_KEY_LENGTH = 64
# What nested rules encode as while a definition's key is being hashed.
_PLACEHOLDER = "jaxpr_io.custom_rules.nested_rule"


class _State(threading.local):
  """Per-thread writer state."""

  def __init__(self):
    # (family, key) of the definitions whose jaxprs are being written,
    # innermost last.
    self.definitions: list[tuple[str, str]] = []
    self.fingerprinting = 0  # > 0 while hashing a definition
    # Analyses of recent custom_vjp equations, shared by the three codecs
    # of one equation: [(objects the key's ids belong to, analysis)].
    self.vjp_cache: list[tuple[tuple, Any]] = []


_STATE = _State()
_VJP_CACHE_SIZE = 16


# ------------------------------------------------------------ helpers
class _Eqn:
  """What the codecs use of an equation's plain params."""

  __slots__ = ("kind", "call_jaxpr", "num_consts", "symbolic_zeros", "n_in",
               "n_out", "name", "in_avals")

  def __init__(self, kind: str, params: dict, error: type):
    call_jaxpr = params.get("call_jaxpr")
    num_consts = params.get("num_consts")
    symbolic_zeros = params.get("symbolic_zeros")
    if (not compat.is_closed_jaxpr(call_jaxpr)
        or type(num_consts) is not int or type(symbolic_zeros) is not bool
        or not 0 <= num_consts <= len(call_jaxpr.jaxpr.invars)):
      raise error(f"a {kind} equation needs a closed-jaxpr call_jaxpr, an int "
                  "num_consts within its inputs and a bool symbolic_zeros")
    self.kind = kind
    self.call_jaxpr = call_jaxpr
    self.num_consts = num_consts
    self.symbolic_zeros = symbolic_zeros
    self.n_in = len(call_jaxpr.jaxpr.invars) - num_consts
    self.n_out = len(call_jaxpr.jaxpr.outvars)
    self.name = call_jaxpr.jaxpr.debug_info.func_name
    self.in_avals = [v.aval for v in call_jaxpr.jaxpr.invars]

  def arg_types(self) -> str:
    return ", ".join(a.str_short() for a in self.in_avals[self.num_consts:])


def _all_patterns(n: int) -> tuple[tuple[bool, ...], ...]:
  return tuple(itertools.product((False, True), repeat=n))


def symbolic_patterns(avals, eqn: _Eqn, what: str, fixed: bool):
  """The patterns of symbolic zeros (or perturbations) JAX can ask a rule
  for: one bool per aval, where the avals that are not floating point
  always have `fixed` (JAX gives integer and boolean values symbolic-zero
  tangents and cotangents, so they are never perturbed)."""
  free = [i for i, a in enumerate(avals) if _differentiable(a)]
  n = len(free)
  if n > MAX_PATTERN_INPUTS:
    raise UnsupportedError(
        f"{eqn.kind} function {eqn.name!r} uses symbolic_zeros=True and has "
        f"{n} {what}; its rule is stored once per pattern of symbolic zeros "
        f"(2**{n} jaxprs) and at most {MAX_PATTERN_INPUTS} {what} are "
        "supported. Pass fewer, larger arrays (stack or concatenate them), "
        "or use symbolic_zeros=False")
  patterns = []
  for choice in _all_patterns(n):
    pattern = [fixed] * len(avals)
    for i, value in zip(free, choice):
      pattern[i] = value
    patterns.append(tuple(pattern))
  return tuple(patterns)


def _differentiable(aval) -> bool:
  dtype = getattr(aval, "dtype", None)
  return dtype is not None and compat.is_inexact(dtype)


def _check_wrapped(fun, eqn: _Eqn, param: str) -> None:
  if not isinstance(fun, jcr.WrappedFun):
    raise UnsupportedError(
        f"{param} of {eqn.kind} function {eqn.name!r} is a "
        f"{type(fun).__name__}, not the lu.WrappedFun JAX makes; only "
        "equations traced by JAX can be stored")


def _inputless_key(kind: str, eqn: _Eqn, *debug) -> str:
  """The key of an equation without inputs, whose rules are not stored:
  JAX never asks for them (every tangent is zero), and JAX's partial
  evaluation leaves such dead equations (e.g. in gradients of scans) with
  rules of the arity they had before, which cannot be traced at all."""
  return _fingerprint((kind, *debug, eqn.num_consts, eqn.symbolic_zeros,
                       eqn.call_jaxpr))


def _pattern_detail(eqn: _Eqn, what: str, pattern) -> str:
  """Names the pattern a rule failed for, where the user's rule sees it."""
  return f"with {what} {pattern} " if eqn.symbolic_zeros else ""


def _rule_failed(rule: str, fun, eqn: _Eqn, detail: str,
                 e: BaseException) -> UnsupportedError:
  info = getattr(fun, "debug_info", None)
  rule_name = f" {info.func_name!r}" if info is not None else ""
  return UnsupportedError(
      f"the {rule}{rule_name} of {eqn.kind} function {eqn.name!r} cannot be "
      f"traced {detail}for inputs ({eqn.arg_types()}): "
      f"{type(e).__name__}: {e}. jaxpr_io stores custom rules as jaxprs "
      "traced when saving, at the call's input types; make the rule "
      "traceable at these types, or save a program that does not call it")


def _check_consts(consts, rule: str, fun, eqn: _Eqn) -> None:
  """Refuses a rule jaxpr whose constants are tracers: the rule closes over
  values of the trace that made the equation, which has ended (JAX itself
  cannot run such a rule outside that trace either)."""
  if any(jcr.is_tracer(c) for c in consts):
    raise UnsupportedError(
        f"the {rule} {fun.debug_info.func_name!r} of {eqn.kind} function "
        f"{eqn.name!r} closes over values computed inside the traced "
        "function (tracers), so it only works inside the trace that made "
        "it; pass those values to the custom function as arguments instead")


def encode_debug(info) -> tuple:
  if type(info.traced_for) is not str or type(info.func_src_info) is not str:
    raise UnsupportedError(f"rule debug info {info!r} has no name to store")
  names = info.arg_names
  if names is not None and not all(type(n) is str for n in names):
    names = None  # only messages use them
  return (info.traced_for, info.func_src_info,
          None if names is None else tuple(names))


def decode_debug(stored):
  if (type(stored) is not tuple or len(stored) != 3
      or type(stored[0]) is not str or type(stored[1]) is not str
      or not (stored[2] is None or (type(stored[2]) is tuple and all(
          type(n) is str for n in stored[2])))):
    raise FormatError("the rule's debug info is not (traced_for, "
                      "func_src_info, arg_names)")
  return compat.DebugInfo(stored[0], stored[1], stored[2], None)


class _OpenJaxpr:
  """A jaxpr inside a stored rule value that the file holds open (without
  constants): a backward rule's `zero_types`.

  Where open and closed jaxprs are one type (JAX 0.11+) the writer takes
  the choice from the param's slot in the vocabulary
  (`jaxpr_io.vocabulary.OPEN_JAXPR_PARAMS`); the custom-rule params' slots
  hold closed jaxprs, which is what every rule jaxpr is, so only this one
  needs marking for each release to store what JAX 0.10 stores."""

  __slots__ = ("jaxpr",)

  def __init__(self, jaxpr):
    self.jaxpr = jaxpr


def _encode_open_jaxpr(w, value: _OpenJaxpr, out, depth: int) -> None:
  saved = w.open_jaxpr_slot
  w.open_jaxpr_slot = True
  try:
    param_codecs.encode_value(w, value.jaxpr, out, depth)
  finally:
    w.open_jaxpr_slot = saved


param_codecs.register_value_encoder(_OpenJaxpr, _encode_open_jaxpr)


def _marked_definition(value: tuple) -> tuple:
  """A stored definition `(kind, key, debug, rules)` with a backward rule's
  `zero_types` marked open (see `_OpenJaxpr`)."""
  kind, key, debug, rules = value
  if kind != "bwd":
    return value
  return (kind, key, debug, mark_bwd_rules(rules))


def mark_bwd_rules(rules: tuple) -> tuple:
  """Stored backward rules with their `zero_types` marked open."""
  return tuple(
      rule if len(rule) == 2  # a pattern the rule raises for
      else (rule[0], rule[1], rule[2],
            None if rule[3] is None else _OpenJaxpr(rule[3]))
      for rule in rules)


def _fingerprint(value) -> str:
  """A hash of how `value` is stored, with nested custom rules left out.
  The fresh writer's slot holds closed jaxprs, as the custom-rule params'
  slots do."""
  w = writer_lib.Writer()
  message = pb.Value()
  _STATE.fingerprinting += 1
  try:
    param_codecs.encode_value(w, value, message)
  finally:
    _STATE.fingerprinting -= 1
  digest = hashlib.sha256()
  for part in (w.msg.SerializeToString(deterministic=True),
               message.SerializeToString(deterministic=True),
               *w.layout.chunks):
    data = memoryview(part).cast("B")
    digest.update(len(data).to_bytes(8, "little"))
    digest.update(data)
  return digest.hexdigest()[:32]


class _Definition:
  """A stored rule definition on its way into the writer.

  Encoded as its `value`; while that value (and so the rule's jaxprs) is
  written, `frame` is on `_STATE.definitions`, so nested equations with the
  same key are stored as refs to it."""

  __slots__ = ("frame", "value")

  def __init__(self, frame: tuple[str, str], value: tuple):
    self.frame = frame
    self.value = value


def _encode_definition(w, definition: _Definition, out, depth: int) -> None:
  _STATE.definitions.append(definition.frame)
  try:
    param_codecs.encode_value(w, _marked_definition(definition.value), out,
                              depth)
  finally:
    _STATE.definitions.pop()


# A value type the writer encodes: the only way to run code around the
# writing of the rule's jaxprs (the codec's `encode` returns before them).
param_codecs.register_value_encoder(_Definition, _encode_definition)


def _bools(value, n: int, what: str) -> tuple[bool, ...]:
  if (type(value) is not tuple or len(value) != n
      or not all(type(b) is bool for b in value)):
    raise FormatError(f"{what} is not a tuple of {n} bools")
  return value


def _check_rule_count(rules, eqn: _Eqn, n: int, what: str) -> None:
  """1 to 2**n rules (one without symbolic zeros); none exactly when the
  equation has no inputs (see `_inputless_key`)."""
  if type(rules) is not tuple:
    raise FormatError(f"the {what}s are not a tuple")
  if not eqn.in_avals:
    if rules:
      raise FormatError(f"an equation without inputs has no {what}s")
    return
  limit = 1 << min(n, MAX_PATTERN_INPUTS) if eqn.symbolic_zeros else 1
  if not 0 < len(rules) <= limit:
    raise FormatError(f"the {what} of {eqn.name!r} needs 1 to {limit} "
                      f"jaxprs, not {len(rules)}")


def _closed(value, what: str):
  if not compat.is_closed_jaxpr(value):
    raise FormatError(f"{what} is not a closed jaxpr")
  return value


def _key(value) -> str:
  if type(value) is not str or not 0 < len(value) <= _MAX_KEY_LENGTH:
    raise FormatError(f"rule key {value!r} is not a short string")
  return value


def _unpack(stored, tags: dict[str, int], what: str) -> tuple:
  if (type(stored) is not tuple or not stored or stored[0] not in tags
      or len(stored) != tags[stored[0]]):
    raise FormatError(f"the stored {what} is not one of "
                      f"{', '.join(repr(t) for t in tags)} with its fields")
  return stored


# ------------------------------------------------------ rules that raise
# A rule that raised when the writer traced it is stored as the error it
# raised, (type name, message); the loaded rule raises it when JAX asks for
# that rule, as the original does. The type is re-created only when it is
# one of Python's built-in exceptions below; any other raises RuntimeError
# with the type's name in the message (a file never names a class to build).
_BUILTIN_ERRORS: dict[str, type] = {
    cls.__name__: cls for cls in (
        ArithmeticError, AssertionError, AttributeError, FloatingPointError,
        IndexError, KeyError, LookupError, NotImplementedError,
        OverflowError, RuntimeError, TypeError, ValueError,
        ZeroDivisionError)}
_MAX_ERROR_MESSAGE = 4096


def raised_error(e: BaseException) -> tuple[str, str]:
  """How the error a rule raised is stored: (type name, message)."""
  t = type(e)
  name = t.__name__ if _BUILTIN_ERRORS.get(t.__name__) is t else \
      f"{t.__module__}.{t.__qualname__}"
  return name, str(e)[:_MAX_ERROR_MESSAGE]


class RaisingRule:
  """A stored rule that raises (type name, message) when asked for."""

  __slots__ = ("type_name", "message")

  def __init__(self, stored, what: str):
    if not (type(stored) is tuple and len(stored) == 2
            and all(type(x) is str for x in stored)
            and 0 < len(stored[0]) <= 200
            and len(stored[1]) <= _MAX_ERROR_MESSAGE):
      raise FormatError(f"{what} is not (error type name, message)")
    self.type_name, self.message = stored

  def throw(self):
    cls = _BUILTIN_ERRORS.get(self.type_name)
    if cls is None:
      raise RuntimeError(f"{self.type_name}: {self.message}")
    raise cls(self.message)


def _add_raising(table: dict, pattern: tuple, stored, what: str) -> None:
  """Adds the stored error of `what` (a rule that raises for `pattern`) to
  a decoded rule table."""
  if pattern in table:
    raise FormatError(f"{what} repeats the pattern {pattern}")
  table[pattern] = RaisingRule(stored, what)


# ------------------------------------------------------------ rebuilt rules
class _Loaded:
  """A rule rebuilt from a file; `stored` is the decoded value, which the
  writer stores again unchanged (so re-dumping gives the same bytes)."""

  family = ""
  __slots__ = ("stored", "key", "eqn_name", "expect")

  def __init__(self, stored, key: str, eqn: _Eqn):
    self.stored = stored
    self.key = key
    self.eqn_name = eqn.name
    # Equation shape a ref must share with the definition it is linked to.
    self.expect = (eqn.num_consts, eqn.n_in, eqn.n_out, eqn.symbolic_zeros)

  @property
  def frame(self) -> tuple[str, str]:
    return (self.family, self.key)


class _Definer(_Loaded):
  """A stored definition: `bodies` are its closed jaxprs."""

  __slots__ = ("bodies",)

  def encode(self):
    return _Definition(self.frame, self.stored)


class _Ref(_Loaded):
  """A `*_ref`: linked on load to the definition it lies inside."""

  __slots__ = ("target",)

  def __init__(self, stored, key: str, eqn: _Eqn):
    super().__init__(stored, key, eqn)
    self.target = None

  def link(self, target) -> None:
    if self.target is None:
      self.target = target

  def resolved(self):
    if self.target is None:
      raise FormatError(
          f"the custom rule of {self.eqn_name!r} refers to definition "
          f"{self.key!r}, which does not enclose it: the file is malformed")
    return self.target

  def encode(self):
    if self.frame in _STATE.definitions:
      return self.stored
    # Written outside its definition (e.g. in a jaxpr JAX derived from the
    # rule): store the definition itself, so the file stands alone.
    try:
      definition = self.definition()
    except FormatError as e:
      raise UnsupportedError(f"{e}; it cannot be saved again") from None
    return definition.encode()

  def definition(self) -> _Definer:
    raise NotImplementedError


class _JvpRule(_Definer):
  """`jvp_jaxpr_fun`: tangent zero pattern -> (jaxpr, consts, out_zeros)."""

  family = "jvp"
  __slots__ = ("rules",)

  def __call__(self, *in_zeros):
    pattern = tuple(bool(z) for z in in_zeros)
    rule = self.rules.get(pattern)
    if rule is None:
      raise UnsupportedError(
          f"the JVP rule of custom_jvp function {self.eqn_name!r} was saved "
          f"for the symbolic-zero tangent patterns {sorted(self.rules)}, but "
          f"JAX asks for {pattern}")
    if type(rule) is RaisingRule:
      rule.throw()
    return rule


class _JvpRef(_Ref):
  family = "jvp"
  __slots__ = ()

  def __call__(self, *in_zeros):
    return self.resolved()(*in_zeros)

  def definition(self):
    return self.resolved()


class _VjpRecord:
  """The forward and backward definitions of one custom_vjp key."""

  __slots__ = ("key", "fwd", "bwd")

  def __init__(self, key: str):
    self.key = key
    self.fwd = None
    self.bwd = None


class _FwdRule(_Definer):
  """`fwd_jaxpr_thunk`: perturbed-input pattern -> (jaxpr, consts)."""

  family = "vjp"
  __slots__ = ("rules", "record", "n_res_out")

  def __call__(self, *nonzeros):
    rule = self.rules.get(None)
    if rule is None:
      pattern = tuple(bool(z) for z in nonzeros)
      rule = self.rules.get(pattern)
      if rule is None:
        raise UnsupportedError(
            f"the forward rule of custom_vjp function {self.eqn_name!r} was "
            f"saved for the perturbation patterns {sorted(self.rules)}, but "
            f"JAX asks for {pattern}")
    if type(rule) is RaisingRule:
      rule.throw()
    return rule


def call_bwd_table(table: dict, n_out: int, symbolic_zeros: bool, name: str,
                   args) -> Any:
  """What a `bwd` rebuilt from `table` (`decode_bwd_table`) returns for
  residuals and `n_out` output cotangents `args`: the input cotangents
  (some `ad.Zero`), in the form the running release expects."""
  n_res = len(args) - n_out
  res, cts = args[:n_res], args[n_res:]
  if symbolic_zeros:
    pattern = tuple(jcr.is_zero(c) for c in cts)
    nonzero = [c for c in cts if not jcr.is_zero(c)]
  else:
    # JAX instantiates cotangents for these rules; so do we, should a
    # caller pass a symbolic zero anyway.
    pattern = (False,) * n_out
    nonzero = [jcr.zeros_like_aval(c.aval) if jcr.is_zero(c) else c
               for c in cts]
  rule = table.get(pattern)
  if rule is None:
    raise UnsupportedError(
        f"the backward rule of custom_vjp function {name!r} was "
        f"saved for the zero-cotangent patterns {sorted(table)}, but "
        f"JAX asks for {pattern}")
  if type(rule) is RaisingRule:
    rule.throw()
  jaxpr, consts, mask, zero_avals = rule
  outs = iter(jcr.eval_jaxpr(jaxpr, consts, *res, *nonzero))
  zeros = iter(zero_avals)
  return jcr.bwd_result([jcr.Zero(next(zeros)) if z else next(outs)
                         for z in mask])


class _BwdRule(_Definer):
  """`bwd`: (*residuals, *cotangents) -> input cotangents (some ad.Zero)."""

  family = "vjp"
  __slots__ = ("rules", "record", "n_res", "n_out", "symbolic_zeros")

  def __call__(self, *args):
    return call_bwd_table(self.rules, self.n_out, self.symbolic_zeros,
                          self.eqn_name, args)


class _VjpRuleRef(_Ref):
  """A reference to the forward or backward rule (`rule` names which) of an
  enclosing custom_vjp definition."""
  family = "vjp"
  __slots__ = ()
  rule = ""

  def __call__(self, *args):
    return self.definition()(*args)

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
    self.trees = (jcr.flat_treedef(n_out), jcr.flat_treedef(n_res),
                  input_fwds)

  def __call__(self):
    out_tree, res_tree, input_fwds = self.trees
    return out_tree, res_tree, list(input_fwds)


def _loaded(value):
  """The `_Loaded` behind a rebuilt param value, or None."""
  if jcr.is_plain_wrapped(value) and isinstance(value.f, _Loaded):
    return value.f
  return None


def _wrap(rule: _Loaded, debug_info):
  return jcr.wrap_init(rule, debug_info)


def _link_refs(definer: _Definer, target) -> None:
  """Links the refs to `definer`'s key inside its jaxprs (through sub-jaxprs
  and nested definitions) to `target`."""
  family, key = definer.frame
  seen: set[int] = set()
  todo: list[Any] = list(definer.bodies)

  def visit(value):
    t = type(value)
    if compat.is_jaxpr(value):
      todo.append(value)
    elif t is tuple or t is list:
      for item in value:
        visit(item)
    else:
      rule = _loaded(value)
      if isinstance(rule, _Ref):
        if rule.frame == (family, key):
          if rule.expect != definer.expect:
            raise FormatError(
                f"a ref to custom rule {key!r} sits in an equation of "
                f"{rule.eqn_name!r} whose shape (num_consts, inputs, outputs, "
                f"symbolic_zeros) {rule.expect} differs from its "
                f"definition's {definer.expect}")
          rule.link(target)
      elif isinstance(rule, _Definer):
        todo.extend(rule.bodies)

  while todo:
    item = todo.pop()
    jaxpr = compat.open_jaxpr(item) if compat.is_closed_jaxpr(item) else item
    if id(jaxpr) in seen:
      continue
    seen.add(id(jaxpr))
    for eqn in jaxpr.eqns:
      for value in eqn.params.values():
        visit(value)


# ------------------------------------------------------------ custom_jvp
def _trace_jvp(fun, pattern, eqn: _Eqn) -> tuple:
  try:
    jaxpr, consts, out_zeros = fun.call_wrapped(*pattern)
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


def encode_jvp_rule(fun, params: dict):
  """The stored `jvp_jaxpr_fun` (see the module docstring)."""
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
  if eqn.symbolic_zeros:
    patterns = symbolic_patterns(eqn.in_avals[eqn.num_consts:], eqn,
                                 "differentiable inputs", True)
  else:
    # JVPTrace and LinearizeTrace instantiate zero tangents for these
    # rules, so `lift_jvp` only ever asks for the all-False pattern.
    patterns = ((False,) * eqn.n_in,)
  first = _trace_jvp(fun, patterns[0], eqn)
  key = _fingerprint(("custom_jvp", debug, eqn.num_consts,
                      eqn.symbolic_zeros, eqn.call_jaxpr, patterns, first))
  if ("jvp", key) in _STATE.definitions:
    return ("jvp_ref", key, debug)
  rules = (first, *(_trace_jvp(fun, p, eqn) for p in patterns[1:]))
  return _Definition(("jvp", key), ("jvp", key, debug, rules))


def _decode_stored(stored, params: dict, family: str, kind: str, what: str,
                   ref_cls):
  """The parts every stored rule starts with: (eqn, key, debug info, rules,
  None), or for a `<kind>_ref` (eqn, key, debug info, None, the wrapped
  reference). Checks the number of rules against the patterns' inputs."""
  eqn = _Eqn(family, params, FormatError)
  stored = _unpack(stored, {kind: 4, f"{kind}_ref": 3}, what)
  key = _key(stored[1])
  debug_info = decode_debug(stored[2])
  if stored[0] == f"{kind}_ref":
    return eqn, key, debug_info, None, _wrap(ref_cls(stored, key, eqn),
                                               debug_info)
  n_pattern = eqn.n_out if kind == "bwd" else eqn.n_in
  _check_rule_count(stored[3], eqn, n_pattern, what)
  return eqn, key, debug_info, stored[3], None


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
    table[in_zeros] = (closed.jaxpr, closed.consts, list(out_zeros))
  if table and not eqn.symbolic_zeros and list(table) != [
      (False,) * eqn.n_in]:
    raise FormatError("a JVP rule with symbolic_zeros=False is stored for "
                      "the all-False pattern only")
  rule = _JvpRule(stored, key, eqn)
  rule.rules = table
  rule.bodies = [r[1] for r in rules if len(r) == 3]
  _link_refs(rule, rule)
  return _wrap(rule, debug_info)


# ------------------------------------------------------------ custom_vjp
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
    if not eqn.in_avals:
      self.fwd_rules, self.out_info, self.res_avals = (), (0, 0, ()), []
      self.ct_patterns, self.bwd_rules = (), []
      self.key = _inputless_key("custom_vjp", eqn, self.fwd_debug,
                                self.bwd_debug)
      return
    self._forward()
    if eqn.symbolic_zeros:
      self.ct_patterns = symbolic_patterns(eqn.call_jaxpr.out_avals, eqn,
                                           "differentiable outputs", True)
    else:
      # `_custom_lin_transpose` instantiates zero cotangents for these.
      self.ct_patterns = ((False,) * eqn.n_out,)
    self.bwd_rules = [self._trace_bwd(self.ct_patterns[0])]
    self.key = _fingerprint((
        "custom_vjp", self.fwd_debug, self.bwd_debug, eqn.num_consts,
        eqn.symbolic_zeros, eqn.call_jaxpr,
        tuple(p for p, _ in self.fwd_rules), self.fwd_rules[0][1],
        self.out_info, self.bwd_rules[0]))

  def _forward(self) -> None:
    eqn = self.eqn
    if eqn.symbolic_zeros:
      calls = symbolic_patterns(eqn.in_avals[eqn.num_consts:], eqn,
                                "differentiable inputs", False)
      keys = calls
    else:
      # `_flatten_fwd` drops the pattern when symbolic_zeros=False: one
      # jaxpr serves them all.
      calls, keys = ((True,) * eqn.n_in,), (None,)
    rules, self.out_info, self.res_avals = [], None, None
    failure = None
    for key, pattern in zip(keys, calls):
      detail = _pattern_detail(eqn, "perturbed inputs", pattern)
      try:
        jaxpr, consts = self.fwd_fun.call_wrapped(*pattern)
        out_tree, res_tree, input_fwds = self.out_trees()
      except UnsupportedError:
        raise
      except Exception as e:  # pylint: disable=broad-except
        # The user's rule runs here and may raise anything. With symbolic
        # zeros, a rule may refuse some patterns (the original raises when
        # JAX asks for one; so will the loaded rule); every pattern failing
        # is an error of the rule.
        if failure is None:
          failure = _rule_failed("forward rule", self.fwd_fun, eqn, detail, e)
        if not eqn.symbolic_zeros:
          raise failure from None
        rules.append((key, raised_error(e)))
        continue
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
      rules.append((key, closed))
    if self.out_info is None:
      raise failure
    # The key and the backward rules use the first rule that traced.
    rules.sort(key=lambda rule: type(rule[1]) is tuple)
    self.fwd_rules = tuple(rules)

  def _trace_bwd(self, pattern) -> tuple:
    eqn = self.eqn
    # `_custom_lin_transpose` passes cotangents of these types.
    ct_avals = [a.to_ct_aval() for a in eqn.call_jaxpr.out_avals]
    return trace_bwd(self.bwd_fun, eqn, self.res_avals, ct_avals, pattern)

  def all_bwd_rules(self) -> tuple:
    while len(self.bwd_rules) < len(self.ct_patterns):
      self.bwd_rules.append(
          self._trace_bwd(self.ct_patterns[len(self.bwd_rules)]))
    return tuple(self.bwd_rules)


def trace_bwd(bwd, eqn, res_avals, ct_avals, pattern) -> tuple:
  """A stored backward rule for one pattern of zero cotangents `pattern`:
  `(pattern, closed jaxpr, cts_in_zeros, zero_types)`, or `(pattern,
  error)` when the rule raises as it is traced (see the module docstring).
  `bwd` is called on residuals of types `res_avals` and the cotangents of
  types `ct_avals` (symbolic zeros where `pattern` says) and must return
  `eqn.n_in` input cotangents; `eqn` names the function in messages
  (`kind`, `name`)."""
  n_res = len(res_avals)
  zeros: list = []

  def backward(*args):
    nonzero = iter(args[n_res:])
    cts = [jcr.SymbolicZero(a) if z else next(nonzero)
           for a, z in zip(ct_avals, pattern)]
    outs, logs = jcr.call_bwd(bwd, *args[:n_res], *cts)
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
    zeros[:] = [o.aval if jcr.is_zero(o) else None for o in outs]
    return [o for o in outs if not jcr.is_zero(o)]

  in_avals = [*res_avals,
              *(a for a, z in zip(ct_avals, pattern) if not z)]
  try:
    jaxpr, consts = jcr.trace_flat(backward, in_avals, bwd.debug_info)
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
  return _Definition(("vjp", analysis.key),
                     (kind, analysis.key, debug(analysis), rules(analysis)))


def encode_fwd_rule(fun, params: dict):
  """The stored `fwd_jaxpr_thunk` (see the module docstring)."""
  return _encode_vjp_rule(fun, params, "fwd", lambda a: a.fwd_debug,
                          lambda a: a.fwd_rules)


def encode_bwd_rule(fun, params: dict):
  """The stored `bwd` (see the module docstring)."""
  return _encode_vjp_rule(fun, params, "bwd", lambda a: a.bwd_debug,
                          lambda a: a.all_bwd_rules())


def encode_out_trees(fun, params: dict):
  """The stored `out_trees` (see the module docstring)."""
  if _STATE.fingerprinting:
    return _PLACEHOLDER
  if type(fun) is _OutTrees:
    return fun.stored
  out_info = _vjp_analysis(params).out_info
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


def decode_bwd_table(rules: tuple, eqn) -> tuple[dict, int | None]:
  """(pattern -> (jaxpr, consts, cts_in_zeros, zero avals) or RaisingRule,
  residual count or None when every pattern raises) of stored backward
  rules (see the module docstring), checked against `eqn`'s `n_in`, `n_out`
  and `symbolic_zeros`; `eqn.name` names the function in messages."""
  table = {}
  n_res = None
  for i, rule in enumerate(rules):
    if type(rule) is tuple and len(rule) == 2:  # a pattern it raises for
      _add_raising(table, _bools(rule[0], eqn.n_out,
                                 f"backward rule {i}'s ct_zeros"), rule[1],
                   f"backward rule {i}")
      continue
    if type(rule) is not tuple or len(rule) != 4:
      raise FormatError(f"backward rule {i} is not (ct_zeros, jaxpr, "
                        "cts_in_zeros, zero_types) or (ct_zeros, error)")
    ct_zeros = _bools(rule[0], eqn.n_out, f"backward rule {i}'s ct_zeros")
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
    if ct_zeros in table:
      raise FormatError(f"backward rule {i} repeats the pattern {ct_zeros}")
    table[ct_zeros] = (closed.jaxpr, closed.consts, mask, zero_avals)
  if table and not eqn.symbolic_zeros and list(table) != [
      (False,) * eqn.n_out]:
    raise FormatError("a backward rule with symbolic_zeros=False is stored "
                      "for the all-False pattern only")
  return table, n_res


def decode_bwd_rule(stored, params: dict):
  """The `bwd` of a stored value: an `lu.WrappedFun`."""
  eqn, key, debug_info, rules, ref = _decode_stored(
      stored, params, "custom_vjp", "bwd", "backward rule", _BwdRef)
  if ref is not None:
    return ref
  table, n_res = decode_bwd_table(rules, eqn)
  rule = _BwdRule(stored, key, eqn)
  rule.rules = table
  rule.bodies = [r[1] for r in rules if len(r) == 4]
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
  out_trees = _OutTrees(stored)
  _cross_check(params, eqn, {"out_trees": out_trees})
  return out_trees


def _cross_check(params: dict, eqn: _Eqn, decoded: dict) -> None:
  """Checks the residual counts of an equation's rules against `out_trees`
  once all three are decoded (they are decoded one by one, in file order)."""
  fwd = decoded.get("fwd_jaxpr_thunk") or _loaded(params.get(
      "fwd_jaxpr_thunk"))
  bwd = decoded.get("bwd") or _loaded(params.get("bwd"))
  out_trees = decoded.get("out_trees") or params.get("out_trees")
  if (type(fwd) is not _FwdRule or type(bwd) is not _BwdRule
      or type(out_trees) is not _OutTrees or not fwd.rules):
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


registry.register_eqn_param_codec(JVP_PRIMITIVE, "jvp_jaxpr_fun",
                                  encode=encode_jvp_rule,
                                  decode=decode_jvp_rule)
registry.register_eqn_param_codec(VJP_PRIMITIVE, "fwd_jaxpr_thunk",
                                  encode=encode_fwd_rule,
                                  decode=decode_fwd_rule)
registry.register_eqn_param_codec(VJP_PRIMITIVE, "bwd",
                                  encode=encode_bwd_rule,
                                  decode=decode_bwd_rule)
registry.register_eqn_param_codec(VJP_PRIMITIVE, "out_trees",
                                  encode=encode_out_trees,
                                  decode=decode_out_trees)
