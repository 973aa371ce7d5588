"""The Pallas fuser's fusion dtypes: `pack_dtype` and `unpack_dtype`.

A fusion dtype (`jax._src.pallas.fuser.fusible_dtype.FusionDType`) is an
extended dtype that the user subclasses: an array of it stands for several
physical arrays (`pack_dtype` makes one of them, `unpack_dtype` takes it
apart), until `physicalize` replaces it with them. The format stores such a
dtype like any extended dtype (format version 5: `DType.EXTENDED` with
`TypeRef.extended`, a record of a registered type), both as an aval's element
type and as `pack_dtype`'s `dtype` param.

A file never names a class: both the writing and the loading process call
`register_fusion_dtype(cls, name=...)` with the same stable name, as they do
for their own primitives. The two primitives are in JAX's primitive table
(jaxpr_io/compat: the module `jax._src.pallas.fuser.fusible_dtype`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from jaxpr_io.codec import registry
from jaxpr_io.compat import pallas as compat_pallas


def _fusion_dtype_base():
  return compat_pallas.fusion_dtype_base()


def register_fusion_dtype(cls: type, *, name: str,
                          encode: Callable[[Any], tuple] | None = None,
                          decode: Callable[[tuple], Any] | None = None
                          ) -> None:
  """Makes the Pallas fuser's fusion dtype `cls` storable under `name`.

  `cls` is a subclass of `FusionDType`. A frozen dataclass needs no codec:
  its instances are stored by field name (fields at their defaults are left
  out), so its fields must be storable values (ints, strings, dtypes, ...).
  Any other class gives `encode(dtype) -> tuple` and `decode(fields)`.

  The loading process MUST register the same class under the same name
  before loading a file that uses it; registering a class or a name twice
  is an error naming the earlier registration.
  """
  base = _fusion_dtype_base()
  if base is None:
    raise TypeError("this JAX has no Pallas fuser (jax._src.pallas.fuser)")
  if not (isinstance(cls, type) and issubclass(cls, base)):
    raise TypeError(f"{cls!r} is not a subclass of the Pallas fuser's "
                    "FusionDType")
  if (encode is None) != (decode is None):
    raise TypeError("give both encode and decode, or neither")
  if encode is None:
    if not (dataclasses.is_dataclass(cls)
            and cls.__dataclass_params__.frozen):  # type: ignore[attr-defined]
      raise TypeError(
          f"{cls.__qualname__} is not a frozen dataclass: give encode and "
          "decode")
    # lazy: import time (the Pallas family imports JAX's Pallas).
    from jaxpr_io.families.pallas import core as pallas  # pylint: disable=g-import-not-at-top
    pallas.register_record_by_field_name(cls, name)
    return
  registry.register_param_codec(cls, name=name, encode=encode,
                                decode=decode)
