"""`lax.custom_root`'s hi primitives (JAX 0.11+): `CustomRoot` and
`_RootLinearMap` of jax._src.lax.control_flow.solves, as `call_hi_primitive`'s
`_prim` (`lax.custom_linear_solve` binds an ordinary primitive,
`custom_linear_solve`, on every release).

Their constructors take callables (compat/hi_solves.py): JAX passes the
closure-converted functions of traced jaxprs, or those under `vmap`. Each
is stored as the jaxpr it computes at the avals its class calls it with,
and rebuilt as the function of that jaxpr (`hi_solves.jaxpr_fun`). The
records, after the flat input avals and their treedef:

  jax.lax.CustomRoot     (in_avals, in_tree, out_tree, solve_jaxpr,
                          f_jaxpr, tangent_solve_jaxpr, has_aux, names)
  jax.lax.RootLinearMap  (in_avals, in_tree, out_avals, out_tree, f_jaxpr,
                          transposed, names)

where `names` holds the callables' qualified names (f, solve,
tangent_solve; f), which JAX prints among the params ("fun" of
`closure_convert`, "batched" of `vmap_rule`): only printed, never looked up.

What is derived is not stored: CustomRoot's `solve` is the function of its
`solve_jaxpr` param (both come from one trace, in `custom_root` and in its
batch rule), its outputs are that jaxpr's, and both classes' effects are
those of the traced function (`Traced.effects`). `dumps` checks each
derivation against the object it writes (the solve jaxpr, the callables'
output trees) and that the rebuilt object has the original's avals,
effects and params, and refuses the object otherwise. Loading checks every
stored value's type, and that each jaxpr takes and returns the avals its
class calls it with; `check=True` type-checks the jaxprs as it does the
program's sub-jaxprs (the callables apply them: `hi_solves.applied_jaxpr`).
"""

from __future__ import annotations

import re
from typing import Any, Callable

import jax

from jaxpr_io import compat
from jaxpr_io.codec.registry import register_param_codec
from jaxpr_io.compat import hi_solves
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.compat import specialize
from jaxpr_io.errors import FormatError, UnsupportedError
from jaxpr_io.safety import shape_rules

CUSTOM_ROOT = "jax.lax.CustomRoot"
ROOT_LINEAR_MAP = "jax.lax.RootLinearMap"
NAMES = (CUSTOM_ROOT, ROOT_LINEAR_MAP)
# The first release whose `custom_root` binds them (prims.missing_here).
SINCE = {CUSTOM_ROOT: "0.11", ROOT_LINEAR_MAP: "0.11"}

_tree_map = jax.tree_util.tree_map


def _tangents(avals):
  return _tree_map(lambda a: a.to_tangent_aval(), avals)


def _roots_of(has_aux: bool, out_aval):
  """The avals of the root that CustomRoot's rules pass to `f` and
  `tangent_solve`: its output, less the aux data."""
  return out_aval[0] if has_aux else out_aval


# ------------------------------------------------------------------ write
def _flat_avals(name, avals, error=UnsupportedError):
  leaves, tree = jax.tree_util.tree_flatten(avals)
  if not all(type(a) is compat.ShapedArray for a in leaves):
    raise error(f"hi primitive {name!r}: avals {avals!r:.200} are not a "
                "pytree of arrays' avals")
  return tuple(leaves), tree


def _traced(name, what, fn, out_tree, *avals):
  """The jaxpr of callable `what` of a `name` object, at `avals`."""
  jaxpr, traced_tree = hi_solves.trace(fn, *avals)
  if jaxpr is None or traced_tree != out_tree:
    raise UnsupportedError(
        f"hi primitive {name!r}: its {what} is not a function of its "
        f"arguments that returns a pytree {out_tree} (it captures constants "
        f"or returns {traced_tree}), as JAX's custom_root builds it: this "
        "JAX release builds the class otherwise than "
        "jaxpr_io/families/hijax/solves.py reads it")
  return jaxpr


def _custom_root_fields(prim) -> tuple:
  name = CUSTOM_ROOT
  in_flat, in_tree = _flat_avals(name, prim.in_avals)
  _, out_tree = _flat_avals(name, prim.out_aval)
  roots = _roots_of(prim.has_aux, prim.out_aval)
  root_tree = jax.tree_util.tree_structure(roots)
  solve = _traced(name, "solve", prim.solve, out_tree, *prim.in_avals[:2])
  # Unwrapped alike: JAX's batch rule traces the solve function to a call
  # of the jaxpr that `trace` gives.
  if str(solve) != str(hi_solves.unwrap(prim.solve_jaxpr)):
    raise UnsupportedError(
        f"hi primitive {name!r}: its solve function is not its solve_jaxpr "
        "param, which jaxpr_io/families/hijax/solves.py derives it from")
  return (in_flat, in_tree, out_tree, prim.solve_jaxpr,
          _traced(name, "f", prim.f, root_tree, prim.in_avals[2], roots),
          _traced(name, "tangent_solve", prim.tangent_solve, root_tree,
                  prim.in_avals[3], roots, _tangents(roots)),
          prim.has_aux,
          _names(name, prim.f, prim.solve, prim.tangent_solve))


def _encode_custom_root(prim) -> tuple:
  values = _custom_root_fields(prim)
  _check_rebuilt(CUSTOM_ROOT, prim,
                 _decode_custom_root(values, UnsupportedError), ("has_aux",))
  return values


def _root_linear_map_fields(prim) -> tuple:
  name = ROOT_LINEAR_MAP
  in_flat, in_tree = _flat_avals(name, prim.in_avals)
  out_flat, out_tree = _flat_avals(name, prim.out_aval)
  return (in_flat, in_tree, out_flat, out_tree,
          _traced(name, "f", prim.f, _f_tree(prim), *prim.in_avals[:2]),
          prim.transposed, _names(name, prim.f))


def _encode_root_linear_map(prim) -> tuple:
  values = _root_linear_map_fields(prim)
  _check_rebuilt(ROOT_LINEAR_MAP, prim,
                 _decode_root_linear_map(values, UnsupportedError),
                 ("transposed",))
  return values


# What a stored name may be: Python's qualified names of functions.
_NAME = re.compile(r"[A-Za-z_<][\w<>]*(\.[A-Za-z_<][\w<>]*)*")


def _names(name, *fns) -> tuple[str, ...]:
  names = tuple(getattr(fn, "__qualname__", None) for fn in fns)
  if not _are_names(names, len(fns)):
    raise UnsupportedError(f"hi primitive {name!r}: its callables' names "
                           f"{names!r:.200} are not functions' names")
  return names


def _are_names(names, n: int) -> bool:
  return type(names) is tuple and len(names) == n and all(
      type(s) is str and len(s) <= 200 and _NAME.fullmatch(s)
      for s in names)


def _f_tree(prim):
  """The tree of `f`'s output: that of the map's output (a tangent of it),
  or, transposed, of its input `v` (a cotangent of it)."""
  return jax.tree_util.tree_structure(
      prim.in_avals[2] if prim.transposed else prim.out_aval)


def _check_rebuilt(name, prim, rebuilt, params):
  """The file holds what makes `prim`: the rebuilt object has its avals,
  effects and (non-callable) params."""
  same = (type(rebuilt) is type(prim) and rebuilt.in_avals == prim.in_avals
          and rebuilt.out_aval == prim.out_aval
          and rebuilt.effects == prim.effects
          and all(rebuilt.params[p] == prim.params[p] for p in params))
  if not same:
    raise UnsupportedError(
        f"hi primitive {name!r} ({prim!r:.200}) is not rebuilt exactly from "
        "what jaxpr_io/families/hijax/solves.py stores: this JAX release gave "
        "it state that jaxpr_io does not store")


# ------------------------------------------------------------------- read
def _check_type(name, field, value, ok: bool, expected: str, error):
  if not ok:
    raise error(f"hi primitive {name!r}: {field} must be {expected}, got "
                f"{value!r:.100}")


def _avals_tree(name, fields, flat, tree, error):
  """The avals `flat` unflattened by the stored treedef `tree` (`fields`:
  what the message calls them), each checked: arrays' avals only, as
  `dumps` stores (`_flat_avals`)."""
  flat_field, tree_field = fields
  _check_type(name, flat_field, flat, type(flat) is tuple and all(
      type(a) is compat.ShapedArray for a in flat),
      "a tuple of arrays' avals", error)
  _check_type(name, tree_field, tree,
              type(tree) is compat_pytrees.PyTreeDef
              and tree.num_leaves == len(flat),
              f"a treedef of {len(flat)} leaves", error)
  return jax.tree_util.tree_unflatten(tree, flat)


def _unflatten(name, in_flat, in_tree, n_items, error):
  """The stored avals `in_flat` as a tuple of `n_items` pytrees."""
  avals = _avals_tree(name, ("in_avals", "in_tree"), in_flat, in_tree,
                      error)
  _check_type(name, "in_tree", in_tree,
              type(avals) is tuple and len(avals) == n_items,
              f"the treedef of a tuple of {n_items}", error)
  return avals


def _check_jaxpr(name, field, jaxpr, in_avals, out_avals, error):
  """`jaxpr` is a jaxpr that takes the leaves of `in_avals` and returns
  those of `out_avals` (pytrees of avals)."""
  _check_type(name, field, jaxpr, type(jaxpr) is compat.Jaxpr, "a jaxpr",
              error)
  want_in = jax.tree_util.tree_leaves(in_avals)
  want_out = jax.tree_util.tree_leaves(out_avals)
  got_in = [v.aval for v in jaxpr.invars]
  got_out = [v.aval for v in jaxpr.outvars]
  # Weak types aside: JAX's own functions apply jaxprs traced at the
  # initial guess to the root.
  if not (_typematch(got_in, want_in) and _typematch(got_out, want_out)):
    raise error(
        f"hi primitive {name!r}: {field} takes {got_in} and returns "
        f"{got_out}, but the class calls it on {want_in} for "
        f"{want_out}"[:1000])
  if error is FormatError:
    # A file's jaxpr: the shape rules JAX's checker skips, once per
    # distinct sub-jaxpr. JAX's type checker, which walks a shared sub-jaxpr
    # at every use, runs on these jaxprs with `check=True`, within its
    # inlined-size limit (safety/typecheck.py, `check_sub_jaxprs`).
    shape_rules.check_shapes(jaxpr)


def _typematch(got, want) -> bool:
  return len(got) == len(want) and all(
      compat.typematch(g, w) for g, w in zip(got, want))


def _construct(name, cls, args, error):
  """`cls(*args)`; what its checks raise becomes `error`."""
  try:
    return cls(*args)
  except Exception as e:  # pylint: disable=broad-except
    # The class's own checks (effects, shapes) on values from the file.
    raise error(f"hi primitive {name!r} cannot be built from the file's "
                f"values: {type(e).__name__}: {e}"[:1000]) from None


def _decode_custom_root(stored, error=FormatError):
  name = CUSTOM_ROOT
  _check_type(name, "the record", stored,
              type(stored) is tuple and len(stored) == 8,
              "(in_avals, in_tree, out_tree, solve_jaxpr, f_jaxpr, "
              "tangent_solve_jaxpr, has_aux, names)", error)
  (in_flat, in_tree, out_tree, solve, f, tangent_solve, has_aux,
   names) = stored
  _check_type(name, "names", names, _are_names(names, 3),
              "3 functions' names", error)
  in_avals = _unflatten(name, in_flat, in_tree, 4, error)
  _check_type(name, "has_aux", has_aux, type(has_aux) is bool, "a bool",
              error)
  _check_type(name, "solve_jaxpr", solve, type(solve) is compat.Jaxpr,
              "a jaxpr", error)
  out_aval = _avals_tree(name, ("solve_jaxpr's outputs", "out_tree"),
                         tuple(v.aval for v in solve.outvars), out_tree,
                         error)
  _check_type(name, "out_tree", out_tree, not has_aux or (
      type(out_aval) is tuple and len(out_aval) == 2),
      "the treedef of a pair (root, aux) with has_aux", error)
  roots = _roots_of(has_aux, out_aval)
  _check_jaxpr(name, "solve_jaxpr", solve, in_avals[:2], out_aval, error)
  _check_jaxpr(name, "f_jaxpr", f, (in_avals[2], roots), roots, error)
  _check_jaxpr(name, "tangent_solve_jaxpr", tangent_solve,
               (in_avals[3], roots, _tangents(roots)), _tangents(roots),
               error)
  root_tree = jax.tree_util.tree_structure(roots)
  return _construct(name, hi_solves.CustomRoot, (
      hi_solves.jaxpr_fun(f, root_tree, names[0]),
      hi_solves.jaxpr_fun(solve, out_tree, names[1]),
      hi_solves.jaxpr_fun(tangent_solve, root_tree, names[2]),
      hi_solves.SolveTraced(solve, out_aval), in_avals, has_aux), error)


def _decode_root_linear_map(stored, error=FormatError):
  name = ROOT_LINEAR_MAP
  _check_type(name, "the record", stored,
              type(stored) is tuple and len(stored) == 7,
              "(in_avals, in_tree, out_avals, out_tree, f_jaxpr, "
              "transposed, names)", error)
  in_flat, in_tree, out_flat, out_tree, f, transposed, names = stored
  _check_type(name, "names", names, _are_names(names, 1),
              "1 function's name", error)
  in_avals = _unflatten(name, in_flat, in_tree, 3, error)
  out_aval = _avals_tree(name, ("out_avals", "out_tree"), out_flat,
                         out_tree, error)
  _check_type(name, "transposed", transposed, type(transposed) is bool,
              "a bool", error)
  f_out = in_avals[2] if transposed else out_aval
  _check_jaxpr(name, "f_jaxpr", f, in_avals[:2], f_out, error)
  return _construct(name, hi_solves.RootLinearMap, (
      hi_solves.jaxpr_fun(f, jax.tree_util.tree_structure(f_out),
                          names[0]),
      in_avals, out_aval, hi_solves.effects(f), transposed), error)


def _specializer(fields: Callable[[Any], tuple],
                 decode: Callable[..., Any]) -> Callable[[Any, Any], Any]:
  """For a program specialized to concrete sizes (compat/specialize.py):
  the object rebuilt from its fields, each specialized (its avals, and its
  jaxprs, which its callables would otherwise apply at symbolic types)."""
  def specialized(prim, specializer):
    values = fields(prim)
    return decode(tuple(specializer.value(v) for v in values),
                  UnsupportedError)
  return specialized


def register(classes: dict[str, type]) -> None:
  """Registers the codecs of the classes among `classes` (the running
  release's table: stable name -> class) that this module stores."""
  codecs = {
      CUSTOM_ROOT: (_custom_root_fields, _encode_custom_root,
                    _decode_custom_root),
      ROOT_LINEAR_MAP: (_root_linear_map_fields, _encode_root_linear_map,
                        _decode_root_linear_map)}
  for name, (fields, encode, decode) in codecs.items():
    if name in classes:
      register_param_codec(classes[name], name=name, encode=encode,
                           decode=decode)
      specialize.register_specializer(
          value_type=classes[name], specialize=_specializer(fields, decode))
