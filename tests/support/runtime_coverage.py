"""Which primitives each serving runtime accepts, measured.

For the first case of each group of JAX's primitive harnesses (the
primitive test suite of tests/read_write/test_harnesses.py, without x64;
`--every 25` adds that test's CI sample) and every program of both zoos
(tests/support/zoo.py, zoo2.py), saved and loaded through the format, each
runtime gets the loaded program: converted, run on the program's own example
inputs and compared with the program under `jax.jit` (atol 1e-4 + rtol
1e-4, `jaxpr_io.converters.verify`):

* StableHLO: `converters.to_exported`, run with `Exported.call`;
* SavedModel: `converters.to_saved_model`, run by TensorFlow's loader;
* ONNX: `converters.to_onnx`, run by onnxruntime;
* LiteRT: `converters.to_tflite`, run by `ai_edge_litert`'s interpreter.

A harness tests one primitive (its group), so the primitive table counts,
for each primitive, the harness cases each runtime converted and ran to the
same values. The zoo table says, for each program, whether each runtime ran
it, and the first reason where not.

    python -m tests.support.runtime_coverage --write docs/runtime-coverage.md

takes about 20 minutes on 2 cores (one process; results are cached in
--cache, so an interrupted run resumes). tests/converters/test_runtime_coverage.py
checks the committed page against a small sample.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import zlib

import jax
import numpy as np

import jaxpr_io
from jaxpr_io import converters
from jaxpr_io.converters import verify

RUNTIMES = ("StableHLO", "SavedModel", "ONNX", "LiteRT")
SAMPLE = 25


def harness_programs(every: int = 0):
  """(name, group, harness) of the first harness case of each group
  (without x64, in name order), plus, with `every` N, each case whose name
  hashes to 0 mod N (N=25: tests/read_write/test_harnesses.py's CI
  sample)."""
  # lazy: JAX's test harnesses import its test utilities.
  from tests.support import harness_list  # pylint: disable=g-import-not-at-top
  seen, out = set(), []
  for h in sorted(harness_list.cpu_harnesses(False), key=lambda h: h.fullname):
    picked = every and zlib.crc32(h.fullname.encode()) % every == 0
    if picked or h.group_name not in seen:
      seen.add(h.group_name)
      out.append((h.fullname, h.group_name, h))
  return out


def _harness_case(h):
  args = h.dyn_args_maker(np.random.RandomState(0))
  closed = jax.make_jaxpr(h.dyn_fun)(*args)
  return jaxpr_io.loads(jaxpr_io.dumps(closed)), list(args)


def _zoo_case(builder):
  fn, args, kwargs = builder()
  prog = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(fn, *args, **kwargs)))
  return prog, jax.tree_util.tree_leaves((args, kwargs))


def _run_stablehlo(prog, inputs, tmp):
  del tmp
  return [np.asarray(o) for o in jax.tree_util.tree_leaves(
      converters.to_exported(prog).call(*_unflat(prog, inputs)))]


def _unflat(prog, inputs):
  args, kwargs = jax.tree_util.tree_unflatten(prog.in_tree, inputs)
  assert not kwargs
  return args


def _run_saved_model(prog, inputs, tmp):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  path = os.path.join(tmp, "sm")
  converters.to_saved_model(prog, path)
  serve = tf.saved_model.load(path).signatures["serving_default"]
  outs = serve(**{f"arg{i}": tf.constant(np.asarray(x))
                  for i, x in enumerate(inputs)})
  return [outs[f"out{i}"].numpy() for i in range(len(outs))]


def _run_onnx(prog, inputs, tmp):
  path = os.path.join(tmp, "m.onnx")
  converters.to_onnx(prog, path)
  return converters.run_onnx(path, inputs)


def _run_litert(prog, inputs, tmp):
  path = os.path.join(tmp, "m.tflite")
  converters.to_tflite(prog, path)
  return converters.run_tflite(path, inputs)


RUNNERS = dict(zip(RUNTIMES, (_run_stablehlo, _run_saved_model, _run_onnx,
                              _run_litert)))


def _reason(e: BaseException) -> str:
  text = str(e).splitlines()[0] if str(e) else ""
  return f"{type(e).__name__}: {text}"[:160]


def measure(prog, inputs, runtimes=RUNTIMES) -> dict[str, str]:
  """runtime -> "ok" or the reason it failed, for one loaded program."""
  expected = verify.expected_outputs(prog, inputs)
  result = {}
  for runtime in runtimes:
    with tempfile.TemporaryDirectory() as tmp:
      try:
        actual = RUNNERS[runtime](prog, inputs, tmp)
        verdict = verify.compare(runtime, expected, actual)
        result[runtime] = "ok" if verdict.ok else f"differs: {verdict.detail}"
      except Exception as e:  # pylint: disable=broad-except
        # Any failure of a converter or runtime is the measurement.
        result[runtime] = _reason(e)
  return result


def case_result(kind: str, name: str, builder, runtimes=RUNTIMES):
  """The measurement of one case, or None if it is not a program of the
  format (JAX does not trace it, or `dumps` refuses it)."""
  try:
    prog, inputs = builder()
  except Exception:  # pylint: disable=broad-except
    # Not traced by JAX or refused by the format: not in the tables.
    return None
  del kind, name
  return measure(prog, inputs, runtimes)


def _cases(every: int):
  # lazy: the zoos import Flax, Equinox, ... .
  from tests.support.zoo import ZOO  # pylint: disable=g-import-not-at-top
  from tests.support.zoo2 import ZOO2  # pylint: disable=g-import-not-at-top
  for name, group, h in harness_programs(every):
    yield "harness", name, group, (lambda h=h: _harness_case(h))
  for name, builder in sorted({**ZOO, **ZOO2}.items()):
    yield "zoo", name, name, (lambda b=builder: _zoo_case(b))


def run(cache_path: str, every: int = 0, measure_more: bool = True
        ) -> tuple[dict, int]:
  """(the cache of measurements, the number of cases there are)."""
  cache = {}
  if os.path.exists(cache_path):
    with open(cache_path) as f:
      cache = json.load(f)
  total = 0
  for kind, name, group, builder in _cases(every):
    total += 1
    key = f"{kind}:{name}"
    if key in cache or not measure_more:
      continue
    print(key, flush=True)
    cache[key] = {"group": group, "result": case_result(kind, name, builder)}
    with open(cache_path + ".tmp", "w") as f:
      json.dump(cache, f, indent=0, sort_keys=True)
    os.replace(cache_path + ".tmp", cache_path)
  return cache, total


def primitive_rows(cache) -> list[tuple[str, int, dict[str, int]]]:
  """(primitive, cases, runtime -> cases passed), from the harness cases."""
  counts = collections.defaultdict(lambda: collections.Counter())
  totals = collections.Counter()
  for key, entry in cache.items():
    if not key.startswith("harness:") or entry["result"] is None:
      continue
    group = entry["group"]
    totals[group] += 1
    for runtime, outcome in entry["result"].items():
      counts[group][runtime] += outcome == "ok"
  return [(g, totals[g], dict(counts[g])) for g in sorted(totals)]


def _cell(passed: int, total: int) -> str:
  if passed == total:
    return "yes"
  return "no" if passed == 0 else f"{passed}/{total}"


def page(cache, total: int) -> str:
  rows = primitive_rows(cache)
  measured = len(cache)
  partial = ([] if measured >= total else [
      "", f"**Partial**: {measured} of the {total} cases (harness groups and "
      "zoo programs) were measured so far; rerun the command to measure the "
      "rest (it resumes from its cache)."])
  lines = [
      "# Which runtime accepts which primitive",
      "",
      "Generated by `python -m tests.support.runtime_coverage --write "
      "docs/runtime-coverage.md`",
      f"(jax {jax.__version__}; the method: "
      "[`tests/support/runtime_coverage.py`](../tests/support/runtime_coverage.py)).",
      "The first case of each group of JAX's primitive test suite (a group "
      "tests one primitive) and each zoo program is saved, loaded, "
      "converted for each runtime, run on "
      "its example inputs and compared with JAX (atol 1e-4 + rtol 1e-4): "
      "`yes` where every case of the primitive passed, `no` where none did, "
      "else passed/cases. The first case of a group in name order is often "
      "its bfloat16 or complex one, so a `no` often means the runtime lacks "
      "the primitive in that dtype (the reasons are in the cache the command "
      "keeps). [Serving](serving.md) says how to convert.",
  ] + partial + [
      "",
      "## Summary",
      "",
  ] + summary_lines(cache) + [
      "",
      "## Primitives (harness groups)",
      "",
      "| primitive | cases | " + " | ".join(RUNTIMES) + " |",
      "| --- | --- | " + " | ".join("---" for _ in RUNTIMES) + " |",
  ]
  for group, total, passed in rows:
    lines.append(f"| `{group}` | {total} | " + " | ".join(
        _cell(passed.get(r, 0), total) for r in RUNTIMES) + " |")
  lines += ["", "## Zoo programs", "",
            "| program | " + " | ".join(RUNTIMES) + " |",
            "| --- | " + " | ".join("---" for _ in RUNTIMES) + " |"]
  for key, entry in sorted(cache.items()):
    if not key.startswith("zoo:") or entry["result"] is None:
      continue
    lines.append(f"| {key[4:]} | " + " | ".join(
        "yes" if entry["result"][r] == "ok" else "no"
        for r in RUNTIMES) + " |")
  lines += ["", "Why a zoo program failed, per runtime (first line of the "
            "error):", ""]
  for key, entry in sorted(cache.items()):
    if not key.startswith("zoo:") or entry["result"] is None:
      continue
    for r in RUNTIMES:
      if entry["result"][r] != "ok":
        reason = entry["result"][r].replace("|", "/").replace("`", "'")
        lines.append(f"* {key[4:]}, {r}: {reason}")
  return "\n".join(lines) + "\n"


def summary_lines(cache) -> list[str]:
  rows = primitive_rows(cache)
  zoo = [e["result"] for k, e in cache.items()
         if k.startswith("zoo:") and e["result"] is not None]
  lines = ["| runtime | primitives, every case | primitives, some case | "
           "zoo programs |", "| --- | --- | --- | --- |"]
  for r in RUNTIMES:
    full = sum(1 for _, t, p in rows if p.get(r, 0) == t)
    some = sum(1 for _, t, p in rows if p.get(r, 0) > 0)
    ok = sum(1 for z in zoo if z[r] == "ok")
    lines.append(f"| {r} | {full} of {len(rows)} | {some} of {len(rows)} | "
                 f"{ok} of {len(zoo)} |")
  return lines


def parse_page(text: str):
  """(primitive rows: primitive -> (cases, runtime -> cell), zoo rows:
  program -> runtime -> "yes"/"no") of a page `page` wrote."""
  prims, zoo, section = {}, {}, None
  for line in text.splitlines():
    if line.startswith("## "):
      section = line[3:]
    if not line.startswith("| ") or line.startswith("| ---"):
      continue
    cells = [c.strip() for c in line.strip("|").split("|")]
    if section.startswith("Primitives") and cells[0] != "primitive":
      prims[cells[0].strip("`")] = (int(cells[1]),
                                    dict(zip(RUNTIMES, cells[2:])))
    elif section.startswith("Zoo") and cells[0] != "program":
      zoo[cells[0]] = dict(zip(RUNTIMES, cells[1:]))
  return prims, zoo


def summary_from_page(text: str) -> list[str]:
  """The summary table, recomputed from the page's own rows."""
  prims, zoo = parse_page(text)
  lines = ["| runtime | primitives, every case | primitives, some case | "
           "zoo programs |", "| --- | --- | --- | --- |"]
  for r in RUNTIMES:
    full = sum(1 for _, cells in prims.values() if cells[r] == "yes")
    some = sum(1 for _, cells in prims.values() if cells[r] != "no")
    ok = sum(1 for cells in zoo.values() if cells[r] == "yes")
    lines.append(f"| {r} | {full} of {len(prims)} | {some} of {len(prims)} "
                 f"| {ok} of {len(zoo)} |")
  return lines


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--write", metavar="PAGE.md", required=True)
  parser.add_argument("--every", type=int, default=0, metavar="N",
                      help="also every harness case whose name hashes to 0 "
                      "mod N (25: the CI sample); default: the first case "
                      "of each group only")
  parser.add_argument("--cache", default=os.path.join(
      tempfile.gettempdir(), f"runtime_coverage_{jax.__version__}.json"))
  parser.add_argument("--no-measure", action="store_true",
                      help="write the page from the cache alone")
  args = parser.parse_args(argv)
  cache, total = run(args.cache, args.every, not args.no_measure)
  with open(args.write, "w") as f:
    f.write(page(cache, total))
  print(f"wrote {args.write}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
