"""Adapter for JAX 0.10.x: this release's objects <-> the format vocabulary.

The format's vocabulary (jaxpr_io/format/vocabulary.py) was first written from JAX
0.10, so most primitives and params pass through unchanged. What differs:

* `jit`'s `inline` is a bool here and one of the vocabulary's inline modes
  in the file: False is "auto", True is "jax_late" (the mapping JAX 0.11
  itself applies to `inline=True`). The modes "jax_early", "xla_early" and
  "xla_late" have no bool and are refused on load.
* `call_hi_primitive_linearized` lacks `nz_out_flat` and `has_sres`,
  which files hold (jaxpr_io/compat/hi_linearized.py).
* `scan`'s optional `ft_in`/`ft_out` (how JAX 0.11+ groups the operands) are
  skipped unread: this release groups by `num_consts`/`num_carry`.
* Params that later releases added (`vocabulary.OPTIONAL_PARAMS`) are
  dropped when they hold the value that means this release's behaviour.
* `xla_metadata_call` (jax.experimental.scheduling_groups here) takes its
  metadata as params of their own (`scheduling_group="g"`); the vocabulary
  has JAX 0.11+'s form, `xla_metadata=(("scheduling_group", "g"),)` with
  `ad_metadata="same"` (this release annotates derivatives with the same
  metadata), so `vocabulary.xla_metadata_pairs` checks the pairs.
"""

from __future__ import annotations

from jax._src import core as jax_core
from jax._src import hijax as jax_hijax
from jax._src import ad_checkpoint as jax_ad_checkpoint
from jax._src.numpy import hijax as numpy_hijax

from jaxpr_io.format import vocabulary
from jaxpr_io.compat import hi_linearized, pallas_pipeline
from jaxpr_io.compat.adapter import Adapter
from jaxpr_io.errors import FormatError, UnsupportedError

_INLINE_TO_BOOL = {"auto": False, "jax_late": True}


def _jit_to_format(params):
  inline = params.get("inline")
  if type(inline) is bool:
    params["inline"] = "jax_late" if inline else "auto"
  return params


def _jit_from_format(params, where):
  inline = params.get("inline")
  if type(inline) is str:
    if inline not in _INLINE_TO_BOOL:
      raise FormatError(vocabulary.unrepresentable(
          where, "jit", "inline", inline,
          "this JAX has only inline=False ('auto') and inline=True "
          "('jax_late')"))
    params["inline"] = _INLINE_TO_BOOL[inline]
  return params


def _xla_metadata_call_to_format(params):
  jaxpr = params.pop("jaxpr")
  for key, value in params.items():
    if type(value) is not str:
      # This release lowers string metadata only (scheduling_groups.attr_get).
      raise UnsupportedError(
          f"xla_metadata_call metadata {key}={value!r:.80} is not a string; "
          "JAX 0.10 cannot lower it, and the format stores strings")
  return {"jaxpr": jaxpr, "xla_metadata": tuple(sorted(params.items())),
          "ad_metadata": "same"}


def _xla_metadata_call_from_format(params, where):
  ad_metadata = params.pop("ad_metadata", "same")
  if ad_metadata != "same":
    raise FormatError(vocabulary.unrepresentable(
        where, "xla_metadata_call", "ad_metadata", ad_metadata,
        "this JAX annotates derivatives with the call's own metadata "
        "('same')"))
  pairs = vocabulary.xla_metadata_pairs(params.pop("xla_metadata", ()))
  if "jaxpr" in dict(pairs):
    raise FormatError("xla_metadata_call metadata names the key 'jaxpr'")
  params.update(pairs)
  return params


def _mxu_from_format(primitive: str):
  """Mosaic TPU's `matmul_acc_lhs`/`matmul_pop` address an accumulator by
  `acc_addr` here; from JAX 0.11 on they take an accumulator ref."""
  def rule(params, where):
    if "acc_addr" not in params:
      raise FormatError(vocabulary.unrepresentable(
          where, primitive, "acc_transforms_tree",
          params.get("acc_transforms_tree"),
          "this JAX's Mosaic TPU addresses accumulators by acc_addr, not by "
          "accumulator refs"))
    return params
  return rule


class Jax010(Adapter):
  release_line = "0.10"
  params_to_format = {"jit": _jit_to_format,
                      "xla_metadata_call": _xla_metadata_call_to_format,
                      **hi_linearized.TO_FORMAT}
  params_from_format = {"jit": _jit_from_format,
                        **hi_linearized.FROM_FORMAT,
                        "xla_metadata_call": _xla_metadata_call_from_format,
                        "matmul_acc_lhs": _mxu_from_format("matmul_acc_lhs"),
                        "matmul_pop": _mxu_from_format("matmul_pop"),
                        "emit_pipeline": (
                            pallas_pipeline.emit_pipeline_from_format(
                                "0.10"))}
  # JAX 0.11+'s FlatTree grouping of scan's operands; the counts suffice.
  skipped_params = vocabulary.RELEASE_HINT_PARAMS
  # jaxlib 0.10's while-loop trip-count analysis takes `i + i` for
  # `i + constant` and fails a CHECK (found by tests/fuzz; fixed by 0.12).
  compiler_aborts = frozenset({"while_self_add_induction"})
  # VJPHiPrimitive subclasses that no jax.numpy function binds yet (their
  # functions in jax._src.numpy.hijax do; jnp.searchsorted expands them).
  hi_prim_classes = {"jax.numpy.SearchSorted": numpy_hijax.SearchSorted,
                     "jax.numpy.Nonzero": numpy_hijax.Nonzero,
                     # checkpoint_name with jax_remat3.
                     "jax.ad_checkpoint.CheckpointName": (
                         jax_ad_checkpoint.CheckpointName)}
  hi_prim_bases = (jax_hijax.VJPHiPrimitive,)

  def new_future(self, inner_aval, done):
    # 0.10's futures hold only their value: the `core.Future` that
    # `psum_start` and friends return carries the done function, and a
    # traced program binds its done equation itself.
    del done
    return jax_core.AbstractFuture(inner_aval)


ADAPTER = Jax010()
