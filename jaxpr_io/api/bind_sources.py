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

import math
import operator
import os
import warnings
from typing import Any

import numpy as np

from jaxpr_io.api import npz_source
from jaxpr_io.api import shardings as sharding_lib
from jaxpr_io.api import source_paths
from jaxpr_io.api.binding import Deferred, SourceError, SourceTree
from jaxpr_io.api.source_paths import UnsafeSourceError
from jaxpr_io.format import limits

__all__ = ["SourceError", "UnsafeSourceError", "load_source", "split_spec",
           "subtree"]


def split_spec(spec: str) -> tuple[str, str]:
  """(path, KEY.PATH or "") of `PATH[:KEY.PATH]`."""
  path, sep, keys = spec.rpartition(":")
  if sep and path and keys and "/" not in keys and os.sep not in keys:
    return path, keys
  return spec, ""


def read_limit(size: int, trusted: bool) -> int | None:
  """The most bytes a source of `size` bytes on disk may expand to when
  bound: the reader's budget for untrusted data, or None if trusted."""
  return None if trusted else limits.MEMORY_FACTOR * size + (
      limits.FIXED_OVERHEAD)


def load_source(spec: str, *, base: str | os.PathLike | None = None,
                trusted: bool = False, shardings: Any = None,
                mesh: Any = None) -> Any:
  """What SOURCE `spec` names, read from its metadata only: a `FlatSource`
  (an `.npz`) or a `SourceTree` (an Orbax checkpoint) whose leaves are
  `Deferred` arrays, which `Program.bind` reads once they have matched the
  program, up to the source's limit (`read_limit`; none if `trusted`). A
  relative path is taken relative to `base` when given (an Orbax step
  directory), and must resolve inside it.

  What the source names is read only from under the path given
  (jaxpr_io/api/source_paths.py): a checkpoint whose keys or links reach
  outside it, or that holds special files, raises `UnsafeSourceError` (a
  `SourceError` and a `FormatError`), trusted or not.

  An Orbax checkpoint's arrays are restored as `jax.Array`s with
  `shardings`: one `jax.sharding.Sharding` or `PartitionSpec` for all, or
  a tree of them (and None) shaped as the subtree selected, each process
  reading only the shards its devices hold (Orbax's sharded restore). A
  `PartitionSpec` is on `mesh`. An array given none takes the sharding the
  program declares for its input (jaxpr_io/api/shardings.py; its specs on
  `mesh` if given); one without either is read whole, as numpy. An `.npz`
  is always read whole, as numpy: `shardings` or `mesh` for one is a
  `SourceError`."""
  path, keys = split_spec(spec)
  within = None
  if base is not None and not os.path.isabs(path):
    path = os.path.join(os.fspath(base), path)
    within = os.fspath(base)
  if not os.path.exists(path):
    raise FileNotFoundError(f"no such file or directory: {path}")
  if within is not None:
    source_paths.check_inside_dir(path, within)
  if os.path.isdir(path):
    return _orbax_source(path, keys, spec, trusted, shardings, mesh)
  if shardings is not None or mesh is not None:
    raise SourceError(f"{spec}: an .npz is read whole on every process, "
                      "so shardings= and mesh= apply to Orbax checkpoints "
                      "only; bind the .npz and jax.device_put the arrays, "
                      "or save them with Orbax")
  if keys:
    raise SourceError(f"{spec}: :KEY.PATH selects a subtree of an Orbax "
                      "checkpoint directory, not of a file")
  if not npz_source.is_npz(path):
    with open(path, "rb") as f:
      npy = f.read(6) == b"\x93NUMPY"
    if npy:
      raise SourceError(
          f"{path} is one .npy array; --bind needs an .npz (np.savez) whose "
          "arrays are keyed by key paths such as ['params']['w'], or an "
          "Orbax checkpoint directory")
    raise SourceError(f"{path} is neither an .npz file nor an Orbax "
                      "checkpoint directory")
  try:
    return npz_source.open_npz(path, read_limit(os.path.getsize(path),
                                                trusted))
  except npz_source.NpzSourceError as e:
    raise SourceError(str(e)) from None


# ------------------------------------------------------------ Orbax
class _OrbaxSource:
  """An Orbax checkpoint item: its tree from the metadata; `read` restores
  only the leaves asked for (the others are Orbax placeholders), each with
  its `sharding` (`sharded`: a leaf may have one), or as numpy."""

  sharded = True

  def __init__(self, path: str, metadata: Any, limit: int | None,
               mesh: Any = None):
    self.path, self.name, self.limit = path, path, limit
    self.metadata, self.mesh = metadata, mesh

  def read(self, leaves: list["_OrbaxLeaf"]) -> list[Any]:
    ocp = _orbax()
    wanted = {leaf.keys: leaf for leaf in leaves}
    item = _placeholders(self.metadata, (), wanted, ocp)
    restore_args = _placeholders(self.metadata, (), wanted, ocp,
                                 restore=True)
    try:
      with ocp.PyTreeCheckpointer() as checkpointer, (
          warnings.catch_warnings()):
        # Orbax warns at every restore without shardings that it reads
        # them from the checkpoint: the arrays become numpy constants,
        # wherever they were saved.
        warnings.filterwarnings("ignore", "Sharding info not provided",
                                UserWarning)
        restored = checkpointer.restore(
            os.path.abspath(self.path), args=ocp.args.PyTreeRestore(
                item=item, restore_args=restore_args))
    except (ValueError, KeyError, FileNotFoundError, TypeError) as e:
      raise SourceError(f"{self.path}: Orbax cannot restore it "
                        f"({_first_line(e)})") from None
    arrays = []
    for leaf in leaves:
      node = restored
      for key in leaf.keys:
        node = node[key]
      # A sharded leaf stays a jax.Array: its other shards are elsewhere.
      array = node if leaf.sharding is not None else np.asarray(node)
      if (tuple(array.shape) != leaf.shape or array.dtype != leaf.dtype
          or (leaf.sharding is not None
              and not sharding_lib.is_device_array(array))):
        raise SourceError(
            f"{self.path}: {'.'.join(map(str, leaf.keys))} restored as "
            f"{type(array).__name__} {array.dtype}{list(array.shape)}, not "
            f"the {leaf.dtype}{list(leaf.shape)} its metadata declares")
      arrays.append(array)
    return arrays


class _OrbaxLeaf(Deferred):
  """An array of an Orbax checkpoint, by its key path from the item's
  root, and the chunk shape its storage metadata declares (its `.zarray`,
  zarr3 chunk grid or OCDBT entry, as Orbax reads it), or None."""

  def __init__(self, source: _OrbaxSource, keys: tuple, shape, dtype,
               chunks: tuple[int, ...] | None = None):
    super().__init__(shape, dtype, source)
    self.keys, self.chunks = keys, chunks

  @property
  def read_bytes(self) -> int:
    """The array and the chunks covering it: TensorStore allocates each
    chunk it decodes whole, so a `.zarray` declaring chunks of 2**30 x
    2**30 for a 4 x 3 array would take 2**60 elements (`std::bad_alloc`,
    which aborts the process) unless refused here first. `SourceError`
    for chunks that are not one positive size per dimension."""
    if self.chunks is None:
      return self.nbytes
    try:
      chunks = tuple(operator.index(c) for c in self.chunks)
    except TypeError:
      chunks = ()
    if len(chunks) != len(self.shape) or any(c <= 0 for c in chunks):
      raise SourceError(
          f"{self.source.path}: {'.'.join(map(str, self.keys))} declares "
          f"chunks {str(self.chunks)[:100]} for an array of shape "
          f"{list(self.shape)}; a chunk has one positive size per "
          "dimension: the checkpoint is damaged")
    grid = math.prod(-(-n // c) * c for n, c in zip(self.shape, chunks))
    return self.nbytes + grid * self.dtype.itemsize


class _OrbaxValue:
  """A leaf of the metadata that is not an array (a string, ...): shown in
  messages, never bound."""

  def __init__(self, metadata):
    self.metadata = metadata

  def __repr__(self):
    return type(self.metadata).__name__


def _orbax():
  try:
    import orbax.checkpoint as ocp  # pylint: disable=g-import-not-at-top
  except ImportError:
    raise ImportError("reading an Orbax checkpoint needs orbax-checkpoint: "
                      "pip install 'jaxpr_io[orbax]'") from None
  return ocp


def _first_line(e: BaseException) -> str:
  first = str(e).splitlines()[0] if str(e) else ""
  return f"{type(e).__name__}: {first:.300}"


def _orbax_source(path: str, keys: str, spec: str, trusted: bool,
                  shardings: Any, mesh: Any) -> Any:
  """The tree of an Orbax item from its metadata alone, its arrays
  `Deferred`, with the `shardings` given (`load_source`)."""
  ocp = _orbax()
  # lazy: etils comes with orbax-checkpoint.
  from etils import epath  # pylint: disable=g-import-not-at-top
  # Before Orbax opens anything the checkpoint names.
  size = source_paths.check_orbax_item(path)
  handler = ocp.PyTreeCheckpointHandler()
  try:
    metadata = handler.metadata(epath.Path(os.path.abspath(path)))
  except (ValueError, KeyError, FileNotFoundError, TypeError, OSError) as e:
    raise SourceError(
        f"{path}: Orbax cannot read its metadata ({_first_line(e)}); give a "
        "checkpoint item directory such as ckpt/7/state, not the step or "
        "the checkpoint root") from None
  finally:
    handler.close()
  metadata = getattr(metadata, "tree", metadata)
  source = _OrbaxSource(path, metadata, read_limit(size, trusted), mesh)
  tree = _deferred_tree(metadata, (), source)
  selected = subtree(tree, keys, spec)
  if shardings is not None:
    _give_shardings(selected, shardings, mesh, spec)
  return SourceTree(selected, spec) if isinstance(selected, dict) else (
      selected)


def _deferred_tree(node: Any, keys: tuple, source: _OrbaxSource) -> Any:
  """The metadata tree with each array's metadata made a `Deferred`."""
  if isinstance(node, dict):
    return {k: _deferred_tree(v, keys + (k,), source)
            for k, v in node.items()}
  if isinstance(node, (list, tuple)):
    return [_deferred_tree(v, keys + (i,), source)
            for i, v in enumerate(node)]
  shape, dtype = getattr(node, "shape", None), getattr(node, "dtype", None)
  if shape is not None and dtype is not None:
    try:
      leaf = _OrbaxLeaf(source, keys, tuple(shape), np.dtype(dtype))
    except TypeError:
      return _OrbaxValue(node)
    # The chunk shape of its storage metadata (`.zarray`, zarr3 chunk
    # grid, OCDBT entry), where this Orbax release reports it.
    leaf.chunks = getattr(getattr(node, "storage", None), "chunk_shape",
                          None)
    return leaf
  return _OrbaxValue(node)


def _give_shardings(node: Any, given: Any, mesh: Any, where: str) -> None:
  """Sets the `sharding` of each `_OrbaxLeaf` under `node` from `given`:
  one sharding for the whole subtree, or a tree of them mirroring it
  (dicts by key, lists by index; a key it lacks is a `SourceError`)."""
  if given is None:
    return
  if isinstance(node, _OrbaxLeaf):
    if isinstance(given, (dict, list)):
      raise SourceError(f"{where}: shardings= has a "
                        f"{type(given).__name__} where the checkpoint has "
                        f"an array; give one sharding there")
    try:
      node.sharding = sharding_lib.given(given, mesh, where)
    except TypeError as e:
      raise SourceError(str(e)) from None
    return
  if isinstance(given, dict):
    for key, value in given.items():
      if not isinstance(node, dict) or key not in node:
        raise SourceError(f"{where}: shardings= has the key {key!r}, which "
                          "the checkpoint has no array or subtree at")
      _give_shardings(node[key], value, mesh, f"{where}.{key}")
  elif isinstance(given, list):
    if not isinstance(node, list) or len(given) != len(node):
      raise SourceError(f"{where}: shardings= has a list of {len(given)} "
                        "where the checkpoint has none of that length")
    for i, value in enumerate(given):
      _give_shardings(node[i], value, mesh, f"{where}.{i}")
  elif isinstance(node, dict):
    for key, value in node.items():
      _give_shardings(value, given, mesh, f"{where}.{key}")
  elif isinstance(node, list):
    for i, value in enumerate(node):
      _give_shardings(value, given, mesh, f"{where}.{i}")


def _placeholders(node: Any, keys: tuple, wanted: dict, ocp,
                  restore: bool = False) -> Any:
  """The item (or, with `restore`, the restore args) that restores only the
  `wanted` leaves: every other leaf an Orbax placeholder."""
  if isinstance(node, dict):
    return {k: _placeholders(v, keys + (k,), wanted, ocp, restore)
            for k, v in node.items()}
  if isinstance(node, (list, tuple)):
    return [_placeholders(v, keys + (i,), wanted, ocp, restore)
            for i, v in enumerate(node)]
  if keys not in wanted:
    return ocp.PLACEHOLDER
  sharding = wanted[keys].sharding
  if restore and sharding is not None:
    # Orbax's sharded restore: each process reads the chunks its
    # devices' shards cover.
    return ocp.ArrayRestoreArgs(sharding=sharding,
                                global_shape=wanted[keys].shape,
                                dtype=wanted[keys].dtype)
  if restore:
    return ocp.RestoreArgs(restore_type=np.ndarray)
  return node


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
