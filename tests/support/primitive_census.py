"""Every `Primitive` object that JAX's modules define, and what jaxpr_io
does with each.

    python -m tests.support.primitive_census      # the census, what is listed and why
    JAXPR_IO_COVERAGE=cov.txt python -m pytest -q tests/
    python -m tests.support.primitive_census --coverage cov.txt   # and untested ones

`census()` imports every module under `jax._src` and `jax.experimental`
(those that import on this machine) and collects the `Primitive` objects
they hold at module level. Each is then one of:

* storable: jaxpr_io's primitive table knows it (`jaxpr_io.codec.registry`), so
  `dumps` writes its equations and `loads` rebinds them;
* listed: in `NOT_STORABLE`, with the reason it cannot or must not be
  stored, or in `NEVER_TRACED`, with where JAX binds it (never in a traced
  program);
* unaccounted: neither (one a new JAX release adds, or one jaxpr_io cannot
  store yet), which fails tests/compat/test_primitive_census.py: there is no
  category for "not yet storable".

Storable is not yet covered: a storable primitive is covered when a test
program that uses it round-trips (`--coverage`, which CI runs after each full
test run).
"""

from __future__ import annotations

import argparse
import importlib
import fcntl
import os
import pkgutil
import sys
import warnings

import jax  # noqa: F401
from jax._src import core

from jaxpr_io.codec import registry

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
    "call_exported": "(jax.export.Exported.call) embeds a serialized "
                     "StableHLO module, which may call any custom-call "
                     "target of the loading process (native code chosen by "
                     "the file); dumps refuses it and says to store the "
                     "exported function instead (jaxpr_io/safety/trust.py)",
    "fusible": "(JAX 0.10) its `func` is the user's Python function, "
               "which the Pallas fuser calls with `Fusion` objects (Python "
               "closures), not arrays: no jaxpr can stand in for it and a "
               "file holds no code",
}

# Listed primitives that are in jaxpr_io's table, so that `dumps` can
# refuse them with a message of their own: name -> the param whose codec
# refuses it (jaxpr_io/safety/trust.py).
REFUSED_BY_PARAM = {"call_exported": "exported"}

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
             "wrapper (tests/read_write/test_coverage_lax.py)"
       for name in ("dot_product_attention_fwd", "dot_product_attention_bwd",
                    "dot_product_attention_fp8_fwd",
                    "dot_product_attention_fp8_bwd", "scaled_matmul")},
    "unreachable": "custom_derivatives.unreachable, its only binder, passes "
                   "out_avals as a list, which JAX (0.7+) refuses as an "
                   "unhashable param, so no program can hold it; its only "
                   "user, disallow_jvp, is itself unused",
    # collectives, state, hijax
    "stage": "`jax.lax.stage` binds it with `_stage_bind_with_trace` "
             "(jax/_src/lax/lax.py), which calls the trace's stage_value: "
             "jaxpr traces (partial_eval.py) make the value a tracer or a "
             "constant without an equation, the AD, batching, remat and "
             "shard_map traces defer to their parent; only the eager "
             "EvalTrace binds stage_p (core.py), outside any trace (JAX "
             "0.10 and 0.12)",
    "log_read": "(JAX 0.10 jax._src.hijax) ReadLog.abstract_eval raises, so "
                "no trace can stage it: logs are read eagerly, outside "
                "traces, where its to_lojax rule runs; JAX 0.12 has no logs",
    # sparse, Pallas
    **{name: "bound only by `_bcoo_dot_general_gpu_impl` "
             "(jax/experimental/sparse/bcoo.py), which `mlir.lower_fun` "
             "makes bcoo_dot_general's CUDA/ROCm lowering rule: it runs "
             "while a program is lowered for a GPU, never in a traced "
             "program (JAX 0.10 to 0.12)"
       for name in ("coo_spmv", "coo_spmm")},
    **{name: "bound by no code of JAX's (0.10 to 0.12): csr.py and bcsr.py "
             "call its lowering helper (`_lowerings._csr_spmv_gpu_lowering`"
             ", `_csr_spmm_gpu_lowering`) directly from the GPU lowering "
             "rules of csr_matvec/csr_matmat/bcsr_dot_general; the "
             "primitive exists only for tests of those helpers"
       for name in ("csr_spmv", "csr_spmm")},
    "wgmma": "Mosaic GPU's functional WGMMA, bound only by the discharge "
             "rule of `wgmma_ref` (`_wgmma_ref_discharge`, "
             "pallas/mosaic_gpu/primitives.py), which runs when Mosaic GPU's "
             "lowering discharges the state of loop and cond bodies "
             "(`discharge.discharge_state` in mosaic_gpu/lowering.py) and in "
             "interpret mode's discharge of a kernel: jaxprs built and "
             "consumed at once; a traced kernel holds `wgmma_ref` "
             "(JAX 0.10 to 0.12)",
    "jaxpr_call": "(JAX 0.10; gone in 0.11) bound only by "
                  "`primitives._jaxpr_call`, which only Mosaic GPU's "
                  "`lower_pipelined_jaxpr_to_module` (mosaic_gpu/lowering.py)"
                  " calls, inside the pipeline it builds while lowering a "
                  "pallas_call with a grid, and by its own discharge rule",
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
               "(tests/read_write/test_coverage_lax.py)"
         for name in ("eq_to", "le_to", "lt_to")},
  })


def classify() -> dict[str, list[tuple[str, str]]]:
  """{"storable", "listed", "unaccounted"} -> [(name, module)]."""
  result = {"storable": [], "listed": [], "unaccounted": []}
  for name, (prim, module) in sorted(census().items()):
    if name in NOT_STORABLE or name in NEVER_TRACED:
      result["listed"].append((name, module))
    elif registry.PRIMITIVES.name_of(prim) is not None:
      result["storable"].append((name, module))
    else:
      result["unaccounted"].append((name, module))
  return result


def summary(result) -> str:
  total = sum(map(len, result.values()))
  return (f"{len(result['storable'])} of {total} primitives storable, "
          f"{len(result['listed'])} listed with reasons"
          + (f", {len(result['unaccounted'])} unaccounted for"
             if result["unaccounted"] else ""))


def add_coverage(path: str, seen_primitives) -> None:
  """Adds to the file at `path` the census keys of `seen_primitives` (the
  primitive objects of programs that tests round-tripped; tests/conftest.py
  collects them). Keys, not names: census keys tell apart primitives that
  share a name."""
  keys = {key for key, (prim, _) in census().items() if prim in seen_primitives}
  # pytest-xdist's workers finish at once: each merges under a lock.
  with open(path, "a+", encoding="utf-8") as f:
    fcntl.flock(f, fcntl.LOCK_EX)
    f.seek(0)
    keys.update(line.strip() for line in f if line.strip())
    f.seek(0)
    f.truncate()
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
  for kind in ("listed", "unaccounted"):
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
