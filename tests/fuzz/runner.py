"""The campaign: seeds, mutated cases, a pool of worker subprocesses, the
verdicts, and the summary with failure clusters.

The parent builds the seeds, runs each unmutated through a worker (a seed
that fails there is dropped and reported: the fuzzer cannot use it), then
generates case i from `mutate.case_rng(seed, i)` (so a campaign is
reproducible: same seed, same JAX, same cases) and hands it to the next
idle worker as a file path. Each worker imports JAX once and runs many
cases; the parent

  * kills a worker whose case runs past `timeout` seconds: a "hang" of the
    stage the worker last reported (failure `hang-<stage>`), except in the
    call stage of a program with a `while` or `scan` loop, where a mutated
    trip count (`i < 8` made `i < 2**31-1`) is the program's own
    behaviour: outcome "call-timeout-loop", counted and kept, not a failure;
    the same in a later stage that runs such a program again (a
    transformation, a converter's call of its artifact) when the program's
    own call took a quarter of `timeout` or more: that stage runs the same
    loop, after a compile;
    so is an error that a registered host callback raises (or a wrong
    result shape it returns) on the operands a mutated program passes it:
    outcome "call-callback-error" (see worker._CALLBACK_OWN);
  * notices a worker killed by a signal (SIGSEGV, SIGABRT, SIGKILL from the
    kernel, ...): failure `abort-<stage>`; and a worker that exits on its
    own: `worker-exit-<stage>`;
  * restarts workers after such deaths, and every `recycle` cases, so that
    no state leaks across many cases.

Every failure's case bytes are kept in OUT/<class>/case-<id>.jaxpr, with a
.txt beside it (seed, edits, exception, traceback, the worker's stderr
tail). Failures are clustered by (class, exception type, innermost frame in
jaxpr_io, innermost frame overall); OUT/summary.json has the counts.
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import platform
import re
import selectors
import shlex
import signal
import subprocess
import sys
import time

from tests.fuzz import mutate

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
_READY_TIMEOUT = 240.0
_STDERR_TAIL = 12000


@dataclasses.dataclass
class Case:
  id: str
  seed_name: str
  data: bytes
  edits: list
  groups: list
  # Transform stages the seed itself cannot do; a seed's own case: None
  # (a baseline run, which records them).
  seed_unsupported: tuple | None = ()


@dataclasses.dataclass
class Verdict:
  case: Case
  outcome: str                   # accepted, rejected-*, call-skipped,
  failure: dict | None = None    # call-timeout-loop, failure
  result: dict | None = None
  stderr: str = ""


def _worker_env() -> dict:
  env = dict(os.environ)
  flags = env.get("XLA_FLAGS", "")
  for flag in ("--xla_force_host_platform_device_count=8",
               "--xla_cpu_multi_thread_eigen=false"):
    if flag.split("=")[0] not in flags:
      flags = f"{flags} {flag}".strip()
  env["XLA_FLAGS"] = flags
  env.setdefault("JAX_PLATFORMS", "cpu")
  for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    env.setdefault(var, "1")
  env["PYTHONPATH"] = os.pathsep.join(
      p for p in (REPO, env.get("PYTHONPATH", "")) if p)
  env["PYTHONFAULTHANDLER"] = "1"
  # Full tracebacks: JAX otherwise hides its own frames, which the
  # clusters are made of.
  env["JAX_TRACEBACK_FILTERING"] = "off"
  env.pop("PYTEST_CURRENT_TEST", None)
  return env


def _worker_env_in(workdir: str) -> dict:
  env = _worker_env()
  # Where a worker builds its bind-source world (tests/fuzz/bind_source.py).
  env["JAXPR_IO_FUZZ_TMP"] = workdir
  return env


class Worker:
  """One worker subprocess and the case it is running."""

  def __init__(self, slot: int, workdir: str, mem_gib: float,
               python: str, sel: selectors.BaseSelector):
    self.slot = slot
    self.workdir = workdir
    self.mem_gib = mem_gib
    self.python = python
    self.sel = sel
    self.generation = 0
    self.proc = None

  def start(self) -> None:
    self.generation += 1
    self.log_path = os.path.join(self.workdir, f"worker{self.slot}.log")
    self.log = open(self.log_path, "wb")
    self.proc = subprocess.Popen(
        [self.python, "-m", "tests.fuzz.worker", "--mem-gib",
         str(self.mem_gib)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log,
        cwd=REPO, env=_worker_env_in(self.workdir), start_new_session=True)
    os.set_blocking(self.proc.stdout.fileno(), False)
    self.sel.register(self.proc.stdout, selectors.EVENT_READ, self)
    self.buf = b""
    self.ready = False
    self.started = time.monotonic()
    self.case = None
    self.deadline = None
    self.stage = None
    self.stage_info = {}
    self.log_offset = 0
    self.done_count = 0
    self.case_path = os.path.join(self.workdir, f"case-w{self.slot}.jaxpr")

  def send(self, case: Case, timeout: float) -> None:
    with open(self.case_path, "wb") as f:
      f.write(case.data)
    self.log.flush()
    self.log_offset = os.path.getsize(self.log_path)
    self.case = case
    self.stage = "start"
    self.stage_info = {}
    self.deadline = time.monotonic() + timeout
    line = json.dumps({"id": case.id, "path": self.case_path,
                       "timeout": timeout,
                       "baseline": case.seed_unsupported is None,
                       "seed_unsupported": list(
                           case.seed_unsupported or ())}) + "\n"
    self.proc.stdin.write(line.encode())
    self.proc.stdin.flush()

  def read_lines(self):
    """(lines, eof)."""
    lines, eof = [], False
    while True:
      try:
        chunk = os.read(self.proc.stdout.fileno(), 65536)
      except BlockingIOError:
        break
      if not chunk:
        eof = True
        break
      self.buf += chunk
    while b"\n" in self.buf:
      line, self.buf = self.buf.split(b"\n", 1)
      if line.strip():
        try:
          lines.append(json.loads(line))
        except ValueError:
          pass   # not the protocol's: ignore
    return lines, eof

  def stderr_tail(self) -> str:
    try:
      with open(self.log_path, "rb") as f:
        f.seek(self.log_offset)
        text = f.read().decode("utf-8", "replace")
    except OSError:
      return ""
    return text[-_STDERR_TAIL:]

  def stop(self, kill: bool) -> int | None:
    """Stops the process; returns its exit status (negative: a signal)."""
    if self.proc is None:
      return None
    try:
      self.sel.unregister(self.proc.stdout)
    except (KeyError, ValueError):
      pass
    if kill:
      try:
        os.killpg(self.proc.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
    else:
      try:
        self.proc.stdin.close()
      except OSError:
        pass
    try:
      rc = self.proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
      try:
        os.killpg(self.proc.pid, signal.SIGKILL)
      except ProcessLookupError:
        pass
      rc = self.proc.wait()
    for f in (self.proc.stdout, self.proc.stdin):
      try:
        f.close()
      except (OSError, BrokenPipeError):
        pass
    self.log.close()
    self.proc = None
    return rc


# ------------------------------------------------------------ stderr parsing
_FRAME = re.compile(r'File "([^"]+)", line (\d+) in (\S+)')
_NATIVE = re.compile(
    r"(Check failed[^\n]*|terminate called[^\n]*|what\(\):[^\n]*"
    r"|Fatal Python error:[^\n]*|F\d{4} [^\n]*)")


def _short(filename: str) -> str:
  for marker in ("/site-packages/", REPO + "/"):
    if marker in filename:
      return filename.split(marker, 1)[1]
  return filename


def frames_from_dump(text: str) -> tuple[str, str]:
  """(innermost jaxpr_io frame, innermost frame) of the worker's main
  thread in a faulthandler dump (frames are listed most recent first)."""
  blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", text)
  main = [b for b in blocks if "tests/fuzz/worker.py" in b]
  block = main[-1] if main else text
  frames = _FRAME.findall(block)
  frames = [f for f in frames if "/tests/fuzz/" not in f[0]] or frames
  if not frames:
    return "", ""
  lib = [f for f in frames if "/jaxpr_io/" in f[0]]
  fmt = lambda f: f"{_short(f[0])}:{f[1]} in {f[2]}"  # noqa: E731
  return (fmt(lib[0]) if lib else ""), fmt(frames[0])


def native_message(text: str) -> str:
  m = _NATIVE.findall(text)
  return m[0].strip()[:300] if m else ""


# ------------------------------------------------------------ the campaign
class Campaign:
  def __init__(self, *, out: str, workers: int = 2, timeout: float = 20.0,
               mem_gib: float = 4.0, keep: int = 1000, recycle: int = 400,
               python: str | None = None, progress: bool = True):
    self.out = os.path.abspath(out)
    self.n_workers = max(1, workers)
    self.timeout = timeout
    self.mem_gib = mem_gib
    self.keep = keep
    self.recycle = recycle
    self.python = python or sys.executable
    self.progress = progress
    self.workdir = os.path.join(self.out, ".work")
    os.makedirs(self.workdir, exist_ok=True)
    self.sel = selectors.DefaultSelector()
    self.workers = [Worker(i, self.workdir, mem_gib, self.python, self.sel)
                    for i in range(self.n_workers)]
    self.restarts = collections.Counter()
    self.startup_failures = 0

  # ---------------------------------------------------------- workers
  def _start(self, w: Worker) -> None:
    w.start()

  def _restart(self, w: Worker, why: str, kill: bool = True) -> int | None:
    rc = w.stop(kill=kill)
    self.restarts[why] += 1
    self._start(w)
    return rc

  def close(self) -> None:
    for w in self.workers:
      if w.proc is not None:
        w.stop(kill=w.case is not None)

  def run(self, cases, on_verdict) -> None:
    """Runs every case of the iterator `cases`; calls on_verdict(Verdict)."""
    cases = iter(cases)
    exhausted = False
    for w in self.workers:
      if w.proc is None:
        self._start(w)
    while True:
      # Hand out cases to idle, ready workers.
      for w in self.workers:
        if w.ready and w.case is None and not exhausted:
          if w.done_count >= self.recycle:
            self._restart(w, "recycled", kill=False)
            continue
          case = next(cases, None)
          if case is None:
            exhausted = True
          else:
            try:
              w.send(case, self.timeout)
            except (BrokenPipeError, OSError):
              # Died between cases: run this case on the restarted worker.
              self._restart(w, "died-idle")
              cases = _prepend(case, cases)
      if exhausted and all(w.case is None for w in self.workers):
        return
      now = time.monotonic()
      deadlines = [w.deadline for w in self.workers if w.case is not None]
      wait = min([d - now for d in deadlines] + [1.0])
      for key, _ in self.sel.select(timeout=max(wait, 0.01)):
        w = key.data
        lines, eof = w.read_lines()
        for msg in lines:
          self._message(w, msg, on_verdict)
        if eof and w.proc is not None:
          self._died(w, on_verdict)
      now = time.monotonic()
      for w in self.workers:
        if w.case is not None and now > w.deadline:
          self._hung(w, on_verdict)
        elif not w.ready and now - w.started > _READY_TIMEOUT:
          self.startup_failures += 1
          tail = w.stderr_tail()
          if self.startup_failures > 3:
            raise RuntimeError(f"workers do not start:\n{tail}")
          self._restart(w, "startup-timeout")

  def _message(self, w: Worker, msg: dict, on_verdict) -> None:
    if msg.get("ready"):
      w.ready = True
      self.startup_failures = 0
      return
    if w.case is None or msg.get("id") != w.case.id:
      return
    if "stage" in msg:
      w.stage = msg["stage"]
      w.stage_info = msg
      if w.deadline is not None and msg.get("extend"):
        # A stage known to take longer (a heavy converter, convert.py).
        w.deadline += float(msg["extend"])
      if msg.get("restart_clock"):
        # A stage with its own timeout (a bind-source case builds its
        # world at first use, then runs the case).
        w.deadline = time.monotonic() + self.timeout
      return
    if msg.get("done"):
      case = w.case
      w.case = None
      w.deadline = None
      w.done_count += 1
      failure = msg.pop("failure", None)
      stderr = w.stderr_tail() if failure else ""
      on_verdict(Verdict(case, msg["outcome"], failure, msg, stderr))

  def _died(self, w: Worker, on_verdict) -> None:
    case, stage = w.case, w.stage
    tail = w.stderr_tail()
    was_ready = w.ready
    rc = self._restart(w, "died")
    if case is None:
      if not was_ready:
        self.startup_failures += 1
        if self.startup_failures > 3:
          raise RuntimeError(f"workers do not start (exit {rc}):\n{tail}")
      return
    if rc is not None and rc < 0:
      try:
        signame = signal.Signals(-rc).name
      except ValueError:
        signame = f"signal {-rc}"
      cls, typ = f"abort-{stage}", signame
    else:
      cls, typ = f"worker-exit-{stage}", f"exit {rc}"
    lib, last = frames_from_dump(tail)
    failure = {"cls": cls, "stage": stage, "type": typ,
               "message": native_message(tail) or typ,
               "lib_frame": lib, "last_frame": last, "traceback": ""}
    on_verdict(Verdict(case, "failure", failure, None, tail))

  def _hung(self, w: Worker, on_verdict) -> None:
    case, stage, info = w.case, w.stage, dict(w.stage_info)
    tail = w.stderr_tail()
    self._restart(w, "killed-timeout")
    lib, last = frames_from_dump(tail)
    if info.get("loops") and (
        stage == "call" or info.get("call_s", 0) >= self.timeout / 4):
      on_verdict(Verdict(case, "call-timeout-loop", None,
                         {"stage": stage, "lib_frame": lib,
                          "last_frame": last}, tail))
      return
    failure = {"cls": f"hang-{stage}", "stage": stage,
               "type": f"timeout {self.timeout:g}s",
               "message": f"no result within {self.timeout:g} s",
               "lib_frame": lib, "last_frame": last, "traceback": ""}
    on_verdict(Verdict(case, "failure", failure, None, tail))


def _prepend(item, iterator):
  yield item
  yield from iterator


# ------------------------------------------------------------ bookkeeping
class Tally:
  """Counts, clusters and kept examples of one campaign."""

  def __init__(self, out: str, keep: int, seed: int):
    self.out = out
    self.keep = keep
    self.seed = seed
    self.outcomes = collections.Counter()
    self.failures = collections.Counter()
    self.skips = collections.Counter()
    self.rejections = collections.Counter()
    self.per_seed = collections.defaultdict(collections.Counter)
    self.warnings = collections.Counter()
    self.info = collections.Counter()
    self.groups = collections.Counter()
    self.group_outcomes = collections.defaultdict(collections.Counter)
    self.clusters: dict[tuple, dict] = {}
    self.kept = collections.Counter()
    self.transforms = collections.Counter()
    self.unsupported = collections.Counter()
    self.converters = collections.Counter()
    self.memory_peak = {}   # stage -> (largest share of the budget, case)
    self.done = 0

  def cluster_key(self, f: dict) -> tuple:
    return (f["cls"], f["type"], f.get("lib_frame", ""),
            f.get("last_frame", ""))

  def _save(self, sub: str, v: Verdict, extra: str) -> str:
    d = os.path.join(self.out, sub)
    os.makedirs(d, exist_ok=True)
    base = os.path.join(d, f"case-{v.case.id}")
    with open(base + ".jaxpr", "wb") as f:
      f.write(v.case.data)
    lines = [
        f"case: {v.case.id} (campaign seed {self.seed})",
        f"seed program: {v.case.seed_name}",
        "edits:", *(f"  {e}" for e in v.case.edits),
        f"outcome: {v.outcome}",
        extra,
        f"replay: {sys.executable} -m tests.fuzz.worker --once "
        f"{shlex.quote(base + '.jaxpr')}" + (
            f" --seed-unsupported {','.join(v.case.seed_unsupported)}"
            if v.case.seed_unsupported else ""),
    ]
    if v.stderr.strip():
      lines += ["", "---- worker stderr (tail) ----", v.stderr]
    with open(base + ".txt", "w") as f:
      f.write("\n".join(lines) + "\n")
    return base + ".jaxpr"

  def add(self, v: Verdict) -> None:
    self.done += 1
    self.outcomes[v.outcome] += 1
    self.per_seed[v.case.seed_name][v.outcome] += 1
    self.groups.update(v.case.groups)
    for group in set(v.case.groups):
      self.group_outcomes[group][v.outcome] += 1
    r = v.result or {}
    for name, n in (r.get("warnings") or {}).items():
      self.warnings[name] += n
    for stage, status in (r.get("transforms") or {}).items():
      self.transforms[f"{stage}: {status}"] += 1
    for stage, why in (r.get("transform_unsupported") or {}).items():
      self.unsupported[f"{stage}: {_normalize(why)}"] += 1
      if self.kept["transform-unsupported"] < 20:
        self.kept["transform-unsupported"] += 1
        self._save("_info/transform-unsupported", v, f"{stage}: {why}")
    for name, status in (r.get("converters") or {}).items():
      kind = status.split(":", 1)[0]
      self.converters[f"{name}: {kind}"] += 1
      if kind in ("mismatch", "refused", "runtime-lacks") and (
          self.kept[f"convert-{kind}"] < 20):
        self.kept[f"convert-{kind}"] += 1
        self._save(f"_info/convert-{kind}", v, f"{name}: {status}")
    memory = r.get("memory") or {}
    for stage in ("load", "check"):
      grown = memory.get(stage)
      if grown is not None and memory.get("budget"):
        share = grown / memory["budget"]
        if share > self.memory_peak.get(stage, (0.0, None))[0]:
          self.memory_peak[stage] = (share, v.case.id)
    if v.outcome == "bind-refused":
      self.rejections[f"bind: {_normalize(r['bind'].get('error', ''))}"] += 1
    if r.get("bind", {}).get("skipped"):
      self.info["bind_ops_skipped"] += len(r["bind"]["skipped"])
    if v.outcome == "call-skipped":
      self.skips[r.get("skip_reason", "?")] += 1
    if v.outcome.startswith("rejected-"):
      why = r.get("check_error" if v.outcome == "rejected-check"
                  else "load_error") or ""
      self.rejections[f"{v.outcome[9:]}: {_normalize(why)}"] += 1
    for flag in ("redump_differs", "check_passed_after_load_rejected"):
      if r.get(flag):
        self.info[flag] += 1
        if self.kept[flag] < 5:
          self.kept[flag] += 1
          self._save(f"_info/{flag}", v, "")
    if v.outcome == "call-timeout-loop":
      if self.kept["call-timeout-loop"] < 10:
        self.kept["call-timeout-loop"] += 1
        self._save("_info/call-timeout-loop", v,
                   f"where: {r.get('lib_frame')} / {r.get('last_frame')}")
    if v.outcome == "call-callback-error":
      if self.kept["call-callback-error"] < 10:
        self.kept["call-callback-error"] += 1
        self._save("_info/call-callback-error", v,
                   f"callback error: {r.get('callback_error')}")
    if v.outcome != "failure":
      return
    f = v.failure
    self.failures[f["cls"]] += 1
    key = self.cluster_key(f)
    cluster = self.clusters.get(key)
    if cluster is None:
      cluster = self.clusters[key] = {
          "class": f["cls"], "stage": f["stage"], "type": f["type"],
          "lib_frame": f.get("lib_frame", ""),
          "last_frame": f.get("last_frame", ""),
          "message": _headline(f.get("message", "")), "count": 0,
          "example": None, "seeds": collections.Counter()}
    cluster["count"] += 1
    cluster["seeds"][v.case.seed_name] += 1
    if self.kept[key] < self.keep:
      self.kept[key] += 1
      extra = "\n".join([
          f"class: {f['cls']}", f"stage: {f['stage']}",
          f"exception: {f['type']}: {f.get('message', '')}",
          f"innermost jaxpr_io frame: {f.get('lib_frame', '')}",
          f"innermost frame: {f.get('last_frame', '')}",
          "", f.get("traceback", "")])
      path = self._save(f["cls"], v, extra)
      if cluster["example"] is None:
        cluster["example"] = path

  def sorted_clusters(self) -> list:
    out = sorted(self.clusters.values(), key=lambda c: (-c["count"],
                                                        c["class"]))
    return [dict(c, seeds=dict(c["seeds"].most_common())) for c in out]


def _headline(message: str) -> str:
  """The telling line of an exception message: its last line when it
  embeds a traceback (a host callback's error inside a JaxRuntimeError),
  else the message."""
  if "Traceback (most recent call last)" in message:
    lines = [l for l in message.strip().splitlines() if l.strip()]
    errors = [l for l in lines if _ERROR_LINE.match(l)]
    return (lines[0][:120] + " ... " + (errors or lines)[-1])[:500]
  return message[:500]


_ERROR_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception)(:|$)")


def _normalize(message: str) -> str:
  """A rejection message without its numbers and quoted names, to count
  which checks reject the cases."""
  message = message.replace("<bytes>: ", "")
  message = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", message)
  message = re.sub(r"\d+", "N", message)
  return message[:90]


def _progress_line(t: Tally, total: int, start: float) -> str:
  rate = t.done / max(time.monotonic() - start, 1e-9)
  fails = sum(t.failures.values())
  return (f"[{t.done}/{total}] {rate:.1f} cases/s, {fails} failures, "
          f"{t.outcomes['accepted']} accepted, "
          f"{t.outcomes['rejected-load'] + t.outcomes['rejected-check']} "
          "rejected")


def run_campaign(*, cases: int, seed: int = 0, first: int = 0,
                 workers: int = 2,
                 out: str, timeout: float = 20.0, mem_gib: float = 4.0,
                 keep: int = 1000, recycle: int = 400,
                 seed_cache: str | None = None, only_seeds=None,
                 max_edits: int = 3, progress: bool = True,
                 command: str | None = None,
                 mutations: tuple[str, ...] | None = None) -> dict:
  """Runs a campaign; writes OUT/summary.json and returns the summary."""
  import jax  # pylint: disable=import-outside-toplevel
  from tests.fuzz import seeds as seeds_mod  # pylint: disable=import-outside-toplevel
  out = os.path.abspath(out)
  os.makedirs(out, exist_ok=True)
  t0 = time.monotonic()
  # A campaign of bind-source cases alone needs no seed programs.
  bind_only = bool(mutations) and set(mutations) == {"bind-source"}
  files, dropped = ({}, {}) if bind_only else seeds_mod.build(
      only_seeds, cache_dir=seed_cache)
  seed_dir = os.path.join(out, "seeds")
  os.makedirs(seed_dir, exist_ok=True)
  for name, data in files.items():
    with open(os.path.join(seed_dir, f"{name}.jaxpr"), "wb") as f:
      f.write(data)
  say = (lambda *a: print(*a, flush=True)) if progress else (
      lambda *a: None)
  say(f"fuzz: jax {jax.__version__}, python {platform.python_version()}, "
      f"{len(files)} seeds built in {time.monotonic() - t0:.1f}s"
      + (f", {len(dropped)} dropped" if dropped else ""))

  campaign = Campaign(out=out, workers=workers, timeout=timeout,
                      mem_gib=mem_gib, keep=keep, recycle=recycle,
                      progress=progress)
  seed_tally = Tally(out, keep, seed)
  tally = Tally(out, keep, seed)
  try:
    # The seeds themselves must pass every stage.
    baseline = {}
    campaign.run(
        (Case(f"seed-{n}", n, d, [], [], None)
         for n, d in sorted(files.items())),
        lambda v: baseline.__setitem__(v.case.seed_name, v))
    for name, v in sorted(baseline.items()):
      if v.outcome not in ("accepted", "call-skipped"):
        f = v.failure or {}
        dropped[name] = (f"unmutated seed: {v.outcome} "
                         f"{f.get('cls', '')} {f.get('type', '')}: "
                         f"{f.get('message', '')[:300]}").strip()
        seed_tally.add(v)
        files.pop(name)
    for name, why in sorted(dropped.items()):
      say(f"fuzz: seed {name} dropped: {why}")
    if not files and not bind_only:
      raise RuntimeError("no usable seeds")
    names = sorted(files)
    say(f"fuzz: {cases} cases over {len(names)} seeds, {workers} workers, "
        f"timeout {timeout:g}s")

    factory = mutate.CaseFactory(files, seed, max_edits,
                                 mutations=mutations)
    # The transforms each seed cannot do (its primitives have no rule, as
    # the original function's have none): errors there are the program's.
    unsupported = {
        name: tuple(sorted(stage for stage, status in (
            (v.result or {}).get("transforms") or {}).items()
                           if status == "unsupported"))
        for name, v in baseline.items()}
    say("fuzz: transforms the seeds cannot do: " + ", ".join(
        f"{n} {'/'.join(u)}" for n, u in sorted(unsupported.items()) if u))

    def generate():
      for i in range(first, first + cases):
        name, data, edits, groups = factory.make(i)
        yield Case(str(i), name, data, edits, groups,
                   unsupported.get(name, ()))

    start = time.monotonic()
    last = [start]

    def on_verdict(v):
      tally.add(v)
      now = time.monotonic()
      if progress and now - last[0] > 15:
        last[0] = now
        say(_progress_line(tally, cases, start))
    interrupted = False
    try:
      campaign.run(generate(), on_verdict)
    except KeyboardInterrupt:
      interrupted = True
      say("fuzz: interrupted; writing the summary of the cases run")
  finally:
    campaign.close()
  elapsed = time.monotonic() - start
  summary = {
      "command": command,
      "jax": jax.__version__,
      "python": platform.python_version(),
      "seed": seed, "first_case": first, "cases": tally.done,
      "cases_requested": cases,
      "interrupted": interrupted,
      "workers": workers, "timeout_s": timeout, "mem_gib": mem_gib,
      "elapsed_s": round(elapsed, 1),
      "cases_per_s": round(tally.done / max(elapsed, 1e-9), 2),
      "outcomes": dict(tally.outcomes.most_common()),
      "failures": dict(tally.failures.most_common()),
      "failure_count": sum(tally.failures.values()),
      "call_skipped": dict(tally.skips.most_common()),
      "rejections": dict(tally.rejections.most_common(60)),
      "info": dict(tally.info),
      # Per transform stage: ok, skipped (why), unsupported (the program's
      # own: a primitive without the rule), over the accepted programs.
      "transforms": dict(sorted(tally.transforms.items())),
      "transform_unsupported": dict(tally.unsupported.most_common(30)),
      # Per converter (tests/fuzz/convert.py): ok, refused, mismatch,
      # skipped, over the accepted programs that were called.
      "converters": dict(sorted(tally.converters.items())),
      # The largest resident-memory growth of a case's load and check, as
      # a share of the budget (16x the file + 64 MiB), and that case.
      "memory_peak_share": {k: [round(v[0], 4), v[1]] for k, v in
                            sorted(tally.memory_peak.items())},
      "structural": {g[len("structural:"):]: dict(c.most_common())
                     for g, c in sorted(tally.group_outcomes.items())
                     if g.startswith("structural:")},
      # Bind-source cases (tests/fuzz/bind_source.py): outcomes by
      # source kind and op.
      "bind_source": {g[len("bind-source:"):]: dict(c.most_common())
                      for g, c in sorted(tally.group_outcomes.items())
                      if g.startswith("bind-source:")},
      "warnings": dict(tally.warnings.most_common()),
      "worker_restarts": dict(campaign.restarts),
      "seeds": {n: len(d) for n, d in sorted(files.items())},
      "seeds_dropped": dropped,
      "seed_transforms_unsupported": {n: list(u) for n, u in
                                      sorted(unsupported.items()) if u},
      "per_seed": {n: dict(c.most_common())
                   for n, c in sorted(tally.per_seed.items())},
      "mutation_groups": len(tally.groups),
      "mutation_group_counts": dict(sorted(tally.groups.items())),
      # Outcomes of the cases each site group was edited in: which fields'
      # edits get past the reader and the check.
      "mutation_group_outcomes": {
          g: dict(c.most_common())
          for g, c in sorted(tally.group_outcomes.items())},
      "clusters": tally.sorted_clusters(),
      "out": out,
  }
  with open(os.path.join(out, "summary.json"), "w") as f:
    json.dump(summary, f, indent=1)
  if progress:
    print(format_summary(summary), flush=True)
  return summary


def format_summary(s: dict, top: int = 20) -> str:
  lines = [
      f"jaxpr_io fuzz: {s['cases']} cases, seed {s['seed']}, jax {s['jax']}"
      f" (python {s['python']}), {s['workers']} workers: "
      f"{s['elapsed_s']}s, {s['cases_per_s']} cases/s",
      "outcomes: " + ", ".join(f"{k} {v}" for k, v in s["outcomes"].items()),
  ]
  if s["call_skipped"]:
    lines.append("calls skipped: " + ", ".join(
        f"{k} {v}" for k, v in s["call_skipped"].items()))
  if s["info"]:
    lines.append("info: " + ", ".join(f"{k} {v}"
                                       for k, v in s["info"].items()))
  if s["seeds_dropped"]:
    lines.append("seeds dropped: " + "; ".join(
        f"{k}: {v}" for k, v in s["seeds_dropped"].items()))
  lines.append(f"mutation site groups hit: {s['mutation_groups']}")
  for name, outcomes in s.get("structural", {}).items():
    lines.append(f"structural {name}: " + ", ".join(
        f"{k} {v}" for k, v in outcomes.items()))
  for name, outcomes in s.get("bind_source", {}).items():
    lines.append(f"bind-source {name}: " + ", ".join(
        f"{k} {v}" for k, v in outcomes.items()))
  if s.get("transforms"):
    lines.append("transforms: " + ", ".join(
        f"{k} {v}" for k, v in s["transforms"].items()))
  if s.get("converters"):
    lines.append("converters: " + ", ".join(
        f"{k} {v}" for k, v in s["converters"].items()))
  if s.get("memory_peak_share"):
    lines.append("largest memory growth / budget: " + ", ".join(
        f"{k} {v[0]:.3f} (case {v[1]})"
        for k, v in s["memory_peak_share"].items()))
  lines.append(f"FAILURES: {s['failure_count']}" + (
      " (" + ", ".join(f"{k} {v}" for k, v in s["failures"].items()) + ")"
      if s["failures"] else ""))
  for c in s["clusters"][:top]:
    lines.append(f"  {c['count']:5d}  {c['class']}  {c['type']}: "
                 f"{c['message'][:160]!r}")
    lines.append(f"         at {c['lib_frame'] or '-'} | "
                 f"{c['last_frame'] or '-'}")
    lines.append(f"         e.g. {c['example']}")
  if len(s["clusters"]) > top:
    lines.append(f"  ... {len(s['clusters']) - top} more clusters in "
                 f"{s['out']}/summary.json")
  lines.append(f"summary: {s['out']}/summary.json")
  return "\n".join(lines)
