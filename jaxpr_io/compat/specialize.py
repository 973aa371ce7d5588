"""Specializing a shape-polymorphic program to concrete dimension sizes.

A program traced with symbolic shapes (`jax.export.symbolic_shape`) holds
dimension expressions in its avals and params. To evaluate it on concrete
arrays, `Program.__call__` solves the dimension variables from the argument
shapes and rebuilds the jaxpr with every expression evaluated: the result is
the program JAX would have traced for those sizes.

That covers the rules JAX calls later, when the program is transformed:
a custom_jvp's JVP rule and a custom_vjp's forward rule are thunks that
return jaxprs traced at the symbolic types, so a specialized equation holds
a thunk that specializes what they return (`_Specializer.wrapped`); rule
objects that evaluate stored jaxprs themselves (a loaded custom_vjp's
backward rule, a custom_vmap rule) are specialized by the family that owns
them (`register_specializer`).

The sizes may themselves be symbolic expressions of another scope (a
program called inside `jax.export` or jax2tf with their own symbolic
shapes): the program is then re-expressed in that scope.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import custom_rules
from jaxpr_io.compat import symbolic

# Exact type -> fn(value, specializer) -> the value for the specialized
# program; see `register_specializer`.
_SPECIALIZERS: dict[type, Callable[[Any, "_Specializer"], Any]] = {}

# Registers the families' specializers (`set_specializer_loader`): a traced
# program, never dumped or loaded, may hold their objects too (a hi
# primitive's).
_load_specializers: Callable[[], None] | None = None


def set_specializer_loader(load: Callable[[], None]) -> None:
  """`load()` registers the specializers of the families (idempotent); it
  runs before any program is specialized."""
  global _load_specializers
  _load_specializers = load


def register_specializer(*, value_type: type,
                         specialize: Callable[[Any, Any], Any]) -> None:
  """Registers how a param value of exact type `value_type` (a rule object
  holding jaxprs with symbolic shapes) is specialized: `specialize(value,
  specializer)` returns the value for the specialized program, using the
  specializer's `env`, `jaxpr`, `closed_jaxpr`, `aval` and `value`."""
  if value_type in _SPECIALIZERS:
    raise ValueError(f"a specializer for {value_type.__qualname__} is "
                     "already registered")
  _SPECIALIZERS[value_type] = specialize


def has_symbolic_dims(avals) -> bool:
  return any(symbolic.is_symbolic(d)
             for a in avals for d in getattr(a, "shape", ()))


class _Specializer:
  """Rebuilds jaxprs with the dimension variables of `env` evaluated; each
  original object is rebuilt once (caches keep the original alive, so an
  id is never reused)."""

  def __init__(self, env: dict):
    self.env = env
    self.jaxprs: dict[int, tuple[Any, Any]] = {}
    self.closed: dict[int, tuple[Any, Any]] = {}
    self.funs: dict[int, tuple[Any, Any]] = {}
    self.avals: dict[Any, Any] = {}

  def dim(self, d):
    return symbolic.evaluate_dim(d, self.env) if symbolic.is_symbolic(
        d) else d

  def aval(self, aval):
    new = self.avals.get(aval)
    if new is None:
      if type(aval) is compat.ShapedArray:
        new = aval.update(shape=tuple(self.dim(d) for d in aval.shape))
      else:
        new = aval
      self.avals[aval] = new
    return new

  def value(self, v):
    t = type(v)
    if t is symbolic.DimExpr:
      return self.dim(v)
    if t is compat.ClosedJaxpr:
      return self.closed_jaxpr(v)
    if t is compat.Jaxpr:
      return self.jaxpr(v)
    if t is compat.ShapedArray:
      return self.aval(v)
    if t is custom_rules.WrappedFun:
      return self.wrapped(v)
    if t is custom_rules.Zero:
      return custom_rules.Zero(self.aval(v.aval))
    rule = _SPECIALIZERS.get(t)
    if rule is not None:
      return rule(v, self)
    if isinstance(v, tuple):
      items = [self.value(x) for x in v]
      return tuple(items) if t is tuple else t(*items)
    return v

  def _result(self, v):
    """A value a rule returned: its jaxprs, types and zeros specialized."""
    t = type(v)
    if t is list:
      return [self._result(x) for x in v]
    if t is tuple:
      return tuple(self._result(x) for x in v)
    if (compat.is_jaxpr(v) or t is custom_rules.Zero
        or t is symbolic.DimExpr or t is compat.ShapedArray):
      return self.value(v)
    return v

  def wrapped(self, fun):
    """A `WrappedFun` rule for the specialized program: a rule object a
    family registered is specialized itself; any other (JAX's own thunks,
    the rules of a traced program) returns what the original returns,
    specialized."""
    cached = self.funs.get(id(fun))
    if cached is not None:
      return cached[1]
    inner = _SPECIALIZERS.get(type(fun.f)) if custom_rules.is_plain_wrapped(
        fun) else None
    if inner is not None:
      new = custom_rules.wrap_init(inner(fun.f, self), fun.debug_info)
    else:
      memo: dict = {}

      def call(*args):
        # Rule thunks take patterns of bools: the same jaxpr every time.
        key = args if all(type(a) is bool for a in args) else None
        out = memo.get(key) if key is not None else None
        if out is None:
          with custom_rules.without_bwd_type_checks():
            out = self._result(fun.call_wrapped(*args))
          if key is not None:
            memo[key] = out
        return out
      new = custom_rules.wrap_init(call, fun.debug_info)
    self.funs[id(fun)] = (fun, new)
    return new

  def closed_jaxpr(self, closed):
    cached = self.closed.get(id(closed))
    if cached is None:
      cached = self.closed[id(closed)] = (closed, compat.make_closed(
          self.jaxpr(compat.open_jaxpr(closed)), closed.consts))
    return cached[1]

  def _dim_as_value(self, eqn, env):
    """A dimension used as a value: a constant once it is a size."""
    dim = self.dim(eqn.params["dim"])
    if symbolic.is_symbolic(dim):
      return None
    (out,) = eqn.outvars
    dtype = np.dtype(out.aval.dtype)
    env[out] = compat.Literal(dtype.type(dim), out.aval)
    return dim

  def jaxpr(self, jaxpr):
    cached = self.jaxprs.get(id(jaxpr))
    if cached is not None:
      return cached[1]
    env: dict[Any, Any] = {}

    def bind(v):
      cls = compat.DropVar if type(v) is compat.DropVar else compat.Var
      env[v] = cls(self.aval(v.aval))
      return env[v]

    def atom(a):
      if type(a) is compat.Literal:
        return compat.Literal(a.val, self.aval(a.aval))
      return env[a]
    constvars = [bind(v) for v in jaxpr.constvars]
    invars = [bind(v) for v in jaxpr.invars]
    eqns = []
    for eqn in jaxpr.eqns:
      if (eqn.primitive.name == "dim_as_value"
          and self._dim_as_value(eqn, env) is not None):
        continue
      ins = [atom(a) for a in eqn.invars]
      outs = [bind(v) for v in eqn.outvars]
      params = {k: self.value(v) for k, v in eqn.params.items()}
      eqns.append(compat.new_eqn(ins, outs, eqn.primitive, params,
                                 eqn.effects, eqn.source_info, eqn.ctx))
    new = compat.new_jaxpr(
        constvars, invars, [atom(a) for a in jaxpr.outvars], eqns,
        jaxpr.effects, jaxpr.debug_info, jaxpr.is_high)
    self.jaxprs[id(jaxpr)] = (jaxpr, new)
    return new


def specialize(closed, env: dict):
  """`closed` with every dimension expression evaluated in `env` (sizes,
  or expressions of another scope)."""
  if _load_specializers is not None:
    _load_specializers()
  return _Specializer(env).closed_jaxpr(closed)


def for_shapes(closed, tree, shapes):
  """`closed` specialized to the argument `shapes` (its own symbolic shapes
  give `closed` itself). Raises ValueError, as JAX does, for shapes that do
  not fit the program or its constraints."""
  if all(symbolic.same_dims(s, a.shape)
         for s, a in zip(shapes, closed.in_avals)):
    return closed
  return specialize(closed, symbolic.solve_dims(closed.in_avals, tree,
                                                shapes))



def fix_dims(closed, tree, sizes: dict[str, int]):
  """`closed` with the dimension variables named in `sizes` fixed to those
  sizes and the others left symbolic (`Program.specialize`).

  Raises TypeError for a name that is no dimension variable of the inputs,
  ValueError for a size below 1 or one that violates a constraint of the
  program (named). Each constraint whose variables are all fixed is
  checked; fixing every variable also checks the shapes with JAX's own
  solver, as a call at those shapes does. The constraints on variables
  left symbolic are carried over to them (a new scope, the fixed sizes
  substituted); a ValueError if they leave one no size."""
  names = symbolic.dim_vars(closed.in_avals)
  for name, size in sizes.items():
    if name not in names:
      raise TypeError(
          f"{name!r} is not a symbolic dimension of the program's inputs "
          f"(it has: {', '.join(sorted(names)) or 'none'})")
    if type(size) is not int or size < 1:  # JAX's: every variable >= 1
      raise ValueError(f"{name}={size!r}: a dimension size is an int >= 1")
  if not sizes:
    return closed
  scope = next(symbolic.scope_of(d) for a in closed.in_avals
               for d in a.shape if symbolic.is_symbolic(d))
  kept = _constraints_left(scope, sizes)
  if names <= sizes.keys():
    shapes = [tuple(symbolic.evaluate_dim(d, sizes)
                    if symbolic.is_symbolic(d) else d for d in a.shape)
              for a in closed.in_avals]
    try:
      env = symbolic.solve_dims(closed.in_avals, tree, shapes)
    except ValueError as e:
      raise ValueError(f"{_sizes_text(sizes)} do not fit the program: "
                       f"{e}") from None
    return specialize(closed, env)
  new_scope = symbolic.new_scope(kept)
  env: dict = dict(sizes)
  for name in sorted(names - sizes.keys()):
    env[name] = symbolic.parse_dim(name, new_scope)
    try:
      symbolic.check_satisfiable(env[name])
    except ValueError as e:
      raise ValueError(
          f"{_sizes_text(sizes)} leaves no size for {name} under the "
          f"program's constraints, which become {', '.join(kept)} "
          f"({e})") from None
  return specialize(closed, env)


def _sizes_text(sizes: dict[str, int]) -> str:
  return ", ".join(f"{k}={v}" for k, v in sizes.items())


def _constraints_left(scope, sizes: dict[str, int]) -> list[str]:
  """The scope's constraints with `sizes` substituted: each one left with
  no variable is checked (ValueError naming it if false), the others are
  returned as text for the variables left symbolic."""
  def side(e):
    return symbolic.evaluate_dim(e, sizes) if symbolic.is_symbolic(e) else e
  kept = []
  for text, e1, op, e2 in symbolic.explicit_constraints(scope):
    v1, v2 = side(e1), side(e2)
    if not (symbolic.is_symbolic(v1) or symbolic.is_symbolic(v2)):
      if (v1 != v2) if op == "==" else (v1 < v2):
        raise ValueError(
            f"{_sizes_text(sizes)} violates the program's constraint "
            f"{text!r} ({v1} {op} {v2} is false)")
    elif op == "==" and not symbolic.is_equality_lhs(v1):
      # `max(a, b) == c` at a=2, b=3 is `3 == c`, whose left side JAX's
      # equality constraints do not take: the same constraint, as two.
      kept += [f"{v1} >= {v2}", f"{v2} >= {v1}"]
    else:
      kept.append(f"{v1} {op} {v2}")
  return kept
