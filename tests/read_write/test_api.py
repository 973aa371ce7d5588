"""The program API: signatures, metadata, save/load, registries and the
exactness of every param type."""

from __future__ import annotations

import math
import os
import stat
import struct
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.extend import core as jex_core

import jaxpr_io
from jaxpr_io.format import container
from tests.support import proto_edit
from tests.support.roundtrip import assert_roundtrip


def _probe_primitive(name):
  """An identity primitive whose params are whatever the test binds."""
  prim = jex_core.Primitive(name)
  prim.def_impl(lambda x, **_: x)
  prim.def_abstract_eval(lambda x, **_: x)
  return prim


PROBE = _probe_primitive("jaxpr_io_probe")
jaxpr_io.register_primitive(PROBE, name="tests.probe")


def _bits(x):
  return struct.pack("<d", x)


def test_signature_and_call():
  def f(params, x, *, scale):
    return {"y": x @ params["w"] * scale, "n": (x.sum(),)}
  params = {"w": np.ones((3, 2), np.float32)}
  x = np.arange(6, dtype=np.float32).reshape(2, 3)
  prog = jaxpr_io.trace(f, params, x, scale=np.float32(2))
  prog.metadata["model"] = "tiny"
  loaded = jaxpr_io.loads(jaxpr_io.dumps(prog))
  assert loaded.in_tree == prog.in_tree
  assert loaded.out_tree == prog.out_tree
  assert loaded.metadata == {"model": "tiny"}
  assert loaded.producer["format_version"] == jaxpr_io.FORMAT_VERSION
  assert loaded.producer["jax_version"] == jax.__version__
  assert [a.str_short() for a in loaded.in_avals] == [
      "float32[3,2]", "float32[2,3]", "float32[]"]
  out = loaded(params, x, scale=np.float32(2))
  expected = f(params, x, scale=np.float32(2))
  np.testing.assert_array_equal(out["y"], expected["y"])
  with pytest.raises(TypeError, match="structure"):
    loaded(params, x)  # missing keyword argument


def test_shape_dtype_struct_inputs():
  spec = jax.ShapeDtypeStruct((4,), jnp.float32)
  prog = jaxpr_io.trace(lambda v: jnp.cumsum(v), spec)
  loaded = assert_roundtrip(prog)
  np.testing.assert_array_equal(loaded(np.arange(4.0, dtype=np.float32)),
                                np.cumsum(np.arange(4.0)))


def test_bare_closed_jaxpr_gets_flat_signature():
  closed = jax.make_jaxpr(lambda a, b: (a + b, a * b))(1.0, 2.0)
  loaded = jaxpr_io.loads(jaxpr_io.dumps(closed))
  assert loaded.in_tree == jax.tree_util.tree_structure(((0, 0), {}))
  assert loaded.out_tree == jax.tree_util.tree_structure([0, 0])
  assert [float(v) for v in loaded(1.0, 2.0)] == [3.0, 2.0]


def test_dict_with_int_keys_in_signature():
  # jax.export refuses these (jax-ml/jax#32680).
  prog = jaxpr_io.trace(lambda d: {1: d[3] * 2, 0: d[5]},
                        {3: np.float32(1), 5: np.float32(2)})
  loaded = assert_roundtrip(prog)
  assert loaded.out_tree == prog.out_tree
  assert loaded({3: 1.0, 5: 2.0}) == {1: 2.0, 0: 2.0}


def test_save_is_atomic_and_load_maps(tmp_path, monkeypatch):
  weights = np.arange(1000, dtype=np.float32)
  prog = jaxpr_io.trace(lambda x: x * weights, np.ones(1000, np.float32))
  path = tmp_path / "p.jaxpr"
  jaxpr_io.save(path, prog)
  assert os.listdir(tmp_path) == ["p.jaxpr"]
  original = path.read_bytes()
  assert original == jaxpr_io.dumps(prog)

  # A crash while writing leaves the old file and no temporary file.
  def crash(*args):
    raise OSError("disk full")
  monkeypatch.setattr(os, "replace", crash)
  with pytest.raises(OSError, match="disk full"):
    jaxpr_io.save(path, jaxpr_io.trace(lambda x: x + 1, 1.0))
  monkeypatch.undo()
  assert os.listdir(tmp_path) == ["p.jaxpr"]
  assert path.read_bytes() == original

  loaded = jaxpr_io.load(path)
  (const,) = loaded.closed_jaxpr.consts
  assert not const.flags.writeable and not const.flags.owndata
  np.testing.assert_array_equal(loaded(np.ones(1000, np.float32)), weights)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o644])
def test_save_over_a_file_keeps_its_permissions(tmp_path, mode):
  """Saving over private weights must not make them readable by others."""
  prog = jaxpr_io.trace(lambda x: x * 2.0, 1.0)
  path = tmp_path / "p.jaxpr"
  path.write_bytes(b"old")
  os.chmod(path, mode)
  jaxpr_io.save(path, prog)
  assert stat.S_IMODE(os.stat(path).st_mode) == mode
  assert path.read_bytes() == jaxpr_io.dumps(prog)


def test_constants_are_stored_once_and_aligned():
  w = np.random.RandomState(0).randn(64, 64).astype(np.float32)
  prog = jaxpr_io.trace(lambda x: (x @ w, x @ w.copy()),
                        np.ones((2, 64), np.float32))
  data = jaxpr_io.dumps(prog)
  c = container.Container(data)
  assert c.data_offset % container.ALIGNMENT == 0
  assert len(c.data) == w.nbytes  # equal constants share one blob


def test_exact_param_values():
  values = dict(
      flag=True, count=3, np_count=np.int64(3), big=1 << 80,
      neg_zero=-0.0, nan=float("nan"), inf=-math.inf, tiny=5e-324,
      z=complex(1.5, -2.0), text="ünïcode", nothing=None,
      nested=(1, (True, "a"), ()), fs=frozenset({"x", "y"}),
      dtype=np.dtype("bfloat16"),
      scalar_type=np.float32, builtin_type=int,
      prim=jax.lax.add_p)
  closed = jax.make_jaxpr(lambda x: PROBE.bind(x, **values))(1.0)
  # The probe primitive has no lowering: check=True would refuse it.
  loaded = assert_roundtrip(closed, check=False).closed_jaxpr
  got = loaded.eqns[0].params
  assert list(got) == list(values)
  for key, value in values.items():
    assert type(got[key]) is type(value), key
  assert got["flag"] is True and got["count"] == 3
  assert got["np_count"].dtype == np.int64 and got["big"] == 1 << 80
  for key in ("neg_zero", "nan", "inf", "tiny"):
    assert _bits(got[key]) == _bits(values[key]), key
  assert got["nested"] == values["nested"] and got["fs"] == values["fs"]
  assert got["prim"] is jax.lax.add_p and got["scalar_type"] is np.float32


def test_nan_payload_param_is_exact():
  payload = struct.unpack("<d", struct.pack("<Q", 0x7FF8_0000_DEAD_BEEF))[0]
  closed = jax.make_jaxpr(lambda x: PROBE.bind(x, v=payload))(1.0)
  got = jaxpr_io.loads(jaxpr_io.dumps(closed)).closed_jaxpr.eqns[0].params
  assert _bits(got["v"]) == _bits(payload)


def test_unsupported_param_names_the_place():
  class Opaque:
    pass
  closed = jax.make_jaxpr(
      lambda x: jax.jit(lambda y: PROBE.bind(y, thing=Opaque()))(x))(1.0)
  with pytest.raises(jaxpr_io.UnsupportedError) as info:
    jaxpr_io.dumps(closed)
  message = str(info.value)
  assert "equation 0 (jit), param 'jaxpr'" in message
  assert "equation 0 (jaxpr_io_probe), param 'thing'" in message
  assert "Opaque" in message and "register_param_codec" in message


def test_unregistered_primitive_is_refused():
  stray = _probe_primitive("stray_probe")
  closed = jax.make_jaxpr(lambda x: stray.bind(x))(1.0)
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match="'stray_probe'.*register_primitive"):
    jaxpr_io.dumps(closed)


def test_duplicate_registrations_name_the_earlier_one():
  with pytest.raises(ValueError, match="already registered under the name "
                     "'tests.probe'"):
    jaxpr_io.register_primitive(PROBE, name="tests.other")
  with pytest.raises(ValueError, match="'tests.probe' is already registered"):
    jaxpr_io.register_primitive(_probe_primitive("x"), name="tests.probe")
  with pytest.raises(ValueError, match="already registered"):
    jaxpr_io.register_primitive(jax.lax.add_p, name="add2")


def test_check_runs_jax_type_checker():
  closed = jax.make_jaxpr(lambda x: x + 1.0)(np.float32(1))
  data = bytearray(jaxpr_io.dumps(closed))
  c = container.Container(bytes(data))
  msg = jaxpr_io.format._proto.Program.FromString(c.program)
  # Make the output f64 while `add` still computes f32: structurally fine,
  # ill-typed.
  (eqn,) = proto_edit.equations(msg, 0)
  new_aval = msg.avals.add()
  new_aval.CopyFrom(msg.avals[eqn.outvars[0]])
  new_aval.shaped_array.dtype.dtype = jaxpr_io.format._proto.DType["FLOAT64"]
  eqn.outvars[0] = len(msg.avals) - 1
  proto_edit.store(msg)
  bad = container.to_bytes(msg.SerializeToString(deterministic=True),
                           container.DataLayout())
  jaxpr_io.loads(bad)  # structure is valid
  with pytest.raises(jaxpr_io.FormatError, match="type-check"):
    jaxpr_io.loads(bad, check=True)


@pytest.mark.skipif(jax.default_backend() != "cpu",
                    reason="the CPU backend's limitation")
@pytest.mark.parametrize("dtype", ["INT1", "UINT1"])
def test_check_refuses_inputs_the_backend_cannot_take(dtype):
  # JAX's CPU backend cannot take int1 or uint1 arrays as arguments (the
  # original function cannot be called with them either); check=True
  # promises the first call works, so it refuses such a program.
  data = jaxpr_io.dumps(jax.make_jaxpr(lambda x: x.astype(jnp.int32))(
      np.zeros((4, 3), np.int8)))
  jaxpr_io.loads(data, check=True)

  def retype_input(msg):
    # The input (an aval index) gets a new aval of the same shape.
    root = msg.jaxprs[msg.closed_jaxprs[msg.root].jaxpr]
    aval = msg.avals.add()
    aval.CopyFrom(msg.avals[root.invars[0]])
    aval.shaped_array.dtype.dtype = jaxpr_io.format._proto.DType[dtype]
    root.invars[0] = len(msg.avals) - 1
  bad = proto_edit.edited(data, retype_input)
  with pytest.raises(jaxpr_io.FormatError,
                     match=rf"input 0 is u?int1\[4,3\].*cannot take"):
    jaxpr_io.loads(bad, check=True)


def test_symbolic_shapes_are_stored_as_expressions():
  b, = jax.export.symbolic_shape("b", constraints=("b >= 2",))
  spec = jax.ShapeDtypeStruct((b, 4), jnp.float32)

  def f(x):
    y = jnp.concatenate([x, x]).reshape(-1, 2)[: b // 2 + 1]
    return y.sum(0) + x.shape[0]
  prog = jaxpr_io.trace(f, spec)
  loaded = assert_roundtrip(prog)
  (dim, four) = loaded.in_avals[0].shape
  assert str(dim) == "b" and four == 4
  assert "b >= 2" in str(dim.scope)
  assert "floordiv(b, 2) + 1" in str(loaded.closed_jaxpr)


_DETERMINISM_SCRIPT = """
import hashlib, sys
import jax, jax.numpy as jnp
import jaxpr_io
policy = jax.checkpoint_policies.save_only_these_names("a", "b", "c", "dd")
def f(x):
  @jax.checkpoint
  def g(v):
    return jax.ad_checkpoint.checkpoint_name(jnp.sin(v), "a") * 2
  h = jax.checkpoint(lambda v: jnp.cos(v), policy=policy)(x)
  jax.debug.print("x={}", x)
  return g(h).sum()
print(hashlib.sha256(jaxpr_io.dumps(jaxpr_io.trace(jax.grad(f), 1.0)))
      .hexdigest())
"""


def test_bytes_do_not_depend_on_the_process():
  # Set iteration order follows string hashes, which differ per process.
  digests = set()
  for seed in ("1", "2", "3"):
    proc = subprocess.run(
        [sys.executable, "-c", "import jax.ad_checkpoint\n" +
         _DETERMINISM_SCRIPT], capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONHASHSEED=seed))
    assert proc.returncode == 0, proc.stderr
    digests.add(proc.stdout.split()[-1])
  assert len(digests) == 1
