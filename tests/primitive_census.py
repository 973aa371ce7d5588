"""Every `Primitive` object that JAX's modules define, and what jaxpr_io
does with each.

    python -m tests.primitive_census      # prints the census and the gaps
    JAXPR_IO_COVERAGE=cov.txt python -m pytest -q tests/
    python -m tests.primitive_census --coverage cov.txt   # and untested ones

`census()` imports every module under `jax._src` and `jax.experimental`
(those that import on this machine) and collects the `Primitive` objects
they hold at module level. Each is then one of:

* storable: jaxpr_io's primitive table knows it (`jaxpr_io.registry`), so
  `dumps` writes its equations and `loads` rebinds them;
* listed: in `NOT_STORABLE`, with the reason it cannot or must not be
  stored, or in `NEVER_TRACED`, with where JAX binds it (never in a traced
  program);
* a gap: in `KNOWN_GAPS` (unknown to the table) or `PARAM_GAPS` (known by
  name, params not storable), work that remains (issue 12). A primitive that is
  none of these (one a new JAX release adds) fails
  tests/test_primitive_census.py, as does a gap that has become storable.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
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
    "pipeline_body": "Mosaic TPU's software pipeline binds it only inside "
                     "the jaxprs that emit_pipeline's lowering (from JAX "
                     "0.11 also its discharge rule and TPU interpret mode) "
                     "builds and consumes at once, never in a traced "
                     "program; a stored emit_pipeline rebuilds it",
    "fusible": "(JAX 0.10) its `func` is the user's Python function, "
               "which the Pallas fuser calls with `Fusion` objects (Python "
               "closures), not arrays: no jaxpr can stand in for it and a "
               "file holds no code",
}

# name (or "pallas:M" for every primitive of the Pallas module
# jax._src.pallas.M and its submodules) -> what storing it still needs.
# pallas_call, the core kernel primitives and those of Mosaic TPU, Triton and
# Mosaic GPU (its TMEM and multicast primitives too: tests/test_pallas_tmem.py)
# are storable. Of the rest:
# * mpmd_map: its params need a codec for the kernels' meshes (Mosaic TPU's
#   TensorCoreMesh, a dataclass like the others of jaxpr_io/pallas.py) and
#   the pallas_call compiler-params screen; 0.10's TensorCoreMesh is another
#   class. plgpu.kernel launches Mosaic GPU kernels with it.
KNOWN_GAPS = {
    "pallas:mosaic.sc_primitives": "SparseCore kernel primitives",
    "pallas:mpmd": "mpmd_map (Mosaic TPU core meshes, plgpu.kernel's launch)",
}


# Primitives jaxpr_io's table knows by name on some releases, whose params
# it cannot store yet: gaps, not storable (Mosaic GPU's TMEM and multicast
# primitives were the last to leave; tests/test_coverage_lax.py checks that
# dumps refuses the ones below).
PARAM_GAPS: dict[str, str] = {
    # lax, linalg, random, custom rules, calls, export (dumps refuses them
    # with UnsupportedError naming the param)
    "call_exported": "its `exported` param is a jax.export.Exported (a "
                     "serialized StableHLO module): a codec, and a trust "
                     "decision on StableHLO from untrusted files",
    "custom_partitioning": "its `call`, `partition`, "
                           "`infer_sharding_from_operands`, "
                           "`propagate_user_sharding` and `decode_shardings` "
                           "are Python functions: codecs (registered names, "
                           "or jaxprs for `call`)",
    "remat_opt": "(custom_vjp with optimize_remat=True) its "
                 "`fun_jaxpr_thunk` is a thunk that traces the primal "
                 "function: a codec storing that jaxpr",
    "linear_call": "its `transpose_thunk` is a thunk that traces the "
                   "transpose: a codec storing that jaxpr",
    "custom_lin": "(in linearized custom_vjp programs) its `bwd` is the "
                  "custom_vjp's backward rule as a WrappedFun: the codec of "
                  "custom_vjp_call's `bwd` (jaxpr_io/custom_rules.py) "
                  "extended to it",
    "relayout": "(JAX 0.12) dumps refuses it: its output's aval carries the "
                "layout (ShapedArray.layout), which the schema's Aval does "
                "not hold; needs a schema field",
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


# name -> where JAX binds it, for primitives that no traced program holds:
# JAX binds them only while lowering, inside another primitive's rules, or
# in jaxprs that it builds and consumes at once. Each reason was checked in
# JAX's source. Whether or not jaxpr_io's table has them, they are listed,
# and no round-trip test is asked of them (`uncovered`).
NEVER_TRACED: dict[str, str] = {
    # lax, linalg, random, custom rules, calls, export
    "tie": "jax/_src/lax/lax.py binds it only in its own JVP rule; nothing "
           "else in JAX binds it",
    "select_and_scatter": "bound only by _select_and_scatter_add_impl "
                          "(jax/_src/lax/windowed_reductions.py), which is "
                          "select_and_scatter_add's lowering (mlir.lower_fun)",
    "zeros_like": "jax/_src/ad_util.py defines it; nothing in JAX binds it",
    "custom_jvp_call_jaxpr": "a stub jax/_src/custom_derivatives.py keeps "
                             "for old imports; nothing in JAX binds it",
    **{name: "bound only in shape_poly.compute_dim_vars_from_arg_shapes "
             "(jax/_src/export/shape_poly.py), which jax.export lowers at "
             "once with mlir.lower_fun while wrapping a shape-polymorphic "
             "module's main function (_export._wrap_main_func)"
       for name in ("shape_assertion", "dimension_size")},
    **{name: "cuDNN: bound only in the impl of its *_wrapper primitive "
             "(jax/_src/cudnn/fused_attention_stablehlo.py, "
             "scaled_matmul_stablehlo.py), which runs eagerly, and as the "
             "function of the custom_partitioning that lowers the wrapper "
             "(and its partition callback); traced programs hold the "
             "wrapper (tests/test_coverage_lax.py)"
       for name in ("dot_product_attention_fwd", "dot_product_attention_bwd",
                    "dot_product_attention_fp8_fwd",
                    "dot_product_attention_fp8_bwd", "scaled_matmul")},
    "unreachable": "custom_derivatives.unreachable, its only binder, passes "
                   "out_avals as a list, which JAX (0.7+) refuses as an "
                   "unhashable param, so no program can hold it; its only "
                   "user, disallow_jvp, is itself unused",
    # collectives, state, hijax
    # sparse, Pallas
}

if jax.__version__.startswith("0.10."):
  NEVER_TRACED.update({
      # lax, linalg, random, custom rules, calls, export
      "eval_jaxpr": "(JAX 0.10's lax primitive) its staging rule "
                    "(jax/_src/lax/eval_jaxpr.py custom_staging_rules) "
                    "stages it out as closed_call; JAX 0.11+'s eval_jaxpr "
                    "is another primitive, which traced programs hold",
  })
else:
  NEVER_TRACED.update({
      # lax, linalg, random, custom rules, calls, export
      **{name: "(JAX 0.11+) bound only by lax._sort_lt_comparator and "
               "_sort_le_comparator: in sort's lowering, and in "
               "jnp.searchsorted's implementations (jax/_src/numpy/hijax.py), "
               "which SearchSorted.expand runs when call_hi_primitive is "
               "lowered (to_lojax); JAX 0.10 traces them in searchsorted "
               "(tests/test_coverage_lax.py)"
         for name in ("eq_to", "le_to", "lt_to")},
  })


def classify() -> dict[str, list[tuple[str, str]]]:
  """{"storable", "listed", "gap", "unaccounted"} -> [(name, module)]."""
  result = {"storable": [], "listed": [], "gap": [], "unaccounted": []}
  for name, (prim, module) in sorted(census().items()):
    if name in NOT_STORABLE or name in NEVER_TRACED:
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


def add_coverage(path: str, seen_primitives) -> None:
  """Adds to the file at `path` the census keys of `seen_primitives` (the
  primitive objects of programs that tests round-tripped; tests/conftest.py
  collects them). Keys, not names: census keys tell apart primitives that
  share a name."""
  keys = {key for key, (prim, _) in census().items() if prim in seen_primitives}
  if os.path.exists(path):
    with open(path, encoding="utf-8") as f:
      keys.update(line.strip() for line in f if line.strip())
  with open(path, "w", encoding="utf-8") as f:
    f.writelines(key + "\n" for key in sorted(keys))


def uncovered(result, path: str) -> list[tuple[str, str]]:
  """The storable primitives of `result` (`classify()`) that no test
  program recorded in `path` (`add_coverage`) used."""
  with open(path, encoding="utf-8") as f:
    seen = {line.strip() for line in f}
  return [(name, module) for name, module in result["storable"]
          if name not in seen]


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--coverage", metavar="FILE",
                      help="also list the storable primitives that no test "
                           "round-tripped (FILE from JAXPR_IO_COVERAGE), "
                           "and exit 1 if there are any")
  cli = parser.parse_args()
  classes = classify()
  print(f"jax {jax.__version__}: {summary(classes)}")
  for kind in ("listed", "gap", "unaccounted"):
    for name, module in classes[kind]:
      print(f"  {kind:<11} {name:<40} {module}")
  if cli.coverage:
    missing = uncovered(classes, cli.coverage)
    print(f"{len(classes['storable']) - len(missing)} of "
          f"{len(classes['storable'])} storable primitives round-tripped by a "
          f"test program ({cli.coverage})")
    for name, module in missing:
      print(f"  untested    {name:<40} {module}")
    sys.exit(1 if missing else 0)
