"""A bind SOURCE reads only files under the directory the user named.

An Orbax checkpoint names the files that Orbax and TensorStore open: the
keys of its `_METADATA` become file names (`params.w`, joined to the item
directory when the checkpoint says it is not OCDBT), its OCDBT manifest
names data files, and any file in it may be a symbolic link. A checkpoint
from elsewhere is untrusted data, so before Orbax reads anything of one
(its metadata included), `check_orbax_item` walks the item directory and
refuses, with an `UnsafeSourceError` naming the path:

* a key of `_METADATA` that is absolute, has a `..` component, a NUL or
  a URL's `://` (Orbax would open `/other/ckpt/params.w`);
* a symbolic link, file or directory, that resolves outside the item
  directory (`os.path.realpath`), or to nothing;
* anything but regular files and directories (a FIFO blocks a reader, a
  device node reads without end).

Links that stay inside the directory are allowed, as Python's `tarfile`
`data` filter (PEP 706) allows links that stay inside the destination; the
walk returns the size of what can be read, each file counted at the size
of its target (`os.stat`, not `os.lstat`), which the source's read limit
is computed from. OCDBT data files are keys of TensorStore's `file` key-value
store rooted at the item directory, which joins them under its root and
refuses `..`; the walk covers what they may reach through links. Orbax
builds the key-value store spec itself (the `file` driver for a local
path), so nothing in the checkpoint selects another driver: the item must
be a local directory, which `check_orbax_item` requires.

`check_npz_members` applies the same rule to the member names of an
`.npz` (never paths on disk here, but refused as `tarfile` would), and
`check_inside` to a single file (the program of a
`jaxpr_io.orbax.ProgramRestore`). A checkpoint changed while it is read
is outside this model, as for every file a process reads.
"""

from __future__ import annotations

import json
import os
import stat

from jaxpr_io.api.binding import SourceError
from jaxpr_io.errors import FormatError

# `_METADATA` of a model of 100,000 parameters is about 30 MB.
MAX_METADATA_BYTES = 256 << 20


class UnsafeSourceError(SourceError, FormatError):
  """A bind SOURCE that names or links to a path outside the directory the
  user named, or holds a special file: refused before it is read (one
  line)."""


def _inside(real: str, root: str) -> bool:
  return real == root or os.path.commonpath([real, root]) == root


def check_inside(path: str, root: str, what: str) -> int:
  """The size of regular file `path` (followed through links), which must
  resolve inside directory `root`; `UnsafeSourceError` if not."""
  real_root = os.path.realpath(root)
  real = os.path.realpath(path)
  if not _inside(real, real_root):
    raise UnsafeSourceError(
        f"{path}: {what} resolves to {real}, outside {root}; a checkpoint "
        "may only link to files inside it: copy the file into it, or name "
        "it yourself")
  st = os.stat(real)
  if not stat.S_ISREG(st.st_mode):
    raise UnsafeSourceError(f"{path}: {what} is not a regular file")
  return st.st_size


def _entry_size(full: str, rel: str, root: str, real_root: str) -> int:
  """The bytes that reading directory entry `full` may return (0 for a
  directory); `UnsafeSourceError` for a link leaving `root` or a special
  file."""
  st = os.lstat(full)
  if stat.S_ISLNK(st.st_mode):
    real = os.path.realpath(full)
    if not _inside(real, real_root):
      raise UnsafeSourceError(
          f"{root}: {rel} is a symbolic link to {real}, outside the "
          "checkpoint directory; a bind source reads only files under the "
          "directory you name: copy the file into the checkpoint, or bind "
          "the checkpoint it belongs to")
    try:
      st = os.stat(full)
    except OSError:
      raise UnsafeSourceError(
          f"{root}: {rel} is a symbolic link to {real}, which does not "
          "exist; remove it or restore what it points to") from None
  if stat.S_ISDIR(st.st_mode):
    return 0
  if not stat.S_ISREG(st.st_mode):
    raise UnsafeSourceError(
        f"{root}: {rel} is not a regular file or directory (a FIFO, socket "
        "or device, which a reader could wait on or read without end); "
        "remove it from the checkpoint")
  return st.st_size


def check_tree(root: str) -> int:
  """Walks directory `root` without following links; every entry must be a
  regular file, a directory, or a link that resolves to one inside `root`.
  Returns the bytes of the regular files, links counted at their targets'
  size."""
  real_root = os.path.realpath(root)
  total = 0
  for parent, dirs, files in os.walk(root, followlinks=False):
    for name in dirs + files:
      full = os.path.join(parent, name)
      total += _entry_size(full, os.path.relpath(full, root), root,
                           real_root)
  return total


def check_key(key: str, root: str, where: str) -> None:
  """`UnsafeSourceError` unless `key`, which a reader joins to `root`, is
  relative, free of `..` components and NULs, and stays inside `root`."""
  bad = ("\x00" in key or os.path.isabs(key) or key.startswith(("/", "\\"))
         or ".." in key.replace("\\", "/").split("/")
         # A URL (gs://, s3://, file://) names another key-value store.
         or "://" in key)
  if not bad:
    real_root = os.path.realpath(root)
    bad = not _inside(os.path.realpath(os.path.join(real_root, key)),
                      real_root)
  if bad:
    raise UnsafeSourceError(
        f"{root}: {where} {key[:200]!r} names a path outside the checkpoint "
        "(absolute, with '..', or a URL); Orbax would open it: a bind "
        "source reads only files under the directory you name")


def orbax_keys(root: str) -> list[str]:
  """The parameter names Orbax derives from the item's `_METADATA` (its
  tree's keys joined with '.'), and every key in it, without Orbax."""
  path = os.path.join(root, "_METADATA")
  if not os.path.lexists(path):
    # A step directory or a checkpoint root; an item without tree metadata
    # would make Orbax open paths no metadata here names, so it is refused.
    raise SourceError(
        f"{root} has no Orbax tree metadata (_METADATA); give a checkpoint "
        "item directory such as ckpt/7/state, not the step or the "
        "checkpoint root")
  check_inside(path, root, "_METADATA")
  size = os.path.getsize(path)
  if size > MAX_METADATA_BYTES:
    raise UnsafeSourceError(f"{path} is {size:,} bytes, over the "
                            f"{MAX_METADATA_BYTES:,} a checkpoint's metadata "
                            "may have")
  try:
    with open(path, "rb") as f:
      metadata = json.loads(f.read())
    entries = metadata.get("tree_metadata", {})
    keys = []
    for entry in entries.values():
      parts = [str(k.get("key")) for k in entry.get("key_metadata", ())]
      keys.append(".".join(parts))
      keys += parts
  except (ValueError, AttributeError, TypeError, RecursionError) as e:
    raise SourceError(f"{path} is not Orbax tree metadata "
                      f"({type(e).__name__}: {str(e)[:200]})") from None
  return keys


def check_orbax_item(path: str, within: str | None = None) -> int:
  """Checks an Orbax item directory before Orbax reads it (the module
  doc); `within`: a directory the item must resolve inside too (the step
  of `ProgramRestore(bind={...: "state:params"})`). Returns the bytes it
  may read."""
  if within is not None:
    check_inside_dir(path, within)
  root = os.path.realpath(path)
  if not os.path.isdir(root):
    raise SourceError(f"{path} is not a directory")
  size = check_tree(path)
  for key in orbax_keys(path):
    check_key(key, path, "a key of _METADATA")
  return size


def check_inside_dir(path: str, within: str) -> None:
  real, real_within = os.path.realpath(path), os.path.realpath(within)
  if not _inside(real, real_within):
    raise UnsafeSourceError(
        f"{path} resolves to {real}, outside the checkpoint step {within}; "
        "a bind SOURCE of the same step must be one of its items: name "
        "another checkpoint by its own path")


def check_npz_members(path: str, names) -> None:
  """`UnsafeSourceError` for an `.npz` member named as an absolute path,
  with a `..` component, a NUL or a backslash: np.savez writes key names,
  and an archive with such names is not one."""
  for name in names:
    unquoted = _unquoted(name)
    parts = unquoted.replace("\\", "/").split("/")
    if ("\x00" in name or "\\" in unquoted or name.startswith("/")
        or ".." in parts or os.path.isabs(name)):
      raise UnsafeSourceError(
          f"{path}: member {name[:200]!r} is named as a path (absolute, or "
          "with '..'), not a key path; write the .npz with np.savez(file, "
          "**{key_path: array}) (keys as jaxpr-load prints them)")


def _unquoted(name: str) -> str:
  """`name` without the text of its quoted keys (`['a/b']` -> `['']`): a
  dict key may hold any character."""
  out, quote = [], None
  for ch in name:
    if quote:
      if ch == quote:
        quote = None
        out.append(ch)
    elif ch in "'\"":
      quote = ch
      out.append(ch)
    else:
      out.append(ch)
  return "".join(out)
