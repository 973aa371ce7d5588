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

import contextlib
import os
import threading
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


_DTYPE_EXCEPTION = getattr(custom_derivatives, "_temporary_dtype_exception",
                           lambda expected, found: False)


def bwd_cotangent_fits(expected, found) -> bool:
  """Whether JAX's flattening of a custom_vjp backward rule (`_flatten_bwd`)
  accepts an input cotangent of type `found` for an input whose cotangent
  type is `expected`: the same type, weak types aside, or (an exception JAX
  0.10 to 0.12 still make) the same shape in another dtype where `expected`
  is inexact."""
  try:
    return bool(core.typecompat(expected, found)
                or _DTYPE_EXCEPTION(expected, found))
  except (TypeError, ValueError):
    # Symbolic dimensions of two scopes, or avals JAX cannot compare.
    return False


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
    return call_isolated(fun, *args)
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


# Rule thunks and the stores they fill. JAX memoizes a rule thunk
# (`pe._memoize`: a `cells` dict in the closure of `memoized`); a call it
# remembers does not refill the stores of the function it traced, which a
# custom_vjp's `out_trees` and backward rule read, so they hold what the
# last call that traced left (nothing, if it raised). A thunk made when a
# jaxpr holding a custom_vjp equation is evaluated again (`lift_fwd`) calls
# the equation's own thunk: a chain of thunks ends at the rule, and a memo
# anywhere on it decides what the stores hold. While a program is written
# (`isolated_rules`), each thunk met gets a memo of the writer's own,
# empty, that puts back on every call it remembers the stores' values of
# the call that traced; after the write the thunks' memos and stores are
# put back as they were found. So a write reads no state that earlier
# writes, `jax.grad` or `jit` of the original left, and leaves none.
_MEMOIZED_CODE = pe._memoize(lambda: None).__code__  # pylint: disable=protected-access
# Closures followed when looking for a thunk's chain: JAX's own functions
# only (a rule's own closure may hold anything).
_JAX_SOURCE = os.path.dirname(os.path.dirname(pe.__file__)) + os.sep
_RULE_PARAMS = ("jvp_jaxpr_fun", "fwd_jaxpr_thunk", "bwd")


def _walk(fun) -> tuple[list, list]:
  """(stores, [(memo cell, memoized function)]) of the chain of rule
  thunks that `fun` calls, itself included, through JAX's own closures."""
  stores, memos, todo, walked = [], [], [fun], set()
  while todo:
    value = todo.pop()
    if type(value) is lu.WrappedFun:
      for store in value.stores:
        store = getattr(store, "_store", store)  # an EqualStore's Store
        if type(store) is lu.Store:
          stores.append(store)
      todo.append(value.f)
      continue
    code = getattr(value, "__code__", None)
    if (code is None or not code.co_filename.startswith(_JAX_SOURCE)
        or not getattr(value, "__closure__", None)):
      continue
    for name, cell in zip(code.co_freevars, value.__closure__):
      if id(cell) in walked:
        continue
      walked.add(id(cell))
      if code is _MEMOIZED_CODE and name == "cells":
        memos.append((cell, value))
      else:
        todo.append(cell.cell_contents)
  return stores, memos


class _Isolation:
  """The rule thunks and stores met while one program is written, with
  what they held before."""

  def __init__(self):
    self.cells: dict[int, tuple] = {}  # id(memo cell) -> (cell, JAX's memo)
    self.stores: dict[int, tuple] = {}  # id(store) -> (store, value)
    self.chains: dict[int, Any] = {}  # id(thunk) -> thunk taken in
    self.seen: dict[int, Any] = {}  # id(jaxpr) -> jaxpr walked (kept alive)

  def take_in(self, fun) -> None:
    """Gives the thunks of `fun`'s chain the writer's memos, on first
    sight, and records their stores."""
    if id(fun) in self.chains:
      return
    self.chains[id(fun)] = fun
    stores, memos = _walk(fun)
    self._keep(stores)
    for cell, function in memos:
      if type(cell.cell_contents) is not _WriterMemo:
        self.cells[id(cell)] = (cell, cell.cell_contents)
        cell.cell_contents = _WriterMemo(self, _walk(function)[0])

  def _keep(self, stores) -> None:
    for store in stores:
      if id(store) not in self.stores:
        self.stores[id(store)] = (store, store._val)  # pylint: disable=protected-access

  def nested(self, jaxpr) -> None:
    """Takes in the thunks of the custom rule equations of `jaxpr` (a rule
    thunk's result) and of its sub-jaxprs."""
    todo = [jaxpr]
    while todo:
      value = todo.pop()
      if type(value) is tuple:
        todo.extend(value)
      elif compat.is_closed_jaxpr(value) and not compat.MERGED_JAXPRS:
        todo.append(value.jaxpr)
      elif compat.is_jaxpr(value) and id(value) not in self.seen:
        self.seen[id(value)] = value
        for eqn in value.eqns:
          if eqn.primitive in (custom_jvp_call_p, custom_vjp_call_p):
            for name in _RULE_PARAMS:
              if name in eqn.params:
                self.take_in(eqn.params[name])
          todo.extend(eqn.params.values())

  def restore(self) -> None:
    for cell, memo in self.cells.values():
      cell.cell_contents = memo
    for store, value in self.stores.values():
      store._val = value  # pylint: disable=protected-access


class _WriterMemo(dict):
  """A rule thunk's memo while a program is written. A call it remembers
  puts back the values its chain's stores had after the call that traced,
  so it is as that call was; the thunks in what it remembers are taken in
  too, so JAX's own calls of them (when the writer differentiates the
  program, requests.py) start from the writer's memos as well."""

  __slots__ = ("isolation", "stores", "after")

  def __init__(self, isolation: _Isolation, stores: list):
    super().__init__()
    self.isolation = isolation
    self.stores = stores
    isolation._keep(stores)  # pylint: disable=protected-access
    self.after: dict = {}  # key -> the stores' values after its call

  def get(self, key, default=None):
    value = super().get(key, default)
    if value is not default:
      for store, stored in zip(self.stores, self.after[key]):
        store._val = stored  # pylint: disable=protected-access
    return value

  def __setitem__(self, key, value):
    super().__setitem__(key, value)
    self.after[key] = [store._val for store in self.stores]  # pylint: disable=protected-access
    if type(value) is tuple and value:
      self.isolation.nested(value[0])


class _Current(threading.local):
  def __init__(self):
    self.isolation: _Isolation | None = None


_CURRENT = _Current()


@contextlib.contextmanager
def isolated_rules():
  """The context of writing one program: the custom rule thunks it calls
  (`call_isolated`, `call_fresh`, `recording`) start from the writer's
  memos, and their memos and stores are put back after."""
  outer, _CURRENT.isolation = _CURRENT.isolation, _Isolation()
  try:
    yield
  finally:
    _CURRENT.isolation.restore()
    _CURRENT.isolation = outer


def call_isolated(thunk: WrappedFun, *pattern):
  """Calls a rule thunk (`jvp_jaxpr_fun`, `fwd_jaxpr_thunk`) as the
  program's writer (`isolated_rules`): a call remembered before the write
  is not used, and one remembered during it leaves the stores as the call
  that traced did."""
  if _CURRENT.isolation is not None:
    _CURRENT.isolation.take_in(thunk)
  return thunk.call_wrapped(*pattern)


def call_fresh(thunk: WrappedFun, *pattern):
  """Calls a forward-rule thunk that JAX memoizes (`pe._memoize`) as if for
  the first time: the stores of the function it traces, which `out_trees`
  and the backward rule read, hold what a first call stores. While a
  program is written that is `call_isolated`; outside, the thunk's memo of
  `pattern` is dropped."""
  if _CURRENT.isolation is not None:
    return call_isolated(thunk, *pattern)
  f = thunk.f
  cells = dict(zip(getattr(getattr(f, "__code__", None), "co_freevars", ()),
                   getattr(f, "__closure__", None) or ())).get("cells")
  if cells is not None and type(cells.cell_contents) is dict:
    cells.cell_contents.pop(tuple(pattern), None)
  return thunk.call_wrapped(*pattern)
