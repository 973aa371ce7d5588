"""The Python side of the viewer's reader test (tests/viewer/test_viewer.py).

`summary(data)` computes, with the Python reader, the JSON summary that
viewer/src/reader.js's `summarize` computes with the JavaScript one: the
container is checked by `jaxpr_io.format.container.Container`, the message parsed by
the protobuf runtime (`jaxpr_io.format._proto`), the equation columns read with
numpy and array data with numpy and ml_dtypes (float16, bfloat16, float8, ...).

`anchors(data)` computes, from the program `jaxpr_io.loads` builds (JAX's own
objects), what the summary must agree with whatever both summaries say: the
input and output key paths, the avals of the root's inputs and outputs, the
root's equation count and primitives (in the format's vocabulary), and its
constants' values. The test checks the JavaScript summary against both.
"""

from __future__ import annotations

import json
import math

import jax
import ml_dtypes
import numpy as np

import jaxpr_io
from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.format import container
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.codec import registry
from jaxpr_io.tools.load import input_paths, output_paths

FIRST = 8  # how many elements of an array the summary shows

_NUMPY = {
    "bool": np.bool_, "int8": np.int8, "int16": np.int16, "int32": np.int32,
    "int64": np.int64, "uint8": np.uint8, "uint16": np.uint16,
    "uint32": np.uint32, "uint64": np.uint64, "float16": np.float16,
    "bfloat16": ml_dtypes.bfloat16, "float32": np.float32,
    "float64": np.float64, "complex64": np.complex64,
    "complex128": np.complex128,
}
for _name in ("int4", "uint4", "int2", "uint2", "float8_e4m3fn",
              "float8_e4m3fnuz", "float8_e4m3b11fnuz", "float8_e5m2",
              "float8_e5m2fnuz", "float8_e4m3", "float8_e3m4",
              "float8_e8m0fnu", "float4_e2m1fn", "float6_e2m3fn",
              "float6_e3m2fn"):
  if hasattr(ml_dtypes, _name):
    _NUMPY[_name] = getattr(ml_dtypes, _name)


def _enum_names(enum_name: str) -> dict[int, str]:
  enum = pb.Program.DESCRIPTOR.file.enum_types_by_name.get(enum_name)
  if enum is None:  # a nested enum, e.g. PyTree.Kind
    outer, inner = enum_name.split(".")
    enum = pb.Program.DESCRIPTOR.file.message_types_by_name[
        outer].enum_types_by_name[inner]
  return {v.number: v.name for v in enum.values}


_DTYPES = {n: name.lower() for n, name in _enum_names("DType").items()}
# Version 8: MUTABLE_HI_KIND_BOX -> "box", as the JavaScript reader names it.
_HI_MUTABLE_TYPES = {n: name.rsplit("_", 1)[1].lower()
                     for n, name in _enum_names("MutableHiKind").items()}
_HOST_KINDS = _enum_names("HostKind")
_TREE_KINDS = _enum_names("PyTree.Kind")


def number(x):
  """A number as the JSON summary holds it (see reader.js `jsonNumber`)."""
  if isinstance(x, (bool, np.bool_)):
    return bool(x)
  if isinstance(x, (int, np.integer)):
    x = int(x)
    return x if abs(x) <= 2**53 - 1 else {"big": str(x)}
  x = float(x)
  if math.isnan(x):
    return {"float": "nan"}
  if math.isinf(x):
    return {"float": "inf" if x > 0 else "-inf"}
  return x


def _elements(raw: bytes, dtype: str) -> list:
  if dtype == "float0":
    return []
  if dtype.startswith("key<"):
    values = np.frombuffer(raw, "<u4")
  elif dtype in ("int1", "uint1"):
    values = np.frombuffer(raw, np.uint8) & 1
    if dtype == "int1":
      values = values.astype(np.int8) * -1
  elif dtype in _NUMPY:
    values = np.frombuffer(raw, _NUMPY[dtype])
  else:
    raise AssertionError(f"no numpy type for {dtype}")
  out = []
  for x in values[:FIRST]:
    if np.iscomplexobj(x):
      out.append([number(x.real), number(x.imag)])
    elif values.dtype.kind == "b":
      out.append(bool(x))
    elif values.dtype.kind in "iu":
      out.append(number(int(x)))
    else:
      out.append(number(float(x)))
  return out


class _Summarizer:
  """The summary of one program message (mirrors reader.js `summarize`)."""

  def __init__(self, data: bytes):
    self.c = container.Container(data, source="<golden>")
    self.msg = pb.Program.FromString(self.c.program)
    self.version = self.c.format_version
    self.jaxpr_ids, self.closed_ids = {}, {}
    self.jaxprs, self.closed = [], []
    self._stacks = None

  def s(self, i):
    return self.msg.strings[i]

  def dtype(self, t):
    name = _DTYPES[t.dtype]
    if name == "extended":
      return self.s(t.extended.record.type)
    return f"key<{self.s(t.key_impl)}>" if name == "prng_key" else name

  def aval(self, i):
    m = self.msg.avals[i]
    kind = m.WhichOneof("kind")
    if kind == "shaped_array":
      a = m.shaped_array
      return {"dtype": self.dtype(a.dtype), "weak": a.weak_type,
              "shape": list(a.sizes) or [
                  self.s(d.expr) if d.WhichOneof("kind") == "expr" else d.size
                  for d in a.shape]}
    if kind == "ref":
      return {"ref": self.aval(m.ref.inner_aval)}
    if kind == "future":  # version 7
      return {"future": self.aval(m.future.inner_aval)}
    if kind == "lin_val":  # version 7
      return {"lin_val": self.aval(m.lin_val.inner_aval)}
    if kind == "hi_mutable":  # version 8
      return {"hi_mutable": _HI_MUTABLE_TYPES[m.hi_mutable.kind]}
    return {"token": True}

  def array(self, i):
    m = self.msg.arrays[i]
    aval = self.aval(m.aval)
    out = {"aval": aval, "kind": _HOST_KINDS[m.kind]}
    data = m.WhichOneof("data")
    if data == "python_value":
      out["nbytes"] = None
      out["first"] = [self.value(m.python_value)]
      return out
    if data == "blob":
      b = self.msg.blobs[m.blob]
      raw = bytes(self.c.blob(b.offset, b.length, b.crc32, f"blob {m.blob}"))
    else:
      raw = m.inline
    out["nbytes"] = len(raw)
    out["first"] = _elements(raw, aval.get("dtype", "uint8"))
    return out

  def value(self, m):
    kind = m.WhichOneof("kind")
    v = getattr(m, kind)
    if kind == "none":
      return None
    if kind in ("bool", "int", "float"):
      return number(v) if kind != "bool" else v
    if kind == "big_int":
      return {"big": v}
    if kind == "str":
      return self.s(v)
    if kind == "tuple":
      return [self.value(x) for x in v.items]
    if kind in ("ints", "bools"):
      return [number(x) if kind == "ints" else x for x in v.items]
    if kind == "dtype":
      return {"dtype": self.dtype(v)}
    if kind == "enum":
      return {"enum": self.s(v.type), "member": self.s(v.member)}
    if kind == "record":
      return {"record": self.s(v.type),
              "fields": [self.value(x) for x in v.fields]}
    if kind == "jaxpr":
      return {"jaxpr": self.visit_jaxpr(v)}
    if kind == "closed_jaxpr":
      return {"closed_jaxpr": self.visit_closed(v)}
    if kind == "primitive":
      return {"primitive": self.s(v)}
    if kind == "array":
      return {"array": self.array(v)}
    if kind == "complex":
      return {"complex": [number(v.real), number(v.imag)]}
    if kind == "param_codec":
      return {"codec": self.value(v)}
    if kind == "type":
      which = v.WhichOneof("kind")
      return {"type": {"numpy": self.dtype(v.numpy_scalar)}
              if which == "numpy_scalar" else self.s(v.builtin)}
    if kind == "frozenset":
      return {"frozenset": [self.value(x) for x in v.items]}
    if kind == "dim_expr":
      return {"dim": self.s(v)}
    if kind == "treedef":
      return {"treedef": self.tree(v)}
    if kind == "aval":
      return {"aval": self.aval(v)}
    raise AssertionError(kind)

  def tree(self, m):
    if m.shared:
      return self.tree(self.msg.tree_nodes[m.shared - 1])
    out = {"kind": _TREE_KINDS[m.kind],
           "children": [self.tree(c) for c in m.children]}
    if m.keys:
      out["keys"] = [self.value(k) for k in m.keys]
    if m.kind == 6:
      out["name"] = m.custom_name
    if m.kind == 7:
      out["name"] = f"{self.s(m.type_module)}.{self.s(m.type_qualname)}"
      keys = []
      for k in m.child_keys:
        which = k.WhichOneof("kind")
        keys.append({"dict": self.value(k.dict_key)} if which == "dict_key"
                    else {"attr": self.s(k.attribute)}
                    if which == "attribute"
                    else {"seq": k.sequence_index}
                    if which == "sequence_index"
                    else {"flat": k.flattened_index})
      out["child_keys"] = keys
    return out

  def name_stack(self, i):
    if self.version < 3:
      return "/".join(self.s(e.name) + ("()" if e.kind == 2 else "")
                      for e in self.msg.name_stacks[i].entries)
    if self._stacks is None:
      t = self.msg.name_stack_table
      parents, kinds, names = (np.frombuffer(getattr(t, f), "<u4").tolist()
                               for f in ("parents", "kinds", "names"))
      stacks = []
      for p, k, n in zip(parents, kinds, names):
        head = stacks[p - 1] if p else ""
        own = "" if k == 0 else self.s(n) + ("()" if k == 2 else "")
        stacks.append(f"{head}/{own}" if head and own else head + own)
      self._stacks = stacks
    return self._stacks[i]

  def effects(self, messages):
    return [[self.s(e.name)] + ([self.value(e.payload)]
                                if e.HasField("payload") else [])
            for e in messages]

  def params(self, param_set):
    return [[self.s(p.name), self.value(p.value)]
            for p in self.msg.param_sets[param_set].params]

  def ref(self, r):
    return r if r >= 0 else {"literal": self.array(-r - 1)}

  def visit_closed(self, i):
    if i in self.closed_ids:
      return self.closed_ids[i]
    cid = self.closed_ids[i] = len(self.closed)
    entry = {}
    self.closed.append(entry)
    m = self.msg.closed_jaxprs[i]
    entry["jaxpr"] = self.visit_jaxpr(m.jaxpr)
    entry["consts"] = [self.array(a) for a in m.consts]
    return cid

  def _equations(self, m):
    """(primitive, param set, ins, out avals, dropped positions, name stack,
    effects) per equation, from either storage of the equations."""
    if self.version < 3:
      for e in m.eqns:
        yield (self.s(e.primitive), e.param_set, list(e.invars),
               list(e.outvars), set(e.dropped), e.name_stack, e.effects)
      return
    q = m.equations
    kinds = np.frombuffer(q.kinds, "<u4").tolist()
    ins = np.frombuffer(q.invars, "<i4").tolist()
    outs = np.frombuffer(q.outvars, "<u4").tolist()
    stacks = np.frombuffer(q.name_stacks, "<u4").tolist()
    dropped = set(np.frombuffer(q.dropped, "<u4").tolist())
    effects = {e.equation: e.effects for e in q.effects}
    a = b = 0
    for i, k in enumerate(kinds):
      kind = self.msg.equation_kinds[k]
      yield (self.s(kind.primitive), kind.param_set,
             ins[a:a + kind.num_invars], outs[b:b + kind.num_outvars],
             {p - b for p in dropped if b <= p < b + kind.num_outvars},
             stacks[i], effects.get(i, ()))
      a += kind.num_invars
      b += kind.num_outvars

  def visit_jaxpr(self, i):
    if i in self.jaxpr_ids:
      return self.jaxpr_ids[i]
    jid = self.jaxpr_ids[i] = len(self.jaxprs)
    entry = {}
    self.jaxprs.append(entry)
    m = self.msg.jaxprs[i]
    entry["constvars"] = [self.aval(a) for a in m.constvars]
    entry["invars"] = [self.aval(a) for a in m.invars]
    eqns = []
    for prim, param_set, ins, outs, drops, stack, effects in \
        self._equations(m):
      avals = [self.aval(a) for a in outs]
      eqns.append({
          "primitive": prim, "params": self.params(param_set),
          "ins": [self.ref(r) for r in ins],
          "outs": [{"dropped": a} if p in drops else a
                   for p, a in enumerate(avals)],
          "name_stack": self.name_stack(stack),
          "effects": self.effects(effects)})
    entry["eqns"] = eqns
    entry["outvars"] = [self.ref(r) for r in m.outvars]
    entry["effects"] = self.effects(m.effects)
    return jid


def _key_text(key) -> str:
  if isinstance(key, str):
    return f"['{key}']"
  if isinstance(key, int) and not isinstance(key, bool):
    return f"[{key}]"
  if isinstance(key, dict) and "record" in key:
    return f"[{key['record']}(\u2026)]"
  return "[" + json.dumps(key, separators=(",", ":")) + "]"


def _leaf_paths(tree, prefix, out):
  kind = tree["kind"]
  if kind == "LEAF":
    out.append(prefix)
    return out
  for i, child in enumerate(tree["children"]):
    if kind == "DICT":
      step = _key_text(tree["keys"][i])
    elif kind == "GENERIC":
      k = tree["child_keys"][i]
      step = (f".{k['attr']}" if "attr" in k else
              _key_text(k["dict"]) if "dict" in k else
              f"[{k.get('seq', k.get('flat'))}]")
    else:
      step = f"[{i}]"
    _leaf_paths(child, prefix + step, out)
  return out


def summary(data: bytes) -> dict:
  """The summary that reader.js's `summarize` must produce for `data`."""
  s = _Summarizer(data)
  root = s.visit_closed(s.msg.root)
  p = s.msg.producer
  in_tree = s.tree(s.msg.in_tree) if s.msg.HasField("in_tree") else None
  out_tree = s.tree(s.msg.out_tree) if s.msg.HasField("out_tree") else None
  if in_tree and in_tree["kind"] == "TUPLE" and len(in_tree["children"]) == 2:
    paths = (_leaf_paths(in_tree["children"][0], "args", [])
             + _leaf_paths(in_tree["children"][1], "kwargs", []))
  else:
    paths = _leaf_paths(in_tree, "in", []) if in_tree else []
  return {
      "format_version": s.version,
      "producer": [p.jaxpr_io_version, p.jax_version, p.jaxlib_version],
      "metadata": [[kv.key, kv.value] for kv in s.msg.metadata],
      "input_paths": paths,
      "output_paths": _leaf_paths(out_tree, "out", []) if out_tree else [],
      "in_tree": in_tree, "out_tree": out_tree,
      "symbolic_constraints": list(s.msg.symbolic_constraints),
      "root": root, "jaxprs": s.jaxprs, "closed": s.closed,
  }


def _aval_of(aval) -> dict:
  if type(aval) is compat.AbstractToken:
    return {"token": True}
  if hi_mutable.is_hi_mutable(aval):
    return {"hi_mutable": "box" if aval.str_short() == "BoxTy" else "log"}
  dtype = str(aval.dtype)
  return {"dtype": dtype, "shape": [d if type(d) is int else str(d)
                                    for d in aval.shape],
          "weak": bool(aval.weak_type)}


def anchors(data: bytes) -> dict:
  """What JAX's own objects, as `jaxpr_io.loads` builds them, say."""
  prog = jaxpr_io.loads(data, trusted=True)
  closed = prog.closed_jaxpr
  # Primitive names in the format's vocabulary: the registry's stable name
  # (e.g. "equinox.unvmap_any"), then the release adapter's renames.
  prims = [compat.ADAPTER.to_format(
      registry.PRIMITIVES.name_of(e.primitive), e.params)[0]
           for e in closed.jaxpr.eqns]
  consts = []
  for c in closed.consts:
    if compat.is_key_array(c):
      c = jax.random.key_data(c)
    flat = np.asarray(c).reshape(-1)
    consts.append({"shape": list(np.shape(c)), "dtype": str(flat.dtype),
                   "first": _elements(flat.tobytes(), str(flat.dtype))})
  return {
      "input_paths": input_paths(prog),
      "output_paths": output_paths(prog),
      "inputs": [_aval_of(a) for a in closed.in_avals],
      "outputs": [_aval_of(a) for a in closed.out_avals],
      "root_primitives": prims,
      "root_consts": consts,
  }
