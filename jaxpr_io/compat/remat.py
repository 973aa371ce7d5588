"""JAX internals for rematerialization (`jax.checkpoint`) policies.

A `checkpoint` equation (primitive `remat2`) holds its policy as a Python
object made by `jax.checkpoint_policies`. How each policy is built differs
between JAX releases:

  policy                             0.10        0.11        0.12
  dots_saveable, dots_with_no_...    DotsSaveable instances  functions
  save_only_these_names              dataclass   dataclass   closure
  save_any_names_but_these           dataclass   dataclass   closure
  offload_dot_with_no_batch_dims     closure     dataclass   closure
  save_and_offload_only_these_names  closure     dataclass   closure
  save_from_both_policies            closure     closure     closure (*)
  save_anything_except_these_names   closure     closure     closure

  (*) returns one of its arguments when the other is `everything_saveable`
      or `nothing_saveable`.

This module hides that: `describe_policy(policy)` answers "which public
factory, with which arguments, made this policy?" and
`build_policy(factory, args)` calls that factory again. The description is
the same on every release, so a file written under one loads under another.
What each factory returns on the running release is not hard-coded per
release: at import each factory is called once with probe arguments, and
its policies are recognized by the class (a dataclass) or the code object (a
closure) of what it returned; the arguments are read back from the fields
or closure cells listed in `_FACTORIES`. The factory names are JAX's public
names in `jax.checkpoint_policies` (the file format stores them with a
"jax.checkpoint_policies." prefix) and must not change.
"""

from __future__ import annotations

import dataclasses
import types
import warnings
from typing import Any, Callable

from jax._src import ad_checkpoint

remat_p = ad_checkpoint.remat_p
name_p = ad_checkpoint.name_p

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

# What each factory argument holds: "names" a frozenset of checkpoint names,
# "memory" a memory kind string (e.g. "device", "pinned_host"), "policy"
# another policy.
_NAMES, _MEMORY, _POLICY = "names", "memory", "policy"


@dataclasses.dataclass(frozen=True)
class _Factory:
  """A factory of `jax.checkpoint_policies` whose policies hold arguments.

  `kinds[i]` says what stored argument i holds; `holders[i]` lists the
  names of the dataclass field or closure variable that holds argument i
  in the policies of some JAX release (the first one the policy has is
  read). `build` calls the factory with stored arguments; `probe` are
  stored arguments to call it with at import."""
  name: str
  kinds: tuple[str, ...]
  holders: tuple[tuple[str, ...], ...]
  build: Callable[[tuple], Any]
  probe: tuple


_PROBE_NAMES = (frozenset({"jaxpr_io.probe.saved"}),
                frozenset({"jaxpr_io.probe.offloaded"}))
_PROBE_MEMORY = ("jaxpr_io.probe.src", "jaxpr_io.probe.dst")
# Two policies that `save_from_both_policies` does not simplify away.
_PROBE_POLICIES = (ad_checkpoint.dots_saveable,
                   ad_checkpoint.dots_with_no_batch_dims_saveable)

_FACTORIES: tuple[_Factory, ...] = (
    _Factory("save_only_these_names", (_NAMES,),
             (("saveable_names", "names_which_can_be_saved"),),
             lambda a: ad_checkpoint.save_only_these_names(*a[0]),
             _PROBE_NAMES[:1]),
    _Factory("save_any_names_but_these", (_NAMES,),
             (("names", "names_not_to_save"),),
             lambda a: ad_checkpoint.save_any_names_but_these(*a[0]),
             _PROBE_NAMES[:1]),
    _Factory("offload_dot_with_no_batch_dims", (_MEMORY, _MEMORY),
             (("offload_src",), ("offload_dst",)),
             lambda a: ad_checkpoint.offload_dot_with_no_batch_dims(*a),
             _PROBE_MEMORY),
    _Factory("save_and_offload_only_these_names",
             (_NAMES, _NAMES, _MEMORY, _MEMORY),
             (("names_which_can_be_saved",), ("names_which_can_be_offloaded",),
              ("offload_src",), ("offload_dst",)),
             lambda a: ad_checkpoint.save_and_offload_only_these_names(
                 names_which_can_be_saved=a[0],
                 names_which_can_be_offloaded=a[1],
                 offload_src=a[2], offload_dst=a[3]),
             (*_PROBE_NAMES, *_PROBE_MEMORY)),
    _Factory("save_from_both_policies", (_POLICY, _POLICY),
             (("policy_1",), ("policy_2",)),
             lambda a: ad_checkpoint.save_from_both_policies(*a),
             _PROBE_POLICIES),
    # JAX's policy ignores the names (it saves everything), so it holds
    # nothing to store and is rebuilt with no names.
    _Factory("save_anything_except_these_names", (), (),
             lambda a: ad_checkpoint.save_anything_except_these_names(),
             ()),
)
_FACTORY_BY_NAME = {f.name: f for f in _FACTORIES}

# Every name `describe_policy` can return, for messages and the reader.
FACTORY_NAMES: tuple[str, ...] = (*PLAIN_POLICIES, *_FACTORY_BY_NAME)


def arg_kinds(name: str) -> tuple[str, ...] | None:
  """The kinds ("names", "memory" or "policy") of the stored arguments of
  factory `name`, or None if `name` is not a factory this module knows."""
  if name in PLAIN_POLICIES:
    return ()
  factory = _FACTORY_BY_NAME.get(name)
  return None if factory is None else factory.kinds


def build_policy(name: str, args: tuple):
  """The policy `jax.checkpoint_policies.<name>(...)` of stored `args`.

  The caller checks `args` against `arg_kinds(name)` first; the factory's
  own ValueError (e.g. names both saved and offloaded) passes through."""
  if name in PLAIN_POLICIES:
    return PLAIN_POLICIES[name]
  return _FACTORY_BY_NAME[name].build(args)


# ------------------------------------------------------------ recognition
def _contents(policy) -> dict[str, Any] | None:
  """The values a policy object holds, by field or closure variable name;
  None for an object that is neither a closure nor a dataclass."""
  if type(policy) is types.FunctionType:
    cells = policy.__closure__ or ()
    return {v: c.cell_contents
            for v, c in zip(policy.__code__.co_freevars, cells)}
  if dataclasses.is_dataclass(policy) and not isinstance(policy, type):
    return {f.name: getattr(policy, f.name)
            for f in dataclasses.fields(policy)}
  return None


def _recognition_key(policy):
  """What identifies the maker of `policy`: a closure's code object (each
  factory defines its own), otherwise the policy's class."""
  if type(policy) is types.FunctionType:
    return policy.__code__
  return type(policy)


def _stored_form(value):
  # Some releases keep name lists as sets, others as frozensets.
  return frozenset(value) if isinstance(value, (set, frozenset)) else value


def _read_args(factory: _Factory, contents: dict[str, Any]) -> tuple | None:
  """The stored arguments read from a policy's `contents`, or None if the
  policy holds other values than `factory.holders` lists."""
  args, used = [], set()
  for names in factory.holders:
    found = [n for n in names if n in contents]
    if len(found) != 1:
      return None
    used.add(found[0])
    args.append(_stored_form(contents[found[0]]))
  return tuple(args) if used == set(contents) else None


def _learn(factory: _Factory):
  """The recognition key of this release's `factory` policies; raises
  RuntimeError when they cannot be read back (a JAX release this module
  does not know changed the factory)."""
  probe = factory.build(factory.probe)
  contents = _contents(probe)
  if contents is None:
    raise RuntimeError(
        f"it returns a {type(probe).__name__}, neither a closure nor a "
        "dataclass")
  if _read_args(factory, contents) != factory.probe:
    raise RuntimeError(
        f"its policies hold {sorted(contents)}, not the arguments "
        f"{factory.holders}")
  return _recognition_key(probe)


# Recognition key -> factory. Learnt at import: in a JAX release that
# changed a factory, policies it makes are not recognized (so never stored
# with the wrong arguments; `dumps` refuses them) and a warning says this
# module needs updating. Reading still works: it only calls the factory.
_KEY_TO_FACTORY: dict[Any, _Factory] = {}
for _factory in _FACTORIES:
  try:
    _KEY_TO_FACTORY[_learn(_factory)] = _factory
  except RuntimeError as _e:
    warnings.warn(
        f"jaxpr_io cannot store jax.checkpoint_policies.{_factory.name} "
        f"policies of this JAX release: {_e}; update "
        "jaxpr_io/compat/remat.py")

_PLAIN_BY_ID = {id(p): name for name, p in PLAIN_POLICIES.items()}
# Plain policies that are instances (JAX 0.10 and 0.11's `DotsSaveable`):
# equal instances behave alike, so they are stored as JAX's named ones.
_PLAIN_INSTANCES = {p: name for name, p in PLAIN_POLICIES.items()
                    if type(p) is not types.FunctionType}
_PLAIN_INSTANCE_TYPES = frozenset(type(p) for p in _PLAIN_INSTANCES)


def describe_policy(policy) -> tuple[str, tuple] | None:
  """(public factory name, its stored arguments) that rebuild `policy`, or
  None when `policy` was not made by `jax.checkpoint_policies`.

  Plain policies have no arguments. For `save_from_both_policies` the
  arguments are the two sub-policies themselves (describe them in turn);
  name sets are returned as frozensets."""
  name = _PLAIN_BY_ID.get(id(policy))
  if name is None and type(policy) in _PLAIN_INSTANCE_TYPES:
    name = _PLAIN_INSTANCES.get(policy)
  if name is not None:
    return name, ()
  factory = _KEY_TO_FACTORY.get(_recognition_key(policy))
  if factory is None:
    return None
  args = _read_args(factory, _contents(policy))
  return None if args is None else (factory.name, args)
