"""ONNX models through `jax2onnx`, for ONNX Runtime.

The program is first simplified for inference (`converters.simplify`:
custom_jvp/custom_vjp rules replaced by their primal bodies, `jit`,
`closed_call` and `remat` inlined, debug prints dropped), then checked
equation by equation against jax2onnx's handlers, so that a program with a
primitive ONNX cannot express is refused up front with an UnsupportedError
naming the equation, and only then handed to `jax2onnx.to_onnx`.

The model's inputs are the program's flat inputs, named `arg0`, `arg1`,
..., its outputs `out0`, `out1`, ... (as in the SavedModel). Symbolic
dimensions become ONNX dynamic dimensions named as in the program (`b`).
The program's constants (bound weights) become initializers; ONNX's
protobuf limit of 2 GiB applies to the whole model.
"""

from __future__ import annotations

import collections
import os
from typing import Sequence

import jax
import numpy as np

from jaxpr_io import compat
from jaxpr_io.converters import expansion, folding, simplify, verify
from jaxpr_io.converters._common import as_program
from jaxpr_io.errors import UnsupportedError
from jaxpr_io.format import files

# What to tell a user whose program has no handler.
_ADVICE = ("ship it as StableHLO (converters.to_exported) or a SavedModel "
           "(converters.to_saved_model) instead")


def _import_jax2onnx():
  try:
    import jax2onnx  # pylint: disable=g-import-not-at-top
    import onnx  # pylint: disable=g-import-not-at-top
    from jax2onnx.plugins import plugin_system  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(
        "to_onnx needs jax2onnx and onnx: pip install 'jaxpr_io[onnx]'") from e
  plugin_system.import_all_plugins()
  return jax2onnx, onnx, plugin_system.PLUGIN_REGISTRY


def handled_primitives() -> frozenset[str]:
  """The primitive names jax2onnx converts (needs the `onnx` extra)."""
  return frozenset(_import_jax2onnx()[2])


def check_convertible(program, handled=None) -> None:
  """UnsupportedError naming the first equation (in the program as
  `jaxpr-load --text` prints it) whose primitive has no ONNX handler."""
  prog = as_program(program)
  handled = handled_primitives() if handled is None else handled
  for place, eqn in simplify.walk(prog.closed_jaxpr):
    name = eqn.primitive.name
    if name not in handled:
      raise UnsupportedError(
          f"{place}: primitive {name} has no ONNX conversion (jax2onnx "
          f"{_version('jax2onnx')} has no handler for it); {_ADVICE}")


def _version(package: str) -> str:
  # lazy: import time (importlib.metadata is only needed for messages).
  from importlib import metadata  # pylint: disable=g-import-not-at-top
  try:
    return metadata.version(package)
  except metadata.PackageNotFoundError:
    return "(not installed)"


def _specs(closed):
  return [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in closed.in_avals]


def _uses_float64(closed) -> bool:
  return any(np.dtype(a.dtype) in (np.float64, np.complex128)
             for a in list(closed.in_avals) + list(closed.out_avals))


def _rename(model, old: Sequence[str], new: Sequence[str]) -> None:
  """Renames graph values `old` to `new` everywhere in `model`'s graph."""
  mapping = {o: n for o, n in zip(old, new) if o != n}
  if not mapping:
    return
  graph = model.graph
  for value in list(graph.input) + list(graph.output) + list(
      graph.value_info):
    value.name = mapping.get(value.name, value.name)
  for node in graph.node:
    node.input[:] = [mapping.get(n, n) for n in node.input]
    node.output[:] = [mapping.get(n, n) for n in node.output]
    for attr in node.attribute:  # subgraphs (Loop, If, Scan) read outer names
      for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
        _rename_in_subgraph(sub, mapping)


def _rename_in_subgraph(graph, mapping) -> None:
  for node in graph.node:
    node.input[:] = [mapping.get(n, n) for n in node.input]
    for attr in node.attribute:
      for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
        _rename_in_subgraph(sub, mapping)


def _name_outputs(model, onnx) -> None:
  """Names the graph's outputs `out0`, `out1`, ...: a value a node of the
  graph computes, output once, is renamed; any other (an input, an
  initializer from a literal output, a value output twice) is given its
  name by an Identity node, as renaming it would rename an input or leave
  the output without a producer (fuzz case 23199: a literal output)."""
  graph = model.graph
  produced = {name for node in graph.node for name in node.output}
  names = [v.name for v in graph.output]
  counts = collections.Counter(names)
  rename_old, rename_new = [], []
  for i, (value, name) in enumerate(zip(graph.output, names)):
    target = f"out{i}"
    if name == target:
      continue
    if name in produced and counts[name] == 1:
      rename_old.append(name)
      rename_new.append(target)
    else:
      graph.node.append(onnx.helper.make_node(
          "Identity", [name], [target], name=f"jaxpr_io_output{i}"))
      value.name = target
  _rename(model, rename_old, rename_new)


def to_onnx(program, path: str | os.PathLike, *, opset: int | None = None,
            trusted: bool = False):
  """Writes `program` as an ONNX model to `path` (see module doc) and
  returns the `onnx.ModelProto`. The file is written under a temporary name
  next to `path` and renamed into place once complete: a failure leaves
  what was at `path`, and no temporaries.

  Args:
    program: a `Program` or `ClosedJaxpr`.
    path: the `.onnx` file to write.
    opset: the ONNX opset; default: jax2onnx's default (21 in 0.17).
    trusted: do not charge what jax2onnx folds into initializers and
      the calls and loop bodies it copies (a program loaded without
      `trusted=True` is charged otherwise: `converters.folding`,
      `converters.expansion`).

  Raises:
    UnsupportedError: an equation's primitive has no ONNX conversion (the
      message names the equation), or jax2onnx failed on it.
    FormatError: an untrusted program computes more from its constants
      alone than its budget (the message names the largest equation), or
      expands to more equations than its budget once the converter copies
      its calls and loop bodies (the message names the equation).
    ImportError: jax2onnx or onnx is not installed.
  """
  jax2onnx, onnx, handled = _import_jax2onnx()
  prog = as_program(program)
  check_convertible(prog, handled)
  folding.check(prog, f"jax2onnx {_version('jax2onnx')}", trusted)
  expansion.check(prog, f"jax2onnx {_version('jax2onnx')}", trusted)
  closed = simplify.for_inference(prog)
  kwargs = {} if opset is None else {"opset": int(opset)}
  try:
    model = jax2onnx.to_onnx(
        compat.jaxpr_as_fun(closed), _specs(closed),
        model_name="jaxpr_io",
        enable_double_precision=_uses_float64(closed), **kwargs)
  except (NotImplementedError, ValueError, TypeError, KeyError,
          AssertionError, jax.errors.InconclusiveDimensionOperation) as e:
    # (A symbolic dimension where jax2onnx needs a constant raises the
    # last: "Symbolic dimension 'a + 1' used in a context that requires a
    # constant".)
    raise UnsupportedError(
        f"jax2onnx {_version('jax2onnx')} could not convert the program: "
        f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}; "
        f"{_ADVICE}") from None
  _rename(model, [v.name for v in model.graph.input],
          [f"arg{i}" for i in range(len(model.graph.input))])
  _name_outputs(model, onnx)
  path = os.fspath(path)
  with files.replaced_file(path) as tmp:
    # The format onnx.save would take from the target's extension (the
    # temporary's is .tmp): binary protobuf unless it is a text format's.
    onnx.save(model, tmp, format=_format_of(onnx, path))
  return model


def _format_of(onnx, path: str) -> str | None:
  return onnx.serialization.registry.get_format_from_file_extension(
      os.path.splitext(path)[1])


def run_onnx(path: str | os.PathLike, inputs) -> list[np.ndarray]:
  """The flat outputs of the ONNX model at `path` on the flat `inputs`, run
  by `onnxruntime.InferenceSession` on the CPU."""
  try:
    import onnxruntime  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError("running an ONNX model needs onnxruntime: pip install "
                      "'jaxpr_io[onnx]'") from e
  session = onnxruntime.InferenceSession(
      os.fspath(path), providers=["CPUExecutionProvider"])
  names = [i.name for i in session.get_inputs()]
  return session.run(None, {n: np.asarray(x) for n, x in zip(names, inputs)})


def verify_onnx(program, path: str | os.PathLike, inputs=None, *,
                name: str | None = None) -> verify.Verdict:
  """Runs the model at `path` in ONNX Runtime on `inputs` (default: zeros
  of the program's input avals) and compares with JAX; MismatchError
  beyond the tolerance (`converters.verify`), naming the artifact `name`
  (default: `path`; a model checked under a temporary name before it is
  renamed into place is named by its target)."""
  prog = as_program(program)
  inputs = (verify.example_inputs(prog.closed_jaxpr) if inputs is None
            else list(inputs))
  expected = verify.expected_outputs(prog, inputs)
  verdict = verify.compare("onnxruntime", expected, run_onnx(path, inputs))
  return verify.check(verdict, name or os.fspath(path))
