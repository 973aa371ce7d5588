"""The program an inference runtime runs: what only differentiation,
compilation boundaries or debugging need is taken out.

`for_inference(prog)` returns a `ClosedJaxpr` computing the same outputs,
in which

* `custom_jvp_call` and `custom_vjp_call` are replaced by their primal
  bodies (inference never runs the derivative rules; the `.jaxpr` file
  keeps them),
* `jit` (pjit), `closed_call`, `core_call` and `remat2` (`jax.checkpoint`)
  are inlined,
* equations whose only effect is debugging (`jax.debug.print`,
  `jax.debug.callback`) and whose outputs nothing uses are dropped,

at every depth: inside `scan`, `while` and `cond` bodies too. It is built by
re-tracing the program (`jax.make_jaxpr`) with each equation bound again by
its own primitive, so the result is an ordinary traced jaxpr whose
constants are the program's constants (the bound weights). Symbolic
dimensions stay symbolic (the same scope as the program's).

`walk(closed)` yields every equation the simplified program runs, with its
place in the original program (`equation 12 (jit) > 3`), so a converter can
refuse a primitive up front, naming it where the user can find it in
`jaxpr-load --text`.
"""

from __future__ import annotations

from typing import Iterator

import jax

from jaxpr_io import compat
from jaxpr_io.compat import callbacks as compat_callbacks
from jaxpr_io.converters._common import as_program
from jaxpr_io.format import vocabulary

# Primitive -> the param holding the body that is called with all the
# equation's inputs and returns its outputs.
INLINED = {
    "custom_jvp_call": "call_jaxpr",
    "custom_vjp_call": "call_jaxpr",
    "custom_vjp_call_jaxpr": "fun_jaxpr",
    "jit": "jaxpr",
    "pjit": "jaxpr",
    "closed_call": "call_jaxpr",
    "core_call": "call_jaxpr",
    "remat2": "jaxpr",
    "checkpoint": "jaxpr",
}


def _is_debug_only(eqn, used) -> bool:
  effects = getattr(eqn, "effects", ()) or ()
  return bool(effects) and all(
      e in compat_callbacks.DEBUG_EFFECTS for e in effects) and not any(
          v in used for v in eqn.outvars if type(v) is compat.Var)


def inlined_body(eqn):
  """The inlinable body of `eqn` as (jaxpr, consts), or None."""
  param = INLINED.get(eqn.primitive.name)
  body = eqn.params.get(param) if param else None
  if body is None or not compat.is_jaxpr(body):
    return None
  consts = list(getattr(body, "consts", ()) or ())
  jaxpr = compat.open_jaxpr(body) if hasattr(body, "consts") else body
  if len(jaxpr.invars) != len(eqn.invars) and not (
      len(jaxpr.constvars) + len(jaxpr.invars) == len(eqn.invars)
      and not consts):
    return None
  return jaxpr, consts


def sub_jaxprs(eqn):
  """(param, index or None, closed jaxpr) of each closed sub-jaxpr param."""
  for name, value in eqn.params.items():
    if vocabulary.holds_open_jaxpr(eqn.primitive.name, name):
      continue
    values = value if isinstance(value, tuple) else (value,)
    for i, sub in enumerate(values):
      if compat.is_closed_jaxpr(sub) or (
          compat.MERGED_JAXPRS and compat.is_jaxpr(sub)):
        yield name, (i if isinstance(value, tuple) else None), sub


def needs_simplifying(jaxpr) -> bool:
  """Whether `jaxpr` (open or closed) holds anything `for_inference` takes
  out, at any depth."""
  jaxpr = compat.open_jaxpr(jaxpr) if compat.is_closed_jaxpr(jaxpr) else jaxpr
  for eqn in jaxpr.eqns:
    if eqn.primitive.name in INLINED or all(
        e in compat_callbacks.DEBUG_EFFECTS for e in eqn.effects or ()) and (
            eqn.effects):
      return True
    if any(needs_simplifying(sub) for _, _, sub in sub_jaxprs(eqn)):
      return True
  return False


def _spec(aval):
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype,
                              weak_type=getattr(aval, "weak_type", False))


def _retrace(closed):
  """`closed` re-traced through `_evaluate`: the simplified closed jaxpr of
  the same avals."""
  jaxpr = compat.open_jaxpr(closed)
  consts = list(closed.consts)
  return jax.make_jaxpr(lambda *args: _evaluate(jaxpr, consts, args))(
      *[_spec(a) for a in closed.in_avals])


def _simplified_params(eqn) -> dict:
  params = dict(eqn.params)
  for name, index, sub in sub_jaxprs(eqn):
    if not needs_simplifying(sub):
      continue
    new = _retrace(sub)
    if index is None:
      params[name] = new
    else:
      items = list(params[name])
      items[index] = new
      params[name] = tuple(items)
  return params


def _evaluate(jaxpr, consts, args) -> list:
  """Evaluates `jaxpr` on `args` (tracers while re-tracing), inlining and
  dropping as the module doc says."""
  env = {}

  def read(atom):
    return atom.val if type(atom) is compat.Literal else env[atom]

  env.update(zip(jaxpr.constvars, consts))
  env.update(zip(jaxpr.invars, args))
  used = {v for e in jaxpr.eqns for v in e.invars if type(v) is compat.Var}
  used.update(v for v in jaxpr.outvars if type(v) is compat.Var)
  for eqn in jaxpr.eqns:
    if _is_debug_only(eqn, used):
      continue
    invals = [read(a) for a in eqn.invars]
    body = inlined_body(eqn)
    if body is not None:
      sub, sub_consts = body
      if sub_consts or len(sub.invars) == len(invals):
        outs = _evaluate(sub, sub_consts, invals)
      else:  # an open body whose constvars are the leading inputs
        n = len(sub.constvars)
        outs = _evaluate(sub, invals[:n], invals[n:])
    else:
      # As core.eval_jaxpr binds (call primitives turn a jaxpr param into
      # the `subfuns` they are bound with).
      params = eqn.primitive.get_bind_params(_simplified_params(eqn))
      outs = eqn.primitive.bind(*invals, **params)
      if not eqn.primitive.multiple_results:
        outs = [outs]
    for v, out in zip(eqn.outvars, outs):
      if type(v) is compat.Var:
        env[v] = out
  return [read(v) for v in jaxpr.outvars]


def for_inference(program):
  """The simplified `ClosedJaxpr` of `program` (a `Program` or
  `ClosedJaxpr`; see the module doc). Its inputs and outputs are the
  program's flat inputs and outputs, in order."""
  prog = as_program(program)
  return _retrace(prog.closed_jaxpr)


def walk(closed, where: str = "") -> Iterator[tuple[str, object]]:
  """(place, equation) of every equation that `for_inference(closed)` keeps,
  at any depth, with its place in `closed`: `equation 4`, or `equation 4
  (jit) > 2` for the third equation of the body inlined from equation 4,
  or `equation 7 (scan) > 1` inside a loop body."""
  jaxpr = compat.open_jaxpr(closed) if compat.is_closed_jaxpr(closed) else (
      closed)
  used = {v for e in jaxpr.eqns for v in e.invars if type(v) is compat.Var}
  used.update(v for v in jaxpr.outvars if type(v) is compat.Var)
  for i, eqn in enumerate(jaxpr.eqns):
    place = f"{where} > {i}" if where else f"equation {i}"
    if _is_debug_only(eqn, used):
      continue
    body = inlined_body(eqn)
    if body is not None:
      yield from walk(body[0], f"{place} ({eqn.primitive.name})")
      continue
    yield place, eqn
    for _, _, sub in sub_jaxprs(eqn):
      yield from walk(sub, f"{place} ({eqn.primitive.name})")
