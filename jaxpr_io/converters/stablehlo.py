"""StableHLO through `jax.export`."""

from __future__ import annotations

import os
from typing import Sequence

import jax

from jaxpr_io.api import shardings
from jaxpr_io.converters._common import (as_program, check_platforms,
                                         input_specs)
from jaxpr_io.errors import UnsupportedError
from jaxpr_io.format import files


def to_exported(program, *, platforms: Sequence[str] | None = None,
                disabled_checks: Sequence = ()) -> jax.export.Exported:
  """Lowers `program` (a `Program` or `ClosedJaxpr`) with `jax.export`.

  Args:
    program: the program; symbolic dimensions stay symbolic, so the result
      accepts any size that satisfies the program's constraints.
    platforms: e.g. `("cpu", "cuda", "tpu")`; lowering for a platform needs
      no device of it. Default: this process's default backend.
    disabled_checks: passed to `jax.export.export`.

  Raises:
    ValueError: an unknown platform (valid: cpu, cuda, rocm, tpu).
    UnsupportedError: the program cannot be lowered (for example it calls a
      host callback, which StableHLO artifacts cannot carry); the message
      names the cause, or a constant (a bound weight) has shards in other
      processes.
  """
  check_platforms(platforms)
  prog = as_program(program)
  for i, const in enumerate(prog.closed_jaxpr.consts):
    if shardings.is_device_array(const) and not const.is_fully_addressable:
      # jax.export bakes constants into the module: it needs their data.
      raise UnsupportedError(
          f"constant {i} of the program is a jax.Array with shards in other "
          "processes, which an export cannot bake in: export the program "
          "unbound and pass the weights to Exported.call (docs/scale.md)")
  args, kwargs = input_specs(prog)
  try:
    return jax.export.export(jax.jit(prog), platforms=platforms,
                             disabled_checks=disabled_checks)(*args, **kwargs)
  except (ValueError, TypeError, NotImplementedError) as e:
    raise UnsupportedError(
        f"the program cannot be exported as StableHLO for platforms "
        f"{platforms or 'default'}: {type(e).__name__}: {e}") from None


def save_exported(program, path: str | os.PathLike, *,
                  platforms: Sequence[str] | None = None,
                  vjp_order: int = 0) -> jax.export.Exported:
  """Writes `Exported.serialize(vjp_order)` bytes to `path` and the StableHLO
  text beside it, at `path + ".mlir"`. Returns the `Exported`.

  The bytes load with `jax.export.deserialize` (which needs the `flatbuffers`
  package) in any process, without jaxpr_io.

  Both files are written under temporary names next to them and renamed
  into place once both are complete (the text, then the bytes): a failure
  leaves the files that were there before, and no temporaries.
  """
  exported = to_exported(program, platforms=platforms)
  try:
    data = exported.serialize(vjp_order=vjp_order)
  except ImportError as e:
    # jax.export writes its flatbuffer with the `flatbuffers` package, a
    # dependency of jaxpr_io that an install may still lack.
    raise ImportError(
        "saving a jax.export artifact needs the flatbuffers package: "
        "pip install flatbuffers") from e
  except (ValueError, TypeError, NotImplementedError) as e:
    raise UnsupportedError(
        f"the exported program cannot be serialized with vjp_order="
        f"{vjp_order}: {type(e).__name__}: {e}") from None
  path = os.fspath(path)
  with files.replaced_file(path) as tmp, \
      files.replaced_file(path + ".mlir") as tmp_mlir:
    with open(tmp, "wb") as f:
      f.write(data)
    with open(tmp_mlir, "w") as f:
      f.write(exported.mlir_module())
  return exported
