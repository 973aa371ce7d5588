"""Programs saved inside Orbax checkpoints, beside the state they run on.

    import orbax.checkpoint as ocp
    import jaxpr_io.orbax

    mngr.save(step, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        program=jaxpr_io.orbax.ProgramSave(prog)))
    restored = mngr.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(),
        program=jaxpr_io.orbax.ProgramRestore()))
    restored.program(restored.state, batch)

The handler writes `program.jaxpr` into the item's directory of the step.
Orbax writes a step into a temporary directory and renames it when every
item has committed, so a step that did not finish is never offered for
restore; the program file itself is also written atomically. With an
asynchronous `CheckpointManager`, the program is serialized when `save` is
called (so later changes to the Python objects cannot leak in) and written to
disk in the background with the arrays.
"""

from __future__ import annotations

import dataclasses
from typing import Any, List, Optional

import jax
import orbax.checkpoint as ocp
from etils import epath

from jaxpr_io import container
from jaxpr_io import program as program_lib

FILENAME = "program.jaxpr"


class ProgramCheckpointHandler(ocp.AsyncCheckpointHandler):
  """Saves and restores one `jaxpr_io.Program` as `program.jaxpr`."""

  def __init__(self, filename: str = FILENAME):
    self._filename = filename

  async def async_save(self, directory: epath.Path,
                       args: Optional["ProgramSave"] = None
                       ) -> Optional[List[Any]]:
    if args is None:
      raise ValueError("ProgramCheckpointHandler.save needs "
                       "args=jaxpr_io.orbax.ProgramSave(program)")
    # Serialize now, in the caller's thread: the program message is fixed
    # at save(). The constants are written (and checksummed) from their own
    # buffers in the background, as `jaxpr_io.save` writes them.
    parts = program_lib.serialize(args.program)
    path = directory / self._filename

    async def write():
      if jax.process_index() == 0:
        container.write_file(path, *parts)
    return [ocp.future.CommitFutureAwaitingContractedSignals(
        write(), name="jaxpr_io_program_save")]

  def save(self, directory: epath.Path,
           args: Optional["ProgramSave"] = None) -> None:
    parts = program_lib.serialize(args.program)
    if jax.process_index() == 0:
      container.write_file(directory / self._filename, *parts)

  def restore(self, directory: epath.Path,
              args: Optional["ProgramRestore"] = None
              ) -> program_lib.Program:
    args = args if args is not None else ProgramRestore()
    return program_lib.load(directory / self._filename, check=args.check,
                            trusted=args.trusted)

  def metadata(self, directory: epath.Path) -> Optional[Any]:
    return None


@ocp.args.register_with_handler(ProgramCheckpointHandler, for_save=True)
@dataclasses.dataclass
class ProgramSave(ocp.args.CheckpointArgs):
  """Save a `jaxpr_io.Program` (or a bare ClosedJaxpr)."""
  program: Any


@ocp.args.register_with_handler(ProgramCheckpointHandler, for_restore=True)
@dataclasses.dataclass
class ProgramRestore(ocp.args.CheckpointArgs):
  """Restore the saved program. `check=True` also proves it runs (see
  `jaxpr_io.load`); `trusted=True` grants what the file asks for beyond the
  computation (donation, compiler options, ...; README "Trust model")."""
  check: bool = False
  trusted: bool = False
