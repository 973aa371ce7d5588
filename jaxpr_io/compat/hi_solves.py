"""`lax.custom_root`'s hi primitives (JAX 0.11+): `CustomRoot` and the
linear map its tangent solve applies, `_RootLinearMap`, both in
jax._src.lax.control_flow.solves. On JAX 0.10 `custom_root` binds ordinary
primitives, and every name here but `SUPPORTED` is None.

Their constructors take Python callables (`f`, `solve`, `tangent_solve`)
where JAX passes the closure-converted functions of traced jaxprs
(`stages.Traced.closure_convert`), or those functions under `vmap`
(`hijax.vmap_rule`, from the classes' batch rules). Either way a callable
is what it computes at the avals the class calls it with: `trace` gives
that jaxpr, `jaxpr_fun` the function of a jaxpr, built as
`closure_convert` builds it.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
from jax._src import core

try:
  from jax._src.lax.control_flow import solves as _solves
except ImportError:  # pragma: no cover - every supported release has it
  _solves = None

CustomRoot = getattr(_solves, "CustomRoot", None)
RootLinearMap = getattr(_solves, "_RootLinearMap", None)
_EVAL_JAXPR = getattr(core, "eval_jaxpr_p", None)
SUPPORTED = None not in (CustomRoot, RootLinearMap, _EVAL_JAXPR)


def trace(fn: Callable, *avals) -> tuple[Any, Any]:
  """(jaxpr, output treedef) of `fn` called on pytrees of avals `avals`.

  A function that only calls a jaxpr (a closure-converted one: what
  `jaxpr_fun` and JAX build) gives that jaxpr itself (`unwrap`), as
  `Traced.with_consts_as_arg` unwraps it: so a rebuilt object traces to
  the jaxpr it was built from, and re-dumps to the same bytes. Returns
  (None, None) when the trace captured constants: the classes pass every
  constant as an argument, so such a callable is none of JAX's."""
  traced = jax.jit(fn).trace(*avals)
  if traced._consts or traced.jaxpr.consts:  # pylint: disable=protected-access
    return None, None
  return unwrap(traced.jaxpr), traced.out_tree


def unwrap(jaxpr):
  """The jaxpr that `jaxpr` only calls, through any number of
  `eval_jaxpr` equations that pass its inputs and outputs through (as a
  function built by `jaxpr_fun` traces, under vmap too); else `jaxpr`."""
  while (not jaxpr.consts and len(jaxpr.eqns) == 1
         and (eqn := jaxpr.eqns[0]).primitive is _EVAL_JAXPR
         and list(eqn.invars) == list(jaxpr.invars)
         and list(eqn.outvars) == list(jaxpr.outvars)
         and not eqn.params["call_jaxpr"].consts):
    jaxpr = eqn.params["call_jaxpr"]
  return jaxpr


def jaxpr_fun(jaxpr, out_tree, qualname: str) -> Callable:
  """The function that applies `jaxpr` to the leaves of its arguments and
  returns its results as a pytree of `out_tree`: `Traced.closure_convert`'s
  function, with the constants among the arguments. It has the qualified
  name `qualname` (the original's), which JAX prints among the params."""
  def fun(*args):
    out_flat = _EVAL_JAXPR.bind(*jax.tree_util.tree_leaves(args),
                                call_jaxpr=jaxpr)
    return jax.tree_util.tree_unflatten(out_tree, out_flat)
  fun.__qualname__, fun.__name__ = qualname, qualname.rsplit(".", 1)[-1]
  fun._jaxpr_io_jaxpr = jaxpr  # pylint: disable=protected-access
  return fun


def applied_jaxpr(fn):
  """The jaxpr that `fn` applies, if `jaxpr_fun` built it; else None."""
  return getattr(fn, "_jaxpr_io_jaxpr", None)


def effects(jaxpr) -> frozenset:
  """`Traced.effects` of a traced function whose jaxpr is `jaxpr`."""
  return frozenset(core.positional_effects(jaxpr))


class SolveTraced:
  """What `CustomRoot` reads of its `solve_traced` argument (a
  `stages.Traced` of its solve function): the solve jaxpr, its outputs'
  avals as a pytree, and its effects."""
  __slots__ = ("jaxpr", "out_avals", "effects")

  def __init__(self, jaxpr, out_avals):
    self.jaxpr, self.out_avals = jaxpr, out_avals
    self.effects = effects(jaxpr)
