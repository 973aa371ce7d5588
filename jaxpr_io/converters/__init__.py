"""Converters: a saved program as StableHLO (`jax.export`) or as a
TensorFlow SavedModel (`jax2tf`), for any XLA device and TF Serving.

Lowering happens here, at conversion time, with this process's jaxlib: one
platform-neutral `.jaxpr` file becomes StableHLO for any set of platforms.

    from jaxpr_io import converters
    exp = converters.to_exported(prog, platforms=("cpu", "cuda"))
    converters.save_exported(prog, "model.exported")       # + model.exported.mlir
    converters.to_saved_model(prog, "models/mlp/1")          # needs tensorflow
"""

from jaxpr_io.converters.saved_model import to_saved_model
from jaxpr_io.converters.stablehlo import save_exported, to_exported

__all__ = ["save_exported", "to_exported", "to_saved_model"]
