"""The Pallas fuser's fusion dtypes: `pack_dtype` and `unpack_dtype` with a
user's `FusionDType` (jaxpr_io/families/pallas/fuser.py).

A fusion dtype is the user's own extended dtype, registered under a stable
name with `jaxpr_io.register_fusion_dtype` in the writing and the loading
process. Programs that pack and unpack it round-trip exactly, and
`physicalize` (the fuser's interpreter that replaces fusion dtypes with
their physical arrays) gives bit-identical results from the loaded program
and the original."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import core
from jax._src.pallas.fuser import fusible_dtype

import jaxpr_io
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip

V = np.arange(-12, 12, dtype=np.int8).reshape(3, 8)
S = np.array([[0.5], [2.0], [-3.25]], np.float32)


class _NoBlockSpecs:
  """The fuser's block-spec rules, which these programs never reach."""

  def pull_block_spec_one_step(self, *args, **kwargs):
    raise NotImplementedError

  def unpack_push_block_spec(self, *args, **kwargs):
    raise NotImplementedError

  def unpack_pull_block_spec(self, *args, **kwargs):
    raise NotImplementedError


@dataclasses.dataclass(frozen=True)
class ScaledDType(_NoBlockSpecs, fusible_dtype.FusionDType):
  """A quantized array: integer values and one float scale per row."""
  values_dtype: str = "int8"
  scale_rows: int = 1

  def abstract_unpack(self, x):
    return (core.ShapedArray(x.shape, jnp.dtype(self.values_dtype)),
            core.ShapedArray(x.shape[:-1] + (self.scale_rows,), jnp.float32))

  def abstract_pack(self, values, scale):
    return core.ShapedArray(values.shape, self)

  def __str__(self):
    return f"scaled[{self.values_dtype}]"


class PairDType(_NoBlockSpecs, fusible_dtype.FusionDType):
  """Not a dataclass: stored with its own encode/decode."""

  def __init__(self, tag: str):
    self.tag = tag

  def __eq__(self, other):
    return type(other) is PairDType and other.tag == self.tag

  def __hash__(self):
    return hash((PairDType, self.tag))

  def abstract_unpack(self, x):
    return (core.ShapedArray(x.shape, jnp.float32),) * 2

  def abstract_pack(self, a, b):
    return core.ShapedArray(a.shape, self)

  def __str__(self):
    return f"pair[{self.tag}]"


class UnregisteredDType(PairDType):
  pass


jaxpr_io.register_fusion_dtype(ScaledDType, name="tests.ScaledDType")
jaxpr_io.register_fusion_dtype(
    PairDType, name="tests.PairDType", encode=lambda d: (d.tag,),
    decode=lambda fields: PairDType(*fields))


def _dequantize(values, scale):
  packed = fusible_dtype.pack(values, scale, dtype=ScaledDType())
  v, s = fusible_dtype.unpack(packed)
  return v.astype(jnp.float32) * s


def _pair_sum(a, b):
  packed = fusible_dtype.pack(a, b, dtype=PairDType("ab"))
  x, y = fusible_dtype.unpack(packed)
  return x * 3.0 + y


def _round_trip(prog):
  # check=False: `loads(check=True)` compiles the program, and no fusion
  # dtype program compiles (pack and unpack have no lowering, the original's
  # neither) until `physicalize` replaces them.
  return assert_roundtrip(prog, check=False)


def _physicalized(program):
  closed = program.closed_jaxpr
  return fusible_dtype.physicalize(
      lambda *args: core.eval_jaxpr(closed.jaxpr, closed.consts, *args))


@pytest.mark.parametrize("fn,args,dtype", [
    (_dequantize, (V, S), ScaledDType()),
    (_pair_sum, (S, S * 7.0), PairDType("ab")),
])
def test_pack_and_unpack_round_trip_and_physicalize(fn, args, dtype):
  prog = jaxpr_io.trace(fn, *args)
  loaded = _round_trip(prog)
  pack = loaded.closed_jaxpr.jaxpr.eqns[0]
  assert pack.primitive is fusible_dtype.pack_dtype_p
  assert pack.params["dtype"] == dtype and type(pack.params["dtype"]) is type(dtype)
  assert pack.outvars[0].aval.dtype == dtype
  assert loaded.closed_jaxpr.jaxpr.eqns[1].primitive is (
      fusible_dtype.unpack_dtype_p)
  assert_bit_identical(_physicalized(loaded)(*args),
                       fusible_dtype.physicalize(fn)(*args))


def test_a_fields_default_is_left_out_and_others_stored():
  def fn(values, scale):
    packed = fusible_dtype.pack(values, scale,
                                dtype=ScaledDType(values_dtype="int8",
                                                  scale_rows=8))
    return fusible_dtype.unpack(packed)
  prog = jaxpr_io.trace(fn, V, np.ones((3, 8), np.float32))
  loaded = _round_trip(prog)
  assert loaded.closed_jaxpr.jaxpr.eqns[0].params["dtype"] == ScaledDType(
      scale_rows=8)
  assert_bit_identical(_physicalized(loaded)(V, np.ones((3, 8), np.float32)),
                       fusible_dtype.physicalize(fn)(
                           V, np.ones((3, 8), np.float32)))


def test_an_unregistered_fusion_dtype_is_refused_at_dumps():
  def fn(a):
    return fusible_dtype.unpack(
        fusible_dtype.pack(a, a, dtype=UnregisteredDType("x")))
  prog = jaxpr_io.trace(fn, S)
  with pytest.raises(jaxpr_io.UnsupportedError) as e:
    jaxpr_io.dumps(prog)
  message = str(e.value)
  assert "equation 0 (pack_dtype)" in message
  assert "UnregisteredDType" in message and "register_fusion_dtype" in message


def test_registrations_are_checked():
  with pytest.raises(ValueError, match="tests.ScaledDType"):
    jaxpr_io.register_fusion_dtype(ScaledDType, name="tests.Other")
  with pytest.raises(ValueError, match="already registered"):
    jaxpr_io.register_fusion_dtype(UnregisteredDType, name="tests.PairDType",
                                   encode=lambda d: (d.tag,),
                                   decode=lambda f: UnregisteredDType(*f))
  with pytest.raises(TypeError, match="FusionDType"):
    jaxpr_io.register_fusion_dtype(int, name="tests.int")
  with pytest.raises(TypeError, match="frozen dataclass"):
    jaxpr_io.register_fusion_dtype(UnregisteredDType, name="tests.U")
  with pytest.raises(TypeError, match="both"):
    jaxpr_io.register_fusion_dtype(UnregisteredDType, name="tests.U",
                                   encode=lambda d: ())


_LOAD_UNREGISTERED = """
import sys
import jaxpr_io
try:
  jaxpr_io.loads(sys.stdin.buffer.read())
except jaxpr_io.FormatError as e:
  print("FormatError:", e)
"""


def test_a_process_without_the_registration_cannot_load_it():
  """The file names the dtype by its registered name, never by its class:
  a process that has not registered it refuses the file."""
  data = jaxpr_io.dumps(jaxpr_io.trace(_dequantize, V, S))
  assert b"ScaledDType" not in data.replace(b"tests.ScaledDType", b"")
  out = subprocess.run([sys.executable, "-c", _LOAD_UNREGISTERED],
                       input=data, capture_output=True, check=True).stdout
  assert b"FormatError:" in out and b"tests.ScaledDType" in out, out
  assert b"register_fusion_dtype" in out, out
