"""JAX 0.12's thunky programs (`jax._src.thunky`: jaxprs over buffer refs
that XLA:GPU's thunk executor runs) round-trip, and lower for CUDA from the
file exactly as from the original (the thunk module that `call_thunky_nested`
lowers to is compared byte for byte). thunky does not run on a CPU (its
custom call has no host handler), so the lowering is the reference.

`thunky.custom_call`'s target is allowlisted like `ffi_call`'s;
`thunky.ptx_kernel` (PTX source in its params) is never stored. Under a
release without thunky, a file with thunky equations fails with a
FormatError naming the release that has them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

import jaxpr_io
from jaxpr_io import converters
from jaxpr_io.safety import trust
from jaxpr_io.safety import validate
from jaxpr_io.format import vocabulary
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)
from tests.hostile.test_bad_input import assert_rejected, mutated, small

try:
  from jax._src.thunky import thunky as tk
except ImportError:  # JAX before 0.12
  tk = None

needs_thunky = pytest.mark.skipif(tk is None, reason="thunky is JAX 0.12's")

A = jnp.arange(4.0, dtype=jnp.float32) / 3.0
B = jnp.zeros(4, jnp.float32)


def _primitives(prog) -> set[str]:
  return {e.primitive.name for j in validate.walk_jaxprs(
      prog.closed_jaxpr.jaxpr) for e in j.eqns}


def _thunk_modules(fn, args) -> list[str]:
  """The custom-call lines (the thunk module, in its backend config) of
  `fn` lowered for CUDA, without locations."""
  text = jax.jit(fn).trace(*args).lower(
      lowering_platforms=("cuda",)).as_text()
  return [line.split(" loc(")[0].strip() for line in text.splitlines()
          if "stablehlo.custom_call" in line]


def _round_trips_and_lowers_like(fn, args, primitives, *, trusted=True):
  prog = jaxpr_io.trace(fn, *args)
  assert primitives <= _primitives(prog), primitives - _primitives(prog)
  # No CPU lowering (the thunk executor is XLA:GPU's): check=False.
  loaded = assert_roundtrip(prog, check=False)
  want = _thunk_modules(fn, args)
  assert any("thunky.inline_module" in line for line in want)
  assert _thunk_modules(loaded, args) == want
  return prog, loaded


# ------------------------------------------------ buffers and control flow
def _buffers(x, y, p, i):
  tk.memzero(y)
  tk.copy(x, y)
  tk.memset(y.at[0:2], np.float32(1.5))
  tk.cond(p, lambda: tk.memzero(x.at[1:3]), lambda: tk.copy(y, x))
  tk.switch(i, (lambda: tk.memzero(y), lambda: tk.copy(x, y),
                lambda: tk.memset(x, np.int32(7))))
  tk.while_loop(p, lambda: tk.memzero(p), lambda: tk.copy(y, x))


def _buffer_program(a, b, c, d):
  x, y = jax.new_ref(a), jax.new_ref(b)
  p, i = jax.new_ref(c), jax.new_ref(d)
  tk.jit(_buffers)(x, y, p, i)
  return x[...], y[...]


@needs_thunky
def test_buffer_ops_and_control_flow_round_trip_and_lower_for_cuda():
  args = (A, B, jnp.bool_(True), jnp.int32(2))
  _, loaded = _round_trips_and_lowers_like(
      _buffer_program, args,
      {"thunky.call_thunky_nested", "thunky.memzero", "thunky.copy",
       "thunky.memset", "thunky.cond", "thunky.while"})
  # Neither runs here, nor transforms: the same failures.
  for transform in (jax.vmap, lambda f: jax.grad(lambda *a: f(*a)[0].sum())):
    batched = tuple(jnp.stack([a, a]) for a in args)
    assert_same_outcome(transform, _buffer_program, loaded,
                        *(batched if transform is jax.vmap else args))


# ------------------------------------------------- streams and collectives
def _collectives(x, y):
  token = tk.async_start(lambda: tk.memzero(y), stream_id=1,
                         stream_kind="communication")
  tk.async_done(token)
  tk.all_reduce(x, y, "i", reduction="max")

  def group():
    tk.all_gather(x.at[0:1], y.at[0:2], "i")
    tk.reduce_scatter(y.at[0:2], x.at[0:1], "i", reduction="sum")
    tk.collective_permute(x, y, "i", ((0, 0),))
    tk.all_to_all(x, y, "i")
  tk.collective_group(group)


def _collective_program(a, b):
  mesh = jax.make_mesh((1,), ("i",))

  def body(a, b):
    x, y = jax.new_ref(a), jax.new_ref(b)
    tk.jit(_collectives)(x, y)
    return y[...]
  return jax.shard_map(body, mesh=mesh, in_specs=(P(), P()),
                       out_specs=P())(a, b)


@needs_thunky
def test_streams_and_collectives_round_trip_and_lower_for_cuda():
  _round_trips_and_lowers_like(
      _collective_program, (A, B),
      {"thunky.async_start", "thunky.async_done", "thunky.all_reduce",
       "thunky.all_gather", "thunky.reduce_scatter",
       "thunky.collective_permute", "thunky.all_to_all",
       "thunky.collective_group"})


# -------------------------------------------------------------- custom call
_TARGET = "jaxpr_io_thunky_test_target"


# One backend_config entry: XLA serializes them as a proto map, whose order
# need not repeat between two lowerings of the same program.
def _custom_call_program(a, b):
  x, y = jax.new_ref(a), jax.new_ref(b)
  tk.jit(lambda x, y: tk.custom_call(
      _TARGET, [x], [y.at[0:2]], backend_config={"mode": "fast"}))(x, y)
  return y[...]


@needs_thunky
def test_custom_call_round_trips_and_its_target_is_allowlisted():
  prog, _ = _round_trips_and_lowers_like(_custom_call_program, (A, B),
                                         {"thunky.custom_call"})
  data = jaxpr_io.dumps(prog)
  # The target is native code of the loading process: as for ffi_call, an
  # untrusted file may only name a target the process allows.
  with pytest.raises(jaxpr_io.FormatError,
                     match=rf"thunky.custom_call target '{_TARGET}' is not "
                           rf"allowed.*register_ffi_target\('{_TARGET}'\)"):
    jaxpr_io.loads(data)
  seen = []

  def refuse_slow(config):
    seen.append(config)
    if config["mode"] != "slow":
      raise ValueError("only the slow mode")
  jaxpr_io.register_ffi_target(_TARGET, validate_attributes=refuse_slow)
  try:
    with pytest.raises(jaxpr_io.FormatError,
                       match="refuses the file's backend_config: "
                             "ValueError: only the slow mode"):
      jaxpr_io.loads(data)
    assert seen == [{"mode": "fast"}]
  finally:
    del trust.FFI_TARGETS.by_name[_TARGET]
    del trust.FFI_TARGETS.by_key[_TARGET]
  jaxpr_io.register_ffi_target(_TARGET)
  try:
    loaded = jaxpr_io.loads(data)
  finally:
    del trust.FFI_TARGETS.by_name[_TARGET]
    del trust.FFI_TARGETS.by_key[_TARGET]
  assert _thunk_modules(loaded, (A, B)) == _thunk_modules(
      _custom_call_program, (A, B))


# ----------------------------------------------------------------- call_jax
_SCALE = jnp.asarray([1.0, -2.0, 0.5, 4.0], jnp.float32)


def _call_jax_program(a, b):
  x, y = jax.new_ref(a), jax.new_ref(b)

  def body(x, y):
    out = tk.call_jax(lambda r, s: jnp.sin(r[...]) * _SCALE + s[...], x, y)
    tk.copy(out, y)
  tk.jit(body)(x, y)
  return y[...]


def _call_jax_eqn(prog):
  (eqn,) = [e for j in validate.walk_jaxprs(prog.closed_jaxpr.jaxpr)
            for e in j.eqns if e.primitive.name == "thunky.call_jax"]
  return eqn


@needs_thunky
def test_call_jax_stores_its_function_as_a_jaxpr():
  prog = jaxpr_io.trace(_call_jax_program, A, B)
  loaded = assert_roundtrip(prog, check=False)
  # The function JAX calls when it lowers the equation (on the refs and
  # arrays of its slice specs, outputs last) does what the original does.
  want_fn = _call_jax_eqn(prog).params["fn"]
  got_fn = _call_jax_eqn(loaded).params["fn"]
  assert type(got_fn).__name__ == "StoredThunkyFn"
  results = []
  for fn in (want_fn, got_fn):
    x, y = jax.new_ref(A), jax.new_ref(A * 3)
    out = jax.new_ref(jnp.zeros(4, jnp.float32))
    fn(x, y, out)
    results.append(out[...])
  assert_bit_identical(results[1], results[0])
  assert not np.all(np.asarray(results[0]) == 0)


# ---------------------------------------------------------- inline constant
def _with_constant(x):
  # Bound when call_thunky_nested is discharged: the thunk module's
  # constants, as bytes. It runs anywhere.
  return x + tk._inline_constant_p.bind(value=b"\x01\x02\xff\x00")  # pylint: disable=protected-access


@needs_thunky
def test_inline_constant_round_trips_and_runs():
  x = jnp.arange(4, dtype=jnp.uint8)
  prog = jaxpr_io.trace(_with_constant, x)
  assert "thunky.inline_constant" in _primitives(prog)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(loaded(x), _with_constant(x))
  assert_same_outcome(jax.vmap, _with_constant, loaded, jnp.stack([x, x]))


# --------------------------------------------------------------- PTX kernel
@needs_thunky
def test_ptx_kernel_is_refused_by_name():
  def launch(a):
    x = jax.new_ref(a)
    tk.jit(lambda r: tk.ptx_kernel(r, written=(True,), kernel_name="k",
                                   ptx=".version 8.0"))(x)
    return x[...]
  with pytest.raises(jaxpr_io.UnsupportedError,
                     match=r"thunky\.ptx_kernel"):
    jaxpr_io.dumps(jaxpr_io.trace(launch, A))


# ------------------------------------------------ releases without thunky
def test_the_message_names_the_release_with_thunky():
  old = vocabulary.Where("f", writer_jax="0.12.0.1", reader_jax="0.11.2")
  message = vocabulary.unknown_primitive(old, "thunky.copy")
  assert ("'thunky.copy' is one of jax._src.thunky's, which JAX has from "
          "release 0.12 on; this is jax 0.11.2") in message
  assert "with jax 0.12 or later" in message
  new = vocabulary.Where("f", writer_jax="0.12.0.1", reader_jax="0.12.0.1")
  assert "register_primitive" in vocabulary.unknown_primitive(
      new, "thunky.no_such")


@pytest.mark.skipif(tk is not None, reason="this release has thunky")
def test_a_release_without_thunky_refuses_its_equations():
  def mutate(m):
    m.strings[list(m.strings).index("sin")] = "thunky.memzero"
  assert_rejected(mutated(small(), mutate),
                  r"equation \d+ \(thunky.memzero\): primitive "
                  r"'thunky.memzero' is one of jax._src.thunky's, which JAX "
                  r"has from release 0.12 on; this is jax 0\.1[01]")
