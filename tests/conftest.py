"""Test-wide setup: 8 host CPU devices, so sharded programs (meshes,
shard_map, pmap) run on a machine without accelerators. Set before JAX
creates its backends, which happens lazily on first use."""

import os

_FLAG = "--xla_force_host_platform_device_count=8"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " +
                             _FLAG).strip()

# Keras 3 picks its backend when first imported, possibly by another library
# (tests/zoo2.py's keras3_mlp needs the JAX backend).
os.environ["KERAS_BACKEND"] = "jax"
