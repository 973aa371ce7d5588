"""The fuzzer's worker: runs cases, one at a time, for the parent process.

    python -m tests.fuzz.worker [--mem-gib G]        # driven by tests.fuzz
    python -m tests.fuzz.worker --once CASE.jaxpr    # one case, in-process

Protocol: the parent writes one JSON line per case to stdin,
`{"id": ..., "path": ..., "timeout": seconds}`; the worker answers on its
original stdout (fd 1 is then pointed at /dev/null, so that programs that
print, such as `debug_print`, cannot corrupt the protocol) with JSON lines:
`{"ready": ...}` once after start-up, `{"id": ..., "stage": ...}` before
each stage, and `{"id": ..., "done": true, ...}` with the case's result.
Stderr is the parent's log file: `faulthandler` writes the Python stack
there on a fatal signal, and just before the parent's timeout.

Stages of one case (`run_case`):

  load    `loads(data)`, then `prog.closed_jaxpr` (the lazy blob checks)
  check   `loads(data, check=True)`; FormatError -> outcome "rejected"
  str     `str(prog)`, `repr(prog)`, `prog.signature()`
  dumps   `jaxpr_io.dumps(prog)`
  reload  `loads` of those bytes with `check=True` (and `closed_jaxpr`)
  call    `jax.jit(prog)(*args, **kwargs)` on ones (zeros for keys) of the
          input avals (under `checkify.checkify` for a program with
          checks), then `jax.block_until_ready`
  grad, vmap, jvp
          `jax.make_jaxpr` of each transform of the program, on the call's
          inputs (tests/fuzz/transforms.py); an error that says a
          primitive has no rule for the transform is the program's own
          (`transforms` in the result: "unsupported"), not a failure

In `load` and `check`, any exception but `FormatError` is a failure
(`load-exception`, `check-exception`); after a passed check, any exception
is a failure (`post-check-<stage>`); `MemoryError` anywhere is
`memory-<stage>`. Warnings are recorded, never failures. NaNs and
infinities in results are the program's own numerics: not failures.

The call is skipped (outcome "call-skipped", with a reason) when no inputs
can be made: a token input, symbolic dimensions that no small sizes satisfy,
an input whose aval is sharded on a mesh this process cannot build, or a
program with an aval over `_MAX_AVAL_BYTES` (a mutated dimension of 2**40
is a valid program too big to run, not a bug).
"""

from __future__ import annotations

import argparse
import faulthandler
import importlib
import json
import math
import os
import resource
import sys
import time
import traceback
import warnings

from tests.fuzz import convert
from tests.fuzz import transforms

_MAX_AVAL_BYTES = 64 << 20
_PKG_DIR = None   # jaxpr_io's directory, set on import of jaxpr_io
_LOOP_PRIMITIVES = ("while", "scan")


class HarnessError(Exception):
  """A program that passed check=True and cannot be called at all (its
  in_tree is not `(args, kwargs)` with string keyword names)."""


# ------------------------------------------------------------- tracebacks
def _frame_str(fs) -> str:
  return f"{_short_path(fs.filename)}:{fs.lineno} in {fs.name}"


def _short_path(filename: str) -> str:
  for marker in ("/site-packages/", "/work/main/"):
    if marker in filename:
      return filename.split(marker, 1)[1]
  if _PKG_DIR and filename.startswith(_PKG_DIR):
    return "jaxpr_io/" + filename[len(_PKG_DIR):].lstrip("/")
  return filename


def _is_lib(filename: str) -> bool:
  return "/jaxpr_io/" in filename and "/tests/" not in filename


def describe(exc: BaseException) -> dict:
  """Type, message, traceback and the frames used to cluster failures: the
  innermost frame in jaxpr_io and the innermost frame overall (the last
  exception of a chain: where it was raised)."""
  frames = traceback.extract_tb(exc.__traceback__)
  lib = [f for f in frames if _is_lib(f.filename)]
  outside = [f for f in frames if "/tests/fuzz/" not in f.filename]
  outside = outside or frames[-1:]
  msg = str(exc)
  return {
      "type": f"{type(exc).__module__}.{type(exc).__qualname__}"
              if type(exc).__module__ not in ("builtins", "__main__")
              else type(exc).__qualname__,
      "message": msg if len(msg) <= 4000 else msg[:4000] + "...",
      "lib_frame": _frame_str(lib[-1]) if lib else "",
      "last_frame": _frame_str(outside[-1]) if outside else "",
      "traceback": "".join(traceback.format_exception(
          type(exc), exc, exc.__traceback__))[-20000:],
  }


# ------------------------------------------------------------- the call
def _is_symbolic(d) -> bool:
  return not isinstance(d, int) and hasattr(d, "_get_vars")


def _walk_avals(closed):
  """Every aval of a closed jaxpr and its sub-jaxprs (each jaxpr once)."""
  seen = set()
  stack = [closed.jaxpr]
  while stack:
    jaxpr = stack.pop()
    if id(jaxpr) in seen:
      continue
    seen.add(id(jaxpr))
    for v in list(jaxpr.constvars) + list(jaxpr.invars):
      yield v.aval
    for eqn in jaxpr.eqns:
      for v in eqn.outvars:
        yield v.aval
      for p in eqn.params.values():
        stack.extend(_sub_jaxprs(p))


def _sub_jaxprs(value, depth=0):
  if depth > 4:
    return []
  if hasattr(value, "eqns") and hasattr(value, "invars"):
    return [value]
  inner = getattr(value, "jaxpr", None)
  if inner is not None and hasattr(inner, "eqns"):
    return [inner]
  if isinstance(value, (tuple, list)):
    out = []
    for v in value:
      out.extend(_sub_jaxprs(v, depth + 1))
    return out
  return []


def _primitives(closed) -> set:
  names = set()
  seen = set()
  stack = [closed.jaxpr]
  while stack:
    jaxpr = stack.pop()
    if id(jaxpr) in seen:
      continue
    seen.add(id(jaxpr))
    for eqn in jaxpr.eqns:
      names.add(eqn.primitive.name)
      for p in eqn.params.values():
        stack.extend(_sub_jaxprs(p))
  return names


def _nbytes(aval, env) -> int | None:
  shape = getattr(aval, "shape", None)
  if shape is None:
    return 0
  n = 1
  for d in shape:
    if _is_symbolic(d):
      try:
        d = int(d._evaluate(env))  # pylint: disable=protected-access
      except Exception:  # pylint: disable=broad-except
        return None
    n *= max(int(d), 0)
  try:
    itemsize = aval.dtype.itemsize
  except Exception:  # pylint: disable=broad-except
    itemsize = 8
  return n * max(itemsize, 1)


def _symbolic_env(prog, avals):
  """Small sizes for the symbolic dimension variables of the inputs that
  the program accepts (JAX's own solver checks them, with the program's
  constraints), or None."""
  from jaxpr_io.compat import symbolic  # pylint: disable=import-outside-toplevel
  names = sorted({v for a in avals for d in getattr(a, "shape", ())
                  if _is_symbolic(d) for v in d._get_vars()})  # pylint: disable=protected-access
  if not names:
    return {}
  candidates = [dict.fromkeys(names, v) for v in (2, 3, 4, 5, 8, 1, 16)]
  candidates += [{n: 2 + i for i, n in enumerate(names)},
                 {n: 2 + i for i, n in enumerate(reversed(names))}]
  for env in candidates:
    try:
      shapes = [tuple(int(d._evaluate(env)) if _is_symbolic(d) else int(d)  # pylint: disable=protected-access
                      for d in a.shape) for a in avals]
      if any(d < 0 for s in shapes for d in s):
        continue
      symbolic.solve_dims(avals, prog.in_tree, shapes)
    except Exception:  # pylint: disable=broad-except
      continue
    return env
  return None


def _mesh_for(aval):
  """(concrete mesh, spec) for an input aval sharded on a non-empty mesh,
  None for an unsharded one; raises if this process cannot build it."""
  import jax  # pylint: disable=import-outside-toplevel
  sharding = getattr(aval, "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or getattr(mesh, "empty", True):
    return None
  sizes = tuple(mesh.axis_sizes)
  if math.prod(sizes) > len(jax.devices()):
    raise ValueError("mesh larger than this process")
  concrete = jax.make_mesh(sizes, tuple(mesh.axis_names),
                           axis_types=tuple(mesh.axis_types))
  return concrete, sharding.spec


def make_call_args(prog):
  """(args, kwargs, mesh or None), or a str: why the call is skipped."""
  import jax  # pylint: disable=import-outside-toplevel
  import numpy as np  # pylint: disable=import-outside-toplevel
  avals = prog.in_avals
  for a in avals:
    if not (hasattr(a, "shape") and hasattr(a, "dtype")):
      return f"input-{type(a).__name__}"
  if not jax.config.jax_enable_x64 and any(
      getattr(a.dtype, "itemsize", 0) == 8
      and getattr(a.dtype, "kind", "") in ("i", "u", "f")
      for a in avals):
    # Without x64 no caller can make a 64-bit array: jaxpr_io's call
    # refuses what it gets with a one-line TypeError; the program runs
    # under `jax.enable_x64(True)` (tests/read_write/test_call_dtypes.py).
    return "x64-inputs"
  env = _symbolic_env(prog, avals)
  if env is None:
    return "symbolic-unsolved"
  for a in _walk_avals(prog.closed_jaxpr):
    size = _nbytes(a, env)
    if size is None:
      return "symbolic-inner"
    if size > _MAX_AVAL_BYTES:
      return "large-aval"
  leaves, mesh = [], None
  for a in avals:
    shape = tuple(int(d._evaluate(env)) if _is_symbolic(d) else int(d)  # pylint: disable=protected-access
                  for d in a.shape)
    dtype = a.dtype
    if jax.dtypes.issubdtype(dtype, jax.dtypes.prng_key):
      impl = dtype._impl  # pylint: disable=protected-access
      x = jax.random.wrap_key_data(
          np.zeros(shape + tuple(impl.key_shape), np.uint32), impl=impl)
    elif dtype == jax.dtypes.float0:
      x = np.zeros(shape, jax.dtypes.float0)
    else:
      x = np.ones(shape, dtype)
    try:
      placed = _mesh_for(a)
    except Exception:  # pylint: disable=broad-except
      return "sharded-input"
    if placed is not None:
      mesh, spec = placed
      try:
        x = jax.device_put(x, jax.sharding.NamedSharding(mesh, spec))
      except Exception:  # pylint: disable=broad-except
        return "sharded-input"
    leaves.append(x)
  tree = jax.tree_util.tree_unflatten(prog.in_tree, leaves)
  if not (isinstance(tree, tuple) and len(tree) == 2
          and isinstance(tree[0], (tuple, list))
          and isinstance(tree[1], dict)
          and all(isinstance(k, str) for k in tree[1])):
    raise HarnessError(
        f"the in_tree {prog.in_tree} is not (args tuple, kwargs dict with "
        "string keys): the program cannot be called")
  return tuple(tree[0]), dict(tree[1]), mesh


def call(prog, made_args: dict | None = None):
  """Runs the first call; returns None, or why it was skipped. Puts the
  inputs it made (`args`, `kwargs`, `mesh`) in `made_args`."""
  import jax  # pylint: disable=import-outside-toplevel
  from jaxpr_io.families import checkify as checks  # pylint: disable=import-outside-toplevel
  made = make_call_args(prog)
  if isinstance(made, str):
    return made
  args, kwargs, mesh = made
  if made_args is not None:
    made_args.update(args=args, kwargs=kwargs, mesh=mesh)
  ctx = mesh_context(mesh)
  fun = prog
  if checks.has_checks(prog.closed_jaxpr.jaxpr):
    # A program with checkify checks is called functionalized, as
    # `check=True` compiles it (and as its original must be).
    fun = checks.functionalized(prog)
  with ctx:
    out = jax.jit(fun)(*args, **kwargs)
    jax.block_until_ready(out)
  return None


def mesh_context(mesh):
  """The context a call of a program with inputs on `mesh` runs in."""
  import contextlib  # pylint: disable=import-outside-toplevel
  import jax  # pylint: disable=import-outside-toplevel
  if mesh is None:
    return contextlib.nullcontext()
  setter = getattr(jax, "set_mesh", None) or jax.sharding.use_mesh
  return setter(mesh)


def run_transform(prog, stage: str, made_args: dict) -> str | None:
  """Traces transform `stage` of the program (tests/fuzz/transforms.py) on
  the inputs its call was made with; returns why it was skipped, or None."""
  with mesh_context(made_args.get("mesh")):
    return transforms.STAGES[stage](prog, made_args["args"],
                                    made_args["kwargs"])


# ------------------------------------------------------------- memory
_BUDGET_SLACK = 64 << 20


def memory_budget(data: bytes) -> int:
  """The documented budget of an untrusted load (docs/trust.md): 16 times
  the file's size plus 64 MiB."""
  return 16 * len(data) + _BUDGET_SLACK


def _status_kib(field: str) -> int | None:
  try:
    with open("/proc/self/status") as f:
      for line in f:
        if line.startswith(field + ":"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return None


class Peak:
  """The peak resident memory a block adds (Linux: the high-water mark is
  reset through /proc/self/clear_refs); `grown` is None where that cannot
  be measured."""

  def __enter__(self):
    self.grown = None
    try:
      with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
      self.base = _status_kib("VmRSS")
    except OSError:
      self.base = None
    return self

  def __exit__(self, *exc):
    hwm = _status_kib("VmHWM")
    if self.base is not None and hwm is not None:
      self.grown = max(0, hwm - self.base)
    return False


def over_budget(result: dict, stage: str, grown: int, budget: int) -> dict:
  result["outcome"] = "failure"
  mib = lambda n: f"{n / 2**20:.1f} MiB"  # noqa: E731
  result["failure"] = {
      "cls": f"memory-budget-{stage}", "stage": stage,
      "type": "over the memory budget",
      "message": f"{stage} grew the resident memory by {mib(grown)}, over "
                 f"the budget of {mib(budget)}",
      "lib_frame": "", "last_frame": "", "traceback": ""}
  return result


# ------------------------------------------------------------- one case
def _selftest(data: bytes, report) -> None:
  """Misbehaves on request, for the tests of the harness itself (only with
  JAXPR_IO_FUZZ_SELFTEST set): a case `SELFTEST:<what>`."""
  if not data.startswith(b"SELFTEST:"):
    return
  what = data[len(b"SELFTEST:"):].decode()
  if what.startswith("rerun-hang-after-call-s="):
    # A later stage re-running a looping program whose own call took the
    # given seconds, and not returning.
    report("to_exported", {"loops": True,
                           "call_s": float(what.partition("=")[2])})
    time.sleep(3600)
  if what == "abort":
    os.abort()
  if what == "segv":
    import ctypes  # pylint: disable=import-outside-toplevel
    ctypes.string_at(0)
  if what == "hang":
    time.sleep(3600)
  if what == "exit":
    os._exit(3)  # pylint: disable=protected-access
  if what == "memory":
    bytearray(1 << 40)
  if what == "budget":
    # 256 MiB written (so resident), freed before the load goes on: over
    # the budget of a tiny file, under the address-space limit.
    filled = b"\x01" * (256 << 20)
    del filled
  if what == "exception":
    raise KeyError("selftest")


def run_case(data: bytes, report=lambda stage, info: None, *,
             seed_unsupported=(), baseline: bool = False) -> dict:
  """Runs the stages on one case; returns the result (see module doc).
  `seed_unsupported`: the transform stages the case's unmutated seed
  cannot do (an error there is the program's own); `baseline`: the case is
  an unmutated seed, whose transform errors are recorded, not failures."""
  if data.startswith(b"BINDSRC:"):
    # A bind-source case (tests/fuzz/bind_source.py), its own stages.
    from tests.fuzz import bind_worker  # pylint: disable=import-outside-toplevel
    return bind_worker.run_case(data, report, describe=describe, peak=Peak)
  import jaxpr_io  # pylint: disable=import-outside-toplevel
  FormatError = jaxpr_io.FormatError
  result = {"outcome": None, "warnings": {}}
  stage = None

  def fail(cls, exc):
    result["outcome"] = "failure"
    result["failure"] = dict(describe(exc), stage=stage, cls=cls)
    return result

  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    try:
      # ------------------------------------------------ load
      stage = "load"
      report(stage, {})
      budget = memory_budget(data)
      result["memory"] = {"budget": budget}
      try:
        with Peak() as peak:
          if os.environ.get("JAXPR_IO_FUZZ_SELFTEST"):
            _selftest(data, report)
          prog = jaxpr_io.loads(data)
          prog.closed_jaxpr  # pylint: disable=pointless-statement
        load_ok = True
      except FormatError as e:
        load_ok = False
        result["load_error"] = str(e)[:300]
      except MemoryError as e:
        return fail("memory-load", e)
      except BaseException as e:  # pylint: disable=broad-except
        return fail("load-exception", e)
      result["memory"]["load"] = peak.grown
      if peak.grown is not None and peak.grown > budget:
        return over_budget(result, stage, peak.grown, budget)
      # ------------------------------------------------ check
      stage = "check"
      report(stage, {})
      try:
        with Peak() as peak:
          prog = jaxpr_io.loads(data, check=True)
      except FormatError as e:
        result["memory"]["check"] = peak.grown
        if peak.grown is not None and peak.grown > budget:
          return over_budget(result, stage, peak.grown, budget)
        result["outcome"] = "rejected-load" if not load_ok else (
            "rejected-check")
        result["check_error"] = str(e)[:300]
        return result
      except MemoryError as e:
        return fail("memory-check", e)
      except BaseException as e:  # pylint: disable=broad-except
        return fail("check-exception", e)
      result["memory"]["check"] = peak.grown
      if peak.grown is not None and peak.grown > budget:
        return over_budget(result, stage, peak.grown, budget)
      if not load_ok:
        result["check_passed_after_load_rejected"] = True
      # ------------------------------------------------ after the check
      made_args: dict = {}
      result["transforms"] = {}
      # What a stage that runs the program again (the transformations, the
      # converters' calls) reports: whether it loops and how long its own
      # call took (see runner.Campaign._hung).
      own_run: dict = {}
      for stage in ("str", "dumps", "reload", "call", *transforms.STAGES):
        info = dict(own_run)
        if stage == "call":
          try:
            info["loops"] = bool(_LOOP_PRIMITIVES and (
                _primitives(prog.closed_jaxpr) & set(_LOOP_PRIMITIVES)))
          except Exception:  # pylint: disable=broad-except
            info["loops"] = False
          call_started = time.monotonic()
        report(stage, info)
        try:
          if stage == "str":
            str(prog)
            repr(prog)
            prog.signature()
          elif stage == "dumps":
            redumped = jaxpr_io.dumps(prog)
          elif stage == "reload":
            again = jaxpr_io.loads(redumped, check=True)
            again.closed_jaxpr  # pylint: disable=pointless-statement
            result["redump_differs"] = jaxpr_io.dumps(again) != redumped
          elif stage == "call":
            skipped = call(prog, made_args)
            own_run = {"loops": info["loops"],
                       "call_s": round(time.monotonic() - call_started, 3)}
            if skipped:
              result["outcome"] = "call-skipped"
              result["skip_reason"] = skipped
              return result
          else:
            skipped = run_transform(prog, stage, made_args)
            result["transforms"][stage] = (
                f"skipped: {skipped}" if skipped else "ok")
        except MemoryError as e:
          return fail(f"memory-{stage}", e)
        except BaseException as e:  # pylint: disable=broad-except
          if stage == "call" and _callback_own_error(e):
            result["outcome"] = "call-callback-error"
            result["callback_error"] = str(e)[-300:]
            return result
          if stage in transforms.STAGES and (
              baseline or stage in seed_unsupported
              or transforms.own_limit(e)):
            # The primitive's own limit (no rule for the transform).
            result["transforms"][stage] = "unsupported"
            result.setdefault("transform_unsupported", {})[stage] = (
                f"{type(e).__name__}: {str(e)[:200]}")
            continue
          return fail(f"post-check-{stage}", e)
      # ------------------------------------------------ converters
      stage = "convert"

      def announce(name, info):
        nonlocal stage
        stage = name
        report(name, {**own_run, **info})
      try:
        result["converters"] = convert.run(prog, made_args,
                                           convert.heavy_for(data), announce)
      except MemoryError as e:
        return fail(f"memory-{stage}", e)
      except BaseException as e:  # pylint: disable=broad-except
        return fail(f"post-check-{stage}", e)
      result["outcome"] = "accepted"
      return result
    finally:
      for w in caught:
        name = w.category.__name__
        result["warnings"][name] = result["warnings"].get(name, 0) + 1


# What a registered host function raises, or the wrong shape or dtype it
# returns for the operands a (mutated) program passes it, is the program's
# own behaviour, like its numerics: a file may pass any operands to a
# callback the loading process registered, and no loader can know what the
# function accepts. Errors of the callback machinery itself (unflattening
# the operands with the stored in_tree, ...) are not in this list and stay
# failures.
_CALLBACK_OWN = ("Incorrect output shape for return value",
                 "Incorrect output dtype for return value",
                 "tests/fuzz/hostfns.py")


def _callback_own_error(e: BaseException) -> bool:
  text = str(e)
  return "CpuCallback error" in text and any(m in text for m in _CALLBACK_OWN)


# ------------------------------------------------------------- the loop
def _warm_up() -> None:
  """Imports every primitive family and JAX module a file may name, and
  compiles once, before the first case: that is not the cost of a case
  (the memory budget's measure)."""
  import jax  # pylint: disable=import-outside-toplevel
  import jax.numpy as jnp  # pylint: disable=import-outside-toplevel
  from jaxpr_io import families  # pylint: disable=import-outside-toplevel
  from jaxpr_io.codec import registry  # pylint: disable=import-outside-toplevel
  jax.block_until_ready(jax.jit(lambda x: jnp.sin(x) @ x)(jnp.ones((2, 2))))
  families.load_all()
  registry.PRIMITIVES.all()
  # The converters' runtimes (tests/fuzz/convert.py), where installed.
  for name in ("tensorflow", "jax2onnx", "onnxruntime", "ai_edge_litert"):
    try:
      importlib.import_module(name)
    except ImportError:
      pass


def _serve(proto, mem_gib: float) -> None:
  global _PKG_DIR
  import jax  # pylint: disable=import-outside-toplevel
  import jaxpr_io  # pylint: disable=import-outside-toplevel
  from tests.fuzz import hostfns  # pylint: disable=import-outside-toplevel
  _PKG_DIR = os.path.dirname(os.path.abspath(jaxpr_io.__file__))
  hostfns.register()
  _warm_up()
  if mem_gib > 0:
    with open("/proc/self/status") as f:
      vm = next(int(line.split()[1]) * 1024 for line in f
                if line.startswith("VmSize:"))
    limit = vm + int(mem_gib * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

  def send(obj):
    proto.write(json.dumps(obj) + "\n")
    proto.flush()

  send({"ready": True, "pid": os.getpid(), "jax": jax.__version__})
  for line in sys.stdin:
    request = json.loads(line)
    case_id = request["id"]
    with open(request["path"], "rb") as f:
      data = f.read()
    timeout = float(request.get("timeout", 20))
    print(f"=== case {case_id}", file=sys.stderr, flush=True)
    faulthandler.dump_traceback_later(max(timeout - 2.0, 0.5), exit=False)
    start = time.monotonic()
    try:
      result = run_case(
          data, lambda stage, info: send(dict(info, id=case_id, stage=stage)),
          seed_unsupported=tuple(request.get("seed_unsupported", ())),
          baseline=bool(request.get("baseline")))
    finally:
      faulthandler.cancel_dump_traceback_later()
    result.update(id=case_id, done=True,
                  seconds=round(time.monotonic() - start, 4))
    send(result)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(prog="python -m tests.fuzz.worker")
  parser.add_argument("--mem-gib", type=float, default=4.0)
  parser.add_argument("--once", metavar="CASE",
                      help="run one case file in this process and print the "
                           "result")
  parser.add_argument("--seed-unsupported", default="", metavar="STAGES",
                      help="with --once: the transforms (grad,vmap,jvp) the "
                           "case's seed cannot do, as the campaign passes "
                           "them")
  args = parser.parse_args(argv)
  os.environ.setdefault("JAX_TRACEBACK_FILTERING", "off")
  if args.once:
    global _PKG_DIR
    import jaxpr_io  # pylint: disable=import-outside-toplevel
    from tests.fuzz import hostfns  # pylint: disable=import-outside-toplevel
    _PKG_DIR = os.path.dirname(os.path.abspath(jaxpr_io.__file__))
    hostfns.register()
    _warm_up()
    with open(args.once, "rb") as f:
      result = run_case(f.read(), lambda stage, info: print(
          f"-- stage {stage} {info or ''}", file=sys.stderr),
                        seed_unsupported=tuple(
                            s for s in args.seed_unsupported.split(",") if s))
    failure = result.pop("failure", None)
    print(json.dumps(result, indent=1))
    if failure:
      print(failure.pop("traceback"))
      print(json.dumps(failure, indent=1))
      return 1
    return 0
  proto = os.fdopen(os.dup(1), "w")
  devnull = os.open(os.devnull, os.O_WRONLY)
  os.dup2(devnull, 1)
  os.close(devnull)
  faulthandler.enable(file=sys.stderr, all_threads=True)
  _serve(proto, args.mem_gib)
  return 0


if __name__ == "__main__":
  sys.exit(main())
