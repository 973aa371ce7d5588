"""Bind-source cases (issue 38): mutated Orbax checkpoint items and `.npz`
files that `jaxpr_io.api.bind_sources.load_source` + `Program.bind` read.

A case is small JSON, `BINDSRC:{"kind": ..., "ops": [...]}`, made in the
parent from a `random.Random` (`make_case`) and applied in the worker
(`materialize`) to a fresh copy of a benign source of its *world*: a
temporary directory, built once per worker process (`World`), with

  * `id_ed25519`: a secret file (48 bytes: a float32[4, 3] read raw);
  * `other/1/state` (and an OCDBT twin): the user's other, private
    checkpoint, of weights no benign source holds (`PRIVATE`);
  * benign items `orig0/1/state` (zarr, not OCDBT) and `orig1/1/state`
    (OCDBT), and `benign.npz`, holding the weights `W` of `predict.jaxpr`
    (`x @ params["w"]`, the weights a bindable input).

An op names the files it changes abstractly (`params.w/0.0`, `d/#0`: the
first entry of `d/` in sorted order), so a case is the same on every world;
tests/fuzz/bind_apply.py applies it, never through a link: the world's
secret and private checkpoint are never changed (`World.intact`).

Ops on an Orbax item:
  meta-key    a key of `_METADATA` renamed to an absolute path into the
              private checkpoint, a `..` chain, a URL (gs://, s3://,
              http://, file://, memory://), a NUL, a long, unicode or empty
              name, or a harmless other name
  meta-field  a field of the tree metadata set to another type or value
              (value_type, skip_deserialize, key_type, kvstore/driver
              specs as strings or dicts, use_zarr3/use_ocdbt flags, ...)
  meta-raw    `_METADATA` truncated, not JSON, deeply nested, a list
  zarray      a field of `.zarray` edited (dtype, shape, chunks,
              compressor, filters, order, fill_value, separator, format)
  link        an entry (chunk, array dir, `.zarray`, `_METADATA`, OCDBT
              manifest, data file or directory) made a symbolic link: to
              the secret, into the private checkpoint, dangling, to
              itself, a loop, /dev/zero, out to the step directory; or,
              benign, the entry moved inside the item and linked there
              (relatively or absolutely), which must still bind
  fifo, dir-for-file, file-for-dir
              an entry replaced by a FIFO, a directory, a file
  bytes       a file truncated, emptied, extended, a bit flipped
  extra       a new entry: a link to the secret or the private item, a
              `_sharding` file
Ops on an `.npz`: members renamed as paths (absolute, `..`, backslashes,
NUL, long), duplicated, headers that declare other shapes or dtypes, data
shorter or longer than declared, the archive truncated.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import tempfile
import zlib

import numpy as np

from tests.support import zip_bytes as zip_archive

PREFIX = b"BINDSRC:"
# 48 bytes, a float32[4, 3] chunk stored raw.
SECRET = b"-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1r"
PRIVATE = np.arange(12, dtype=np.float32).reshape(4, 3) + 7777.125
W = np.arange(12, dtype=np.float32).reshape(4, 3) / 7
KINDS = {"zarr": 0.4, "ocdbt": 0.35, "npz": 0.25}
NPZ_KEY = "args[0]['w']"

# ------------------------------------------------------------ the world


def _save(where: str, tree, ocdbt: bool) -> str:
  import orbax.checkpoint as ocp  # pylint: disable=import-outside-toplevel
  with ocp.CheckpointManager(where, item_handlers={
      "state": ocp.PyTreeCheckpointHandler(use_ocdbt=ocdbt,
                                           use_zarr3=False)}) as mngr:
    mngr.save(1, args=ocp.args.Composite(state=ocp.args.PyTreeSave(tree)))
    mngr.wait_until_finished()
  return os.path.join(where, "1", "state")


def _fingerprint(paths) -> str:
  h = zlib.crc32(b"")
  for top in paths:
    for parent, dirs, files in sorted(os.walk(top)):
      dirs.sort()
      for name in sorted(files):
        with open(os.path.join(parent, name), "rb") as f:
          h = zlib.crc32(name.encode() + f.read(), h)
  return f"{h:08x}"


class World:
  """The secret, the private checkpoints and the benign sources (module
  doc), in a new temporary directory under `parent`."""

  def __init__(self, parent: str | None = None):
    import jaxpr_io  # pylint: disable=import-outside-toplevel
    self.root = tempfile.mkdtemp(prefix="jaxpr_io-bindfuzz-", dir=parent)
    self.secret = os.path.join(self.root, "id_ed25519")
    with open(self.secret, "wb") as f:
      f.write(SECRET)
    self.private = {o: _save(os.path.join(self.root, f"other{int(o)}"),
                             {"params": {"w": PRIVATE}}, o)
                    for o in (False, True)}
    self.benign = {o: _save(os.path.join(self.root, f"orig{int(o)}"),
                            {"params": {"w": W}}, o) for o in (False, True)}
    self.npz = os.path.join(self.root, "benign.npz")
    with open(self.npz, "wb") as f:
      f.write(zip_bytes([npz_member(NPZ_KEY, W)]))
    self.program = jaxpr_io.dumps(jaxpr_io.trace(
        lambda params, x: x @ params["w"], {"w": W},
        np.ones((2, 4), np.float32)))
    self.cases = os.path.join(self.root, "cases")
    os.makedirs(self.cases)
    self._print = self.fingerprint()
    self.count = 0

  def fingerprint(self) -> str:
    """A checksum of the secret and the private checkpoints' files."""
    with open(self.secret, "rb") as f:
      secret = f.read()
    return _fingerprint([os.path.dirname(os.path.dirname(p))
                         for p in self.private.values()]) + secret.hex()

  def intact(self) -> bool:
    return self.fingerprint() == self._print

  def new_dir(self) -> str:
    self.count += 1
    return os.path.join(self.cases, f"c{self.count}")

  def close(self) -> None:
    shutil.rmtree(self.root, ignore_errors=True)


# ------------------------------------------------------------ npz bytes
def npy_bytes(shape, dtype="<f4", data: bytes | None = None,
              fortran=False) -> bytes:
  header = repr({"descr": dtype, "fortran_order": fortran,
                 "shape": tuple(shape)}).encode()
  header += b" " * (63 - (len(header) + 10) % 64) + b"\n"
  out = b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header
  return out + (data if data is not None else b"")


def npz_member(name: str, array: np.ndarray) -> tuple[str, bytes]:
  return name + ".npy", npy_bytes(array.shape, array.dtype.str,
                                  array.tobytes())


def zip_bytes(members, deflate: bool = False) -> bytes:
  """A zip archive of (name, data) members, names written as given (a NUL
  or backslash too: `zipfile` would change them)."""
  entries = []
  for name, data in members:
    body, method = data, 0
    if deflate:
      c = zlib.compressobj(6, zlib.DEFLATED, -15)
      body, method = c.compress(data) + c.flush(), 8
    # Flag 0x800: the name is UTF-8.
    entries.append((name.encode("utf-8", "surrogatepass"), 0x800, method,
                    zlib.crc32(data), body, len(data)))
  return zip_archive.archive(entries)


# ------------------------------------------------------------ case making
_KEY_TARGETS = [
    ("{PRIVATE}/params", False), ("{PRIVATE}", False), ("/etc/passwd", False),
    ("../../../../other0/1/state/params", False), ("..", False),
    ("../params", False), ("params/../../x", False),
    ("gs://bucket/ckpt/params", False), ("s3://bucket/params", False),
    ("http://127.0.0.1:9/params", False), ("file://{PRIVATE}/params", False),
    ("memory://params", False), ("par\x00ams", False), ("a" * 5000, False),
    ("pärams", True), ("", False), (".", False), ("~", True),
    ("params2", True), ("p/q", True), ("\\..\\x", False), ("C:/x", True),
]
_META_FIELDS = [
    (("*", "value_metadata", "value_type"), "jax.Array"),
    (("*", "value_metadata", "value_type"), "scalar"),
    (("*", "value_metadata", "value_type"), "string"),
    (("*", "value_metadata", "value_type"), "no.such.type"),
    (("*", "value_metadata", "value_type"), 5),
    (("*", "value_metadata", "value_type"), None),
    (("*", "value_metadata", "skip_deserialize"), True),
    (("*", "value_metadata", "skip_deserialize"), "no"),
    (("*", "value_metadata", "kvstore"),
     {"driver": "file", "path": "{PRIVATE}/params.w"}),
    (("*", "value_metadata", "kvstore"), "gs://bucket/params.w"),
    (("*", "value_metadata", "driver"), "zarr3"),
    (("*", "value_metadata", "path"), "{SECRET}"),
    (("*", "value_metadata", "write_shape"), [1 << 40, 3]),
    (("*", "value_metadata"), None),
    (("*", "value_metadata"), "np.ndarray"),
    (("*", "key_metadata", 0, "key_type"), 1),
    (("*", "key_metadata", 0, "key_type"), 99),
    (("*", "key_metadata", 0, "key_type"), "dict"),
    (("*", "key_metadata"), []),
    (("*", "key_metadata"), None),
    ((), None), ((), []), ((), "x"),
    (("@use_zarr3",), True), (("@use_zarr3",), "yes"),
    (("@use_ocdbt",), True), (("@use_ocdbt",), False), (("@use_ocdbt",), 2),
    (("@store_array_data_equal_to_fill_value",), False),
    (("@custom_metadata",), {"kvstore": {"driver": "file",
                                         "path": "{PRIVATE}"}}),
    (("@kvstore",), {"driver": "file", "path": "{PRIVATE}"}),
    (("@tree_metadata",), {"('params', 'w')": None}),
]
_ZARRAY = [
    ("dtype", "<f8"), ("dtype", "|O"), ("dtype", "<i4"), ("dtype", ">f4"),
    ("dtype", "|V4"), ("dtype", 7), ("shape", [4, 30000000]),
    ("shape", [1 << 40, 3]), ("shape", [4]), ("shape", "4,3"),
    ("chunks", [1 << 30, 1 << 30]), ("chunks", [1, 1]), ("chunks", [0, 3]),
    ("compressor", None), ("compressor", {"id": "zlib", "level": 1}),
    ("compressor", {"id": "blosc", "cname": "lz4"}),
    ("compressor", {"id": "no-such"}),
    ("filters", [{"id": "delta", "dtype": "<f4"}]),
    ("filters", [{"id": "no-such"}]), ("order", "F"), ("order", "Q"),
    ("fill_value", "NaN"), ("fill_value", 1e38), ("fill_value", "x"),
    ("dimension_separator", "/"), ("dimension_separator", "../"),
    ("zarr_format", 3), ("path", "{SECRET}"),
    ("kvstore", {"driver": "file", "path": "{PRIVATE}/params.w"}),
]
_PLACES = {
    "zarr": ["_METADATA", "params.w", "params.w/.zarray", "params.w/0.0"],
    "ocdbt": ["_METADATA", "manifest.ocdbt", "d", "d/#0",
              "ocdbt.process_0", "ocdbt.process_0/manifest.ocdbt",
              "ocdbt.process_0/d", "ocdbt.process_0/d/#0",
              "ocdbt.process_0/d/#1"],
}
# Benign link targets: the entry moved inside the item and linked there.
BENIGN_LINKS = ("inside-rel", "inside-abs")
_LINK_TARGETS = ("secret", "private-same", "private-root", "private-params",
                 "dangling", "self", "loop", "/dev/zero", "step-dir",
                 "item-root", *BENIGN_LINKS, *BENIGN_LINKS)


def _orbax_op(rng: random.Random, kind: str) -> dict:
  ops = ["meta-key", "meta-field", "meta-raw", "link", "link", "link",
         "fifo", "dir-for-file", "file-for-dir", "bytes", "extra"]
  if kind == "zarr":
    ops += ["zarray", "zarray"]
  op = rng.choice(ops)
  place = rng.choice(_PLACES[kind])
  if op == "meta-key":
    to, _ = rng.choice(_KEY_TARGETS)
    which = rng.choice(["params", "w"])
    retree = rng.random() < 0.7
    return {"op": op, "which": which, "to": to, "retree": retree,
            "desc": f"meta-key: {which!r} -> {to[:60]!r}"
                    + (" (tree key too)" if retree else "")}
  if op == "meta-field":
    path, value = rng.choice(_META_FIELDS)
    return {"op": op, "path": list(path), "value": value,
            "desc": f"meta-field: {'/'.join(map(str, path)) or 'tree'} = "
                    f"{json.dumps(value)[:60]}"}
  if op == "meta-raw":
    how = rng.choice(["truncate", "not-json", "deep", "list", "empty",
                      "huge-key"])
    return {"op": op, "how": how, "desc": f"meta-raw: {how}"}
  if op == "zarray":
    field, value = rng.choice(_ZARRAY)
    return {"op": op, "field": field, "value": value,
            "desc": f"zarray: {field} = {json.dumps(value)[:60]}"}
  if op == "link":
    to = rng.choice(_LINK_TARGETS)
    return {"op": op, "at": place, "to": to,
            "desc": f"link: {place} -> {to}"}
  if op in ("fifo", "dir-for-file", "file-for-dir"):
    return {"op": op, "at": place, "desc": f"{op}: {place}"}
  if op == "bytes":
    how = rng.choice(["truncate", "empty", "append", "flip"])
    return {"op": op, "at": place, "how": how, "pos": rng.random(),
            "bit": rng.randrange(8), "desc": f"bytes: {place} {how}"}
  name = rng.choice(["_sharding", "extra", "d/extra", "params.w/1.0",
                     "blobs/x"])
  what = rng.choice(["link-secret", "link-private", "json", "fifo"])
  return {"op": "extra", "name": name, "what": what,
          "desc": f"extra: {name} ({what})"}


_NPZ_NAMES = ["../args[0]['w']", "/etc/args[0]['w']", "sub\\..\\args[0]['w']",
              "args[0]['w']\x00x", "a/../../args[0]['w']", "['w']", "w",
              "args[0]['" + "w" * 3000 + "']", "args[0]['wä']",
              "args[0]['mlp/~/../0']", "args[0]['w']/", ""]


def _npz_op(rng: random.Random) -> dict:
  op = rng.choice(["rename", "rename", "dup", "header", "data", "truncate",
                   "deflate"])
  if op == "rename":
    name = rng.choice(_NPZ_NAMES)
    return {"op": op, "name": name, "desc": f"npz rename: {name[:60]!r}"}
  if op == "dup":
    name = rng.choice(_NPZ_NAMES + [NPZ_KEY])
    return {"op": op, "name": name, "desc": f"npz dup: {name[:60]!r}"}
  if op == "header":
    shape, dtype = rng.choice([([4, 3], "<f8"), ([1 << 40, 3], "<f4"),
                               ([4, 3], "|O"), ([4, 3], ">f4"), ([12], "<f4"),
                               ([4, 3], "<U1"), ([3, 4], "<f4")])
    return {"op": op, "shape": shape, "dtype": dtype,
            "fortran": rng.random() < 0.2,
            "desc": f"npz header: {dtype}{shape}"}
  if op == "data":
    delta = rng.choice([-48, -1, 1, 4096])
    return {"op": op, "delta": delta, "desc": f"npz data: {delta:+d} bytes"}
  if op == "truncate":
    pos = rng.random()
    return {"op": op, "pos": pos, "desc": f"npz truncate at {pos:.2f}"}
  return {"op": op, "desc": "npz deflate"}


def make_case(rng: random.Random) -> tuple[bytes, list, list]:
  """(case bytes, edit descriptions, groups) of one bind-source case."""
  kind = rng.choices(list(KINDS), weights=list(KINDS.values()))[0]
  ops = [(_npz_op(rng) if kind == "npz" else _orbax_op(rng, kind))
         for _ in range(rng.randint(1, 3))]
  case = {"kind": kind, "ops": ops}
  data = PREFIX + json.dumps(case, sort_keys=True).encode()
  return (data, [f"bind-source {kind}: {o['desc']}" for o in ops],
          [f"bind-source:{kind}:{o['op']}" for o in ops])


def parse(data: bytes) -> dict:
  return json.loads(data[len(PREFIX):])


def benign(case: dict) -> bool:
  """Whether the case's one op moves an entry inside the item and links
  it there: the source must still bind, to the original's weights. (Two
  such moves may break each other's relative links.)"""
  ops = case["ops"]
  return len(ops) == 1 and ops[0]["op"] == "link" and (
      ops[0]["to"] in BENIGN_LINKS)
