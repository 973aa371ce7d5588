"""JAX internals for custom differentiation rules (`jax.custom_jvp`,
`jax.custom_vjp`).

A `custom_jvp_call` equation holds its JVP rule as `jvp_jaxpr_fun`, a
memoized `lu.WrappedFun` mapping a pattern of symbolic-zero tangents to
`(jaxpr, consts, out_zeros)`; a `custom_vjp_call` equation holds
`fwd_jaxpr_thunk` (pattern of perturbed inputs -> `(jaxpr, consts)`), `bwd`
(an `lu.WrappedFun` over residuals and output cotangents returning input
cotangents, some of them `ad.Zero`; from JAX 0.11 on it returns the pair
`(cotangents, logs)`, see `call_bwd`) and `out_trees` (a thunk returning
`(out_tree, res_tree, input_fwds)`). They are made by
`DynamicJaxprTrace.process_custom_jvp_call`/`process_custom_vjp_call` in
jax/_src/interpreters/partial_eval.py and called by `lift_jvp`, `lift_fwd`
and `_handle_consts_in_bwd` in jax/_src/custom_derivatives.py, by
`_custom_lin_transpose` in jax/_src/interpreters/ad.py and by the batching
rules in jax/_src/interpreters/batching.py. This module is the only place
that touches those internals; `jaxpr_io.families.custom_rules.registrations` builds on it.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import jax
from jax._src import ad_util
from jax._src import config as jax_config
from jax._src import core
from jax._src import custom_batching
from jax._src import custom_derivatives
from jax._src import linear_util as lu
from jax._src.interpreters import partial_eval as pe

from jaxpr_io import compat

custom_jvp_call_p = custom_derivatives.custom_jvp_call_p
custom_vjp_call_p = custom_derivatives.custom_vjp_call_p

WrappedFun = lu.WrappedFun
DebugInfo = lu.DebugInfo
# The zero a bwd rule's flattened result holds for "no cotangent" ...
Zero = ad_util.Zero
# ... and the zero user-facing rules see with `symbolic_zeros=True`.
SymbolicZero = ad_util.SymbolicZero


# JAX 0.11 added backward-pass logs (`custom_vjp.defvjp_with_logs`): from
# then on a custom_vjp equation's flat `bwd` returns `(cotangents, logs)`,
# `logs` None or a dict of pytrees, instead of the cotangents alone.
BWD_RETURNS_LOGS = hasattr(custom_derivatives.custom_vjp, "defvjp_with_logs")


def call_bwd(bwd, *args) -> tuple[list, Any]:
  """(input cotangents, logs) of a custom_vjp equation's `bwd` called on
  residuals and output cotangents; logs are None on releases without them."""
  out = bwd.call_wrapped(*args)
  if not BWD_RETURNS_LOGS:
    return list(out), None
  cts, logs = out
  return list(cts), logs


def bwd_result(cts: list):
  """What a `bwd` that computes input cotangents `cts` and logs nothing
  returns on this release (see `call_bwd`)."""
  return (cts, None) if BWD_RETURNS_LOGS else cts


def without_bwd_type_checks():
  """A context in which a custom_vjp's flattened `bwd` does not compare
  its cotangents' types with the primal inputs' types recorded when the
  equation was traced: a program specialized from symbolic shapes to sizes
  (jaxpr_io/compat/specialize.py) calls a traced program's `bwd`, whose
  recorded types are symbolic (`float32[b,3]`) and its cotangents concrete
  (`float32[5,3]`)."""
  return jax_config.disable_bwd_checks(True)


# The code of the rule `jax.custom_batching.sequential_vmap` defines (the
# same for every function it wraps).
_SEQUENTIAL_RULE_CODE = custom_batching.sequential_vmap(
    lambda x: x).vmap_rule.__code__


def is_sequential_vmap_rule(rule) -> bool:
  """Whether a `custom_vmap_call`'s `rule` is `sequential_vmap`'s: it maps
  the function itself over the batch, so tracing it gives a jaxpr holding
  the same equation again, without end."""
  inner = getattr(rule, "rule", None)
  return (type(rule) is custom_batching.ClosedRule
          and getattr(inner, "__code__", None) is _SEQUENTIAL_RULE_CODE)


def wrap_init(f: Callable, debug_info) -> WrappedFun:
  """`f` as a `WrappedFun` with no transformations, as JAX wraps its rules."""
  return lu.wrap_init(f, debug_info=debug_info)


def is_plain_wrapped(value) -> bool:
  """Whether `value` is a `WrappedFun` that only calls its `f` (no
  transformations, params or stores), so `value.f` is the whole function."""
  return (type(value) is lu.WrappedFun and not value.transforms
          and not value.params and not value.stores)


def eval_jaxpr(jaxpr, consts, *args) -> list:
  return core.eval_jaxpr(jaxpr, consts, *args)


def zeros_like_aval(aval):
  return ad_util.zeros_like_aval(aval)


def is_tracer(x) -> bool:
  return isinstance(x, core.Tracer)


def is_zero(x) -> bool:
  """Whether `x` is a symbolic zero of either kind."""
  return type(x) is Zero or type(x) is SymbolicZero


def trace_flat(f: Callable, in_avals: Sequence[Any], debug_info):
  """`(jaxpr, consts)` of `f(*tracers)` for tracers of types `in_avals`;
  `f` returns a flat list. Traced outside any enclosing transformation, as
  JAX's own rule thunks (`pe._memoize`) trace."""
  fun = lu.wrap_init(f, debug_info=debug_info.with_unknown_names())
  with core.set_current_trace(None):
    jaxpr, _, consts = pe.trace_to_jaxpr_dynamic(fun, list(in_avals))
  return jaxpr, list(consts)


def dce_jaxpr(jaxpr, used_outputs: Sequence[bool]):
  """JAX's dead-code elimination of `jaxpr` (`pe.dce_jaxpr`, keeping every
  input). Its rules for the two primitives wrap the equations' rules in
  new callables that reuse the rule jaxprs' equations; tests use it to make
  such equations from loaded programs."""
  new_jaxpr, _ = pe.dce_jaxpr(jaxpr, list(used_outputs), instantiate=True)
  return new_jaxpr


def flat_treedef(num_leaves: int):
  """A tuple treedef of `num_leaves` leaves."""
  return jax.tree_util.tree_structure((0,) * num_leaves)


def recording(fun: WrappedFun, record: Callable[[tuple], None]) -> WrappedFun:
  """A rule (`jvp_jaxpr_fun`, `bwd`) that calls `record(args)` and then
  `fun` on them (a backward rule so wrapped takes no gradient accumulators
  on JAX 0.12; it computes the same cotangents)."""

  def call(*args):
    record(args)
    return fun.call_wrapped(*args)
  return lu.wrap_init(call, debug_info=fun.debug_info)


def with_params(closed, replace: Callable[[Any], dict | None]):
  """`closed` rebuilt with the params of each equation, nested ones too (in
  params that hold jaxprs or tuples of them), that `replace(eqn)` returns
  (None: unchanged). Unchanged jaxprs are the same objects."""
  memo: dict[int, tuple] = {}  # id -> (original, rebuilt): ids stay taken

  def visit(value):
    if type(value) is tuple:
      items = tuple(map(visit, value))
      return value if all(a is b for a, b in zip(items, value)) else items
    if not compat.is_jaxpr(value):
      return value
    if id(value) in memo:
      return memo[id(value)][1]
    if compat.is_closed_jaxpr(value) and not compat.MERGED_JAXPRS:
      inner = visit(value.jaxpr)
      new = value if inner is value.jaxpr else core.ClosedJaxpr(
          inner, value.consts)
    else:
      eqns, changed = [], False
      for eqn in value.eqns:
        params = replace(eqn) or eqn.params
        params = {k: visit(v) for k, v in params.items()}
        if any(params[k] is not v for k, v in eqn.params.items()):
          eqn, changed = eqn.replace(params=params), True
        eqns.append(eqn)
      new = value.replace(eqns=eqns) if changed else value
    memo[id(value)] = (value, new)
    return new
  return visit(closed)


def call_fresh(thunk: WrappedFun, *pattern):
  """Calls a forward-rule thunk that JAX memoizes (`pe._memoize`) as if for
  the first time. A fresh call resets and refills the stores of the
  function it traces, which `out_trees` and the backward rule read; a
  remembered call touches nothing, so they hold what the last fresh call
  left (nothing, if it raised)."""
  f = thunk.f
  cells = dict(zip(getattr(getattr(f, "__code__", None), "co_freevars", ()),
                   getattr(f, "__closure__", None) or ())).get("cells")
  if cells is not None and type(cells.cell_contents) is dict:
    cells.cell_contents.pop(tuple(pattern), None)
  return thunk.call_wrapped(*pattern)
