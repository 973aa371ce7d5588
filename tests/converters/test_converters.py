"""Converters: jax.export and TensorFlow SavedModels compute what the
original JAX function computes, for loaded programs.

Tolerances: the converted artifact is compiled by XLA as one module, while
the reference runs the original function under `jax.jit` in this process;
for the same platform and jaxlib these agree to float32 rounding (rtol 1e-5,
atol 1e-5), not necessarily bit for bit (TF's XlaCallModule may compile with
other options).
"""

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
from jaxpr_io import converters
from jaxpr_io.compat import export as compat_export
from tests.support import models

CASES = {
    "cnn": models.cnn,
    "custom_rules": models.custom_rules,
    "transformer": models.transformer,
    "ode": models.ode_integrator,
    "linalg": models.linalg,
}
TOL = dict(rtol=1e-5, atol=1e-5)


def _loaded(fn, *args):
  return jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(fn, *args)))


def _close(actual, expected):
  for a, e in zip(jax.tree_util.tree_leaves(actual),
                  jax.tree_util.tree_leaves(expected)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(e), **TOL)


@pytest.mark.parametrize("name", sorted(CASES))
def test_exported_matches_original(name):
  fn, x = CASES[name]()
  prog = _loaded(fn, x)
  exported = converters.to_exported(prog)
  restored = jax.export.deserialize(exported.serialize())
  _close(restored.call(x), jax.jit(fn)(x))


def test_exported_symbolic_batch_and_platforms(tmp_path):
  fn, x = models.cnn()
  b, = jax.export.symbolic_shape("b")
  prog = _loaded(fn, jax.ShapeDtypeStruct((b, *x.shape[1:]), x.dtype))
  path = tmp_path / "cnn.exported"
  exported = converters.save_exported(prog, path, platforms=("cpu", "cuda"),
                                      vjp_order=1)
  assert exported.platforms == ("cpu", "cuda")
  assert "stablehlo" in (tmp_path / "cnn.exported.mlir").read_text()
  restored = jax.export.deserialize(path.read_bytes())
  assert restored.platforms == ("cpu", "cuda")
  assert str(restored.in_avals[0].shape[0]) == "b"
  for batch in (1, 5):
    xb = np.random.RandomState(batch).randn(batch, *x.shape[1:]).astype(
        np.float32)
    _close(restored.call(xb), jax.jit(fn)(xb))
    # The loaded program itself also runs at any batch size.
    _close(prog(xb), jax.jit(fn)(xb))
  # vjp_order=1 keeps a first-order gradient in the artifact.
  grad = jax.grad(lambda v: restored.call(v).sum())(x)
  _close(grad, jax.grad(lambda v: fn(v).sum())(x))


def test_unlowerable_program_names_the_cause():
  def f(x):
    return jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype),
                             x)
  closed = jax.make_jaxpr(f)(np.ones(3, np.float32))
  with pytest.raises(jaxpr_io.UnsupportedError, match="host_callbacks"):
    converters.to_exported(closed)


try:
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
except ImportError:  # the tests above need no TensorFlow
  tf = None
needs_tf = pytest.mark.skipif(
    tf is None, reason="needs TensorFlow: pip install -e '.[test-full]'")


def _serving(export_dir):
  return tf.saved_model.load(str(export_dir)).signatures["serving_default"]


def _temporaries(directory) -> list[str]:
  return sorted(n for n in os.listdir(directory) if ".jaxpr_io-" in n)


def test_save_exported_writes_both_files_or_neither(tmp_path, monkeypatch):
  path = tmp_path / "p.exported"
  path.write_bytes(b"old")
  (tmp_path / "p.exported.mlir").write_text("old")
  prog = _loaded(lambda x: x * 2, np.ones(3, np.float32))

  def fail(self):
    raise RuntimeError("no text")
  with monkeypatch.context() as m:
    m.setattr(jax.export.Exported, "mlir_module", fail)
    with pytest.raises(RuntimeError, match="no text"):
      converters.save_exported(prog, path)
  assert path.read_bytes() == b"old"
  assert (tmp_path / "p.exported.mlir").read_text() == "old"
  assert _temporaries(tmp_path) == []
  converters.save_exported(prog, path)
  restored = jax.export.deserialize(path.read_bytes())
  _close(restored.call(np.ones(3, np.float32)), np.full(3, 2, np.float32))
  assert "stablehlo" in (tmp_path / "p.exported.mlir").read_text()


# TensorFlow's XLA lacks jaxlib's LAPACK kernels, so the SavedModel linear
# algebra case uses the jnp.linalg functions that lower to plain HLO.
SAVED_MODEL_CASES = dict(CASES, linalg=models.linalg_hlo)


@needs_tf
@pytest.mark.parametrize("name", sorted(SAVED_MODEL_CASES))
def test_saved_model_matches_original(name, tmp_path):
  fn, x = SAVED_MODEL_CASES[name]()
  converters.to_saved_model(_loaded(fn, x), tmp_path / "sm")
  out = _serving(tmp_path / "sm")(arg0=tf.constant(x))
  assert list(out) == ["out0"]
  _close(out["out0"].numpy(), jax.jit(fn)(x))


def _stablehlo_versions(data: bytes) -> set[str]:
  """The target versions of the StableHLO portable artifacts in `data`
  (VHLO bytecode names its target as its producer, 'StableHLO_v1.13.7')."""
  return {v.decode() for v in re.findall(rb"StableHLO_v(\d+\.\d+\.\d+)", data)}


def _tf_stablehlo_version():
  """What TF's XlaCallModule reads (TF 2.21: 1.13.7)."""
  from tensorflow.compiler.mlir.stablehlo import stablehlo  # pylint: disable=g-import-not-at-top  # noqa: E501
  return stablehlo.get_current_version()


@needs_tf
def test_saved_model_symbolic_batch_and_signature(tmp_path):
  # The shape assertion of a symbolic batch is a custom call that JAX 0.11+
  # serializes (for StableHLO 1.18.0) as vhlo.custom_call_v2, which TF
  # 2.21 (StableHLO 1.13.7) cannot read: to_saved_model serializes for TF's
  # version.
  fn, x = models.transformer()
  b, = jax.export.symbolic_shape("b")
  prog = _loaded(fn, jax.ShapeDtypeStruct((b, x.shape[1]), x.dtype))
  converters.to_saved_model(prog, tmp_path / "sm")
  tf_version = _tf_stablehlo_version()
  expected = (tf_version if compat_export.is_older(
      tf_version, compat_export.default_target())
              else compat_export.default_target())
  assert _stablehlo_versions(
      (tmp_path / "sm" / "saved_model.pb").read_bytes()) == {expected}
  serving = _serving(tmp_path / "sm")
  (spec,) = serving.structured_input_signature[1].values()
  assert spec.name == "arg0" and spec.shape.as_list() == [None, x.shape[1]]
  for batch in (1, 3):
    tokens = np.random.RandomState(batch).randint(
        0, 64, (batch, x.shape[1])).astype(np.int32)
    _close(serving(arg0=tf.constant(tokens))["out0"].numpy(),
           jax.jit(fn)(tokens))
  # The shape assertion survived the downgrade: b >= 1 is checked.
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="Expected value >= 1 for dimension variable 'b'"):
    serving(arg0=tf.zeros((0, x.shape[1]), tf.int32))
  # Outside to_saved_model, jax.export serializes for JAX's own target.
  assert _stablehlo_versions(
      converters.to_exported(prog).mlir_module_serialized) == {
          compat_export.default_target()}


def _exp_with_accuracy(v):
  # result_accuracy needs StableHLO >= 1.9.0 (vhlo.exponential_v2).
  return jax.lax.exp(v, accuracy=jax.lax.Tolerance(atol=1e-5, rtol=1e-5,
                                                   ulps=2))


@needs_tf
def test_saved_model_refuses_what_tf_stablehlo_cannot_express(tmp_path,
                                                               monkeypatch):
  closed = jax.make_jaxpr(_exp_with_accuracy)(np.ones(3, np.float32))
  monkeypatch.setattr(
      "jaxpr_io.converters.saved_model._tf_stablehlo_version", lambda: "1.0.0")
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"TensorFlow .* StableHLO up to 1\.0\.0, .*"
                     r"'vhlo\.exponential_v2'.*to_exported"):
    converters.to_saved_model(closed, tmp_path / "sm")
  # The serialization target is restored after the failure.
  assert _stablehlo_versions(
      converters.to_exported(closed).mlir_module_serialized) == {
          compat_export.default_target()}
  # A TensorFlow older than anything this jaxlib writes is refused up front.
  monkeypatch.setattr(
      "jaxpr_io.converters.saved_model._tf_stablehlo_version", lambda: "0.1.0")
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"StableHLO 0\.1\.0, older than .* upgrade"):
    converters.to_saved_model(closed, tmp_path / "sm")
  assert not (tmp_path / "sm").exists()


@needs_tf
def test_saved_model_keeps_weights_out_of_the_graph(tmp_path):
  weights = np.random.RandomState(0).randn(25 * 2**20 // 4 * 4).astype(
      np.float32).reshape(-1, 1024)  # 100 MiB
  assert weights.nbytes == 100 * 2**20
  prog = _loaded(lambda x: weights @ x, np.ones(1024, np.float32))
  del weights
  converters.to_saved_model(prog, tmp_path / "sm")
  assert os.path.getsize(tmp_path / "sm" / "saved_model.pb") < 2**20
  var_bytes = sum(os.path.getsize(tmp_path / "sm" / "variables" / f)
                  for f in os.listdir(tmp_path / "sm" / "variables"))
  assert var_bytes >= 100 * 2**20


@needs_tf
def test_saved_model_replaces_a_saved_model_directory_only(tmp_path):
  x = np.ones(3, np.float32)
  other = tmp_path / "other"
  other.mkdir()
  (other / "notes.txt").write_text("mine")
  with pytest.raises(FileExistsError,
                     match=r"notes\.txt.*give a new or empty directory"):
    converters.to_saved_model(_loaded(lambda x: x * 2, x), other)
  assert os.listdir(other) == ["notes.txt"]
  sm = tmp_path / "models" / "m" / "1"  # parents are created
  converters.to_saved_model(_loaded(lambda x: x * 2, x), sm)
  converters.to_saved_model(_loaded(lambda x: x * 3, x), sm)
  _close(_serving(sm)(arg0=tf.constant(x))["out0"].numpy(), 3 * x)
  assert _temporaries(sm.parent) == []


@needs_tf
def test_saved_model_refuses_lapack_kernels(tmp_path):
  fn, x = models.linalg()
  with pytest.raises(jaxpr_io.UnsupportedError, match="lapack_.*to_exported"):
    converters.to_saved_model(_loaded(fn, x), tmp_path / "sm")
  assert not (tmp_path / "sm").exists()


@needs_tf
def test_saved_model_of_lapack_kernels_on_empty_matrices(tmp_path):
  # JAX's shape-polymorphism harnesses vmap_eigh and vmap_eig at 0 x 0:
  # TensorFlow never runs a kernel on no elements, and jax2tf's SavedModel
  # serves. 3 x 3 matrices are refused.
  b, = jax.export.symbolic_shape("b")
  fn = lambda x: jnp.linalg.eigh(x)[0]
  for n in (0, 3):
    prog = jaxpr_io.trace(fn, jax.ShapeDtypeStruct((b, n, n), np.complex64))
    if n:
      with pytest.raises(jaxpr_io.UnsupportedError, match="lapack_cheevd"):
        converters.to_saved_model(prog, tmp_path / "sm3")
      continue
    converters.to_saved_model(prog, tmp_path / "sm0")
    x = np.zeros((5, 0, 0), np.complex64)
    out = _serving(tmp_path / "sm0")(arg0=tf.constant(x))
    assert out["out0"].numpy().shape == (5, 0)
    np.testing.assert_array_equal(out["out0"].numpy(), jax.jit(fn)(x))


@needs_tf
def test_saved_model_with_gradient(tmp_path):
  w = np.random.RandomState(0).randn(4, 3).astype(np.float32)
  fn = lambda v: jnp.sum(jnp.tanh(v @ w) ** 2)  # noqa: E731
  x = np.random.RandomState(1).randn(2, 4).astype(np.float32)
  converters.to_saved_model(_loaded(fn, x), tmp_path / "sm",
                            with_gradient=True)
  loaded = tf.saved_model.load(str(tmp_path / "sm"))
  arg = tf.Variable(x)
  with tf.GradientTape() as tape:
    y = loaded.signatures["serving_default"](arg0=arg)["out0"]
  _close(tape.gradient(y, arg).numpy(), jax.grad(fn)(x))


@needs_tf
def test_saved_model_cli_runs_it(tmp_path):
  fn, x = models.cnn()
  converters.to_saved_model(_loaded(fn, x), tmp_path / "sm")
  np.save(tmp_path / "x.npy", x)
  cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
  subprocess.run(
      [cli, "run", "--dir", str(tmp_path / "sm"), "--tag_set", "serve",
       "--signature_def", "serving_default", "--inputs",
       f"arg0={tmp_path / 'x.npy'}", "--outdir", str(tmp_path / "out")],
      check=True, capture_output=True, timeout=300)
  _close(np.load(tmp_path / "out" / "out0.npy"), jax.jit(fn)(x))


@needs_tf
def test_a_program_on_several_devices_is_refused_before_saving(tmp_path):
  # A shard_map over 8 host devices: jax2tf serialized it and TensorFlow
  # failed at the first call ("No registered implementation for untyped
  # custom call to xla.sdy.GlobalToLocalShape"; found by the fuzzer).
  P = jax.sharding.PartitionSpec
  mesh = jax.make_mesh((8,), ("d",),
                       axis_types=(jax.sharding.AxisType.Auto,))
  fn = jax.shard_map(lambda b: b * 2 + jax.lax.psum(b, "d"), mesh=mesh,
                     in_specs=P("d"), out_specs=P("d"))
  x = np.arange(16, dtype=np.float32)
  prog = _loaded(fn, x)
  exported = converters.to_exported(prog)
  assert exported.nr_devices == 8
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"runs on 8 devices .* TensorFlow cannot execute"):
    converters.to_saved_model(prog, tmp_path / "sm")
  assert not os.listdir(tmp_path)
