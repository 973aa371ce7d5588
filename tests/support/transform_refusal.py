"""`check=True` refuses an equation whose params a transformation rule of
its primitive cannot be called with (jaxpr_io/safety/shape_rules.py): a
param the rule lacks (`conj` bound with `_input_dtype`) or one it requires
and the equation lacks (`mul_p.bind(x, y)` without `out_dtype`, as JAX's own
harnesses bind it). Such a program runs, and JAX's own transformation of it
fails: the tests that load JAX's programs (the harness round trip, the
exchange between releases) load it with `check=False` and confirm that
failure here, with JAX's own transformation of the program as the
reference."""

from __future__ import annotations

import re

import jax
import numpy as np

_REFUSAL = re.compile(r"param '(\w+)' is (?:not one that|missing, and) "
                      r"this JAX release's (\w+) rule")


def refused(error: BaseException) -> tuple[str, str] | None:
  """(param, rule role) when `error` is check=True's refusal of a
  transformation rule's params, else None."""
  m = _REFUSAL.search(str(error))
  return None if m is None else (m.group(1), m.group(2))


def transform_error(fun, args, role: str) -> BaseException | None:
  """What JAX's `role` transformation ("JVP", "transpose", "batching") of
  `fun` at `args` raises, or None when it succeeds."""
  try:
    if role == "transpose":
      out, pullback = jax.vjp(fun, *args)
      pullback(jax.tree_util.tree_map(jax.numpy.ones_like, out))
    elif role == "JVP":
      jax.jvp(fun, tuple(args), tuple(
          np.ones(np.shape(a), np.result_type(a)) for a in args))
    else:
      jax.vmap(fun)(*[np.stack([a, a]) for a in args])
  except Exception as e:  # pylint: disable=broad-except
    return e
  return None


def assert_transform_fails(fun, args, role: str, param: str) -> None:
  """JAX's `role` transformation of `fun` raises TypeError naming
  `param`, as check=True said it would."""
  error = transform_error(fun, args, role)
  if not (isinstance(error, TypeError) and param in str(error)):
    raise AssertionError(
        f"check=True refused param {param!r} for the {role} rule, but JAX's "
        f"own {role} transformation of the program gave "
        f"{type(error).__name__}: {str(error)[:300]}")
