"""ONNX Runtime and LiteRT: loaded programs converted by `converters.to_onnx`
(jax2onnx) and `converters.to_tflite` (SavedModel + TensorFlow's LiteRT
converter) compute, in onnxruntime and in the LiteRT interpreter, what the
original JAX function computes under `jax.jit`.

Tolerance: another runtime's float32 kernels (ONNX Runtime's MLAS, LiteRT's
XNNPACK) round differently from XLA's, so results agree to float32
accuracy, not bit for bit: rtol 1e-4, atol 1e-4 (`converters.verify`).

These tests skip where jax2onnx, onnxruntime, TensorFlow or ai-edge-litert
is missing, except under JAXPR_IO_REQUIRE_RUNTIMES=1 (.ci/run sets it after
installing the `test-full` extra), where a missing package fails them.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import converters
from jaxpr_io.converters import simplify
from tests.support import models

REQUIRED = bool(os.environ.get("JAXPR_IO_REQUIRE_RUNTIMES"))
TOL = dict(rtol=1e-4, atol=1e-4)


def _needs(*modules):
  missing = [m for m in modules if importlib.util.find_spec(m) is None]
  return pytest.mark.skipif(
      bool(missing) and not REQUIRED,
      reason=f"needs {', '.join(missing)}: pip install -e '.[test-full]'")


needs_onnx = _needs("jax2onnx", "onnx", "onnxruntime")
needs_litert = _needs("tensorflow", "ai_edge_litert")


def _loaded(fn, *args):
  return jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(fn, *args)))


def _close(actual, expected):
  actual, expected = list(actual), jax.tree_util.tree_leaves(expected)
  assert len(actual) == len(expected)
  for a, e in zip(actual, expected):
    np.testing.assert_allclose(np.asarray(a), np.asarray(e), **TOL)


# ------------------------------------------------------------ the programs
def _cnn_symbolic():
  fn, x = models.cnn()
  b, = jax.export.symbolic_shape("b")
  prog = _loaded(fn, jax.ShapeDtypeStruct((b, *x.shape[1:]), x.dtype))
  rng = np.random.RandomState(0)
  inputs = [rng.randn(n, *x.shape[1:]).astype(np.float32) for n in (1, 3)]
  return prog, fn, inputs


def _transformer():
  fn, tokens = models.transformer()
  return _loaded(fn, tokens), fn, [tokens]


def _relu_scan():
  w = np.random.RandomState(1).randn(4, 4).astype(np.float32)

  def fn(xs):
    def body(carry, x):
      h = jax.nn.relu(carry @ w + x)   # relu is a custom_jvp
      return h, jax.nn.relu(x - h)
    return jax.lax.scan(body, jnp.zeros(4, jnp.float32), xs)
  xs = np.random.RandomState(2).randn(5, 4).astype(np.float32)
  return _loaded(fn, xs), fn, [xs]


PROGRAMS = {"cnn_symbolic_batch": _cnn_symbolic, "transformer": _transformer,
            "relu_in_scan": _relu_scan}


def test_simplify_inlines_custom_rules_calls_and_debug():
  prog, fn, (xs,) = _relu_scan()

  def noisy(xs):
    jax.debug.print("xs {}", xs)
    return jax.jit(fn)(xs)
  prog = _loaded(noisy, xs)
  names = {e.primitive.name for _, e in simplify.walk(prog.closed_jaxpr)}
  assert "scan" in names and "max" in names
  assert not names & {"custom_jvp_call", "jit", "pjit", "debug_print",
                      "debug_callback"}
  closed = simplify.for_inference(prog)
  printed = str(closed)
  for name in ("custom_jvp_call", "debug", "jit["):
    assert name not in printed
  _close(jax.jit(jaxpr_io.compat.jaxpr_as_fun(closed))(xs), fn(xs))


# ------------------------------------------------------------------ ONNX
@needs_onnx
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_onnx_matches_jax(name, tmp_path):
  prog, fn, inputs = PROGRAMS[name]()
  path = tmp_path / f"{name}.onnx"
  model = converters.to_onnx(prog, path)
  assert [i.name for i in model.graph.input] == [
      f"arg{i}" for i in range(len(prog.closed_jaxpr.in_avals))]
  for x in inputs:
    _close(converters.run_onnx(path, [x]), jax.jit(fn)(x))
  assert converters.verify_onnx(prog, path).ok


@needs_onnx
def test_onnx_symbolic_batch_is_a_dynamic_dimension(tmp_path):
  prog, _, _ = _cnn_symbolic()
  model = converters.to_onnx(prog, tmp_path / "cnn.onnx")
  (dims,) = [i.type.tensor_type.shape.dim for i in model.graph.input]
  assert dims[0].dim_param == "b" and not dims[0].HasField("dim_value")
  assert [d.dim_value for d in dims[1:]] == [16, 16, 3]


@needs_onnx
def test_onnx_weights_are_initializers(tmp_path):
  fn, x = models.custom_rules()
  model = converters.to_onnx(_loaded(fn, x), tmp_path / "mlp.onnx")
  sizes = sorted(int(np.prod(t.dims)) for t in model.graph.initializer)
  assert 6 * 16 in sizes and 16 * 3 in sizes
  assert [i.name for i in model.graph.input] == ["arg0"]


# ---------------------------------------------------------------- LiteRT
@needs_litert
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_tflite_matches_jax(name, tmp_path):
  prog, fn, inputs = PROGRAMS[name]()
  path = tmp_path / f"{name}.tflite"
  converters.to_tflite(prog, path)
  for x in inputs:
    _close(converters.run_tflite(path, [x]), jax.jit(fn)(x))
  assert converters.verify_tflite(prog, path).ok


# ------------------------------------------- the CLI: Equinox and Orbax
BIN = os.path.dirname(sys.executable)
LOAD = os.path.join(BIN, "jaxpr-load")


def _equinox_mlp(tmp_path):
  """predict(leaves, x) of an Equinox MLP whose parameters are `leaves`,
  saved to predict.jaxpr, and the leaves in an Orbax checkpoint."""
  import equinox as eqx  # pylint: disable=g-import-not-at-top
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  mlp = eqx.nn.MLP(5, 3, 16, 2, activation=jax.nn.relu,
                   key=jax.random.key(0))
  params, static = eqx.partition(mlp, eqx.is_array)
  leaves, treedef = jax.tree_util.tree_flatten(params)
  leaves = [np.asarray(l) for l in leaves]

  def predict(leaves, x):
    model = eqx.combine(jax.tree_util.tree_unflatten(treedef, leaves),
                        static)
    return jax.vmap(model)(x)
  b, = jax.export.symbolic_shape("b")
  jaxpr_io.save(tmp_path / "predict.jaxpr", jaxpr_io.trace(
      predict, leaves, jax.ShapeDtypeStruct((b, 5), jnp.float32)))
  with ocp.CheckpointManager(tmp_path / "ckpt") as mngr:
    mngr.save(1, args=ocp.args.Composite(
        params=ocp.args.StandardSave(leaves)))
    mngr.wait_until_finished()
  x = np.random.RandomState(3).randn(4, 5).astype(np.float32)
  np.savez(tmp_path / "x.npz", arg0=x)
  return predict, leaves, x


def _load_cli(*args, cwd):
  return subprocess.run([LOAD, *args], capture_output=True, text=True,
                        timeout=600, cwd=cwd)


@needs_onnx
@needs_litert
def test_cli_equinox_mlp_bound_from_orbax(tmp_path):
  predict, leaves, x = _equinox_mlp(tmp_path)
  expected = jax.jit(predict)(leaves, x)
  proc = _load_cli("predict.jaxpr", "--bind", "0=ckpt/1/params",
                   "--to-onnx", "mlp.onnx", "--to-tflite", "mlp.tflite",
                   "--run", "x.npz", cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr
  for artifact, runtime in (("mlp.onnx", "onnxruntime"),
                            ("mlp.tflite", "the LiteRT interpreter")):
    assert f"{artifact}: verified in {runtime}: largest difference" in (
        proc.stdout)
  _close(converters.run_onnx(tmp_path / "mlp.onnx", [x]), expected)
  _close(converters.run_tflite(tmp_path / "mlp.tflite", [x]), expected)
  # The bound weights are in the artifacts: they take x alone.
  x7 = np.random.RandomState(7).randn(7, 5).astype(np.float32)
  _close(converters.run_onnx(tmp_path / "mlp.onnx", [x7]),
         jax.jit(predict)(leaves, x7))
  _close(converters.run_tflite(tmp_path / "mlp.tflite", [x7]),
         jax.jit(predict)(leaves, x7))
  # --no-verify writes without running.
  proc = _load_cli("predict.jaxpr", "--bind", "0=ckpt/1/params",
                   "--to-onnx", "again.onnx", "--no-verify", cwd=tmp_path)
  assert proc.returncode == 0 and "verified" not in proc.stdout


# --------------------------------------------------------------- refusal
def _unconvertible(x):
  # platform_index (which platform the program runs on, for
  # lax.platform_dependent) has no ONNX operator nor a jax2onnx handler.
  return jnp.sin(x) + jax.lax.platform_dependent(x, cpu=jnp.cos,
                                                 default=jnp.tan)


@needs_onnx
def test_onnx_refuses_an_unconvertible_primitive_naming_it(tmp_path):
  x = np.ones(3, np.float32)
  prog = _loaded(jax.jit(_unconvertible), x)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"^equation 0 \(jit\) > 1: primitive "
                     r"platform_index has no ONNX conversion"):
    converters.to_onnx(prog, tmp_path / "bad.onnx")
  assert not (tmp_path / "bad.onnx").exists()
  jaxpr_io.save(tmp_path / "bad.jaxpr", prog)
  proc = _load_cli("bad.jaxpr", "--to-onnx", "bad.onnx", cwd=tmp_path)
  assert proc.returncode == 1
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "jaxpr-load: error: UnsupportedError: equation 0 (jit) > 1: "
      "primitive platform_index has no ONNX conversion"), proc.stderr
  assert "Traceback" not in proc.stderr
