"""Specializing a shape-polymorphic program to concrete dimension sizes.

A program traced with symbolic shapes (`jax.export.symbolic_shape`) holds
dimension expressions in its avals and params. To evaluate it on concrete
arrays, `Program.__call__` solves the dimension variables from the argument
shapes and rebuilds the jaxpr with every expression evaluated: the result is
the program JAX would have traced for those sizes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import symbolic


def has_symbolic_dims(avals) -> bool:
  return any(type(d) is symbolic.DimExpr
             for a in avals for d in getattr(a, "shape", ()))


class _Specializer:

  def __init__(self, env: dict[str, int]):
    self.env = env
    self.jaxprs: dict[int, Any] = {}
    self.closed: dict[int, Any] = {}
    self.avals: dict[Any, Any] = {}

  def dim(self, d):
    return symbolic.evaluate_dim(d, self.env) if type(
        d) is symbolic.DimExpr else d

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
    if isinstance(v, tuple):
      items = [self.value(x) for x in v]
      return tuple(items) if t is tuple else t(*items)
    return v

  def closed_jaxpr(self, closed):
    new = self.closed.get(id(closed))
    if new is None:
      new = self.closed[id(closed)] = compat.make_closed(
          self.jaxpr(closed.jaxpr), closed.consts)
    return new

  def jaxpr(self, jaxpr):
    new = self.jaxprs.get(id(jaxpr))
    if new is not None:
      return new
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
      if eqn.primitive.name == "dim_as_value":
        # A dimension used as a value is now a constant.
        (out,) = eqn.outvars
        dtype = np.dtype(out.aval.dtype)
        env[out] = compat.Literal(dtype.type(self.dim(eqn.params["dim"])),
                                  out.aval)
        continue
      ins = [atom(a) for a in eqn.invars]
      outs = [bind(v) for v in eqn.outvars]
      params = {k: self.value(v) for k, v in eqn.params.items()}
      eqns.append(compat.new_eqn(ins, outs, eqn.primitive, params,
                                 eqn.effects, eqn.source_info, eqn.ctx))
    new = self.jaxprs[id(jaxpr)] = compat.new_jaxpr(
        constvars, invars, [atom(a) for a in jaxpr.outvars], eqns,
        jaxpr.effects, jaxpr.debug_info, jaxpr.is_high)
    return new


def specialize(closed, env: dict[str, int]):
  """`closed` with every dimension expression evaluated in `env`."""
  return _Specializer(env).closed_jaxpr(closed)
