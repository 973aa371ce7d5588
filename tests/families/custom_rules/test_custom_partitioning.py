"""`jax.experimental.custom_partitioning` round-trips (issue 12), its rules
taken from the object the loading process registered
(`jaxpr_io.register_custom_partitioning`, jaxpr_io/families/custom_rules/partitioning.py).

The programs are the JAX documentation's FFT example (Shardy's
`sharding_rule`, the default partitioner) and an elementwise function with
a static argument under GSPMD (`infer_sharding_from_operands`), traced at
arrays sharded over the 8 host CPU devices of tests/conftest.py. The loaded
program must print like the original, re-dump to the same bytes, compute
bit-identical results under jit, and lower through the user's `partition`
(called again in the loading process: the compiled module holds its local
FFT, without the all-gather XLA would otherwise insert).
"""

from __future__ import annotations

import contextlib
import functools
import textwrap

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental.custom_partitioning import custom_partitioning
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

import jaxpr_io
from jaxpr_io.families.custom_rules import partitioning as cp_codecs
from jaxpr_io.codec import registry
from jaxpr_io.safety import validate
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome, run_fresh_python)

if jax.device_count() < 8:
  pytest.skip("needs 8 devices (tests/conftest.py forces 8 host CPU devices "
              "unless JAX was initialized before it ran)",
              allow_module_level=True)

FFT_NAME = "tests.families.custom_rules.test_custom_partitioning.fft"
SCALED_NAME = "tests.families.custom_rules.test_custom_partitioning.scaled_sin"

# Calls of each object's `partition`, in this process.
PARTITION_CALLS = {"fft": 0, "scaled_sin": 0}


# --------------------------------------------- the JAX docs' FFT example
@custom_partitioning
def fft(x):
  return jnp.fft.fft(x)


def _batch_only(sharding, shape):
  """The operand's sharding on every axis but the last (the FFT's)."""
  rank = len(shape.shape)
  kept = min(len(sharding.spec), rank - 1)
  names = tuple(sharding.spec[:kept]) + (None,) * (rank - kept)
  return NamedSharding(sharding.mesh, P(*names))


def _fft_partition(mesh, arg_shapes, result_shape):
  del result_shape
  PARTITION_CALLS["fft"] += 1
  sharding = _batch_only(arg_shapes[0].sharding, arg_shapes[0])
  return mesh, jnp.fft.fft, sharding, (sharding,)


def _fft_infer(mesh, arg_shapes, result_shape):
  del mesh, result_shape
  return _batch_only(arg_shapes[0].sharding, arg_shapes[0])


fft.def_partition(infer_sharding_from_operands=_fft_infer,
                  partition=_fft_partition, sharding_rule="...i -> ...i")


# ------------------------- an elementwise function with a static argument
@functools.partial(custom_partitioning, static_argnums=(1,))
def scaled_sin(x, scale):
  return jnp.sin(x) * scale


def _scaled_partition(scale, mesh, arg_shapes, result_shape):
  del result_shape
  PARTITION_CALLS["scaled_sin"] += 1
  sharding = arg_shapes[0].sharding
  return mesh, lambda x: jnp.sin(x) * scale, sharding, (sharding,)


def _scaled_infer(scale, mesh, arg_shapes, result_shape):
  del scale, mesh, result_shape
  return arg_shapes[0].sharding


scaled_sin.def_partition(infer_sharding_from_operands=_scaled_infer,
                         partition=_scaled_partition,
                         sharding_rule="i j -> i j")


def register_both():
  """Registers the two objects once per process (idempotent)."""
  for obj, name in ((fft, FFT_NAME), (scaled_sin, SCALED_NAME)):
    if obj not in cp_codecs.REGISTERED.by_key:
      jaxpr_io.register_custom_partitioning(obj, name=name)


@pytest.fixture(scope="module")
def mesh():
  # As in JAX's docs: a mesh of Auto axes, whose shardings XLA propagates.
  return Mesh(np.array(jax.devices()[:8]), ("i",))


def _sharded(mesh, spec, dtype):
  x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) / 7
  return jax.device_put(jnp.asarray(x, dtype), NamedSharding(mesh, spec))


def _on_rows(mesh, fn):
  """`fn` under jit with its input and output sharded by rows. (Traced at
  unsharded arrays, as tests/families/test_sharding.py does: the shardings are the
  jit equation's params.)"""
  rows = NamedSharding(mesh, P("i", None))
  return jax.jit(fn, in_shardings=rows, out_shardings=rows)


def _unsharded(dtype):
  x = np.arange(64 * 16, dtype=np.float32).reshape(64, 16) / 7
  return jnp.asarray(x, dtype)


@contextlib.contextmanager
def _gspmd():
  """The GSPMD partitioner: JAX binds `infer_sharding_from_operands`
  instead of the Shardy rule."""
  saved = jax.config.jax_use_shardy_partitioner
  jax.config.update("jax_use_shardy_partitioner", False)
  try:
    yield
  finally:
    jax.config.update("jax_use_shardy_partitioner", saved)


def _cp_params(program):
  (eqn,) = [e for j in validate.walk_jaxprs(program.closed_jaxpr.jaxpr)
            for e in j.eqns if e.primitive.name == "custom_partitioning"]
  return eqn.params


def _run_through_partition(fn, x, key):
  """(jit(fn)(x), its compiled module's text), checking that compiling it
  called the partition rule of `key` in this process."""
  before = PARTITION_CALLS[key]
  out = jax.jit(fn)(x)  # the first call at x: compiled here
  assert PARTITION_CALLS[key] > before, "the user's partition did not run"
  return out, jax.jit(fn).lower(x).compile().as_text()


def test_fft_round_trips_and_lowers_through_the_registered_partition(mesh):
  register_both()
  x = _sharded(mesh, P("i", None), jnp.complex64)
  f = _on_rows(mesh, fft)
  prog = jaxpr_io.trace(f, _unsharded(jnp.complex64))
  loaded = assert_roundtrip(prog)
  params = _cp_params(loaded)
  assert params["partition"] is _fft_partition
  assert params["sharding_rule"] is fft.sharding_rule
  assert params["infer_sharding_from_operands"] is None  # Shardy binds none
  out, text = _run_through_partition(loaded, x, "fft")
  expected, original_text = _run_through_partition(f, x, "fft")
  assert_bit_identical(out, expected)
  # Each device runs the FFT on its own 8 rows: no all-gather.
  for module in (text, original_text):
    assert "c64[8,16]{1,0} fft(" in module and "all-gather" not in module


def test_static_args_and_gspmd_callbacks_round_trip(mesh):
  register_both()
  x = _sharded(mesh, P("i", None), jnp.float32)
  f = _on_rows(mesh, lambda v: scaled_sin(v, 2.5))
  with _gspmd():
    prog = jaxpr_io.trace(f, _unsharded(jnp.float32))
    params = _cp_params(prog)
    assert params["static_args"] == (2.5,)
    assert params["infer_sharding_from_operands"] is _scaled_infer
    assert params["sharding_rule"] is None
    loaded = assert_roundtrip(prog)
    assert _cp_params(loaded)["infer_sharding_from_operands"] is (
        _scaled_infer)
    out, text = _run_through_partition(loaded, x, "scaled_sin")
    assert_bit_identical(out, f(x))
  assert "f32[8,16]" in text and "all-gather" not in text


def test_the_stored_file_names_the_object_not_its_code(mesh):
  register_both()
  x = _sharded(mesh, P("i", None), jnp.complex64)
  data = jaxpr_io.dumps(jaxpr_io.trace(_on_rows(mesh, fft), x))
  assert FFT_NAME.encode() in data
  assert b"_fft_partition" not in data and b"_fft_infer" not in data


def test_grad_vmap_and_jvp_fail_as_the_originals_do(mesh):
  """custom_partitioning has no JVP or batching rule in JAX: the loaded
  program fails with the same exception type."""
  register_both()
  x = _sharded(mesh, P("i", None), jnp.float32)
  f = lambda v: scaled_sin(v, 2.5)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(
      jaxpr_io.trace(f, _unsharded(jnp.float32))))
  assert_same_outcome(jax.grad, lambda v: f(v).sum(),
                      lambda v: loaded(v).sum(), x)
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([x, x]))
  assert_same_outcome(lambda g, v: jax.jvp(g, (v,), (v,)), f, loaded, x)
  with pytest.raises(NotImplementedError):
    jax.grad(lambda v: f(v).sum())(x)


# ------------------------------------------------------------- refusals
def test_an_unregistered_object_is_refused_at_dumps_naming_the_equation():
  unregistered = custom_partitioning(jnp.sin)
  unregistered.def_partition(partition=_fft_partition,
                             sharding_rule="i -> i")
  prog = jaxpr_io.trace(unregistered, jnp.ones(8, jnp.float32))
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"\(custom_partitioning\), param 'partition'.*"
                           r"register_custom_partitioning\(obj, name="):
    jaxpr_io.dumps(prog)


class _Scale:
  """A static argument that is an object of the user's, not plain data."""

  def __rmul__(self, other):
    return other * 2.5


def test_non_data_static_args_are_refused_naming_the_param():
  register_both()
  prog = jaxpr_io.trace(lambda v: scaled_sin(v, _Scale()),
                        _unsharded(jnp.float32))
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"\(custom_partitioning\), param 'static_args'"):
    jaxpr_io.dumps(prog)


def test_a_name_this_process_did_not_register_is_a_format_error(
    mesh, monkeypatch):
  register_both()
  x = _sharded(mesh, P("i", None), jnp.complex64)
  data = jaxpr_io.dumps(jaxpr_io.trace(fft, x))
  monkeypatch.setattr(cp_codecs.REGISTERED, "by_name", {})
  with pytest.raises(jaxpr_io.FormatError,
                     match=rf"param 'partition'.*'{FFT_NAME}'.*not "
                           r"registered.*register_custom_partitioning"):
    jaxpr_io.loads(data)


def test_a_missing_rule_on_the_registered_object_is_a_format_error(
    monkeypatch):
  """A file whose GSPMD equation needs `infer_sharding_from_operands`,
  loaded where the object registered under its name lacks it."""
  register_both()
  decode = registry.EQN_PARAM_CODECS[
      ("custom_partitioning", "infer_sharding_from_operands")].decode
  assert decode(FFT_NAME, {}) is _fft_infer
  assert decode(None, {}) is None
  monkeypatch.setattr(fft, "infer_sharding_from_operands", None)
  with pytest.raises(jaxpr_io.FormatError,
                     match="has no infer_sharding_from_operands"):
    decode(FFT_NAME, {})
  for bad in (3, b"x", (FFT_NAME,)):
    with pytest.raises(jaxpr_io.FormatError, match="None or a registered"):
      decode(bad, {})


def test_registration_errors_name_the_earlier_registration():
  register_both()
  with pytest.raises(ValueError, match=rf"already registered under the "
                                       rf"name '{FFT_NAME}'"):
    jaxpr_io.register_custom_partitioning(fft, name="another.name")
  other = custom_partitioning(jnp.cos)
  other.def_partition(partition=_fft_partition, sharding_rule="i -> i")
  with pytest.raises(ValueError, match=rf"name '{FFT_NAME}' is already "
                                       "registered for"):
    jaxpr_io.register_custom_partitioning(other, name=FFT_NAME)
  with pytest.raises(ValueError, match="call its def_partition first"):
    jaxpr_io.register_custom_partitioning(custom_partitioning(jnp.cos),
                                          name="no.partition")
  with pytest.raises(TypeError, match="custom_partitioning object, got "
                                      "function"):
    jaxpr_io.register_custom_partitioning(_fft_partition, name="a.function")
  with pytest.raises(ValueError, match="non-empty string name"):
    jaxpr_io.register_custom_partitioning(other, name="")


# ------------------------------------------------------------ subprocess
_CHILD = textwrap.dedent("""
    import os, sys
    os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    import jax, jax.numpy as jnp, numpy as np
    from jax.sharding import NamedSharding, PartitionSpec as P
    import jaxpr_io
    from tests.families.custom_rules import test_custom_partitioning as t
    path = sys.argv[1]
    try:
      jaxpr_io.load(path)
      print("ERROR: loaded without the object registered")
    except jaxpr_io.FormatError as e:
      print("FORMAT-ERROR:", e)
    t.register_both()
    program = jaxpr_io.load(path)
    mesh = jax.sharding.Mesh(np.array(jax.devices()[:8]), ("i",))
    x = t._sharded(mesh, P("i", None), jnp.complex64)
    out = np.asarray(jax.jit(program)(x))
    print("PARTITION-CALLS:", t.PARTITION_CALLS["fft"])
    print("OUT:", out.tobytes().hex(), flush=True)
""")


def test_a_fresh_process_that_registers_the_object_loads_it(mesh, tmp_path):
  register_both()
  x = _sharded(mesh, P("i", None), jnp.complex64)
  f = _on_rows(mesh, fft)
  path = str(tmp_path / "fft.jaxpr")
  jaxpr_io.save(path, jaxpr_io.trace(f, _unsharded(jnp.complex64)))
  result = run_fresh_python(_CHILD, path, timeout=300)
  assert result.returncode == 0, result.stderr
  lines = result.stdout.splitlines()
  [error] = [line for line in lines if line.startswith("FORMAT-ERROR:")]
  assert f"'{FFT_NAME}'" in error and "not registered" in error
  # The loading process's own partition rule lowered the program.
  assert "PARTITION-CALLS: 1" in lines
  assert f"OUT: {np.asarray(f(x)).tobytes().hex()}" in lines
