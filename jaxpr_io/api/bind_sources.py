"""Where bound weights come from: `jaxpr-load --bind ARG=SOURCE` and
`jaxpr_io.orbax.ProgramRestore(bind=...)`.

A SOURCE is
  * an `.npz` file whose arrays are keyed by key paths, relative to the
    argument (`['dense']['w']`) or as `jaxpr-load` prints them
    (`args[0]['dense']['w']`), loaded without pickle; or
  * an Orbax checkpoint item directory (e.g. `ckpt/7/state`, written with
    `ocp.args.StandardSave` or `PyTreeSave`), optionally followed by
    `:KEY.PATH` to take a subtree of it: `ckpt/7/state:params`,
    `ckpt/7/state:params.dense`. Restoring needs `orbax-checkpoint`
    (`pip install 'jaxpr_io[orbax]'`).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from jaxpr_io.api.binding import FlatSource


class SourceError(ValueError):
  """A SOURCE that cannot be read or has no such subtree (one line)."""


def split_spec(spec: str) -> tuple[str, str]:
  """(path, KEY.PATH or "") of `PATH[:KEY.PATH]`."""
  path, sep, keys = spec.rpartition(":")
  if sep and path and keys and "/" not in keys and os.sep not in keys:
    return path, keys
  return spec, ""


def load_source(spec: str, *, base: str | os.PathLike | None = None) -> Any:
  """The pytree (or `FlatSource`) that SOURCE `spec` names; a relative path
  is taken relative to `base` when given (an Orbax step directory)."""
  path, keys = split_spec(spec)
  if base is not None and not os.path.isabs(path):
    path = os.path.join(os.fspath(base), path)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no such file or directory: {path}")
  if os.path.isdir(path):
    return subtree(_restore_orbax(path), keys, spec)
  if keys:
    raise SourceError(f"{spec}: :KEY.PATH selects a subtree of an Orbax "
                      "checkpoint directory, not of a file")
  try:
    data = np.load(path, allow_pickle=False)
  except (ValueError, OSError) as e:
    raise SourceError(f"{path} is neither an .npz file nor an Orbax "
                      f"checkpoint directory: {e}") from None
  if not isinstance(data, np.lib.npyio.NpzFile):
    raise SourceError(
        f"{path} is one .npy array; --bind needs an .npz (np.savez) whose "
        "arrays are keyed by key paths such as ['params']['w'], or an "
        "Orbax checkpoint directory")
  with data:
    return FlatSource({k: data[k] for k in data.files}, path)


def _restore_orbax(path: str) -> Any:
  try:
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError("reading an Orbax checkpoint needs orbax-checkpoint: "
                      "pip install 'jaxpr_io[orbax]'") from None
  try:
    with ocp.PyTreeCheckpointer() as checkpointer:
      return checkpointer.restore(os.path.abspath(path))
  except (ValueError, KeyError, FileNotFoundError) as e:
    first = str(e).splitlines()[0] if str(e) else ""
    raise SourceError(
        f"{path}: Orbax cannot restore it ({type(e).__name__}: "
        f"{first:.300}); give a checkpoint item directory such as "
        "ckpt/7/state, not the step or the checkpoint root") from None


def subtree(tree: Any, keys: str, spec: str) -> Any:
  """The subtree of `tree` at KEY.PATH `keys` (dot-separated dict keys,
  attribute names or list indices)."""
  if not keys:
    return tree
  node, walked = tree, []
  for key in keys.split("."):
    if isinstance(node, dict):
      if key in node:
        node = node[key]
      elif key.isdigit() and int(key) in node:
        node = node[int(key)]
      else:
        raise SourceError(
            f"{spec}: no key {key!r} under "
            f"{'.'.join(walked) or 'the checkpoint root'} (it has: "
            f"{', '.join(map(str, node)) or 'nothing'})")
    elif isinstance(node, (list, tuple)) and key.isdigit() and (
        int(key) < len(node)):
      node = node[int(key)]
    elif hasattr(node, "__dict__") and key in vars(node):
      node = vars(node)[key]
    else:
      raise SourceError(f"{spec}: no key {key!r} under "
                        f"{'.'.join(walked) or 'the checkpoint root'}")
    walked.append(key)
  return node
