"""Shape and type rules that JAX's type checker skips, for `check=True`
(`check_shapes`) and, for hi primitives, for every load: each finds the
problem of one equation or None; a file that breaks one passes JAX's
checker, prints and compiles, and then fails inside JAX when a call
specializes its shapes or a transformation re-traces it (most found by
tests/fuzz).
"""

from __future__ import annotations

from typing import Any, Callable

import math

import jax
import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import rule_params as compat_rule_params
from jaxpr_io.compat import sharding as compat_sharding
from jaxpr_io.errors import FormatError
from jaxpr_io.safety import validate


def _reshape_sizes(eqn) -> str | None:
  # JAX's reshape shape rule does not compare element counts (a TODO in
  # lax.py); with concrete shapes the MLIR verifier catches a mismatch, with
  # symbolic ones nothing does until a call specializes them.
  (operand,) = eqn.invars[:1] or (None,)
  if operand is None or not hasattr(operand.aval, "shape"):
    return None
  before = math.prod(operand.aval.shape)
  after = math.prod(eqn.params.get("new_sizes", ()))
  if not compat.definitely_equal(before, after):
    return (f"reshape of {before} elements into new_sizes with {after} "
            "elements")
  return None


def _same_type(a, b) -> bool:
  shape_a, shape_b = getattr(a, "shape", None), getattr(b, "shape", None)
  return (shape_a is not None and shape_b is not None
          and len(shape_a) == len(shape_b)
          and all(compat.definitely_equal(x, y)
                  for x, y in zip(shape_a, shape_b))
          and getattr(a, "dtype", None) == getattr(b, "dtype", None))


def _pallas_call_types(eqn) -> str | None:
  # pallas_call's abstract evaluation returns `out_avals` without looking at
  # its operands; the kernel runs on the array types its block mappings
  # name. A file must keep the three in agreement.
  grid_mapping = eqn.params.get("grid_mapping")
  out_avals = eqn.params.get("out_avals")
  if grid_mapping is None or type(out_avals) is not tuple:
    return "pallas_call needs grid_mapping and out_avals"
  arrays = [b.array_aval for b in grid_mapping.block_mappings]
  n_in, n_out = grid_mapping.num_inputs, grid_mapping.num_outputs
  if (len(arrays) != n_in + n_out or len(out_avals) != n_out
      or len(eqn.outvars) != n_out or len(eqn.invars) < n_in):
    return (f"pallas_call's {len(arrays)} block mappings, {len(out_avals)} "
            f"out_avals and {len(eqn.outvars)} outputs do not fit its "
            f"{n_in} inputs and {n_out} outputs")
  operands = eqn.invars[len(eqn.invars) - n_in:]
  for what, values, expected in (
      ("input", [v.aval for v in operands], arrays[:n_in]),
      ("output", [v.aval for v in eqn.outvars], arrays[n_in:]),
      ("out_avals entry", list(out_avals), arrays[n_in:])):
    for i, (got, want) in enumerate(zip(values, expected)):
      if not _same_type(got, want):
        return (f"pallas_call {what} {i} has type {got}, but its block "
                f"mapping is for {want}")
  return None


def hi_primitive_types(eqn) -> str | None:
  """call_hi_primitive: its inputs and outputs have the shapes and dtypes
  of its `_prim`'s flat input and output avals. JAX's abstract evaluation
  returns the object's output avals without looking at the equation, and
  its lowering (the object's `expand`) builds values of those types; a file
  whose constructor arguments disagree with its outputs is refused on every
  load (equations.build), not only by check=True."""
  prim = eqn.params.get("_prim")
  return _prim_types(prim, (
      ("input", "takes", eqn.invars, getattr(prim, "in_avals_flat", ())),
      ("output", "returns", eqn.outvars,
       getattr(prim, "out_avals_flat", ()))))


def _prim_types(prim, sides) -> str | None:
  """The first atom of `sides` ((what, verb, atoms, the types `prim` gives
  them), ...) whose type is not the one `prim` gives it, described."""
  for what, verb, atoms, expected in sides:
    for i, (atom, want) in enumerate(zip(atoms, expected)):
      if not _same_type(atom.aval, want):
        return (f"{what} {i} has type {atom.aval}, but its '_prim' "
                f"({type(prim).__name__}) {verb} {want}")
  return None


def hi_linearized_types(eqn) -> str | None:
  """call_hi_primitive_linearized: its tangent inputs and its outputs have
  the tangent types of its `_prim`'s flat input and output avals where
  `nz_in_flat` and `nz_out_flat` are true (after `_hi_linearized`). Its
  abstract evaluation returns those without looking at the equation, and
  its transpose hands the cotangents to `_prim.vjp_bwd` as of those types;
  checked on every load, as `hi_primitive_types`."""
  prim, params = eqn.params["_prim"], eqn.params
  n_out_prim = len(prim.out_avals_flat)
  n_res = params["residuals_tree"].num_leaves
  tangents = lambda avals, flags: [
      a.to_tangent_aval() for a, nz in zip(avals, flags) if nz]
  return _prim_types(prim, (
      ("tangent input", "takes", eqn.invars[n_res:],
       tangents(prim.in_avals_flat, params["nz_in_flat"])),
      ("output", "returns", eqn.outvars,
       tangents(prim.out_avals_flat,
                params.get("nz_out_flat", (True,) * n_out_prim)))))


def _conv_windows(eqn) -> str | None:
  """conv_general_dilated: one stride, padding pair and dilation per
  spatial dimension. JAX's shape rule reads them without checking their
  lengths (with symbolic shapes an empty `window_strides` passed the
  check and the export, and failed `grad` in the transpose rule)."""
  lhs = getattr(eqn.invars[0], "aval", None) if eqn.invars else None
  ndim = len(getattr(lhs, "shape", ()))
  if ndim < 2:
    return None
  for key in ("window_strides", "padding", "lhs_dilation", "rhs_dilation"):
    value = eqn.params.get(key)
    if type(value) is tuple and len(value) != ndim - 2:
      return (f"param {key!r} has {len(value)} entries for a convolution of "
              f"{ndim - 2} spatial dimensions")
  return None


def _shard_map_outputs(eqn) -> str | None:
  """With check_vma, JAX makes a shard_map output vary over the axes its
  out_spec names (an implicit pvary); its typing rule checks only the other
  axes, and `grad` fails inside JAX where an output does not."""
  if eqn.params.get("check_vma") is not True:
    return None
  body = eqn.params.get("jaxpr")
  body = compat.open_jaxpr(body) if compat.is_closed_jaxpr(body) else body
  for i, (v, spec) in enumerate(zip(body.outvars, eqn.params["out_specs"])):
    missing = (compat_sharding.spec_axes(spec)
               - compat_sharding.varying_axes(v.aval)
               if isinstance(spec, compat.PartitionSpec) else None)
    if missing:
      return (f"output {i} of the body does not vary over the axes "
              f"{sorted(missing)} that its out_spec {spec} names")
  return None


_SHAPE_RULES: dict[str, Callable[[Any], str | None]] = {
    "conv_general_dilated": _conv_windows, "reshape": _reshape_sizes,
    "pallas_call": _pallas_call_types, "shard_map": _shard_map_outputs}


def check_shapes(jaxpr) -> None:
  """Raises FormatError where a shape rule that JAX's type checker skips
  fails, or where an equation has a param that one of its primitive's
  transformation rules cannot take, in `jaxpr` and its sub-jaxprs."""
  validate.check_eqns(jaxpr, [
      lambda eqn: (_SHAPE_RULES[eqn.primitive.name](eqn)
                   if eqn.primitive.name in _SHAPE_RULES else None),
      _transform_params])


def _transform_params(eqn) -> str | None:
  """A param that a closed JVP, transpose or batching rule of this release
  lacks, or one that it requires and the equation lacks
  (compat/rule_params.py): JAX passes the params to the rule, which raises
  at the first transformation, after abstract evaluation and the lowering
  let the equation through (a file's `neg` with an `accuracy`, a `tanh`
  without one)."""
  names = eqn.params.keys()
  # JAX calls JVP and transpose rules only for nonzero tangents and
  # cotangents: of inexact values (an integer's are symbolic zeros).
  differentiable = any(
      jax.dtypes.issubdtype(getattr(v.aval, "dtype", np.int32), np.inexact)
      for v in eqn.invars)
  for rule in compat_rule_params.transform_rule_keywords(eqn.primitive):
    if rule.role != "batching" and not differentiable:
      continue
    takes = rule.keywords(len(eqn.invars))
    extra = sorted(n for n in names if n not in takes)
    if extra:
      return (f"param {extra[0]!r} is not one that this JAX release's "
              f"{rule.role} rule for {eqn.primitive.name} takes: the "
              "program would fail under jax.grad, jax.jvp or jax.vmap")
    missing = [n for n in rule.required(len(eqn.invars)) if n not in names]
    if missing:
      return (f"param {missing[0]!r} is missing, and this JAX release's "
              f"{rule.role} rule for {eqn.primitive.name} requires it: the "
              "program would fail under jax.grad, jax.jvp or jax.vmap")
  return None


# ------------------------------------------------------------ meshes
def _meshes(value):
  """The meshes of the (abstract or concrete) mesh and named sharding
  values in a param value."""
  if isinstance(value, compat.NamedSharding):
    yield value.mesh
  elif isinstance(value, (compat.Mesh, compat.AbstractMesh)):
    yield value
  elif type(value) is tuple:
    for item in value:
      yield from _meshes(item)


def check_mesh_sizes(jaxpr) -> None:
  """One computation runs on one set of devices (JAX refuses a call whose
  arguments or shardings disagree: "incompatible devices"), so every mesh
  a program names, in its types' shardings and in its params, has the same
  number of devices. A file whose input types name a mesh of 6 devices and
  whose `jit` names one of 8 passed check=True and failed every call (found
  by tests/fuzz)."""
  first = None
  for sub in validate.walk_jaxprs(jaxpr):
    avals = [v.aval for v in (*sub.constvars, *sub.invars)]
    avals += [v.aval for eqn in sub.eqns for v in eqn.outvars]
    found = [m for a in avals
             for m in _meshes(getattr(a, "sharding", None))]
    found += [m for eqn in sub.eqns for value in eqn.params.values()
              for m in _meshes(value)]
    for mesh in found:
      if not mesh.axis_names:
        continue
      if first is None:
        first = mesh
      elif mesh.size != first.size:
        raise FormatError(
            f"the program names meshes of {first.size} and {mesh.size} "
            f"devices ({first} and {mesh}); one computation runs on one "
            "set of devices"[:600])
