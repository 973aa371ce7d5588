"""What custom_jvp and custom_vjp rules share: the stored form of a rule.

The equation a rule belongs to (`_Eqn`), the patterns of (symbolic) zeros a
rule is traced for, the keys and fingerprints that let a recursive rule be
stored as a reference to the definition it lies inside, rules that raise
(`RaisingRule`, format version 4), and the loaded rule objects that JAX calls
(`_Loaded`, `_Definer`, `_Ref`) with the linking of refs to definitions.
jaxpr_io/families/custom_rules/jvp.py and jaxpr_io/families/custom_rules/vjp.py build on these, and
jaxpr_io/families/custom_rules/lin.py on the public ones (`symbolic_patterns`,
`encode_debug`, `decode_debug`, `mark_bwd_rules`); the format itself is
described in jaxpr_io/families/custom_rules/registrations.py.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import threading
from typing import Any

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.codec import params as param_codecs
from jaxpr_io.codec import registry
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.errors import FormatError, UnsupportedError

# Serialized names of the primitives (`custom_jvp_call_p.name`, ...).
JVP_PRIMITIVE = "custom_jvp_call"
VJP_PRIMITIVE = "custom_vjp_call"
# With symbolic_zeros=True a rule is stored once per pattern of zeros:
# 2**n jaxprs for n inputs (or outputs, for bwd). n is capped at this.
MAX_PATTERN_INPUTS = 8
# A backward rule may be stored this many more times, each with the
# constant residuals JAX called it with (bwd_table.py).
MAX_CALLS_WITH_VALUES = 1 << MAX_PATTERN_INPUTS
_MAX_KEY_LENGTH = 64
# The derivative order the writer stores custom rules for unless told
# otherwise (`derivative_order`), and the most it may be told: rules inside
# rules are traced once per order (see `beyond_order`).
DEFAULT_MAX_DERIVATIVE_ORDER = 3
MAX_DERIVATIVE_ORDER = 16
# What nested rules encode as while a definition's key is being hashed.
_PLACEHOLDER = "jaxpr_io.families.custom_rules.registrations.nested_rule"


class _State(threading.local):
  """Per-thread writer state."""

  def __init__(self):
    # (family, key) of the definitions whose jaxprs are being written,
    # innermost last.
    self.definitions: list[tuple[str, str]] = []
    self.fingerprinting = 0  # > 0 while hashing a definition
    # Rules nested deeper than this in rules are stored as raising rules.
    self.max_order = DEFAULT_MAX_DERIVATIVE_ORDER
    # Analyses of recent custom_vjp equations, shared by the three codecs
    # of one equation: [(objects the key's ids belong to, analysis)].
    self.vjp_cache: list[tuple[tuple, Any]] = []


_STATE = _State()


@contextlib.contextmanager
def derivative_order(order: int | None):
  """Within it, this thread's writer stores custom rules for derivatives up
  to `order` (None: `DEFAULT_MAX_DERIVATIVE_ORDER`); see `beyond_order`."""
  if order is None:
    order = DEFAULT_MAX_DERIVATIVE_ORDER
  if type(order) is not int or not 0 <= order <= MAX_DERIVATIVE_ORDER:
    raise ValueError(f"max_derivative_order must be an int from 0 to "
                     f"{MAX_DERIVATIVE_ORDER}, not {order!r}")
  saved = _STATE.max_order
  _STATE.max_order = order
  try:
    yield
  finally:
    _STATE.max_order = saved


def beyond_order() -> bool:
  """Whether the rules of an equation met now serve only derivatives of a
  higher order than the writer stores.

  The order-k derivative of a program asks for the rules of its own
  equations (order 1), then for those of the equations inside those
  rules' jaxprs (order 2), and so on: a rule's nesting depth in rules is
  the order that first asks for it. A rule that calls its own function
  with other arguments (e3nn-jax's spherical harmonics, with twice as many
  degrees) nests without end and without a ref (keys differ), and tracing
  it eagerly costs what differentiating to every order would. Deeper than
  the order being stored, a rule is traced once, for its key (a ref to an
  enclosing definition still serves every order), and otherwise stored as
  a rule that raises `unsaved_rule_error`'s error when JAX asks for it."""
  return len(_STATE.definitions) >= _STATE.max_order


# The stored type name of `unsaved_rule_error`'s error, which the reader
# raises as jaxpr_io's own UnsupportedError.
_UNSAVED_TYPE = "jaxpr_io.errors.UnsupportedError"


def unsaved_rule_error(rule: str, kind: str, name: str) -> tuple[str, str]:
  """The stored error of a rule nested deeper than the order being stored."""
  order = _STATE.max_order
  return (_UNSAVED_TYPE, (
      f"the {rule} of {kind} function {name!r} was not saved: the program "
      f"was saved with custom rules for derivatives up to order {order}, "
      f"and JAX asks for one of order {order + 1} or higher. Save it again "
      f"with jaxpr_io.dumps(program, max_derivative_order={order + 1}) (or "
      "jaxpr_io.save(path, program, max_derivative_order=...)) to "
      "differentiate it further"))


@contextlib.contextmanager
def writing_scope():
  """Around the writing of each program: the analyses of one write are not
  reused by the next, and the rule thunks the writer and its probes call
  start from no memo and are left as they were found
  (`compat.custom_rules.isolated_rules`), so the same program writes the
  same bytes whatever ran before."""
  _STATE.vjp_cache.clear()
  try:
    with compat_custom_rules.isolated_rules():
      yield
  finally:
    _STATE.vjp_cache.clear()


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
  free = free_inputs(avals)
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


def free_inputs(avals) -> list[int]:
  """The indices of the avals a pattern can vary: the floating-point ones."""
  return [i for i, a in enumerate(avals) if _differentiable(a)]


def _differentiable(aval) -> bool:
  dtype = getattr(aval, "dtype", None)
  return dtype is not None and compat.is_inexact(dtype)


def _check_wrapped(fun, eqn: _Eqn, param: str) -> None:
  if not isinstance(fun, compat_custom_rules.WrappedFun):
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
  if any(compat_custom_rules.is_tracer(c) for c in consts):
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
  (`jaxpr_io.format.vocabulary.OPEN_JAXPR_PARAMS`); the custom-rule params' slots
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
      rule if len(rule) in (2, 3)  # a pattern the rule raises for
      else (rule[0], rule[1], rule[2],
            None if rule[3] is None else _OpenJaxpr(rule[3]), *rule[4:])
      for rule in rules)


def _fingerprint(value) -> str:
  """A hash of how `value` is stored, with nested custom rules left out.
  The fresh writer's slot holds closed jaxprs, as the custom-rule params'
  slots do."""
  w = registry.new_writer()
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


def _check_rule_count(rules, eqn: _Eqn, n: int, what: str,
                      with_values: bool = False) -> None:
  """1 to 2**n rules (one without symbolic zeros); none exactly when the
  equation has no inputs (see `_inputless_key`). `with_values`: backward
  rules, which may hold up to MAX_CALLS_WITH_VALUES more, stored with
  constant residuals (bwd_table.py)."""
  if type(rules) is not tuple:
    raise FormatError(f"the {what}s are not a tuple")
  if not eqn.in_avals:
    if rules:
      raise FormatError(f"an equation without inputs has no {what}s")
    return
  valued = sum(type(r) is tuple and len(r) in (3, 5)
               for r in rules) if with_values else 0
  if valued > (MAX_CALLS_WITH_VALUES if eqn.symbolic_zeros else 0):
    raise FormatError(f"the {what} of {eqn.name!r} holds {valued} rules "
                      "stored with constant residuals, over "
                      f"{MAX_CALLS_WITH_VALUES} (or any, without symbolic "
                      "zeros)")
  limit = 1 << min(n, MAX_PATTERN_INPUTS) if eqn.symbolic_zeros else 1
  if not 0 < len(rules) - valued <= limit:
    raise FormatError(f"the {what} of {eqn.name!r} needs 1 to {limit} "
                      f"jaxprs, not {len(rules) - valued}")


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
    if self.type_name == _UNSAVED_TYPE:
      raise UnsupportedError(self.message)
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
    # Equation shape and types a ref must share with the definition it is
    # linked to (its rules are the definition's, typed for those).
    self.expect = (eqn.num_consts, eqn.n_in, eqn.n_out, eqn.symbolic_zeros,
                   tuple(eqn.in_avals), tuple(eqn.call_jaxpr.out_avals))

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


def _loaded(value):
  """The `_Loaded` behind a rebuilt param value, or None."""
  if compat_custom_rules.is_plain_wrapped(value) and isinstance(value.f, _Loaded):
    return value.f
  return None


def _wrap(rule: _Loaded, debug_info):
  return compat_custom_rules.wrap_init(rule, debug_info)


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
                f"symbolic_zeros) {rule.expect[:4]} or types differ from its "
                f"definition's {definer.expect[:4]}")
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
  _check_rule_count(stored[3], eqn, n_pattern, what, kind == "bwd")
  return eqn, key, debug_info, stored[3], None
