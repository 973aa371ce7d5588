"""JAX 0.10's mutable hijax types: `Box` and `Log` (format version 8).

jax._src.hijax of JAX 0.10 (and 0.11.0) defines `BoxTy` and `LogTy`, whose
variables carry quasi-dynamic data (`core.Var.initial_qdd`/`final_qdd`):
what a box holds at the start and at the end of a jaxpr. JAX 0.11.1 and
later have neither the types nor the `Var` slots; there `SUPPORTED` is
False and every name here but `SUPPORTED` and `RELEASE_WITH_BOXES` is None.
"""

from __future__ import annotations

from jax._src import core
from jax._src import hijax

# The release to name when a file with boxes cannot be loaded here: the
# one the format's boxes were written from and are tested under.
RELEASE_WITH_BOXES = "0.10.2"

BoxTy = getattr(hijax, "BoxTy", None)
LogTy = getattr(hijax, "LogTy", None)
BoxTypeState = getattr(hijax, "BoxTypeState", None)
Box = getattr(hijax, "Box", None)
Log = getattr(hijax, "Log", None)
SUPPORTED = (None not in (BoxTy, LogTy, BoxTypeState, Box, Log)
             and "initial_qdd" in getattr(core.Var, "__slots__", ()))

# The primitives that make, read and write boxes and logs, by name.
PRIMITIVES = ({p.name: p for p in (hijax.new_box_p, hijax.box_get_p,
                                   hijax.box_set_p, hijax.new_log_p,
                                   hijax.log_extend_p)}
              if SUPPORTED else {})


def var_qdds(var) -> tuple:
  """(initial_qdd, final_qdd) of a variable; (None, None) where JAX's `Var`
  has no such slots."""
  return (getattr(var, "initial_qdd", None), getattr(var, "final_qdd", None))


def set_var_qdds(var, initial, final) -> None:
  """Sets a (freshly built) variable's quasi-dynamic data."""
  var.initial_qdd = initial
  var.final_qdd = final


def new_box_value(state):
  """A `Box` holding zeros of the types and structure of `state` (a
  `BoxTypeState`): an argument with which a program that takes a box can
  be lowered and compiled."""
  import jax.numpy as jnp  # pylint: disable=g-import-not-at-top
  from jax import tree_util  # pylint: disable=g-import-not-at-top
  leaves = [jnp.zeros(a.shape, a.dtype) for a in state.leaf_avals]
  return Box._new(tree_util.tree_unflatten(state.treedef, leaves))  # pylint: disable=protected-access


def new_log_value():
  """An empty `Log`."""
  return Log._new()  # pylint: disable=protected-access


def current_state(value):
  """(its type, its quasi-dynamic data) of a `Box` or `Log` passed to a
  program, or of a tracer of one (what JAX's jit compares with the jaxpr's
  `initial_qdd`); None for any other value."""
  if not SUPPORTED:
    return None
  if type(value) is Box:
    return BoxTy, value.cur_qdd()
  if type(value) is Log:
    return LogTy, value.cur_qdd()
  if isinstance(value, core.Tracer) and type(value.aval) in (BoxTy, LogTy):
    return type(value.aval), core.cur_qdd(value)
  return None


def is_weakly_typed(x) -> bool:
  from jax._src import dtypes  # pylint: disable=g-import-not-at-top
  return dtypes.is_weakly_typed(x)


def with_weak_type(x, aval):
  """`x` (of `aval`'s dtype) as a value of `aval`'s weak type."""
  from jax._src.lax import lax  # pylint: disable=g-import-not-at-top
  return lax._convert_element_type(x, aval.dtype, aval.weak_type)  # pylint: disable=protected-access
