"""The fuzzer's transform stages: a program that passed `check=True` must
survive `jax.grad`, `jax.vmap` and `jax.jvp` tracing (issue 28), wherever
its primitives support the transform.

Each stage traces (`jax.make_jaxpr`, nothing is compiled or run) a function
of the program's flat inputs, on the inputs its call was made with
(worker.make_call_args):

  grad  the gradient of the sum of the real parts of every inexact output,
        with respect to every real floating input (skipped when there is
        none of either)
  jvp   the forward-mode derivative along ones, over the same inputs
  vmap  the program mapped over a new leading axis of size 2 of every input

An error whose message says that a primitive has no rule for the
transform, or that the transform does not apply to what the program does
(`TRANSFORM_OWN`), is the program's own, as NaNs are its own numerics:
"unsupported" in the result's `transforms`, counted, not a failure. So is
any error of a transform that the case's unmutated seed cannot do either
(the campaign's baseline run records which: a Pallas kernel's `jvp` raises
a bare AssertionError inside JAX, as the original function's does;
tests/fuzz/test_fuzz.py checks that each seed transforms as its original
function does). Any other error is a failure `post-check-<stage>`.

Each stage also checks the types of what it traced (issue 38): a program
that passed `check=True` must not make a transform return a value of a
type it does not declare. `grad` returns one cotangent per primal, of the
primal's type; `jvp` returns the program's outputs at their declared types
(`jax.eval_shape` of the program at the same inputs) and tangents of the
matching tangent types; `vmap` returns the declared outputs with the new
axis in front. A mismatch raises `UndeclaredType`, a failure.
"""

from __future__ import annotations

import re

_INPUTS_WITH_FLOATS = "no-float-inputs"
_OUTPUTS_WITH_FLOATS = "no-float-outputs"

# What JAX says when a primitive or a program feature does not support a
# transform: these are the program's own limits, not jaxpr_io's.
TRANSFORM_OWN = re.compile("|".join([
    r"[Dd]ifferentiation rule for '[^']+' not implemented",
    r"[Bb]atching rule for '[^']+' not implemented",
    r"[Tt]ranspose rule \(for reverse-mode differentiation\) for '[^']+' "
    r"not implemented",
    r"JVP rule for '?[^' ]+'? not implemented",
    r"cannot be autodifferentiated",
    r"can't differentiate",
    r"Linearization failed to produce known values",
    r"vmap is only supported for the pure_callback primitive when",
    r"[Rr]everse-mode differentiation does not work for lax\.while_loop",
    r"not (reverse-mode |forward-mode )?differentiable",
    r"[Ee]ffects not supported in",
    r"Cannot vmap",
    r"vmap_method",
    r"pure_callback.*vmap",
    r"io_callback.*(vmap|batch)",
    r"ordered effects",
    r"can't apply forward-mode autodiff \(jvp\) to a custom_vjp function",
    r"[Cc]allbacks? do(es)? not support (JVP|transpos|batching|vmap)",
    # JAX's reverse mode does not take values in host (or `any`) memory (a
    # program JAX traces with such an input fails grad the same way).
    r"[Ee]xpected cotangent type \w+<(host|any)>",
    r"expected \w+<(host|any)>\[",
    # JAX's memory-space rule lets a scalar of another memory space meet an
    # array when it traces, but vmap makes the scalar an array (a function
    # JAX traces itself with such a scalar fails vmap the same way).
    r"memory_space of all inputs passed to `\w+` must be the same",
]))


class UndeclaredType(AssertionError):
  """A transform of an accepted program returned a value of a type the
  program does not declare."""


def _types(avals) -> list[tuple]:
  return [(tuple(a.shape), str(a.dtype)) for a in avals]


def _expect(stage: str, got, want) -> None:
  got, want = _types(got), _types(want)
  if got != want:
    raise UndeclaredType(f"{stage} returned {got}, the program declares "
                         f"{want}")


def _tangent(aval):
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  dtype = aval.dtype
  if not jnp.issubdtype(dtype, jnp.inexact):
    dtype = jax.dtypes.float0
  return jax.ShapeDtypeStruct(aval.shape, dtype)


def own_limit(exc: BaseException) -> bool:
  """Whether `exc` says the program (a primitive of it) does not support
  the transform: NotImplementedError, or a message in `TRANSFORM_OWN`,
  anywhere in the exception's chain."""
  seen = set()
  while exc is not None and id(exc) not in seen:
    seen.add(id(exc))
    if isinstance(exc, NotImplementedError):
      return True
    if TRANSFORM_OWN.search(str(exc)):
      return True
    exc = exc.__cause__ or exc.__context__
  return False


def _flat(prog, args, kwargs):
  import jax  # pylint: disable=import-outside-toplevel
  leaves, tree = jax.tree_util.tree_flatten((args, kwargs))

  def f(*flat):
    a, k = jax.tree_util.tree_unflatten(tree, flat)
    return jax.tree_util.tree_leaves(prog(*a, **k))
  return f, leaves


def _is_real_float(x) -> bool:
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  dtype = getattr(x, "dtype", None)
  try:
    return dtype is not None and jnp.issubdtype(dtype, jnp.floating)
  except TypeError:
    return False


def _differentiable(prog, args, kwargs):
  """(g, primals): g of the real floating inputs only (the others fixed),
  returning the program's inexact outputs; or a str: why not."""
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  f, leaves = _flat(prog, args, kwargs)
  idx = [i for i, x in enumerate(leaves) if _is_real_float(x)]
  if not idx:
    return _INPUTS_WITH_FLOATS
  if not any(jnp.issubdtype(a.dtype, jnp.inexact)
             for a in prog.out_avals if hasattr(a, "dtype")):
    return _OUTPUTS_WITH_FLOATS

  def g(*diff):
    full = list(leaves)
    for i, d in zip(idx, diff):
      full[i] = d
    return [o for o in f(*full) if jnp.issubdtype(o.dtype, jnp.inexact)]
  return g, [leaves[i] for i in idx]


def trace_grad(prog, args, kwargs) -> str | None:
  """Traces jax.grad of the program; returns why it was skipped, or None."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  made = _differentiable(prog, args, kwargs)
  if isinstance(made, str):
    return made
  g, primals = made

  def loss(*diff):
    return sum(jnp.sum(jnp.real(o)).astype(jnp.float32) for o in g(*diff))
  traced = jax.make_jaxpr(jax.grad(loss, argnums=tuple(range(len(primals)))))(
      *primals)
  _expect("grad", traced.out_avals, [jax.typeof(p) for p in primals])
  return None


def trace_jvp(prog, args, kwargs) -> str | None:
  """Traces jax.jvp of the program; returns why it was skipped, or None."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  made = _differentiable(prog, args, kwargs)
  if isinstance(made, str):
    return made
  g, primals = made

  def pushforward(*p):
    return jax.jvp(g, tuple(p), tuple(jnp.ones_like(x) for x in p))
  traced = jax.make_jaxpr(pushforward)(*primals)
  declared = jax.tree_util.tree_leaves(jax.eval_shape(g, *primals))
  _expect("jvp", traced.out_avals,
          declared + [_tangent(a) for a in declared])
  return None


def trace_vmap(prog, args, kwargs) -> str | None:
  """Traces jax.vmap of the program over a new axis of size 2."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  f, leaves = _flat(prog, args, kwargs)
  if not leaves:
    return "no-inputs"
  batched = [jnp.stack([x, x]) for x in leaves]
  traced = jax.make_jaxpr(jax.vmap(f))(*batched)
  declared = jax.tree_util.tree_leaves(jax.eval_shape(f, *leaves))
  _expect("vmap", traced.out_avals,
          [jax.ShapeDtypeStruct((2, *a.shape), a.dtype) for a in declared])
  return None


STAGES = {"grad": trace_grad, "vmap": trace_vmap, "jvp": trace_jvp}
