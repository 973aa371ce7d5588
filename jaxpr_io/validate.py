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

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import callbacks as compat_callbacks
from jaxpr_io.errors import FormatError


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
  return None


ARITY_RULES: dict[str, Callable[[int, int, dict], str | None]] = {
    "pure_callback": _flat_callback,
    "io_callback": _flat_callback,
    "debug_callback": _debug_callback,
    "debug_print": _debug_print,
    "jit": _call("jaxpr"),
    "pjit": _call("jaxpr"),
    "closed_call": _call("call_jaxpr"),
    "core_call": _call("call_jaxpr"),
    "remat2": _call("jaxpr"),
    "scan": _call("jaxpr"),
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
_PRECISION = compat.ENUMS["jax.lax.Precision"]
_DOT_ALGORITHM_PRESET = compat.ENUMS["jax.lax.DotAlgorithmPreset"]


def _precision(value) -> bool:
  if value is None or type(value) in (_PRECISION, _DOT_ALGORITHM_PRESET):
    return True
  return (type(value) is tuple and len(value) == 2
          and all(v is None or type(v) is _PRECISION for v in value))


def _optional_dtype(value) -> bool:
  return value is None or isinstance(value, np.dtype)


PARAM_VALUE_RULES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "precision": (_precision, "None, a Precision, a DotAlgorithmPreset or a "
                              "pair of Precisions"),
    "preferred_element_type": (_optional_dtype, "None or a dtype"),
}


def check_param_values(values: dict) -> None:
  """Raises FormatError if a param in `PARAM_VALUE_RULES` has a value of the
  wrong type. Run once per param set, whatever the primitive."""
  for key, (ok, expected) in PARAM_VALUE_RULES.items():
    if key in values and not ok(values[key]):
      raise FormatError(f"param {key!r} must be {expected}, got "
                        f"{values[key]!r:.80}")


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
