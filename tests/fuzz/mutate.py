"""Field-level mutation of a real file's `Program` message.

A case is a seed file with 1-3 edits of its decoded `Program` message, then
re-framed with correct checksums: the header and program CRCs, and every
blob's CRC recomputed over the bytes its (possibly edited) offset and length
cover, when those are inside the data section. So no case is rejected just
for a stale checksum: each reaches the protobuf parser, the reader, JAX's
type checker and, when it passes `check=True`, `str`, `dumps` and a call.

An edit picks a *site*, a place in the message tree found by walking the
message's descriptors:

  scalar    a singular scalar field (set or not: proto3 has no presence)
  element   one element of a repeated scalar field
  column    one integer of a version 3 column (a `bytes` field of
            little-endian integers: `Equations.*`, `NameStackTable.*`)
  repeated  a repeated field as a whole (scalars or messages)
  message   a set singular sub-message field
  unset     an unset singular sub-message field (not in a oneof)
  oneof     a oneof group of a message (`Value.kind`, `Aval.kind`, ...)

Sites are grouped by (message type, field, site kind); an edit first picks a
group, then a site in it, so rare message types (`Blob`, `EqnContext`,
`PyTree.KeyEntry`, `symbolic_constraints`, ...) are hit about as often as
common ones (`Equation.invars`): every group present in the seed is equally
likely.

Edits, by kind:
  ints      boundary values of the field's type (0, 1, -1, 2**31-1, 2**63-1,
            ...), +-1, a flipped bit, a small number, and for table indices
            (strings, avals, arrays, jaxprs, ...) another index of that table
            or one past its end; variable references get other variables
            and literals
  enums     another known value, or an unknown one
  bools     flipped
  doubles   0, -0, NaN, inf, huge, tiny
  strings   another string of the same file's string table, or a crafted one
            ('{x.__class__}', '9^99999999', '0 - 5', 100,000 characters, '')
  bytes     truncated, extended, a flipped bit, random
  repeated  delete, duplicate, swap, truncate, clear, reverse, append (a copy
            of another message of the same type from elsewhere in the file)
  messages  clear, or replace by a copy of another message of the same type
  oneofs    switch to another member (a copy of a message of its type from
            elsewhere in the file, or a fresh one / a plausible scalar), or
            clear

`Blob.crc32` is never a site: it is recomputed afterwards anyway.
Everything is deterministic given the `random.Random` passed in;
`CaseFactory` makes case i of a campaign from `case_rng(seed, i)` alone,
choosing half the time the site group of the first edit before the seed
program, so that groups few seeds have are edited as often as the rest.
"""

from __future__ import annotations

import dataclasses
import random
import zlib

import numpy as np

from google.protobuf import descriptor as pb_descriptor

from jaxpr_io.format import _proto as pb
from jaxpr_io.format import container
from tests.fuzz import bind_source
from tests.fuzz import structural

_FD = pb_descriptor.FieldDescriptor


def _is_repeated(fd) -> bool:
  if hasattr(fd, "is_repeated"):   # protobuf >= 5.28
    return fd.is_repeated
  return fd.label == _FD.LABEL_REPEATED


# Which table an integer field indexes ("atom": a variable or literal
# reference; "string+1": string index + 1, 0 for None).
_TABLE_OF = {
    ("Equation", "primitive"): "strings",
    ("Param", "name"): "strings",
    ("Value", "str"): "strings",
    ("Value", "primitive"): "strings",
    ("Value", "dim_expr"): "strings",
    ("Dim", "expr"): "strings",
    ("TypeRef", "key_impl"): "strings",
    ("EnumValue", "type"): "strings",
    ("EnumValue", "member"): "strings",
    ("Record", "type"): "strings",
    ("TypeObject", "builtin"): "strings",
    ("Entry", "name"): "strings",
    ("DebugInfo", "traced_for"): "strings",
    ("DebugInfo", "func_src_info"): "strings",
    ("DebugInfo", "arg_names"): "strings",
    ("DebugInfo", "result_paths"): "strings",
    ("Effect", "name"): "strings",
    ("PyTree", "type_module"): "strings",
    ("PyTree", "type_qualname"): "strings",
    ("KeyEntry", "attribute"): "strings",
    ("EqnContext", "compute_type"): "string+1",
    ("EqnContext", "layout_mode"): "string+1",
    ("Array", "aval"): "avals",
    ("Jaxpr", "constvars"): "avals",
    ("Jaxpr", "invars"): "avals",
    ("Equation", "outvars"): "avals",
    ("Array", "blob"): "blobs",
    ("Value", "array"): "arrays",
    ("ClosedJaxpr", "consts"): "arrays",
    ("Value", "jaxpr"): "jaxprs",
    ("ClosedJaxpr", "jaxpr"): "jaxprs",
    ("Value", "closed_jaxpr"): "closed_jaxprs",
    ("Program", "root"): "closed_jaxprs",
    ("Equation", "param_set"): "param_sets",
    ("Equation", "ctx"): "eqn_contexts",
    ("Equation", "name_stack"): "name_stacks",
    ("Equation", "invars"): "atom",
    ("Jaxpr", "outvars"): "atom",
    ("EquationKind", "primitive"): "strings",
    ("EquationKind", "param_set"): "param_sets",
    ("EquationEffects", "equation"): "equations",
    ("PyTree", "shared"): "tree_nodes+1",
}

# Version 3 columns: `bytes` fields holding little-endian integers (their
# dtype and the table their entries index). Besides byte-level edits, the
# fuzzer edits their elements as integer fields (site kind "column").
_COLUMNS = {
    ("Equations", "kinds"): ("<u4", "equation_kinds"),
    ("Equations", "invars"): ("<i4", "atom"),
    ("Equations", "outvars"): ("<u4", "avals"),
    ("Equations", "name_stacks"): ("<u4", "name_stacks"),
    ("Equations", "contexts"): ("<u4", "eqn_contexts"),
    ("Equations", "dropped"): ("<u4", "outvars"),
    ("NameStackTable", "parents"): ("<u4", "name_stacks"),
    ("NameStackTable", "kinds"): ("<u4", "entry_kinds"),
    ("NameStackTable", "names"): ("<u4", "strings"),
}
# Column elements visited per column (a large column would crowd out the
# other sites of its group otherwise).
_COLUMN_SITES = 48

_BOUNDARY = {
    _FD.TYPE_UINT32: [0, 1, 2, 2**31 - 1, 2**31, 2**32 - 1],
    _FD.TYPE_FIXED32: [0, 1, 2**31 - 1, 2**32 - 1],
    _FD.TYPE_UINT64: [0, 1, 2, 2**31 - 1, 2**32, 2**62, 2**63 - 1, 2**63,
                      2**64 - 64, 2**64 - 1],
    _FD.TYPE_FIXED64: [0, 1, 2**63 - 1, 2**64 - 1],
    _FD.TYPE_INT64: [0, 1, -1, 2, 2**31 - 1, 2**31, 2**62, 2**63 - 1,
                     -(2**63), -2],
    _FD.TYPE_SINT64: [0, 1, -1, 2, 2**31 - 1, 2**31, 2**62, 2**63 - 1,
                      -(2**63), -2],
    _FD.TYPE_SFIXED64: [0, 1, -1, 2**63 - 1, -(2**63)],
    _FD.TYPE_INT32: [0, 1, -1, 2**31 - 1, -(2**31)],
    _FD.TYPE_SINT32: [0, 1, -1, 2**31 - 1, -(2**31)],
}
_RANGE = {
    _FD.TYPE_UINT32: (0, 2**32 - 1), _FD.TYPE_FIXED32: (0, 2**32 - 1),
    _FD.TYPE_UINT64: (0, 2**64 - 1), _FD.TYPE_FIXED64: (0, 2**64 - 1),
    _FD.TYPE_INT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SINT64: (-(2**63), 2**63 - 1),
    _FD.TYPE_SFIXED64: (-(2**63), 2**63 - 1),
    _FD.TYPE_INT32: (-(2**31), 2**31 - 1),
    _FD.TYPE_SINT32: (-(2**31), 2**31 - 1),
}

CRAFTED_STRINGS = (
    "", " ", "\x00", "b", "a", "x", "_", "b >= 2", "b >= 99999999999",
    "0 - 5", "9^99999999", "9**99999999", "{x.__class__}", "{0.__globals__}",
    "{}", "{0}", "{:>999999999}", "{x!r:^{y}}", "%s%s%n", "{{}}",
    "floordiv(b, 0)", "mod(b, 0)", "max(b, -1)", "b * b * b * b * b * b",
    "-1", "2*b", "b + 99999999999999999999", "b - 5", "non_negative(b)",
    "__import__('os').system('true')", "os.system", "jax.numpy",
    "builtins.eval", "no_such_primitive", "float32", "key<fry>", "rbg",
    "threefry2x32", "jax.sharding.NamedSharding", "\u00e9\u4e2d\U0001f600",
    "a" * 300, "(" * 2000 + "b" + ")" * 2000, "b" + " + b" * 3000,
    "x" * 100_000,
)


@dataclasses.dataclass
class Site:
  kind: str            # scalar, element, repeated, message, unset, oneof
  owner: object        # the message holding the field
  fd: object           # the field descriptor (for oneof: the oneof's)
  path: str
  index: int | None = None

  @property
  def group(self) -> str:
    owner = self.owner.DESCRIPTOR.name
    suffix = "[]" if self.kind == "element" else ""
    return f"{owner}.{self.fd.name}{suffix}:{self.kind}"


class _Index:
  """The sites of one message tree, and its sub-messages by type."""

  def __init__(self, root):
    self.sites: list[Site] = []
    self.by_type: dict[str, list] = {}
    # Values each integer field holds across the file, by (message, field):
    # an index used in the same role elsewhere (another primitive's name,
    # another param name, an aval of another equation) makes a plausible
    # edit that gets past the reader's range checks.
    self.roles: dict[tuple, set] = {}
    self._walk(root, "")

  def _walk(self, msg, path: str) -> None:
    self.by_type.setdefault(msg.DESCRIPTOR.full_name, []).append(msg)
    seen_oneofs = set()
    for fd in msg.DESCRIPTOR.fields:
      name = f"{path}.{fd.name}" if path else fd.name
      oneof = fd.containing_oneof
      if oneof is not None and oneof.name not in seen_oneofs:
        seen_oneofs.add(oneof.name)
        self.sites.append(Site("oneof", msg, oneof,
                               f"{path}.{oneof.name}" if path else oneof.name))
      if fd.message_type is not None:
        if _is_repeated(fd):
          seq = getattr(msg, fd.name)
          self.sites.append(Site("repeated", msg, fd, name))
          for i, sub in enumerate(seq):
            self._walk(sub, f"{name}[{i}]")
        elif msg.HasField(fd.name):
          self.sites.append(Site("message", msg, fd, name))
          self._walk(getattr(msg, fd.name), name)
        elif oneof is None:
          self.sites.append(Site("unset", msg, fd, name))
      elif _is_repeated(fd):
        seq = getattr(msg, fd.name)
        self.sites.append(Site("repeated", msg, fd, name))
        self.sites.extend(Site("element", msg, fd, f"{name}[{i}]", i)
                          for i in range(len(seq)))
        if fd.type in _RANGE:
          self.roles.setdefault((msg.DESCRIPTOR.name, fd.name),
                                set()).update(seq)
      elif oneof is None or msg.WhichOneof(oneof.name) == fd.name:
        column = _COLUMNS.get((msg.DESCRIPTOR.name, fd.name))
        if column is not None:
          values = np.frombuffer(getattr(msg, fd.name)[
              :len(getattr(msg, fd.name)) // 4 * 4], column[0])
          self.roles.setdefault((msg.DESCRIPTOR.name, fd.name), set()).update(
              values.tolist())
          step = max(1, len(values) // _COLUMN_SITES)
          self.sites.extend(Site("column", msg, fd, f"{name}[{i}]", i)
                            for i in range(0, len(values), step))
        if fd.type in _RANGE:
          self.roles.setdefault((msg.DESCRIPTOR.name, fd.name), set()).add(
              getattr(msg, fd.name))
        if (msg.DESCRIPTOR.name, fd.name) == ("Blob", "crc32"):
          continue   # recomputed after mutation anyway
        self.sites.append(Site("scalar", msg, fd, name))


class Mutator:
  """Edits one `Program` message in place; `log` records what it did."""

  def __init__(self, msg, rng: random.Random, data_length: int):
    self.msg = msg
    self.rng = rng
    self.data_length = data_length
    self.log: list[str] = []
    self.groups: list[str] = []

  # ------------------------------------------------------------ values
  def _table_size(self, table: str) -> int:
    m = self.msg
    if table in ("strings", "string+1"):
      return len(m.strings)
    if table == "tree_nodes+1":
      return len(m.tree_nodes) + 1
    if table == "name_stacks":
      return len(m.name_stack_table.parents) // 4 or len(m.name_stacks)
    if table == "entry_kinds":
      return 3
    if table in ("equations", "outvars"):
      return max((len(getattr(j.equations, "kinds" if table == "equations"
                              else "outvars")) // 4 for j in m.jaxprs),
                 default=0)
    return len(getattr(m, table))

  def _int_value(self, site: Site, fd, current: int) -> int:
    rng = self.rng
    owner = site.owner.DESCRIPTOR.name
    column = _COLUMNS.get((owner, fd.name)) if site.kind == "column" else None
    if column is not None:
      lo, hi = ((-(2**31), 2**31 - 1) if column[0] == "<i4"
                else (0, 2**32 - 1))
      table = column[1]
    else:
      lo, hi = _RANGE.get(fd.type, (0, 2**32 - 1))
      table = _TABLE_OF.get((owner, fd.name))
    choices = ["boundary", "near", "flip", "small"]
    if table:
      choices += ["table"] * 4
    if owner == "Blob":
      choices += ["blob"] * 4
    if owner == "Dim" and fd.name == "size":
      choices += ["dim"] * 3
    how = rng.choice(choices)
    if how == "boundary":
      v = rng.choice(_BOUNDARY.get(fd.type, [0, 1, 2**31 - 1]))
    elif how == "near":
      v = current + rng.choice([-1, 1])
    elif how == "flip":
      bits = 64 if hi > 2**32 else 32
      v = current ^ (1 << rng.randrange(bits))
      if lo < 0 and v > hi:
        v -= 1 << bits
    elif how == "small":
      v = rng.randrange(0, 10)
    elif how == "blob":
      if fd.name == "offset":
        v = rng.choice([0, 64, 128, self.data_length,
                        self.data_length - 64, current + 64, current - 64,
                        current + 1])
      else:
        v = rng.choice([0, 1, 4, 8, 63, 64, 65, current * 2, current // 2,
                        self.data_length, self.data_length + 1])
    elif how == "dim":
      v = rng.choice([0, 1, 2, 3, 5, 8, 64, 1000, 2**20, 2**31, 2**40,
                      2**62, -1])
    elif table == "atom":
      if rng.random() < 0.3 and len(self.msg.arrays):
        v = -rng.randrange(len(self.msg.arrays) + 1) - 1   # a literal
      else:
        v = rng.randrange(0, max(current, 0) + 4)
    else:
      role = sorted(self._index.roles.get((owner, fd.name), ()))
      if role and rng.random() < 0.6:
        v = rng.choice(role)   # an index used in this role elsewhere
      else:
        n = self._table_size(table)
        v = rng.randrange(0, n + 1)
        if table == "string+1":
          v = rng.randrange(0, n + 2)
    return min(max(v, lo), hi)

  def _enum_value(self, fd, current: int) -> int:
    known = [v.number for v in fd.enum_type.values]
    if self.rng.random() < 0.75:
      others = [k for k in known if k != current] or known
      return self.rng.choice(others)
    return self.rng.choice([max(known) + 1, 99, 2**31 - 1, -1])

  def _string_value(self, current: str) -> str:
    rng = self.rng
    if rng.random() < 0.5 and len(self.msg.strings):
      return rng.choice(self.msg.strings)
    if rng.random() < 0.15 and current:
      return rng.choice([current[:-1], current + current[-1:], current * 2,
                         current.upper(), " " + current])
    return rng.choice(CRAFTED_STRINGS)

  def _bytes_value(self, current: bytes) -> bytes:
    rng = self.rng
    how = rng.choice(["truncate", "extend", "flip", "random", "empty",
                      "double"])
    if how == "truncate" and current:
      return current[:rng.randrange(len(current))]
    if how == "extend":
      return current + bytes(rng.randrange(256)
                             for _ in range(rng.choice([1, 4, 8, 64])))
    if how == "flip" and current:
      b = bytearray(current)
      i = rng.randrange(len(b))
      b[i] ^= 1 << rng.randrange(8)
      return bytes(b)
    if how == "double":
      return current * 2
    if how == "empty":
      return b""
    return bytes(rng.randrange(256) for _ in range(rng.choice([1, 4, 12, 64,
                                                               65])))

  def _scalar_value(self, site: Site, fd, current):
    t = fd.type
    if t == _FD.TYPE_BOOL:
      return not current
    if t == _FD.TYPE_ENUM:
      return self._enum_value(fd, current)
    if t in _RANGE:
      return self._int_value(site, fd, current)
    if t == _FD.TYPE_DOUBLE or t == _FD.TYPE_FLOAT:
      return self.rng.choice([0.0, -0.0, 1.0, -1.5, float("nan"),
                              float("inf"), -float("inf"), 1e308, 5e-324,
                              2.0**63, current * 2 + 1])
    if t == _FD.TYPE_STRING:
      return self._string_value(current)
    if t == _FD.TYPE_BYTES:
      return self._bytes_value(current)
    raise AssertionError(f"unhandled field type {t} of {fd.full_name}")

  def _another(self, index: _Index, message_type, exclude=None):
    """A copy of a message of `message_type` from elsewhere in the file, or
    None when there is none."""
    pool = [m for m in index.by_type.get(message_type.full_name, [])
            if m is not exclude]
    if not pool:
      return None
    src = self.rng.choice(pool)
    copy = type(src)()
    copy.CopyFrom(src)   # a deep copy: safe even if src contains the target
    return copy

  # ------------------------------------------------------------ edits
  def mutate_once(self, focus: str | None = None) -> None:
    index = self._index = _Index(self.msg)
    groups: dict[str, list[Site]] = {}
    for site in index.sites:
      groups.setdefault(site.group, []).append(site)
    group = focus if focus in groups else self.rng.choice(sorted(groups))
    site = self.rng.choice(groups[group])
    self.groups.append(group)
    self.log.append(self._apply(index, site))

  def _apply(self, index: _Index, site: Site) -> str:
    rng, owner, fd = self.rng, site.owner, site.fd
    if site.kind == "scalar":
      old = getattr(owner, fd.name)
      new = self._scalar_value(site, fd, old)
      setattr(owner, fd.name, new)
      return f"set {site.path}: {_short(old)} -> {_short(new)}"
    if site.kind == "column":
      dtype = _COLUMNS[owner.DESCRIPTOR.name, fd.name][0]
      data = getattr(owner, fd.name)
      values = np.frombuffer(data[:len(data) // 4 * 4], dtype).copy()
      old = int(values[site.index])
      new = self._int_value(site, fd, old)
      values[site.index] = new
      setattr(owner, fd.name, values.tobytes() + data[len(data) // 4 * 4:])
      return f"set {site.path}: {old} -> {new}"
    if site.kind == "element":
      seq = getattr(owner, fd.name)
      old = seq[site.index]
      new = self._scalar_value(site, fd, old)
      seq[site.index] = new
      return f"set {site.path}: {_short(old)} -> {_short(new)}"
    if site.kind == "message":
      if rng.random() < 0.4:
        owner.ClearField(fd.name)
        return f"clear {site.path}"
      other = self._another(index, fd.message_type,
                            exclude=getattr(owner, fd.name))
      if other is None:
        owner.ClearField(fd.name)
        return f"clear {site.path}"
      getattr(owner, fd.name).CopyFrom(other)
      return f"replace {site.path} by a copy of another {fd.message_type.name}"
    if site.kind == "unset":
      other = self._another(index, fd.message_type)
      if other is None or rng.random() < 0.3:
        getattr(owner, fd.name).SetInParent()
        return f"set {site.path} to an empty {fd.message_type.name}"
      getattr(owner, fd.name).CopyFrom(other)
      return f"set {site.path} to a copy of another {fd.message_type.name}"
    if site.kind == "oneof":
      return self._switch_oneof(index, site)
    return self._edit_repeated(index, site)

  def _switch_oneof(self, index: _Index, site: Site) -> str:
    rng, owner, oneof = self.rng, site.owner, site.fd
    current = owner.WhichOneof(oneof.name)
    if current is not None and rng.random() < 0.1:
      owner.ClearField(oneof.name)
      return f"clear oneof {site.path} (was {current})"
    members = [f for f in oneof.fields if f.name != current]
    if not members:
      owner.ClearField(oneof.name)
      return f"clear oneof {site.path} (was {current})"
    fd = rng.choice(members)
    if fd.message_type is not None:
      other = self._another(index, fd.message_type)
      if other is None or rng.random() < 0.25:
        getattr(owner, fd.name).SetInParent()
        what = f"an empty {fd.message_type.name}"
      else:
        getattr(owner, fd.name).CopyFrom(other)
        what = f"a copy of another {fd.message_type.name}"
    else:
      default = fd.default_value
      value = self._scalar_value(Site("scalar", owner, fd, site.path), fd,
                                 default)
      setattr(owner, fd.name, value)
      what = _short(value)
    return f"switch oneof {site.path}: {current} -> {fd.name} = {what}"

  def _edit_repeated(self, index: _Index, site: Site) -> str:
    rng, owner, fd = self.rng, site.owner, site.fd
    seq = getattr(owner, fd.name)
    n = len(seq)
    is_msg = fd.message_type is not None
    ops = ["append"]
    if n:
      ops += ["delete", "duplicate", "clear", "truncate"]
    if n > 1:
      ops += ["swap", "reverse"]
    op = rng.choice(ops)
    if op == "delete":
      i = rng.randrange(n)
      del seq[i]
      return f"delete {site.path}[{i}] of {n}"
    if op == "clear":
      del seq[:]
      return f"clear {site.path} ({n} elements)"
    if op == "truncate":
      k = rng.randrange(n)
      del seq[k:]
      return f"truncate {site.path} to {k} of {n}"
    if op == "duplicate":
      i = rng.randrange(n)
      at = rng.choice(["end", "next"])
      items = _items(seq, is_msg)
      items.insert(n if at == "end" else i + 1, _copy(items[i], is_msg))
      _assign(seq, items, is_msg)
      return f"duplicate {site.path}[{i}] at the {at}"
    if op == "swap":
      i, j = rng.sample(range(n), 2)
      items = _items(seq, is_msg)
      items[i], items[j] = items[j], items[i]
      _assign(seq, items, is_msg)
      return f"swap {site.path}[{i}] and [{j}]"
    if op == "reverse":
      items = _items(seq, is_msg)
      _assign(seq, items[::-1], is_msg)
      return f"reverse {site.path} ({n} elements)"
    # append
    if is_msg:
      other = self._another(index, fd.message_type)
      if other is None or rng.random() < 0.2:
        seq.add()
        return f"append an empty {fd.message_type.name} to {site.path}"
      seq.add().CopyFrom(other)
      return (f"append a copy of another {fd.message_type.name} to "
              f"{site.path}")
    default = "" if fd.type == _FD.TYPE_STRING else (
        b"" if fd.type == _FD.TYPE_BYTES else (seq[-1] if n else 0))
    value = self._scalar_value(site, fd, default)
    seq.append(value)
    return f"append {_short(value)} to {site.path}"


def _items(seq, is_msg):
  return [_copy(x, is_msg) for x in seq]


def _copy(x, is_msg):
  if not is_msg:
    return x
  c = type(x)()
  c.CopyFrom(x)
  return c


def _assign(seq, items, is_msg):
  del seq[:]
  if is_msg:
    for item in items:
      seq.add().CopyFrom(item)
  else:
    seq.extend(items)


def _short(v) -> str:
  r = repr(v)
  return r if len(r) <= 60 else f"{r[:40]}...({len(r)} chars)"


# ------------------------------------------------------------ the case
def fix_blob_crcs(msg, data: bytes) -> None:
  for blob in msg.blobs:
    if blob.offset + blob.length <= len(data):
      blob.crc32 = zlib.crc32(data[blob.offset:blob.offset + blob.length])


def frame(program: bytes, data: bytes, format_version: int) -> bytes:
  layout = container.DataLayout()
  if data:
    layout.add(data)
  return container.to_bytes(program, layout, format_version)


def make_case(seed_bytes: bytes, rng: random.Random, *, max_edits: int = 3,
              attempts: int = 20, focus: str | None = None,
              structural_share: float = 0.0, structural_first=None):
  """(case bytes, edit log, site groups): 1 to `max_edits` edits of the
  seed's Program message, checksums fixed. The first edit is in site group
  `focus` when the seed has it. With probability `structural_share` the
  first edit is a structural mutation (tests/fuzz/structural.py; its group
  is `structural:<name>`; `structural_first` is tried first) and 0 to
  `max_edits - 1` field edits follow."""
  c = container.Container(seed_bytes)
  data = bytes(c.data)
  for _ in range(attempts):
    msg = pb.Program.FromString(c.program)
    m = Mutator(msg, rng, len(data))
    n_edits = rng.randint(1, max_edits)
    if structural_share and rng.random() < structural_share:
      done = structural.apply(msg, rng, structural_first)
      if done is not None:
        m.groups.append(f"structural:{done[0]}")
        m.log.append(done[1])
        n_edits = rng.randint(0, max_edits - 1)
        focus = None
    for k in range(n_edits):
      m.mutate_once(focus if k == 0 else None)
    fix_blob_crcs(msg, data)
    try:
      program = msg.SerializeToString(deterministic=True)
    except Exception:  # pylint: disable=broad-except
      continue   # not encodable: draw again
    if len(program) > container.MAX_PROGRAM_BYTES:
      continue
    return frame(program, data, c.format_version), m.log, m.groups
  raise RuntimeError("no encodable mutation found")


def case_rng(seed: int, case: int) -> random.Random:
  """The generator of case `case` of a campaign with seed `seed`."""
  return random.Random(f"jaxpr_io-fuzz:{seed}:{case}")


def site_groups(file_bytes: bytes) -> set:
  """The site groups of a file's Program message."""
  msg = pb.Program.FromString(container.Container(file_bytes).program)
  return {site.group for site in _Index(msg).sites}


# The share of cases whose first edit is a structural mutation.
STRUCTURAL_SHARE = 0.3
# The share of a default campaign's cases that are bind-source cases.
BIND_SOURCE_SHARE = 0.05


class CaseFactory:
  """Case `i` of a campaign: its seed program and bytes, from
  `case_rng(seed, i)` alone.

  Half the cases pick a seed program uniformly and then a site group of
  it; the other half pick a site group uniformly among those of all seeds,
  then a seed that has it. So a group only a few seeds have (`Dim.expr`,
  `Blob.offset`, `Program.symbolic_constraints`, `KeyValue`) is edited
  about as often as one every seed has. A share `structural_share` of the
  cases start with a structural mutation, picked uniformly, on a seed that
  admits it (so each is made about as often).
  """

  def __init__(self, files: dict, seed: int, max_edits: int = 3,
               structural_share: float = STRUCTURAL_SHARE,
               mutations: tuple[str, ...] | None = None):
    # `mutations` (names of structural.MUTATIONS): every case starts with
    # one of these, a campaign aimed at them (`--mutations`).
    # "bind-source" (tests/fuzz/bind_source.py) takes its share of the
    # cases named; by default BIND_SOURCE_SHARE of all cases.
    self.bind_share = BIND_SOURCE_SHARE
    if mutations:
      unknown = sorted(set(mutations) - set(structural.MUTATIONS)
                       - {"bind-source"})
      if unknown:
        raise ValueError(f"unknown mutations {unknown}; known: "
                         f"{sorted(structural.MUTATIONS)}, bind-source")
      self.bind_share = mutations.count("bind-source") / len(mutations)
      mutations = tuple(m for m in mutations if m != "bind-source")
      structural_share = 1.0
    self.files = files
    self.seed = seed
    self.max_edits = max_edits
    self.structural_share = structural_share
    self.names = sorted(files)
    self.groups = {n: site_groups(files[n]) for n in self.names}
    self.all_groups = sorted(set().union(*self.groups.values()))
    # {structural mutation: the seeds that admit it}, those admitted.
    programs = {n: pb.Program.FromString(container.Container(files[n]).program)
                for n in self.names} if structural_share else {}
    self.admitted = {}
    for mutation in mutations or structural.MUTATIONS:
      takers = [n for n in self.names if programs
                and structural.admits(programs[n], mutation)]
      if takers:
        self.admitted[mutation] = takers

  def make(self, i: int):
    """(seed name, case bytes, edit log, site groups)."""
    rng = case_rng(self.seed, i)
    # Drawn from a stream of its own: the other cases stay as they were.
    if random.Random(f"jaxpr_io-fuzz-bind:{self.seed}:{i}").random() < (
        self.bind_share):
      data, edits, groups = bind_source.make_case(rng)
      return "bind-source", data, edits, groups
    if rng.random() < self.structural_share:
      # A structural case picks its mutation uniformly, then a seed that
      # admits it: `print-options` admits only the few seeds that print.
      first = rng.choice(sorted(self.admitted))
      name = rng.choice(self.admitted[first])
      data, edits, groups = make_case(
          self.files[name], rng, max_edits=self.max_edits,
          structural_share=1.0, structural_first=first)
      return name, data, edits, groups
    focus = None
    if rng.random() < 0.5:
      focus = rng.choice(self.all_groups)
      name = rng.choice([n for n in self.names if focus in self.groups[n]])
    else:
      name = rng.choice(self.names)
    data, edits, groups = make_case(self.files[name], rng,
                                    max_edits=self.max_edits, focus=focus)
    return name, data, edits, groups
