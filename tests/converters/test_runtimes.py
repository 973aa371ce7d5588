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
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import converters
from jaxpr_io.converters import simplify
from jaxpr_io.tools import load as load_tool
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


# CI time: each program is traced, and converted to each runtime, once per
# module; the tests below share the artifacts.
@pytest.fixture(scope="module")
def programs():
  cache = {}

  def get(name):
    if name not in cache:
      cache[name] = PROGRAMS[name]()
    return cache[name]
  return get


@pytest.fixture(scope="module")
def artifacts(programs, tmp_path_factory):
  """artifacts(name, kind): the path of program `name` converted to
  `kind` ("onnx" or "tflite") and the converter's result, made once."""
  cache, out = {}, tmp_path_factory.mktemp("runtimes")

  def get(name, kind):
    if (name, kind) not in cache:
      prog = programs(name)[0]
      path = out / f"{name}.{kind}"
      write = converters.to_onnx if kind == "onnx" else converters.to_tflite
      cache[name, kind] = path, write(prog, path)
    return cache[name, kind]
  return get


def test_simplify_inlines_custom_rules_calls_and_debug(programs):
  _, fn, (xs,) = programs("relu_in_scan")

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
def test_onnx_matches_jax(name, programs, artifacts):
  prog, fn, inputs = programs(name)
  path, model = artifacts(name, "onnx")
  assert [i.name for i in model.graph.input] == [
      f"arg{i}" for i in range(len(prog.closed_jaxpr.in_avals))]
  for x in inputs:
    _close(converters.run_onnx(path, [x]), jax.jit(fn)(x))
  assert converters.verify_onnx(prog, path).ok


@needs_onnx
def test_onnx_symbolic_batch_is_a_dynamic_dimension(artifacts):
  _, model = artifacts("cnn_symbolic_batch", "onnx")
  (dims,) = [i.type.tensor_type.shape.dim for i in model.graph.input]
  assert dims[0].dim_param == "b" and not dims[0].HasField("dim_value")
  assert [d.dim_value for d in dims[1:]] == [16, 16, 3]


# ---------------------------------------------------------------- LiteRT
@needs_litert
@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_tflite_matches_jax(name, programs, artifacts):
  prog, fn, inputs = programs(name)
  path, _ = artifacts(name, "tflite")
  for x in inputs:
    _close(converters.run_tflite(path, [x]), jax.jit(fn)(x))
  assert converters.verify_tflite(prog, path).ok


# ------------------------------------------- the CLI: Equinox and Orbax
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


def _load_cli(capsys, *args):
  """jaxpr-load's main in this process (the console script calls it; a
  fresh process would import TensorFlow and jax2onnx again, seconds of CI
  time): (exit status, stdout, stderr)."""
  capsys.readouterr()
  status = load_tool.main([str(a) for a in args])
  out = capsys.readouterr()
  return status, out.out, out.err


@needs_onnx
@needs_litert
def test_cli_equinox_mlp_bound_from_orbax(tmp_path, capsys):
  import onnx  # pylint: disable=g-import-not-at-top
  predict, leaves, x = _equinox_mlp(tmp_path)
  expected = jax.jit(predict)(leaves, x)
  onnx_path, tflite_path = tmp_path / "mlp.onnx", tmp_path / "mlp.tflite"
  status, out, err = _load_cli(
      capsys, tmp_path / "predict.jaxpr", "--bind",
      f"0={tmp_path / 'ckpt' / '1' / 'params'}", "--to-onnx", onnx_path,
      "--to-tflite", tflite_path, "--run", tmp_path / "x.npz")
  assert status == 0, err
  for artifact, runtime in ((onnx_path, "onnxruntime"),
                            (tflite_path, "the LiteRT interpreter")):
    assert f"{artifact}: verified in {runtime}: largest difference" in out
  _close(converters.run_onnx(onnx_path, [x]), expected)
  _close(converters.run_tflite(tflite_path, [x]), expected)
  # The bound weights are in the artifacts (ONNX initializers): they take
  # x alone, at any batch size.
  model = onnx.load(onnx_path)
  assert [i.name for i in model.graph.input] == ["arg0"]
  sizes = sorted(int(np.prod(t.dims)) for t in model.graph.initializer)
  for leaf in leaves:
    assert leaf.size in sizes
  x7 = np.random.RandomState(7).randn(7, 5).astype(np.float32)
  _close(converters.run_onnx(onnx_path, [x7]), jax.jit(predict)(leaves, x7))
  _close(converters.run_tflite(tflite_path, [x7]),
         jax.jit(predict)(leaves, x7))
  # --no-verify writes without running.
  status, out, _ = _load_cli(
      capsys, tmp_path / "predict.jaxpr", "--bind",
      f"0={tmp_path / 'ckpt' / '1' / 'params'}", "--to-onnx",
      tmp_path / "again.onnx", "--no-verify")
  assert status == 0 and "verified" not in out
  assert (tmp_path / "again.onnx").stat().st_size > 0


# --------------------------------------------------------------- refusal
def _unconvertible(x):
  # platform_index (which platform the program runs on, for
  # lax.platform_dependent) has no ONNX operator nor a jax2onnx handler.
  return jnp.sin(x) + jax.lax.platform_dependent(x, cpu=jnp.cos,
                                                 default=jnp.tan)


@needs_onnx
def test_onnx_refuses_an_unconvertible_primitive_naming_it(tmp_path, capsys):
  x = np.ones(3, np.float32)
  prog = _loaded(jax.jit(_unconvertible), x)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"^equation 0 \(jit\) > 1: primitive "
                     r"platform_index has no ONNX conversion"):
    converters.to_onnx(prog, tmp_path / "bad.onnx")
  assert not (tmp_path / "bad.onnx").exists()
  jaxpr_io.save(tmp_path / "bad.jaxpr", prog)
  status, _, err = _load_cli(capsys, tmp_path / "bad.jaxpr", "--to-onnx",
                             tmp_path / "bad.onnx")
  assert status == 1
  # The error is one line, the last (warnings printed earlier in this
  # process's stderr may precede it).
  line = err.strip().splitlines()[-1]
  assert line.startswith(
      "jaxpr-load: error: UnsupportedError: equation 0 (jit) > 1: "
      "primitive platform_index has no ONNX conversion"), err
  assert "Traceback" not in err and not (tmp_path / "bad.onnx").exists()


@needs_litert
def test_tflite_refuses_complex_values_naming_the_equation(tmp_path):
  # TensorFlow's converter can crash the process on complex tensors
  # (segfault converting jnp.maximum of complex128): refused before it runs.
  x = (np.arange(3) + 1j).astype(np.complex64)
  prog = _loaded(lambda x: jnp.abs(jnp.maximum(x, x * 2)), x)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"^an input is complex64\[3\]: LiteRT has no "
                     "complex tensors"):
    converters.to_tflite(prog, tmp_path / "c.tflite")
  real = np.arange(3, dtype=np.float32)
  prog = _loaded(lambda r: jnp.real(jnp.fft.fft(r)), real)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"^equation \d+(.*)?: primitive \w+ works on "
                     r"complex64\[3\]"):
    converters.to_tflite(prog, tmp_path / "f.tflite")
  assert not (tmp_path / "c.tflite").exists()


def test_verify_compares_bfloat16_and_complex_as_numbers():
  # numpy does not count bfloat16 as inexact: NaN against NaN once counted
  # as a difference (every bfloat16 log of a negative number "differed").
  bf16 = jnp.bfloat16
  e = np.array([np.nan, 1.0, -np.inf], bf16)
  assert converters.verify.compare("r", [e], [e.copy()]).ok
  off = np.array([np.nan, 1.5, -np.inf], bf16)
  verdict = converters.verify.compare("r", [e], [off])
  assert not verdict.ok and verdict.max_abs_diff == 0.5
  assert "out0 differs at 1 of 3" in verdict.detail
  # A complex value is compared by both parts (a cast to float once
  # dropped the imaginary part).
  c = np.array([1 + 2j, np.nan + 0j], np.complex64)
  assert converters.verify.compare("r", [c], [c.copy()]).ok
  assert not converters.verify.compare(
      "r", [c], [np.array([1 + 3j, np.nan], np.complex64)]).ok


@needs_litert
def test_saved_model_and_tflite_refuse_prng_key_arrays(tmp_path):
  # TensorFlow has no dtype for typed keys: a one-line refusal, not
  # TensorFlow's TypeError from deep inside jax2tf.
  key = jax.random.key(0)
  prog = _loaded(lambda k: jax.random.normal(k, (3,)), key)
  for convert in (converters.to_saved_model, converters.to_tflite):
    with pytest.raises(jaxpr_io.UnsupportedError,
                       match=r"^input 0 is a PRNG key array \(key<fry>\)"):
      convert(prog, tmp_path / "k")
  weighted = _loaded(lambda x: x + jax.random.normal(key, (3,)),
                     np.zeros(3, np.float32))
  # The closed-over key is the program's weight.
  with pytest.raises(jaxpr_io.UnsupportedError, match=r"^weight 0 is a "):
    converters.to_saved_model(weighted, tmp_path / "w")
  assert not (tmp_path / "k").exists()


@needs_onnx
def test_a_dimension_jax2onnx_needs_constant_is_an_unsupported_error(
    tmp_path):
  # The fuzzer's symbolic seed (a pad of (a, c) to (a + 1, c)) with its
  # constraint `a >= c` replaced by a nest of min/max: jax2onnx compared
  # `a + 1` and raised InconclusiveDimensionOperation out of to_onnx
  # (fuzz case 6280), not the documented UnsupportedError.
  from tests import hostile as h  # pylint: disable=g-import-not-at-top
  from tests.fuzz import seeds  # pylint: disable=g-import-not-at-top
  fn, args, _ = seeds.symbolic_two_vars()
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, *args))

  def mutate(msg):
    msg.symbolic_constraints[0] = (
        "a >= min(min(max(min(min(max(min(c + c*2 + a*6, c), a), c), a), "
        "a), c), a)")
  prog = jaxpr_io.loads(h.craft(data, mutate), check=True)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"jax2onnx .* could not convert the program: "
                     r"InconclusiveDimensionOperation"):
    converters.to_onnx(prog, tmp_path / "m.onnx")
  assert not os.listdir(tmp_path)


def _outputs_of_every_kind(x):
  """Outputs that no operation of their own computes: an input, a literal
  (JAX keeps a constant output as a Literal outvar), and one value twice."""
  y = x * 2.0
  return x, jnp.float32(1.5), y, y, jnp.sin(x)


@needs_onnx
def test_onnx_outputs_that_are_inputs_literals_or_repeated(tmp_path):
  # Fuzz case 23199: an output edited to a literal became a model whose
  # output `out0` no node produced (its initializer kept jax2onnx's name),
  # which ONNX Runtime refused to load.
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  prog = _loaded(_outputs_of_every_kind, x)
  outvars = prog.closed_jaxpr.jaxpr.outvars
  assert type(outvars[1]).__name__ == "Literal", outvars
  converters.to_onnx(prog, tmp_path / "m.onnx")
  outs = converters.run_onnx(tmp_path / "m.onnx", [x])
  _close(outs, _outputs_of_every_kind(x))
  import onnx  # pylint: disable=g-import-not-at-top
  model = onnx.load(tmp_path / "m.onnx")
  assert [v.name for v in model.graph.input] == ["arg0"]
  assert [v.name for v in model.graph.output] == [f"out{i}" for i in range(5)]


@needs_litert
def test_tflite_outputs_that_are_inputs_literals_or_repeated(tmp_path):
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  prog = _loaded(_outputs_of_every_kind, x)
  converters.to_tflite(prog, tmp_path / "m.tflite")
  outs = converters.run_tflite(tmp_path / "m.tflite", [x])
  _close(outs, _outputs_of_every_kind(x))
