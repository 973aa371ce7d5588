"""Storing `jax.custom_batching.custom_vmap`'s batching rule.

A `custom_vmap_call` equation keeps its rule as a Python callable (a
`ClosedRule`), which JAX calls when the equation is batched:
`rule(axis_size, in_batched, *args) -> (outputs, out_batched)`, the batched
inputs with their batch axis first. A file cannot hold Python code, so the
writer traces the rule for every pattern of batched inputs JAX can ask for,
with a symbolic axis size `n` (`jax.export.symbolic_shape`), and stores the
jaxprs; `load` rebuilds a rule that picks the pattern's jaxpr, specializes
`n` to the actual axis size (jaxpr_io/compat/specialize.py) and evaluates it.

The `rule` param is stored (inside `Value.param_codec`) as
`(name, rules)`: `name` the rule's `__qualname__` (for printing), `rules` a
tuple of `(in_batched, rule, out_batched)` per pattern, in
`itertools.product((False, True), repeat=k)` order (the all-False pattern
too: `jvp` of a batched call asks for it): `in_batched` a tuple
of bools, one per input after the constants (which JAX never batches),
`rule` the closed jaxpr of the rule for that pattern (inputs: the
equation's inputs, the batched ones with a leading axis of size `n`;
outputs: the rule's flat outputs), `out_batched` a tuple of bools, one per
output. At most `MAX_BATCHED_INPUTS` inputs (2**k jaxprs).

The `in_tree` param is stored as its treedef (inside `Value.param_codec`):
JAX 0.12 keeps it in a pytree registry of its own, where it is rebuilt.
"""

from __future__ import annotations

import itertools

import jax

from jaxpr_io import compat
from jaxpr_io.codec import registry
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.compat import specialize
from jaxpr_io.compat import symbolic
from jaxpr_io.families.custom_rules import rule_types
from jaxpr_io.errors import FormatError, UnsupportedError

MAX_BATCHED_INPUTS = 8
_AXIS = "n"


def _split(in_tree):
  """(number of constants, number of arguments) of a custom_vmap_call's
  `in_tree`, which is `(consts, args)`."""
  consts, args = in_tree.children()
  return consts.num_leaves, args.num_leaves


def encode_rule(rule, params):
  if type(rule) is StoredVmapRule:  # a loaded program, saved again
    return rule.stored
  in_tree, call = params["in_tree"], params["call"]
  n_consts, n_args = _split(in_tree)
  if n_args > MAX_BATCHED_INPUTS:
    raise UnsupportedError(
        f"the custom_vmap rule {rule} has {n_args} inputs; it is stored "
        f"once per pattern of batched inputs (2**{n_args} jaxprs) and "
        f"at most {MAX_BATCHED_INPUTS} inputs are supported; pass fewer, "
        "larger arrays")
  n = _axis_size(rule, list(call.in_avals) + list(call.out_avals))
  rules = tuple(_trace_pattern(rule, in_tree, call, n, n_consts, pattern)
                for pattern in itertools.product((False, True),
                                                 repeat=n_args))
  return (getattr(rule, "__qualname__", str(rule)), rules)


def _trace_pattern(rule, in_tree, call, n, n_consts: int, pattern) -> tuple:
  """(pattern, closed jaxpr, out_batched) of `rule` traced for the batched
  inputs `pattern`, with the symbolic axis size `n`."""
  flat_batched = [False] * n_consts + list(pattern)
  structs = [jax.ShapeDtypeStruct(((n,) if b else ()) + tuple(a.shape),
                                  a.dtype)
             for a, b in zip(call.in_avals, flat_batched)]
  if compat_custom_rules.is_sequential_vmap_rule(rule) and any(pattern):
    return (pattern, jax.make_jaxpr(_sequential(call, flat_batched))(
        *structs), (True,) * len(call.out_avals))
  out_batched = []

  def traced(*flat):
    outs, batched = rule(n, list(in_tree.unflatten(flat_batched)),
                         *in_tree.unflatten(flat))
    out_batched.extend(jax.tree_util.tree_leaves(batched))
    return jax.tree_util.tree_leaves(outs)
  try:
    closed = jax.make_jaxpr(traced)(*structs)
  except Exception as e:  # pylint: disable=broad-except
    # A user rule can raise anything while traced symbolically.
    if not any(pattern):
      # JAX batches only calls with a batched input; it asks for this
      # pattern only for the JVP of a batched call whose tangents are not
      # batched, and rules written for batched inputs (`sequential_vmap`'s
      # `lax.map`) cannot be traced for it. The call itself is what an
      # unbatched call computes.
      return (pattern, call, (False,) * len(call.out_avals))
    raise UnsupportedError(
        f"the custom_vmap rule {rule} cannot be traced for batched "
        f"inputs {pattern} with a symbolic axis size: "
        f"{type(e).__name__}: {e}"[:600]) from None
  if not all(type(b) is bool for b in out_batched):
    raise UnsupportedError(f"the custom_vmap rule {rule} returned "
                           "out_batched values that are not bools")
  return (pattern, closed, tuple(out_batched))


def _sequential(call, flat_batched):
  """What `sequential_vmap`'s rule computes, from the equation's `call`:
  `lax.map` of the function over the batched inputs. (Tracing the rule
  itself would give a loop calling the same custom_vmap function, whose
  rule would be traced again, without end.)"""
  fun = compat.jaxpr_as_fun(call)

  def mapped(*flat):
    def body(xs):
      it = iter(xs)
      return fun(*[next(it) if b else x for x, b in zip(flat, flat_batched)])
    return jax.lax.map(body, [x for x, b in zip(flat, flat_batched) if b])
  return mapped


def _axis_size(rule, avals):
  """The symbolic axis size `n` the rule is traced with: in the scope of
  the equation's own symbolic dimensions, if it has any (a file holds one
  scope), where `n` must not already be a variable."""
  scope = None
  for aval in avals:
    for d in getattr(aval, "shape", ()):
      if symbolic.is_symbolic(d):
        scope = symbolic.scope_of(d)
        if _AXIS in d.get_vars():
          raise UnsupportedError(
              f"the custom_vmap rule {rule} is applied to arrays of shape "
              f"{aval.str_short()}, whose dimension variable {_AXIS!r} is "
              "the name jaxpr_io gives the batch size when it traces the "
              "rule; trace the program with another name for that "
              "dimension")
  if scope is None:
    (n,) = jax.export.symbolic_shape(_AXIS)
  else:
    (n,) = jax.export.symbolic_shape(_AXIS, scope=scope)
  return n


class StoredVmapRule:
  """A custom_vmap rule read from a file: called as JAX calls a
  `ClosedRule`. `env` holds the sizes of the program's own dimension
  variables once the program is specialized to them."""

  def __init__(self, stored: tuple, out_tree, rules: dict, env=None):
    self.stored = stored
    self.name = stored[0]
    self.out_tree = out_tree
    self.rules = rules
    self.env = dict(env or {})

  def __call__(self, axis_size, all_in_batched, *all_args):
    # (consts, args) and their batched flags, as `ClosedRule` takes them.
    consts_batched, in_batched = all_in_batched
    if any(jax.tree_util.tree_leaves(consts_batched)):
      raise ValueError("a custom_vmap rule got batched constants")
    flat_args = jax.tree_util.tree_leaves(all_args)
    entry = self.rules.get(tuple(
        bool(b) for b in jax.tree_util.tree_leaves(in_batched)))
    if entry is None:
      raise ValueError("a custom_vmap rule was called with another number "
                       "of inputs than it was stored for")
    closed, out_batched = entry
    size = axis_size if symbolic.is_symbolic(axis_size) else int(axis_size)
    closed = specialize.specialize(closed, {**self.env, _AXIS: size})
    rule_types.check_call(lambda: f"the custom_vmap rule {self.name!r}",
                          closed.jaxpr, flat_args)
    outs = jax.core.eval_jaxpr(closed.jaxpr, closed.consts, *flat_args)
    return (self.out_tree.unflatten(outs),
            self.out_tree.unflatten(list(out_batched)))

  def __str__(self):
    return f"<function {self.name} at {hex(id(self))}>"


def _specialized_rule(rule: StoredVmapRule, specializer) -> StoredVmapRule:
  """The rule of a program specialized to `specializer.env`: its jaxprs are
  specialized when it is called, with the axis size."""
  return StoredVmapRule(rule.stored, rule.out_tree, rule.rules,
                        {**rule.env, **specializer.env})


specialize.register_specializer(value_type=StoredVmapRule,
                                specialize=_specialized_rule)


def decode_rule(stored, params):
  out_tree, call = params.get("out_tree"), params.get("call")
  if type(out_tree) is not jax.tree_util.PyTreeDef:
    raise FormatError("custom_vmap_call's out_tree must be a treedef")
  if not compat.is_closed_jaxpr(call):
    raise FormatError("custom_vmap_call's call must be a closed jaxpr")
  if (type(stored) is not tuple or len(stored) != 2
      or type(stored[0]) is not str or type(stored[1]) is not tuple
      or not stored[1] or type(stored[1][0]) is not tuple
      or type(stored[1][0][0]) is not tuple):
    raise FormatError("custom_vmap_call's rule is not (name, rules)")
  _, entries = stored
  n_args = len(entries[0][0])  # checked against the inputs when called
  rules = {}
  for entry in entries:
    if (type(entry) is not tuple or len(entry) != 3
        or type(entry[0]) is not tuple or len(entry[0]) != n_args
        or not all(type(b) is bool for b in entry[0])
        or type(entry[2]) is not tuple
        or len(entry[2]) != out_tree.num_leaves
        or not all(type(b) is bool for b in entry[2])):
      raise FormatError("a custom_vmap rule entry is not (in_batched, "
                        "rule, out_batched) for this equation")
    if not compat.is_closed_jaxpr(entry[1]):
      raise FormatError("a custom_vmap rule entry's rule is not a closed "
                        "jaxpr")
    rule_types.vmap_rule(stored[0], call, n_args, entry[0], entry[1],
                         entry[2], _AXIS)
    rules[entry[0]] = (entry[1], entry[2])
  if len(rules) != 2 ** n_args:
    raise FormatError(f"custom_vmap_call's rule has {len(rules)} patterns, "
                      f"not the {2 ** n_args} of {n_args} inputs")
  rule = StoredVmapRule(stored, out_tree, rules)
  _check_tree_fits(params.get("in_tree"), rule, call)
  return rule


def _check_tree_fits(in_tree, rule, call) -> None:
  """JAX splits the inputs of a custom_vmap_call by `in_tree` into
  (constants, arguments) and calls the rule with the arguments' batched
  flags: the tree, the rule's patterns and `call` must count the same
  inputs. Checked by whichever of the two params is decoded second (the
  other is still None)."""
  if type(in_tree) is not jax.tree_util.PyTreeDef or not isinstance(
      rule, StoredVmapRule):
    return
  n_consts, n_args = _split(in_tree)
  n_rule = len(next(iter(rule.rules)))
  n_call = len(compat.open_jaxpr(call).invars)
  if n_args != n_rule or n_consts + n_args != n_call:
    raise FormatError(
        f"custom_vmap_call's in_tree splits its inputs into {n_consts} "
        f"constants and {n_args} arguments; its rule {rule.name!r} is "
        f"stored for {n_rule} arguments and its call takes {n_call} "
        "inputs")


def encode_in_tree(in_tree, params):
  del params
  return in_tree


def decode_in_tree(stored, params):
  """The inputs' `(consts, args)` treedef, checked against the rule and
  `call` (`_check_tree_fits`). JAX 0.12 builds the `(consts, args)` tuple
  of `in_tree` in its tracing pytree registry, and its JVP rule requires
  that registry: the same node is rebuilt there (earlier releases have one
  registry)."""
  if (type(stored) is not jax.tree_util.PyTreeDef
      or len(stored.children()) != 2):
    raise FormatError("custom_vmap_call's in_tree is not the treedef of "
                      "(consts, args)")
  call = params.get("call")
  if compat.is_closed_jaxpr(call):
    _check_tree_fits(stored, params.get("rule"), call)
  if _TRACING_REGISTRY is None:
    return stored
  leaf = object()
  tree = stored.unflatten([leaf] * stored.num_leaves)
  return _TRACING_REGISTRY.flatten(tree, lambda x: x is leaf)[1]


# JAX 0.12's registry for the trees of traced calls (every pytree type is
# registered in it as in the default one); None before 0.12.
_TRACING_REGISTRY = compat.CUSTOM_VMAP_TREE_REGISTRY

registry.register_eqn_param_codec("custom_vmap_call", "rule",
                                  encode=encode_rule, decode=decode_rule)
registry.register_eqn_param_codec("custom_vmap_call", "in_tree",
                                  encode=encode_in_tree,
                                  decode=decode_in_tree)
