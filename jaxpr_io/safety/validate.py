"""Structural checks on equations that hold sub-jaxprs, without abstract eval.

The reader guarantees by construction that every variable is bound once and
before use (see "Variables" in schema/jaxpr.proto). This module adds arity
checks: an equation's input and output counts must match the sub-jaxprs it
calls, so a corrupt file cannot produce a jaxpr that crashes JAX later with
an unrelated error. Full type checking is `load(..., check=True)`, which runs
JAX's own `check_jaxpr`.
"""

from __future__ import annotations

from typing import Any, Callable

import string

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.compat import callbacks as compat_callbacks
from jaxpr_io.compat import param_kinds
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.format import param_schema
from jaxpr_io.errors import FormatError

# Exceptions that malformed input can provoke inside JAX's constructors or
# ours; they become FormatErrors that say where they happened.
DECODE_ERRORS = (FormatError, ArithmeticError, LookupError, TypeError,
                 RuntimeError, ValueError, AttributeError, AssertionError,
                 *compat.JAX_VALIDATION_ERRORS)


def describe_error(e: BaseException) -> str:
  if isinstance(e, FormatError):
    return str(e)
  return f"invalid program ({type(e).__name__}: {e})"


def _n_in(j) -> int:
  return len(j.jaxpr.invars if type(j) is compat.ClosedJaxpr else j.invars)


def _n_out(j) -> int:
  return len(j.jaxpr.outvars if type(j) is compat.ClosedJaxpr else j.outvars)


def _call(param: str, n_in_extra: int = 0):
  """Primitives that call `params[param]` on all their inputs."""
  def check(n_in, n_out, params):
    body = params.get(param)
    if type(body) not in (compat.Jaxpr, compat.ClosedJaxpr):
      return f"param {param!r} is not a jaxpr"
    if n_in != _n_in(body) + n_in_extra or n_out != _n_out(body):
      return (f"has {n_in} inputs and {n_out} outputs but its {param!r} "
              f"takes {_n_in(body)} and returns {_n_out(body)}")
    return None
  return check


def _jit(n_in, n_out, params):
  """jit: its body's arity, and one entry per input or output in each
  per-argument param (JAX zips them with the arguments)."""
  problem = _call("jaxpr")(n_in, n_out, params)
  if problem:
    return problem
  for key, n, what in (("in_shardings", n_in, "input"),
                       ("in_layouts", n_in, "input"),
                       ("donated_invars", n_in, "input"),
                       ("out_shardings", n_out, "output"),
                       ("out_layouts", n_out, "output")):
    value = params.get(key)
    if value is not None and (type(value) is not tuple or len(value) != n):
      return (f"param {key!r} must have one entry per {what} ({n}), got "
              f"{value!r:.80}")
  return None


def _cond(n_in, n_out, params):
  branches = params.get("branches")
  if type(branches) is not tuple or not branches:
    return "param 'branches' is not a non-empty tuple of jaxprs"
  for i, branch in enumerate(branches):
    if type(branch) is not compat.ClosedJaxpr:
      return f"branch {i} is not a closed jaxpr"
    if n_in != _n_in(branch) + 1 or n_out != _n_out(branch):
      return (f"has {n_in} inputs (index included) and {n_out} outputs but "
              f"branch {i} takes {_n_in(branch)} and returns "
              f"{_n_out(branch)}")
  return None


def _while(n_in, n_out, params):
  body, cond = params.get("body_jaxpr"), params.get("cond_jaxpr")
  body_nconsts, cond_nconsts = (params.get("body_nconsts"),
                                params.get("cond_nconsts"))
  if (type(body) is not compat.ClosedJaxpr
      or type(cond) is not compat.ClosedJaxpr
      or type(body_nconsts) is not int or type(cond_nconsts) is not int):
    return "params body_jaxpr/cond_jaxpr/body_nconsts/cond_nconsts are wrong"
  n_carry = n_in - body_nconsts - cond_nconsts
  if (n_carry < 0 or n_out != n_carry or _n_out(body) != n_carry
      or _n_in(body) != body_nconsts + n_carry
      or _n_in(cond) != cond_nconsts + n_carry or _n_out(cond) != 1):
    return (f"has {n_in} inputs and {n_out} outputs, which do not fit its "
            f"body ({_n_in(body)} -> {_n_out(body)}) and cond "
            f"({_n_in(cond)} -> {_n_out(cond)}) with {body_nconsts} and "
            f"{cond_nconsts} constants")
  return None


def _scan(n_in, n_out, params):
  """scan: its body's arity, and constants and carries within its inputs
  and outputs (JAX's type check splits the lists at num_consts and
  num_carry without checking that they fit, so a num_carry past the end
  passes it and fails under grad)."""
  problem = _call("jaxpr")(n_in, n_out, params)
  if problem:
    return problem
  if "num_consts" not in params:
    # JAX 0.11+ groups the operands by `ft_in`/`ft_out`, which its adapter
    # builds from the stored counts after the same check.
    return None
  num_consts, num_carry, linear = (params.get(k) for k in (
      "num_consts", "num_carry", "linear"))
  if type(num_consts) is not int or type(num_carry) is not int:
    return "params num_consts/num_carry are not ints"
  if (num_consts < 0 or num_carry < 0 or num_consts + num_carry > n_in
      or num_carry > n_out):
    return (f"has {n_in} inputs and {n_out} outputs, which do not hold "
            f"num_consts={num_consts} constants and num_carry={num_carry} "
            "carries")
  if type(linear) is tuple and len(linear) != n_in:
    return f"has {n_in} inputs but param 'linear' has {len(linear)} entries"
  return None


def _flat_callback(n_in, n_out, params):
  """pure_callback / io_callback: the function unflattens its operands with
  its stored in_tree, and returns one value per result aval."""
  in_tree = getattr(params.get("callback"), "in_tree", None)
  results = params.get("result_avals")
  if in_tree is None or type(results) is not tuple:
    return "params callback/result_avals are wrong"
  if in_tree.num_leaves != n_in or len(results) != n_out:
    return (f"has {n_in} inputs and {n_out} outputs but its callback takes "
            f"{in_tree.num_leaves} and returns {len(results)}")
  return None


def _debug_callback(n_in, n_out, params):
  parts = compat_callbacks.debug_callback_parts(params.get("callback"))
  if parts is None:
    return "param 'callback' is not a debug callback"
  _, in_tree, static_args = parts
  if in_tree.num_leaves - len(static_args) != n_in or n_out:
    return (f"has {n_in} inputs and {n_out} outputs but its callback takes "
            f"{in_tree.num_leaves - len(static_args)} and returns none")
  return None


def _debug_print(n_in, n_out, params):
  in_tree, static_args = params.get("in_tree"), params.get("static_args")
  if not hasattr(in_tree, "num_leaves") or type(static_args) is not tuple:
    return "params in_tree/static_args are wrong"
  if in_tree.num_leaves - len(static_args) != n_in or n_out:
    return (f"has {n_in} inputs and {n_out} outputs but its format takes "
            f"{in_tree.num_leaves - len(static_args)} and returns none")
  fmt = params.get("fmt")
  if type(fmt) is not str:
    return "param 'fmt' is not a string"
  # As jax.debug.print computes it: whether the first piece has a field.
  try:
    first = next(iter(string.Formatter().parse(fmt)), (None, None))
  except ValueError as e:
    return f"format string does not parse: {e}"
  if params.get("has_placeholders") is not (bool(fmt) and
                                            first[1] is not None):
    return "param 'has_placeholders' does not match the format string"
  return None


def _hi_primitive(n_in, n_out, params):
  """call_hi_primitive: one input and output per leaf of its `_prim`'s
  input and output avals (jaxpr_io/families/hijax/prims.py builds `_prim`)."""
  prim = params.get("_prim")
  n_in_prim = len(getattr(prim, "in_avals_flat", ()))
  n_out_prim = len(getattr(prim, "out_avals_flat", ()))
  if n_in != n_in_prim or n_out != n_out_prim:
    return (f"has {n_in} inputs and {n_out} outputs but its '_prim' "
            f"takes {n_in_prim} and returns {n_out_prim}")
  return None


def _is_bools(value) -> bool:
  return type(value) is tuple and all(type(v) is bool for v in value)


def _hi_linearized(n_in, n_out, params):
  """call_hi_primitive_linearized: the leaves of `residuals_tree`, then one
  tangent per true `nz_in_flat` entry (one entry per input of `_prim`) in,
  one tangent per true `nz_out_flat` entry (one per output of `_prim`; a
  JAX 0.10 reader has dropped it: every output) out. Its transpose rule
  splits the inputs so and unflattens the residuals with `residuals_tree`,
  as a pair (residuals, structured residuals) where `has_sres`."""
  prim = params.get("_prim")
  if not isinstance(prim, compat.ADAPTER.hi_prim_bases):
    return f"param '_prim' is not a hi primitive: {prim!r:.100}"
  n_in_prim, n_out_prim = len(prim.in_avals_flat), len(prim.out_avals_flat)
  tree = params.get("residuals_tree")
  if type(tree) is not compat_pytrees.PyTreeDef:
    return f"param 'residuals_tree' is not a treedef: {tree!r:.100}"
  for param, n, what, default in (
      ("nz_in_flat", n_in_prim, "input", None),
      ("nz_out_flat", n_out_prim, "output", (True,) * n_out_prim)):
    flags = params.get(param, default)
    if not _is_bools(flags) or len(flags) != n:
      return (f"param {param!r} must be a tuple of {n} bools (one per {what}"
              f" of its '_prim'), got {flags!r:.100}")
  has_sres = params.get("has_sres", False)
  if type(has_sres) is not bool:
    return f"param 'has_sres' must be a bool, got {has_sres!r:.100}"
  node = tree.node_data()
  if has_sres and (node is None or node[0] is not tuple
                   or len(tree.children()) != 2):
    return ("param 'has_sres' is True, but param 'residuals_tree' is not a "
            f"pair (residuals, structured residuals): {tree}"[:300])
  n_nz_in = sum(params["nz_in_flat"])
  n_nz_out = sum(params.get("nz_out_flat", (True,) * n_out_prim))
  if n_in != tree.num_leaves + n_nz_in or n_out != n_nz_out:
    return (f"has {n_in} inputs and {n_out} outputs, but param "
            f"'residuals_tree' has {tree.num_leaves} leaves, param "
            f"'nz_in_flat' {n_nz_in} non-zero tangents in and 'nz_out_flat' "
            f"{n_nz_out} out")
  return None


def _custom_lin(n_in, n_out, params):
  """custom_lin takes the residuals and the tangents that are not symbolic
  zeros, and returns one tangent per out_aval (its transpose and abstract
  evaluation assume it; jaxpr_io/families/custom_rules/lin.py checks its bwd against
  these params)."""
  num_res, in_zeros, out_avals = (params.get(k) for k in (
      "num_res", "in_zeros", "out_avals"))
  if (type(num_res) is not int or type(in_zeros) is not list
      or type(out_avals) is not list):
    return "params num_res/in_zeros/out_avals are wrong"
  if n_in != num_res + in_zeros.count(False) or n_out != len(out_avals):
    return (f"has {n_in} inputs and {n_out} outputs, but num_res={num_res}, "
            f"{in_zeros.count(False)} non-zero tangents (in_zeros) and "
            f"{len(out_avals)} out_avals")
  return None


ARITY_RULES: dict[str, Callable[[int, int, dict], str | None]] = {
    "call_hi_primitive": _hi_primitive,
    "call_hi_primitive_linearized": _hi_linearized,
    "custom_lin": _custom_lin,
    "pure_callback": _flat_callback,
    "io_callback": _flat_callback,
    "debug_callback": _debug_callback,
    "debug_print": _debug_print,
    "jit": _jit,
    "pjit": _jit,
    "closed_call": _call("call_jaxpr"),
    "core_call": _call("call_jaxpr"),
    "remat2": _call("jaxpr"),
    "scan": _scan,
    "custom_jvp_call": _call("call_jaxpr"),
    "custom_vjp_call": _call("call_jaxpr"),
    "cond": _cond,
    "while": _while,
}


# ------------------------------------------------------- param values
# Params whose values JAX passes to XLA without checking them first: a wrong
# type there aborts the process at lowering or compilation (an int where a
# `Precision` belongs is "LLVM ERROR: Invalid value"). Keyed by param name,
# whatever the primitive: the meaning is the same wherever they appear.
_PRECISION = compat_tables.ENUMS["jax.lax.Precision"]
_DOT_ALGORITHM_PRESET = compat_tables.ENUMS["jax.lax.DotAlgorithmPreset"]


def _precision(value) -> bool:
  if value is None or type(value) in (_PRECISION, _DOT_ALGORITHM_PRESET):
    return True
  # Both members: lowering prints each into an MLIR attribute, and "None"
  # aborts MLIR's parser.
  return (type(value) is tuple and len(value) == 2
          and all(type(v) is _PRECISION for v in value))


# jax.numpy's scalar types and their numpy ones, by identity.
_SCALAR_TYPES = frozenset(id(t) for dtype, jnp_type in compat.SCALAR_TYPES.items()
                          for t in (dtype.type, jnp_type))


def _optional_dtype(value) -> bool:
  # JAX's DTypeLike: lax.ragged_dot binds `preferred_element_type` as the
  # user passed it (jnp.float32, np.float32), unconverted, and its rules
  # and dot_general's take it; stored as it is, it prints and re-dumps as
  # the original.
  return (value is None or isinstance(value, np.dtype)
          or id(value) in _SCALAR_TYPES)


PARAM_VALUE_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "precision": (_precision, "None, a Precision, a DotAlgorithmPreset or a "
                              "pair of Precisions"),
    "preferred_element_type": (_optional_dtype, "None, a dtype or a scalar "
                                                "type such as jnp.float32"),
}


def check_param_values(values: dict) -> None:
  """Raises FormatError if a param in `PARAM_VALUE_RULES` has a value of the
  wrong type. Run once per param set, whatever the primitive."""
  for key, (ok, expected) in PARAM_VALUE_RULES.items():
    if key in values and not ok(values[key]):
      raise FormatError(f"param {key!r} must be {expected}, got "
                        f"{values[key]!r:.80}")


def check_param_schema(name: str, values: dict) -> None:
  """Raises FormatError if the params of an equation of the vocabulary's
  primitive `name` do not fit its declared schema
  (jaxpr_io/format/param_schema.py): a param it never has, a required one
  missing, or a value of a kind the param never holds. A primitive without
  a schema entry is not checked here."""
  schema = param_schema.table().get(name)
  if schema is None:
    return
  declared = schema.params
  for key, value in values.items():
    allowed = declared.get(key)
    if allowed is None:
      known = ", ".join(sorted(declared)) or "none"
      raise FormatError(
          f"param {key!r} is not a param of {name!r} (its params: {known}); "
          "the file was damaged or not written by jaxpr_io: re-dump the "
          "program")
    for kind in param_kinds.kinds_of(value):
      if not param_schema.kind_allowed(kind, allowed):
        raise FormatError(
            f"param {key!r} of {name!r} holds a value of kind {kind} "
            f"({value!r:.60}), but {name!r} takes "
            f"{param_schema.describe(allowed)} there; the file was damaged "
            "or not written by jaxpr_io: re-dump the program")
  missing = schema.required.difference(values)
  if missing:
    raise FormatError(f"{name!r} lacks its param(s) "
                      f"{', '.join(sorted(missing))}; the file was damaged "
                      "or not written by jaxpr_io: re-dump the program")


def check_equation(name: str, primitive: Any, n_in: int, n_out: int,
                   params: dict) -> None:
  """Raises FormatError if the equation's shape of inputs/outputs is wrong."""
  if not primitive.multiple_results and n_out != 1:
    raise FormatError(f"primitive {name!r} has one result, but the equation "
                      f"binds {n_out}")
  rule = ARITY_RULES.get(name)
  if rule is not None:
    problem = rule(n_in, n_out, params)
    if problem:
      raise FormatError(f"{name} {problem}")


def _sub_jaxprs(value):
  if compat.is_jaxpr(value):
    yield compat.open_jaxpr(value) if compat.is_closed_jaxpr(value) else value
  elif type(value) is tuple:
    for item in value:
      yield from _sub_jaxprs(item)


def walk_jaxprs(jaxpr):
  """`jaxpr` and every jaxpr in its equations' params, each shared one
  once."""
  seen, stack = set(), [jaxpr]
  while stack:
    jaxpr = stack.pop()
    if id(jaxpr) in seen:
      continue
    seen.add(id(jaxpr))
    yield jaxpr
    for eqn in jaxpr.eqns:
      for value in eqn.params.values():
        stack.extend(_sub_jaxprs(value))


def check_eqns(jaxpr, rules) -> None:
  """Raises FormatError at the first equation, in `jaxpr` or a sub-jaxpr,
  for which a rule (eqn -> problem or None) finds a problem."""
  for sub in walk_jaxprs(jaxpr):
    for i, eqn in enumerate(sub.eqns):
      for rule in rules:
        problem = rule(eqn)
        if problem:
          raise FormatError(f"equation {i} ({eqn.primitive.name}): "
                            f"{problem}")


# ------------------------------------------------ dtypes a backend lacks
# XLA's CPU backend has no float6 types: an array of one is a clean error,
# but a float6 literal passed between computations fails a CHECK inside
# the compiler and aborts the process (found by tests/fuzz).
_BACKEND_LACKS = {"cpu": frozenset({"float6_e2m3fn", "float6_e3m2fn"})}


def check_backend_dtypes(jaxpr, platform: str) -> None:
  """Raises FormatError if `jaxpr` (sub-jaxprs included) has a value of a
  dtype that the `platform` backend cannot compile."""
  lacks = _BACKEND_LACKS.get(platform)
  if not lacks:
    return
  for aval in _all_avals(jaxpr):
    dtype = getattr(aval, "dtype", None)
    if dtype is not None and dtype.name in lacks:
      raise FormatError(f"the program uses {dtype.name}, which the "
                        f"{platform} backend cannot compile; run it on a "
                        "backend that has the type")


# Dtypes whose arrays a backend cannot take as a program's arguments,
# though programs may compute with them: on the CPU, JAX lowers an int1
# parameter as XLA's pred but passes an s1 buffer (the call fails with
# RuntimeProgramInputMismatch), and it cannot put a uint1 array on the
# device at all (found by tests/fuzz, JAX 0.10.2 and 0.12.0.1 alike).
_BACKEND_CANNOT_PASS = {"cpu": frozenset({"int1", "uint1"})}


def check_backend_inputs(in_avals, platform: str) -> None:
  """Raises FormatError if an input of a program (`in_avals`) has a dtype
  whose arrays the `platform` backend cannot take as arguments."""
  cannot = _BACKEND_CANNOT_PASS.get(platform, frozenset())
  for i, aval in enumerate(in_avals):
    dtype = getattr(aval, "dtype", None)
    if dtype is not None and dtype.name in cannot:
      raise FormatError(f"input {i} is {aval.str_short()}, and the "
                        f"{platform} backend cannot take {dtype.name} arrays "
                        "as arguments; pass it as int8 or bool and convert "
                        "inside the program")


def _all_avals(jaxpr):
  for sub in walk_jaxprs(jaxpr):
    for v in (*sub.constvars, *sub.invars):
      yield v.aval
    for eqn in sub.eqns:
      for v in (*eqn.invars, *eqn.outvars):
        yield v.aval


# ------------------------------------------------ known compiler aborts
def _while_self_add_induction(eqn) -> str | None:
  """A while loop whose body adds a carried value to itself (`i + i`)."""
  if eqn.primitive.name != "while":
    return None
  body = compat.open_jaxpr(eqn.params["body_jaxpr"])
  carry_in = body.invars[eqn.params["body_nconsts"]:]
  for out, carried in zip(body.outvars, carry_in):
    for e in body.eqns:
      if (e.primitive.name == "add" and e.outvars[0] is out
          and e.invars[0] is carried and e.invars[1] is carried):
        return ("the while loop doubles a loop-carried value by adding it "
                "to itself, which this release's XLA compiler aborts on; "
                "write it as a multiplication by 2, or load the file with "
                "a newer JAX")
  return None


KNOWN_COMPILER_ABORTS: dict[str, Callable[[Any], str | None]] = {
    "while_self_add_induction": _while_self_add_induction,
}


def check_compiler_aborts(jaxpr) -> None:
  """Raises FormatError where `jaxpr` (sub-jaxprs included) has a pattern
  this release's XLA aborts the process on while compiling."""
  names = compat.ADAPTER.compiler_aborts
  if names:
    check_eqns(jaxpr, [KNOWN_COMPILER_ABORTS[n] for n in sorted(names)])
