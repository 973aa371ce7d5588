"""Record codecs for the sharding and layout params of parallel programs.

jaxpr_io/codec/records.py stores meshes (abstract and concrete), `NamedSharding`,
`PartitionSpec`, `UNSPECIFIED`, `UNCONSTRAINED`, devices and
`ManualAxisType`. This module adds the remaining types that `jax.jit`,
`with_sharding_constraint`, `with_layout_constraint` and `jax.device_put`
put in equation params:

| record name                                | fields                                    |
| ------------------------------------------ | ----------------------------------------- |
| `jax.sharding.SingleDeviceSharding`        | (device: jax.Device, memory_kind: str or None) |
| `jax.experimental.layout.Layout`           | (major_to_minor: tuple[int], tiling: tuple[tuple[int]] or None, sub_byte_element_size_in_bits: int) |
| `jax.experimental.layout.Layout.AUTO`      | ()                                        |
| `jax.experimental.layout.Format`           | (layout: Layout, Layout.AUTO or None, sharding: a sharding record or None) |

Devices inside these records are stored like every device (platform and id)
and re-bound to the loading process's devices by the rules of
jaxpr_io/codec/records.py.

Importing this module registers the codecs; `import jaxpr_io` does so.
Decoders treat their fields as untrusted: a wrong field type raises
`FormatError` naming the record and the field.
"""

from __future__ import annotations

from jaxpr_io import compat
from jaxpr_io.compat import sharding as compat_sharding
from jaxpr_io.errors import FormatError
from jaxpr_io.codec.registry import RECORDS, register_param_codec

SINGLE_DEVICE_SHARDING = "jax.sharding.SingleDeviceSharding"
LAYOUT = "jax.experimental.layout.Layout"
AUTO_LAYOUT = "jax.experimental.layout.Layout.AUTO"
FORMAT = "jax.experimental.layout.Format"


def _is_int(value) -> bool:
  # bools are ints in Python, but never stand for a dimension or a size.
  return type(value) is int


def _int_tuple(record: str, field: str, value) -> tuple[int, ...]:
  if type(value) is not tuple or not all(_is_int(v) and v >= 0
                                         for v in value):
    raise FormatError(f"{record}: field {field!r} must be a tuple of "
                      f"non-negative ints, got {value!r}")
  return value


# ------------------------------------------------- SingleDeviceSharding
def encode_single_device_sharding(sharding) -> tuple:
  """Fields: (device: jax.Device, memory_kind: str | None).

  `memory_kind` is the sharding's canonical memory kind as JAX reports it
  (e.g. "device"), so a decoded sharding compares equal to the original."""
  return (sharding._device, sharding.memory_kind)  # pylint: disable=protected-access


def decode_single_device_sharding(fields):
  device, memory_kind = fields
  if type(device) is not compat.Device:
    raise FormatError(f"{SINGLE_DEVICE_SHARDING}: field 'device' must be a "
                      f"jax.Device record, got {device!r}")
  if memory_kind is not None and type(memory_kind) is not str:
    raise FormatError(f"{SINGLE_DEVICE_SHARDING}: field 'memory_kind' must "
                      f"be a string or None, got {memory_kind!r}")
  return compat_sharding.SingleDeviceSharding(device, memory_kind=memory_kind)


# ------------------------------------------------------------ layouts
def encode_layout(layout) -> tuple:
  """Fields: (major_to_minor: tuple[int], tiling: tuple[tuple[int]] | None,
  sub_byte_element_size_in_bits: int)."""
  return (tuple(layout.major_to_minor),
          None if layout.tiling is None
          else tuple(tuple(t) for t in layout.tiling),
          layout.sub_byte_element_size_in_bits)


def decode_layout(fields):
  major_to_minor, tiling, sub_byte = fields
  major_to_minor = _int_tuple(LAYOUT, "major_to_minor", major_to_minor)
  if sorted(major_to_minor) != list(range(len(major_to_minor))):
    raise FormatError(f"{LAYOUT}: field 'major_to_minor' must be a "
                      f"permutation of the dimensions, got {major_to_minor!r}")
  if tiling is not None:
    if type(tiling) is not tuple:
      raise FormatError(f"{LAYOUT}: field 'tiling' must be a tuple of tiles "
                        f"or None, got {tiling!r}")
    for tile in tiling:
      _int_tuple(LAYOUT, "tiling", tile)
  if not _is_int(sub_byte) or sub_byte < 0:
    raise FormatError(f"{LAYOUT}: field 'sub_byte_element_size_in_bits' "
                      f"must be a non-negative int, got {sub_byte!r}")
  return compat_sharding.Layout(major_to_minor, tiling, sub_byte)


def encode_auto_layout(value) -> tuple:
  """Fields: (). The `Layout.AUTO` singleton."""
  del value
  return ()


def decode_auto_layout(fields):
  del fields
  return compat_sharding.AUTO_LAYOUT


def encode_format(fmt) -> tuple:
  """Fields: (layout: Layout | Layout.AUTO | None, sharding: a registered
  sharding type | None)."""
  return (fmt.layout, fmt.sharding)


def decode_format(fields):
  layout, sharding = fields
  if sharding is not None and type(sharding) not in (
      compat.NamedSharding, compat_sharding.SingleDeviceSharding):
    raise FormatError(f"{FORMAT}: field 'sharding' must be a sharding record "
                      f"or None, got {sharding!r}")
  if layout is not None and type(layout) not in (
      compat_sharding.Layout, compat_sharding.AutoLayoutSingleton):
    raise FormatError(f"{FORMAT}: field 'layout' must be a Layout, "
                      f"Layout.AUTO or None, got {layout!r}")
  if type(layout) is compat_sharding.Layout and sharding is None:
    raise FormatError(f"{FORMAT}: a concrete layout needs a sharding, got "
                      f"layout {layout!r} and no sharding")
  return compat_sharding.Format(layout, sharding)


_CODECS = (
    (compat_sharding.SingleDeviceSharding, SINGLE_DEVICE_SHARDING,
     encode_single_device_sharding, decode_single_device_sharding),
    (compat_sharding.Layout, LAYOUT, encode_layout, decode_layout),
    (compat_sharding.AutoLayoutSingleton, AUTO_LAYOUT, encode_auto_layout,
     decode_auto_layout),
    (compat_sharding.Format, FORMAT, encode_format, decode_format),
)
for _cls, _name, _encode, _decode in _CODECS:
  # Importing twice (e.g. after importlib.reload) must not fail on the
  # registry's duplicate check; a different codec under our name still does.
  if RECORDS.by_key.get(_cls) != _name:
    register_param_codec(_cls, name=_name, encode=_encode, decode=_decode)
