"""Symbolic dimensions that ask JAX for more than their bytes (issue 38):
sums raised to powers, the same in a constraint, a shape whose size
multiplies sums out, equality constraints that define a variable in terms
of itself, and `max`es that JAX's decision procedure takes minutes over.

Each file is a real traced program with its dimension texts edited at the
protobuf level (tests/hostile/__init__.py). Each loads in a fresh process
under the address-space limit of tests/hostile/test_hostile_io.py, and must
fail with a `FormatError` that names the dimension or constraint and the
limit, within seconds and the memory budget of untrusted data; the benign
program loads. jaxpr_io/format/dim_cost.py and the decision budget of
jaxpr_io/compat/symbolic.py are what refuse them.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import pytest

import jaxpr_io
from jaxpr_io.format import dim_cost
from jaxpr_io.format import limits
from tests.hostile import craft
from tests.hostile.test_hostile_io import (assert_within, budget_mib,
                                           run_limited, write)

pytestmark = pytest.mark.once

_SUM8 = "b+c+d+e+f+g+h+i"
_OTHER = "c+d+e+f+g+h+i+k"


@functools.cache
def symbolic_file() -> bytes:
  """x: f32[b, 4] -> sum(x * 2) + x[0, 0], with the constraint b >= 2."""
  (b,) = jax.export.symbolic_shape("b", constraints=("b >= 2",))
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: jnp.sum(x * 2.0) + x[0, 0],
      jax.ShapeDtypeStruct((b, 4), jnp.float32)))


@functools.cache
def reshape_file() -> bytes:
  """x: f32[b, c, d, e, f, g] -> x.reshape(-1): check=True multiplies the
  six dimensions out."""
  dims = jax.export.symbolic_shape("b, c, d, e, f, g")
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: x.reshape(-1), jax.ShapeDtypeStruct(dims, jnp.float32)))


def _edited(data: bytes, dims: dict[str, str], constraints=None) -> bytes:
  """`data` with the string-table entries named in `dims` (the dimension
  texts) rewritten, and its constraints replaced if given."""
  def mutate(msg):
    for i, s in enumerate(msg.strings):
      if s in dims:
        msg.strings[i] = dims[s]
    if constraints is not None:
      msg.symbolic_constraints[:] = constraints
  return craft(data, mutate)


# (name, file, check, what the message must say)
def _cases():
  nested = "max(" * 16 + "a" + "".join(f", v{i})" for i in range(16))
  summed = "max(" + " + ".join(f"max(v{i}, w{i})" for i in range(8)) + ", a)"
  sums = {k: "+".join(f"{k}{j}" for j in range(10)) for k in "bcdefg"}
  return [
      ("power", _edited(symbolic_file(), {"b": f"max({_SUM8}, 0)^64"}),
       False, ["aval 0: symbolic dimension 'max(b+c", "monomials",
               f"limit of {dim_cost.MAX_DIM_WORK:,}"]),
      ("constraint", _edited(symbolic_file(), {}, [
          f"b >= max({_OTHER}, 0)^64"]),
       False, ["symbolic constraint 0 ", "monomials",
               f"limit of {dim_cost.MAX_DIM_WORK:,}"]),
      ("rewrite", _edited(symbolic_file(), {"b": "j^8"}, [
          f"j == {_OTHER}"]),
       False, ["symbolic dimension 'j^8'", "monomials"]),
      ("cycle", _edited(symbolic_file(), {}, [
          "e == g + 3", "g == e*f + g*c + 1"]),
       False, ["symbolic constraint 0 ", "in terms of itself"]),
      ("shape", _edited(reshape_file(), sums), True,
       ["a shape of the symbolic dimensions", "monomials",
        f"limit of {dim_cost.MAX_DIM_WORK:,}"]),
      ("nested max", _edited(symbolic_file(), {"b": nested}), False,
       ["symbolic dimension 'max(max(", "decision procedure",
        f"{limits.DECISION_STEPS:,} steps"]),
      ("summed max", _edited(symbolic_file(), {"b": summed}), False,
       ["symbolic dimension 'max(max(v0", "decision procedure"]),
  ]


_CHILD = """
    for spec in ARGS:
      name, path, check = spec.split("|")
      start = time.monotonic()
      e = expect_format_error(jaxpr_io.load, path, check=check == "check")
      print("CASE:", name, "|", round(time.monotonic() - start, 2), "|",
            " ".join(str(e).split()), flush=True)
    print("OK:", [str(d) for d in jaxpr_io.load(ARGS_OK, check=True)
                  .closed_jaxpr.in_avals[0].shape], flush=True)
"""


def test_symbolic_bombs_are_refused_before_jax_parses_them(tmp_path):
  cases = _cases()
  specs = []
  for name, data, check, _ in cases:
    assert len(data) < 2048, (name, len(data))  # a few hundred bytes each
    path = write(tmp_path / f"{name.replace(' ', '_')}.jaxpr", data)
    specs.append(f"{name}|{path}|{'check' if check else ''}")
  ok = write(tmp_path / "ok.jaxpr", symbolic_file())
  child = run_limited(_CHILD.replace("ARGS_OK", repr(ok)), *specs)
  results = {line.split(" | ")[0]: line.split(" | ")[1:]
             for line in child.lines("CASE:")}
  assert list(results) == [c[0] for c in cases], str(child)
  for name, _, _, parts in cases:
    seconds, message = results[name]
    for part in parts:
      assert part in message, (name, message)
    # One line, bounded: the error quotes at most the first 80 characters
    # of an expression.
    assert len(message) < 600, (name, message)
    assert float(seconds) < 10, (name, seconds)
  assert child.lines("OK:") == ["['b', '4']"], str(child)
  assert_within(child, budget_mib(max(len(c[1]) for c in cases)))


def test_a_trusted_load_lifts_the_decision_budget_only():
  """trusted=True lets JAX decide what takes it over the budget (10 nested
  maxes: about 135,000 steps, a few seconds); the expansion caps stay."""
  nested = "max(" * 10 + "a" + "".join(f", v{i})" for i in range(10))
  data = _edited(symbolic_file(), {"b": nested})
  with pytest.raises(jaxpr_io.FormatError, match="decision procedure"):
    jaxpr_io.loads(data)
  prog = jaxpr_io.loads(data, trusted=True)
  assert str(prog.closed_jaxpr.in_avals[0].shape[0]).startswith("max(")
  data = _edited(symbolic_file(), {"b": f"max({_SUM8}, 0)^64"})
  with pytest.raises(jaxpr_io.FormatError, match="monomials"):
    jaxpr_io.loads(data, trusted=True)
