"""Applying a bind-source case's ops (tests/fuzz/bind_source.py) to a fresh
copy of a benign source of the worker's world: `materialize`.

An op's place is resolved in the copy (`#k`: the k-th entry of a directory,
sorted); an op whose place is missing, or whose directory resolves outside
the copy (a link an earlier op made), is skipped, and nothing is written
through a link: the world's secret and private checkpoint never change.
"""

from __future__ import annotations

import json
import os
import shutil

from tests.fuzz.bind_source import (BENIGN_LINKS, NPZ_KEY, W, World,
                                    npy_bytes, npz_member, zip_bytes)


# ------------------------------------------------------------ applying
def _inside(path: str, item: str) -> bool:
  real, root = os.path.realpath(path), os.path.realpath(item)
  return real == root or real.startswith(root + os.sep)


def _subst(value, ctx):
  """`value` with {PRIVATE}, {SECRET} and {ITEM} replaced by the world's
  paths."""
  if isinstance(value, str):
    world = ctx["world"]
    return (value.replace("{PRIVATE}", world.private[False])
            .replace("{SECRET}", world.secret).replace("{ITEM}", ctx["item"]))
  if isinstance(value, list):
    return [_subst(v, ctx) for v in value]
  if isinstance(value, dict):
    return {k: _subst(v, ctx) for k, v in value.items()}
  return value


def _place(ctx, sel: str) -> str | None:
  """The entry `sel` names in the case's copy (`#k`: the k-th entry of a
  directory, sorted), if it exists and its directory is inside the copy."""
  item = ctx["item"]
  cur = item
  for part in sel.split("/"):
    if not (os.path.isdir(cur) and _inside(cur, item)):
      return None
    if part.startswith("#"):
      entries = sorted(os.listdir(cur))
      if not entries:
        return None
      part = entries[int(part[1:]) % len(entries)]
    cur = os.path.join(cur, part)
  if os.path.lexists(cur) and _inside(os.path.dirname(cur), item):
    return cur
  return None


def _regular(ctx, path) -> bool:
  """A regular file of the copy itself (never written through a link)."""
  return (path is not None and not os.path.islink(path)
          and os.path.isfile(path) and _inside(path, ctx["item"]))


def _remove(path: str) -> None:
  if os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path)
  else:
    os.unlink(path)


def _read(path: str) -> bytes:
  with open(path, "rb") as f:
    return f.read()


def _write(path: str, data: bytes) -> None:
  with open(path, "wb") as f:
    f.write(data)


def _json_op(ctx, rel: str, edit) -> bool:
  """Applies `edit(obj) -> obj or None` to the JSON file `rel`."""
  path = _place(ctx, rel)
  if not _regular(ctx, path):
    return False
  try:
    obj = json.loads(_read(path))
  except (ValueError, RecursionError):
    return False
  obj = edit(obj)
  if obj is None:
    return False
  _write(path, json.dumps(obj).encode())
  return True


def _meta_key(op, ctx) -> bool:
  new = _subst(op["to"], ctx)

  def edit(meta):
    tree = meta.get("tree_metadata") if isinstance(meta, dict) else None
    if not isinstance(tree, dict):
      return None
    out = {}
    for name, entry in tree.items():
      keys = entry.get("key_metadata") if isinstance(entry, dict) else None
      if not isinstance(keys, list):
        out[name] = entry
        continue
      for k in keys:
        if isinstance(k, dict) and k.get("key") == op["which"]:
          k["key"] = new
      names = tuple(k.get("key") if isinstance(k, dict) else k for k in keys)
      out[str(names) if op["retree"] else name] = entry
    meta["tree_metadata"] = out
    return meta
  return _json_op(ctx, "_METADATA", edit)


def _set(node, path, value) -> None:
  for k in path[:-1]:
    try:
      node = node[k]
    except (KeyError, IndexError, TypeError):
      return
  try:
    node[path[-1]] = value
  except (IndexError, TypeError):
    pass


def _meta_field(op, ctx) -> bool:
  value, path = _subst(op["value"], ctx), op["path"]

  def edit(meta):
    if not isinstance(meta, dict):
      return None
    if not path:
      meta["tree_metadata"] = value
    elif path[0].startswith("@"):
      meta[path[0][1:]] = value
    elif isinstance(meta.get("tree_metadata"), dict):
      for entry in meta["tree_metadata"].values():
        _set(entry, path[1:], value)
    return meta
  return _json_op(ctx, "_METADATA", edit)


def _meta_raw(op, ctx) -> bool:
  path = _place(ctx, "_METADATA")
  if not _regular(ctx, path):
    return False
  data = _read(path)
  how = op["how"]
  data = {"truncate": data[:len(data) // 2], "not-json": b"{not json",
          "deep": b"[" * 100000 + b"]" * 100000, "list": b"[]", "empty": b"",
          "huge-key": json.dumps({"tree_metadata": {"k": {"key_metadata": [
              {"key": "k" * (1 << 20), "key_type": 2}]}}}).encode()}[how]
  _write(path, data)
  return True


def _zarray(op, ctx) -> bool:
  value = _subst(op["value"], ctx)

  def edit(z):
    if not isinstance(z, dict):
      return None
    z[op["field"]] = value
    return z
  return _json_op(ctx, "params.w/.zarray", edit)


def _link(op, ctx) -> bool:
  at = _place(ctx, op["at"])
  if at is None:
    return False
  item, world, to = ctx["item"], ctx["world"], op["to"]
  if to in BENIGN_LINKS:
    ctx["moved"] = ctx.get("moved", 0) + 1
    # At the item's top level: a relative link made earlier inside a moved
    # directory keeps its depth.
    dest = os.path.join(os.path.realpath(item), f"moved{ctx['moved']}")
    os.rename(at, dest)
    target = (os.path.relpath(dest, os.path.realpath(os.path.dirname(at)))
              if to == "inside-rel" else dest)
  else:
    rel = os.path.relpath(at, item)
    target = {
        "secret": world.secret,
        "private-same": os.path.join(world.private[ctx["ocdbt"]], rel),
        "private-root": world.private[False],
        "private-params": os.path.join(world.private[False], "params.w"),
        "dangling": os.path.join(item, "missing"), "self": at,
        "loop": at + ".loop", "/dev/zero": "/dev/zero",
        "step-dir": os.path.dirname(item), "item-root": item}[to]
    _remove(at)
    if to == "loop":
      os.symlink(at, at + ".loop")
  os.symlink(target, at)
  return True


def _special(op, ctx) -> bool:
  at = _place(ctx, op["at"])
  if at is None:
    return False
  is_dir = os.path.isdir(at) and not os.path.islink(at)
  if op["op"] == "fifo":
    _remove(at)
    os.mkfifo(at)
  elif op["op"] == "dir-for-file":
    if is_dir:
      return False
    _remove(at)
    os.makedirs(os.path.join(at, "inner"))
  else:
    if not is_dir:
      return False
    _remove(at)
    _write(at, b"x")
  return True


def _bytes(op, ctx) -> bool:
  path = _place(ctx, op["at"])
  if not _regular(ctx, path):
    return False
  data = bytearray(_read(path))
  k = int(op["pos"] * len(data))
  if op["how"] == "truncate":
    data = data[:k]
  elif op["how"] == "empty":
    data = bytearray()
  elif op["how"] == "append":
    data += bytes(range(256)) * (1 + k)
  elif data:
    data[min(k, len(data) - 1)] ^= 1 << op["bit"]
  _write(path, bytes(data))
  return True


def _extra(op, ctx) -> bool:
  item, world = ctx["item"], ctx["world"]
  full = os.path.join(item, op["name"])
  parent = os.path.dirname(full)
  if os.path.lexists(full) or (os.path.lexists(parent)
                               and not _inside(parent, item)):
    return False
  os.makedirs(parent, exist_ok=True)
  if not _inside(parent, item):
    return False
  what = op["what"]
  if what == "link-secret":
    os.symlink(world.secret, full)
  elif what == "link-private":
    os.symlink(world.private[False], full)
  elif what == "fifo":
    os.mkfifo(full)
  else:
    _write(full, json.dumps({"params.w": {
        "sharding_type": "NamedSharding", "shape": [1],
        "axis_names": ["x"], "partition_spec": [], "device_mesh": {
            "mesh": [{"id": 0}]}}}).encode())
  return True


_APPLY = {"meta-key": _meta_key, "meta-field": _meta_field,
          "meta-raw": _meta_raw, "zarray": _zarray, "link": _link,
          "fifo": _special, "dir-for-file": _special,
          "file-for-dir": _special, "bytes": _bytes, "extra": _extra}


def _npz(ops) -> bytes:
  name, shape, dtype, fortran = NPZ_KEY, [4, 3], "<f4", False
  data, dups, deflate, cut = W.tobytes(), [], False, None
  for op in ops:
    if op["op"] == "rename":
      name = op["name"]
    elif op["op"] == "dup":
      dups.append(op["name"])
    elif op["op"] == "header":
      shape, dtype, fortran = op["shape"], op["dtype"], op["fortran"]
    elif op["op"] == "data":
      d = op["delta"]
      data = data[:len(data) + d] if d < 0 else data + b"\x00" * d
    elif op["op"] == "truncate":
      cut = op["pos"]
    else:
      deflate = True
  members = [(name + ".npy", npy_bytes(shape, dtype, data, fortran))]
  members += [npz_member(n, W) for n in dups]
  out = zip_bytes(members, deflate)
  return out if cut is None else out[:int(len(out) * cut)]


def materialize(world: World, case: dict) -> tuple[str, str, list]:
  """Builds the case's source in a new directory of `world`: (the
  directory, the SPEC to bind, the descriptions of the ops skipped)."""
  d = world.new_dir()
  os.makedirs(d)
  if case["kind"] == "npz":
    path = os.path.join(d, "w.npz")
    _write(path, _npz(case["ops"]))
    return d, path, []
  ocdbt = case["kind"] == "ocdbt"
  item = os.path.join(d, "1", "state")
  shutil.copytree(world.benign[ocdbt], item, symlinks=True)
  ctx = {"item": item, "world": world, "ocdbt": ocdbt}
  skipped = []
  for op in case["ops"]:
    try:
      done = _APPLY[op["op"]](op, ctx)
    except OSError:
      # Through a link an earlier op made (a loop, a FIFO's place).
      done = False
    if not done:
      skipped.append(op["desc"])
  return d, f"{item}:params", skipped


def disk_size(path: str) -> int:
  """The bytes of the regular files under `path` (links followed, as a
  read would), for the bind budget; independent of source_paths."""
  if not os.path.isdir(path):
    return os.path.getsize(path)
  total = 0
  for parent, dirs, files in os.walk(path):
    for name in dirs + files:
      try:
        st = os.stat(os.path.join(parent, name))
      except OSError:
        continue
      if os.path.isfile(os.path.join(parent, name)):
        total += st.st_size
  return total
