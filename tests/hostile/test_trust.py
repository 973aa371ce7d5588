"""The trust policy of `load` (jaxpr_io/safety/trust.py), on real programs.

tests/hostile/test_hostile.py crafts hostile files at the protobuf level and runs
them in subprocesses; these tests check the policy's pieces in-process: the
table of docs/trust-model.md, the format-string grammar, the FFI allowlist
and the dropped params, against programs traced here.
"""

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.safety import trust
from tests.support import paths


def test_docs_table_matches_the_code():
  assert paths.generated_block("docs/trust-model.md",
                               "trust-table") == trust.policy_table()


@pytest.mark.parametrize("fmt", [
    "x = {x}", "{} and {}", "{0} {1!r}", "{x:>8}", "{x:.3f}", "{x:+08.2e}",
    "{{literal}} {x}", "{x!s:^20}", "",
])
def test_plain_format_strings_pass(fmt):
  trust.check_format_string(fmt)


@pytest.mark.parametrize("fmt,problem", [
    ("{x.__class__}", "plain name"),
    ("{x[0]}", "plain name"),
    ("{x.__array__.__globals__[config].os.environ[SECRET]}", "plain name"),
    ("{x:>1000000000}", "width"),
    ("{x:.100f}", "width"),
    ("{x:{w}}", "format spec"),
    ("{x!z}", "conversion|does not parse"),
    ("{x", "does not parse"),
])
def test_hostile_format_strings_are_refused(fmt, problem):
  with pytest.raises(jaxpr_io.FormatError, match=problem):
    trust.check_format_string(fmt)


def _printing(fmt):
  return lambda x: (jax.debug.print(fmt, x=x), x * 2)[1]


def test_debug_print_with_attribute_access_needs_trust(capfd):
  prog = jaxpr_io.trace(_printing("{x.shape}"), jnp.arange(3.0))
  data = jaxpr_io.dumps(prog)
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"equation 0 \(debug_print\).*plain name"):
    jaxpr_io.loads(data)
  loaded = jaxpr_io.loads(data, trusted=True)
  jax.block_until_ready(loaded(jnp.arange(3.0)))
  jax.effects_barrier()
  assert "(3,)" in capfd.readouterr().out


def _donating(x, y):
  return jax.jit(lambda a, b: a + b, donate_argnums=(0, 1))(x, y)


def test_donation_is_dropped_unless_trusted():
  x, y = jnp.arange(4.0), jnp.ones(4)
  data = jaxpr_io.dumps(jaxpr_io.trace(_donating, x, y))
  with pytest.warns(jaxpr_io.DroppedParamWarning, match="donated_invars"):
    loaded = jaxpr_io.loads(data)
  (eqn,) = loaded.closed_jaxpr.jaxpr.eqns
  assert eqn.params["donated_invars"] == (False, False)
  np.testing.assert_array_equal(loaded(x, y), x + y)
  np.testing.assert_array_equal(x, jnp.arange(4.0))  # still readable
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    trusted = jaxpr_io.loads(data, trusted=True)
  (eqn,) = trusted.closed_jaxpr.jaxpr.eqns
  assert eqn.params["donated_invars"] == (True, True)


def _ffi(x):
  return jax.ffi.ffi_call("jaxpr_io_test_target",
                          jax.ShapeDtypeStruct(x.shape, x.dtype))(x, a=1)


def test_ffi_target_must_be_registered():
  data = jaxpr_io.dumps(jaxpr_io.trace(_ffi, jnp.ones(3)))
  with pytest.raises(jaxpr_io.FormatError,
                     match="register_ffi_target\\('jaxpr_io_test_target'\\)"):
    jaxpr_io.loads(data)
  assert jaxpr_io.loads(data, trusted=True).closed_jaxpr.jaxpr.eqns
  seen = []
  def refuse_big(attributes):
    seen.append(attributes)
    if attributes["a"] > 0:
      raise ValueError("a must be <= 0")
  jaxpr_io.register_ffi_target("jaxpr_io_test_target",
                               validate_attributes=refuse_big)
  try:
    with pytest.raises(jaxpr_io.FormatError, match="a must be <= 0"):
      jaxpr_io.loads(data)
    assert seen == [{"a": 1}]
    with pytest.raises(ValueError, match="already registered"):
      jaxpr_io.register_ffi_target("jaxpr_io_test_target")
  finally:
    del trust.FFI_TARGETS.by_name["jaxpr_io_test_target"]
    del trust.FFI_TARGETS.by_key["jaxpr_io_test_target"]
