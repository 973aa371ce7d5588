"""Converters: a saved program as StableHLO (`jax.export`), a TensorFlow
SavedModel (`jax2tf`), an ONNX model (`jax2onnx`) or a LiteRT flatbuffer
(TensorFlow's LiteRT converter), for any XLA device, TF Serving, ONNX
Runtime and phones.

Lowering happens here, at conversion time, with this process's jaxlib: one
platform-neutral `.jaxpr` file becomes StableHLO for any set of platforms.

    from jaxpr_io import converters
    exp = converters.to_exported(prog, platforms=("cpu", "cuda"))
    converters.save_exported(prog, "model.exported")       # + model.exported.mlir
    converters.to_saved_model(prog, "models/mlp/1")          # needs tensorflow
    converters.to_onnx(prog, "model.onnx")                   # needs jax2onnx
    converters.to_tflite(prog, "model.tflite")               # needs tensorflow

`verify_onnx` and `verify_tflite` run an artifact in its own runtime
(onnxruntime, ai-edge-litert) and compare it with JAX (`converters.verify`).
"""

from jaxpr_io.converters.litert import run_tflite, to_tflite, verify_tflite
from jaxpr_io.converters.onnx_model import run_onnx, to_onnx, verify_onnx
from jaxpr_io.converters.saved_model import to_saved_model
from jaxpr_io.converters.stablehlo import save_exported, to_exported
from jaxpr_io.converters.verify import MismatchError

__all__ = ["MismatchError", "run_onnx", "run_tflite", "save_exported",
           "to_exported", "to_onnx", "to_saved_model", "to_tflite",
           "verify_onnx", "verify_tflite"]
