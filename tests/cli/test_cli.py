"""The console scripts, run as subprocesses over every option and error."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jaxpr_io
from tests.support.cli import BIN, DUMP, LOAD
from tests.support.cli import run as _run

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once


MODEL = textwrap.dedent("""
    import jax.numpy as jnp
    import numpy as np

    W = np.arange(128, dtype=np.float32).reshape(4, 32) / 100

    def predict(x):
      return jnp.tanh(x @ W)

    def make():
      params = {"w": W, "b": np.ones(32, np.float32)}
      def apply(params, x, *, scale):
        return {"y": (x @ params["w"] + params["b"]) * scale}
      return apply, (params, np.ones((2, 4), np.float32)), {"scale": 2.0}

    def broken():
      return 42

    def dense(params, x):
      return jnp.tanh(x @ params["dense"]["w"] + params["dense"]["b"])

    def make_dense():
      params = {"dense": {"w": np.zeros((4, 3), np.float32),
                          "b": np.zeros(3, np.float32)}}
      return dense, (params, np.zeros((5, 4), np.float32))
""")



@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
  path = tmp_path_factory.mktemp("cli")
  (path / "model.py").write_text(MODEL)
  return path


@pytest.fixture(scope="module")
def predict_file(workdir):
  out = workdir / "predict.jaxpr"
  proc = _run(DUMP, f"{workdir}/model.py:predict", "--args", "f32[b,4]",
              "-o", str(out), "--text", "--metadata", "run=7", "who=cli")
  assert "tanh" in proc.stdout          # --text
  assert "tracing" in proc.stderr       # progress
  return out


def test_help_documents_everything():
  dump_help = _run(DUMP, "--help").stdout
  for word in ("TARGET", "--args", "-o", "--text", "--metadata", "f32[8,784]",
               "(fn, args)"):
    assert word in dump_help
  load_help = _run(LOAD, "--help").stdout
  for word in ("--check", "--text", "--run", "--out", "--to-exported",
               "--to-saved-model", "--platforms", "--html", "arg0", "out0"):
    assert word in load_help


def test_load_html_page(predict_file, workdir):
  """--html writes the viewer page holding the file (its reading is tested
  in tests/viewer/test_viewer.py and tests/viewer/test_viewer_browser.py)."""
  import base64  # pylint: disable=g-import-not-at-top
  out = workdir / "predict.html"
  proc = _run(LOAD, str(predict_file), "--html", str(out))
  assert f"wrote {out}" in proc.stdout
  assert base64.b64encode(predict_file.read_bytes()).decode() in \
      out.read_text()
  bad = workdir / "bad.jaxpr"
  bad.write_bytes(b"\x89JAXPR\r\n" + bytes(100))
  proc = _run(LOAD, str(bad), "--html", str(workdir / "bad.html"), ok=False)
  assert proc.returncode == 1
  assert "header checksum" in proc.stderr
  assert len(proc.stderr.strip().splitlines()) <= 2
  assert not (workdir / "bad.html").exists()


def test_dump_function_with_specs_and_summary(predict_file):
  prog = jaxpr_io.load(predict_file)
  assert prog.metadata == {"run": "7", "who": "cli"}
  assert str(prog.in_avals[0].shape[0]) == "b"
  summary = _run(LOAD, str(predict_file)).stdout
  for text in (f"format version: {jaxpr_io.FORMAT_VERSION}", "jax 0.", "arg0: args[0]: float32[b,4]",
               "out0: out: float32[b,32]", "tanh: 1", "constants: 1, 512 bytes",
               "run: 7"):
    assert text in summary, text


def test_dump_factory_default_output_and_module_target(workdir):
  env = dict(os.environ, PYTHONPATH=str(workdir))
  proc = subprocess.run([DUMP, "model:make"], capture_output=True, text=True,
                        cwd=workdir, env=env, timeout=300)
  assert proc.returncode == 0, proc.stderr
  prog = jaxpr_io.load(workdir / "make.jaxpr")
  summary = _run(LOAD, str(workdir / "make.jaxpr")).stdout
  assert "arg0: args[0]['b']" in summary and "kwargs['scale']" in summary
  out = prog({"w": np.ones((4, 32), np.float32),
              "b": np.zeros(32, np.float32)},
             np.ones((2, 4), np.float32), scale=2.0)
  np.testing.assert_array_equal(out["y"], np.full((2, 32), 8.0))


def test_python_m_is_the_same(workdir, predict_file):
  proc = _run(sys.executable, "-m", "jaxpr_io", "load", str(predict_file))
  assert "arg0: args[0]: float32[b,4]" in proc.stdout
  _run(sys.executable, "-m", "jaxpr_io", "dump",
       f"{workdir}/model.py:predict", "--args", "f32[3,4]", "-o",
       str(workdir / "p3.jaxpr"))
  assert jaxpr_io.load(workdir / "p3.jaxpr").in_avals[0].shape == (3, 4)


def test_check_and_text(predict_file):
  proc = _run(LOAD, str(predict_file), "--check")
  assert "OK" in proc.stdout
  assert "tanh" in _run(LOAD, str(predict_file), "--text").stdout


def test_run_with_and_without_out(workdir, predict_file):
  x = np.random.RandomState(0).randn(5, 4).astype(np.float32)
  np.savez(workdir / "in.npz", arg0=x)
  proc = _run(LOAD, str(predict_file), "--run", str(workdir / "in.npz"))
  assert "out0: out: float32[5, 32]" in proc.stdout
  _run(LOAD, str(predict_file), "--run", str(workdir / "in.npz"), "--out",
       str(workdir / "out.npz"))
  expected = np.tanh(x @ (np.arange(128, dtype=np.float32).reshape(4, 32) / 100))
  np.testing.assert_allclose(np.load(workdir / "out.npz")["out0"], expected,
                             rtol=1e-6)


def test_converters_from_the_cli(workdir, predict_file):
  out = workdir / "predict.exported"
  _run(LOAD, str(predict_file), "--to-exported", str(out), "--platforms",
       "cpu,cuda")
  import jax  # pylint: disable=g-import-not-at-top
  exported = jax.export.deserialize(out.read_bytes())
  assert exported.platforms == ("cpu", "cuda")
  assert (workdir / "predict.exported.mlir").exists()
  pytest.importorskip("tensorflow")
  _run(LOAD, str(predict_file), "--to-saved-model", str(workdir / "sm"))
  assert (workdir / "sm" / "saved_model.pb").exists()


@pytest.mark.parametrize("argv,status,message", [
    ([DUMP, "nowhere.py:f", "--args", "f32[2]"], 2, "no such file"),
    ([DUMP, "model.py", "--args", "f32[2]"], 2, "bad target"),
    ([DUMP, "model.py:missing", "--args", "f32[2]"], 2, "no attribute"),
    ([DUMP, "model.py:predict", "--args", "float[2]"], 2, "bad argument spec"),
    ([DUMP, "model.py:broken"], 2, "must return (fn, args)"),
    ([DUMP, "model.py:predict", "--metadata", "novalue"], 2, "KEY=VALUE"),
    ([LOAD, "missing.jaxpr"], 2, "No such file"),
    ([LOAD, "model.py"], 1, "not a jaxpr_io file"),
])
def test_errors_are_one_line(workdir, argv, status, message):
  proc = _run(*argv, ok=False, cwd=workdir)
  assert proc.returncode == status, proc.stderr
  errors = [l for l in proc.stderr.splitlines() if "error" in l]
  assert len(errors) == 1 and message in errors[0], proc.stderr
  assert "Traceback" not in proc.stderr


def test_corrupt_file_and_check_exit_status(workdir, predict_file):
  data = bytearray(predict_file.read_bytes())
  data[-5] ^= 0xFF  # inside the constant's data
  bad = workdir / "bad.jaxpr"
  bad.write_bytes(bytes(data))
  proc = _run(LOAD, str(bad), "--check", ok=False)
  assert proc.returncode == 1 and "checksum" in proc.stderr


def test_unknown_primitive_and_wrong_input_shape(workdir, predict_file):
  from jaxpr_io.format import _proto as pb
  from jaxpr_io.format import container
  c = container.Container(predict_file.read_bytes())
  msg = pb.Program.FromString(c.program)
  msg.strings[list(msg.strings).index("tanh")] = "no_such_op"
  layout = container.DataLayout()
  layout.add(bytes(c.data))
  (workdir / "unknown.jaxpr").write_bytes(container.to_bytes(
      msg.SerializeToString(deterministic=True), layout))
  proc = _run(LOAD, str(workdir / "unknown.jaxpr"), ok=False)
  assert proc.returncode == 1 and "no_such_op" in proc.stderr
  np.savez(workdir / "wrong.npz", arg0=np.ones((5, 7), np.float32))
  proc = _run(LOAD, str(predict_file), "--run", str(workdir / "wrong.npz"),
              ok=False)
  assert proc.returncode == 2 and "arg0" in proc.stderr
  proc = _run(LOAD, str(predict_file), "--run", str(workdir / "wrong.npz"),
              "--debug", ok=False)
  assert "Traceback" in proc.stderr


def test_trusted_keeps_what_an_untrusted_load_drops(tmp_path):
  import jax  # pylint: disable=import-outside-toplevel
  donating = lambda x: jax.jit(lambda a: a * 2, donate_argnums=0)(x)
  path = tmp_path / "donating.jaxpr"
  jaxpr_io.save(path, jaxpr_io.trace(donating, np.ones(3, np.float32)))
  untrusted = _run(LOAD, str(path), "--text")
  assert "donated_invars" not in untrusted.stdout  # the default: not printed
  assert "DroppedParamWarning" in untrusted.stderr
  assert "donated_invars" in untrusted.stderr
  trusted = _run(LOAD, str(path), "--text", "--trusted")
  assert "donated_invars=(True,)" in trusted.stdout
  assert "DroppedParamWarning" not in trusted.stderr


# ------------------------------------------------------------ --bind
PARAMS = {"dense": {"w": np.random.RandomState(3).randn(4, 3).astype(
    np.float32), "b": np.random.RandomState(4).randn(3).astype(np.float32)}}
X = np.random.RandomState(5).randn(5, 4).astype(np.float32)


def _predict(params, x):  # what model.py's dense computes, in numpy
  return np.tanh(x @ params["dense"]["w"] + params["dense"]["b"])


@pytest.fixture(scope="module")
def bind_dir(workdir):
  """predict.jaxpr of predict(params, x), its params in an Orbax checkpoint
  (ckpt/1/state:params) and in an .npz keyed as the summary prints, and an
  input x.npz."""
  path = workdir / "bind"
  path.mkdir()
  _run(DUMP, f"{workdir}/model.py:make_dense", "-o",
       str(path / "predict.jaxpr"))
  summary = _run(LOAD, str(path / "predict.jaxpr")).stdout
  assert "arg0: args[0]['dense']['b']: float32[3]" in summary
  np.savez(path / "params.npz", **{
      "args[0]['dense']['b']": PARAMS["dense"]["b"],
      "args[0]['dense']['w']": PARAMS["dense"]["w"]})
  np.savez(path / "x.npz", arg0=X)
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  with ocp.CheckpointManager(path / "ckpt") as mngr:
    mngr.save(1, args=ocp.args.Composite(state=ocp.args.StandardSave(
        {"params": PARAMS, "step": np.int32(1)})))
    mngr.wait_until_finished()
  return path


SOURCES = {"npz": "params.npz", "orbax": "ckpt/1/state:params"}


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_bind_and_run(bind_dir, source):
  proc = _run(LOAD, "predict.jaxpr", "--bind", f"0={SOURCES[source]}",
              "--run", "x.npz", "--out", f"out_{source}.npz", cwd=bind_dir)
  assert "wrote 1 outputs" in proc.stdout
  np.testing.assert_allclose(
      np.load(bind_dir / f"out_{source}.npz")["out0"], _predict(PARAMS, X),
      rtol=1e-6, atol=1e-6)
  # Without an action: the summary of the bound program (x alone).
  summary = _run(LOAD, "predict.jaxpr", "--bind", f"0={SOURCES[source]}",
                 cwd=bind_dir).stdout
  assert "arg0: args[0]: float32[5,4]" in summary and "arg1" not in summary
  assert "constants: 2, 60 bytes" in summary


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_bind_and_write_the_bound_program(bind_dir, source):
  out = bind_dir / f"bound_{source}.jaxpr"
  _run(LOAD, "predict.jaxpr", "--bind", f"0={SOURCES[source]}", "-o",
       str(out), cwd=bind_dir)
  bound = jaxpr_io.load(out, check=True)
  assert [a.shape for a in bound.in_avals] == [(5, 4)]
  np.testing.assert_allclose(bound(X), _predict(PARAMS, X), rtol=1e-6,
                             atol=1e-6)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_bind_to_exported(bind_dir, source):
  out = bind_dir / f"bound_{source}.exported"
  _run(LOAD, "predict.jaxpr", "--bind", f"0={SOURCES[source]}",
       "--to-exported", str(out), "--platforms", "cpu", cwd=bind_dir)
  import jax  # pylint: disable=g-import-not-at-top
  exported = jax.export.deserialize(out.read_bytes())
  assert [a.shape for a in exported.in_avals] == [(5, 4)]  # weights baked in
  np.testing.assert_allclose(exported.call(X), _predict(PARAMS, X),
                             rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_bind_to_saved_model_serves_the_data_input_only(bind_dir, source):
  tf = pytest.importorskip("tensorflow")
  sm = bind_dir / f"sm_{source}"
  _run(LOAD, "predict.jaxpr", "--bind", f"0={SOURCES[source]}",
       "--to-saved-model", str(sm), cwd=bind_dir)
  serve = tf.saved_model.load(str(sm)).signatures["serving_default"]
  _, specs = serve.structured_input_signature
  assert list(specs) == ["arg0"] and specs["arg0"].shape == (5, 4)
  # The weights are variables (under variables/), not graph constants.
  assert (sm / "variables" / "variables.index").exists()
  graph = (sm / "saved_model.pb").read_bytes()
  assert PARAMS["dense"]["w"].tobytes() not in graph
  np.save(bind_dir / "x.npy", X)
  cli = os.path.join(BIN, "saved_model_cli")
  _run(cli, "run", "--dir", str(sm), "--tag_set", "serve",
       "--signature_def", "serving_default", "--inputs",
       f"arg0={bind_dir / 'x.npy'}", "--outdir", str(bind_dir / f"o_{source}"))
  np.testing.assert_allclose(np.load(bind_dir / f"o_{source}" / "out0.npy"),
                             _predict(PARAMS, X), rtol=1e-5, atol=1e-5)


_NO_TF = ("import sys; sys.modules['tensorflow'] = None; "
          "from jaxpr_io.tools.load import main; sys.exit(main())")
_NO_FLATBUFFERS = ("import sys; sys.modules['flatbuffers'] = None; "
                   "from jaxpr_io.tools.load import main; sys.exit(main())")


@pytest.fixture(scope="module")
def error_dir(bind_dir):
  (bind_dir / "syntax.py").write_text("import numpy as np\nx = (\n")
  (bind_dir / "badimport.py").write_text(
      "import numpy as np\nimport no_such_package_xyz\n")
  (bind_dir / "raises.py").write_text(
      "def make():\n  return {}['missing']\n")
  np.save(bind_dir / "x.npy", X)
  np.savez(bind_dir / "wrong.npz", **{
      "['dense']['b']": PARAMS["dense"]["b"],
      "['dense']['w']": PARAMS["dense"]["w"][:, :2]})
  np.savez(bind_dir / "renamed.npz", **{
      "['dense']['bias']": PARAMS["dense"]["b"],
      "['dense']['w']": PARAMS["dense"]["w"]})
  return bind_dir


@pytest.mark.parametrize("argv,status,message", [
    ([LOAD, "predict.jaxpr", "--bind", "0=wrong.npz"], 2,
     "--bind 0=wrong.npz: bind args[0]['dense']['w']: the program takes "
     "float32[4,3], the source has float32[4,2]"),
    ([LOAD, "predict.jaxpr", "--bind", "0=renamed.npz"], 2,
     "bind args[0]['dense']['b']: the program takes float32[3], the source "
     "has nothing there"),
    # Issue 27: the forgotten :params lists the item's top level and says
    # which SOURCE to give.
    ([LOAD, "predict.jaxpr", "--bind", "0=ckpt/1/state"], 2,
     "bind args[0]['dense']['b']: the program takes float32[3], the source "
     "has nothing there; the source holds params, step at its top level and "
     "the input is under 'params': bind ckpt/1/state:params instead"),
    ([LOAD, "predict.jaxpr", "--bind", "0=ckpt/1/state:params.nope"], 1,
     "no key 'nope' under params"),
    ([LOAD, "predict.jaxpr", "--bind", "0=ckpt/1"], 1,
     "give a checkpoint item directory"),
    ([LOAD, "predict.jaxpr", "--bind", "0=x.npy"], 1, "one .npy array"),
    ([LOAD, "predict.jaxpr", "--bind", "0=nothere.npz"], 2,
     "no such file or directory: nothere.npz"),
    ([LOAD, "predict.jaxpr", "--bind", "1=params.npz"], 2,
     "--bind 1=... needs --bind 0=..."),
    ([LOAD, "predict.jaxpr", "--bind", "params"], 2, "expected ARG=SOURCE"),
    ([LOAD, "predict.jaxpr", "--bind", "w=params.npz"], 2,
     "no keyword argument 'w'"),
    ([LOAD, "predict.jaxpr", "--to-exported", "e", "--platforms", "gpu"], 2,
     "unknown platform 'gpu' in --platforms gpu: valid platforms are cpu, "
     "cuda, rocm, tpu"),
    ([LOAD, "predict.jaxpr", "--to-exported", "e", "--platforms",
      "cpu,tpu,foo"], 2, "unknown platform 'foo'"),
    ([LOAD, "predict.jaxpr", "--platforms", "cpu"], 2,
     "--platforms sets the lowering platforms of --to-exported"),
    ([sys.executable, "-c", _NO_TF, "predict.jaxpr", "--to-saved-model",
      "sm_none"], 1, "needs TensorFlow: pip install 'jaxpr_io[tf]'"),
    ([sys.executable, "-c", _NO_FLATBUFFERS, "predict.jaxpr",
      "--to-exported", "e"], 1, "needs the flatbuffers package: pip install "
     "flatbuffers"),
    ([DUMP, "syntax.py:f", "--args", "f32[2]"], 1,
     "syntax.py:2: SyntaxError: "),
    ([DUMP, "badimport.py:f", "--args", "f32[2]"], 1,
     "badimport.py:2: ModuleNotFoundError: No module named "
     "'no_such_package_xyz'"),
    ([DUMP, "raises.py:make"], 1, "raises.py:2: KeyError: 'missing'"),
    ([LOAD, "predict.jaxpr", "--run", "x.npy"], 2,
     "--run x.npy: expected an .npz archive"),
    ([LOAD, "predict.jaxpr", "-o", "/missing/dir/x.jaxpr"], 2,
     "cannot write /missing/dir/x.jaxpr: no such directory /missing/dir"),
    ([DUMP, "syntax.py:f", "--args", "f32[2]", "-o",
      "/missing/dir/x.jaxpr"], 2,
     "cannot write /missing/dir/x.jaxpr: no such directory /missing/dir"),
])
def test_every_failure_is_one_line(error_dir, argv, status, message):
  proc = _run(*argv, ok=False, cwd=error_dir)
  assert proc.returncode == status, proc.stderr
  errors = [l for l in proc.stderr.splitlines() if ": error: " in l]
  assert len(errors) == 1 and message in errors[0], proc.stderr
  assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("argv", [
    [LOAD, "predict.jaxpr", "--bind", "0=wrong.npz"],
    [DUMP, "badimport.py:f", "--args", "f32[2]"],
])
def test_debug_shows_the_traceback(error_dir, argv):
  proc = _run(*argv, "--debug", ok=False, cwd=error_dir)
  assert proc.returncode != 0 and "Traceback" in proc.stderr


def test_save_to_a_missing_directory_names_the_path(tmp_path):
  target = tmp_path / "missing" / "x.jaxpr"
  with pytest.raises(FileNotFoundError, match=f"cannot write {target}"):
    jaxpr_io.save(target, jaxpr_io.trace(lambda x: x, np.ones(2)))
