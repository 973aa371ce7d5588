"""Storing the `policy` param of `jax.checkpoint` (primitive `remat2`).

A checkpoint policy is a Python callable, so the file cannot hold it; it
holds instead the name of the `jax.checkpoint_policies` factory that made it
and the factory's arguments, and `load` calls that factory again. Stored
value (inside `Value.param_codec`):

* `None` for `policy=None` (JAX's default: save nothing);
* otherwise a tuple `(name, *args)` with `name` one of
  "jax.checkpoint_policies.<factory>" and `args` by factory:

  - `everything_saveable`, `nothing_saveable`, `dots_saveable` (also for
    its alias `checkpoint_dots`), `dots_with_no_batch_dims_saveable` (also
    `checkpoint_dots_with_no_batch_dims`): no arguments;
  - `save_only_these_names`, `save_any_names_but_these`: one frozenset of
    names (the names given to `jax.ad_checkpoint.checkpoint_name`);
  - `save_anything_except_these_names`: no arguments (JAX's policy ignores
    its names and saves everything, so there is nothing else to keep);
  - `offload_dot_with_no_batch_dims`: `offload_src`, `offload_dst` (memory
    kind strings);
  - `save_and_offload_only_these_names`: frozenset of names to save,
    frozenset of names to offload, `offload_src`, `offload_dst`;
  - `save_from_both_policies`: the two sub-policies, each stored as above.
    JAX 0.12's factory returns one of its arguments when the other is
    `everything_saveable` or `nothing_saveable`, so there such a policy is
    that argument and is stored as it; a file (written under JAX 0.10 or
    0.11) that stores both loads as whatever the running JAX's factory
    makes of them.

The stored value is the same on every supported JAX release, although the
policy objects differ (dataclasses on some, closures on others; see
`jaxpr_io.compat.remat`).

Any other callable (a policy the user wrote) is refused with
`UnsupportedError`. The factory names are part of the file format.

Importing this module registers the codec.
"""

from __future__ import annotations

from typing import Any

from jaxpr_io.codec import registry
from jaxpr_io.compat import remat as compat_remat
from jaxpr_io.errors import FormatError, UnsupportedError

# Serialized name of `jax.checkpoint`'s primitive (`remat_p.name`).
PRIMITIVE = "remat2"
PREFIX = "jax.checkpoint_policies."
STORABLE = ", ".join(compat_remat.FACTORY_NAMES)


def _describe_callable(policy) -> str:
  name = getattr(policy, "__qualname__", None)
  if type(name) is not str:  # e.g. a functools.partial or another object
    return repr(policy)
  module = getattr(policy, "__module__", None)
  return f"{module}.{name}" if module else name


def encode_policy(policy) -> Any:
  """The stored value of a checkpoint policy (see the module docstring).

  Raises UnsupportedError for a policy that `jax.checkpoint_policies` did
  not make, naming it and listing the policies that can be stored."""
  if policy is None:
    return None
  description = compat_remat.describe_policy(policy)
  if description is None:
    raise UnsupportedError(
        f"the jax.checkpoint policy {_describe_callable(policy)} is Python "
        "code that a file cannot hold; only policy=None and the policies of "
        f"jax.checkpoint_policies can be stored ({STORABLE}). Use one of "
        "those, e.g. save_only_these_names with "
        "jax.ad_checkpoint.checkpoint_name, before tracing")
  name, args = description
  kinds = compat_remat.arg_kinds(name)
  stored = [PREFIX + name]
  for kind, arg in zip(kinds, args):
    if kind == "policy":
      try:
        stored.append(encode_policy(arg))
      except UnsupportedError as e:
        raise UnsupportedError(f"in {name}: {e}") from None
    elif kind == "memory" and type(arg) is not str:
      raise UnsupportedError(
          f"{name} was given the memory kind {arg!r}; only strings (e.g. "
          "'device', 'pinned_host') can be stored")
    else:
      stored.append(arg)
  return tuple(stored)


def decode_policy(stored) -> Any:
  """The policy of a stored value; FormatError if the value is malformed or
  names a factory this JAX does not have."""
  if stored is None:
    return None
  if type(stored) is not tuple or not stored or type(stored[0]) is not str:
    raise FormatError(f"checkpoint policy {stored!r} is not a (name, *args) "
                      "tuple")
  full_name, args = stored[0], stored[1:]
  name = full_name[len(PREFIX):] if full_name.startswith(PREFIX) else None
  kinds = None if name is None else compat_remat.arg_kinds(name)
  if kinds is None:
    raise FormatError(f"unknown checkpoint policy {full_name!r}; this "
                      f"jaxpr_io knows {PREFIX}{{{STORABLE}}}")
  if len(args) != len(kinds):
    raise FormatError(f"checkpoint policy {full_name!r} takes {len(kinds)} "
                      f"arguments, the file gives {len(args)}")
  built = []
  for i, (kind, arg) in enumerate(zip(kinds, args)):
    if kind == "policy":
      built.append(decode_policy(arg))
    elif kind == "names" and type(arg) is not frozenset:
      raise FormatError(f"argument {i} of checkpoint policy {full_name!r} "
                        f"must be a frozenset of names, not {arg!r}")
    elif kind == "memory" and type(arg) is not str:
      raise FormatError(f"argument {i} of checkpoint policy {full_name!r} "
                        f"must be a memory kind string, not {arg!r}")
    else:
      built.append(arg)
  try:
    return compat_remat.build_policy(name, tuple(built))
  except (TypeError, ValueError) as e:
    raise FormatError(f"checkpoint policy {full_name!r} cannot be rebuilt "
                      f"from {args!r}: {e}") from None


registry.register_eqn_param_codec(
    PRIMITIVE, "policy",
    encode=lambda value, params: encode_policy(value),
    decode=lambda stored, params: decode_policy(stored))
