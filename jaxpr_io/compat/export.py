"""JAX internals for the StableHLO version that `jax.export` serializes for.

`jax.export` writes its StableHLO module as a *portable artifact* (VHLO
bytecode) for a target StableHLO version that JAX picks in
`jax._src.export._export._module_to_bytecode`: a version about four weeks
older than jaxlib's own (JAX 0.10: 1.15.0; 0.11 and 0.12: 1.18.0). A consumer
built with an older StableHLO cannot read what it does not know: TensorFlow
2.21's `XlaCallModule` has StableHLO 1.13.7 and fails on the
`vhlo.custom_call_v2` op that JAX 0.11+ writes for a shape assertion at
target 1.18.0. StableHLO can serialize the same module for any older target
within its compatibility window (down to `minimum_version()`), downgrading
ops whose new features the module does not use; `serialization_target`
makes `jax.export` do that, for the exports made inside the block by the
calling thread only.

The same `_module_to_bytecode` (same signature and body) exists in JAX
0.10.2, 0.11.2 and 0.12.0.1.

CHLO ops at symbolic shapes: StableHLO's serializer turns the CHLO ops that
VHLO lacks (`chlo.erf`; from JAX 0.11 also `chlo.erfc`, which exact `gelu`
calls) into `stablehlo.composite` ops whose decomposition is a function of
the module's dynamic types. TensorFlow 2.21's XlaCallModule refines the
shapes of the module's functions but not of the decompositions, and
refuses the module at its first call ("'stablehlo.dynamic_broadcast_in_dim'
op has dynamic shapes"; "decomposition has type 'tensor<?x4xf32>'").
`serialization_target(..., expand_chlo=True)` legalizes the CHLO ops of a
shape-polymorphic module into StableHLO ops before serializing
(`chlo-legalize-to-stablehlo`, StableHLO's own pass: the same ops the
composite's decomposition holds, inline, where TensorFlow refines them).
"""

from __future__ import annotations

import contextlib
import re
import threading
from typing import Iterator

import jax
from jax._src import xla_bridge
from jax._src.export import _export
from jax._src.lib.mlir import ir
from jax._src.lib.mlir import passmanager
from jax._src.lib.mlir.dialects import hlo
from jaxlib import _jax


def _parse(version: str) -> tuple[int, ...]:
  return tuple(int(part) for part in version.split("."))


def current_version() -> str:
  """The StableHLO version of this jaxlib, e.g. '1.22.0'."""
  return hlo.get_current_version()


def minimum_version() -> str:
  """The oldest StableHLO version this jaxlib can serialize for."""
  return hlo.get_minimum_version()


def default_target() -> str:
  """The StableHLO version `jax.export` serializes for by default."""
  return hlo.get_version_from_compatibility_requirement(
      hlo.StablehloCompatibilityRequirement.WEEK_4)


def is_older(a: str, b: str) -> bool:
  """Whether StableHLO version `a` is older than `b` ('1.13.7' < '1.18.0')."""
  return _parse(a) < _parse(b)


class TargetVersionError(ValueError):
  """The module uses an op or feature that the target StableHLO version
  cannot express (e.g. `lax.exp(..., accuracy=...)` before 1.9.0)."""


def serialize(module, target: str) -> bytes:
  """`module` as a portable artifact for StableHLO `target`, as JAX's own
  `_module_to_bytecode` serializes it except for the target.

  Raises:
    TargetVersionError: `target` cannot express the module.
  """
  try:
    return _jax.mlir.serialize_portable_artifact(
        module, target, xla_bridge.get_backend().serialize_with_sdy)
  except jax.errors.JaxRuntimeError as e:
    # The MLIR diagnostic is long (the module, Python call stacks); keep
    # its first error, e.g. "failed to legalize operation
    # 'vhlo.exponential_v2' that was explicitly marked illegal".
    first = re.search(r"error: ([^\n]*?)(?::\s*%|\n|$)", str(e))
    detail = first.group(1) if first else str(e).strip().splitlines()[0]
    raise TargetVersionError(
        f"StableHLO {target} cannot express the module ({detail})") from None


_passes_registered = False


def _uses_shape_polymorphism(module) -> bool:
  # `jax.export` sets the attribute before it serializes (0.10.2 to 0.12).
  attrs = module.operation.attributes
  return ("jax.uses_shape_polymorphism" in attrs
          and ir.BoolAttr(attrs["jax.uses_shape_polymorphism"]).value)


def expand_chlo(module) -> None:
  """Legalizes the CHLO ops of `module` into StableHLO ops, in place (see
  the module doc). `jax.export` uses the module after serializing it only
  to check its custom calls and shardings, which this does not change. An
  op the pass cannot legalize stays, as JAX serializes it (dialect
  conversion leaves a function it fails on as it was)."""
  global _passes_registered
  with _lock:
    if not _passes_registered:
      hlo.register_stablehlo_passes()
      _passes_registered = True
  with module.context:
    pm = passmanager.PassManager.parse(
        "builtin.module(func.func(chlo-legalize-to-stablehlo))")
    try:
      pm.run(module.operation)
    except ir.MLIRError:
      pass  # TensorFlow runs or refuses the module as JAX wrote it


# The settings (target, expand_chlo) of the current thread inside
# `serialization_target` (None outside), how many blocks are open in all
# threads together, and the function the swap replaced (JAX's), restored
# when the last block exits.
_local = threading.local()
_lock = threading.Lock()
_open_blocks = 0
_replaced = _export._module_to_bytecode


def _module_to_bytecode(module) -> bytes:
  settings = getattr(_local, "settings", None)
  if settings is None:  # another thread, outside any block: JAX's default
    return _replaced(module)
  target, expand = settings
  if expand and _uses_shape_polymorphism(module):
    expand_chlo(module)
  if target is None:
    return _replaced(module)
  return serialize(module, target)


@contextlib.contextmanager
def serialization_target(target: str | None, *,
                         expand_chlo: bool = False) -> Iterator[None]:
  """Within the block, `jax.export` in this thread serializes StableHLO for
  `target` instead of `default_target()`; `None`, or a target not older than
  the default, keeps the default. With `expand_chlo`, a shape-polymorphic
  module's CHLO ops are legalized into StableHLO first (module doc).

  JAX has no parameter for the target (it is hard-wired in
  `_export._module_to_bytecode`) and `jax2tf.convert` calls `jax.export`
  itself, during TensorFlow's tracing and again (for the VJP) while
  `tf.saved_model.save` runs, so the only way in is to swap
  `_module_to_bytecode` for the duration of the block. The swap is
  restored when the last open block exits (even on an exception), and the
  replacement defers to JAX's own function in every thread that is not
  inside a block, so nothing outside the block sees a difference.

  Raises:
    ValueError: `target` is older than `minimum_version()`.
    TargetVersionError: (from an export inside the block) the module uses
      an op or feature that `target` cannot express.
  """
  global _open_blocks, _replaced
  if target is not None and not is_older(target, default_target()):
    target = None
  if target is None and not expand_chlo:
    yield
    return
  if target is not None and is_older(target, minimum_version()):
    raise ValueError(
        f"StableHLO {target} is older than the oldest version this jaxlib "
        f"can serialize for ({minimum_version()})")
  previous = getattr(_local, "settings", None)
  with _lock:
    if _open_blocks == 0:
      _replaced = _export._module_to_bytecode
      _export._module_to_bytecode = _module_to_bytecode
    _open_blocks += 1
  _local.settings = (target, expand_chlo)
  try:
    yield
  finally:
    _local.settings = previous
    with _lock:
      _open_blocks -= 1
      if _open_blocks == 0:
        _export._module_to_bytecode = _replaced
