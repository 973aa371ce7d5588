"""Pallas: JAX's modules of kernel dataclasses, enums and meshes, imported
only when a program or a file holds a Pallas kernel
(jaxpr_io/families/pallas/ loads this)."""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from jaxpr_io.errors import UnsupportedError


def pallas_modules() -> dict[str, Any] | None:
  """Pallas's modules of dataclasses and enums, by the short name the
  format gives them ("core", and each backend's: "tpu", "triton", "gpu"),
  or None where this jaxlib has no Pallas. Backends that do not import
  here (e.g. without their bindings) are left out."""
  try:
    from jax._src.pallas import core  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  modules = {"core": core}
  for short, name in (("tpu", "jax._src.pallas.mosaic.core"),
                      ("triton", "jax._src.pallas.triton.core"),
                      ("gpu", "jax._src.pallas.mosaic_gpu.core")):
    try:
      modules[short] = importlib.import_module(name)
    except ImportError:
      continue
  return modules


def tensorcore_mesh_fields(mesh) -> tuple:
  """JAX 0.10's Mosaic TPU `TensorCoreMesh` (an array of `TensorCore`s and
  its axis names) as the record 0.11+ store by field name: (("axis_name",
  name), ("num_cores", n)). Only the meshes `create_tensorcore_mesh` makes
  (cores 0..n-1 along one axis) have that form."""
  from jax._src.pallas.mosaic import core as tpu_core  # pylint: disable=g-import-not-at-top
  cores = list(np.asarray(mesh.devices).reshape(-1))
  names = tuple(mesh.axis_names)
  if (len(names) != 1 or np.ndim(mesh.devices) != 1
      or [type(c) for c in cores] != [tpu_core.TensorCore] * len(cores)
      or [c.id for c in cores] != list(range(len(cores)))):
    raise UnsupportedError(
        f"TensorCoreMesh {mesh!r:.120} is not one that "
        "pltpu.create_tensorcore_mesh(axis_name, num_cores=n) makes (cores "
        "0..n-1 along one axis), the only form the format stores")
  return (("axis_name", names[0]), ("num_cores", len(cores)))


def tensorcore_mesh(axis_name: str, num_cores: int):
  """Mosaic TPU's `TensorCoreMesh` of `num_cores` cores along `axis_name`."""
  from jax._src.pallas.mosaic import core as tpu_core  # pylint: disable=g-import-not-at-top
  return tpu_core.create_tensorcore_mesh(axis_name, num_cores=num_cores)


def fusion_dtype_base() -> type | None:
  """The Pallas fuser's `FusionDType`, or None in a JAX without the fuser."""
  try:
    from jax._src.pallas.fuser import fusible_dtype  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  return fusible_dtype.FusionDType


def sparse_core_modules() -> tuple[Any, Any, Any] | None:
  """Mosaic TPU's SparseCore modules (sc_core, the TPU core, the SparseCore
  primitives), or None where this JAX has no SparseCore."""
  try:
    return (importlib.import_module("jax._src.pallas.mosaic.sc_core"),
            importlib.import_module("jax._src.pallas.mosaic.core"),
            importlib.import_module("jax._src.pallas.mosaic.sc_primitives"))
  except ImportError:
    return None


def sparse_core_problem() -> str | None:
  """Why this process cannot build a SparseCore mesh now, or None."""
  sc_core = importlib.import_module("jax._src.pallas.mosaic.sc_core")
  try:
    sc_core.get_sparse_core_info()
  except (ValueError, RuntimeError) as e:
    return str(e).split(".")[0]
  return None


def mosaic_gpu_tmem_layouts() -> dict[str, type]:
  """Mosaic GPU's TMEM layout classes by the short names the format gives
  them (Tiling, Replicated, TiledLayout, TMEMLayout)."""
  from jax.experimental.mosaic.gpu import fragmented_array, tcgen05  # pylint: disable=g-import-not-at-top
  return {"Tiling": fragmented_array.Tiling,
          "Replicated": fragmented_array.Replicated,
          "TiledLayout": fragmented_array.TiledLayout,
          "TMEMLayout": tcgen05.TMEMLayout}


# Enums of Pallas kernel primitives' params: how Mosaic GPU's TMA copies
# fill what lies out of bounds, the kinds of Mosaic GPU's and Triton's atomic
# operations, and how remote DMAs and semaphore signals name a device.
# Stable name -> (module, attribute).
_OPTIONAL_ENUMS = {
    "jax.pallas.gpu.OOBFillMode":
        ("jax.experimental.mosaic.gpu.launch_context", "OOBFillMode"),
    "jax.pallas.gpu.AtomicOpType":
        ("jax._src.pallas.mosaic_gpu.primitives", "AtomicOpType"),
    "jax.pallas.DeviceIdType": ("jax._src.pallas.primitives", "DeviceIdType"),
    "jax.pallas.triton.AtomicOpType":
        ("jax._src.pallas.triton.primitives", "AtomicOpType"),
}


def optional_enums() -> dict[str, type]:
  """Stable name -> enum class, for the enums above that this jaxlib has (a
  backend's bindings may be absent)."""
  found = {}
  for name, (module_name, attr) in _OPTIONAL_ENUMS.items():
    try:
      module = importlib.import_module(module_name)
    except ImportError:
      continue
    cls = getattr(module, attr, None)
    if cls is not None:
      found[name] = cls
  return found
