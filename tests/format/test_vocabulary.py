"""The format's vocabulary across JAX releases (jaxpr_io/format/vocabulary.py).

* The table of params that hold open jaxprs agrees with JAX 0.10, where open
  and closed jaxprs are different types (on later releases they are one).
* Vocabulary values a reading release cannot express (a `jit` inline mode
  that JAX 0.10 lacks, a primitive it lacks) raise FormatError naming the
  primitive or param and both JAX releases.
* A JAX release newer than every adapter: `import jaxpr_io` warns, naming
  it, and known programs still round-trip.
"""

from __future__ import annotations

import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io.format import vocabulary
from jaxpr_io.compat import releases
from tests.support import programs
from tests.support import paths
from tests.hostile.test_bad_input import (eqn_by_primitive, message, mutated,
                                  param_named, set_params)

ROOT = paths.ROOT


def _jaxpr_slots(closed):
  """(primitive, param, 'open' | 'closed') of every jaxpr-valued param."""
  seen = set()

  def walk(j):
    j = compat.open_jaxpr(j) if compat.is_closed_jaxpr(j) else j
    for eqn in j.eqns:
      for key, value in eqn.params.items():
        for item in value if type(value) is tuple else (value,):
          if compat.is_jaxpr(item):
            kind = "closed" if compat.is_closed_jaxpr(item) else "open"
            seen.add((eqn.primitive.name, key, kind))
            walk(item)
  walk(closed)
  return seen


@pytest.mark.skipif(compat.MERGED_JAXPRS,
                    reason="open and closed jaxprs are one type here")
def test_open_jaxpr_table_matches_jax_0_10():
  slots = set()
  for fn, args, kwargs in programs.PROGRAMS.values():
    slots |= _jaxpr_slots(jax.make_jaxpr(fn)(*args, **kwargs))
  slots |= _jaxpr_slots(jax.make_jaxpr(
      lambda x: jax.checkpoint(jnp.sin)(x) + x.at[0].add(1.0))(np.ones(3)))
  assert slots, "no jaxpr-valued params were seen"
  for primitive, param, kind in slots:
    assert vocabulary.holds_open_jaxpr(primitive, param) == (kind == "open"), (
        primitive, param, kind)


def _jit_program() -> bytes:
  inner = jax.jit(lambda x: jnp.sin(x) * 2.0)
  return jaxpr_io.dumps(jaxpr_io.trace(lambda x: inner(x) + 1.0,
                                       np.ones(3, np.float32)))


def _with_inline(data: bytes, mode) -> bytes:
  def mutate(msg):
    param = param_named(msg, eqn_by_primitive(msg, "jit"), "inline")
    if type(mode) is bool:
      param.value.bool = mode
    else:
      param.value.str = len(msg.strings)
      msg.strings.append(mode)
  return mutated(data, mutate)


@pytest.mark.parametrize("mode", ["auto", "jax_late", False, True])
def test_inline_modes_every_release_has(mode):
  prog = jaxpr_io.loads(_with_inline(_jit_program(), mode), check=True)
  (eqn,) = [e for e in prog.closed_jaxpr.eqns if e.primitive.name == "jit"]
  late = mode in ("jax_late", True)
  if compat.MERGED_JAXPRS:
    assert eqn.params["inline"].value == ("jax_late" if late else "auto")
  else:
    assert eqn.params["inline"] is late
  x = np.arange(3, dtype=np.float32)
  np.testing.assert_array_equal(prog(x), jnp.sin(x) * 2.0 + 1.0)


@pytest.mark.parametrize("mode", ["xla_early", "xla_late", "jax_early"])
def test_inline_modes_only_newer_releases_have(mode):
  data = _with_inline(_jit_program(), mode)
  if compat.MERGED_JAXPRS:
    prog = jaxpr_io.loads(data, check=True)
    (eqn,) = [e for e in prog.closed_jaxpr.eqns if e.primitive.name == "jit"]
    assert eqn.params["inline"].value == mode
    return
  with pytest.raises(jaxpr_io.FormatError) as info:
    jaxpr_io.loads(data)
  message = str(info.value)
  assert f"jit param 'inline'={mode!r}" in message
  assert f"jax {jax.__version__}" in message
  assert "Load the file with the JAX release that wrote it" in message


def test_unknown_primitive_names_both_releases():
  data = _jit_program()

  def mutate(msg):
    eqn_by_primitive(msg, "sin").primitive = len(msg.strings)
    msg.strings.append("sin_from_the_future")
    msg.producer.jax_version = "9.9.9"
  with pytest.raises(jaxpr_io.FormatError) as info:
    jaxpr_io.loads(mutated(data, mutate))
  message = str(info.value)
  assert "'sin_from_the_future'" in message
  assert "written by jax 9.9.9" in message
  assert f"jax {jax.__version__}" in message


def test_scan_from_counts_alone():
  """A scan without `ft_in`/`ft_out` (as JAX 0.10 writes it) loads on every
  release and computes the same."""
  def f(c, xs):
    return jax.lax.scan(lambda c, x: (c * 0.5 + x, c - x), c, xs)
  args = (np.float32(1.5), np.arange(4, dtype=np.float32))
  data = jaxpr_io.dumps(jaxpr_io.trace(f, *args))

  def strip(msg):
    eqn = eqn_by_primitive(msg, "scan")
    params = msg.param_sets[eqn.param_set].params
    keep = [p for p in params
            if msg.strings[p.name] not in ("ft_in", "ft_out")]
    del params[:]
    params.extend(keep)
  prog = jaxpr_io.loads(mutated(data, strip), check=True)
  for actual, expected in zip(jax.tree_util.tree_leaves(prog(*args)),
                              jax.tree_util.tree_leaves(f(*args))):
    np.testing.assert_array_equal(actual, expected)
  grad = jax.grad(lambda c, xs: prog(c, xs)[1].sum())(*args)
  np.testing.assert_array_equal(
      grad, jax.grad(lambda c, xs: f(c, xs)[1].sum())(*args))
  if compat.MERGED_JAXPRS:  # rebuilt as lax.scan builds them: prints alike
    assert str(prog.closed_jaxpr) == str(jax.make_jaxpr(f)(*args))


def test_release_lines_have_adapters():
  expected = {"0.10.2": "jax_0_10", "0.11.0": "jax_0_11", "0.11.2": "jax_0_11",
              "0.12.0": "jax_0_12", "0.12.0.1": "jax_0_12",
              "0.13.0.dev20261201": "jax_0_12"}
  for text, name in expected.items():
    assert releases.adapter_name(text) == (name, text.startswith("0.13"))
  assert type(compat.ADAPTER).__module__.endswith(
      releases.adapter_name(jax.__version__)[0])
  with pytest.raises(ImportError, match="jaxpr_io supports jax"):
    releases.adapter_name("0.9.2")


@pytest.mark.skipif(
    releases.adapter_name(jax.__version__)[0]
    != releases.ADAPTERS[max(releases.ADAPTERS)],
    reason="a newer release gets the newest adapter, which this JAX lacks")
def test_newer_release_warns_and_round_trips():
  """With `jax.__version__` reading as a release newer than every adapter,
  `import jaxpr_io` warns, naming it, and a program still round-trips."""
  script = """
import warnings, jax
jax.__version__ = "0.99.0"
with warnings.catch_warnings(record=True) as caught:
  warnings.simplefilter("always")
  import jaxpr_io
  from jaxpr_io.compat import releases
newer = [w for w in caught if issubclass(w.category, releases.NewerJaxWarning)]
assert len(newer) == 1 and "jax 0.99.0 is newer" in str(newer[0].message), [
    str(w.message) for w in caught]
import numpy as np
f = lambda x: jax.lax.fori_loop(0, 3, lambda i, c: c * 2.0 + i, x)
prog = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(f, np.float32(1.0))))
assert float(prog(np.float32(1.0))) == float(f(np.float32(1.0)))
assert prog.producer["jax_version"] == "0.99.0"
print("ok")
"""
  result = subprocess.run([sys.executable, "-c", script], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
  assert result.returncode == 0, result.stderr[-3000:]
  assert result.stdout.strip().endswith("ok")


def _with_context(data: bytes, *, layout_mode=None, no_collectives=None):
  def mutate(msg):
    for ctx in msg.eqn_contexts:
      if layout_mode is not None:
        ctx.layout_mode = len(msg.strings) + 1
      if no_collectives is not None:
        for axis in sorted(no_collectives):
          ctx.no_collectives.frozenset.items.add().str = len(msg.strings)
          msg.strings.append(axis)
    if layout_mode is not None:
      msg.strings.append(layout_mode)
  return mutated(data, mutate)


def _contexts(prog):
  return [e.ctx for e in prog.closed_jaxpr.eqns]


def test_layout_mode_in_the_context():
  data = _with_context(_jit_program(), layout_mode="JAX")
  if not compat.MERGED_JAXPRS:  # 0.10 has no layout modes
    with pytest.raises(jaxpr_io.FormatError, match="'layout_mode'='JAX'"):
      jaxpr_io.loads(data)
    return
  # Not check=True: JAX 0.11's checker has no layout rule for `sin`.
  prog = jaxpr_io.loads(data)
  assert {c.cur_layout_mode.name for c in _contexts(prog)} == {"JAX"}
  again = jaxpr_io.loads(jaxpr_io.dumps(prog))  # the writer stores it too
  assert {c.cur_layout_mode.name for c in _contexts(again)} == {"JAX"}


def test_no_collectives_in_the_context():
  data = _with_context(_jit_program(), no_collectives={"x"})
  if "no_collectives" not in compat.new_eqn_context().__slots__:
    with pytest.raises(jaxpr_io.FormatError, match="no_collectives"):
      jaxpr_io.loads(data)
    return
  prog = jaxpr_io.loads(data, check=True)
  assert {c.no_collectives for c in _contexts(prog)} == {frozenset({"x"})}
  again = jaxpr_io.loads(jaxpr_io.dumps(prog))  # the writer stores it too
  assert {c.no_collectives for c in _contexts(again)} == {frozenset({"x"})}


def test_default_context_is_stored_as_zero():
  contexts = message(_jit_program()).eqn_contexts
  assert contexts and all(
      c.layout_mode == 0 and not c.HasField("no_collectives")
      for c in contexts)


def _with_is_stable(data: bytes, value: bool) -> bytes:
  """`top_k` given the param `is_stable` (added in JAX 0.11)."""
  def mutate(msg):
    eqn = eqn_by_primitive(msg, "top_k")
    params = [p for p in msg.param_sets[eqn.param_set].params
              if msg.strings[p.name] != "is_stable"]
    stable = type(params[0])()
    stable.name = len(msg.strings)
    msg.strings.append("is_stable")
    stable.value.bool = value
    set_params(msg, eqn, [*params, stable])
  return mutated(data, mutate)


@pytest.mark.parametrize("value", [True, False])
def test_optional_param_of_a_newer_release(value):
  x = np.array([3.0, 1.0, 4.0, 1.0, 5.0], np.float32)
  data = _with_is_stable(
      jaxpr_io.dumps(jaxpr_io.trace(lambda x: jax.lax.top_k(x, 2), x)), value)
  has_param = vocabulary.release_line(jax.__version__) >= (0, 11)
  if value is False and not has_param:
    with pytest.raises(jaxpr_io.FormatError,
                       match="top_k param 'is_stable'=False"):
      jaxpr_io.loads(data)
    return
  prog = jaxpr_io.loads(data, check=True)
  (eqn,) = prog.closed_jaxpr.eqns
  assert eqn.params.get("is_stable", True) is value
  for actual, expected in zip(prog(x), jax.lax.top_k(x, 2)):
    np.testing.assert_array_equal(actual, expected)


def test_optional_param_missing_from_an_older_file():
  """A file without an optional param, written by a release without it (as
  JAX 0.10 writes top_k), reads as its default on releases that have it."""
  x = np.array([3.0, 1.0, 4.0], np.float32)
  data = jaxpr_io.dumps(jaxpr_io.trace(lambda x: jax.lax.top_k(x, 1), x))

  def strip(msg):
    eqn = eqn_by_primitive(msg, "top_k")
    set_params(msg, eqn, [p for p in msg.param_sets[eqn.param_set].params
                          if msg.strings[p.name] != "is_stable"])
  def from_0_10(msg):
    strip(msg)
    msg.producer.jax_version = "0.10.2"
  (eqn,) = jaxpr_io.loads(mutated(data, from_0_10),
                          check=True).closed_jaxpr.eqns
  if vocabulary.release_line(jax.__version__) >= (0, 11):
    assert eqn.params["is_stable"] is True
  else:
    assert "is_stable" not in eqn.params
  # A writer that has the param but bound top_k without it (as JAX's own
  # tests do): read as written, so the program prints alike.
  (eqn,) = jaxpr_io.loads(mutated(data, strip)).closed_jaxpr.eqns
  assert "is_stable" not in eqn.params
