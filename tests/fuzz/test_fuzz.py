"""CI's sample of the format-aware fuzzer (tests/fuzz/, README there).

`test_fuzz_sample` runs a fixed-seed campaign through the same machinery as
`python -m tests.fuzz` (worker subprocesses, per-case timeouts, crash
detection) and requires: every seed passes unmutated, and no case fails —
no exception but `FormatError` from `loads` (with or without `check=True`),
no abort, no hang, and no program that passes `check=True` and then fails in
`str`, `dumps` or its first call. The other tests check the mutator itself:
deterministic, and its cases carry correct checksums.

JAXPR_IO_FUZZ_CASES=N runs N cases instead of the sample's 300.
"""

from __future__ import annotations

import importlib.util
import json
import os
import zlib

import numpy as np
import pytest

import tests.fuzz  # noqa: F401  (XLA_FLAGS before JAX; conftest does too)
import jax
import jax.numpy as jnp
import jaxpr_io
from jaxpr_io.format import _proto as pb
from jaxpr_io.format import container
from tests.fuzz import convert, mutate, runner, seeds, structural, transforms

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

_CASES = int(os.environ.get("JAXPR_IO_FUZZ_CASES", "300"))
_SEED = 20240601


@pytest.fixture(scope="module")
def seed_files():
  files, failed = seeds.build()
  assert not failed, failed
  return files


def test_cases_are_deterministic_and_checksummed(seed_files):
  factory = mutate.CaseFactory(seed_files, _SEED)
  again = mutate.CaseFactory(seed_files, _SEED)
  kinds = set()
  for i in range(60):
    name, data, edits, groups = factory.make(i)
    assert again.make(i) == (name, data, edits, groups)
    assert 1 <= len(edits) <= 3
    if name == "bind-source":   # a bind-source case: JSON, no checksums
      kinds.add("bind-source")
      continue
    kinds.update(g.rsplit(":", 1)[1] for g in groups)
    # Header and program checksums are right: Container verifies both.
    c = container.Container(data)
    msg = pb.Program.FromString(c.program)
    for blob in msg.blobs:
      if blob.offset + blob.length <= len(c.data):
        assert blob.crc32 == zlib.crc32(
            c.data[blob.offset:blob.offset + blob.length])
  assert {"scalar", "element", "repeated", "oneof"} <= kinds
  assert "bind-source" in kinds   # 5% of the cases


def test_fuzz_sample(tmp_path):
  summary = runner.run_campaign(cases=_CASES, seed=_SEED, workers=2,
                                out=str(tmp_path), timeout=20.0,
                                mem_gib=4.0, progress=False)
  report = runner.format_summary(summary)
  assert summary["cases"] == _CASES, report
  assert not summary["seeds_dropped"], report
  assert summary["failure_count"] == 0, report
  # Accepted programs were traced under grad, vmap and jvp, and the
  # structural mutations were all made.
  for stage in ("grad", "vmap", "jvp"):
    assert summary["transforms"].get(f"{stage}: ok", 0) > 0, report
  assert set(summary["structural"]) == set(structural.MUTATIONS), report
  assert set(summary["memory_peak_share"]) == {"load", "check"}, report


def test_harness_classifies_crashes(tmp_path, monkeypatch):
  """The machinery itself: a worker that aborts, segfaults, hangs, exits,
  runs out of memory or raises is a failure of the right class, the worker
  is replaced, and the next case still runs; a hang re-running a program
  whose own loop took a quarter of the timeout is the program's."""
  monkeypatch.setenv("JAXPR_IO_FUZZ_SELFTEST", "1")
  whats = ["abort", "segv", "hang", "exit", "memory", "exception", "budget",
           "ok", "rerun-hang-after-call-s=2.0",
           "rerun-hang-after-call-s=0.5"]
  cases = [runner.Case(w, w, f"SELFTEST:{w}".encode(), [], [])
           for w in whats]
  verdicts = {}
  campaign = runner.Campaign(out=str(tmp_path), workers=2, timeout=5.0,
                             mem_gib=2.0, progress=False)
  try:
    campaign.run(cases, lambda v: verdicts.__setitem__(v.case.id, v))
  finally:
    campaign.close()
  got = {w: (v.outcome, (v.failure or {}).get("cls"),
             (v.failure or {}).get("type")) for w, v in verdicts.items()}
  assert got == {
      "abort": ("failure", "abort-load", "SIGABRT"),
      "segv": ("failure", "abort-load", "SIGSEGV"),
      "hang": ("failure", "hang-load", "timeout 5s"),
      "exit": ("failure", "worker-exit-load", "exit 3"),
      "memory": ("failure", "memory-load", "MemoryError"),
      "exception": ("failure", "load-exception", "KeyError"),
      "budget": ("failure", "memory-budget-load", "over the memory budget"),
      "ok": ("rejected-load", None, None),   # not a jaxpr_io file
      # A stage re-running a loop whose own call took a quarter of the
      # timeout (5 s) or more hangs by the program's own loop; one whose
      # call was quick hangs by itself.
      "rerun-hang-after-call-s=2.0": ("call-timeout-loop", None, None),
      "rerun-hang-after-call-s=0.5": ("failure", "hang-to_exported",
                                      "timeout 5s"),
  }, got
  assert "tests/fuzz/worker.py" in verdicts["hang"].stderr  # the stack dump
  assert "_selftest" in verdicts["abort"].stderr


def test_structural_mutations(seed_files):
  """Each structural mutation applies to some seed, deterministically, and
  makes a well-framed file that differs from the seed."""
  made = {}
  for name, fn in structural.MUTATIONS.items():
    for seed_name in sorted(seed_files):
      data = seed_files[seed_name]
      c = container.Container(data)
      results = []
      for _ in range(2):
        msg = pb.Program.FromString(c.program)
        what = fn(msg, mutate.case_rng(_SEED, 0))
        results.append((what, msg.SerializeToString(deterministic=True)))
      assert results[0] == results[1], (name, seed_name)
      if results[0][0] is not None:
        assert results[0][1] != c.program
        made[name] = seed_name
        break
  assert set(made) == set(structural.MUTATIONS), made


def _no_batching_rule():
  import jax  # pylint: disable=import-outside-toplevel
  from jaxpr_io import compat  # pylint: disable=import-outside-toplevel
  p = compat.Primitive("fuzz_test_unbatchable")
  p.def_impl(lambda x: x)
  p.def_abstract_eval(lambda x: x)
  with pytest.raises(Exception) as info:
    jax.make_jaxpr(jax.vmap(p.bind))(np.ones((2, 3), np.float32))
  return info.value


def test_transform_errors_of_the_program_itself():
  """A primitive without a rule for a transform is the program's own limit;
  any other error after check=True is a failure."""
  assert transforms.own_limit(_no_batching_rule())
  assert not transforms.own_limit(AttributeError(
      "'int' object has no attribute 'spec'"))
  assert not transforms.own_limit(TypeError("unhashable type: 'list'"))
  # JAX's reverse mode refuses values in host memory, for a program it
  # traces itself as for a loaded one (fuzz campaign seed 103, case 8795).
  import jax  # pylint: disable=g-import-not-at-top
  from jax._src import core  # pylint: disable=g-import-not-at-top
  host = core.ShapedArray((6,), np.float32,
                          memory_space=core.MemorySpace.Host)
  with pytest.raises(Exception) as info:
    jax.make_jaxpr(jax.grad(lambda x: jax.numpy.sin(x).sum()))(host)
  assert transforms.own_limit(info.value), info.value
  # A scalar in another memory space meets an array: JAX traces the
  # function, and its vmap fails (campaign seed 103, case 16256).
  f = lambda a, v: jax.numpy.sin(v) * a
  any_space = core.MemorySpace.Any
  jax.make_jaxpr(f)(core.ShapedArray((), np.float32, memory_space=any_space),
                    core.ShapedArray((4,), np.float32))
  with pytest.raises(Exception) as info:
    jax.make_jaxpr(jax.vmap(f))(
        core.ShapedArray((2,), np.float32, memory_space=any_space),
        core.ShapedArray((2, 4), np.float32))
  assert transforms.own_limit(info.value), info.value


class _Original:
  """An original seed function, called as a loaded program is."""

  def __init__(self, fn, args, kwargs):
    import jax  # pylint: disable=import-outside-toplevel
    self.fn = fn
    self.out_avals = jax.tree_util.tree_leaves(
        jax.eval_shape(fn, *args, **kwargs))

  def __call__(self, *args, **kwargs):
    return self.fn(*args, **kwargs)


def _transform_outcome(stage, fun, args, kwargs) -> str:
  try:
    return transforms.STAGES[stage](fun, args, kwargs) or "ok"
  except Exception as e:  # pylint: disable=broad-except
    return type(e).__name__


@pytest.mark.parametrize("name", ["mlp", "scan", "while", "pallas",
                                  "composite", "callbacks", "run_state"])
def test_seed_transforms_match_the_originals(seed_files, name):
  """The reference for "the program's own limit": each seed (loaded from
  its file) traces under grad, vmap and jvp exactly where its original
  function does, and fails with the same exception type where it does not
  (a campaign counts a transform the seed cannot do as the program's own)."""
  import jaxpr_io  # pylint: disable=import-outside-toplevel
  from tests.fuzz import worker  # pylint: disable=import-outside-toplevel
  fn, args, kwargs = seeds.SEEDS[name]()
  prog = jaxpr_io.loads(seed_files[name], check=True)
  made = worker.make_call_args(prog)
  assert not isinstance(made, str), made
  for stage in transforms.STAGES:
    assert (_transform_outcome(stage, prog, made[0], made[1])
            == _transform_outcome(stage, _Original(fn, args, kwargs),
                                  made[0], made[1])), stage


@pytest.mark.parametrize("heavy", [None, *convert.HEAVY])
def test_the_converter_stage_runs_each_artifact(heavy):
  if heavy is not None and importlib.util.find_spec(
      "jax2onnx" if heavy == "to_onnx" else "tensorflow") is None:
    pytest.skip(f"{heavy} is not installed")
  x = np.linspace(0.5, 1.5, 6).astype(np.float32).reshape(2, 3)
  prog = jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(
      lambda a: (jnp.sin(a) * 2, jnp.sum(a, axis=0)), x)), check=True)
  made = {"args": (x,), "kwargs": {}, "mesh": None}
  stages = []
  outcomes = convert.run(prog, made, heavy,
                         lambda name, info: stages.append(name))
  assert outcomes == {"to_exported": "ok",
                      **({heavy: "ok"} if heavy else {})}, outcomes
  assert stages == ["to_exported", *([heavy] if heavy else [])]


def test_the_converter_stage_refuses_undeclared_types():
  declared = [jax.ShapeDtypeStruct((2, 3), np.float32)]
  convert._check_types("m", declared, [np.ones((2, 3), np.float32)])  # pylint: disable=protected-access
  for outs in ([np.ones((3,), np.float32)], [np.ones((2, 3), np.int32)],
               [np.ones((2, 3), np.float32)] * 2):
    with pytest.raises(transforms.UndeclaredType):
      convert._check_types("m", declared, outs)  # pylint: disable=protected-access


def test_bind_source_sample(tmp_path):
  """Bind-source cases (tests/fuzz/bind_source.py) through the real
  workers: every mutated checkpoint or .npz is refused with jaxpr_io's own
  one-line error or binds, nothing of the secret or the private checkpoint
  reaches the bound program, and sources whose links stay inside bind."""
  summary = runner.run_campaign(cases=40, seed=_SEED, workers=1,
                                out=str(tmp_path), timeout=30.0,
                                mem_gib=4.0, progress=False,
                                mutations=("bind-source",))
  report = runner.format_summary(summary)
  assert summary["cases"] == 40, report
  assert summary["failure_count"] == 0, report
  assert summary["outcomes"].get("bind-refused", 0) > 0, report
  assert summary["outcomes"].get("bind-ok", 0) > 0, report
  kinds = {k.split(":")[0] for k in summary["bind_source"]}
  assert kinds == {"zarr", "ocdbt", "npz"}, report


def test_bind_source_leak_is_detected(tmp_path, monkeypatch):
  """The leak check can fail: with jaxpr_io's confinement switched off in
  the worker (JAXPR_IO_FUZZ_SELFTEST), a chunk linked to the secret and an
  array directory linked into the private checkpoint are `bind-leak`s,
  and the same cases confined are refused."""
  from tests.fuzz import bind_source  # pylint: disable=import-outside-toplevel
  monkeypatch.setenv("JAXPR_IO_FUZZ_SELFTEST", "1")
  secret = [{"op": "zarray", "field": "compressor", "value": None,
             "desc": "raw chunks"},
            {"op": "link", "at": "params.w/0.0", "to": "secret",
             "desc": "chunk -> secret"}]
  private = [{"op": "link", "at": "params.w", "to": "private-params",
              "desc": "array -> private"}]
  cases = []
  for name, ops in (("secret", secret), ("private", private)):
    for mode in ("unconfined", "confined"):
      body = {"kind": "zarr", "ops": ops, "selftest": mode}
      cases.append(runner.Case(
          f"{name}-{mode}", "bind-source",
          bind_source.PREFIX + json.dumps(body).encode(), [], []))
  verdicts = {}
  campaign = runner.Campaign(out=str(tmp_path), workers=1, timeout=30.0,
                             mem_gib=4.0, progress=False)
  try:
    campaign.run(cases, lambda v: verdicts.__setitem__(v.case.id, v))
  finally:
    campaign.close()
  got = {k: (v.outcome, (v.failure or {}).get("cls"),
             (v.failure or {}).get("message", "")[:40])
         for k, v in verdicts.items()}
  assert got["secret-unconfined"][:2] == ("failure", "bind-leak"), got
  assert got["private-unconfined"][:2] == ("failure", "bind-leak"), got
  assert got["secret-confined"][0] == "bind-refused", got
  assert got["private-confined"][0] == "bind-refused", got
