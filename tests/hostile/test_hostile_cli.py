"""Hostile inputs to `jaxpr-load`'s runs and conversions (issue 38): what a
program prints, a conversion that fails, a file rewritten in place under
the CLI, and programs that the converters would fold into gigabytes.

Each case runs in a fresh process with its address space limited, as in
tests/hostile/test_hostile_io.py; the cases that convert import and warm up
jax2onnx, onnxruntime, TensorFlow and LiteRT first (a first conversion
sets up what every later one reuses), so that the measured growth is the
case's own. Each asserts a FormatError or a one-line CLI error (or the
documented safe handling), its peak memory growth within the budget of
untrusted data (16x the file's size + 64 MiB) and its time.
"""

from __future__ import annotations

import functools
import os
import re
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from tests.hostile import run_child
from tests.hostile import test_hostile_io as io_cases

pytestmark = pytest.mark.once

needs_runtimes = pytest.mark.skipif(
    not all(__import__("importlib").util.find_spec(m) for m in (
        "jax2onnx", "onnxruntime", "tensorflow", "ai_edge_litert")),
    reason="needs jax2onnx, onnxruntime, tensorflow and ai-edge-litert")

# Before the limit: the converters' imports, and a first conversion of
# each kind a case runs (it sets up what every later one reuses), so that
# neither is counted as the case's.
_WARM = {
    "imports": "converters.onnx_model._import_jax2onnx(); "
               "converters.saved_model._import_tf()",
    "onnx": "converters.to_onnx(_warm, _dir + '/w.onnx'); "
            "converters.verify_onnx(_warm, _dir + '/w.onnx')",
    "tflite": "converters.to_tflite(_warm, _dir + '/w.tflite'); "
              "converters.verify_tflite(_warm, _dir + '/w.tflite')",
    "exported": "converters.save_exported(_warm, _dir + '/w.exported')",
}
_WARM_PRELUDE = """
    import tempfile
    from jaxpr_io import converters
    _warm = jaxpr_io.trace(lambda a: a * 2, np.ones(2, np.float32))
    with tempfile.TemporaryDirectory() as _dir:
"""

# Warmed up, these conversions take a second or so (TensorFlow's most),
# more on a loaded machine: the bound catches one that hangs or grows.
_CONVERSION_SECONDS = 60


def run_converting(code: str, *args, warm=("imports",), timeout=1200):
  """`run_limited`, with the converters of `warm` (keys of _WARM) warmed
  up before the limit."""
  warming = _WARM_PRELUDE + "".join(f"      {_WARM[k]}\n" for k in warm)
  limited = io_cases._LIMITED.replace(  # pylint: disable=protected-access
      "    import jaxpr_io.tools.load\n",
      "    import jaxpr_io.tools.load\n" + warming, 1)
  assert limited != io_cases._LIMITED  # pylint: disable=protected-access
  return run_child(limited + code + "\n    report()\n", *args,
                   timeout=timeout, env={"MALLOC_ARENA_MAX": "2"})


# jaxpr-load's main in the child, each ARG one command line (| between
# words); stdout and stderr are the child's own.
_CLI_RAW = io_cases._CLI_CHILD.replace(  # pylint: disable=protected-access
    "contextlib.redirect_stderr(err)", "contextlib.nullcontext()")


def _temporaries(directory) -> list[str]:
  return sorted(n for n in os.listdir(directory) if ".jaxpr_io-" in n)


# ============================================= 1. what a program prints
ESCAPES = io_cases.ESCAPES


@functools.cache
def printing_file() -> bytes:
  """A program whose debug_print format string and jax.debug.log message
  hold terminal control sequences."""
  evil = "".join(ESCAPES)

  def fn(x):
    jax.debug.print("fmt" + evil + "{}", x)
    jax.debug.log("log" + evil + "{}", x)
    return x * 2
  return jaxpr_io.dumps(jaxpr_io.trace(fn, io_cases.X4))


@needs_runtimes
def test_what_a_program_prints_under_the_cli_is_escaped(tmp_path):
  path = io_cases.write(tmp_path / "print.jaxpr", printing_file())
  np.savez(tmp_path / "in.npz", arg0=io_cases.X4)
  runs = [f"{path}|--run|{tmp_path}/in.npz",
          # Trusted: the stored record keeps its logger name and level.
          f"{path}|--trusted|--run|{tmp_path}/in.npz",
          # The check runs the program in JAX. (LiteRT's converter refuses
          # a program that prints: a host callback.)
          f"{path}|--to-onnx|{tmp_path}/p.onnx"]
  # Log records at INFO reach a handler made before the CLI runs (it holds
  # the real stderr), as an application's logging set-up would.
  child = run_converting("    logging.basicConfig(level=logging.INFO)\n"
                         + _CLI_RAW, *runs, warm=("imports", "onnx"))
  assert child.rc == 0, str(child)
  assert child.lines("RC:") == ["0"] * 3, str(child)
  for stream in (child.out, child.err):
    assert not io_cases._RAW.search(stream), (  # pylint: disable=protected-access
        repr(io_cases._RAW.search(stream)), str(child))  # pylint: disable=protected-access
  # Each print shows as text: --run twice, and JAX's side of the check.
  printed = "fmt\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\x1b[31;1m\\x9b32m"
  assert child.out.count(printed) == 3, str(child)
  logged = "log\\x1b]0;pwned\\x07"
  assert child.err.count(logged) == 3, str(child)
  assert "jax._src.debugging:log\\x1b" in child.err  # the trusted record
  # The library's own behaviour is unchanged: a Python caller gets what
  # the program prints as it is.
  plain = run_child("""
    prog = jaxpr_io.load(ARGS[0])
    prog(np.ones(4, np.float32)); jax.effects_barrier()
  """, path)
  assert plain.rc == 0 and "fmt\x1b]0;pwned\x07" in plain.out, str(plain)
  io_cases.assert_within(child, io_cases.budget_mib(len(printing_file())),
                         seconds=_CONVERSION_SECONDS)


# ========================================= 2. a conversion that fails
@functools.cache
def cast_file() -> bytes:
  """float32 -> int32: ONNX Runtime and LiteRT disagree with XLA outside
  int32's range and at NaN (XLA saturates, and gives 0 for NaN)."""
  return jaxpr_io.dumps(jaxpr_io.trace(lambda x: x.astype(jnp.int32),
                                       io_cases.X4))


@functools.cache
def constrained_file() -> bytes:
  """x * 2 of float32[b], b >= 4: the check's example inputs (each
  symbolic dimension 2) violate the constraint."""
  b, = jax.export.symbolic_shape("b", constraints=["b >= 4"])
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: x * 2, jax.ShapeDtypeStruct((b,), jnp.float32)))


@functools.cache
def weights_file() -> bytes:
  """x @ W with 1 MiB of weights: every artifact holds them."""
  w = np.random.RandomState(0).randn(512, 512).astype(np.float32)
  return jaxpr_io.dumps(jaxpr_io.trace(lambda x: x @ w,
                                       np.ones((2, 512), np.float32)))


# Runs each command line of ARGS; a line starting with FSIZE| runs with
# files limited to 256 KiB (RLIMIT_FSIZE: a write past it fails, EFBIG).
_FSIZE_CHILD = """
    import contextlib, io, signal
    from jaxpr_io.tools.load import main
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    for argv in ARGS:
      limited = argv.startswith("FSIZE|")
      if limited:
        argv = argv[len("FSIZE|"):]
        resource.setrlimit(resource.RLIMIT_FSIZE, (256 << 10, hard))
      err = io.StringIO()
      try:
        with contextlib.redirect_stderr(err):
          rc = main(argv.split("|"))
      finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
      errors = [l for l in err.getvalue().splitlines() if ": error: " in l]
      print("RC:", rc, "|".join(errors), flush=True)
"""


def _old_artifacts(directory) -> dict[str, bytes]:
  """Stand-ins for earlier artifacts at every target path."""
  old = {"m.onnx": b"old onnx", "m.tflite": b"old tflite",
         "e.exported": b"old exported", "e.exported.mlir": b"old mlir",
         "sm/saved_model.pb": b"old saved model",
         "sm/variables/variables.index": b"old index"}
  for name, data in old.items():
    (directory / name).parent.mkdir(exist_ok=True, parents=True)
    (directory / name).write_bytes(data)
  return old


@needs_runtimes
def test_a_failed_conversion_leaves_the_previous_artifact(tmp_path):
  d = tmp_path
  cast = io_cases.write(d / "cast.jaxpr", cast_file())
  constrained = io_cases.write(d / "poly.jaxpr", constrained_file())
  weights = io_cases.write(d / "w.jaxpr", weights_file())
  np.savez(d / "in.npz", arg0=np.array([3e9, -3e9, np.nan, 1.5], np.float32))
  old = _old_artifacts(d)
  runs = [
      # The artifacts differ from JAX: MismatchError, exit status 1.
      f"{cast}|--to-onnx|{d}/m.onnx|--run|{d}/in.npz",
      f"{cast}|--to-tflite|{d}/m.tflite|--run|{d}/in.npz",
      # The check's inputs violate the program's constraint.
      f"{constrained}|--to-onnx|{d}/m.onnx",
      # --dims that violate it: refused before anything is written.
      f"{constrained}|--dims|b=2|--to-tflite|{d}/m.tflite",
      # Writing fails (the file-size limit) halfway through each artifact.
      f"FSIZE|{weights}|--to-onnx|{d}/m.onnx",
      f"FSIZE|{weights}|--to-tflite|{d}/m.tflite",
      f"FSIZE|{weights}|--to-exported|{d}/e.exported",
      f"FSIZE|{weights}|--to-saved-model|{d}/sm",
  ]
  child = run_converting(_FSIZE_CHILD, *runs,
                         warm=("onnx", "tflite", "exported"))
  results = child.lines("RC:")
  assert len(results) == len(runs), str(child)
  for argv, result in zip(runs, results):
    assert re.fullmatch(r"[12] jaxpr-load: error: [^|]+", result), (
        argv, result)
  assert "MismatchError: " + f"{d}/m.onnx: the artifact run by onnxruntime" \
      in results[0], results[0]
  assert f"MismatchError: {d}/m.tflite: the artifact run by the LiteRT" in (
      results[1]), results[1]
  assert "b >= 4" in results[2], results[2]
  assert results[3].startswith("2 ") and "--dims" in results[3], results[3]
  # Every earlier artifact is as it was; no temporary is left anywhere.
  for name, data in old.items():
    assert (d / name).read_bytes() == data, name
  assert sorted(os.listdir(d / "sm")) == ["saved_model.pb", "variables"]
  assert _temporaries(d) == [] and _temporaries(d / "sm") == []
  io_cases.assert_within(child, io_cases.budget_mib(len(weights_file())),
                         seconds=_CONVERSION_SECONDS)


@needs_runtimes
def test_a_conversion_that_passes_replaces_the_artifact(tmp_path):
  d = tmp_path
  cast = io_cases.write(d / "cast.jaxpr", cast_file())
  weights = io_cases.write(d / "w.jaxpr", weights_file())
  _old_artifacts(d)
  runs = [f"{cast}|--to-onnx|{d}/m.onnx|--to-tflite|{d}/m.tflite",
          f"{weights}|--to-exported|{d}/e.exported|--to-saved-model|{d}/sm"]
  child = run_converting(_FSIZE_CHILD, *runs,
                         warm=("onnx", "tflite", "exported"))
  assert child.lines("RC:") == ["0", "0"], str(child)
  from jaxpr_io import converters  # pylint: disable=g-import-not-at-top
  x = np.array([1.5, -2.5, 0, 7], np.float32)
  prog = jaxpr_io.loads(cast_file())
  assert converters.verify_onnx(prog, d / "m.onnx", [x]).ok
  assert converters.verify_tflite(prog, d / "m.tflite", [x]).ok
  assert jax.export.deserialize((d / "e.exported").read_bytes())
  assert "stablehlo" in (d / "e.exported.mlir").read_text()
  # The old directory was replaced as a whole.
  assert not (d / "sm" / "variables" / "variables.index").read_bytes(
      ).startswith(b"old")
  assert (d / "sm" / "saved_model.pb").read_bytes() != b"old saved model"
  assert _temporaries(d) == []


# ============================== 3. a file rewritten in place under the CLI
_REWRITE_CHILD = """
    from jaxpr_io.tools import load as load_tool
    path, mode = ARGS
    if mode == "cli":
      prog = load_tool.load_file(path, check=False, trusted=False)
    else:
      prog = jaxpr_io.load(path)  # mapped
    prog.closed_jaxpr  # checksums verified: every page read once
    # Rewritten in place, as by a job writing over it without a rename:
    # first cut to nothing, then other bytes of another length.
    os.truncate(path, 0)
    with open(path, "r+b") as f:
      f.write(b"\\0" * 4096)
    x = np.ones((2, 512), np.float32)
    out = np.asarray(jax.jit(prog)(x))
    print("RESULT:", float(out.sum()), flush=True)
"""


def test_the_cli_survives_its_file_rewritten_in_place(tmp_path):
  data = weights_file()
  expected = float((np.ones((2, 512), np.float32) @ np.random.RandomState(
      0).randn(512, 512).astype(np.float32)).sum())
  cli = io_cases.run_limited(_REWRITE_CHILD,
                             io_cases.write(tmp_path / "a.jaxpr", data), "cli")
  (result,) = cli.lines("RESULT:")
  assert abs(float(result) - expected) <= 1e-3 * abs(expected), str(cli)
  io_cases.assert_within(cli, io_cases.budget_mib(len(data)))
  # The documented limit of a mapped load, which the CLI avoids: the
  # same rewrite kills a process that mapped the file.
  mapped = io_cases.run_limited(
      _REWRITE_CHILD, io_cases.write(tmp_path / "b.jaxpr", data), "mapped")
  assert mapped.rc == -signal.SIGBUS, str(mapped)


# ====================== 4. programs the converters fold into gigabytes
@functools.cache
def folding_files() -> dict[str, bytes]:
  """Files of a few hundred bytes: a broadcast of a literal to
  float32[8192, 8192] summed (jax2onnx makes it a 256 MiB initializer),
  an iota of 2**28 summed (TensorFlow folds a 1 GiB iota and its sum)."""
  def broadcast(x):
    return x + jnp.broadcast_to(1.0, (8192, 8192)).sum()

  def iota(x):
    return x + jax.lax.iota(jnp.int32, 2**28).sum().astype(jnp.float32)
  return {name: jaxpr_io.dumps(jaxpr_io.trace(fn, io_cases.X4))
          for name, fn in (("broadcast", broadcast), ("iota", iota))}


# The library on the first int(ARGS[0]) files of ARGS[1:], then the CLI on
# the command lines after them.
_FOLD_CHILD = """
    import contextlib, io
    from jaxpr_io import converters
    from jaxpr_io.tools.load import main
    n = int(ARGS[0])
    for path in ARGS[1:1 + n]:
      prog = jaxpr_io.load(path)
      expect_format_error(converters.to_onnx, prog, path + ".onnx")
      expect_format_error(converters.to_tflite, prog, path + ".tflite")
    for argv in ARGS[1 + n:]:
      err = io.StringIO()
      with contextlib.redirect_stderr(err):
        rc = main(argv.split("|"))
      errors = [l for l in err.getvalue().splitlines() if ": error: " in l]
      print("RC:", rc, "|".join(errors), flush=True)
"""


@needs_runtimes
def test_conversions_are_charged_what_they_fold(tmp_path):
  files = folding_files()
  assert max(map(len, files.values())) < 1024, {
      k: len(v) for k, v in files.items()}
  paths = {k: io_cases.write(tmp_path / f"{k}.jaxpr", v)
           for k, v in files.items()}
  runs = [f"{paths[k]}|{flag}|{tmp_path}/{k}.{ext}"
          for k in paths for flag, ext in (("--to-onnx", "onnx"),
                                           ("--to-tflite", "tflite"))]
  child = run_converting(_FOLD_CHILD, "2", paths["broadcast"],
                         paths["iota"], *runs)
  errors = child.lines("FORMAT_ERROR:")
  results = child.lines("RC:")
  assert len(errors) == 4 and len(results) == 4, str(child)
  for message, primitive in zip(
      errors + [r.split(": error: ", 1)[1] for r in results],
      ["broadcast_in_dim"] * 2 + ["iota"] * 2
      + ["broadcast_in_dim"] * 2 + ["iota"] * 2):
    assert re.match(rf"(FormatError: )?equation 0: primitive {primitive} "
                    r"computes \S+ \([\d,]+ bytes\) from constants alone, "
                    r"which .* folds into the model: .* over the "
                    r"67,108,864 .*trusted=True", message), message
  assert all(r.startswith("1 jaxpr-load: error: FormatError: ")
             for r in results), results
  # Nothing was written.
  assert not [n for n in os.listdir(tmp_path)
              if not n.endswith(".jaxpr")], os.listdir(tmp_path)
  # Refused before anything is built: the case costs next to nothing.
  io_cases.assert_within(child, io_cases.budget_mib(
      max(map(len, files.values()))), seconds=20)


# ====================== 5. programs the converters copy exponentially
@needs_runtimes
def test_conversions_are_charged_the_copies_they_make(tmp_path):
  """Fuzz case 6356 (seed 0): ten scan bodies, each holding two scans of
  the next, 26 equations in a 4 kB file; jax2onnx copies each body per
  scan, 2**10 times, and took 100 s. Here 22 equations in 2 kB, refused
  before the converters start."""
  from tests.converters.test_expansion import doubling_chain  # pylint: disable=g-import-not-at-top
  data = jaxpr_io.dumps(jaxpr_io.trace(doubling_chain(10, loops=True),
                                       io_cases.X4))
  assert len(data) < 8192, len(data)
  path = io_cases.write(tmp_path / "chain.jaxpr", data)
  runs = [f"{path}|{flag}|{tmp_path}/chain.{ext}"
          for flag, ext in (("--to-onnx", "onnx"), ("--to-tflite", "tflite"))]
  child = run_converting(_FOLD_CHILD, "1", path, *runs)
  errors = child.lines("FORMAT_ERROR:")
  results = child.lines("RC:")
  assert len(errors) == 2 and len(results) == 2, str(child)
  for message in errors + [r.split(": error: ", 1)[1] for r in results]:
    assert re.match(r"(FormatError: )?equation 0: primitive scan expands to "
                    r"2,047 equations for .*: the program's 22 stored "
                    r"equations expand to 4,094, over the 3,456 .*"
                    r"trusted=True", message), message
  assert all(r.startswith("1 jaxpr-load: error: FormatError: ")
             for r in results), results
  assert sorted(os.listdir(tmp_path)) == ["chain.jaxpr"]
  io_cases.assert_within(child, io_cases.budget_mib(len(data)), seconds=20)
