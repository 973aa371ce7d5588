"""Helpers for tests/hostile/test_hostile.py: craft files at the protobuf level and
run code that loads them in a fresh Python process.

Crafting never goes through `dumps`: a real program's `Program` message is
edited (`craft(data, mutate)`) and framed again with every header and
program checksum recomputed, so the reader gets past the container checks
and meets the hostile content itself. Blob checksums are kept as written
unless the caller fixes them (`fix_blob_crcs`).

Every hostile case loads in a subprocess (`run_child`): an abort (SIGABRT,
SIGSEGV, a C++ CHECK failure) then fails one test, with the child's output,
instead of killing pytest.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import textwrap
import time
from typing import Callable, Iterator

from jaxpr_io.format import _proto as pb
from jaxpr_io.format import container
from jaxpr_io.format import crc
from tests.support import proto_edit

REPO = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
DEVICE_FLAG = "--xla_force_host_platform_device_count=8"


# ------------------------------------------------------------- framing
def varint(n: int) -> bytes:
  """`n` as a protobuf base-128 varint (for messages built by hand)."""
  out = bytearray()
  while True:
    byte = n & 0x7F
    n >>= 7
    if n:
      out.append(byte | 0x80)
    else:
      out.append(byte)
      return bytes(out)


def message(data: bytes):
  """The `Program` message of a file (its header and CRCs are checked)."""
  return pb.Program.FromString(container.Container(data).program)


def data_section(data: bytes) -> bytes:
  c = container.Container(data)
  return bytes(c.data)


def frame(program: bytes, section: bytes = b"") -> bytes:
  """A well-framed file around `program` and a data section kept as one
  chunk (blob offsets are relative to the section)."""
  layout = container.DataLayout()
  if section:
    layout.add(section)
  return container.to_bytes(program, layout)


def craft(data: bytes, mutate: Callable, *, section: bytes | None = None
          ) -> bytes:
  """`data` with its Program message edited in place by `mutate(msg)` and
  reframed: header and program checksums are recomputed, the data section
  (or `section`) is kept byte for byte, blob CRCs as the message says."""
  msg = message(data)
  mutate(msg)
  proto_edit.store(msg)
  return frame(msg.SerializeToString(deterministic=True),
               data_section(data) if section is None else section)


def fix_blob_crcs(msg, section: bytes) -> None:
  for blob in msg.blobs:
    blob.crc32 = crc.crc32(
        section[blob.offset:blob.offset + blob.length])


# ------------------------------------------------------ message editing
def intern(msg, text: str) -> int:
  """The string-table index of `text`, appended if it is not there."""
  for i, s in enumerate(msg.strings):
    if s == text:
      return i
  msg.strings.append(text)
  return len(msg.strings) - 1


def replace_string(msg, old: str, new: str) -> int:
  """Rewrites the string-table entry `old` (which must exist) to `new`."""
  index = list(msg.strings).index(old)
  msg.strings[index] = new
  return index


def root_jaxpr(msg):
  return msg.jaxprs[msg.closed_jaxprs[msg.root].jaxpr]


def eqns(msg, primitive: str) -> list:
  """Every equation of `msg` that binds `primitive`, in table order."""
  return proto_edit.by_primitive(msg, primitive)


def private_params(msg, eqn):
  """The repeated `Param` field of a copy of `eqn`'s param set, now owned by
  `eqn` alone (equations with equal params share one entry)."""
  copy = msg.param_sets.add()
  copy.CopyFrom(msg.param_sets[eqn.param_set])
  eqn.param_set = len(msg.param_sets) - 1
  return copy.params


def param(msg, eqn, name: str, *, add: bool = False):
  """The `Value` of param `name` of `eqn` (in a private copy of its param
  set); with add=True a missing param is appended."""
  params = private_params(msg, eqn)
  for p in params:
    if msg.strings[p.name] == name:
      return p.value
  if not add:
    raise LookupError(name)
  p = params.add()
  p.name = intern(msg, name)
  return p.value


def values(msg) -> Iterator:
  """Every top-level `Value` of the message: params, equation contexts and
  aval shardings."""
  for ps in msg.param_sets:
    for p in ps.params:
      yield p.value
  for ctx in msg.eqn_contexts:
    yield ctx.cur_abstract_mesh
  for aval in msg.avals:
    if aval.WhichOneof("kind") == "shaped_array":
      if aval.shaped_array.HasField("sharding"):
        yield aval.shaped_array.sharding


def records_in(value, type_index: int) -> Iterator:
  """Every `Record` of type string `type_index` inside `value`."""
  kind = value.WhichOneof("kind")
  if kind == "record":
    if value.record.type == type_index:
      yield value.record
    for field in value.record.fields:
      yield from records_in(field, type_index)
  elif kind in ("tuple", "frozenset"):
    for item in getattr(value, kind).items:
      yield from records_in(item, type_index)
  elif kind == "param_codec":
    yield from records_in(value.param_codec, type_index)


def records(msg, type_name: str) -> list:
  """Every record of the named type in the message."""
  if type_name not in msg.strings:
    return []
  index = list(msg.strings).index(type_name)
  return [r for v in values(msg) for r in records_in(v, index)]


# ------------------------------------------------------ Value builders
def set_value(msg, out, v) -> None:
  """Fills the `Value` message `out` with the Python value `v`: None, bool,
  int, str, tuple, frozenset, or an `Enum(type, member)`/`Rec(type, fields)`
  placeholder."""
  out.Clear()
  if v is None:
    out.none.SetInParent()
  elif type(v) is bool:
    out.bool = v
  elif type(v) is int:
    if -(1 << 63) <= v < (1 << 63):
      out.int = v
    else:
      out.big_int = str(v)
  elif type(v) is str:
    out.str = intern(msg, v)
  elif type(v) in (tuple, frozenset):
    kind = "tuple" if type(v) is tuple else "frozenset"
    getattr(out, kind).SetInParent()
    for item in v:
      set_value(msg, getattr(out, kind).items.add(), item)
  elif type(v) is Enum:
    out.enum.type = intern(msg, v.type)
    out.enum.member = intern(msg, v.member)
  elif type(v) is Rec:
    out.record.type = intern(msg, v.type)
    for field in v.fields:
      set_value(msg, out.record.fields.add(), field)
  else:
    raise TypeError(f"no Value for {v!r}")


@dataclasses.dataclass(frozen=True)
class Enum:
  type: str
  member: str


@dataclasses.dataclass(frozen=True)
class Rec:
  type: str
  fields: tuple


def axis_type(member: str) -> Enum:
  return Enum("jax.sharding.AxisType", member)


# ------------------------------------------------------- subprocesses
@dataclasses.dataclass
class Child:
  rc: int
  out: str
  err: str
  elapsed: float

  def __str__(self):
    return (f"exit status {self.rc} after {self.elapsed:.1f} s\n"
            f"--- stdout ---\n{self.out[-4000:]}\n"
            f"--- stderr ---\n{self.err[-4000:]}")

  def lines(self, marker: str) -> list[str]:
    """The text after `marker` on each stdout line that starts with it."""
    return [line[len(marker):].strip() for line in self.out.splitlines()
            if line.startswith(marker)]


# Prepended to every child's code. `expect_format_error(fn)` calls `fn` and
# prints "FORMAT_ERROR: <message>" if it raises FormatError; any other
# outcome prints what happened and exits with a status the parent reports.
PRELUDE = textwrap.dedent("""\
    import os, resource, sys, time, warnings
    import jax, jax.numpy as jnp, numpy as np
    import jaxpr_io
    from jaxpr_io import FormatError
    ARGS = sys.argv[1:]

    def _status_mib(field):
      try:
        with open("/proc/self/status") as f:
          for line in f:
            if line.startswith(field + ":"):
              return int(line.split()[1]) / 1024
      except OSError:
        pass
      return None

    def rss_mib():
      # Peak resident set size of this process, MiB: VmHWM, which
      # reset_peak_rss() can reset. ru_maxrss is the fallback: in a child of
      # pytest it starts at pytest's own peak (Linux carries the high-water
      # mark of the forked copy across exec) and cannot be reset.
      peak = _status_mib("VmHWM")
      if peak is None:
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
      return peak

    def current_rss_mib():  # resident set size now, MiB
      now = _status_mib("VmRSS")
      return rss_mib() if now is None else now

    def reset_peak_rss():
      # Makes the peak the current RSS (Linux), so rss_mib() - the RSS
      # after importing counts only what comes next.
      try:
        with open("/proc/self/clear_refs", "w") as f:
          f.write("5")
      except OSError:
        pass

    def expect_format_error(fn, *args, **kwargs):
      try:
        result = fn(*args, **kwargs)
      except FormatError as e:
        print("FORMAT_ERROR:", " ".join(str(e).split()), flush=True)
        return e
      except BaseException as e:
        print("OTHER_ERROR:", type(e).__module__, type(e).__qualname__,
              " ".join(str(e).split())[:2000], flush=True)
        sys.exit(5)
      print("NO_ERROR:", repr(result)[:500], flush=True)
      sys.exit(4)

    def load_warnings(path, **kwargs):
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prog = jaxpr_io.load(path, **kwargs)
      for w in caught:
        print("WARNING:", w.category.__name__, " ".join(str(w.message).split()))
      return prog, caught
    """)


def run_child(code: str, *args, timeout: float = 120,
              env: dict[str, str] | None = None) -> Child:
  """Runs PRELUDE + `code` in a fresh interpreter with 8 host CPU devices;
  `args` become `ARGS` (strings). A child killed by a signal has a negative
  `rc`; one that runs past `timeout` is killed and reported with rc None."""
  child_env = dict(os.environ)
  child_env["XLA_FLAGS"] = DEVICE_FLAG
  child_env["JAX_PLATFORMS"] = "cpu"
  child_env["PYTHONPATH"] = REPO + os.pathsep + child_env.get("PYTHONPATH",
                                                              "")
  child_env.update(env or {})
  start = time.monotonic()
  try:
    result = subprocess.run(
        [sys.executable, "-c", PRELUDE + textwrap.dedent(code),
         *map(str, args)],
        env=child_env, capture_output=True, text=True, timeout=timeout,
        check=False, cwd=REPO)
  except subprocess.TimeoutExpired as e:
    out = e.stdout.decode() if isinstance(e.stdout, bytes) else e.stdout
    err = e.stderr.decode() if isinstance(e.stderr, bytes) else e.stderr
    return Child(None, out or "", err or "", time.monotonic() - start)
  return Child(result.returncode, result.stdout, result.stderr,
               time.monotonic() - start)
