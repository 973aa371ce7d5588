"""Hostile inputs that expand on the way out or in: print options, stored
log records, `--bind` sources (an `.npz` zip bomb, an Orbax checkpoint that
declares gigabytes) and terminal control characters (issue 28).

Each input is crafted below JAX and numpy: `.jaxpr` files at the protobuf
level (tests/hostile/__init__.py), `.npz` archives zip entry by zip entry
with a hand-made deflate stream, Orbax checkpoints by editing the array
metadata that Orbax wrote. Each case runs in a fresh process whose address
space is limited (RLIMIT_AS: what it has mapped after importing JAX plus
`_AS_MARGIN_MIB`, so that a bomb that got through dies of MemoryError
instead of taking the machine's memory), and asserts a FormatError, a
one-line CLI error or the documented safe handling (docs/trust-model.md,
"Printing, logging and bind sources"), its peak memory growth within the
budget of untrusted data (16x the input's size + 64 MiB) and its time.
"""

from __future__ import annotations

import functools
import json
import re
import struct
import zlib

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from tests.hostile import craft, eqns, param, run_child, set_value
from tests.support import zip_bytes

pytestmark = pytest.mark.once

X4 = np.arange(1, 5, dtype=np.float32)
W = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
_AS_MARGIN_MIB = 1536
_SECONDS = 20  # for the work after imports; a bomb takes minutes or dies

# After the prelude (tests/hostile/__init__.py): warm JAX up, then limit the
# address space and reset the peak RSS, so that BUDGET_MIB bounds what the
# case itself costs.
_LIMITED = """
    import logging, resource
    import jaxpr_io.tools.load
    jax.devices(); jax.jit(lambda a: a + 1)(np.ones(2, np.float32))
    str(jaxpr_io.loads(jaxpr_io.dumps(jaxpr_io.trace(
        lambda a: a * 2, np.ones(2, np.float32)))).closed_jaxpr)
    resource.setrlimit(resource.RLIMIT_AS, (
        int((_status_mib("VmSize") + {margin}) * 2**20),
        resource.RLIM_INFINITY))
    reset_peak_rss()
    BASE_MIB = current_rss_mib()
    START = time.monotonic()

    def report():
      print("GROWTH_MIB:", rss_mib() - BASE_MIB, flush=True)
      print("ELAPSED:", time.monotonic() - START, flush=True)
""".replace("{margin}", str(_AS_MARGIN_MIB))


def run_limited(code: str, *args, timeout: float = 180):
  """`code` in a fresh process under the limits above; its stdout gets
  GROWTH_MIB and ELAPSED from `report()`."""
  return run_child(_LIMITED + code + "\n    report()\n", *args,
                   timeout=timeout,
                   env={"MALLOC_ARENA_MAX": "2"})


def assert_within(child, budget_mib: float, seconds: float = _SECONDS):
  """The child exited cleanly, its peak RSS grew by at most `budget_mib`
  and its work took at most `seconds` (its last report())."""
  assert child.rc == 0, str(child)
  growth = child.lines("GROWTH_MIB:")[-1]
  elapsed = child.lines("ELAPSED:")[-1]
  print(f"growth {float(growth):.0f} MiB (budget {budget_mib:.0f}), "
        f"{float(elapsed):.1f} s")
  assert float(growth) <= budget_mib, str(child)
  assert float(elapsed) <= seconds, str(child)


def budget_mib(*sizes: int) -> float:
  return 16 * sum(sizes) / 2**20 + 64


def write(path, data: bytes):
  path.write_bytes(data)
  return str(path)


# =================================================== 1. print options
@functools.cache
def printing_file() -> bytes:
  """A program that builds a float32[1000, 1000] and prints it."""
  def fn(x):
    jax.debug.print("{y}", y=jnp.broadcast_to(x[0], (1000, 1000)))
    return x * 2
  return jaxpr_io.dumps(jaxpr_io.trace(fn, X4))


def _print_options(msg, options: dict) -> None:
  (eqn,) = eqns(msg, "debug_print")
  stored = param(msg, eqn, "np_printoptions")
  set_value(msg, stored, tuple(options.items()))


HUGE_PRINT = {"edgeitems": 3, "threshold": 2**62, "floatmode": "fixed",
              "precision": 64, "suppress": False, "linewidth": 75,
              "nanstr": "nan", "infstr": "inf", "sign": "-",
              "formatter": None, "legacy": False, "override_repr": None}

_PRINT_CHILD = """
    expect_format_error(jaxpr_io.load, ARGS[0])
    report()
    # The same program as saved (numpy's default options) loads and prints
    # its array summarized.
    prog = jaxpr_io.load(ARGS[1])
    out = prog(np.arange(1, 5, dtype=np.float32)); jax.effects_barrier()
    print("RESULT:", np.asarray(out).tolist(), flush=True)
"""


def test_print_options_that_print_a_million_elements_are_refused(tmp_path):
  data = craft(printing_file(), lambda m: _print_options(m, HUGE_PRINT))
  child = run_limited(_PRINT_CHILD, write(tmp_path / "huge.jaxpr", data),
                      write(tmp_path / "ok.jaxpr", printing_file()))
  (message,) = child.lines("FORMAT_ERROR:")
  for part in ("equation", "debug_print", "np_printoptions",
               "could print up to", "trusted=True"):
    assert part in message, message
  # The refusal costs nothing: the first report() is right after it.
  growth, _ = (float(x) for x in child.lines("GROWTH_MIB:"))
  assert growth < 64, str(child)
  assert float(child.lines("ELAPSED:")[0]) < 5, str(child)
  assert child.lines("RESULT:") == ["[2.0, 4.0, 6.0, 8.0]"], str(child)
  printed = child.out[child.out.index("RESULT:") - 2000:]
  assert "..." in child.out and len(child.out) < 20000, printed
  assert_within(child, budget_mib(len(data)))


# =================================================== 2. log records
@functools.cache
def logging_file() -> bytes:
  def fn(x):
    jax.debug.log("audit {x}", x=x)
    return x + 1
  return jaxpr_io.dumps(jaxpr_io.trace(fn, X4))


FORGED = ("security.audit", 50, "/srv/app/security/audit.py", 7, "")


def _forge_record(msg) -> None:
  (eqn,) = eqns(msg, "debug_print")
  stored = param(msg, eqn, "logging_record")
  set_value(msg, stored.param_codec, FORGED)


_LOG_CHILD = """
    records = []

    class Keep(logging.Handler):
      def emit(self, record):
        if str(record.msg).startswith("audit"):
          records.append(record)

    logging.getLogger().addHandler(Keep())
    for trusted in (False, True):
      records.clear()
      prog, caught = load_warnings(ARGS[0], trusted=trusted)
      prog(np.arange(1, 5, dtype=np.float32)); jax.effects_barrier()
      for r in records:
        print("RECORD:", trusted, r.name, r.levelname, r.pathname, r.lineno,
              r.getMessage()[:40], flush=True)
"""


def test_stored_log_records_log_as_jaxpr_io_unless_trusted(tmp_path):
  data = craft(logging_file(), _forge_record)
  child = run_limited(_LOG_CHILD, write(tmp_path / "log.jaxpr", data))
  dropped = [w for w in child.lines("WARNING:")
             if w.startswith("DroppedParamWarning")]
  # Untrusted: one DroppedParamWarning naming the param; trusted: none.
  assert len(dropped) == 1 and "logging_record" in dropped[0], str(child)
  untrusted, trusted = child.lines("RECORD: False"), child.lines(
      "RECORD: True")
  assert untrusted == ["jaxpr_io.program INFO (unknown file) 0 audit "
                       "[1. 2. 3. 4.]"], str(child)
  assert trusted == ["security.audit CRITICAL /srv/app/security/audit.py 7 "
                     "audit [1. 2. 3. 4.]"], str(child)
  assert_within(child, budget_mib(len(data)))


# =================================================== 3. an .npz zip bomb
@functools.cache
def zero_deflate(n_mib: int) -> bytes:
  """A raw deflate stream of `n_mib` MiB of zeros, made of one full-flushed
  block of a MiB repeated: KBs for GiBs."""
  block = zlib.compressobj(9, zlib.DEFLATED, -15)
  chunk = block.compress(bytes(1 << 20)) + block.flush(zlib.Z_FULL_FLUSH)
  return chunk * n_mib + block.flush(zlib.Z_FINISH)


@functools.cache
def zero_crc(prefix: bytes, n_mib: int) -> int:
  """CRC-32 of `prefix` followed by `n_mib` MiB of zeros."""
  crc, mib = zlib.crc32(prefix), bytes(1 << 20)
  for _ in range(n_mib):
    crc = zlib.crc32(mib, crc)
  return crc


def npy_header(shape, dtype="<f4") -> bytes:
  """A version 1.0 `.npy` header, as numpy writes it."""
  text = repr({"descr": dtype, "fortran_order": False, "shape": tuple(shape)})
  text += " " * (63 - (len(text) + 10) % 64) + "\n"
  return b"\x93NUMPY\x01\x00" + struct.pack("<H", len(text)) + text.encode()


def zip_archive(members: list[tuple[str, bytes, bytes, int, int]]) -> bytes:
  """A zip archive of (name, prefix, deflate stream, the stream's inflated
  size, CRC of all) members: each member's data is `prefix` then what the
  stream inflates to, deflated as one raw stream."""
  entries = []
  for name, prefix, stream, size, crc in members:
    head = zlib.compressobj(9, zlib.DEFLATED, -15)
    # The prefix deflated and sync-flushed (byte-aligned), then the given
    # stream: one valid raw deflate stream.
    body = head.compress(prefix) + head.flush(zlib.Z_SYNC_FLUSH) + stream
    entries.append((name.encode(), 0, 8, crc, body, len(prefix) + size))
  return zip_bytes.archive(entries)


def npz_member(name: str, array: np.ndarray):
  data = npy_header(array.shape) + array.tobytes()
  # b"\x03\x00": an empty final block ends the stream.
  return (name + ".npy", data, b"\x03\x00", 0, zlib.crc32(data))


def bomb_member(name: str, shape, n_mib: int):
  """A member whose header declares `shape` float32 and whose stream
  inflates to `n_mib` MiB of zeros after it."""
  header = npy_header(shape)
  return (name + ".npy", header, zero_deflate(n_mib), n_mib << 20,
          zero_crc(header, n_mib))


@functools.cache
def predict_file() -> bytes:
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda params, x: x @ params["w"], {"w": W}, np.ones((2, 4),
                                                          np.float32)))


@functools.cache
def big_input_file() -> bytes:
  """A program that takes float32[2**29] (2 GiB): a few hundred bytes."""
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda params, x: x + params["w"][:2],
      {"w": jax.ShapeDtypeStruct((2**29,), np.float32)},
      jax.ShapeDtypeStruct((2,), np.float32)))


_CLI_CHILD = """
    import contextlib, io
    from jaxpr_io.tools.load import main
    for argv in ARGS:
      err = io.StringIO()
      with contextlib.redirect_stderr(err):
        rc = main(argv.split("|"))
      errors = [l for l in err.getvalue().splitlines() if ": error: " in l]
      print("RC:", rc, "|".join(errors), flush=True)
"""


def test_npz_bombs_are_never_inflated(tmp_path):
  unused = zip_archive([npz_member("args[0]['w']", W),
                        bomb_member("args[5]['unused']", (2**29,), 2048)])
  needed = zip_archive([bomb_member("args[0]['w']", (4, 3), 2048)])
  declared = zip_archive([bomb_member("args[0]['w']", (2**29,), 2048)])
  sizes = [len(unused), len(needed), len(declared)]
  assert max(sizes) < 4 << 20, sizes  # 2 GiB of zeros each (deflate's
  #                                      best ratio is about 1000:1)
  for name, data in (("unused.npz", unused), ("needed.npz", needed),
                     ("declared.npz", declared)):
    (tmp_path / name).write_bytes(data)
  write(tmp_path / "predict.jaxpr", predict_file())
  write(tmp_path / "big.jaxpr", big_input_file())
  np.savez(tmp_path / "x.npz", arg0=np.ones((2, 4), np.float32))
  runs = [f"{tmp_path}/predict.jaxpr|--bind|0={tmp_path}/unused.npz|--run|"
          f"{tmp_path}/x.npz|--out|{tmp_path}/out.npz",
          f"{tmp_path}/predict.jaxpr|--bind|0={tmp_path}/needed.npz",
          f"{tmp_path}/big.jaxpr|--bind|0={tmp_path}/declared.npz"]
  child = run_limited(_CLI_CHILD, *runs)
  results = child.lines("RC:")
  assert len(results) == 3, str(child)
  # The unused member is never read: the program runs on the right weights.
  assert results[0] == "0", results
  np.testing.assert_allclose(np.load(tmp_path / "out.npz")["out0"],
                             np.ones((2, 4), np.float32) @ W, rtol=1e-6)
  # A needed member that inflates past its header: one line, 1 byte past.
  assert re.fullmatch(r"1 jaxpr-load: error: \S+: .*member .*holds more "
                      r"than the 48 bytes its header declares", results[1]
                      ), results
  # A member declaring 2 GiB: refused from its header, nothing read.
  assert re.fullmatch(r"1 jaxpr-load: error: SourceError: .* declare "
                      r"2,147,483,648 bytes, over the .* nothing was read.*",
                      results[2]), results
  assert_within(child, budget_mib(max(sizes)))


# =================================================== 4. Orbax checkpoints
def orbax_bomb(root, n: int = 2**29, chunk: int = 2**20):
  """An Orbax checkpoint (ckpt/1/state) of {"params": {"w": float32[n]}}
  whose array metadata declares `n` values in chunks of `chunk`, every
  chunk the same compressed zeros: written small by Orbax, then its zarr
  metadata edited and one chunk file copied."""
  import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  small = {"params": {"w": np.zeros(chunk, np.float32)}}
  with ocp.CheckpointManager(root / "ckpt", item_handlers={
      "state": ocp.PyTreeCheckpointHandler(use_ocdbt=False,
                                           use_zarr3=False)}) as mngr:
    mngr.save(1, args=ocp.args.Composite(state=ocp.args.PyTreeSave(small)))
    mngr.wait_until_finished()
  item = root / "ckpt" / "1" / "state"
  (array_dir,) = [p for p in item.rglob(".zarray")]
  meta = json.loads(array_dir.read_text())
  meta["shape"] = [n]
  meta["chunks"] = [chunk]
  array_dir.write_text(json.dumps(meta))
  first = array_dir.parent / "0"
  data = first.read_bytes()
  for i in range(1, n // chunk):
    (array_dir.parent / str(i)).write_bytes(data)
  return item, sum(p.stat().st_size for p in item.rglob("*") if p.is_file())


def test_orbax_checkpoints_are_checked_from_their_metadata(tmp_path):
  item, size = orbax_bomb(tmp_path)
  assert size < 256 << 10, size
  write(tmp_path / "predict.jaxpr", predict_file())
  write(tmp_path / "big.jaxpr", big_input_file())
  runs = [f"{tmp_path}/predict.jaxpr|--bind|0={item}:params",
          f"{tmp_path}/big.jaxpr|--bind|0={item}:params",
          f"{tmp_path}/predict.jaxpr|--bind|0={item}"]
  child = run_limited(_CLI_CHILD, *runs)
  results = child.lines("RC:")
  assert len(results) == 3, str(child)
  # The program takes float32[4,3]: a type error from the metadata.
  assert re.fullmatch(r"2 jaxpr-load: error: --bind 0=\S+: bind "
                      r"args\[0\]\['w'\]: the program takes float32\[4,3\], "
                      r"the source has float32\[536870912\]", results[0]
                      ), results
  # The program takes float32[2**29]: over the budget, nothing restored.
  # Charged: the array and the chunk grid TensorStore reads it through.
  assert re.fullmatch(r"1 jaxpr-load: error: SourceError: .* declare "
                      r"4,294,967,296 bytes, over the .* nothing was read.*",
                      results[1]), results
  # Without :params: what the item holds, and the SOURCE to give.
  assert re.search(r"the source holds params at its top level and the "
                   r"input is under 'params': bind \S+:params instead",
                   results[2]), results
  assert_within(child, budget_mib(size))


# =================================================== 5. control characters
ESCAPES = ("\x1b]0;pwned\x07",      # retitle the terminal (OSC 0)
           "\x1b[2J\x1b[H",         # clear the screen, cursor home
           "\x1b[31;1m",            # red, bold
           "\x9b32m",               # C1 CSI: green
           "\x9d0;c1\x9c",          # C1 OSC ... ST
           "\r\x08\x7f",            # carriage return, backspace, DEL
           "\u202e")                # right-to-left override


def _hostile_strings(msg) -> None:
  evil = "".join(ESCAPES)
  entry = msg.metadata.add()
  entry.key, entry.value = f"key{evil}", f"value{evil}"
  msg.producer.jax_version = f"0.10.2{evil}"
  msg.producer.jaxlib_version = f"0.10.2{evil}"


@functools.cache
def named_file() -> bytes:
  """A program whose input dict key and debug_print format string hold
  the escapes (strings of the string table)."""
  def fn(params):
    jax.debug.print("fmt" + "".join(ESCAPES) + "{}", params["k"])
    return params["k"] * 2
  return jaxpr_io.dumps(jaxpr_io.trace(fn, {"k": X4}))


def _key_with_escapes(msg) -> None:
  index = list(msg.strings).index("k")
  msg.strings[index] = "k" + "".join(ESCAPES)


_RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202e]")


def test_the_cli_escapes_control_characters_from_files(tmp_path):
  path = write(tmp_path / "evil.jaxpr",
               craft(named_file(),
                     lambda m: (_hostile_strings(m), _key_with_escapes(m))))
  # A format field that is not a plain name: the FormatError quotes it.
  field = "{0.\x1b]0;pwned\x07\x9b32m\x9d0;c1\x9c\r\u202e}"
  broken = write(tmp_path / "broken.jaxpr", craft(
      named_file(), lambda m: m.strings.__setitem__(
          list(m.strings).index("fmt" + "".join(ESCAPES) + "{}"), field)))
  runs = [path, f"{path}|--text", broken]
  child = run_limited(_CLI_CHILD.replace("contextlib.redirect_stderr(err)",
                                         "contextlib.nullcontext()"), *runs)
  assert child.rc == 0, str(child)
  for stream in (child.out, child.err):
    assert not _RAW.search(stream), repr(_RAW.search(stream))
  # Each string shows its escapes as text, one line each.
  assert "value\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\x1b[31;1m\\x9b32m" in (
      child.out), child.out
  assert "\\u202e" in child.out and "jax 0.10.2\\x1b" in child.out
  assert "args[0]['k\\x1b]0;pwned" in child.out, child.out
  assert "fmt\\x1b]0;pwned" in child.out, child.out  # --text
  errors = [l for l in child.err.splitlines() if ": error: " in l]
  assert len(errors) == 1 and (
      "format field {0.\\x1b]0;pwned\\x07\\x9b32m\\x9d0;c1\\x9c\\x0d"
      in errors[0]), child.err
  assert_within(child, budget_mib(len(named_file())))


def test_escape_writes_every_control_as_text():
  from jaxpr_io.tools._common import escape  # pylint: disable=g-import-not-at-top
  evil = "".join(ESCAPES) + "\t\n\x00\x85\u2066"
  one_line = escape(evil)
  assert not _RAW.search(one_line) and "\n" not in one_line
  assert one_line == ("\\x1b]0;pwned\\x07\\x1b[2J\\x1b[H\\x1b[31;1m\\x9b32m"
                      "\\x9d0;c1\\x9c\\x0d\\x08\\x7f\\u202e\\x09\\x0a\\x00\\x85"
                      "\\u2066")
  assert escape("a\tb\nc\x1bd", lines=True) == "a\tb\nc\\x1bd"
  # Printable text, accents and CJK included, is left alone.
  assert escape("naïve 日本 [1. 2.] {'k': 1}") == "naïve 日本 [1. 2.] {'k': 1}"
