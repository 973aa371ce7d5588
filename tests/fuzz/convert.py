"""The converter stage of a fuzz case (issue 38): a program that passes
`check=True` must convert, or be refused with a jaxpr_io error, and what it
converts to must run and return the types the program declares.

Every accepted case is lowered by `converters.to_exported` and the
`Exported` called on the case's inputs. One case in `HEAVY_EVERY` (chosen
by the CRC-32 of the case's bytes, so a case always takes the same
converter) also goes through one of the three heavy converters, in turn:
`to_onnx` run by ONNX Runtime, `to_saved_model` loaded and called by
TensorFlow, `to_tflite` run by the LiteRT interpreter.

Outcomes, per converter:
  ok            converted; the artifact ran and returned the declared types
  refused       an UnsupportedError or FormatError (a converter's own
                limit, or the cost of folded constants): a clean refusal
  mismatch      the artifact ran with the declared types but other values
                than JAX beyond the verification tolerance
                (`converters.verify`); recorded with examples, not a
                failure: mutated programs compute NaNs, infinities and
                overflowing integers, whose values runtimes differ on
  runtime-lacks the runtime has no kernel for an operation at a dtype
                ("Could not find an implementation for Mul(14)") or no
                such operation at the model's opset ("No Op registered
                for BitCast with domain_version of 23"): the
                runtime's own limit, which issue 39's coverage table lists
  skipped: WHY  not applicable (sharded or key-typed inputs for the heavy
                converters)
Anything else is raised, and is a failure of the case (`post-check-STAGE`):
an exception of another type from a converter or its runtime, or outputs
of undeclared types (`transforms.UndeclaredType`).
"""

from __future__ import annotations

import os
import tempfile
import zlib

HEAVY = ("to_onnx", "to_saved_model", "to_tflite")
HEAVY_EVERY = 8
# Seconds the runner adds to a case's deadline before a heavy converter
# (TensorFlow's first conversion in a worker takes several seconds).
HEAVY_SECONDS = 60.0


def heavy_for(data: bytes) -> str | None:
  """The heavy converter this case runs, if any."""
  crc = zlib.crc32(data)
  if crc % HEAVY_EVERY:
    return None
  return HEAVY[(crc // HEAVY_EVERY) % len(HEAVY)]


def _declared(prog, args, kwargs) -> list:
  import jax  # pylint: disable=import-outside-toplevel
  return jax.tree_util.tree_leaves(jax.eval_shape(prog, *args, **kwargs))


def _check_types(what: str, declared: list, outs) -> None:
  import numpy as np  # pylint: disable=import-outside-toplevel
  from tests.fuzz import transforms  # pylint: disable=import-outside-toplevel
  outs = list(outs)
  if len(outs) != len(declared):
    raise transforms.UndeclaredType(
        f"{what} returned {len(outs)} outputs; the program declares "
        f"{len(declared)}")
  for i, (d, o) in enumerate(zip(declared, outs)):
    shape, dtype = tuple(np.shape(o)), np.dtype(getattr(o, "dtype", None))
    if shape != tuple(d.shape) or dtype != np.dtype(d.dtype):
      raise transforms.UndeclaredType(
          f"{what} returned output {i} of {dtype}{list(shape)}; the "
          f"program declares {d.dtype}{list(d.shape)}")


def _to_exported(prog, args, kwargs, declared) -> str:
  import jax  # pylint: disable=import-outside-toplevel
  from jaxpr_io import converters  # pylint: disable=import-outside-toplevel
  exported = converters.to_exported(prog)
  if exported.nr_devices > 1 and not _placed(args, kwargs):
    # Lowered for several devices (a shard_map inside, over a mesh the
    # inputs do not name): JAX calls it only with inputs laid out on those
    # devices as its HLO shardings say, which the case's inputs are not.
    return "skipped: a multi-device export called with unplaced inputs"
  outs = exported.call(*args, **kwargs)
  jax.block_until_ready(outs)
  _check_types("to_exported's Exported", declared,
               jax.tree_util.tree_leaves(outs))
  return "ok"


def _placed(args, kwargs) -> bool:
  import jax  # pylint: disable=import-outside-toplevel
  return any(len(getattr(x, "devices", lambda: ())()) > 1
             for x in jax.tree_util.tree_leaves((args, kwargs)))


# What a runtime says when it has no kernel for an operation at a dtype:
# the runtime's own limit (docs/runtime-coverage.md), not the program's.
_RUNTIME_OWN = ("Could not find an implementation for",
                "No Op registered for",
                # ONNX Runtime's type check of a node whose operator has no
                # kernel for the type ("Type 'tensor(uint2)' of input
                # parameter (arg1) of operator (Gemm) ... is invalid": ONNX
                # has 2-bit integers, ONNX Runtime's Gemm does not).
                "Type Error: Type 'tensor(",
                # The LiteRT interpreter's kernels ("Only update, Add, ...
                # are currently supported for stablehlo.scatter", a select
                # of an int32 condition): issue 39's list.
                "failed to prepare")


def _run_heavy(name: str, prog, flat: list, declared, tmp: str) -> None:
  from jaxpr_io import converters  # pylint: disable=import-outside-toplevel
  from jaxpr_io.converters import litert, onnx_model  # pylint: disable=import-outside-toplevel
  if name == "to_onnx":
    path = os.path.join(tmp, "m.onnx")
    converters.to_onnx(prog, path)
    outs = onnx_model.run_onnx(path, flat)
    _check_types("the ONNX model", declared, outs)
    onnx_model.verify_onnx(prog, path, flat)
  elif name == "to_tflite":
    path = os.path.join(tmp, "m.tflite")
    converters.to_tflite(prog, path)
    outs = litert.run_tflite(path, flat)
    _check_types("the LiteRT model", declared, outs)
    litert.verify_tflite(prog, path, flat)
  else:
    import tensorflow as tf  # pylint: disable=import-outside-toplevel
    path = os.path.join(tmp, "saved")
    converters.to_saved_model(prog, path, platforms=("cpu",))
    # The documented signature: inputs arg0.., outputs out0.. .
    serving = tf.saved_model.load(path).signatures["serving_default"]
    result = serving(**{f"arg{i}": tf.constant(x) for i, x in enumerate(flat)})
    outs = [result[f"out{i}"].numpy() for i in range(len(result))]
    _check_types("the SavedModel", declared, outs)


def run(prog, made_args: dict, heavy: str | None, report) -> dict:
  """Runs the converters on an accepted program at the inputs its call was
  made with; returns {converter: outcome} (module doc). `report(stage,
  info)` announces each converter to the runner."""
  import jax  # pylint: disable=import-outside-toplevel
  import jaxpr_io  # pylint: disable=import-outside-toplevel
  from jaxpr_io.converters import verify  # pylint: disable=import-outside-toplevel
  from tests.fuzz import worker  # pylint: disable=import-outside-toplevel
  refusals = (jaxpr_io.UnsupportedError, jaxpr_io.FormatError)
  args, kwargs, mesh = made_args["args"], made_args["kwargs"], made_args[
      "mesh"]
  outcomes = {}
  with worker.mesh_context(mesh):
    declared = _declared(prog, args, kwargs)
    report("to_exported", {})
    try:
      outcomes["to_exported"] = _to_exported(prog, args, kwargs, declared)
    except refusals as e:
      outcomes["to_exported"] = f"refused: {type(e).__name__}: {e}"[:200]
  if heavy is None:
    return outcomes
  flat = jax.tree_util.tree_leaves((args, kwargs))
  if mesh is not None:
    outcomes[heavy] = "skipped: sharded inputs"
    return outcomes
  if any(jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key) for x in flat):
    outcomes[heavy] = "skipped: key-typed inputs"
    return outcomes
  report(heavy, {"extend": HEAVY_SECONDS})
  with tempfile.TemporaryDirectory(prefix="fuzz-convert-") as tmp:
    try:
      _run_heavy(heavy, prog, flat, declared, tmp)
      outcomes[heavy] = "ok"
    except verify.MismatchError as e:
      outcomes[heavy] = f"mismatch: {e}"[:300]
    except refusals as e:
      outcomes[heavy] = f"refused: {type(e).__name__}: {e}"[:200]
    except Exception as e:  # pylint: disable=broad-except
      if not any(m in str(e) for m in _RUNTIME_OWN):
        raise
      outcomes[heavy] = f"runtime-lacks: {e}"[:200]
  return outcomes
