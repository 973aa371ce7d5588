"""The types a stored custom rule must have where JAX uses it.

A file stores the rules of `custom_jvp_call`, `custom_vjp_call`,
`custom_lin` and `custom_vmap_call` equations as jaxprs (registrations.py,
lin.py, vmap.py). JAX calls a user's rules through its flattening
(`_flatten_jvp`, `_flatten_fwd`, `_flatten_bwd` in
jax/_src/custom_derivatives.py), which is where it compares what a rule
returns with the types of the call; a loaded rule takes the place of that
flattening, and JAX evaluates the jaxpr it gives with `core.eval_jaxpr`,
which compares nothing. A stored rule of other types than its use site
passes JAX's checker (each body type-checks on its own) and then gives a
derivative of another shape, silently, or an error deep inside JAX.

So every stored rule is typed here against the types its use site implies
when it is read (always, trusted or not: a comparison per input and
output), and the loaded rules that receive values (backward and batching
rules) compare them again when called (`check_call`). A mismatch is a
FormatError naming the rule, its pattern, and the type expected and found.
Types are compared as JAX compares them (`core.typematch`: weak types
aside, symbolic dimensions by JAX's own equality); a backward rule's input
cotangents as JAX's `_flatten_bwd` accepts them
(`compat.custom_rules.bwd_cotangent_fits`). The sites and their types are
the table "Typing of stored rules" in docs/trust-model.md, which
tests/hostile/test_rule_types.py holds to the functions named there.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax

from jaxpr_io import compat
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.compat import symbolic
from jaxpr_io.errors import FormatError

# An expected type: (what the value is, its type, or None where the use
# site gives a type JAX has no tangent or cotangent type for, left to JAX).
Expected = tuple[str, Any]


def tangent_type(aval):
  """JAX's tangent type of a primal of type `aval` (float0 for integers and
  booleans), or None for a type without one."""
  try:
    return aval.to_tangent_aval()
  except (AttributeError, NotImplementedError, TypeError, ValueError):
    return None


def cotangent_type(aval):
  """JAX's cotangent type of a value of type `aval`, or None."""
  try:
    return aval.to_ct_aval()
  except (AttributeError, NotImplementedError, TypeError, ValueError):
    return None


def same_type(expected, found) -> bool:
  """Whether a value of type `found` is one of type `expected` (JAX's
  `typecompat`: weak types aside)."""
  try:
    return bool(compat.typecompat(expected, found))
  except ValueError:  # symbolic dimensions of two scopes
    return False


def _short(aval) -> str:
  short = getattr(aval, "str_short", None)
  return short() if callable(short) else type(aval).__name__


def _avals(variables) -> list:
  return [v.aval for v in variables]


def check_types(rule: str, what: str, expected: Sequence[Expected],
                found: Sequence, *, start: int = 0,
                fits: Callable[[Any, Any], bool] = same_type) -> None:
  """Raises FormatError unless the types `found` of `rule`'s `what`
  ("input" or "output", numbered from `start`) are `expected`, one for
  one."""
  if len(expected) != len(found):
    raise FormatError(f"{rule} has {len(found)} {what}s from its {what} "
                      f"{start} on, where its use site gives "
                      f"{len(expected)}")
  verb = "takes" if what == "input" else "returns"
  for i, ((label, want), got) in enumerate(zip(expected, found), start):
    if want is not None and not fits(want, got):
      raise FormatError(
          f"{rule} {verb} {_short(got)} as its {what} {i} ({label}), where "
          f"its use site gives {_short(want)}: the stored rule does not "
          "fit the equation it belongs to")


def _numbered(label: str, avals: Sequence, zeros: Sequence[bool] | None =
              None, of: Callable = lambda a: a) -> list[Expected]:
  """(label i, of(aval i)) for each aval whose `zeros` entry is False."""
  return [(f"{label} {i}", of(a)) for i, a in enumerate(avals)
          if zeros is None or not zeros[i]]


def _out_avals(closed) -> list:
  return _avals(compat.open_jaxpr(closed).outvars)


# ------------------------------------------------------------- custom_jvp
def jvp_rule(eqn, index: int, in_zeros: tuple, jaxpr,
             out_zeros: tuple) -> None:
  """A custom_jvp equation's stored JVP rule for zero tangents `in_zeros`
  (`jvp.decode_jvp_rule`): JAX's `lift_jvp` evaluates it on the primals
  (the equation's inputs after its constants) and the tangents that are
  not zeros, of the primals' tangent types, and reads the primal outputs
  (the equation's outputs) and the tangents not in `out_zeros`, of their
  tangent types."""
  rule = (f"JVP rule {index} (zero tangents {in_zeros}) of custom_jvp "
          f"function {eqn.name!r}")
  primals = eqn.in_avals[eqn.num_consts:]
  check_types(rule, "input", [
      *_numbered("primal", primals),
      *_numbered("tangent of primal", primals, in_zeros, tangent_type)],
      _avals(jaxpr.invars))
  outs = _out_avals(eqn.call_jaxpr)
  check_types(rule, "output", [
      *_numbered("primal output", outs),
      *_numbered("tangent of output", outs, out_zeros, tangent_type)],
      _avals(jaxpr.outvars))


# ------------------------------------------------------------- custom_vjp
def fwd_rule(eqn, index: int, pattern, jaxpr, n_res_out: int) -> list:
  """A custom_vjp equation's stored forward rule for perturbed inputs
  `pattern` (`vjp.decode_fwd_rule`): JAX's `lift_fwd` evaluates it on the
  equation's inputs after its constants and reads `n_res_out` residuals,
  then the equation's outputs. Returns the residuals' types, which
  `residuals` compares with what the backward rule takes."""
  rule = (f"forward rule {index} (perturbed inputs "
          f"{'any' if pattern is None else pattern}) of custom_vjp function "
          f"{eqn.name!r}")
  check_types(rule, "input", _numbered("primal", eqn.in_avals[
      eqn.num_consts:]), _avals(jaxpr.invars))
  outs = _avals(jaxpr.outvars)
  check_types(rule, "output", _numbered("primal output",
                                        _out_avals(eqn.call_jaxpr)),
              outs[n_res_out:], start=n_res_out)
  return outs[:n_res_out]


def residuals(eqn, fwd_table: dict, input_fwds: Sequence, bwd_table: dict,
              n_res_out: int) -> None:
  """The residuals of a custom_vjp equation (`vjp._cross_check`): each
  stored forward rule returns residuals of one set of types (with the
  equation's inputs it forwards, `input_fwds`), the ones every stored
  backward rule takes, in every pattern and constant-residual entry."""
  types, first = None, None
  for pattern, entry in fwd_table.items():
    if type(entry) is not tuple:   # a pattern the rule raises for
      continue
    computed = iter(_avals(entry[0].outvars)[:n_res_out])
    found = [next(computed) if f is None else eqn.in_avals[f]
             for f in input_fwds]
    if types is None:
      types, first = found, pattern
      continue
    check_types(f"forward rule (perturbed inputs {pattern}) of custom_vjp "
                f"function {eqn.name!r}", "output", _numbered(
                    f"as the forward rule for {first} returns residual",
                    types), found)
  if types is None:
    return
  expected = _numbered("residual", types)
  for key, entry in bwd_table.items():
    if type(entry) is tuple:
      check_types(bwd_name(eqn, key), "input", expected,
                  _avals(entry[0].invars)[:len(types)])


def bwd_name(eqn, key) -> str:
  """Names the stored backward rule of `eqn` for table key `key` (a zero
  cotangent pattern, or a `bwd_table.ResidualKey`)."""
  ct_zeros = getattr(key, "ct_zeros", key)
  values = getattr(key, "values", None)
  detail = "" if values is None else f", constant residuals {values}"
  return (f"backward rule (zero cotangents {ct_zeros}{detail}) of "
          f"{eqn.kind} function {eqn.name!r}")


def bwd_rule(rule: str, jaxpr, n_res: int, ct_zeros: tuple, mask: tuple,
             zero_avals: Sequence, ct_types: Sequence,
             in_ct_types: Sequence) -> None:
  """A stored backward rule (`bwd_table.decode_bwd_table`): after its
  `n_res` residuals it takes the cotangents of the outputs not zero in
  `ct_zeros`, of types `ct_types` (one per output), and it returns the
  cotangents of the inputs (`zero_avals` the types of those `mask` marks
  zero), which JAX accumulates as cotangents of types `in_ct_types` (one
  per input; None: not checked)."""
  check_types(rule, "input", _numbered("cotangent of output", ct_types,
                                       ct_zeros),
              _avals(jaxpr.invars)[n_res:], start=n_res)
  outs = iter(_avals(jaxpr.outvars))
  zeros = iter(zero_avals)
  for i, (want, zero) in enumerate(zip(in_ct_types, mask)):
    got = next(zeros) if zero else next(outs)
    if want is None:
      continue
    if zero:
      check_types(rule, "output", [(f"zero cotangent of input {i}", want)],
                  [got], start=i)
    else:
      check_types(rule, "output", [(f"cotangent of input {i}", want)],
                  [got], start=i, fits=compat_custom_rules.bwd_cotangent_fits)


def vjp_cotangent_types(eqn) -> tuple[list, list]:
  """(the output cotangent types a custom_vjp equation's backward rule
  takes, the input cotangent types it returns): JAX's `_flatten_bwd`
  compares them with `to_ct_aval` of the outputs and inputs."""
  return ([cotangent_type(a) for a in _out_avals(eqn.call_jaxpr)],
          [cotangent_type(a) for a in eqn.in_avals[eqn.num_consts:]])


# ------------------------------------------------------------- custom_lin
class LinRule:
  """What lin.py's loaded `custom_lin` backward rule is (a base class):
  its `table` and `n_res` are typed against each equation that holds it
  (`lin_problem`), since its residual and tangent types are the
  equation's inputs, which a param set shared by equations cannot
  give."""

  __slots__ = ()


def lin_problem(eqn) -> str | None:
  """What is wrong with the types of a loaded `custom_lin` equation's
  backward rule, or None: `_custom_lin_transpose` calls it on the
  equation's `num_res` residuals (its first inputs) and the cotangents of
  `out_avals`, and accumulates what it returns for the inputs not zero in
  `in_zeros` into the cotangents of the equation's other inputs."""
  rule = compat.wrapped_function(eqn.params.get("bwd"))
  if not isinstance(rule, LinRule):
    return None
  num_res, in_zeros, out_avals = (eqn.params.get(k) for k in (
      "num_res", "in_zeros", "out_avals"))
  if (type(num_res) is not int or type(in_zeros) is not list
      or type(out_avals) is not list):
    return "its num_res, in_zeros and out_avals are not an int and lists"
  avals = _avals(eqn.invars)
  tangents = iter(avals[num_res:])
  if len(avals) - num_res != in_zeros.count(False):
    return (f"it has {len(avals) - num_res} tangent inputs for the "
            f"{in_zeros.count(False)} inputs in_zeros leaves")
  in_ct_types = [None if z else cotangent_type(next(tangents))
                 for z in in_zeros]
  ct_types = [cotangent_type(a) for a in out_avals]
  residual_types = _numbered("residual", avals[:num_res])
  try:
    for key, entry in rule.table.items():
      if type(entry) is not tuple:   # a pattern the rule raises for
        continue
      jaxpr, _, mask, zero_avals = entry
      name = bwd_name(rule.eqn, key)
      check_types(name, "input", residual_types,
                  _avals(jaxpr.invars)[:num_res])
      bwd_rule(name, jaxpr, num_res, getattr(key, "ct_zeros", key), mask,
               zero_avals, ct_types, in_ct_types)
  except FormatError as e:
    return str(e)
  return None


# ------------------------------------------------------------ custom_vmap
def vmap_rule(name: str, call, n_args: int, pattern: tuple, closed,
              out_batched: tuple, axis_name: str) -> None:
  """A custom_vmap equation's stored batching rule for batched inputs
  `pattern` (`vmap.decode_rule`): JAX calls it on the equation's inputs
  (`call`'s: constants, then `n_args` arguments), those `pattern` batches
  with a leading axis of the batch size, and reads the outputs of `call`,
  those in `out_batched` with that axis. The rule is stored with the batch
  size as the symbolic dimension `axis_name`."""
  rule = f"the custom_vmap rule {name!r} for batched inputs {pattern}"
  in_avals = _avals(compat.open_jaxpr(call).invars)
  n_consts = len(in_avals) - n_args
  if n_consts < 0:
    raise FormatError(f"{rule} is stored for {n_args} inputs; the call "
                      f"takes {len(in_avals)}")
  batched = [False] * n_consts + list(pattern)
  found_in, found_out = _avals(closed.jaxpr.invars), _avals(
      closed.jaxpr.outvars)
  axis = _batch_axis(rule, [a for a, b in zip(found_in, batched) if b]
                     + [a for a, b in zip(found_out, out_batched) if b],
                     axis_name)

  def expected(avals, flags, label):
    return [(f"{label} {i}", _batched(rule, a, axis) if b else a)
            for i, (a, b) in enumerate(zip(avals, flags))]
  check_types(rule, "input", expected(in_avals, batched, "input"), found_in)
  check_types(rule, "output", expected(_out_avals(call), out_batched,
                                       "output"), found_out)


def _batch_axis(rule: str, batched: list, axis_name: str):
  """The batch dimension the rule's batched values lead with: the
  symbolic dimension `axis_name`, which the loaded rule sets to the batch
  size."""
  if not batched:
    return None
  shape = getattr(batched[0], "shape", ())
  axis = shape[0] if shape else None
  if not (symbolic.is_symbolic(axis) and str(axis) == axis_name):
    raise FormatError(f"{rule} has a batched value of type "
                      f"{_short(batched[0])}, which does not lead with the "
                      f"batch dimension {axis_name!r}")
  return axis


def _batched(rule: str, aval, axis):
  shape = getattr(aval, "shape", None)
  if shape is None or not hasattr(aval, "update"):
    raise FormatError(f"{rule} batches a value of type {_short(aval)}, "
                      "which has no array shape")
  return aval.update(shape=(axis, *shape))


# ---------------------------------------------------------------- calls
def check_call(rule: Callable[[], str], jaxpr, args: Sequence) -> None:
  """Raises FormatError, naming the rule (`rule()`), unless `args` have
  the types of `jaxpr`'s inputs: what a loaded rule that evaluates a stored
  jaxpr on the values JAX gives it checks as it is called (JAX's
  `eval_jaxpr` compares nothing)."""
  invars = jaxpr.invars
  if len(invars) != len(args):
    raise FormatError(f"{rule()} is called with {len(args)} values for "
                      f"the {len(invars)} inputs of its stored jaxpr")
  for i, (var, arg) in enumerate(zip(invars, args)):
    got = jax.typeof(arg)
    if not same_type(var.aval, got):
      raise FormatError(
          f"{rule()} is called with {_short(got)} as its input {i}, where "
          f"its stored jaxpr takes {_short(var.aval)}: the file's rule does "
          "not fit the program it is called in")
