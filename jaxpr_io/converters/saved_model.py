"""TensorFlow SavedModels through `jax2tf`, for TensorFlow Serving.

The SavedModel has one signature, `serving_default`, whose inputs are the
program's inputs in flattened order, named `arg0`, `arg1`, ..., and whose
outputs are named `out0`, `out1`, .... Symbolic dimensions become `None`.
The program's constants (the model weights of a traced model) become
`tf.Variable`s saved under `variables/`, so `saved_model.pb` stays small and
models beyond GraphDef's 2 GiB limit can be saved. The computation itself is
one `XlaCallModule` op carrying StableHLO (jax2tf's native serialization);
TensorFlow Serving must run with `--xla_cpu_compilation_enabled=true` to
execute it on a CPU.

StableHLO version: `jax.export` serializes for a StableHLO version about a
month older than jaxlib's (JAX 0.11 and 0.12: 1.18.0), which can be newer
than the one TensorFlow's XlaCallModule reads (TF 2.21: 1.13.7). The module
is then serialized for TensorFlow's version instead (StableHLO downgrades the
ops; `jaxpr_io.compat.export.serialization_target`); a program that version
cannot express is refused with UnsupportedError. A shape-polymorphic
module's CHLO ops (erf, erfc, so exact gelu) are legalized into StableHLO
first: as the serializer's composites, TensorFlow 2.21 cannot refine their
shapes (`compat.export.expand_chlo`; docs/serving.md has the tolerances).

Limitation: TensorFlow's XLA does not have jaxlib's LAPACK custom calls, so
programs using the LAPACK-backed `jnp.linalg` functions on the CPU (solve,
solve_triangular, cholesky, eigh, svd, qr, lu, det, inv) cannot become SavedModels; they are
refused with UnsupportedError (use `to_exported`, which runs them).
"""

from __future__ import annotations

import os
import re
from typing import Sequence

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import export as compat_export
from jaxpr_io.compat import specialize
from jaxpr_io.compat import symbolic
from jaxpr_io.converters._common import as_program, check_platforms
from jaxpr_io.converters.stablehlo import to_exported
from jaxpr_io.errors import UnsupportedError
from jaxpr_io.format import files


def _import_tf():
  try:
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    from jax.experimental import jax2tf  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        "to_saved_model needs TensorFlow: pip install 'jaxpr_io[tf]'") from e
  return tf, jax2tf


# Custom-call targets that jaxlib registers with its own XLA but that
# TensorFlow's XLA does not have: a SavedModel using them would save fine
# and fail at serving time, so refuse it up front.
_NOT_IN_TF = re.compile(r'(?:custom_call @|call_target_name = ")(lapack_\w+)')
# The type of a custom call's first operand: `} : (tensor<?x0x0xf32>, ...`.
_FIRST_OPERAND = re.compile(r'\}\s*:\s*\(tensor<([^>]*)>')


def _runs_on_nothing(line: str) -> bool:
  """Whether the custom call of this line of MLIR text has a first operand
  (the matrices a LAPACK kernel works on) with a static zero dimension: no
  elements, whatever the symbolic sizes. TensorFlow's XLA then never runs
  the kernel, and the SavedModel serves (so do jax2tf's)."""
  match = _FIRST_OPERAND.search(line[line.rfind("} :"):])
  return match is not None and "0" in match.group(1).split("x")[:-1]


def _check_runnable_in_tf(prog, platforms) -> None:
  closed = prog.closed_jaxpr
  for what, values in (("input", closed.in_avals),
                       ("output", closed.out_avals), ("weight", closed.consts)):
    for i, value in enumerate(values):
      dtype = getattr(value, "dtype", None)
      if dtype is not None and compat.is_prng_key_dtype(dtype):
        # TensorFlow has no dtype for JAX's typed PRNG keys.
        raise UnsupportedError(
            f"{what} {i} is a PRNG key array ({dtype}), which "
            "TensorFlow has no dtype for: pass the key's data instead "
            "(jax.random.key_data outside, jax.random.wrap_key_data inside "
            "the traced function), or ship the program as StableHLO "
            "(converters.to_exported)")
  on_cpu = not platforms or "cpu" in platforms
  exported = to_exported(prog, platforms=("cpu",) if on_cpu else platforms)
  if exported.nr_devices > 1:
    # jax2tf serializes the module for its devices, and TensorFlow runs an
    # XlaCallModule on one: Shardy's custom calls (shard_map's
    # xla.sdy.GlobalToLocalShape) have no TensorFlow kernel, and the
    # SavedModel would fail at its first call.
    raise UnsupportedError(
        f"the program runs on {exported.nr_devices} devices (a shard_map "
        "or a sharded jit inside), and a SavedModel runs it on one: "
        "TensorFlow cannot execute it. Ship it as StableHLO "
        "(converters.to_exported), or trace the program for one device")
  if not on_cpu:
    return
  text = exported.mlir_module()
  targets = sorted({target for line in text.splitlines()
                    for target in _NOT_IN_TF.findall(line)
                    if not _runs_on_nothing(line)})
  if targets:
    raise UnsupportedError(
        "the program calls jaxlib's LAPACK kernels "
        f"({', '.join(targets)}), which TensorFlow's XLA cannot run on a "
        "CPU; ship it as StableHLO with converters.to_exported / "
        "save_exported instead, or avoid the LAPACK-backed jnp.linalg "
        "functions (solve, solve_triangular, cholesky, eigh, svd, qr, lu, "
        "det, inv)")


def _tf_stablehlo_version() -> str | None:
  """The StableHLO version of TensorFlow's XlaCallModule (TF 2.21: 1.13.7),
  or None if this TensorFlow does not say."""
  try:
    from tensorflow.compiler.mlir.stablehlo import stablehlo  # pylint: disable=g-import-not-at-top
    return stablehlo.get_current_version()
  except (ImportError, AttributeError):
    return None


def _stablehlo_target(tf) -> str | None:
  """The StableHLO version to serialize for: JAX's default target (e.g.
  1.18.0 on JAX 0.12) if TensorFlow reads it, else TensorFlow's own version
  (e.g. 1.13.7 on TF 2.21), to which the module is downgraded. None: JAX's
  default (TensorFlow does not say what it reads)."""
  tf_version = _tf_stablehlo_version()
  if tf_version is None:
    return None
  if compat_export.is_older(tf_version, compat_export.minimum_version()):
    raise UnsupportedError(
        f"TensorFlow {tf.__version__} reads StableHLO {tf_version}, older "
        f"than the oldest version jax {compat.JAX_VERSION} writes "
        f"({compat_export.minimum_version()}); upgrade TensorFlow, or ship "
        "the program as StableHLO with converters.to_exported / "
        "save_exported")
  if compat_export.is_older(tf_version, compat_export.default_target()):
    return tf_version
  return None


# What `tf.saved_model.save` writes into a SavedModel directory.
_SAVED_MODEL_ENTRIES = frozenset({
    "saved_model.pb", "saved_model.pbtxt", "variables", "assets",
    "fingerprint.pb", "keras_metadata.pb"})


def _check_replaceable(export_dir: str) -> None:
  """FileExistsError for an `export_dir` that the SavedModel would replace
  but that is no SavedModel (a directory of other files, which TensorFlow
  used to write into, and which replacing it would delete)."""
  try:
    entries = set(os.listdir(export_dir))
  except (FileNotFoundError, NotADirectoryError):
    return  # missing (created), or a file (files.replaced_directory says)
  if entries and not (entries <= _SAVED_MODEL_ENTRIES and entries & {
      "saved_model.pb", "saved_model.pbtxt"}):
    shown = ", ".join(sorted(entries - _SAVED_MODEL_ENTRIES)[:3]
                      or sorted(entries)[:3])
    raise FileExistsError(
        f"cannot write a SavedModel to {export_dir}: it holds files that "
        f"are not a SavedModel's ({shown}), and a SavedModel replaces its "
        "directory as a whole; give a new or empty directory")


def _poly_spec(aval) -> str | None:
  if not any(type(d) is symbolic.DimExpr for d in aval.shape):
    return None
  return "(" + ", ".join(str(d) for d in aval.shape) + ")"


def _constraints(in_avals) -> tuple:
  """The constraints of the symbolic scope of the inputs' dimensions."""
  for aval in in_avals:
    for d in aval.shape:
      if type(d) is symbolic.DimExpr:
        return symbolic.scope_constraints(symbolic.scope_of(d))
  return ()


def _with_consts(jaxpr, in_tree):
  """The program as a function of (constants, *inputs), as jax2tf converts
  it. jax2tf traces with symbolic dimensions of its own scope (parsed from
  `polymorphic_shapes`): the program is re-expressed in them, as its params
  (a `broadcast_in_dim`'s shape, ...) must match the operands."""

  def with_consts(weights, *flat_args):
    closed = specialize.for_shapes(compat.make_closed(jaxpr, weights),
                                   in_tree, [np.shape(x) for x in flat_args])
    return compat.jaxpr_as_fun(closed)(*flat_args)
  return with_consts


def _save(tf, module, concrete, export_dir, with_gradient: bool) -> None:
  """Saves `module` into a temporary directory next to `export_dir`, which
  then takes its place (`files.replaced_directory`); missing parents are
  created, as TensorFlow creates them (models/NAME/1)."""
  options = tf.saved_model.SaveOptions(
      experimental_custom_gradients=with_gradient)
  os.makedirs(os.path.dirname(os.path.abspath(export_dir)), exist_ok=True)
  with files.replaced_directory(export_dir) as tmp:
    tf.saved_model.save(module, tmp,
                        signatures={"serving_default": concrete},
                        options=options)


def to_saved_model(program, export_dir: str | os.PathLike, *,
                   with_gradient: bool = False,
                   platforms: Sequence[str] | None = None) -> None:
  """Writes `program` as a SavedModel into `export_dir` (see module doc).

  Args:
    program: a `Program` or `ClosedJaxpr`.
    export_dir: the SavedModel directory, e.g. `models/NAME/1` for TF Serving.
    with_gradient: also save first-order gradients (TF can differentiate the
      loaded function).
    platforms: lowering platforms, e.g. `("cpu", "cuda")`; default: this
      process's default backend.

  The SavedModel is built in a temporary directory next to `export_dir`
  and takes its place only once it is complete (`files.replaced_directory`:
  one atomic exchange on Linux); a failure leaves `export_dir` as it was,
  and no temporaries. An `export_dir` that exists must be empty or a
  SavedModel (it is replaced as a whole).

  Raises:
    UnsupportedError: the program cannot be lowered (e.g. it calls a host
      callback), or TensorFlow's StableHLO version cannot express it; the
      message names the cause.
    FileExistsError: `export_dir` holds files and is not a SavedModel.
  """
  check_platforms(platforms)
  _check_replaceable(os.fspath(export_dir))
  tf, jax2tf = _import_tf()
  prog = as_program(program)
  _check_runnable_in_tf(prog, platforms)
  closed = prog.closed_jaxpr
  jaxpr, consts = closed.jaxpr, closed.consts
  in_avals = closed.in_avals

  with_consts = _with_consts(jaxpr, prog.in_tree)
  converted = jax2tf.convert(
      with_consts,
      polymorphic_shapes=[None] + [_poly_spec(a) for a in in_avals],
      polymorphic_constraints=_constraints(in_avals),
      with_gradient=with_gradient,
      native_serialization_platforms=tuple(platforms) if platforms else None)

  module = tf.Module()
  # Weights as variables: saved under variables/, not inside the graph.
  module.weights = [tf.Variable(np.asarray(c), trainable=False,
                                name=f"const{i}")
                    for i, c in enumerate(consts)]
  signature = [
      tf.TensorSpec([None if type(d) is symbolic.DimExpr else d
                     for d in a.shape], tf.as_dtype(a.dtype), name=f"arg{i}")
      for i, a in enumerate(in_avals)]

  def serve(*args):
    outs = converted(list(module.weights), *args)
    return {f"out{i}": out for i, out in enumerate(outs)}
  module.serve = tf.function(serve, input_signature=signature,
                             autograph=False)
  target = _stablehlo_target(tf)
  # jax2tf exports (calls jax.export) while TF traces `serve`, and for
  # with_gradient again (the VJP) while the SavedModel is saved: both inside
  # the block, which serializes for `target`.
  try:
    with compat_export.serialization_target(target, expand_chlo=True):
      try:
        concrete = module.serve.get_concrete_function()
      except compat_export.TargetVersionError:
        raise
      except (ValueError, TypeError, NotImplementedError) as e:
        raise UnsupportedError(
            f"the program cannot be converted to a SavedModel: "
            f"{type(e).__name__}: {e}") from None
      _save(tf, module, concrete, export_dir, with_gradient)
  except compat_export.TargetVersionError as e:
    raise UnsupportedError(
        f"TensorFlow {tf.__version__} reads StableHLO up to {target}, older "
        f"than what jax {compat.JAX_VERSION} writes "
        f"({compat_export.default_target()}): {e}. Ship it as StableHLO "
        "with converters.to_exported / save_exported instead, or use a "
        "TensorFlow that reads a newer StableHLO") from None
