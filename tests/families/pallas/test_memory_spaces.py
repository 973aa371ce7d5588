"""Format version 6: an array's memory space that is not one of JAX's own
(`ShapedArray.kernel_memory_space`), as `pl.with_memory_space_constraint`
gives a kernel's array operand. It round-trips; crafted files that misuse
the field raise `FormatError`."""

from __future__ import annotations

import numpy as np
import pytest
from jax.experimental.pallas import tpu as pltpu

import jaxpr_io
from jaxpr_io import compat
from tests.support import proto_edit
from tests.support.roundtrip import assert_roundtrip

try:  # JAX 0.11+
  from jax._src.state.primitives import with_memory_space_constraint
except ImportError:  # JAX 0.10
  from jax._src.pallas.core import with_memory_space_constraint_p

  def with_memory_space_constraint(x, memory_space):
    return with_memory_space_constraint_p.bind(x, memory_space=memory_space)

_HBM = getattr(pltpu, "HBM", None) or pltpu.ANY


def _prog():
  return jaxpr_io.trace(lambda x: with_memory_space_constraint(x * 2.0, _HBM),
                        np.arange(4, dtype=np.float32))


def _kernel_space_avals(msg):
  return [a.shaped_array for a in msg.avals
          if a.WhichOneof("kind") == "shaped_array"
          and a.shaped_array.HasField("kernel_memory_space")]


def test_a_kernel_memory_space_round_trips():
  prog = _prog()
  out_aval = prog.closed_jaxpr.jaxpr.outvars[0].aval
  assert out_aval.memory_space == _HBM
  msg = proto_edit.message(jaxpr_io.dumps(prog))
  stored, = _kernel_space_avals(msg)
  assert stored.memory_space == 0  # unspecified: the kernel's space applies
  loaded = assert_roundtrip(prog, check=False)
  assert loaded.closed_jaxpr.jaxpr.outvars[0].aval == out_aval


def _crafted(mutate, format_version=None):
  return proto_edit.edited(jaxpr_io.dumps(_prog()), mutate, format_version)


def test_before_version_6_the_field_is_refused():
  bad = _crafted(lambda msg: None, format_version=5)
  with pytest.raises(jaxpr_io.FormatError, match="before version 6"):
    jaxpr_io.loads(bad)


def test_both_memory_space_fields_are_refused():
  def mutate(msg):
    _kernel_space_avals(msg)[0].memory_space = 1
  with pytest.raises(jaxpr_io.FormatError, match="both"):
    jaxpr_io.loads(_crafted(mutate))


def test_a_value_that_is_no_enum_member_is_refused():
  def mutate(msg):
    sa = _kernel_space_avals(msg)[0]
    sa.kernel_memory_space.Clear()
    sa.kernel_memory_space.int = 3
  with pytest.raises(jaxpr_io.FormatError, match="not a member of a registered"):
    jaxpr_io.loads(_crafted(mutate))


def test_an_unregistered_memory_space_is_refused_at_dumps():
  aval = compat.ShapedArray((2,), np.float32).update(memory_space="sram")
  prog = _prog()
  jaxpr = prog.closed_jaxpr.jaxpr
  jaxpr.outvars[0].aval = aval  # what no registered enum describes
  with pytest.raises(jaxpr_io.UnsupportedError, match="register_enum"):
    jaxpr_io.dumps(prog)
