"""LiteRT (TensorFlow Lite) flatbuffers, for phones and embedded devices.

LiteRT's documented path from JAX goes through jax2tf and a SavedModel;
`to_tflite` takes it: the program becomes the SavedModel that
`to_saved_model` writes (for the CPU), which `tf.lite.TFLiteConverter`
turns into a `.tflite` flatbuffer of LiteRT's builtin operators (the
StableHLO inside the SavedModel is legalized to them). The bound weights
become constant buffers of the flatbuffer.

The model has one signature, `serving_default`, with the SavedModel's
input names (`arg0`, ...) and output names (`out0`, ...). A symbolic
dimension is -1 in the input's `shape_signature`: the interpreter takes
any size after `resize_tensor_input` (or through the signature runner),
as far as the legalized operators allow it (`to_tflite` says which).

Run it with `ai_edge_litert.interpreter.Interpreter` (`pip install
'jaxpr_io[litert]'`), or TensorFlow's own `tf.lite.Interpreter`.
"""

from __future__ import annotations

import os
import tempfile
import warnings

import numpy as np

from jaxpr_io.compat import symbolic
from jaxpr_io.converters import expansion, folding, simplify, verify
from jaxpr_io.converters._common import as_program
from jaxpr_io.converters.saved_model import _import_tf, to_saved_model
from jaxpr_io.errors import UnsupportedError
from jaxpr_io.format import files


def to_tflite(program, path: str | os.PathLike, *,
              trusted: bool = False) -> bytes:
  """Writes `program` as a LiteRT flatbuffer to `path` (see module doc)
  and returns its bytes. The file is written under a temporary name next
  to `path` and renamed into place once complete: a failure leaves what
  was at `path`, and no temporaries.

  `trusted=True`: do not charge what TensorFlow's converter folds into
  constant buffers, nor the functions it inlines (a program loaded without
  `trusted=True` is charged otherwise: `converters.folding`,
  `converters.expansion`).

  Raises:
    FormatError: an untrusted program computes more from its constants
      alone than its budget (the message names the largest equation), or
      expands to more equations than its budget once the converter copies
      its calls and loop bodies (the message names the equation).
    UnsupportedError: the program cannot become a SavedModel, or
      TensorFlow's converter cannot express it in LiteRT's operators (the
      message says which).
    ImportError: TensorFlow is not installed.
  """
  tf, _ = _import_tf()
  prog = as_program(program)
  _refuse_complex(prog)
  folding.check(prog, f"TensorFlow {tf.__version__}'s LiteRT converter",
                trusted)
  expansion.check(prog, f"TensorFlow {tf.__version__}'s LiteRT converter",
                  trusted)
  with tempfile.TemporaryDirectory(prefix="jaxpr_io_tflite_") as tmp:
    saved = os.path.join(tmp, "saved_model")
    to_saved_model(prog, saved, platforms=("cpu",))
    converter = tf.lite.TFLiteConverter.from_saved_model(saved)
    converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS]
    try:
      data = converter.convert()
    except Exception as e:  # pylint: disable=broad-except
      # TensorFlow's converter raises its own ConverterError (and others)
      # with the MLIR diagnostics: keep the first line that names an op.
      raise UnsupportedError(
          "TensorFlow's LiteRT converter cannot express the program in "
          f"LiteRT's builtin operators: {_first_error(e)}; "
          f"{_static_hint(prog)}ship it as StableHLO "
          "(converters.to_exported) or a SavedModel instead") from None
  _check_resizable(tf, prog, data)
  with files.replaced_file(path) as tmp:
    with open(tmp, "wb") as f:
      f.write(data)
  return data


def _static_hint(prog) -> str:
  """For a program with symbolic dimensions (whose dynamic ops LiteRT
  often lacks): how to fix them."""
  names = sorted(symbolic.dim_vars(prog.in_avals))
  if not names:
    return ""
  sizes = ",".join(f"{n}=1" for n in names)
  return (f"fix its symbolic dimensions first (Program.specialize("
          f"{sizes.replace(',', ', ')}), jaxpr-load --dims {sizes}), or ")


def _refuse_complex(prog) -> None:
  """LiteRT's builtin operators take no complex tensors, and TensorFlow's
  converter (2.21) can crash the process on them (a segmentation fault in
  its broadcast optimization of `imag`) instead of raising: refused up
  front, naming the first place a complex value appears."""
  for aval in prog.closed_jaxpr.in_avals:
    if _is_complex(aval):
      raise UnsupportedError(
          f"an input is {aval.str_short()}: LiteRT has no complex tensors; "
          "ship the program as StableHLO (converters.to_exported) or a "
          "SavedModel instead")
  for place, eqn in simplify.walk(prog.closed_jaxpr):
    for var in (*eqn.invars, *eqn.outvars):
      if _is_complex(getattr(var, "aval", None)):
        raise UnsupportedError(
            f"{place}: primitive {eqn.primitive.name} works on "
            f"{var.aval.str_short()}: LiteRT has no complex tensors; ship "
            "the program as StableHLO (converters.to_exported) or a "
            "SavedModel instead")


def _is_complex(aval) -> bool:
  # numpy's kind: "c" for complex64/128 (JAX's extended dtypes have none).
  return getattr(getattr(aval, "dtype", None), "kind", None) == "c"


def fixed_dimensions(tf, prog, data) -> list[str]:
  """The inputs' symbolic dimensions that the flatbuffer `data` fixed
  (its `shape_signature` has a size, not -1, there), as `arg0[0]`."""
  try:  # LiteRT's own interpreter; TensorFlow's is deprecated
    from ai_edge_litert import interpreter as litert  # pylint: disable=g-import-not-at-top
    make = litert.Interpreter
  except ImportError:
    make = tf.lite.Interpreter
  details = make(model_content=data).get_signature_runner(
      ).get_input_details()
  fixed = []
  for i, aval in enumerate(prog.closed_jaxpr.in_avals):
    signature = list(details[f"arg{i}"]["shape_signature"])
    for axis, d in enumerate(aval.shape):
      if type(d) is symbolic.DimExpr and signature[axis] != -1:
        fixed.append(f"arg{i}[{axis}] ({d})")
  return fixed


def _check_resizable(tf, prog, data) -> None:
  fixed = fixed_dimensions(tf, prog, data)
  if fixed:
    warnings.warn(
        "LiteRT's converter fixed the symbolic dimensions "
        f"{', '.join(fixed)}: the LiteRT model takes only the sizes it "
        "was converted for", stacklevel=3)


def _first_error(e: BaseException) -> str:
  lines = [l.strip() for l in str(e).splitlines() if l.strip()]
  for line in lines:
    if "error:" in line:
      return line[line.index("error:") + len("error:"):].strip()
  return f"{type(e).__name__}: {lines[0] if lines else ''}"


def interpreter(path: str | os.PathLike):
  """`ai_edge_litert.interpreter.Interpreter` of the model at `path`."""
  try:
    from ai_edge_litert import interpreter as litert  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("running a LiteRT model needs ai-edge-litert: pip "
                      "install 'jaxpr_io[litert]'") from e
  return litert.Interpreter(model_path=os.fspath(path))


def run_tflite(path: str | os.PathLike, inputs) -> list[np.ndarray]:
  """The flat outputs of the LiteRT model at `path` on the flat `inputs`
  (symbolic dimensions resized to the inputs' sizes)."""
  runner = interpreter(path).get_signature_runner("serving_default")
  outs = runner(**{f"arg{i}": np.asarray(x) for i, x in enumerate(inputs)})
  return [outs[f"out{i}"] for i in range(len(outs))]


def verify_tflite(program, path: str | os.PathLike, inputs=None, *,
                  name: str | None = None) -> verify.Verdict:
  """Runs the model at `path` in the LiteRT interpreter on `inputs`
  (default: zeros of the program's input avals) and compares with JAX;
  MismatchError beyond the tolerance (`converters.verify`), naming the
  artifact `name` (default: `path`)."""
  prog = as_program(program)
  inputs = (verify.example_inputs(prog.closed_jaxpr) if inputs is None
            else list(inputs))
  expected = verify.expected_outputs(prog, inputs)
  verdict = verify.compare("the LiteRT interpreter", expected,
                           run_tflite(path, inputs))
  return verify.check(verdict, name or os.fspath(path))
