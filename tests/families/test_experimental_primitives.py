"""Primitives of `jax.experimental` modules round-trip: key-reuse checking
(`consume`, `assert_consumed_value`), the multihost data-movement helpers,
`buffer_callback` (through the callback registry), `compute_on` (its compute
type validated, its compiler options dropped from untrusted files), the GPU
fusions `cudnn_fusion` and `fused_call` (stored here, lowered for CUDA from
the file on this machine without a GPU), and scheduling groups (`xla_metadata_call`, whose params differ between JAX
0.10 and 0.11+; the format stores 0.11's form, jaxpr_io/compat/jax_0_10.py).
Each test compares the loaded program with the original function."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import compute_on as compute_on_lib
from jax._src.cudnn.fusion import cudnn_fusion
from jax.experimental.fused import fused
from jax.experimental import buffer_callback as buffer_cb
from jax.experimental import multihost_utils
from jax.experimental import scheduling_groups
from jax.experimental.key_reuse import _core as key_reuse
from jax.sharding import Mesh, PartitionSpec as P

import jaxpr_io
from jaxpr_io import converters
from jaxpr_io.families import callbacks
from jaxpr_io import compat
from tests.support import proto_edit
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)

X = jnp.arange(8.0, dtype=jnp.float32) / 3.0
_JAX_010 = compat.JAX_VERSION.startswith("0.10.")


def _primitives(prog) -> set[str]:
  from jaxpr_io.safety import validate  # pylint: disable=g-import-not-at-top
  return {e.primitive.name for j in validate.walk_jaxprs(
      prog.closed_jaxpr.jaxpr) for e in j.eqns}


def _round_trips_like(f, primitive: str, x=X):
  """Traces `f` (which uses `primitive`), checks the round trip, and
  compares the loaded program with `f`: call, grad and vmap."""
  prog = jaxpr_io.trace(f, x)
  assert primitive in _primitives(prog)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(loaded(x), f(x))
  assert_same_outcome(jax.grad, lambda v: f(v).sum(),
                      lambda v: loaded(v).sum(), x)
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([x, x * 2]))
  return loaded


# ------------------------------------------------------------- key reuse
def _consumes(key):
  key = key_reuse.consume(key)
  key_reuse.assert_consumed(key)
  return jax.random.normal(key, (3,))


def test_key_reuse_primitives_and_their_effects_round_trip():
  key = jax.random.key(7)
  prog = jaxpr_io.trace(_consumes, key)
  assert {"consume", "assert_consumed_value"} <= _primitives(prog)
  # JAX cannot lower their effects, so check=True (which compiles) refuses
  # the program, as jax.jit refuses the original.
  loaded = assert_roundtrip(prog, check=False)
  assert loaded.closed_jaxpr.jaxpr.effects == prog.closed_jaxpr.jaxpr.effects
  assert_bit_identical(loaded(key), _consumes(key))
  with pytest.raises(ValueError, match="Cannot lower jaxpr with effects"):
    jax.jit(_consumes)(key)
  with pytest.raises(ValueError, match="Cannot lower jaxpr with effects"):
    jax.jit(loaded)(key)
  with pytest.raises(jaxpr_io.FormatError, match="cannot be lowered"):
    jaxpr_io.loads(jaxpr_io.dumps(prog), check=True)


# ------------------------------------------------------------- multihost
def test_multihost_array_helpers_round_trip():
  mesh = Mesh(np.array(jax.devices()[:1]), ("d",))

  def f(x):
    g = multihost_utils.host_local_array_to_global_array(x, mesh, P("d"))
    return multihost_utils.global_array_to_host_local_array(
        jnp.sin(g) * 2.0, mesh, P("d"))

  prog = jaxpr_io.trace(f, X)
  assert {"host_local_array_to_global_array",
          "global_array_to_host_local_array"} <= _primitives(prog)
  loaded = assert_roundtrip(prog)
  eqn = loaded.closed_jaxpr.jaxpr.eqns[0]
  assert eqn.params["global_mesh"] == mesh and eqn.params["pspec"] == P("d")
  assert_bit_identical(loaded(X), f(X))
  assert_bit_identical(jax.jit(loaded)(X), jax.jit(f)(X))
  assert_same_outcome(jax.vmap, f, loaded, jnp.stack([X, X + 1]))


# ------------------------------------------------------- buffer_callback
@callbacks.register_callback("tests.families.test_experimental_primitives.add_scaled")
def _add_scaled(ctx, out, x, y):
  del ctx
  np.asarray(out)[...] = np.asarray(x) * 3.0 + np.asarray(y)


def _with_buffer_callback(x, y):
  out = buffer_cb.buffer_callback(
      _add_scaled, jax.ShapeDtypeStruct(x.shape, x.dtype))(x, y)
  return jnp.cos(out)


def test_buffer_callback_calls_the_registered_function():
  prog = jaxpr_io.trace(_with_buffer_callback, X, X + 1.0)
  assert "buffer_callback" in _primitives(prog)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(loaded(X, X + 1.0), _with_buffer_callback(X, X + 1.0))
  assert_bit_identical(jax.jit(loaded)(X, X), jax.jit(_with_buffer_callback)(X, X))


def test_buffer_callback_needs_the_name_registered_where_it_loads():
  data = jaxpr_io.dumps(jaxpr_io.trace(_with_buffer_callback, X, X))
  bad = proto_edit.rename_string(
      data, "tests.families.test_experimental_primitives.add_scaled", "not.registered")
  with pytest.raises(jaxpr_io.FormatError, match="'not.registered'.*register"):
    jaxpr_io.loads(bad)


def test_unregistered_buffer_callback_is_refused_at_dumps():
  def f(x):
    return buffer_cb.buffer_callback(
        lambda ctx, out, a: None, jax.ShapeDtypeStruct(x.shape, x.dtype))(x)
  with pytest.raises(jaxpr_io.UnsupportedError, match="register_callback"):
    jaxpr_io.dumps(jaxpr_io.trace(f, X))


# ------------------------------------------------------------ compute_on
# JAX 0.10 calls the function transformation compute_on2; 0.11+ compute_on.
_compute_on = getattr(compute_on_lib, "compute_on2", None) or \
    compute_on_lib.compute_on


def _on_host(compiler_options=None):
  def f(x):
    y = _compute_on(compute_type="device_host",
                    out_memory_spaces=compat.MemorySpace.Device,
                    compiler_options=compiler_options)(
                        lambda a: jnp.sin(a) * 2.0)(x)
    return y + 1.0
  return f


def test_compute_on_round_trips():
  loaded = _round_trips_like(_on_host(), "compute_on")
  text = jax.jit(loaded).lower(X).as_text()
  assert '_xla_compute_type = "host"' in text


def test_untrusted_compute_on_loses_its_compiler_options():
  f = _on_host({"some_option": 1})
  prog = jaxpr_io.trace(f, X)
  data = jaxpr_io.dumps(prog)
  with pytest.warns(jaxpr_io.DroppedParamWarning,
                    match="compiler_options_json"):
    loaded = jaxpr_io.loads(data)
  assert loaded.closed_jaxpr.jaxpr.eqns[0].params[
      "compiler_options_json"] is None
  assert_bit_identical(loaded(X), _on_host()(X))
  trusted = jaxpr_io.loads(data, trusted=True)
  assert str(trusted.closed_jaxpr) == str(prog.closed_jaxpr)


def test_unknown_compute_type_is_a_format_error():
  data = jaxpr_io.dumps(jaxpr_io.trace(_on_host(), X))
  for bad in ("device_hostile", "gpu_stream:x"):
    with pytest.raises(jaxpr_io.FormatError, match="compute_type"):
      jaxpr_io.loads(proto_edit.rename_string(data, "device_host", bad))


# ---------------------------------------------------------- GPU fusions
def _custom_calls(exported) -> list[str]:
  """The custom-call lines of an exported module, without locations."""
  return [line.split(" loc(")[0].strip()
          for line in exported.mlir_module().splitlines()
          if "stablehlo.custom_call" in line]


def _same_cuda_lowering(loaded, original, args, target):
  checks = [jax.export.DisabledSafetyCheck.custom_call(target)]
  got = converters.to_exported(loaded, platforms=["cuda"],
                               disabled_checks=checks)
  want = jax.export.export(jax.jit(original), platforms=["cuda"],
                           disabled_checks=checks)(*args)
  assert got.platforms == ("cuda",)
  assert _custom_calls(got) == _custom_calls(want)
  assert any(target in line for line in _custom_calls(got))


@cudnn_fusion
def _matmul(a, b):
  return jnp.dot(a, b)


def _with_cudnn_fusion(a, b):
  return _matmul(a, b) + 1.0


def test_cudnn_fusion_round_trips_and_lowers_for_cuda():
  a = jnp.arange(16.0, dtype=jnp.float32).reshape(4, 4) / 7.0
  prog = jaxpr_io.trace(_with_cudnn_fusion, a, a.T)
  assert "cudnn_fusion" in _primitives(prog)
  # No CPU lowering: check=True (which compiles here) cannot pass.
  loaded = assert_roundtrip(prog, check=False)
  assert loaded.closed_jaxpr.jaxpr.eqns[0].params["name"] == "_matmul"
  # Called eagerly, the fusion evaluates its jaxpr, here as in the original.
  assert_bit_identical(loaded(a, a.T), _with_cudnn_fusion(a, a.T))
  _same_cuda_lowering(loaded, _with_cudnn_fusion, (a, a.T), "__cudnn$fusion")


def _with_fused(x):
  return fused(out_spaces=(compat.MemorySpace.Device,))(
      lambda a: jnp.sin(a) * 2.0)(x) + 1.0


def test_fused_call_round_trips_and_lowers_for_cuda():
  prog = jaxpr_io.trace(_with_fused, X)
  assert "fused_call" in _primitives(prog)
  loaded = assert_roundtrip(prog, check=False)
  assert loaded.closed_jaxpr.jaxpr.eqns[0].params["out_spaces"] == (
      compat.MemorySpace.Device,)
  # fused_call lowers only for CUDA, from the original as from the file.
  for fn in (_with_fused, loaded):
    with pytest.raises(NotImplementedError, match="fused_call"):
      fn(X)
  _same_cuda_lowering(loaded, _with_fused, (X,), "fused")


# ----------------------------------------------------- scheduling groups
def _grouped(x):
  y = scheduling_groups.scheduling_group(name="layer1")(
      lambda a: jnp.sin(a) * 2.0)(x)
  return y + 1.0


def test_scheduling_group_round_trips_with_its_metadata():
  loaded = _round_trips_like(_grouped, "xla_metadata_call")
  assert_same_outcome(lambda f: lambda x: jax.jvp(f, (x,), (x,)),
                      _grouped, loaded, X)
  # The group reaches XLA as it does from the original (the module is named
  # after the function).
  text = jax.jit(loaded).lower(X).as_text()
  want = jax.jit(_grouped).lower(X).as_text()
  assert text.split("\n", 1)[1] == want.split("\n", 1)[1]
  assert 'scheduling_group = "layer1"' in text


def test_scheduling_group_is_stored_in_the_vocabulary_form():
  # Every release stores JAX 0.11's params, so each reads the others' files
  # (tests/compat/exchange runs them across releases).
  msg = proto_edit.message(jaxpr_io.dumps(jaxpr_io.trace(_grouped, X)))
  (eqn,) = proto_edit.by_primitive(msg, "xla_metadata_call")
  names = {msg.strings[p.name]
           for p in msg.param_sets[eqn.param_set].params}
  assert names == {"jaxpr", "xla_metadata", "ad_metadata"}


def test_unknown_ad_metadata_is_a_format_error():
  data = jaxpr_io.dumps(jaxpr_io.trace(_grouped, X))
  bad = proto_edit.rename_string(data, "same", "sane")
  with pytest.raises(jaxpr_io.FormatError, match="ad_metadata|metadata"):
    jaxpr_io.loads(bad)


def _with_metadata_value(edit) -> bytes:
  """The grouped program's file with its `xla_metadata` param edited."""
  data = jaxpr_io.dumps(jaxpr_io.trace(_grouped, X))
  msg = proto_edit.message(data)
  (eqn,) = proto_edit.by_primitive(msg, "xla_metadata_call")
  (param,) = [p for p in msg.param_sets[eqn.param_set].params
              if msg.strings[p.name] == "xla_metadata"]
  edit(param.value.tuple.items[0].tuple)
  return proto_edit.reframe(msg, data)


def test_metadata_that_is_not_string_pairs_is_a_format_error():
  def to_int(pair):
    pair.items[1].int = 3
  with pytest.raises(jaxpr_io.FormatError, match=r"\(str, str\) pairs"):
    jaxpr_io.loads(_with_metadata_value(to_int))

  def repeat_key(pair):
    pair.items.add().CopyFrom(pair.items[1])
  with pytest.raises(jaxpr_io.FormatError, match="pairs"):
    jaxpr_io.loads(_with_metadata_value(repeat_key))


@pytest.mark.skipif(not _JAX_010, reason="JAX 0.10 passes metadata as params")
def test_jax010_refuses_metadata_named_like_its_jaxpr_param():
  data = jaxpr_io.dumps(jaxpr_io.trace(_grouped, X))
  bad = proto_edit.rename_string(data, "scheduling_group", "jaxpr")
  with pytest.raises(jaxpr_io.FormatError, match="names the key 'jaxpr'"):
    jaxpr_io.loads(bad)


@pytest.mark.skipif(not _JAX_010, reason="JAX 0.10's metadata params")
def test_jax010_refuses_metadata_it_cannot_lower():
  def f(x):
    return scheduling_groups.xla_metadata_call(priority=3)(jnp.sin)(x)
  with pytest.raises(jaxpr_io.UnsupportedError, match="priority=3"):
    jaxpr_io.dumps(jaxpr_io.trace(f, X))


@pytest.mark.skipif(_JAX_010, reason="JAX 0.11+'s xla_metadata_call2")
def test_metadata_and_ad_metadata_round_trip():
  from jax._src import xla_metadata  # pylint: disable=g-import-not-at-top

  def f(x):
    return xla_metadata.xla_metadata_call2(
        metadata={"scheduling_group": "fwd", "flag": True},
        ad_metadata={"scheduling_group": "bwd"})(jnp.sin)(x) * 3.0

  prog = jaxpr_io.trace(f, X)
  loaded = assert_roundtrip(prog)
  params = loaded.closed_jaxpr.jaxpr.eqns[0].params
  assert params["xla_metadata"] == (("flag", "true"),
                                    ("scheduling_group", "fwd"))
  assert params["ad_metadata"] == (("scheduling_group", "bwd"),)
  assert_bit_identical(loaded(X), f(X))
  assert_same_outcome(jax.grad, lambda x: f(x).sum(),
                      lambda x: loaded(x).sum(), X)
