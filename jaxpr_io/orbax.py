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

    # Or the program with the state's params already bound (its constants):
    served = mngr.restore(step, args=ocp.args.Composite(
        program=jaxpr_io.orbax.ProgramRestore(bind={0: "state:params"})))
    served.program(batch)

The handler writes `program.jaxpr` into the item's directory of the step.
Orbax writes a step into a temporary directory and renames it when every
item has committed, so a step that did not finish is never offered for
restore; the program file itself is also written atomically. On restore,
the program and every SOURCE of `bind` named relative to the step are read
only from inside the step (jaxpr_io/api/source_paths.py: no links out of
it). With an
asynchronous `CheckpointManager`, the program is serialized when `save` is
called (so later changes to the Python objects cannot leak in) and written to
disk in the background with the arrays.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, List, Mapping, Optional, Union

import jax
import orbax.checkpoint as ocp
from etils import epath

from jaxpr_io.api import bind_sources
from jaxpr_io.api import source_paths
from jaxpr_io.format import files
from jaxpr_io.api import program as program_lib

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
        files.write_file(path, *parts)
    return [ocp.future.CommitFutureAwaitingContractedSignals(
        write(), name="jaxpr_io_program_save")]

  def save(self, directory: epath.Path,
           args: Optional["ProgramSave"] = None) -> None:
    parts = program_lib.serialize(args.program)
    if jax.process_index() == 0:
      files.write_file(directory / self._filename, *parts)

  def restore(self, directory: epath.Path,
              args: Optional["ProgramRestore"] = None
              ) -> program_lib.Program:
    args = args if args is not None else ProgramRestore()
    # The program is a file of this item, not a link out of the step.
    source_paths.check_inside_dir(os.fspath(directory),
                                  os.fspath(directory.parent))
    source_paths.check_inside(os.fspath(directory / self._filename),
                              os.fspath(directory), self._filename)
    prog = program_lib.load(directory / self._filename, check=args.check,
                            trusted=args.trusted)
    if not args.bind:
      return prog
    positional, keyword = {}, {}
    given = dict(args.bind_shardings or {})
    for key in given:
      if key not in args.bind or not isinstance(args.bind[key], str):
        raise ValueError(
            f"ProgramRestore(bind_shardings=...) has {key!r}, which bind= "
            f"does not read from a SOURCE string; a pytree of arrays "
            f"bound keeps its own shardings")
    for key, value in args.bind.items():
      if isinstance(value, str):
        # An item of this step (`state:params`) or any other SOURCE.
        value = bind_sources.load_source(value,
                                         base=os.fspath(directory.parent),
                                         trusted=args.trusted,
                                         shardings=given.get(key),
                                         mesh=args.bind_mesh)
      if isinstance(key, int):
        positional[key] = value
      else:
        keyword[key] = value
    if sorted(positional) != list(range(len(positional))):
      raise ValueError(
          f"ProgramRestore(bind=...) binds positional arguments from the "
          f"first, like functools.partial; it has {sorted(positional)}")
    return prog.bind(*(positional[i] for i in range(len(positional))),
                     extra=args.bind_extra, **keyword)

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
  computation (donation, compiler options, ...; docs/trust-model.md).

  `bind` restores the program already bound (`Program.bind`), as
  `jaxpr-load --bind` does: a mapping from a positional index (0, 1, ...,
  from the first) or a keyword name to a pytree of arrays, or to a SOURCE
  string: an item of the same step with an optional subtree (`"state:params"`
  binds the `params` of the step's `state` item), an Orbax item directory or
  an `.npz` file (jaxpr_io/api/bind_sources.py). A typed key input takes
  the key data Orbax saved of a key (a Flax NNX `RngKey`).
  `bind_extra="ignore"` binds the part of each value that the program
  takes (`Program.bind(extra="ignore")`): a whole NNX state to a program
  of its params.

  The arrays of an Orbax SOURCE are restored with Orbax's sharded restore,
  each process reading only the shards its devices hold, with the
  shardings `bind_shardings` gives for that key of `bind` (one
  `jax.sharding.Sharding` or `PartitionSpec`, or a tree of them shaped as
  the SOURCE's subtree; a `PartitionSpec` is on `bind_mesh`), else those
  the program declares for the input (docs/scale.md); an array with
  neither is read whole, as numpy. In a multi-process job every process
  restores, with the same arguments."""
  check: bool = False
  trusted: bool = False
  bind: Optional[Mapping[Union[int, str], Any]] = None
  bind_extra: str = "error"
  bind_shardings: Optional[Mapping[Union[int, str], Any]] = None
  bind_mesh: Optional[Any] = None
