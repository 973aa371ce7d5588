"""Shared assertions: a program survives dumps -> loads exactly."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import compat
from tests.support import paths

# JAX prints Python callables in params (e.g. `reduce`'s `computation`) by
# their repr, which names the function; the file rebuilds an equivalent one.
_CALLABLE = re.compile(r"<function .*? at 0xX+>")


# A frozenset prints in iteration order, which follows the string hashes of
# the process (PYTHONHASHSEED) and the order of insertion, neither of which
# the program carries (e.g. remat policies' checkpoint names).
_FROZENSET = re.compile(r"frozenset\(\{([^{}()]*)\}\)")


def _sorted_frozenset(match) -> str:
  items = sorted(item.strip() for item in match.group(1).split(","))
  return "frozenset({" + ", ".join(items) + "})"


def normalized_text(closed) -> str:
  """The printed program; where JAX's own printer fails on it (some harnesses
  bind primitives without params that the printer expects), the error.
  Callables and frozensets are normalized (see above)."""
  try:
    text = str(closed)
  except Exception as e:  # pylint: disable=broad-except
    text = f"<JAX cannot print this program: {type(e).__name__}: {e}>"
  return _FROZENSET.sub(_sorted_frozenset, _CALLABLE.sub("<function>", text))


def _is_token(x) -> bool:
  try:
    return type(jax.typeof(x)) is compat.AbstractToken
  except TypeError:  # not a JAX value: compared by its bytes below
    return False


def bits(x) -> tuple:
  """A value's dtype, shape and raw bytes: equal iff bit-identical (tokens,
  which hold no data, are all alike)."""
  if _is_token(x):
    return ("token",)
  if compat.is_key_array(x):
    x = compat.key_data(x)
  x = np.asarray(x)
  return (str(x.dtype), x.shape, np.ascontiguousarray(x).tobytes())


def assert_bit_identical(actual, expected) -> None:
  actual_leaves = jax.tree_util.tree_leaves(actual)
  expected_leaves = jax.tree_util.tree_leaves(expected)
  assert len(actual_leaves) == len(expected_leaves)
  for i, (a, e) in enumerate(zip(actual_leaves, expected_leaves)):
    assert bits(a) == bits(e), f"output {i} differs:\n{a}\nvs\n{e}"


def assert_roundtrip(program, *, check: bool = True, as_user: bool = False):
  """dumps -> loads must print alike and re-dump to the same bytes.

  With `as_user`, the bytes are also loaded as a user loads a file they
  were given (`loads(data, check=True)`, untrusted), which must accept
  them; the check is then done there only, not twice. Returns the loaded
  (trusted) program.
  """
  data = jaxpr_io.dumps(program)
  original = (program if type(program) is compat.ClosedJaxpr
              else program.closed_jaxpr)
  expected_text = normalized_text(original)
  if check and expected_text.startswith("<JAX cannot print"):
    # check=True proves the program prints; JAX cannot print this one
    # (see normalized_text), so the check would rightly refuse it.
    check = False
  if as_user:
    jaxpr_io.loads(data, check=check)
  # Our own bytes: trusted, so every param comes back as written.
  loaded = jaxpr_io.loads(data, check=check and not as_user, trusted=True)
  assert normalized_text(loaded.closed_jaxpr) == expected_text
  assert jaxpr_io.dumps(loaded) == data, "re-dump changed the bytes"
  return loaded


def scalar(out):
  """The sum of every (non-key) output, as float32: a loss for grad."""
  return sum(jnp.sum(leaf.astype(jnp.float32))
             for leaf in jax.tree_util.tree_leaves(out)
             if not jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key))


def ones_like(tree):
  """Tangents of ones (float0 zeros for integer and key inputs)."""
  def one(a):
    dtype = jnp.asarray(a).dtype
    if jnp.issubdtype(dtype, jnp.inexact):
      return np.ones(np.shape(a), dtype)
    return np.zeros(np.shape(a), jax.dtypes.float0)
  return jax.tree_util.tree_map(one, tree)


def assert_same_outcome(transform, original, loaded, *args):
  """`transform(loaded)(*args)` is bit-identical to `transform(original)`,
  or fails with the same exception type."""
  try:
    expected = jax.jit(transform(original))(*args)
  except Exception as e:  # pylint: disable=broad-except
    with pytest.raises(type(e)):
      jax.jit(transform(loaded))(*args)
    return
  assert_bit_identical(jax.jit(transform(loaded))(*args), expected)


REPO = paths.ROOT


def run_fresh_python(code: str, *args: str, timeout: float = 300):
  """Runs `code` with `args` in a fresh Python process (this interpreter,
  the repository importable, the repository as its working directory) and
  returns its `subprocess.CompletedProcess`, output captured as text."""
  env = dict(os.environ, PYTHONPATH=REPO + os.pathsep +
             os.environ.get("PYTHONPATH", ""))
  return subprocess.run([sys.executable, "-c", code, *args], env=env,
                        capture_output=True, text=True, timeout=timeout,
                        check=False, cwd=REPO)
