"""Every hi primitive class that JAX itself defines, in each supported
release (0.10.2, 0.11.x, 0.12.0.1), enumerated from its source (every
subclass of jax._src.hijax's `HiPrimitive`, `VJPHiPrimitive` and `HiPrim`;
compat/hi_prim_census.py finds them, and
tests/families/hijax/test_jax_hi_classes.py fails when a release defines
one this table lacks), with what its constructor takes and what jaxpr_io
does with it:

  stored     a record of jaxpr_io/families/hijax/prims.py's table, under
             the stable name given (`compat.ADAPTER.hi_prim_classes`);
  primitive  0.10's `HiPrimitive` is a `core.Primitive`: equations bind
             its objects by name, as any primitive (not as a `_prim`);
  refused    `dumps` refuses it, for the reason given, derived from the
             class's definition.

A class's constructor, where it changed between releases, is given per
release.
"""

from __future__ import annotations

from typing import NamedTuple


class JaxClass(NamedTuple):
  constructor: str   # its __init__'s parameters after self
  kind: str          # "stored", "primitive" or "refused"
  detail: str        # the stable name; the family; the reason


def _stored(constructor: str, name: str) -> JaxClass:
  return JaxClass(constructor, "stored", name)


def _refused(constructor: str, why: str) -> JaxClass:
  return JaxClass(constructor, "refused", why)


def _primitive(constructor: str, how: str) -> JaxClass:
  return JaxClass(constructor, "primitive", how)


# Reasons shared by several classes.
_USER_RULES = ("not stored yet: it holds the user's rule functions ({}), "
               "which JAX calls as it differentiates the program; jaxpr_io "
               "would have to trace them for every way JAX can call them, "
               "as families/custom_rules does for `custom_vjp_call`. It is "
               "bound only with the experimental {} setting; with the "
               "default setting jax.custom_vjp/custom_jvp bind primitives "
               "that jaxpr_io stores with their rules")
_POLICY = ("not stored yet: its `policy` is a Python function (the remat "
           "policy) that its rules call on each name and aval. It is bound "
           "only with the experimental jax_remat3 setting; with the default "
           "setting jax.checkpoint binds `checkpoint`, which jaxpr_io "
           "stores with JAX's named policies")
CLASSES: dict[str, JaxClass] = {
    # ----------------------------------------------------- jax.numpy
    "jax._src.numpy.hijax.SearchSorted": _stored(
        "sorted_arr_aval, query_aval, *, side, dimension, batch_dims, "
        "method, out_dtype", "jax.numpy.SearchSorted"),
    "jax._src.numpy.hijax.Nonzero": _stored(
        "a_aval, *, size, axes, out_dtype (0.10); a_aval, "
        "*fill_value_avals, size, axes, out_dtype (0.11+)",
        "jax.numpy.Nonzero"),
    "jax._src.numpy.ufuncs.Ldexp": _stored("x1_aval, x2_aval",
                                           "jax.numpy.Ldexp"),
    "jax._src.numpy.ufuncs.Frexp": _stored("x_aval", "jax.numpy.Frexp"),
    "jax._src.numpy.hijax.Einsum": _stored(
        "*operands_avals, subscripts, optimize='auto', precision=None, "
        "preferred_element_type=None (0.11+)", "jax.numpy.Einsum"),
    # -------------------------------------------------------- lax
    "jax._src.lax.control_flow.solves.CustomRoot": _stored(
        "f, solve, tangent_solve, solve_traced, in_avals, has_aux (0.11+)",
        "jax.lax.CustomRoot"),
    "jax._src.lax.control_flow.solves._RootLinearMap": _stored(
        "f, in_avals, out_aval, effects, transposed=False (0.11+)",
        "jax.lax.RootLinearMap"),
    "jax._src.lax.control_flow.loops.Scan3": _refused(
        "extensives, length, jaxpr, reverse, unroll",
        "not stored yet: bound only by jax.lax.scan with the experimental "
        "jax_scan3 setting; with the default setting scan binds `scan`, "
        "which jaxpr_io stores"),
    # ---------------------------------------------- hijax (custom rules)
    "jax._src.hijax.CustomVJPTraced": _refused(
        "traced, fwd, bwd, in_avals, sym_zeros, static_argnums, opt_remat "
        "(0.10); + with_logs=False (0.11); traced, fwd, bwd, in_avals, "
        "sym_zeros, opt_remat, with_logs=False, remat_rules=None, "
        "bwd_accums=None, generic_batching=False (0.12)",
        _USER_RULES.format("fwd, bwd", "jax_custom_vjp3")),
    "jax._src.hijax.CustomJVPTraced": _refused(
        "traced, jvp_fun, in_avals, sym_zeros, static_argnums (0.11); "
        "traced, jvp_rule, in_avals, sym_zeros (0.12)",
        _USER_RULES.format("the JVP rule", "jax_custom_jvp3")),
    "jax._src.hijax.OptRemat": _refused(
        "orig, traced_fwd",
        "it wraps a CustomVJPTraced (`orig`), which is refused: "
        + _USER_RULES.format("fwd, bwd", "jax_custom_vjp3")),
    "jax._src.hijax.VmapOf": _refused(
        "prim, axis_data, in_dims, out_dim (0.10, 0.11)",
        "not stored yet: it is the batch of another hi primitive `prim` "
        "that has no batch rule, and holds the vmap's `axis_data` (its "
        "axis name, any hashable of the user's, and its spmd and mesh "
        "axes); JAX 0.12's classes batch themselves and bind no VmapOf"),
    # ------------------------------------------------------ remat
    "jax._src.ad_checkpoint.RematTraced": _refused(
        "jaxpr, policy (0.10); jaxpr, policy, prevent_cse=True (0.11+)",
        _POLICY),
    "jax._src.ad_checkpoint.CustomRemat": _refused(
        "jaxpr, f1, f2_fbwd, in_tree, out_tree (0.10, 0.11)",
        "not stored yet: it holds the user's Python functions f1 and "
        "f2_fbwd (the rules given to jax._src.ad_checkpoint.custom_remat, "
        "which no public API exports), which JAX calls as it "
        "differentiates the program"),
    "jax._src.ad_checkpoint.CheckpointName": _stored(
        "name, aval", "jax.ad_checkpoint.CheckpointName"),
    "jax._src.ad_checkpoint.CheckpointNameFwd": _stored(
        "name, aval (0.11+)", "jax.ad_checkpoint.CheckpointNameFwd"),
    "jax._src.ad_checkpoint.PrimalLeftTangentRight": _stored(
        "aval_x, aval__x (0.11+)", "jax.ad_checkpoint.PrimalLeftTangentRight"),
    # ------------------------------------------------------ pallas
    "jax._src.pallas.einshape.Einshape": _refused(
        "x_aval, *, equation, assert_is_tile_preserving, sizes",
        "not stored yet: Pallas's einshape binds it inside kernels, whose "
        "tiled layouts jaxpr_io does not check; its `sizes` is a dict"),
    "jax._src.pallas.fuser.fusible.Fusible": _refused(
        "jaxpr, in_avals, out_aval, output_fusion_prefix, func, "
        "num_consts, args_tree (0.11+)",
        "it holds `func`, the user's Python kernel-building function that "
        "Pallas's fuser calls when it fuses: no jaxpr expresses it"),
    # ------------------------------- 0.10's HiPrimitive: primitives
    "jax._src.hijax.NewBox": _primitive(
        "name (0.10)", "new_box, stored by families/hijax/mutable.py"),
    "jax._src.hijax.BoxGet": _primitive(
        "name (0.10)", "box_get, stored by families/hijax/mutable.py"),
    "jax._src.hijax.BoxSet": _primitive(
        "name (0.10)", "box_set, stored by families/hijax/mutable.py"),
    "jax._src.hijax.NewLog": _primitive(
        "name (0.10)", "new_log, stored by families/hijax/mutable.py"),
    "jax._src.hijax.LogExtend": _primitive(
        "name (0.10)", "log_extend, stored by families/hijax/mutable.py"),
    "jax._src.hijax.ReadLog": _primitive(
        "name (0.10)",
        "log_read: never in a jaxpr, as its abstract evaluation rule "
        "raises; it only reads a concrete log"),
}


def refusal_reason(qualified_name: str) -> str | None:
  """Why jaxpr_io refuses JAX's own class `qualified_name`, if it does."""
  entry = CLASSES.get(qualified_name)
  return entry.detail if entry is not None and entry.kind == "refused" \
      else None
