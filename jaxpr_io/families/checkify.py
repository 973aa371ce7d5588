"""`checkify`: the `check` primitive's error tree and its error effects.

`checkify.check(pred, msg, *args)` stages a `check` equation whose
`err_tree` param is the `PyTreeDef` of a checkify `Error`, and whose effect
is an `ErrorEffect(error type, payload shapes)`. Neither is plain data: the
error tree's nodes are keyed by effects and hold each exception's traceback
(an object of the writing process). They are stored as:

* the effect (`jax.checkify.ErrorEffect`): the error type's name, from
  `ERROR_TYPES`, and the payload's (shape, dtype) pairs;
* the error tree (an equation param codec of `check`'s `err_tree`): for each
  of the error's three dicts (predicates, codes, payloads) its effect keys
  and the children's treedefs, and for each error code the exception type's
  name, its fields other than the traceback (the format string of a failed
  `check`, the primitive of a NaN or out-of-bounds error) and the treedef of
  its payload.

On load the tree is rebuilt node by node from these parts, with a traceback
of the loading process (the file has none): an error raised by the loaded
program names where it was loaded, not where it was written. The format
string of a failed check reaches `str.format` when the error is raised, so
an untrusted file's is checked by the grammar of `jaxpr_io.safety.trust` (names
and positions only, bounded widths) and must fit the payload.
"""

from __future__ import annotations

from typing import Any

import jax

from jaxpr_io.compat import checkify as compat_checkify
from jaxpr_io.codec import registry
from jaxpr_io.format import limits
from jaxpr_io.safety import trust
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.errors import FormatError, UnsupportedError

_checkify = compat_checkify.jax_checkify

# Stable name -> the exception type an error of that kind raises.
ERROR_TYPES: dict[str, type] = {
    "FailedCheckError": _checkify.FailedCheckError,
    "NaNError": _checkify.NaNError,
    "OOBError": _checkify.OOBError,
    "DivisionByZeroError": _checkify.DivisionByZeroError,
}
_ERROR_TYPE_NAMES = {cls: name for name, cls in ERROR_TYPES.items()}
_MAX_PAYLOAD_RANK = 64


# ----------------------------------------------------------- the effect
def encode_error_effect(effect) -> tuple:
  """Payload: (error type name, ((shape, dtype), ...))."""
  name = _ERROR_TYPE_NAMES.get(effect.error_type)
  if name is None:
    raise UnsupportedError(f"checkify error type {effect.error_type!r} "
                           f"cannot be stored (these can: "
                           f"{sorted(ERROR_TYPES)})")
  shapes = tuple((tuple(s.shape), s.dtype) for s in effect.shape_dtypes)
  if decode_error_effect((name, shapes)) != effect:
    raise UnsupportedError(f"the checkify effect {effect} has payload types "
                           "with shardings or weak types, which cannot be "
                           "stored")
  return name, shapes


def decode_error_effect(payload):
  if not (type(payload) is tuple and len(payload) == 2
          and type(payload[0]) is str and type(payload[1]) is tuple):
    raise FormatError(f"a checkify error effect has the payload "
                      f"{payload!r:.120}, not (error type, shapes)")
  name, shapes = payload
  error_type = ERROR_TYPES.get(name)
  if error_type is None:
    raise FormatError(f"unknown checkify error type {name!r} (this "
                      f"jaxpr_io knows {sorted(ERROR_TYPES)})")
  structs = []
  for item in shapes:
    if not (type(item) is tuple and len(item) == 2
            and type(item[0]) is tuple and len(item[0]) <= _MAX_PAYLOAD_RANK
            and all(type(d) is int and 0 <= d < 2**62 for d in item[0])
            and isinstance(item[1], jax.numpy.dtype)):
      raise FormatError(f"a checkify error effect's payload type "
                        f"{item!r:.80} is not (shape, dtype)")
    structs.append(jax.ShapeDtypeStruct(item[0], item[1]))
  return compat_checkify.ErrorEffect(error_type, tuple(structs))


def has_checks(jaxpr) -> bool:
  """Whether `jaxpr` has checkify error effects (it must be called under
  `checkify.checkify`)."""
  return any(type(e) is compat_checkify.ErrorEffect for e in jaxpr.effects)


def functionalized(fun):
  """`fun` with its checks functionalized: returns (error, outputs)."""
  from jax.experimental import checkify  # pylint: disable=g-import-not-at-top
  return checkify.checkify(fun)


# ------------------------------------------------------- the error tree
def _node(treedef) -> tuple[type, Any, list]:
  node_data = treedef.node_data()
  if node_data is None:
    raise UnsupportedError("checkify's error tree has a leaf where a node "
                           "was expected")
  return node_data[0], node_data[1], treedef.children()


def _encode_exception(code, treedef) -> tuple:
  cls, aux, children = _node(treedef)
  name = _ERROR_TYPE_NAMES.get(cls)
  if name is None:
    raise UnsupportedError(f"checkify error code {code} raises "
                           f"{cls.__name__}, which cannot be stored (these "
                           f"can: {sorted(ERROR_TYPES)})")
  # The auxdata is the traceback, or (traceback, *fields).
  fields = aux[1:] if type(aux) is tuple else ()
  return (code, name, tuple(fields), tuple(children))


def encode_err_tree(tree, params) -> tuple:
  """(metadata, dicts): metadata is ((code, error type name, fields,
  payload treedefs), ...) in the error's order; dicts holds, for the
  predicates, codes and payloads in turn, (effect keys, child treedefs)."""
  del params
  cls, metadata, children = _node(tree)
  if cls is not _checkify.Error or type(metadata) is not dict \
      or len(children) != 3:
    raise UnsupportedError(f"check's err_tree {tree} is not a checkify "
                           "Error")
  stored_metadata = tuple(_encode_exception(code, exc_tree)
                          for code, exc_tree in metadata.items())
  dicts = []
  for child in children:
    node_type, keys, entries = _node(child)
    if node_type is not dict:
      raise UnsupportedError("checkify's error tree has a node that is not "
                             "a dict of effects")
    dicts.append((tuple(keys), tuple(entries)))
  return stored_metadata, tuple(dicts)


def _decode_exception(entry):
  if not (type(entry) is tuple and len(entry) == 4):
    raise FormatError("a checkify error code entry is not (code, error "
                      "type, fields, payload trees)")
  code, name, fields, children = entry
  cls = ERROR_TYPES.get(name)
  if cls is None or type(code) is not int or type(fields) is not tuple \
      or type(children) is not tuple or not all(
          type(c) is compat_pytrees.PyTreeDef for c in children):
    raise FormatError(f"checkify error code entry {entry!r:.120} is not "
                      "valid")
  if cls is _checkify.FailedCheckError:
    # Its format string is screened by jaxpr_io.safety.trust (`check`).
    # Its children are the trees of the message's args and kwargs.
    if len(fields) != 1 or type(fields[0]) is not str or len(children) != 2:
      raise FormatError("a failed check's fields are not (format string,) "
                        "with args and kwargs")
  elif not all(type(f) in (str, int, tuple) for f in fields):
    raise FormatError(f"{name}'s fields {fields!r:.80} are not plain data")
  traceback = _checkify.get_traceback()
  aux = (traceback, *fields) if fields or cls is not \
      _checkify.DivisionByZeroError else traceback
  treedef = compat_pytrees.make_node(cls, aux, list(children))
  if treedef is None:
    raise FormatError(f"{name} is not a pytree node type in this JAX")
  return code, treedef


def _check_payload_sizes(stored) -> None:
  """FormatError if the trees inside a stored err_tree (the payloads of its
  errors) hold more than `limits.MAX_FORMAT_ARGUMENT_NODES` nodes."""
  nodes, stack = 0, [stored]
  while stack:
    item = stack.pop()
    if type(item) is tuple:
      stack.extend(item)
    elif type(item) is compat_pytrees.PyTreeDef:
      nodes += item.num_nodes
  if nodes > limits.MAX_FORMAT_ARGUMENT_NODES:
    raise FormatError(
        f"check's err_tree holds payload trees of {nodes:,} nodes, more than "
        f"the {limits.MAX_FORMAT_ARGUMENT_NODES:,} a checkify error may carry")


def decode_err_tree(stored, params):
  del params
  if not (type(stored) is tuple and len(stored) == 2
          and type(stored[0]) is tuple and type(stored[1]) is tuple
          and len(stored[1]) == 3):
    raise FormatError("check's err_tree is not (metadata, three dicts)")
  metadata = dict(_decode_exception(e) for e in stored[0])
  if len(metadata) != len(stored[0]):
    raise FormatError("check's err_tree repeats an error code")
  children = []
  # Composing the error tree copies every node of its payload trees: bounded
  # before it is made (real payloads are a check's few format arguments).
  _check_payload_sizes(stored)
  for entry in stored[1]:
    if not (type(entry) is tuple and len(entry) == 2
            and type(entry[0]) is tuple and type(entry[1]) is tuple
            and len(entry[0]) == len(entry[1])
            and all(type(k) is compat_checkify.ErrorEffect for k in entry[0])
            and all(type(c) is compat_pytrees.PyTreeDef for c in entry[1])):
      raise FormatError("a dict of check's err_tree is not (effects, trees) "
                        "of one length")
    node = compat_pytrees.make_node(dict, list(entry[0]), list(entry[1]))
    if node is None:
      raise FormatError("a dict of check's err_tree cannot be rebuilt")
    children.append(node)
  tree = compat_pytrees.make_node(_checkify.Error, metadata, children)
  if tree is None:
    raise FormatError("checkify's Error is not a pytree node type here")
  return tree


def failed_check_formats(err_tree) -> list[tuple[str, Any]]:
  """(format string, payload treedef) of each failed-check error in a
  decoded `err_tree`: what `jaxpr_io.safety.trust` screens."""
  _, metadata, _ = _node(err_tree)
  found = []
  for exc_tree in metadata.values():
    cls, aux, children = _node(exc_tree)
    if cls is _checkify.FailedCheckError:  # children: args, kwargs
      found.append((aux[1], compat_pytrees.make_node(tuple, None, children)))
  return found


registry.register_eqn_param_codec("check", "err_tree", encode=encode_err_tree,
                                  decode=decode_err_tree)
registry.register_effect_codec(compat_checkify.ErrorEffect,
                               name="jax.checkify.ErrorEffect",
                               encode=encode_error_effect,
                               decode=decode_error_effect)
# The error tree's dicts are keyed by effects: they are param values too.
registry.register_param_codec(compat_checkify.ErrorEffect,
                              name="jax.checkify.ErrorEffect",
                              encode=encode_error_effect,
                              decode=decode_error_effect)


trust.register_family_screen("checkify formats", failed_check_formats)
