"""The symbolic-zero patterns JAX asks of a program's rules when it
differentiates the program: stored beside the widest where not every
pattern is stored.

A `symbolic_zeros=True` JVP rule over more than `MAX_PATTERN_INPUTS`
differentiable inputs, and a JVP or backward rule whose patterns would
hold over `MAX_PATTERN_EQUATIONS` equations, is stored for its widest
pattern (wide.py), which serves the others when loaded: the zeros it does
not take as zeros are instantiated. That is what a correct rule computes,
but a rule that decides in Python which outputs are zeros (Equinox's,
inside every Diffrax solver step) may then compute, or refuse, a
derivative the original never computed: `jax.grad` of a loaded Diffrax
SDE solve raised "t0 cannot be autodifferentiated" where the original's
gradient is defined.

So the writer of a program holding such rules differentiates the program
as its users do, with the rules wrapped by recorders: `jax.jvp`, and
`jax.vjp` with its backward pass (`jax.grad`'s path), with respect to each
top-level argument that has float inputs and each union of them (every
union for up to `MAX_SUBSET_ARGUMENTS` such arguments; else all of them
and each alone), the cotangents of all float outputs at once (and of each
alone, up to `MAX_SUBSET_ARGUMENTS` of them). Every pattern JAX asks for
is stored too, so those derivatives of the loaded program use what the
original's rule gave for them. Others (a subset of an argument's leaves, a
second derivative) are still served by a covering pattern. The probes are
traced, never run, and only for a program with a rule so stored; one that
fails (the original raises for that derivative) keeps what was asked
before it failed.
"""

from __future__ import annotations

import itertools

import jax
import numpy as np

from jaxpr_io import compat
from jaxpr_io.codec import registry
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.families.custom_rules import common

# Up to this many top-level arguments (outputs) with float values, every
# union of them is probed.
MAX_SUBSET_ARGUMENTS = 3
_CACHE_KEY = __name__
_DEBUG = compat.DebugInfo("jaxpr_io", "pattern_probe", None, None)


def requested(fun) -> tuple:
  """The patterns JAX asked of `fun`, the `jvp_jaxpr_fun` (tangent zeros),
  `fwd_jaxpr_thunk` (perturbed inputs) or `bwd` (cotangent zeros) of a
  `symbolic_zeros=True` equation of the program being written, sorted; ()
  outside a program's writing."""
  return tuple(sorted({p for p, _ in _asked(fun)}))


def requested_with_residuals(fun) -> tuple:
  """`(cotangent zeros, stored values, values)` of each call JAX made of
  `bwd`, a custom_vjp's `symbolic_zeros=True` backward rule, with some
  residuals constants, in a stable order: per residual, the constant as a
  numpy scalar (`constant_residual`) and as JAX passed it, or None."""
  calls = _asked(fun)
  return tuple((p, values, calls[p, values])
               for p, values in sorted(
                   (c for c in calls if any(v is not None for v in c[1])),
                   key=lambda c: (c[0], tuple(
                       (0,) if v is None else (1, str(v.dtype), v.item())
                       for v in c[1]))))


def constant_residual(value):
  """A residual a backward rule is called with as a stored constant: a
  numpy scalar where it is a concrete scalar (JAX passes the literals a
  forward rule returns, such as Equinox's `perturbed` flags, as values),
  else None."""
  if compat_custom_rules.is_tracer(value) or np.ndim(value) != 0:
    return None
  scalar = np.asarray(value)
  return scalar[()] if scalar.dtype.kind in "biuf" else None


def probed() -> bool:
  """Whether the program being written was differentiated by the probes:
  they called its custom_vjp forward rules, so a rule's last fresh call
  (what its backward rule reads, see `compat.custom_rules.call_fresh`) may
  be a probe's."""
  return _CACHE_KEY in registry.written_program_cache()


def _asked(fun) -> dict:
  program = registry.written_program()
  if program is None:
    return {}
  cache = registry.written_program_cache()
  if _CACHE_KEY not in cache:
    cache[_CACHE_KEY] = _record(*program)
  return cache[_CACHE_KEY].get(id(fun), {})


def _record(closed, in_tree) -> dict[int, dict]:
  """id of each symbolic-zeros rule -> {(pattern, stored residual values):
  the residual values as passed} of the calls JAX made of it (no residuals
  for a JVP or forward rule)."""
  asked: dict[int, dict] = {}

  def recorder(fun, n_out=None):
    calls = asked.setdefault(id(fun), {})

    def record(args):
      if n_out is None:  # a JVP or forward rule: a pattern
        calls.setdefault((tuple(map(bool, args)), ()), ())
        return
      res, cts = args[:len(args) - n_out], args[len(args) - n_out:]
      values = tuple(map(constant_residual, res))
      calls.setdefault(
          (tuple(map(compat_custom_rules.is_zero, cts)), values),
          tuple(None if v is None else r for v, r in zip(values, res)))
    return compat_custom_rules.recording(fun, record)

  def replace(eqn):
    if not eqn.params.get("symbolic_zeros"):
      return None
    params = dict(eqn.params)
    if eqn.primitive.name == common.JVP_PRIMITIVE:
      params["jvp_jaxpr_fun"] = recorder(params["jvp_jaxpr_fun"])
    elif eqn.primitive.name == common.VJP_PRIMITIVE:
      params["fwd_jaxpr_thunk"] = recorder(params["fwd_jaxpr_thunk"])
      params["bwd"] = recorder(params["bwd"], len(eqn.outvars))
    else:
      return None
    return params

  probed = compat_custom_rules.with_params(closed, replace)
  if not asked:
    return asked
  fun = compat.jaxpr_as_fun(probed)
  in_avals = list(closed.in_avals)
  floats = [i for i, a in enumerate(closed.out_avals) if _differentiable(a)]
  probes = []
  for subset in _subsets(in_avals, in_tree):
    probes.append(_jvp(fun, subset))
    if floats:
      probes.append(_vjp(fun, subset, floats))
  if 1 < len(floats) <= MAX_SUBSET_ARGUMENTS:
    probes += [_vjp(fun, _all(in_avals), [i]) for i in floats]
  for probe in probes:
    try:
      compat_custom_rules.trace_flat(probe, in_avals, _DEBUG)
    except Exception:  # pylint: disable=broad-except
      # The original raises for this derivative (a rule refusing it): what
      # it asked for before raising is recorded, and stored with its error.
      pass
  return asked


def _jvp(fun, subset):
  def probe(*args):
    def f(*xs):
      return fun(*_substituted(args, subset, xs))
    primals = [args[i] for i in subset]
    return jax.jvp(f, primals, primals)[1]
  return probe


def _vjp(fun, subset, outs):
  def probe(*args):
    def f(*xs):
      results = fun(*_substituted(args, subset, xs))
      return [results[i] for i in outs]
    results, backward = jax.vjp(f, *[args[i] for i in subset])
    return backward([jax.numpy.ones_like(r) for r in results])
  return probe


def _substituted(args, subset, xs) -> list:
  args = list(args)
  for i, x in zip(subset, xs):
    args[i] = x
  return args


def _all(in_avals) -> tuple[int, ...]:
  return tuple(i for i, a in enumerate(in_avals) if _differentiable(a))


def _subsets(in_avals, in_tree) -> list[tuple[int, ...]]:
  """The flat input indices to differentiate by, per probe."""
  groups = [tuple(i for i in g if _differentiable(in_avals[i]))
            for g in _argument_groups(in_tree, len(in_avals))]
  groups = [g for g in groups if g]
  if len(groups) <= MAX_SUBSET_ARGUMENTS:
    unions = [c for k in range(1, len(groups) + 1)
              for c in itertools.combinations(groups, k)]
  else:
    unions = [tuple(groups)] + [(g,) for g in groups]
  return [tuple(sorted(i for g in union for i in g)) for union in unions]


def _argument_groups(in_tree, n: int) -> list[tuple[int, ...]]:
  """Flat input indices per top-level argument (positional, then keyword)
  of `in_tree`, the structure of `(args, kwargs)`; one group per input
  where the tree is not of that form."""
  try:
    call = jax.tree_util.tree_unflatten(in_tree, range(n))
  except (TypeError, ValueError):
    call = None
  if (type(call) is not tuple or len(call) != 2
      or type(call[0]) is not tuple or type(call[1]) is not dict):
    return [(i,) for i in range(n)]
  return [tuple(jax.tree_util.tree_leaves(a))
          for a in (*call[0], *call[1].values())]


def _differentiable(aval) -> bool:
  dtype = getattr(aval, "dtype", None)
  return (dtype is not None and not compat.is_prng_key_dtype(dtype)
          and jax.numpy.issubdtype(dtype, jax.numpy.inexact))
