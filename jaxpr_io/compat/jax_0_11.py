"""Adapter for JAX 0.11.x: its objects <-> the format vocabulary.

These releases changed the jaxpr data model that the format's vocabulary
(jaxpr_io/format/vocabulary.py) was first written from (JAX 0.10):

* `ClosedJaxpr` merged into `Jaxpr` (handled in `jaxpr_io.compat`: which
  params hold closed jaxprs is a vocabulary table).
* `closed_call` became `eval_jaxpr` (same params): stored as `closed_call`.
* `jit`'s `inline` became the `Inline` enum: stored as its value, a string
  ("auto", "jax_late", "jax_early", "xla_early", "xla_late").
* `scan` groups its operands with `FlatTree` params `ft_in`/`ft_out` instead
  of `num_consts`/`num_carry`. The file stores the counts (every release
  can read them) and, as optional params, the trees themselves as records
  (`jax.FlatTree.*`), so a program written and read by these releases prints
  exactly alike; JAX 0.10 skips them unread. Without them (a file from JAX
  0.10) the trees are rebuilt the way `lax.scan` builds them.
* `composite`'s `jaxpr` param became `call_jaxpr` (by 0.12): stored as
  `jaxpr`.
* New context settings (layout mode; 0.12's `no_collectives`) and params
  added to existing primitives (`vocabulary.OPTIONAL_PARAMS`).

0.12.x shares this data model; its adapter (jax_0_12.py) subclasses this one.
"""

from __future__ import annotations

import inspect

from jax._src import ad_checkpoint as jax_ad_checkpoint
from jax._src import api as jax_api
from jax._src import core as jax_core
from jax._src import hijax as jax_hijax
from jax._src import layout as jax_layout
from jax._src.lax import lax as lax_internal
from jax._src.numpy import hijax as numpy_hijax
from jax._src import flattree as ft
from jax._src import tree_util
from jax._src import util as jax_util

from jaxpr_io.format import vocabulary
from jaxpr_io.compat import hi_linearized, hi_solves, pallas_pipeline, tree_tuples
from jaxpr_io.compat.adapter import Adapter
from jaxpr_io.errors import FormatError

Inline = jax_api.Inline
_INLINE_BY_VALUE = {m.value: m for m in Inline}


# ------------------------------------------------------------- FlatTrees
# Stored as records. A `Pytree` node's treedef is stored as the nested tuple
# of jaxpr_io/compat/tree_tuples.py (builtin containers only) and rebuilt in JAX's
# tracing registry, where FlatTree builds its own.
def _encode_pytree_node(node):
  return (node.xs, tree_tuples.encode_treedef(node.tree))


def _decode_pytree_node(fields):
  xs, stored = fields
  if type(xs) is not tuple:
    raise FormatError("a FlatTree Pytree node needs a tuple of values")
  skeleton = tree_tuples.treedef_skeleton(stored)
  _, treedef = tree_util.tracing_registry.flatten(
      skeleton, tree_tuples.is_skeleton_leaf)
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


_RECORD_CODECS = [
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


# The order in which scan's params are stored and rebuilt: JAX builds scan
# equations with their params in different orders, and a program must
# re-dump to the same bytes after a round trip.
_SCAN_ORDER = ("reverse", "length", "jaxpr", "num_consts", "num_carry",
               "unroll", "ft_in", "ft_out")


def _scan_to_format(params):
  consts, carry, _ = params["ft_in"].unpack()
  params["num_consts"] = len(consts)
  params["num_carry"] = len(carry)
  ordered = {k: params.pop(k) for k in _SCAN_ORDER if k in params}
  ordered.update(sorted(params.items()))
  return ordered


def _scan_from_format(params, where):
  del where
  num_consts = params.pop("num_consts", None)
  num_carry = params.pop("num_carry", None)
  ft_in, ft_out = params.pop("ft_in", None), params.pop("ft_out", None)
  jaxpr = params.get("jaxpr")
  n_in, n_out = len(jaxpr.in_avals), len(jaxpr.out_avals)
  if type(num_consts) is not int or type(num_carry) is not int or not (
      0 <= num_consts and 0 <= num_carry
      and num_consts + num_carry <= n_in and num_carry <= n_out):
    raise FormatError(f"scan's num_consts={num_consts!r} and "
                      f"num_carry={num_carry!r} do not fit its body")
  if ft_in is None and ft_out is None:
    # A file from JAX 0.10: the trees as lax.scan builds them.
    num_ys = n_out - num_carry
    ft_in = ft.pack((ft.nones(num_consts), ft.nones(num_carry),
                     ft.nones(n_in - num_consts - num_carry)))
    ft_out = ft.pack((ft.nones(num_carry),
                      ft.nones(num_ys).filter_with_mask([True] * num_ys)))
  elif not (isinstance(ft_in, ft.FlatTree) and isinstance(ft_out, ft.FlatTree)
            and len(ft_in) == n_in and len(ft_out) == n_out):
    raise FormatError("scan's ft_in/ft_out do not fit its body")
  else:
    consts, carry, _ = _unpack3(ft_in)
    if (len(consts), len(carry)) != (num_consts, num_carry):
      raise FormatError("scan's ft_in disagrees with num_consts/num_carry")
  params["ft_in"] = ft_in
  params["ft_out"] = ft_out
  ordered = {k: params.pop(k) for k in _SCAN_ORDER if k in params}
  ordered.update(sorted(params.items()))
  return ordered


def _unpack3(tree):
  try:
    parts = tree.unpack()
  except (AssertionError, TypeError, AttributeError):
    raise FormatError("scan's ft_in is not a tuple of three") from None
  if len(parts) != 3:
    raise FormatError("scan's ft_in is not a tuple of three")
  return parts


def _eval_jaxpr_from_format(params, where):
  # JAX 0.10's `lax` eval_jaxpr primitive (param `jaxpr`) is staged out as
  # closed_call and never appears in a traced program.
  raise FormatError(vocabulary.unrepresentable(
      where, "eval_jaxpr", "jaxpr", "...",
      "it is JAX 0.10's unstaged eval_jaxpr primitive"))


# `composite` calls its decomposition `call_jaxpr` in later releases; the
# vocabulary keeps 0.10's `jaxpr`, in the same place among the params.
_COMPOSITE_JAXPR = ("call_jaxpr" if "call_jaxpr" in inspect.signature(
    lax_internal._composite_impl).parameters else "jaxpr")  # pylint: disable=protected-access


def _renamed(params, old, new):
  return {(new if k == old else k): v for k, v in params.items()}


def _composite_to_format(params):
  return _renamed(params, _COMPOSITE_JAXPR, "jaxpr")


def _composite_from_format(params, where):
  del where
  return _renamed(params, "jaxpr", _COMPOSITE_JAXPR)


def _xla_metadata_call_from_format(params, where):
  """The metadata pairs are checked before JAX lowers them into XLA
  attributes; `ad_metadata` is "same" or pairs (JAX's "drop" is `()`)."""
  del where
  params["xla_metadata"] = vocabulary.xla_metadata_pairs(
      params.get("xla_metadata", ()))
  ad_metadata = params.get("ad_metadata", "same")
  if ad_metadata != "same":
    vocabulary.xla_metadata_pairs(ad_metadata)
  params["ad_metadata"] = ad_metadata
  return params


def _mxu_from_format(primitive: str):
  """Mosaic TPU's `matmul_acc_lhs`/`matmul_pop` take an accumulator ref from
  JAX 0.11 on; JAX 0.10 addressed the accumulator by `acc_addr`."""
  def rule(params, where):
    if "acc_addr" in params:
      raise FormatError(vocabulary.unrepresentable(
          where, primitive, "acc_addr", params["acc_addr"],
          "this JAX's Mosaic TPU takes accumulator refs (pltpu.ACC), not "
          "accumulator addresses"))
    return params
  return rule


# ------------------------------------------------------------- contexts
# 0.11 added layout modes to the equation context; 0.12 added
# `no_collectives`.
_HAS_NO_COLLECTIVES = "no_collectives" in jax_core.JaxprEqnContext.__slots__


class Jax011(Adapter):
  release_line = "0.11"
  # 0.11 still names the casts `reduced_vary_cast_p` and
  # `vary_unreduced_cast_p`, as files do; 0.12 dropped the suffix
  # (jax_0_12.py).
  name_to_format = {"eval_jaxpr": "closed_call"}
  name_from_format = {"closed_call": "eval_jaxpr", "call": "eval_jaxpr",
                      "core_call": "eval_jaxpr"}
  params_to_format = {"jit": _jit_to_format, "scan": _scan_to_format,
                      "composite": _composite_to_format,
                      # 0.11.0 lacks has_sres (compat/hi_linearized.py).
                      **hi_linearized.TO_FORMAT}
  params_from_format = {"jit": _jit_from_format, "scan": _scan_from_format,
                        **hi_linearized.FROM_FORMAT,
                        "eval_jaxpr": _eval_jaxpr_from_format,
                        "composite": _composite_from_format,
                        "xla_metadata_call": _xla_metadata_call_from_format,
                        "matmul_acc_lhs": _mxu_from_format("matmul_acc_lhs"),
                        "matmul_pop": _mxu_from_format("matmul_pop"),
                        "emit_pipeline": (
                            pallas_pipeline.emit_pipeline_from_format(
                                "0.11"))}
  record_codecs = _RECORD_CODECS
  # HiPrim subclasses (0.10's two, now on the new base class); no
  # jax.numpy function binds them yet in 0.11.
  hi_prim_classes = {"jax.numpy.SearchSorted": numpy_hijax.SearchSorted,
                     "jax.numpy.Nonzero": numpy_hijax.Nonzero,
                     "jax.numpy.Einsum": numpy_hijax.Einsum,
                     # checkpoint_name with jax_remat3.
                     "jax.ad_checkpoint.CheckpointName": (
                         jax_ad_checkpoint.CheckpointName),
                     "jax.ad_checkpoint.CheckpointNameFwd": (
                         jax_ad_checkpoint.CheckpointNameFwd),
                     "jax.ad_checkpoint.PrimalLeftTangentRight": (
                         jax_ad_checkpoint.PrimalLeftTangentRight),
                     # lax.custom_root binds them (compat/hi_solves.py).
                     "jax.lax.CustomRoot": hi_solves.CustomRoot,
                     "jax.lax.RootLinearMap": hi_solves.RootLinearMap}
  hi_prim_bases = (jax_hijax.HiPrim,)

  def future_done(self, aval):
    # `done_fun` is the done primitive's bound `bind` (parallel.py's
    # `_async_start_abstract_eval`); anything else is no primitive.
    done_fun = aval.done_fun
    if done_fun is None:
      return None
    prim = getattr(done_fun, "__self__", None)
    if (type(prim) is jax_core.Primitive
        and getattr(done_fun, "__func__", None) is jax_core.Primitive.bind):
      return prim
    return done_fun  # the writer refuses it: not a known done primitive

  def new_future(self, inner_aval, done):
    return jax_core.AbstractFuture(inner_aval,
                                   None if done is None else done.bind)

  def context_to_format(self, ctx) -> dict:
    return {"layout_mode": ctx.cur_layout_mode.name,
            "no_collectives": getattr(ctx, "no_collectives", frozenset())}

  def context_from_format(self, layout_mode, no_collectives, where):
    mode = jax_layout.LayoutMode.__members__.get(layout_mode)
    if mode is None:
      raise FormatError(vocabulary.unrepresentable(
          where, "equation context", "layout_mode", layout_mode,
          f"this JAX knows {sorted(jax_layout.LayoutMode.__members__)}"))
    fields = {"cur_layout_mode": mode}
    if _HAS_NO_COLLECTIVES:
      fields["no_collectives"] = no_collectives
    elif no_collectives:
      raise FormatError(vocabulary.unrepresentable(
          where, "equation context", "no_collectives", no_collectives,
          "this JAX cannot forbid collectives"))
    return fields


ADAPTER = Jax011()
