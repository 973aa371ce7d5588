"""JAX internals for rematerialization (`jax.checkpoint`) policies.

A `checkpoint` equation (primitive `remat2`) holds its policy as a Python
object: a module-level function, a small dataclass, or a closure made by one
of the factories in `jax.checkpoint_policies`. This module is the only place
that knows how JAX 0.10 builds each of them; `jaxpr_io.remat` turns the
description into stored values.

`describe_policy(policy)` answers "which public factory, with which
arguments, made this policy?" and `build_policy(factory, args)` calls that
factory again. The factory names are JAX's public names in
`jax.checkpoint_policies` (the file format stores them with a
"jax.checkpoint_policies." prefix).
"""

from __future__ import annotations

import types
import warnings
from typing import Any

from jax._src import ad_checkpoint

remat_p = ad_checkpoint.remat_p
name_p = ad_checkpoint.name_p

DotsSaveable = ad_checkpoint.DotsSaveable
SaveOnlyTheseNames = ad_checkpoint.SaveOnlyTheseNames
SaveAnyNamesButThese = ad_checkpoint.SaveAnyNamesButThese

# Policies that are single objects, by public name. `checkpoint_dots` and
# `checkpoint_dots_with_no_batch_dims` are aliases of two of them and are
# stored under the names below.
PLAIN_POLICIES: dict[str, Any] = {
    "everything_saveable": ad_checkpoint.everything_saveable,
    "nothing_saveable": ad_checkpoint.nothing_saveable,
    "dots_saveable": ad_checkpoint.dots_saveable,
    "dots_with_no_batch_dims_saveable":
        ad_checkpoint.dots_with_no_batch_dims_saveable,
}

# Factories of the dataclass policies: public name -> (class, factory).
_NAME_SET_FACTORIES: dict[str, tuple[type, Any]] = {
    "save_only_these_names": (SaveOnlyTheseNames,
                              ad_checkpoint.save_only_these_names),
    "save_any_names_but_these": (SaveAnyNamesButThese,
                                 ad_checkpoint.save_any_names_but_these),
}

# Factories whose policies are closures over their arguments:
# public name -> (factory, the closure's free variable names in the order of
# the factory's arguments, whether those arguments are keyword-only).
# `ARG_KINDS` says what each free variable holds.
_CLOSURE_FACTORIES: dict[str, tuple[Any, tuple[str, ...], bool]] = {
    "offload_dot_with_no_batch_dims": (
        ad_checkpoint.offload_dot_with_no_batch_dims,
        ("offload_src", "offload_dst"), False),
    "save_and_offload_only_these_names": (
        ad_checkpoint.save_and_offload_only_these_names,
        ("names_which_can_be_saved", "names_which_can_be_offloaded",
         "offload_src", "offload_dst"), True),
    "save_from_both_policies": (
        ad_checkpoint.save_from_both_policies,
        ("policy_1", "policy_2"), False),
    # JAX's closure ignores the names (it saves everything), so the policy
    # holds nothing to store and is rebuilt with no names.
    "save_anything_except_these_names": (
        ad_checkpoint.save_anything_except_these_names, (), False),
}

# What each factory argument holds: "names" a frozenset of checkpoint names,
# "memory" a memory kind string (e.g. "device", "pinned_host"), "policy"
# another policy.
ARG_KINDS: dict[str, str] = {
    "offload_src": "memory", "offload_dst": "memory",
    "names_which_can_be_saved": "names",
    "names_which_can_be_offloaded": "names",
    "policy_1": "policy", "policy_2": "policy",
}


def arg_kinds(name: str) -> tuple[str, ...] | None:
  """The kinds (see `ARG_KINDS`) of the arguments of factory `name`, or
  None if `name` is not a policy factory this module knows."""
  if name in PLAIN_POLICIES:
    return ()
  if name in _NAME_SET_FACTORIES:
    return ("names",)
  entry = _CLOSURE_FACTORIES.get(name)
  if entry is None:
    return None
  return tuple(ARG_KINDS[v] for v in entry[1])


# Every name `describe_policy` can return, for messages and the reader.
FACTORY_NAMES: tuple[str, ...] = (
    *PLAIN_POLICIES, *_NAME_SET_FACTORIES, *_CLOSURE_FACTORIES)


def _inner_code(factory) -> types.CodeType:
  """The code object of the one function `factory` defines and returns."""
  codes = [c for c in factory.__code__.co_consts
           if isinstance(c, types.CodeType)]
  if len(codes) != 1:
    raise RuntimeError(
        f"jax.checkpoint_policies.{factory.__name__} defines {len(codes)} "
        "functions in this JAX release; update jaxpr_io/compat/remat.py")
  return codes[0]


def _check_free_vars(name, code, free_vars) -> None:
  if set(code.co_freevars) != set(free_vars):
    raise RuntimeError(
        f"the policy closure of jax.checkpoint_policies.{name} captures "
        f"{code.co_freevars}, not {free_vars}, in this JAX release; update "
        "jaxpr_io/compat/remat.py")


# Code object of each factory's inner function -> public name. Checked at
# import: in a JAX release that changed a factory, policies it makes are not
# recognized (so never stored with the wrong arguments; `dumps` refuses them)
# and a warning says this table needs updating. Reading still works: it only
# calls the factory.
_CODE_TO_FACTORY: dict[types.CodeType, str] = {}
for _name, (_factory, _free_vars, _) in _CLOSURE_FACTORIES.items():
  try:
    _code = _inner_code(_factory)
    _check_free_vars(_name, _code, _free_vars)
  except RuntimeError as _e:
    warnings.warn(f"jaxpr_io cannot store {_name} policies: {_e}")
    continue
  _CODE_TO_FACTORY[_code] = _name

_PLAIN_BY_ID = {id(p): name for name, p in PLAIN_POLICIES.items()}


def describe_policy(policy) -> tuple[str, tuple] | None:
  """(public factory name, its arguments) that rebuild `policy`, or None
  when `policy` was not made by `jax.checkpoint_policies`.

  Plain policies have no arguments. For `save_from_both_policies` the
  arguments are the two sub-policies themselves (describe them in turn);
  name sets are returned as frozensets.
  """
  name = _PLAIN_BY_ID.get(id(policy))
  if name is not None:
    return name, ()
  t = type(policy)
  if t is DotsSaveable:
    # Equal instances behave alike; store them as JAX's named instances.
    return ("dots_with_no_batch_dims_saveable"
            if policy.only_if_no_batch_dims else "dots_saveable"), ()
  if t is SaveOnlyTheseNames:
    return "save_only_these_names", (frozenset(policy.saveable_names),)
  if t is SaveAnyNamesButThese:
    return "save_any_names_but_these", (frozenset(policy.names),)
  if t is not types.FunctionType:
    return None
  name = _CODE_TO_FACTORY.get(policy.__code__)
  if name is None:
    return None
  _, free_vars, _ = _CLOSURE_FACTORIES[name]
  cells = dict(zip(policy.__code__.co_freevars, policy.__closure__ or ()))
  args = []
  for var in free_vars:
    value = cells[var].cell_contents
    # The offload factory copies its name lists into sets.
    args.append(frozenset(value) if isinstance(value, (set, frozenset))
                else value)
  return name, tuple(args)


def build_policy(name: str, args: tuple):
  """The policy `jax.checkpoint_policies.<name>(*args)`.

  The caller checks `args` against `arg_kinds(name)` first; the factory's
  own ValueError (e.g. names both saved and offloaded) passes through."""
  if name in PLAIN_POLICIES:
    return PLAIN_POLICIES[name]
  if name in _NAME_SET_FACTORIES:
    _, factory = _NAME_SET_FACTORIES[name]
    return factory(*args[0])
  factory, free_vars, keyword_only = _CLOSURE_FACTORIES[name]
  if keyword_only:
    return factory(**dict(zip(free_vars, args)))
  return factory(*args)
