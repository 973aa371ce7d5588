"""The console scripts, run as subprocesses over every option and error."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import jaxpr_io

BIN = os.path.dirname(sys.executable)
DUMP = shutil.which("jaxpr-dump", path=BIN) or "jaxpr-dump"
LOAD = shutil.which("jaxpr-load", path=BIN) or "jaxpr-load"

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
""")


def _run(*args, ok=True, cwd=None):
  proc = subprocess.run(list(args), capture_output=True, text=True,
                        timeout=300, cwd=cwd)
  if ok:
    assert proc.returncode == 0, proc.stderr
  return proc


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
  in tests/test_viewer.py and tests/test_viewer_browser.py)."""
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
  from jaxpr_io import _proto as pb, container  # pylint: disable=g-import-not-at-top
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
