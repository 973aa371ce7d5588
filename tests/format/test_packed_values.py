"""Format version 5: packed int and bool tuples (`Value.ints`,
`Value.bools`), packed shapes (`ShapedArray.sizes`) and extended element
types (`DType.EXTENDED` with `TypeRef.extended`). The writer uses the packed
forms for every such value; the reader reads them and the forms of versions
1-4, and refuses crafted files that misuse them.

Programs with semaphore refs round-trip in tests/families/pallas/test_pallas_tpu.py.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.export import symbolic_shape

import jaxpr_io
from jaxpr_io.format import _proto as pb
from tests.support import proto_edit
from tests.support.roundtrip import assert_roundtrip


def _prog():
  def f(x, y):
    z = jnp.transpose(x.reshape(2, 3, 4), (2, 0, 1)).sum(axis=(0, 2))
    return jax.jit(lambda a, b: a * b, donate_argnums=(1,))(z, y)
  return jaxpr_io.trace(f, jnp.ones((6, 4)), jnp.ones((2,)))


_values = proto_edit.values


def _edited(data: bytes, mutate) -> bytes:
  return proto_edit.edited(data, mutate)


def test_the_writer_packs_every_int_and_bool_tuple_and_known_shape():
  prog = _prog()
  msg = proto_edit.message(jaxpr_io.dumps(prog))
  kinds = [v.WhichOneof("kind") for v in _values(msg)]
  assert "ints" in kinds and "bools" in kinds
  for v in _values(msg):
    if v.WhichOneof("kind") == "tuple":  # what is left: mixed or empty
      items = [i.WhichOneof("kind") for i in v.tuple.items]
      assert not items or not (set(items) <= {"int"} or set(items) <= {"bool"})
  for a in msg.avals:
    if a.WhichOneof("kind") == "shaped_array":
      assert not a.shaped_array.shape  # no symbolic dimension here
  loaded = assert_roundtrip(prog)
  eqn = loaded.closed_jaxpr.jaxpr.eqns[0]
  assert type(eqn.params["new_sizes"]) is tuple
  assert all(type(d) is int for d in eqn.params["new_sizes"])


def test_symbolic_shapes_keep_their_dims():
  b, = symbolic_shape("b")
  prog = jaxpr_io.trace(lambda x: x * 2.0,
                        jax.ShapeDtypeStruct((b, 3), jnp.float32))
  msg = proto_edit.message(jaxpr_io.dumps(prog))
  shaped = [a.shaped_array for a in msg.avals
            if a.WhichOneof("kind") == "shaped_array" and a.shaped_array.shape]
  assert shaped and all(not s.sizes for s in shaped)
  assert [d.WhichOneof("kind") for d in shaped[0].shape] == ["expr", "size"]
  assert_roundtrip(prog, check=False)


def test_the_forms_of_versions_1_to_4_still_read():
  prog = _prog()
  data = jaxpr_io.dumps(prog)
  unpacked = _edited(data, proto_edit.unpack_version_5)
  assert unpacked != data
  loaded = jaxpr_io.loads(unpacked, check=True, trusted=True)
  assert str(loaded.closed_jaxpr) == str(prog.closed_jaxpr)
  assert jaxpr_io.dumps(loaded) == data  # written back in the packed form


@pytest.mark.parametrize("field", ["ints", "bools", "sizes"])
def test_a_version_4_file_cannot_hold_the_packed_forms(field):
  data = jaxpr_io.dumps(_prog())

  def mutate(msg):
    msg.format_version = 4
    # Keep this field's packed form only; the others as version 4 had them.
    if field != "sizes":
      # (shapes too: unpack_version_5 always moves them to `Dim`s)
      proto_edit.unpack_version_5(msg, kinds={"ints", "bools"} - {field})

  bad = proto_edit.reframe(_mutated(data, mutate), data, format_version=4)
  with pytest.raises(jaxpr_io.FormatError, match=f"{field}|version"):
    jaxpr_io.loads(bad)


def _mutated(data, mutate):
  msg = proto_edit.message(data)
  mutate(msg)
  return msg


def test_crafted_packed_values_are_refused():
  data = jaxpr_io.dumps(_prog())

  def empty_ints(msg):
    v = next(v for v in _values(msg) if v.WhichOneof("kind") == "ints")
    del v.ints.items[:]
    v.ints.SetInParent()
  with pytest.raises(jaxpr_io.FormatError, match="empty 'ints'"):
    jaxpr_io.loads(_edited(data, empty_ints))

  def both_shapes(msg):
    a = next(a for a in msg.avals if a.shaped_array.sizes)
    a.shaped_array.shape.add().size = 1
  with pytest.raises(jaxpr_io.FormatError, match="sizes"):
    jaxpr_io.loads(_edited(data, both_shapes))

  def negative_size(msg):
    next(a for a in msg.avals if a.shaped_array.sizes).shaped_array.sizes[0] = -5
  with pytest.raises(jaxpr_io.FormatError, match="-5 is not a valid size"):
    jaxpr_io.loads(_edited(data, negative_size))


def test_extended_dtypes_are_records_of_registered_extended_types():
  data = jaxpr_io.dumps(_prog())

  def extended(record_type: str):
    def mutate(msg):
      a = next(a for a in msg.avals if a.WhichOneof("kind") == "shaped_array")
      a.shaped_array.dtype.dtype = pb.DType["EXTENDED"]
      rec = a.shaped_array.dtype.extended.record
      rec.type = len(msg.strings)
      msg.strings.append(record_type)
    return mutate

  # A registered record type that is not an extended dtype.
  with pytest.raises(jaxpr_io.FormatError, match="not an extended dtype"):
    jaxpr_io.loads(_edited(data, extended("jax.FrozenDict")))
  # A name that no one registered: never imported, never a class.
  with pytest.raises(jaxpr_io.FormatError, match="unknown param record type"):
    jaxpr_io.loads(_edited(data, extended("os.system")))

  def missing(msg):
    a = next(a for a in msg.avals if a.WhichOneof("kind") == "shaped_array")
    a.shaped_array.dtype.dtype = pb.DType["EXTENDED"]
  with pytest.raises(jaxpr_io.FormatError, match="EXTENDED dtype without"):
    jaxpr_io.loads(_edited(data, missing))

  def stray(msg):
    a = next(a for a in msg.avals if a.WhichOneof("kind") == "shaped_array")
    a.shaped_array.dtype.extended.none.SetInParent()
  with pytest.raises(jaxpr_io.FormatError, match="not EXTENDED"):
    jaxpr_io.loads(_edited(data, stray))


def test_the_semaphore_types_are_the_extended_dtypes_registered():
  from jax._src.pallas import core as pallas_core
  from jaxpr_io.codec import dtypes
  from jaxpr_io.codec import registry
  sem = pallas_core.Semaphore()
  assert dtypes.is_extended(sem)
  assert registry.RECORDS.by_key[type(sem)] == "jax.pallas.Semaphore"
  assert not dtypes.is_extended(jax.random.key(0).dtype)  # keys: PRNG_KEY
  assert not dtypes.is_extended(np.dtype(np.float32))
