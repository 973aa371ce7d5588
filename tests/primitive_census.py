"""Every `Primitive` object that JAX's modules define, and what jaxpr_io
does with each.

    python -m tests.primitive_census      # prints the census and the gaps

`census()` imports every module under `jax._src` and `jax.experimental`
(those that import on this machine) and collects the `Primitive` objects
they hold at module level. Each is then one of:

* storable: jaxpr_io's primitive table knows it (`jaxpr_io.registry`), so
  `dumps` writes its equations and `loads` rebinds them;
* listed: in `NOT_STORABLE`, with the reason it cannot or must not be
  stored;
* a gap: in `KNOWN_GAPS` (unknown to the table) or `PARAM_GAPS` (known by
  name, params not storable), work that remains (issue 12). A primitive that is
  none of these (one a new JAX release adds) fails
  tests/test_primitive_census.py, as does a gap that has become storable.
"""

from __future__ import annotations

import importlib
import pkgutil
import warnings

import jax  # noqa: F401
from jax._src import core

from jaxpr_io import registry

_PACKAGES = ("jax._src", "jax.experimental")

# name -> why it cannot be stored safely, or cannot appear in a traced
# program. These hold native code of the writing process or name a device
# kernel: a file must never choose native code (the trust model).
NOT_STORABLE = {
    "tpu_custom_call": "carries a compiled Mosaic TPU kernel (native code "
                       "chosen by the file)",
    "mosaic_gpu_p": "carries a compiled Mosaic GPU kernel (native code "
                    "chosen by the file)",
    "call_tf": "calls a TensorFlow function of the writing process; export "
               "TensorFlow functions as SavedModels instead",
    "elementwise_inline_asm": "Triton inline PTX assembly (native code "
                              "chosen by the file)",
    "elementwise_inline_asm_p": "Triton inline PTX assembly (JAX 0.10's "
                                "name)",
    "thunky.ptx_kernel": "launches the PTX kernel its params hold on the "
                         "XLA:GPU thunk executor (native code chosen by the "
                         "file; JAX 0.12)",
    "inline_mgpu": "Mosaic GPU inline kernels: a Python function of the "
                   "writing process that emits MLIR while lowering (code, "
                   "which a file must never choose)",
    "inline_mgpu_p": "Mosaic GPU inline kernels (JAX 0.10's and 0.11's "
                     "name)",
    "_copysign": "bound only inside Mosaic GPU's lowering rule of `sign` "
                 "(while a kernel is lowered), never in a traced program",
    "custom_fusion": "the Pallas fuser's rules (eval, pull and push block "
                     "spec) are Python functions of BlockSpecs and index "
                     "transforms that no jaxpr can express; a file holds "
                     "no code",
    "fusible": "(JAX 0.10) its `func` is the user's Python function, "
               "which the Pallas fuser calls with `Fusion` objects (Python "
               "closures), not arrays: no jaxpr can stand in for it and a "
               "file holds no code",
}

# name (or "pallas:M" for every primitive of the Pallas module
# jax._src.pallas.M and its submodules) -> what storing it still needs.
# pallas_call, mpmd_map, the core kernel primitives and those of Mosaic TPU,
# SparseCore, Triton and Mosaic GPU are storable (see PARAM_GAPS for their
# exceptions). Of the rest:
# * emit_pipeline, pipeline_body: Mosaic TPU's software pipeline, whose
#   bodies copy blocks with DMAs and semaphores, plus codecs for its
#   GridMapping and tracing-registry treedefs.
# * pack_dtype, unpack_dtype: the fuser's fusion dtypes are user subclasses
#   of an extended dtype (FusibleElementDType); their avals and `dtype`
#   param need a registry through which the loading process names the
#   dtype classes (the format's extended-dtype TypeRef, version 5, then
#   stores them as records).
KNOWN_GAPS = {
    "pallas:mosaic.pipeline": "Mosaic TPU's emit_pipeline/pipeline_body",
    "pallas:fuser": "the Pallas fuser's pack_dtype and unpack_dtype "
                    "(user-defined fusion dtypes)",
}


# Primitives jaxpr_io's table knows by name on some releases, whose params
# it cannot store yet: gaps, not storable.
PARAM_GAPS = {
    # Mosaic GPU's tensor memory (Blackwell tcgen05): a TMEM ref aval
    # (AbstractTMEMRef, an AbstractRef with a TMEM layout and a collective
    # flag) has no encoding in format version 5.
    **dict.fromkeys(
        ("tcgen05_mma", "async_load", "async_store_tmem",
         "async_copy_smem_to_tmem", "async_copy_scales_to_tmem",
         "async_copy_sparse_metadata_to_tmem"),
        "Mosaic GPU TMEM: its TMEM ref avals (AbstractTMEMRef) have no "
        "encoding yet"),
    # Mosaic GPU multicast: the MulticastRef transform (a mutable dataclass)
    # has no codec.
    **dict.fromkeys(
        ("multimem_store", "multimem_load_reduce",
         "semaphore_signal_multicast"),
        "Mosaic GPU multicast refs (plgpu.multicast_ref) have no codec yet"),
}


def census() -> dict[str, tuple[object, str]]:
  """name -> (primitive, the module that defines it), over every module of
  JAX's that imports here."""
  found: dict[int, tuple[object, str]] = {}
  for package_name in _PACKAGES:
    package = importlib.import_module(package_name)
    for info in pkgutil.walk_packages(package.__path__, package_name + ".",
                                      onerror=lambda name: None):
      try:
        with warnings.catch_warnings():
          warnings.simplefilter("ignore")
          module = importlib.import_module(info.name)
      except Exception:  # pylint: disable=broad-except
        continue  # e.g. Mosaic GPU bindings, absent from CPU jaxlib
      for value in list(vars(module).values()):
        if isinstance(value, core.Primitive):
          found.setdefault(id(value), (value, info.name))
  by_name: dict[str, tuple[object, str]] = {}
  for prim, module in found.values():
    key = prim.name if prim.name not in by_name else f"{prim.name}@{module}"
    by_name[key] = (prim, module)
  return by_name


def _gap_key(name: str, module: str) -> str | None:
  if module.startswith("jax._src.pallas."):
    rest = module[len("jax._src.pallas."):]
    for key in KNOWN_GAPS:
      if key.startswith("pallas:") and (rest == key[7:]
                                        or rest.startswith(key[7:] + ".")):
        return key
    return None
  return name.split("@")[0] if name.split("@")[0] in KNOWN_GAPS else None


def classify() -> dict[str, list[tuple[str, str]]]:
  """{"storable", "listed", "gap", "unaccounted"} -> [(name, module)]."""
  result = {"storable": [], "listed": [], "gap": [], "unaccounted": []}
  for name, (prim, module) in sorted(census().items()):
    if name in NOT_STORABLE:
      result["listed"].append((name, module))
    elif name in PARAM_GAPS:
      result["gap"].append((name, module))
    elif registry.PRIMITIVES.name_of(prim) is not None:
      result["storable"].append((name, module))
    elif _gap_key(name, module) is not None:
      result["gap"].append((name, module))
    else:
      result["unaccounted"].append((name, module))
  return result


def summary(result) -> str:
  total = sum(map(len, result.values()))
  return (f"{len(result['storable'])} of {total} primitives storable, "
          f"{len(result['listed'])} listed with reasons, "
          f"{len(result['gap'])} not yet storable (known gaps)")


if __name__ == "__main__":
  classes = classify()
  print(f"jax {jax.__version__}: {summary(classes)}")
  for kind in ("listed", "gap", "unaccounted"):
    for name, module in classes[kind]:
      print(f"  {kind:<11} {name:<40} {module}")
