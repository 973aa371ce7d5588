"""Storing `jax.experimental.custom_partitioning`'s rules.

A `custom_partitioning` equation holds, besides plain data (`call`, the
function's closed jaxpr; `in_tree`, `out_tree`; `decode_shardings`;
`static_args`), four params that belong to the user's decorated object:
`partition`, `propagate_user_sharding` and `infer_sharding_from_operands`
(Python functions, or None) and `sharding_rule` (None, a Shardy
`SdyShardingRule` or a function). JAX calls them while lowering, from XLA's
partitioner. A file cannot hold Python code, so the user registers the
object under a stable name in the saving and in the loading process
(`register_custom_partitioning`), as with host callbacks.

Each of the four params is stored (inside `Value.param_codec`) as None,
when the equation's value is None (JAX binds the GSPMD callbacks or the
Shardy rule, never both, and the optional ones may be absent), or else as
the registered name of the object it comes from. `dumps` finds that object
among the registered ones by identity: its `partition` is the equation's,
and each other param is None or the object's own attribute. `load` looks the
name up in the loading process's registry only and takes the value from the
registered object's attribute of that name, so the rebuilt params are the
ones its `__call__` binds: the program prints alike and lowers with the
same partitioning.

The sharding rule is taken from the object too, not stored as data: it may
be a function, and one source for every rule keeps the loading process's
definition authoritative (the file chooses only among registered objects).

`in_tree` is stored as its treedef; JAX 0.12 builds it in its tracing pytree
registry, where it is rebuilt (`compat.CUSTOM_PARTITIONING_TREE_REGISTRY`).
"""

from __future__ import annotations

import jax

from jaxpr_io import compat
from jaxpr_io.codec import registry
from jaxpr_io.errors import FormatError, UnsupportedError

PRIMITIVE = "custom_partitioning"
# The params whose values are the registered object's attributes.
RULE_PARAMS = ("partition", "propagate_user_sharding",
               "infer_sharding_from_operands", "sharding_rule")

# Registered name <-> the user's `custom_partitioning` object.
REGISTERED: registry.Registry = registry.Registry(
    "custom_partitioning object")


def register_custom_partitioning(obj, *, name: str) -> None:
  """Makes programs that call the `custom_partitioning` object `obj`
  storable, under the stable name `name`.

  Call it after `obj.def_partition(...)`, in the process that saves and in
  every process that loads such programs: the file holds only the name, and
  loading takes `partition`, `propagate_user_sharding`,
  `infer_sharding_from_operands` and `sharding_rule` from the object
  registered under it. A name or an object registered twice is a ValueError
  naming the earlier registration.
  """
  if type(obj) is not compat.CustomPartitioning:
    raise TypeError("register_custom_partitioning needs a "
                    "jax.experimental.custom_partitioning.custom_partitioning "
                    f"object, got {type(obj).__name__}")
  if obj.partition is None:
    raise ValueError(f"register_custom_partitioning(..., name={name!r}): "
                     "the object has no partition rule yet; call its "
                     "def_partition first")
  REGISTERED.add(obj, name, obj)


def _describe(params) -> str:
  info = getattr(params["call"].jaxpr, "debug_info", None)
  where = getattr(info, "func_src_info", None)
  return f"the custom_partitioning function {where}" if where else (
      "a custom_partitioning function")


def _owner(params) -> str:
  """The registered name of the object whose rules `params` holds."""
  for name, obj in REGISTERED.by_name.items():
    if obj.partition is params["partition"] and all(
        params[p] is None or params[p] is getattr(obj, p)
        for p in RULE_PARAMS[1:]):
      return name
  raise UnsupportedError(
      f"{_describe(params)} has Python partitioning rules, which a file "
      "cannot hold, and its custom_partitioning object is not registered; "
      "call jaxpr_io.register_custom_partitioning(obj, name='some.name') "
      "after obj.def_partition(...), in the saving process and in every "
      "process that loads the program")


def _rule_codec(param: str):
  def encode(value, params):
    return None if value is None else _owner(params)

  def decode(stored, params):
    del params
    if stored is None:
      return None
    if type(stored) is not str:
      raise FormatError(f"custom_partitioning's {param} must be None or "
                        f"a registered name, not {type(stored).__name__}")
    obj = REGISTERED.by_name.get(stored)
    if obj is None:
      raise FormatError(
          f"the program calls the custom_partitioning object {stored!r}, "
          "which is not registered in this process; register the same "
          "decorated function with jaxpr_io.register_custom_partitioning("
          f"obj, name={stored!r}) before loading")
    value = getattr(obj, param)
    if value is None:
      raise FormatError(
          f"the custom_partitioning object registered as {stored!r} has no "
          f"{param}, which the program uses; define it (def_partition) "
          "as in the process that saved the program")
    return value
  return encode, decode


def encode_in_tree(in_tree, params):
  del params
  return in_tree


def decode_in_tree(stored, params):
  del params
  if type(stored) is not jax.tree_util.PyTreeDef:
    raise FormatError("custom_partitioning's in_tree must be a treedef")
  tracing = compat.CUSTOM_PARTITIONING_TREE_REGISTRY
  if tracing is None:
    return stored
  leaf = object()
  tree = stored.unflatten([leaf] * stored.num_leaves)
  return tracing.flatten(tree, lambda x: x is leaf)[1]


for _param in RULE_PARAMS:
  _encode, _decode = _rule_codec(_param)
  registry.register_eqn_param_codec(PRIMITIVE, _param, encode=_encode,
                                    decode=_decode)
registry.register_eqn_param_codec(PRIMITIVE, "in_tree", encode=encode_in_tree,
                                  decode=decode_in_tree)
