"""The documentation runs as written.

Every fenced code block of README.md and of the users' guides (DOCS below)
runs, in order, file by file, in a fresh temporary directory, and what the
docs show a block printing is what it prints.

The convention (docs/testing.md repeats it). What a block's info string
says, unless an HTML comment on the line right above its opening fence
says otherwise:

  ```python    runs in one Python process per file: the file's python
               blocks share their variables, as in one session.
  ```console   each `$ ` line is a command (bash, in the temporary
               directory); the lines below it, up to the next `$ `, are its
               whole stdout.
  ```sh        runs as one bash script (`set -e`); its output is not
               checked.

and the comments (one or more, on consecutive lines right above the fence):

  <!-- output -->            this block (```text) is the stdout of the
                             python block before it, which must print it.
  <!-- file: NAME -->        the block is written to the file NAME in the
                             temporary directory (a script a later command
                             runs), not run itself.
  <!-- needs: MOD, ... -->   the block needs these modules (tensorflow,
                             orbax.checkpoint): where one is not installed,
                             this block and every later block of the file
                             are skipped, and so is the test, once the
                             earlier blocks have passed.
  <!-- not run: REASON -->   the block is not run; REASON says why (it
                             installs things, needs TensorFlow Serving or a
                             GPU, or takes an hour).

Any other block in these files (no info string, or another one, without one
of these comments) fails the test: every block either runs or says why not.

Outputs are compared line by line after taking out the numbers and the
spacing (numpy pads columns; another JAX release may train to other last
digits): the lines must agree, and the numbers to rtol 1e-4. The versions
in `written by jaxpr_io X, jax Y, jaxlib Z` are not compared. A line `...`
in an expected output stands for any number of lines.

The pages of the reference (docs/format.md, trust-model.md, families.md,
releases.md, testing.md, benchmarks.md) are not run: their commands are the
maintainers' (campaigns, benchmarks, CI). Every relative link of README.md
and docs/*.md must point to a file that exists, and README.md stays at most
300 lines.

Run as a script (`python test_docs.py PLAN.json RESULTS.json`), this file is
the runner a test starts in the temporary directory.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import traceback
from pathlib import Path

import numpy as np
import pytest

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

ROOT = Path(__file__).resolve().parents[2]

# The pages that run, in the order of docs/index.md.
DOCS = ("README.md", "docs/saving-and-loading.md", "docs/orbax.md",
        "docs/serving.md", "docs/cli.md", "docs/viewer.md",
        "docs/symbolic-shapes.md", "docs/scale.md", "docs/tutorial.md")
README_MAX_LINES = 300

_FENCE = re.compile(r"^```(\S*)\s*$")
_COMMENT = re.compile(r"^<!--\s*(.*?)\s*-->\s*$")
_FLOAT = re.compile(r"-?\d+\.\d+(?:e[-+]?\d+)?")
_VERSIONS = re.compile(r"jaxpr_io \S+, jax \S+, jaxlib [^)\s]+")
_RUN_KINDS = ("python", "console", "sh")


@dataclasses.dataclass
class Block:
  line: int          # 1-based line of the opening fence
  info: str          # the info string: python, console, sh, text, ...
  body: str
  marks: dict        # "output", "file", "needs", "not run" -> value


def blocks(path: Path) -> list[Block]:
  """The fenced blocks of a Markdown file, with the comments above each."""
  lines = path.read_text().splitlines()
  out, i = [], 0
  while i < len(lines):
    match = _FENCE.match(lines[i])
    if not match:
      i += 1
      continue
    marks, j = {}, i - 1
    while j >= 0 and _COMMENT.match(lines[j]):
      key, _, value = _COMMENT.match(lines[j]).group(1).partition(":")
      marks[key.strip()] = value.strip()
      j -= 1
    end = i + 1
    while end < len(lines) and lines[end].rstrip() != "```":
      end += 1
    assert end < len(lines), f"{path}:{i + 1}: unclosed code block"
    out.append(Block(i + 1, match.group(1),
                     "\n".join(lines[i + 1:end]) + "\n", marks))
    i = end + 1
  return out


def plan(path: Path) -> list[dict]:
  """What the runner does with each block of `path`, checked for the
  convention above."""
  steps = []
  for block in blocks(path):
    where = f"{path.relative_to(ROOT)}:{block.line}"
    unknown = set(block.marks) - {"output", "file", "needs", "not run"}
    assert not unknown, f"{where}: unknown marker {unknown}"
    if "not run" in block.marks:
      assert block.marks["not run"], f"{where}: `not run` needs a reason"
      continue
    needs = [m.strip() for m in block.marks.get("needs", "").split(",")
             if m.strip()]
    if "output" in block.marks:
      assert steps and steps[-1]["kind"] == "python", (
          f"{where}: an output block must follow a python block")
      assert steps[-1]["expected"] is None, f"{where}: a second output"
      steps[-1]["expected"] = block.body.splitlines()
      continue
    if "file" in block.marks:
      steps.append(dict(kind="file", name=block.marks["file"],
                        body=block.body, where=where, needs=needs))
      continue
    assert block.info in _RUN_KINDS, (
        f"{where}: a ```{block.info} block must be one of "
        f"{', '.join(_RUN_KINDS)}, or be marked <!-- output -->, "
        "<!-- file: NAME --> or <!-- not run: REASON -->")
    step = dict(kind=block.info, body=block.body, where=where, needs=needs,
                expected=None)
    if block.info == "console":
      commands = []
      for line in block.body.splitlines():
        if line.startswith("$ "):
          commands.append([line[2:], []])
        else:
          assert commands, f"{where}: output before the first `$ ` command"
          commands[-1][1].append(line)
      step["commands"] = commands
    steps.append(step)
  return steps


# ------------------------------------------------------- comparing outputs


def _shape(line: str) -> str:
  """A line without its numbers, versions and spacing."""
  line = _VERSIONS.sub("VERSIONS", line)
  return "".join(_FLOAT.sub("F", line).split())


def _numbers(line: str) -> list[float]:
  return [float(x) for x in _FLOAT.findall(_VERSIONS.sub("", line))]


def _align(expected, actual):
  """Pairs (expected line, actual line) matching `expected` to `actual`,
  where a line `...` of `expected` takes any number of lines; or None."""
  if not expected:
    return [] if not actual else None
  if expected[0].strip() == "...":
    for skip in range(len(actual) + 1):
      rest = _align(expected[1:], actual[skip:])
      if rest is not None:
        return rest
    return None
  if not actual or _shape(expected[0]) != _shape(actual[0]):
    return None
  rest = _align(expected[1:], actual[1:])
  return None if rest is None else [(expected[0], actual[0])] + rest


def check_output(what: str, expected: list[str], actual: str):
  lines = actual.splitlines()
  pairs = _align(expected, lines)
  if pairs is None:
    raise AssertionError(
        f"{what}: the output is not the one the docs show.\n--- docs:\n"
        + "\n".join(expected) + "\n--- printed:\n" + actual)
  want = [x for e, _ in pairs for x in _numbers(e)]
  got = [x for _, a in pairs for x in _numbers(a)]
  np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=what)


# -------------------------------------------- the runner (a child process)


def run_plan(steps: list[dict], missing: set[str], results_path: str) -> int:
  """Runs the steps in the current directory; writes what each printed
  (and which were skipped) to `results_path` as JSON."""
  namespace = {"__name__": "__main__"}
  results, skipping = {"outputs": {}, "skipped": []}, None
  for step in steps:
    if skipping is None:
      lacking = [m for m in step["needs"] if m in missing]
      if lacking:
        skipping = ", ".join(lacking)
    if skipping:
      results["skipped"].append((step["where"], skipping))
      continue
    where = step["where"]
    print(f"--- {where} ({step['kind']})", flush=True)
    if step["kind"] == "file":
      Path(step["name"]).parent.mkdir(parents=True, exist_ok=True)
      Path(step["name"]).write_text(step["body"])
    elif step["kind"] == "python":
      out = io.StringIO()
      try:
        with contextlib.redirect_stdout(out):
          code = compile(step["body"], where, "exec")
          exec(code, namespace)  # pylint: disable=exec-used
      except BaseException:  # pylint: disable=broad-except
        print(out.getvalue())
        traceback.print_exc()
        print(f"FAILED: {where}: the python block raised", flush=True)
        return 1
      results["outputs"][where] = out.getvalue()
      if step["expected"] is not None:
        check_output(where, step["expected"], out.getvalue())
    elif step["kind"] == "sh":
      proc = subprocess.run(["bash", "-e", "-o", "pipefail", "-c",
                             step["body"]], capture_output=True, text=True,
                            timeout=600, check=False)
      results["outputs"][where] = proc.stdout
      if proc.returncode:
        print(proc.stdout[-3000:], proc.stderr[-3000:])
        print(f"FAILED: {where}: the sh block exited {proc.returncode}")
        return 1
    else:  # console
      for command, expected in step["commands"]:
        proc = subprocess.run(["bash", "-c", command], capture_output=True,
                              text=True, timeout=600, check=False)
        results["outputs"][f"{where}: {command}"] = proc.stdout
        if proc.returncode:
          print(proc.stdout[-3000:], proc.stderr[-3000:])
          print(f"FAILED: {where}: `{command}` exited {proc.returncode}")
          return 1
        check_output(f"{where}: `{command}`", expected, proc.stdout)
    Path(results_path).write_text(json.dumps(results))
  Path(results_path).write_text(json.dumps(results))
  return 0


def _main(argv) -> int:
  plan_path, results_path = argv
  spec = json.loads(Path(plan_path).read_text())
  try:
    return run_plan(spec["steps"], set(spec["missing"]), results_path)
  except AssertionError as e:
    print(f"FAILED: {e}", flush=True)
    return 1


# ------------------------------------------------------------------ tests


def _run_doc(name: str, tmp_path: Path) -> dict:
  """Runs the blocks of docs file `name` in `tmp_path`; returns what they
  printed. Skips the test (after the rest passed) where a block needs a
  module that is not installed."""
  steps = plan(ROOT / name)
  needed = {m for s in steps for m in s["needs"]}
  missing = sorted(m for m in needed if importlib.util.find_spec(
      m.split(".")[0]) is None or importlib.util.find_spec(m) is None)
  (tmp_path / ".plan.json").write_text(json.dumps(
      {"steps": steps, "missing": missing}))
  # `python` in the docs' commands is this Python; the console scripts are
  # its environment's; this checkout's jaxpr_io comes first.
  shims = Path(tempfile.mkdtemp(prefix="shims-", dir=tmp_path))
  (shims / "python").write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
  (shims / "python").chmod(0o755)
  env = dict(os.environ)
  env["PATH"] = os.pathsep.join(
      [str(shims), os.path.dirname(sys.executable), env.get("PATH", "")])
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in [str(ROOT), env.get("PYTHONPATH")] if p)
  env.pop("JAXPR_IO_COVERAGE", None)
  proc = subprocess.run(
      [sys.executable, __file__, str(tmp_path / ".plan.json"),
       str(tmp_path / ".results.json")],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900,
      check=False)
  assert proc.returncode == 0, (
      f"{name}:\n{proc.stdout[-6000:]}\n{proc.stderr[-6000:]}")
  results = json.loads((tmp_path / ".results.json").read_text())
  if results["skipped"]:
    first, why = results["skipped"][0]
    pytest.skip(f"{name}: {len(results['skipped'])} block(s) from {first} "
                f"on need {why}, which is not installed; the blocks "
                "before them passed")
  return results["outputs"]


@pytest.mark.parametrize("name", [d for d in DOCS if d != "docs/tutorial.md"])
def test_doc_runs_as_written(name, tmp_path):
  _run_doc(name, tmp_path)


def test_tutorial_runs_as_written(tmp_path):
  """docs/tutorial.md, and TensorFlow's answer is JAX's."""
  outputs = _run_doc("docs/tutorial.md", tmp_path)

  def output(prefix):
    (key,) = [k for k in outputs if k.split(": ", 1)[-1].startswith(prefix)]
    return outputs[key].splitlines()

  def numbers(lines):
    return np.array([x for l in lines for x in _numbers(l)])

  jax_out = numbers(output("python train.py")[2:])
  tf_out = numbers(output("saved_model_cli run")[1:])
  assert jax_out.size == 6
  np.testing.assert_allclose(tf_out, jax_out, rtol=1e-5, atol=1e-6)
  variables = tmp_path / "models" / "predict" / "1" / "variables"
  assert (variables / "variables.index").exists()


def test_every_guide_block_is_run_or_says_why():
  for name in DOCS:
    steps = plan(ROOT / name)   # asserts the convention
    assert steps, f"{name} has no block to run"


def test_readme_is_short():
  lines = (ROOT / "README.md").read_text().splitlines()
  assert len(lines) <= README_MAX_LINES, (
      f"README.md has {len(lines)} lines; keep it at most "
      f"{README_MAX_LINES}: move detail into docs/")


_LINK = re.compile(r"\]\(([^)\s]+)\)")


def test_relative_links_point_to_files():
  pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
  assert len(pages) > 10
  broken = []
  for page in pages:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    for target in _LINK.findall(text):
      if re.match(r"^[a-z]+:", target) or target.startswith("#"):
        continue  # a URL, or an anchor in the page itself
      path = target.split("#", 1)[0]
      if not (page.parent / path).exists():
        broken.append(f"{page.relative_to(ROOT)}: {target}")
  assert not broken, "links to missing files:\n" + "\n".join(broken)


if __name__ == "__main__":
  sys.exit(_main(sys.argv[1:]))
