"""Adapter for JAX 0.11.x and 0.12.x: their objects <-> the format vocabulary.

These releases changed the jaxpr data model that the format's vocabulary
(jaxpr_io/vocabulary.py) was first written from (JAX 0.10):

* `ClosedJaxpr` merged into `Jaxpr` (handled in `jaxpr_io.compat`: which
  params hold closed jaxprs is a vocabulary table).
* `closed_call` became `eval_jaxpr` (same params): stored as `closed_call`.
* `jit`'s `inline` became the `Inline` enum: stored as its value, a string
  ("auto", "jax_late", "jax_early", "xla_early", "xla_late").
* `scan` groups its operands with `FlatTree` params `ft_in`/`ft_out` instead
  of `num_consts`/`num_carry`, and lost `linear` and `_split_transpose`. The
  file stores the counts (every release can read them) and, as optional
  params, the trees themselves as records (`jax.FlatTree.*`), so a program
  written and read by these releases prints exactly alike. Without them (a
  file from JAX 0.10) the trees are rebuilt the way `lax.scan` builds them.
"""

from __future__ import annotations

from jax._src import api as jax_api
from jax._src import flattree as ft
from jax._src import tree_util
from jax._src import util as jax_util

from jaxpr_io import vocabulary
from jaxpr_io.errors import FormatError

RELEASE_LINE = "0.11"

Inline = jax_api.Inline
_INLINE_BY_VALUE = {m.value: m for m in Inline}


# ------------------------------------------------------------- FlatTrees
# Stored as records. A `Pytree` node's treedef is stored as the nested tuple
# of jaxpr_io.callbacks (builtin containers only) and rebuilt in JAX's
# tracing registry, where FlatTree builds its own.
def _encode_pytree_node(node):
  from jaxpr_io import callbacks  # pylint: disable=g-import-not-at-top
  return (node.xs, callbacks.encode_treedef(node.tree))


def _decode_pytree_node(fields):
  from jaxpr_io import callbacks  # pylint: disable=g-import-not-at-top
  xs, stored = fields
  if type(xs) is not tuple:
    raise FormatError("a FlatTree Pytree node needs a tuple of values")
  skeleton = callbacks.treedef_skeleton(stored)
  _, treedef = tree_util.tracing_registry.flatten(
      skeleton, callbacks.is_skeleton_leaf)
  if treedef.num_leaves != len(xs):
    raise FormatError(f"a FlatTree Pytree node has {len(xs)} values for "
                      f"{treedef.num_leaves} leaves")
  return ft.FTPyTree(xs, treedef)


def _flat_trees(fields, what):
  if type(fields) is not tuple or not all(
      isinstance(f, ft.FlatTree) for f in fields):
    raise FormatError(f"a FlatTree {what} node needs FlatTree children")
  return fields


def _decode_dict_node(fields):
  keys, vals = fields
  if type(keys) is not tuple or type(vals) is not tuple or len(keys) != len(
      vals):
    raise FormatError("a FlatTree Dict node needs keys and values")
  return ft.FTDict(keys, _flat_trees(vals, "Dict"))


def _decode_filtered_node(fields):
  (tree,) = fields
  if not isinstance(tree, ft.FlatTree) or not all(
      type(x) is jax_util.Either for x in tree.vals):
    raise FormatError("a FlatTree RightsOnly node needs a FlatTree of "
                      "Either values")
  return ft.FTFiltered(tree)


def _decode_either(fields):
  is_right, value = fields
  if type(is_right) is not bool:
    raise FormatError("an Either needs a bool")
  return jax_util.Either(is_right, value)


RECORD_CODECS = [
    (ft.FTTuple, "jax.FlatTree.Tuple", lambda t: t.elts,
     lambda fields: ft.FTTuple(*_flat_trees(fields, "Tuple"))),
    (ft.FTDict, "jax.FlatTree.Dict", lambda t: (t.keys, t._vals),  # pylint: disable=protected-access
     _decode_dict_node),
    (ft.FTPyTree, "jax.FlatTree.Pytree", _encode_pytree_node,
     _decode_pytree_node),
    (ft.FTSingleton, "jax.FlatTree.Singleton", lambda t: (t.val,),
     lambda fields: ft.FTSingleton(*fields)),
    (ft.FTStatic, "jax.FlatTree.Static", lambda t: (t.val,),
     lambda fields: ft.FTStatic(*fields)),
    (ft.FTFiltered, "jax.FlatTree.RightsOnly", lambda t: (t.val,),
     _decode_filtered_node),
    (jax_util.Either, "jax.Either", lambda e: (e.is_right, e.val),
     _decode_either),
]


# ------------------------------------------------------------- rules
def _jit_to_format(params):
  params = dict(params)
  params["inline"] = params["inline"].value
  return params


def _jit_from_format(params, where):
  inline = params.get("inline")
  if type(inline) is bool:  # format version 1
    params["inline"] = Inline.JAX_LATE if inline else Inline.AUTO
  elif type(inline) is str:
    member = _INLINE_BY_VALUE.get(inline)
    if member is None:
      raise FormatError(vocabulary.unrepresentable(
          where, "jit", "inline", inline,
          f"this JAX knows {sorted(_INLINE_BY_VALUE)}"))
    params["inline"] = member
  return params


def _scan_to_format(params):
  ft_in, ft_out = params["ft_in"], params["ft_out"]
  consts, carry, xs = ft_in.unpack()
  out = {}
  for key, value in params.items():
    if key == "ft_in":
      out["num_consts"] = len(consts)
      out["num_carry"] = len(carry)
      out["linear"] = (False,) * (len(consts) + len(carry) + len(xs))
    elif key == "ft_out":
      out["_split_transpose"] = False
    else:
      out[key] = value
  out["ft_in"] = ft_in
  out["ft_out"] = ft_out
  return out


def _scan_from_format(params, where):
  del where
  num_consts = params.pop("num_consts")
  num_carry = params.pop("num_carry")
  linear = params.pop("linear", ())
  params.pop("_split_transpose", None)
  ft_in, ft_out = params.pop("ft_in", None), params.pop("ft_out", None)
  jaxpr = params["jaxpr"]
  if type(num_consts) is not int or type(num_carry) is not int or not (
      0 <= num_consts and 0 <= num_carry
      and num_consts + num_carry <= len(jaxpr.in_avals)
      and num_carry <= len(jaxpr.out_avals)):
    raise FormatError(f"scan's num_consts={num_consts!r} and "
                      f"num_carry={num_carry!r} do not fit its body")
  del linear
  if ft_in is None:
    # As lax.scan builds them.
    num_xs = len(jaxpr.in_avals) - num_consts - num_carry
    num_ys = len(jaxpr.out_avals) - num_carry
    ft_in = ft.pack((ft.nones(num_consts), ft.nones(num_carry),
                     ft.nones(num_xs)))
    ft_out = ft.pack((ft.nones(num_carry),
                      ft.nones(num_ys).filter_with_mask([True] * num_ys)))
  elif not (isinstance(ft_in, ft.FlatTree) and isinstance(ft_out, ft.FlatTree)
            and len(ft_in) == len(jaxpr.in_avals)
            and len(ft_out) == len(jaxpr.out_avals)):
    raise FormatError("scan's ft_in/ft_out do not fit its body")
  else:
    consts, carry, _ = _unpack3(ft_in)
    if (len(consts), len(carry)) != (num_consts, num_carry):
      raise FormatError("scan's ft_in disagrees with num_consts/num_carry")
  # JAX's own order of scan params.
  ordered = {}
  for key in ("reverse", "length", "jaxpr"):
    ordered[key] = params.pop(key)
  ordered["ft_in"] = ft_in
  ordered["ft_out"] = ft_out
  ordered.update(params)
  return ordered


def _unpack3(tree):
  try:
    parts = tree.unpack()
  except (AssertionError, TypeError, AttributeError):
    raise FormatError("scan's ft_in is not a tuple of three") from None
  if len(parts) != 3:
    raise FormatError("scan's ft_in is not a tuple of three")
  return parts


_NAME_TO_FORMAT = {"eval_jaxpr": "closed_call"}
_NAME_FROM_FORMAT = {"closed_call": "eval_jaxpr", "call": "eval_jaxpr",
                     "core_call": "eval_jaxpr"}
_TO_FORMAT = {"jit": _jit_to_format, "scan": _scan_to_format}
_FROM_FORMAT = {"jit": _jit_from_format, "scan": _scan_from_format}


def to_format(name: str, params: dict) -> tuple[str, dict]:
  """(vocabulary name, vocabulary params) of an equation of this release.
  Returns `params` itself when nothing changes (the writer caches by it)."""
  rule = _TO_FORMAT.get(name)
  return (_NAME_TO_FORMAT.get(name, name),
          params if rule is None else rule(params))


def from_format(name: str, params: dict, where) -> tuple[str, dict]:
  """(this release's primitive name, params) of a vocabulary equation.
  `params` is a fresh dict the rule may change."""
  if name == "eval_jaxpr":
    # JAX 0.10's `lax` eval_jaxpr primitive (param `jaxpr`) is staged out
    # as closed_call and never appears in a traced program.
    raise FormatError(vocabulary.unrepresentable(
        where, "eval_jaxpr", "jaxpr", "...",
        "it is JAX 0.10's unstaged eval_jaxpr primitive"))
  rule = _FROM_FORMAT.get(name)
  return (_NAME_FROM_FORMAT.get(name, name),
          params if rule is None else rule(params, where))
