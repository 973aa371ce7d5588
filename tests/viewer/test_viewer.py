"""The viewer's JavaScript reader (viewer/src/reader.js), run with node.

For every golden file, the zoo programs and a program holding every array
dtype the data section can carry, the JSON summary that the JavaScript reader
computes (equations, primitives, param names and values, avals, constants,
signature) must equal the one the Python reader computes
(tests/support/viewer_summary.py), and agree with the program `jaxpr_io.loads`
builds. Corrupt files must be refused by both. The generated schema
description and the shipped page must equal fresh generations.
Skipped without node.
"""

from __future__ import annotations

import base64
import json
import os
import re
import pathlib
import shutil
import subprocess
import sys

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.compat import hi_mutable as compat_hi_mutable
from tests.support import viewer_summary
from tests.format.test_golden import NEEDS_BOXES
from tests.support.zoo import ZOO as ZOO1
from tests.support.zoo2 import REFUSED, ZOO2
from tests.support import paths

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

ROOT = pathlib.Path(paths.ROOT)
NODE = shutil.which("node") or "node"
HAVE_NODE = shutil.which("node") is not None
GOLDEN = sorted((ROOT / "tests" / "golden").glob("v*/**/*.jaxpr"))

# CI sets JAXPR_IO_REQUIRE_VIEWER_TOOLS (.ci/run): there, no node fails.
needs_node = pytest.mark.skipif(
    not HAVE_NODE and not os.environ.get("JAXPR_IO_REQUIRE_VIEWER_TOOLS"),
    reason="node is not installed")


def js_summaries(paths) -> list[dict]:
  out = subprocess.run([NODE, str(ROOT / "viewer" / "summarize.js"),
                        *map(str, paths)], capture_output=True, text=True,
                       check=True, timeout=600)
  lines = out.stdout.splitlines()
  assert len(lines) == len(paths)
  return [json.loads(line) for line in lines]


def assert_same(js: dict, data: bytes, name: str) -> None:
  assert "error" not in js, f"{name}: the JavaScript reader refused it: {js}"
  py = viewer_summary.summary(data)
  # Parsed JSON compares numbers by value (1 == 1.0); everything else,
  # including dict keys and list lengths, must match exactly.
  assert js == py, f"{name}: the readers' summaries differ"
  anchors = viewer_summary.anchors(data)
  root_closed = js["closed"][js["root"]]
  root = js["jaxprs"][root_closed["jaxpr"]]
  for side in ("input_paths", "output_paths"):
    assert len(js[side]) == len(anchors[side]), name
    # Keys other than strings and ints print as Python reprs in JAX; the
    # viewer names them by type (reader.js `keyText`).
    for mine, jax_path in zip(js[side], anchors[side]):
      if "(\u2026)" not in mine and '["' not in mine and "[{" not in mine:
        # A GENERIC node whose type the loading process lacks is rebuilt as
        # a plain dict (schema: `PyTree`): its attribute `.w` is then ['w'].
        assert _as_dict_keys(mine) == _as_dict_keys(jax_path), name
  assert _keys(root["invars"]) == _keys(anchors["inputs"]), name
  out_avals = []
  for r in root["outvars"]:
    out_avals.append(r["literal"]["aval"] if isinstance(r, dict)
                     else _aval_of_var(root, r))
  assert _keys(out_avals) == _keys(anchors["outputs"]), name
  assert [e["primitive"] for e in root["eqns"]] == \
      anchors["root_primitives"], name
  consts = [{"shape": c["aval"]["shape"],
             "dtype": "uint32" if c["aval"]["dtype"].startswith("key<")
             else c["aval"]["dtype"], "first": c["first"]}
            for c in root_closed["consts"]]
  for c, a in zip(consts, anchors["root_consts"]):
    if c["dtype"] == "uint32" and a["dtype"] == "uint32":
      a = dict(a, shape=c["shape"])  # a key array's shape drops the key's
    assert c == a, name
  assert len(consts) == len(anchors["root_consts"]), name


def _as_dict_keys(path: str) -> str:
  return re.sub(r"\.([A-Za-z_][A-Za-z_0-9]*)", r"['\1']", path)


def _keys(avals: list[dict]) -> list[dict]:
  """PRNG key dtypes as "key": the file names the implementation
  (key<threefry2x32>), JAX's dtype a short form (key<fry>)."""
  return [dict(a, dtype="key") if a.get("dtype", "").startswith("key<")
          else a for a in avals]


def _aval_of_var(jaxpr: dict, v: int) -> dict:
  binders = jaxpr["constvars"] + jaxpr["invars"]
  for e in jaxpr["eqns"]:
    binders += [o.get("dropped", o) if "dropped" in o else o
                for o in e["outs"]]
  return binders[v]


def test_schema_description_is_fresh():
  out = subprocess.run([sys.executable, str(ROOT / "viewer" / "gen_schema.py"),
                        "--check"], capture_output=True, text=True)
  assert out.returncode == 0, out.stdout + out.stderr


def test_shipped_page_is_fresh():
  """jaxpr_io/_viewer/viewer.html is viewer/build.py's output for the
  sources as they are (rebuild after editing viewer/src/)."""
  out = subprocess.run([sys.executable, str(ROOT / "viewer" / "build.py"),
                        "--check"], capture_output=True, text=True)
  assert out.returncode == 0, out.stdout + out.stderr


def test_html_page_holds_the_file(tmp_path):
  """jaxpr-load --html: the page is the shipped one with the file's bytes
  in it, and refuses a file that is not a jaxpr_io container."""
  from jaxpr_io.tools import html, load  # pylint: disable=g-import-not-at-top
  src = tmp_path / "f.jaxpr"
  data = jaxpr_io.dumps(jaxpr_io.trace(jnp.sin, np.ones(3, np.float32)))
  src.write_bytes(data)
  out = tmp_path / "f.html"
  assert load.main([str(src), "--html", str(out)]) == 0
  text = out.read_text()
  start = text.index('data-name="f.jaxpr">') + len('data-name="f.jaxpr">')
  assert base64.b64decode(text[start:text.index("</script>", start)]) == data
  assert text.replace(text[start:text.index("</script>", start)],
                      "/*DATA*/").replace('"f.jaxpr"', '"/*NAME*/"') == \
      html.page_template()
  # Nothing in the page reaches the network.
  for needle in ("http://", "https://", "fetch(", "XMLHttpRequest",
                 "<link", " src="):
    assert needle not in text.replace(
        "http://www.w3.org/2000/svg", ""), needle
  bad = tmp_path / "bad.jaxpr"
  bad.write_bytes(b"not a jaxpr file" * 8)
  assert load.main([str(bad), "--html", str(tmp_path / "bad.html")]) != 0
  assert not (tmp_path / "bad.html").exists()


@needs_node
def test_golden_files():
  assert len(GOLDEN) >= 70
  for path, js in zip(GOLDEN, js_summaries(GOLDEN)):
    if path.stem in NEEDS_BOXES and not compat_hi_mutable.SUPPORTED:
      # This JAX cannot load the file (tests/format/test_golden.py): the readers'
      # summaries still agree, without JAX's own objects to anchor them.
      assert js == viewer_summary.summary(path.read_bytes()), path.name
      continue
    assert_same(js, path.read_bytes(), str(path.relative_to(ROOT)))


# Every zoo program this release can store (tests/support/zoo2.py lists the ones
# dumps refuses, and tests/read_write/test_zoo.py asserts those refusals).
ZOO = {name: build for name, build in {**ZOO1, **ZOO2}.items()
       if not REFUSED.get(name, (False,))[0]}


@needs_node
def test_zoo_programs(tmp_path):
  paths = []
  for name in sorted(ZOO):
    fn, args, kwargs = ZOO[name]()
    path = tmp_path / f"{name}.jaxpr"
    jaxpr_io.save(path, jaxpr_io.trace(fn, *args, **kwargs))
    paths.append(path)
  for path, js in zip(paths, js_summaries(paths)):
    assert_same(js, path.read_bytes(), path.name)
  # The zoo's sub-jaxprs (scan, while, cond, custom rules, pjit, shard_map,
  # pallas_call) are all reached and read.
  prims = {e["primitive"] for path, js in zip(paths, js_summaries(paths))
           for j in js["jaxprs"] for e in j["eqns"]}
  assert {"scan", "while", "cond", "jit", "custom_jvp_call",
          "custom_vjp_call", "pallas_call"} <= prims, sorted(prims)


def _every_dtype(x):
  """Constants of every dtype the data section carries, with values that
  tell the decodings apart (NaN, infinities, -0, subnormals, int64 and
  uint64 beyond 2**53)."""
  f = np.array([1.5, -0.0, np.nan, np.inf, -np.inf, 6.1e-5, 3e-8, 65504.0,
                -2.25] * 8, np.float32)
  consts = [
      f.astype(np.float16), f.astype(ml_dtypes.bfloat16), f,
      f.astype(np.float64) / 3,
      (f[:64] + np.complex64(1j) * np.arange(64, dtype=np.float32)),
      np.arange(-40, 40, dtype=np.int8), np.array([2**62 + 1, -2**63] * 10, np.int64),
      np.array([2**64 - 1, 2**53 + 1] * 10, np.uint64),
      np.arange(70) % 3 == 0, np.arange(-8, 8, dtype=ml_dtypes.int4).repeat(5),
      np.array([0.5, -448, 3, 0.015625] * 20, ml_dtypes.float8_e4m3fn),
      np.array([0.5, -57344, np.inf, 1.5e-5] * 20, ml_dtypes.float8_e5m2),
      np.arange(70, dtype=np.uint16), np.arange(-70, 0, dtype=np.int16),
  ]
  total = x
  for c in consts:
    c = jnp.asarray(c)
    total = total + jnp.sum(jnp.real(c).astype(jnp.float32)) * 0
  key = jax.random.key(3)
  return total + jax.random.uniform(key, ())


@needs_node
def test_every_dtype_and_literal(tmp_path):
  path = tmp_path / "dtypes.jaxpr"
  with jax.enable_x64(True):  # int64 and uint64 constants stay 64-bit
    jaxpr_io.save(path, jaxpr_io.trace(_every_dtype, np.float32(2)))
  (js,) = js_summaries([path])
  assert_same(js, path.read_bytes(), "dtypes")
  dtypes = {c["aval"]["dtype"] for c in js["closed"][js["root"]]["consts"]}
  assert {"float16", "bfloat16", "int64", "uint64", "int4",
          "float8_e4m3fn", "complex64"} <= dtypes, dtypes


@needs_node
@pytest.mark.parametrize("offset, message", [
    (0, "bad magic"), (30, "header checksum"), (70, "program checksum"),
    (-1, "blob"),
])
def test_corrupt_files_are_refused(tmp_path, offset, message):
  w = np.arange(4096, dtype=np.float32).reshape(64, 64)
  data = bytearray(jaxpr_io.dumps(jaxpr_io.trace(lambda x: x @ w, w)))
  data[offset] ^= 0x40
  path = tmp_path / "corrupt.jaxpr"
  path.write_bytes(bytes(data))
  (js,) = js_summaries([path])
  assert message in js.get("error", ""), js
  with pytest.raises(jaxpr_io.FormatError):
    viewer_summary.summary(bytes(data))


# ------------------------------------------- files that expand (issue 28)
@needs_node
def test_js_tree_counts_are_jax_s(tmp_path):
  """reader.js counts a signature's nodes and leaves, shared nodes
  expanded, as JAX does (and as jaxpr_io/safety/costs.py does)."""
  from tests.hostile import test_costs  # pylint: disable=g-import-not-at-top
  prog = test_costs._layers_program()  # pylint: disable=protected-access
  path = tmp_path / "layers.jaxpr"
  jaxpr_io.save(path, prog)
  script = ("const r = require(process.argv[1]);"
            "const p = new r.Program(new Uint8Array("
            "require('fs').readFileSync(process.argv[2])));"
            "console.log(JSON.stringify([p.treeCounts(p.msg.in_tree),"
            " p.treeCounts(p.msg.out_tree)]));")
  out = subprocess.run([NODE, "-e", script,
                        str(ROOT / "viewer" / "src" / "reader.js"),
                        str(path)], capture_output=True, text=True,
                       check=True, timeout=60)
  assert json.loads(out.stdout) == [
      [prog.in_tree.num_nodes, prog.in_tree.num_leaves],
      [prog.out_tree.num_nodes, prog.out_tree.num_leaves]]


@needs_node
def test_js_reader_refuses_what_expands(tmp_path):
  """The 960-byte file whose output signature is 2**41 nodes, and the same
  chain in `treedef` params, are refused by the JavaScript reader (counted,
  not built), as by the Python one."""
  from tests.hostile import test_expansion  # pylint: disable=g-import-not-at-top
  files = {"out_tree": test_expansion.shared_out_tree_file(),
           "param": test_expansion.shared_treedef_param_file()}
  paths_ = []
  for name, data in files.items():
    paths_.append(tmp_path / f"{name}.jaxpr")
    paths_[-1].write_bytes(data)
  out_tree, param = js_summaries(paths_)
  assert out_tree == {"error": (
      "the output signature is a pytree of 2,199,023,255,551 nodes "
      "(counting every use of a shared node), more than a file of "
      f"{len(files['out_tree']):,} bytes may ask for (16x its size + 64 "
      "MiB); the viewer does not show it")}
  assert ("a treedef value is a pytree of 2,199,023,255,551 nodes"
          in param["error"]), param
