"""Hostile files: one crafted file for each finding of the security review.

Each file is built at the protobuf level from a real program's message and
checksum-fixed (tests/hostile/), so it does not depend on `dumps` accepting
it. For each, the test asserts `FormatError` at load, or the documented safe
handling (a `DroppedParamWarning` and a harmless program, an allowlist, a
validated grammar), and no side effect: no file written, no secret printed,
no caller buffer deleted, bounded time and memory. Every hostile case runs in
a subprocess (`run_child` in tests/hostile/__init__.py), so that an abort fails the test
instead of killing pytest.

The findings, in order: 1. `ffi_call` targets; 2. `debug_print` format
strings; 3. `jit`'s `compiler_options_kvs`; 4. `jit`'s `donated_invars`;
5. concrete and abstract `Mesh` records; 6. `dot_general`'s `precision`;
7. symbolic dimension expressions; 8. a file of many tiny equations;
9. nesting depth; 10. corrupt constant data behind lazy checksums;
11. a `PartitionSpec` naming an axis twice; 12. `save` over a private file.
"""

from __future__ import annotations

import functools
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import AxisType, NamedSharding, PartitionSpec as P

import jaxpr_io
from jaxpr_io.write.writer import MAX_JAXPR_DEPTH
from tests.support import proto_edit
from tests.hostile import (Enum, Rec, axis_type, craft, data_section, eqns,
                           fix_blob_crcs, frame, intern, message, param,
                           records, records_in, replace_string, root_jaxpr,
                           run_child, set_value)

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

F32 = jnp.float32
X4 = np.arange(1, 5, dtype=np.float32)
X84 = np.arange(32, dtype=np.float32).reshape(8, 4) / 7

if jax.device_count() < 8:
  pytest.skip("needs 8 devices to trace the sharded programs (tests/"
              "conftest.py forces 8 host CPU devices)",
              allow_module_level=True)


# ------------------------------------------------------------ assertions
def write(tmp_path, data: bytes, name: str = "hostile.jaxpr") -> str:
  path = tmp_path / name
  path.write_bytes(data)
  return str(path)


def assert_clean_exit(child) -> None:
  """The child finished by itself with status 0: no abort, no hang."""
  assert child.rc is not None, f"the child timed out\n{child}"
  assert child.rc >= 0, f"the child was killed by signal {-child.rc}\n{child}"
  assert child.rc == 0, str(child)


def format_error(child) -> str:
  """The FormatError message the child printed (it must have printed one)."""
  assert_clean_exit(child)
  messages = child.lines("FORMAT_ERROR:")
  assert messages, f"no FormatError\n{child}"
  print("FormatError:", messages[0])    # shown with pytest -s
  return messages[0]


def number(child, marker: str) -> float:
  (value,) = child.lines(marker)
  return float(value)


_REJECT = """
    reset_peak_rss()
    start = time.monotonic()
    base = current_rss_mib()
    expect_format_error(jaxpr_io.load, ARGS[0], trusted="trusted" in ARGS)
    print("ELAPSED:", time.monotonic() - start)
    print("RSS_GROWTH_MIB:", rss_mib() - base)
"""


def assert_rejected(path: str, *patterns: str, trusted: bool = False,
                    seconds: float | None = None, timeout: float = 120
                    ) -> str:
  """Loading `path` in a fresh process raises FormatError whose message
  matches every regex in `patterns` (case-insensitive); with `seconds`, the
  load took less than that. Returns the message."""
  child = run_child(_REJECT, path, *(["trusted"] if trusted else []),
                    timeout=timeout)
  message = format_error(child)
  for pattern in patterns:
    assert re.search(pattern, message, re.IGNORECASE), (
        f"{pattern!r} not in the message: {message}")
  if seconds is not None:
    assert number(child, "ELAPSED:") < seconds, str(child)
  return message


# ------------------------------------------------------- sample programs
@functools.cache
def ffi_file() -> bytes:
  """An `ffi_call` of the (nonexistent) target "my_target" with attribute
  a=1. Tracing needs no target."""
  call = jax.ffi.ffi_call("my_target", jax.ShapeDtypeStruct((4,), F32))
  return jaxpr_io.dumps(jaxpr_io.trace(lambda x: call(x, a=1), X4))


_FMT = "HOSTILE_FMT {x}"


@functools.cache
def debug_print_file() -> bytes:
  def fn(x):
    jax.debug.print(_FMT, x=jnp.sum(x))
    return x * 2
  return jaxpr_io.dumps(jaxpr_io.trace(fn, X4))


@functools.cache
def nested_jit_file() -> bytes:
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: jax.jit(lambda a: a * 2.0)(x) + 1.0, X4))


@functools.cache
def donating_file() -> bytes:
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda p, x: jax.jit(lambda a, b: a * b + 1.0)(p, x), X4, X4))


@functools.cache
def mesh():
  return jax.make_mesh((2, 4), ("x", "y"), axis_types=(AxisType.Auto,) * 2)


@functools.cache
def named_sharding_file() -> bytes:
  sharding = NamedSharding(mesh(), P("x", "y"))
  return jaxpr_io.dumps(jaxpr_io.trace(
      jax.jit(jnp.sin, in_shardings=sharding), X84))


@functools.cache
def shard_map_file() -> bytes:
  fn = jax.shard_map(lambda a: a * 2, mesh=mesh(), in_specs=P("x", "y"),
                     out_specs=P("x", "y"))
  return jaxpr_io.dumps(jaxpr_io.trace(fn, X84))


@functools.cache
def dot_file() -> bytes:
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda a: jnp.dot(a, a, precision=jax.lax.Precision.HIGHEST),
      np.eye(2, dtype=np.float32)))


@functools.cache
def symbolic_file() -> bytes:
  (b,) = jax.export.symbolic_shape("b", constraints=("b >= 2",))
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: jnp.sum(x * 2.0) + x[0, 0], jax.ShapeDtypeStruct((b, 4), F32)))


_BIG_CONST = np.arange(32, dtype=np.float32) / 7   # 128 bytes: a blob


@functools.cache
def blob_file() -> bytes:
  return jaxpr_io.dumps(jaxpr_io.trace(lambda x: x * _BIG_CONST, X4[0]))


# ======================================================== 1. ffi_call
_PROCESS_BOUND = ["xla_ffi_python_cpu_callback",
                  "xla_ffi_partitioned_python_cpu_callback",
                  "xla_python_cpu_callback"]


def _retarget(target: str, attributes=None):
  def mutate(msg):
    replace_string(msg, "my_target", target)
    if attributes is not None:
      (eqn,) = eqns(msg, "ffi_call")
      set_value(msg, param(msg, eqn, "attributes"), attributes)
  return mutate


@pytest.mark.parametrize("trusted", [False, True], ids=["untrusted",
                                                        "trusted"])
@pytest.mark.parametrize("target", _PROCESS_BOUND)
def test_ffi_python_callback_target_is_refused_even_trusted(
    tmp_path, target, trusted):
  """JAX's host-callback targets take the index of a Python object in the
  tracing process: from a file it points into nowhere."""
  data = craft(ffi_file(), _retarget(target, (("index", 123456789),)))
  assert_rejected(write(tmp_path, data), re.escape(target), "ffi_call",
                  trusted=trusted)


_FFI_ALLOWLIST = """
    e = expect_format_error(jaxpr_io.load, ARGS[0])
    jaxpr_io.register_ffi_target("my_target")
    prog = jaxpr_io.load(ARGS[0])
    (eqn,) = [e for e in prog.closed_jaxpr.jaxpr.eqns
              if e.primitive.name == "ffi_call"]
    print("TARGET:", eqn.params["target_name"])
    print("ATTRIBUTES:", dict(eqn.params["attributes"]))
"""


def test_ffi_unregistered_target_needs_register_ffi_target(tmp_path):
  child = run_child(_FFI_ALLOWLIST, write(tmp_path, ffi_file()))
  message = format_error(child)
  assert "my_target" in message and "register_ffi_target" in message, message
  assert child.lines("TARGET:") == ["my_target"], str(child)
  assert child.lines("ATTRIBUTES:") == ["{'a': 1}"], str(child)


# ==================================================== 2. debug_print fmt
_SECRET = "hunter2-d0-not-print-me"
_HOSTILE_FMTS = {
    "globals_walk": "{x.__array__.__globals__[config].os.environ"
                    "[SECRET_TOKEN]}",
    "import_walk": "{x.__class__.__init__.__globals__[sys].modules[os]"
                   ".system}",
    "subclasses_walk": "{x.__class__.__mro__[1].__subclasses__}",
    "nested_field_in_spec": "{x:>{x}}",
}

_FMT_REJECTED = """
    expect_format_error(jaxpr_io.load, ARGS[0])
    prog = jaxpr_io.load(ARGS[0], trusted=True)   # loads; never called
    print("TRUSTED_LOADED:", type(prog).__name__)
"""


@pytest.mark.parametrize("name", list(_HOSTILE_FMTS))
def test_debug_print_attribute_walk_is_refused(tmp_path, name):
  fmt = _HOSTILE_FMTS[name]
  data = craft(debug_print_file(),
               lambda msg: replace_string(msg, _FMT, fmt))
  child = run_child(_FMT_REJECTED, write(tmp_path, data),
                    env={"SECRET_TOKEN": _SECRET})
  message = format_error(child)
  assert re.search("format|fmt", message, re.IGNORECASE), message
  assert "debug_print" in message, message
  assert child.lines("TRUSTED_LOADED:") == ["Program"], str(child)
  assert _SECRET not in child.out + child.err


@pytest.mark.parametrize("fmt", ["{x[0]:>1000000000}", "{x:>1000000000}",
                                 "{x:.999999999f}"])
def test_debug_print_huge_width_is_refused_fast(tmp_path, fmt):
  data = craft(debug_print_file(), lambda msg: replace_string(msg, _FMT, fmt))
  child = run_child(_REJECT, write(tmp_path, data))
  message = format_error(child)
  assert "debug_print" in message, message
  assert number(child, "ELAPSED:") < 10, str(child)
  assert number(child, "RSS_GROWTH_MIB:") < 64, str(child)


_FMT_PRINTS = """
    prog = jaxpr_io.load(ARGS[0])
    out = prog(jnp.asarray(np.arange(1, 5, dtype=np.float32)))
    jax.effects_barrier()
    print("RESULT:", np.asarray(out).tolist(), flush=True)
"""


def test_debug_print_benign_format_spec_prints(tmp_path):
  data = craft(debug_print_file(),
               lambda msg: replace_string(msg, _FMT, "benign:{x:>8}|"))
  child = run_child(_FMT_PRINTS, write(tmp_path, data))
  assert_clean_exit(child)
  assert "benign:    10.0|" in child.out, str(child)
  assert child.lines("RESULT:") == ["[2.0, 4.0, 6.0, 8.0]"], str(child)


# ================================================ 3. compiler_options_kvs
_DROPPED = """
    trusted = "trusted" in ARGS
    prog, caught = load_warnings(ARGS[0], trusted=trusted)
    (eqn,) = [e for e in prog.closed_jaxpr.jaxpr.eqns
              if e.primitive.name in ("jit", "pjit")]
    print("PARAM:", repr(eqn.params[ARGS[1]]))
    if not trusted:
      args = [jnp.asarray(np.arange(1, 5, dtype=np.float32))
              for _ in prog.in_avals]
      out = prog(*args)
      print("RESULT:", np.asarray(out).tolist())
      print("ARGS_DELETED:", [a.is_deleted() for a in args])
      print("ARGS_READ:", [np.asarray(a).tolist() for a in args])
"""


def _dropped_warnings(child, param_name: str) -> list[str]:
  return [w for w in child.lines("WARNING:")
          if w.startswith("DroppedParamWarning") and param_name in w]


def _with_compiler_options(dump_dir: str):
  def mutate(msg):
    (eqn,) = eqns(msg, "jit")
    set_value(msg, param(msg, eqn, "compiler_options_kvs", add=True),
              (("xla_dump_to", dump_dir),))
  return mutate


def test_compiler_options_are_dropped(tmp_path):
  dump_dir = str(tmp_path / "dump")
  path = write(tmp_path, craft(nested_jit_file(),
                               _with_compiler_options(dump_dir)))
  child = run_child(_DROPPED, path, "compiler_options_kvs")
  assert_clean_exit(child)
  assert _dropped_warnings(child, "compiler_options_kvs"), str(child)
  assert child.lines("PARAM:") == ["()"], str(child)
  assert child.lines("RESULT:") == ["[3.0, 5.0, 7.0, 9.0]"], str(child)
  assert not (tmp_path / "dump").exists()


def test_compiler_options_are_kept_when_trusted(tmp_path):
  dump_dir = str(tmp_path / "dump")
  path = write(tmp_path, craft(nested_jit_file(),
                               _with_compiler_options(dump_dir)))
  child = run_child(_DROPPED, path, "compiler_options_kvs", "trusted")
  assert_clean_exit(child)
  assert not _dropped_warnings(child, "compiler_options_kvs"), str(child)
  assert child.lines("PARAM:") == [repr((("xla_dump_to", dump_dir),))], (
      str(child))
  assert not (tmp_path / "dump").exists()   # never called


# ====================================================== 4. donated_invars
def _donating(msg):
  (eqn,) = eqns(msg, "jit")
  set_value(msg, param(msg, eqn, "donated_invars"), (True, True))


def test_donation_is_dropped(tmp_path):
  child = run_child(_DROPPED, write(tmp_path, craft(donating_file(),
                                                    _donating)),
                    "donated_invars")
  assert_clean_exit(child)
  assert _dropped_warnings(child, "donated_invars"), str(child)
  assert child.lines("PARAM:") == ["(False, False)"], str(child)
  assert child.lines("RESULT:") == ["[2.0, 5.0, 10.0, 17.0]"], str(child)
  assert child.lines("ARGS_DELETED:") == ["[False, False]"], str(child)
  assert child.lines("ARGS_READ:") == [
      "[[1.0, 2.0, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0]]"], str(child)


def test_donation_is_kept_when_trusted(tmp_path):
  child = run_child(_DROPPED, write(tmp_path, craft(donating_file(),
                                                    _donating)),
                    "donated_invars", "trusted")
  assert_clean_exit(child)
  assert not _dropped_warnings(child, "donated_invars"), str(child)
  assert child.lines("PARAM:") == ["(True, True)"], str(child)


# ============================================================ 5. meshes
# Field edits of the concrete Mesh record of a NamedSharding: (axis_sizes,
# axis_names, axis_types, platform, device_ids); the mesh is (2, 4) over
# ("x", "y"), Auto axes, device ids 0..7. Each maps to the field the message
# must name.
_ids = tuple(range(8))
_MESH_EDITS = {
    "zero_size_axis_no_devices": ({0: (0, 4), 4: ()}, "axis_sizes"),
    "only_axis_size_zero": ({0: (0,), 1: ("x",), 2: (axis_type("Auto"),),
                             4: ()}, "axis_sizes"),
    "sizes_product_is_not_device_count": ({0: (2, 2)}, "axis_sizes"),
    "inferred_size": ({0: (-1, 8)}, "axis_sizes"),
    "negative_sizes": ({0: (-2, -4)}, "axis_sizes"),
    "bool_size": ({0: (True, 8)}, "axis_sizes"),
    "huge_sizes": ({0: (1 << 40, 1 << 40)}, "axis_sizes"),
    "huge_sizes_no_devices": ({0: (1 << 62, 1 << 62), 4: ()}, "axis_sizes"),
    "repeated_axis_names": ({1: ("x", "x")}, "axis_names"),
    "axis_name_not_a_string": ({1: ("x", 3)}, "axis_names"),
    "axis_types_too_short": ({2: (axis_type("Auto"),)}, "axis_types"),
    "axis_types_not_enums": ({2: (1, 2)}, "axis_types"),
    "axis_types_not_a_tuple": ({2: axis_type("Auto")}, "axis_types"),
    "repeated_device_ids": ({4: (0, 0, 1, 2, 3, 4, 5, 6)}, "device"),
    "negative_device_id": ({4: (-1,) + _ids[1:]}, "device"),
    "device_ids_not_a_tuple": ({4: 8}, "device"),
}


def _edit_mesh(edits):
  def mutate(msg):
    (mesh_record,) = [r for r in records(msg, "jax.sharding.Mesh")
                      if r.fields[1].tuple.items]
    for index, value in edits.items():
      set_value(msg, mesh_record.fields[index], value)
  return mutate


@pytest.mark.parametrize("name", list(_MESH_EDITS))
def test_bad_concrete_mesh_is_a_format_error(tmp_path, name):
  edits, field = _MESH_EDITS[name]
  data = craft(named_sharding_file(), _edit_mesh(edits))
  assert_rejected(write(tmp_path, data), r"\bMesh\b", field)


@pytest.mark.parametrize("name", ["zero_size_axis_no_devices",
                                  "sizes_product_is_not_device_count",
                                  "repeated_axis_names",
                                  "axis_types_too_short"])
def test_bad_shard_map_mesh_is_a_format_error(tmp_path, name):
  edits, field = _MESH_EDITS[name]

  def mutate(msg):
    (eqn,) = eqns(msg, "shard_map")
    value = param(msg, eqn, "mesh")
    (mesh_record,) = records_in(value, list(msg.strings).index(
        "jax.sharding.Mesh"))
    for index, v in edits.items():
      set_value(msg, mesh_record.fields[index], v)
  data = craft(shard_map_file(), mutate)
  assert_rejected(write(tmp_path, data), r"\bMesh\b", field, "shard_map")


# The equation context's current abstract mesh: (axis_sizes, axis_names,
# axis_types, abstract_device).
_ABSTRACT_MESHES = {
    "zero_size_axis": (((0,), ("x",), (axis_type("Explicit"),), None),
                       "axis_sizes"),
    "negative_size": (((-3,), ("x",), (axis_type("Explicit"),), None),
                      "axis_sizes"),
    "huge_size": (((1 << 62, 1 << 62), ("x", "y"),
                   (axis_type("Explicit"),) * 2, None), "axis_sizes"),
    "repeated_axis_names": (((2, 2), ("x", "x"),
                             (axis_type("Explicit"),) * 2, None),
                            "axis_names"),
    "axis_types_too_long": (((2,), ("x",), (axis_type("Explicit"),) * 2,
                             None), "axis_types"),
    "axis_type_not_a_member": (((2,), ("x",),
                                (Enum("jax.sharding.AxisType", "Bogus"),),
                                None), "AxisType"),
    "sizes_not_ints": ((("2",), ("x",), (axis_type("Explicit"),), None),
                       "axis_sizes"),
}


@pytest.mark.parametrize("name", list(_ABSTRACT_MESHES))
def test_bad_abstract_mesh_is_a_format_error(tmp_path, name):
  fields, field = _ABSTRACT_MESHES[name]

  def mutate(msg):
    for ctx in msg.eqn_contexts:
      set_value(msg, ctx.cur_abstract_mesh,
                Rec("jax.sharding.AbstractMesh", fields))
  data = craft(nested_jit_file(), mutate)
  assert_rejected(write(tmp_path, data), "AbstractMesh|AxisType", field)


# ================================================= 6. dot_general precision
_HIGHEST = Enum("jax.lax.Precision", "HIGHEST")
_PRECISIONS = {
    "tuple_in_a_slot": ((4, 1), _HIGHEST),
    "ints": (4, 1),
    "strings": ("HIGHEST", "HIGHEST"),
    "one_slot": (_HIGHEST,),
    "three_slots": (_HIGHEST, _HIGHEST, _HIGHEST),
}

_PRECISION_CHILD = """
    e = None
    try:
      prog = jaxpr_io.load(ARGS[0])
    except FormatError as e:
      print("FORMAT_ERROR:", " ".join(str(e).split()))
      sys.exit(0)
    print("LOADED: calling it", flush=True)
    try:
      print("CALLED:", prog(np.eye(2, dtype=np.float32)))
    except BaseException as e:
      print("CALL_RAISED:", type(e).__name__, e)
    sys.exit(4)
"""


@pytest.mark.parametrize("name", list(_PRECISIONS))
def test_bad_dot_general_precision_is_a_format_error_at_load(tmp_path,
                                                             name):
  def mutate(msg):
    (eqn,) = eqns(msg, "dot_general")
    set_value(msg, param(msg, eqn, "precision"), _PRECISIONS[name])
  child = run_child(_PRECISION_CHILD, write(tmp_path, craft(dot_file(),
                                                            mutate)))
  message = format_error(child)
  assert "precision" in message and "dot_general" in message, message


# ===================================================== 7. symbolic dims
def _set_dims(text: str):
  def mutate(msg):
    b = list(msg.strings).index("b")
    new = intern(msg, text)
    for aval in msg.avals:
      for dim in aval.shaped_array.shape:
        if dim.WhichOneof("kind") == "expr" and dim.expr == b:
          dim.expr = new
  return mutate


@pytest.mark.parametrize("text", ["9^99999999", "b + 9^99999999",
                                  "0 - 5", "2^70", "b * 2^70"])
def test_bad_symbolic_dimension_is_a_format_error_fast(tmp_path, text):
  data = craft(symbolic_file(), _set_dims(text))
  assert_rejected(write(tmp_path, data), "symbolic|dimension", seconds=10,
                  timeout=60)


@pytest.mark.parametrize("constraint", ["b >= 9^99999999",
                                        "9^99999999 >= b",
                                        "b <= 2^70"])
def test_bad_symbolic_constraint_is_a_format_error_fast(tmp_path,
                                                        constraint):
  def mutate(msg):
    msg.symbolic_constraints[:] = [constraint]
  data = craft(symbolic_file(), mutate)
  assert_rejected(write(tmp_path, data), "constraint", seconds=10,
                  timeout=60)


# ================================================ 8. many tiny equations


def many_equations_file(target_bytes: int) -> bytes:
  """A program of one chain of `neg` equations, each on the previous one's
  output, about `target_bytes` long: the columns of a traced `-x` repeated
  (20 bytes an equation), the input column counting up."""
  base = message(jaxpr_io.dumps(jaxpr_io.trace(lambda x: -x, X4)))
  assert len(base.jaxprs) == 1
  root = root_jaxpr(base)
  cols = root.equations
  n = max(1, (target_bytes - base.ByteSize()) // 20)
  u32 = lambda column: np.frombuffer(column, "<u4")  # noqa: E731
  assert len(u32(cols.kinds)) == 1 and len(root.invars) == 1
  cols.kinds = np.repeat(u32(cols.kinds), n).tobytes()
  cols.outvars = np.repeat(u32(cols.outvars), n).tobytes()
  cols.name_stacks = np.repeat(u32(cols.name_stacks), n).tobytes()
  cols.contexts = np.repeat(u32(cols.contexts), n).tobytes()
  cols.invars = np.arange(n, dtype="<i4").tobytes()  # eqn k reads var k
  root.outvars[:] = [n]
  return frame(base.SerializeToString(deterministic=True))


_MEMORY_CHILD = """
    import threading
    from jaxpr_io.format import container
    from jaxpr_io.read import reader
    from jaxpr_io.safety import costs
    size_mib = os.path.getsize(ARGS[0]) / 2**20
    with open(ARGS[0], "rb") as f:
      stored = container.Container(f.read())
    counts = costs.stored_counts(
        reader.parse_program(stored.program, ARGS[0]), len(stored.program))
    # The objects the file stores at their floor, + 16x its size + 64 MiB.
    limit_mib = costs.load_bound(counts, os.path.getsize(ARGS[0])) / 2**20
    del stored
    reset_peak_rss()
    base = current_rss_mib()     # after importing jax and jaxpr_io

    def watchdog():
      while True:
        if rss_mib() - base > limit_mib:
          print("RSS_LIMIT_EXCEEDED:", rss_mib() - base, flush=True)
          os._exit(7)
        time.sleep(0.02)
    threading.Thread(target=watchdog, daemon=True).start()
    start = time.monotonic()
    try:
      prog = jaxpr_io.load(ARGS[0])
      n_eqns = len(prog.closed_jaxpr.jaxpr.eqns)
      print("OUTCOME: loaded", n_eqns, "equations", flush=True)
    except FormatError as e:
      print("OUTCOME: FormatError", " ".join(str(e).split())[:300])
    elapsed = time.monotonic() - start
    growth = rss_mib() - base
    maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"NUMBERS: file {size_mib:.1f} MiB, RSS after import {base:.0f} "
          f"MiB, peak RSS {rss_mib():.0f} MiB, growth {growth:.0f} MiB, "
          f"limit {limit_mib:.0f} MiB, {elapsed:.1f} s (ru_maxrss "
          f"{maxrss:.0f} MiB)")
    print("GROWTH_MIB:", growth)
    print("LIMIT_MIB:", limit_mib)
    print("ELAPSED:", elapsed)
"""


@pytest.mark.parametrize("mib", [9.5, 3, 1])
def test_many_tiny_equations_load_in_bounded_memory(tmp_path, mib):
  """A chain of 500,000 `neg`s is what `dumps` writes for such a program:
  an honest file, which loads (issue 40: it was refused past about 140,000
  equations), and within what the cost model charges for it (the floor of
  the objects it stores + 16x its size + 64 MiB), a watchdog killing the
  child past that."""
  data = many_equations_file(int(mib * 2**20))
  assert abs(len(data) - mib * 2**20) < 0.02 * 2**20
  child = run_child(_MEMORY_CHILD, write(tmp_path, data), timeout=300)
  print("\n".join(child.lines("OUTCOME:") + child.lines("NUMBERS:"))
        or str(child))
  assert_clean_exit(child)
  (outcome,) = child.lines("OUTCOME:")
  assert number(child, "GROWTH_MIB:") <= number(child, "LIMIT_MIB:"), (
      str(child))
  assert outcome.startswith("loaded"), outcome


# ========================================================== 9. nesting
def nested_file(levels: int) -> bytes:
  """A chain of `levels` jaxprs: the innermost negates its input, each other
  one calls the one below it with a `jit` equation."""
  assert levels >= 2
  data = jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: jax.jit(lambda a: -a)(x), X4))

  def mutate(msg):
    outer_index = msg.closed_jaxprs[msg.root].jaxpr
    outer = msg.jaxprs[outer_index]
    (jit_eqn,) = proto_edit.equations(msg, outer_index)
    assert msg.strings[jit_eqn.primitive] == "jit"
    template = msg.param_sets[jit_eqn.param_set]
    below = msg.root                          # closed jaxpr of depth 2
    for _ in range(levels - 2):
      params = msg.param_sets.add()
      params.CopyFrom(template)
      (body,) = [p for p in params.params if msg.strings[p.name] == "jaxpr"]
      body.value.closed_jaxpr = below
      jaxpr = msg.jaxprs.add()
      jaxpr.CopyFrom(outer)
      (eqn,) = proto_edit.equations(msg, len(msg.jaxprs) - 1)
      eqn.param_set = len(msg.param_sets) - 1
      closed = msg.closed_jaxprs.add()
      closed.jaxpr = len(msg.jaxprs) - 1
      below = len(msg.closed_jaxprs) - 1
    msg.root = below
  return craft(data, mutate)


_NESTED_CHILD = """
    x = jnp.asarray(np.arange(1, 5, dtype=np.float32))
    data = open(ARGS[0], "rb").read()
    prog = jaxpr_io.loads(data, check=True)
    print("TEXT_LINES:", str(prog).count("\\n"))
    print("JIT:", jax.jit(prog)(x).tolist())
    print("GRAD:", jax.grad(lambda v: prog(v).sum())(x).tolist())
    print("VMAP:", jax.vmap(prog)(jnp.stack([x, 2 * x])).tolist())
    print("REDUMP_SAME:", jaxpr_io.dumps(prog) == data)
"""


def test_nesting_at_the_limit_works(tmp_path):
  child = run_child(_NESTED_CHILD,
                    write(tmp_path, nested_file(MAX_JAXPR_DEPTH)),
                    timeout=300)
  assert_clean_exit(child)
  assert number(child, "TEXT_LINES:") >= MAX_JAXPR_DEPTH, str(child)
  assert child.lines("JIT:") == ["[-1.0, -2.0, -3.0, -4.0]"], str(child)
  assert child.lines("GRAD:") == ["[-1.0, -1.0, -1.0, -1.0]"], str(child)
  assert child.lines("VMAP:") == [
      "[[-1.0, -2.0, -3.0, -4.0], [-2.0, -4.0, -6.0, -8.0]]"], str(child)
  assert child.lines("REDUMP_SAME:") == ["True"], str(child)


def test_nesting_one_past_the_limit_is_a_format_error(tmp_path):
  path = write(tmp_path, nested_file(MAX_JAXPR_DEPTH + 1))
  assert_rejected(path, "nest", str(MAX_JAXPR_DEPTH))


# ================================================ 10. corrupt constant data
def corrupt_blob_file() -> bytes:
  data = blob_file()
  msg = message(data)
  (blob,) = msg.blobs
  section = bytearray(data_section(data))
  section[blob.offset + 5] ^= 0x40         # the CRC stays as written
  return frame(msg.SerializeToString(deterministic=True), bytes(section))


_CORRUPT_CHILD = """
    path, copy = ARGS[0], ARGS[1]
    x = np.float32(2)
    fresh = lambda: jaxpr_io.load(path)     # lazy: loading succeeds
    print("STEP: dumps"); expect_format_error(jaxpr_io.dumps, fresh())
    print("STEP: save"); expect_format_error(jaxpr_io.save, copy, fresh())
    print("COPY_EXISTS:", os.path.exists(copy))
    print("STEP: str"); expect_format_error(str, fresh())
    print("STEP: call"); expect_format_error(fresh(), x)
    print("STEP: jit"); expect_format_error(jax.jit(fresh()), x)
    print("STEP: loads"); expect_format_error(
        lambda: jaxpr_io.loads(open(path, "rb").read()).closed_jaxpr)
    print("STEP: check"); expect_format_error(jaxpr_io.load, path, check=True)
"""


def test_corrupt_constant_is_caught_by_every_use(tmp_path):
  assert message(blob_file()).blobs, "the constant must live in a blob"
  copy = tmp_path / "copy.jaxpr"
  child = run_child(_CORRUPT_CHILD, write(tmp_path, corrupt_blob_file()),
                    copy)
  assert_clean_exit(child)
  messages = child.lines("FORMAT_ERROR:")
  assert len(messages) == 7, str(child)
  for message_ in messages:
    assert "checksum" in message_ and "blob 0" in message_, message_
  assert child.lines("COPY_EXISTS:") == ["False"], str(child)
  assert not copy.exists()


def test_blob_crc_fixed_corruption_is_just_other_data(tmp_path):
  """Control: with its CRC fixed, the same edit is a valid file."""
  data = blob_file()
  msg = message(data)
  section = bytearray(data_section(data))
  section[msg.blobs[0].offset + 5] ^= 0x40
  fix_blob_crcs(msg, bytes(section))
  child = run_child("print('VALUE:', jaxpr_io.load(ARGS[0], check=True)"
                    "(np.float32(1)).shape)",
                    write(tmp_path, frame(msg.SerializeToString(), bytes(
                        section))))
  assert_clean_exit(child)
  assert child.lines("VALUE:") == ["(32,)"], str(child)


# ========================================= 11. PartitionSpec('x', 'x')
def _duplicate_axis(primitive: str, param_name: str):
  def mutate(msg):
    strings = list(msg.strings)
    (eqn,) = eqns(msg, primitive)
    value = param(msg, eqn, param_name)
    spec = next(records_in(value,
                           strings.index("jax.sharding.PartitionSpec")))
    partitions = spec.fields[0].tuple.items
    assert [strings[v.str] for v in partitions] == ["x", "y"]
    partitions[1].str = partitions[0].str
  return mutate


@pytest.mark.parametrize("where", ["jit_in_shardings", "shard_map_in_specs"])
def test_partition_spec_naming_an_axis_twice(tmp_path, where):
  if where == "jit_in_shardings":
    data = craft(named_sharding_file(), _duplicate_axis("jit",
                                                        "in_shardings"))
  else:
    data = craft(shard_map_file(), _duplicate_axis("shard_map", "in_specs"))
  message = assert_rejected(write(tmp_path, data), "PartitionSpec", "'x'")
  assert "Traceback" not in message


# ========================================= 12. save over a private file
_SAVE_CHILD = """
    path = ARGS[0]
    with open(path, "w") as f:
      f.write("private")
    os.chmod(path, 0o600)
    jaxpr_io.save(path, jaxpr_io.trace(lambda x: x + 1, np.float32(1)))
    print("MODE:", oct(os.stat(path).st_mode & 0o777))
    print("VALUE:", float(jaxpr_io.load(path)(np.float32(2))))
"""


def test_save_over_a_private_file_keeps_it_private(tmp_path):
  child = run_child(_SAVE_CHILD, tmp_path / "private.jaxpr")
  assert_clean_exit(child)
  assert child.lines("MODE:") == ["0o600"], str(child)
  assert child.lines("VALUE:") == ["3.0"], str(child)
