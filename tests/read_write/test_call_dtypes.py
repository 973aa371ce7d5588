"""A call checks its inputs' dtypes as it checks their shapes
(jaxpr_io/api/inputs.py): a wrong dtype is a one-line TypeError naming the
input's key path, the type the program takes and the type found. Weakly
typed values (Python scalars, weak JAX values) pass where JAX's promotion
with the input's dtype gives that dtype, and then compute what `jax.jit` of
the original computes; key arrays are checked by key type.

The reference for what passes is `jax.jit(original)`: what it runs as the
same program, the loaded program runs bit-identically; where it would
retrace the original at another dtype (a different program than the one
stored), the loaded program refuses, and each such case here asserts both.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io


def _load(fn, *args, **kwargs):
  prog = jaxpr_io.trace(fn, *args, **kwargs)
  return jaxpr_io.loads(jaxpr_io.dumps(prog))


def _one_line_type_error(call, *parts):
  with pytest.raises(TypeError) as info:
    call()
  text = str(info.value)
  assert "\n" not in text, text
  for part in parts:
    assert part in text, text
  return text


def _same(a, b):
  np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert np.asarray(a).dtype == np.asarray(b).dtype


def test_wrong_dtype_names_the_key_path_and_both_types():
  def f(params, x):
    return jnp.tanh(x @ params["w"])
  params = {"w": np.ones((3, 2), np.float32)}
  x = np.ones((4, 3), np.float32)
  loaded = _load(f, params, x)
  _one_line_type_error(lambda: loaded(params, x.astype(np.int32)),
                       "input args[1]", "int32[4,3]", "float32[4,3]")
  _one_line_type_error(
      lambda: loaded({"w": params["w"].astype(np.float16)}, x),
      "input args[0]['w']", "float16[3,2]", "float32[3,2]")
  # Under transformations the same check applies.
  _one_line_type_error(lambda: jax.jit(loaded)(params, x.astype(np.int32)),
                       "input args[1]", "int32[4,3]")
  _one_line_type_error(
      lambda: jax.vmap(loaded, in_axes=(None, 0))(
          params, np.ones((2, 4, 3), np.float16)),
      "input args[1]", "float16[4,3]")
  _same(jax.jit(loaded)(params, x), jax.jit(f)(params, x))


def test_float64_numpy_arrays_pass_as_jax_passes_them():
  # With x64 off, jax.jit(f) runs a float64 NumPy array as float32: the
  # same program; so does the loaded one.
  def f(x):
    return jnp.sin(x) * 3
  x = np.linspace(0, 1, 5, dtype=np.float32)
  loaded = _load(f, x)
  x64 = x.astype(np.float64)
  assert jax.jit(f).lower(x64).in_avals[0][0].dtype == np.float32
  _same(jax.jit(loaded)(x64), jax.jit(f)(x64))


@pytest.mark.parametrize("value", [2.5, 3])
def test_python_scalars_promote_as_under_jit(value):
  def f(x, s):
    return x * s + s
  x = np.linspace(0, 1, 4, dtype=np.float32)
  loaded = _load(f, x, np.float32(1))
  _same(jax.jit(loaded)(x, value), jax.jit(f)(x, value))
  _same(loaded(x, value), f(x, value))  # op by op, as f eagerly


def test_python_bool_is_not_weakly_typed():
  # JAX types a Python bool strongly (bool[]): jax.jit(f) would trace f
  # again with a bool input.
  def f(x, s):
    return x * s
  x = np.ones(2, np.float32)
  loaded = _load(f, x, np.float32(1))
  assert not jax.typeof(True).weak_type
  _one_line_type_error(lambda: loaded(x, True), "input args[1]",
                       "a Python bool", "float32[]")


def test_python_float_into_bfloat16_promotes_to_bfloat16():
  # A weak float32 promotes to bfloat16 (JAX's lattice): jit(f)(x, 0.1)
  # computes in bfloat16, as the program stored does.
  def f(x, s):
    return x * s
  x = jnp.linspace(0, 1, 4, dtype=jnp.bfloat16)
  loaded = _load(f, x, jnp.bfloat16(1))
  _same(jax.jit(loaded)(x, 0.1), jax.jit(f)(x, 0.1))


def test_weakly_typed_jax_values_promote_as_under_jit():
  def f(x, s):
    return x * s
  x = jnp.linspace(0, 1, 4, dtype=jnp.bfloat16)
  loaded = _load(f, x, jnp.bfloat16(1))
  # `s` is a weakly typed float32 tracer inside the jit.
  outer = lambda p: jax.jit(lambda x, s: p(x, s))
  _same(outer(loaded)(x, 0.1), outer(f)(x, 0.1))
  ints = _load(f, np.arange(4, dtype=np.int32), np.int32(2))
  _one_line_type_error(lambda: outer(ints)(np.arange(4, dtype=np.int32),
                                           0.5),
                       "input args[1]", "a weakly typed float32[]",
                       "int32[]")


def test_float_into_an_int_input_is_refused_where_jit_would_retrace():
  def f(x, n):
    return x * n
  x = np.arange(4, dtype=np.int32)
  loaded = _load(f, x, np.int32(2))
  # A Python int: int32, as under jit.
  _same(jax.jit(loaded)(x, 3), jax.jit(f)(x, 3))
  # jax.jit(f) retraces f at float32 for a Python float: another program.
  assert jax.jit(f)(x, 1.5).dtype == np.float32
  _one_line_type_error(lambda: loaded(x, 1.5), "input args[1]",
                       "a Python float", "int32[]")
  # A Python int promotes to a narrower integer input, as in JAX.
  bytes_in = _load(f, np.arange(4, dtype=np.uint8), np.uint8(2))
  u8 = np.arange(4, dtype=np.uint8)
  _same(jax.jit(bytes_in)(u8, 3), jax.jit(f)(u8, np.uint8(3)))


def test_key_arrays_are_checked_by_key_type():
  def f(key, x):
    return x + jax.random.normal(key, x.shape)
  key = jax.random.key(0)
  x = np.zeros(3, np.float32)
  loaded = _load(f, key, x)
  key7 = jax.random.key(7)
  _same(jax.jit(loaded)(key7, x), jax.jit(f)(key7, x))
  _one_line_type_error(lambda: loaded(jax.random.key(7, impl="rbg"), x),
                       "input args[0]", "key<rbg>[]", "key<fry>[]")
  _one_line_type_error(lambda: loaded(jax.random.key_data(key), x),
                       "input args[0]", "uint32[2]", "key<fry>[]")


def test_symbolic_programs_check_dtypes_too():
  (b,) = jax.export.symbolic_shape("b")
  loaded = _load(lambda x: jnp.sum(x * 2, axis=0),
                 jax.ShapeDtypeStruct((b, 3), np.float32))
  _same(loaded(np.ones((5, 3), np.float32)),
        np.full(3, 10, np.float32))
  _one_line_type_error(lambda: loaded(np.ones((5, 3), np.int32)),
                       "input args[0]", "int32[5,3]", "float32[b,3]")


# ---------------------------------------- the new user's three cases
def _cross_entropy(logits, labels):
  logp = jax.nn.log_softmax(logits)
  return -jnp.mean(jnp.take_along_axis(logp, labels[:, None], axis=1))


def test_int_labels_called_with_float_labels():
  # Was: silently nan.
  logits = np.random.RandomState(0).randn(8, 10).astype(np.float32)
  labels = np.arange(8, dtype=np.int32)
  loaded = _load(_cross_entropy, logits, labels)
  _same(jax.jit(loaded)(logits, labels),
        jax.jit(_cross_entropy)(logits, labels))
  _one_line_type_error(lambda: loaded(logits, labels.astype(np.float32)),
                       "input args[1]", "float32[8]", "int32[8]")


def test_int_labels_called_with_uint8_labels():
  # Was: a multi-line XLA RuntimeProgramInputMismatch.
  logits = np.zeros((8, 10), np.float32)
  labels = np.arange(8, dtype=np.int32)
  loaded = _load(_cross_entropy, logits, labels)
  _one_line_type_error(lambda: jax.jit(loaded)(logits,
                                               labels.astype(np.uint8)),
                       "input args[1]", "uint8[8]", "int32[8]")


def test_conv_called_with_int_images():
  # Was: a conv_general_dilated dtype error naming no input.
  def net(params, images):
    y = jax.lax.conv_general_dilated(images, params["k"], (1, 1), "SAME",
                                     dimension_numbers=("NHWC", "HWIO",
                                                        "NHWC"))
    return jnp.mean(jax.nn.relu(y))
  params = {"k": np.ones((3, 3, 1, 4), np.float32)}
  images = np.ones((2, 8, 8, 1), np.float32)
  loaded = _load(net, params, images)
  _one_line_type_error(lambda: loaded(params, images.astype(np.int32)),
                       "input args[1]", "int32[2,8,8,1]",
                       "float32[2,8,8,1]")


def test_a_64_bit_program_is_called_under_x64_only():
  # Traced under x64: without it no caller can make an int64 array (JAX
  # makes int32 of numpy's int64), so the call is a one-line TypeError
  # saying what to do; under `jax.enable_x64` it computes the original.
  fn = lambda i: (i * 3) >> 1
  with jax.enable_x64(True):
    x = np.arange(12, dtype=np.int64).reshape(4, 3) << 40
    prog = _load(fn, x)
  _one_line_type_error(lambda: prog(x), "input args[0] is int32[4,3]",
                       "the program takes int64[4,3]")
  with jax.enable_x64(True):
    _same(prog(x), fn(jnp.asarray(x)))
