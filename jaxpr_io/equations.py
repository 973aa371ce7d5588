"""A jaxpr's equations, from the format's columns to `JaxprEqn`s: the hot loop
of a load.

Format version 3 stores the equations of a jaxpr as columns of little-endian
integers (`Equations` in schema/jaxpr.proto) and what equations of one kind
share in `Program.equation_kinds`. Versions 1 and 2 stored one `Equation`
message per equation; `columns_of` turns those into the same columns, so one
decoder serves every version.

Decoding checks each column in bulk with numpy (lengths, table indices,
references to variables bound before the equation, dropped outputs), builds
every output variable of the jaxpr in one step, and checks each kind once
(`resolve_kind`: its primitive, params, release mapping, arity and trust
screen). The loop
over the equations then only slices and constructs. Equations of one kind
share their params dict: JAX treats params as immutable (transformations
build new dicts).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from jaxpr_io import _proto as pb
from jaxpr_io import compat
from jaxpr_io import trust
from jaxpr_io import validate
from jaxpr_io import vocabulary
from jaxpr_io.errors import FormatError

_U32 = np.dtype("<u4")
_I32 = np.dtype("<i4")
_EMPTY_U32 = np.zeros(0, _U32)


class Columns(NamedTuple):
  """The equations of one jaxpr, column by column (see `Equations`)."""
  kinds: np.ndarray        # kind index per equation
  invars: np.ndarray       # atom references, each equation's in turn
  outvars: np.ndarray      # aval indices, each equation's in turn
  name_stacks: np.ndarray  # name stack index per equation
  contexts: np.ndarray     # equation context index per equation
  dropped: np.ndarray      # positions in `outvars` of DropVars, ascending
  effects: dict[int, Any]  # equation index -> its Effect messages


class Kind(NamedTuple):
  """A kind of equation, checked: what its equations share."""
  primitive: Any
  params: dict
  n_in: int
  n_out: int
  refs: tuple[int, ...]  # sub-jaxprs its params refer to
  weight: int            # 1 + their size with shared sub-jaxprs inlined
  drops: tuple[tuple[str, str], ...]  # (primitive, param) a screen dropped


def column(message, field: str, dtype) -> np.ndarray:
  """A column of little-endian integers: a `bytes` field of `message`."""
  data = getattr(message, field)
  if len(data) % 4:
    raise FormatError(f"column {field!r} has {len(data)} bytes, not a "
                      "multiple of 4")
  return np.frombuffer(data, dtype)


def columns_of(reader, jaxpr_msg) -> Columns:
  """The columns of a jaxpr message of any format version."""
  if reader.msg.format_version >= 3:
    if jaxpr_msg.eqns:
      raise FormatError(f"a version {reader.msg.format_version} jaxpr "
                        "stores `eqns` messages; from version 3 on, its "
                        "equations are in `equations`")
    m = jaxpr_msg.equations
    effects: dict[int, Any] = {}
    last = -1
    for e in m.effects:
      if e.equation <= last:
        raise FormatError(f"the effects of equation {e.equation} are not in "
                          "ascending order or repeat")
      last = e.equation
      if not e.effects:
        raise FormatError(f"equation {e.equation} has an empty effects entry")
      effects[e.equation] = e.effects
    return Columns(column(m, "kinds", _U32), column(m, "invars", _I32),
                   column(m, "outvars", _U32), column(m, "name_stacks", _U32),
                   column(m, "contexts", _U32), column(m, "dropped", _U32),
                   effects)
  # Versions 1 and 2: one Equation message each, gathered into columns.
  kinds, invars, outvars, stacks, contexts, dropped = [], [], [], [], [], []
  effects = {}
  kind_index = reader.legacy_kind
  for i, e in enumerate(jaxpr_msg.eqns):
    refs, outs = e.invars[:], e.outvars[:]
    kinds.append(kind_index(e.primitive, e.param_set, len(refs), len(outs)))
    invars += refs
    if e.dropped:
      positions = sorted(set(e.dropped))
      if len(positions) != len(e.dropped) or positions[-1] >= len(outs):
        raise FormatError(f"equation {i}: the dropped-output positions are "
                          "out of range or repeat")
      dropped += [len(outvars) + p for p in positions]
    outvars += outs
    stacks.append(e.name_stack)
    contexts.append(e.ctx)
    if e.effects:
      effects[i] = e.effects
  if invars and not -(2**31) <= min(invars) <= max(invars) < 2**31:
    raise FormatError("a variable or literal reference is out of range")
  return Columns(np.asarray(kinds, _U32), np.asarray(invars, _I32),
                 np.asarray(outvars, _U32), np.asarray(stacks, _U32),
                 np.asarray(contexts, _U32),
                 np.asarray(dropped, _U32) if dropped else _EMPTY_U32, effects)


def resolve_kind(reader, k: int) -> Kind:
  """Checks kind `k` of `reader`'s program once; its equations share the
  result (`Reader.kinds[k]`)."""
  primitive, param_set, n_in, n_out = reader.kind_keys[k]
  name = reader.string(primitive)
  values, refs = reader.param_set(param_set, name)
  # From the format's vocabulary to this release's primitive and params.
  release_name, values = compat.ADAPTER.from_format(name, values,
                                                    reader.where)
  prim = reader.primitive(release_name)
  drops: tuple[tuple[str, str], ...] = ()
  screen = trust.SCREENS.get(release_name)
  if screen is not None:
    # Screened on a scratch policy: `decode` counts what it drops once per
    # equation of the kind, for the warning.
    scratch = trust.Screen(reader.screen.trusted)
    values = screen(release_name, values, scratch)
    drops = tuple(scratch.dropped)
  validate.check_equation(name, prim, n_in, n_out, values)
  kind = reader.kinds[k] = Kind(prim, values, n_in, n_out, refs,
                                1 + sum(reader.sizes[j] for j in refs), drops)
  return kind


def _first(mask: np.ndarray) -> int:
  return int(np.flatnonzero(mask)[0])


def decode(decoder, cols: Columns) -> list:
  """The `JaxprEqn`s of `cols`; binds their outputs in `decoder.env`."""
  r, env = decoder.r, decoder.env
  n = len(cols.kinds)
  for field in ("name_stacks", "contexts"):
    if len(getattr(cols, field)) != n:
      raise FormatError(f"equations column {field!r} has "
                        f"{len(getattr(cols, field))} entries for {n} "
                        "equations")
  if n == 0:
    if len(cols.invars) or len(cols.outvars) or len(cols.dropped) \
        or cols.effects:
      raise FormatError("a jaxpr without equations has equation columns")
    return []
  kind_ids = cols.kinds
  if int(kind_ids.max()) >= len(r.kind_keys):
    i = _first(kind_ids >= len(r.kind_keys))
    raise FormatError(f"equation {i}: kind index {kind_ids[i]} is out of "
                      f"range (the table has {len(r.kind_keys)} entries)")
  _check_index(cols.name_stacks, len(r.source_infos), "name stack")
  _check_index(cols.contexts, len(r.contexts), "eqn context")
  kind_n_in, kind_n_out = r.kind_arity()
  n_ins, n_outs = kind_n_in[kind_ids], kind_n_out[kind_ids]
  in_ends, out_ends = np.cumsum(n_ins), np.cumsum(n_outs)  # per equation
  for field, ends in (("invars", in_ends), ("outvars", out_ends)):
    total = int(ends[-1])
    if len(getattr(cols, field)) != total:
      raise FormatError(f"equations column {field!r} has "
                        f"{len(getattr(cols, field))} entries; the "
                        f"equations' kinds take {total}")
  outvars = cols.outvars
  if len(outvars) and int(outvars.max()) >= len(r.avals):
    raise FormatError(f"an output's aval index {int(outvars.max())} is out "
                      f"of range (the table has {len(r.avals)} entries)")

  # Every output variable, in binding order.
  n_bound = len(env)
  first_out = out_ends - n_outs + n_bound  # per equation
  avals = _objects(r.avals)[outvars].tolist()
  new_vars = list(map(compat.Var, avals))
  dropped = cols.dropped
  if len(dropped):
    if int(dropped[-1]) >= len(outvars) or np.any(dropped[1:] <= dropped[:-1]):
      raise FormatError("the dropped-output positions are out of range, "
                        "repeat or are not ascending")
    for p in dropped.tolist():
      new_vars[p] = compat.DropVar(avals[p])

  # Inputs: variables bound before their equation, or literals.
  refs = cols.invars
  table = env + new_vars
  if len(refs):
    bad = refs >= np.repeat(first_out, n_ins)
    if bad.any():
      p = _first(bad)
      i = _equation_of(p, n_ins)
      raise FormatError(f"equation {i} ({_name(r, kind_ids[i])}): variable "
                        f"{refs[p]} is used before it is bound (only "
                        f"{first_out[i]} are bound here)")
    if len(dropped):
      bad = np.isin(refs, dropped.astype(np.int64) + n_bound)
      if bad.any():
        p = _first(bad)
        i = _equation_of(p, n_ins)
        raise FormatError(f"equation {i} ({_name(r, kind_ids[i])}): variable "
                          f"{refs[p]} is a dropped output and cannot be used")
    lowest = int(refs.min())
    if lowest < 0:
      if -1 - lowest >= len(r.msg.arrays):
        p = _first(refs < -len(r.msg.arrays))
        i = _equation_of(p, n_ins)
        raise FormatError(f"equation {i} ({_name(r, kind_ids[i])}): literal "
                          f"reference {refs[p]} is out of range (array index "
                          f"{-1 - int(refs[p])}; the arrays table has "
                          f"{len(r.msg.arrays)} entries)")
      # Literal reference -1 - a is table[-1 - a]: the literals go after
      # the variables, last array first.
      literals: list[Any] = [None] * -lowest
      used_arrays = np.bincount(-1 - refs[refs < 0])
      for a in np.flatnonzero(used_arrays).tolist():
        literals[a] = decoder.atom(-1 - a)
      table += literals[::-1]
  # Gathering from an object array is several times faster than indexing
  # a list with Python ints (which `tolist` would first have to allocate).
  ins = _objects(table)[refs].tolist()
  env += new_vars

  # Each kind once.
  kinds = r.kinds
  counts = np.bincount(kind_ids).tolist()
  used = [k for k, count in enumerate(counts) if count]
  try:
    for k in used:
      if kinds[k] is None:
        resolve_kind(r, k)
  except validate.DECODE_ERRORS as error:
    _raise_for_first_bad_kind(r, kind_ids, k, error)
  if cols.effects and max(cols.effects) >= n:
    raise FormatError(f"effects of equation {max(cols.effects)}, but the "
                      f"jaxpr has {n}")

  # The equations, in one pass over per-equation columns. Equation e's
  # inputs are ins[in_bounds[e]:in_bounds[e + 1]], its outputs likewise.
  in_bounds = _bounds(in_ends)
  out_bounds = _bounds(out_ends)
  new_eqn, no_effects = compat.JaxprEqn, compat.no_effects
  eqns = [new_eqn(ins[a:b], new_vars[c:d], kind[0], kind[1], no_effects,
                  source_info, ctx)
          for kind, a, b, c, d, source_info, ctx in zip(
              _objects(kinds)[kind_ids].tolist(),
              in_bounds, in_bounds[1:], out_bounds, out_bounds[1:],
              r.source_info_array()[cols.name_stacks].tolist(),
              r.context_array()[cols.contexts].tolist())]
  try:
    for i, messages in cols.effects.items():
      e = eqns[i]
      bound = int(first_out[i])  # variables its effects may name
      eqns[i] = new_eqn(e.invars, e.outvars, e.primitive, e.params,
                        {r.effect(m, env, bound) for m in messages},
                        e.source_info, e.ctx)
  except validate.DECODE_ERRORS as error:
    raise FormatError(f"equation {i} ({_name(r, kind_ids[i])}): "
                      f"{validate.describe_error(error)}") from None

  if compat.MERGED_JAXPRS:
    _close_over_inputs(r, kinds, kind_ids, used, eqns)
  # See compat.DICT_NO_EFFECTS; only programs that use such a primitive pay.
  if any(kinds[k].primitive.name in compat.DICT_NO_EFFECTS for k in used):
    for i, e in enumerate(eqns):
      if e.primitive.name in compat.DICT_NO_EFFECTS and not e.effects:
        eqns[i] = new_eqn(e.invars, e.outvars, e.primitive, e.params, {},
                          e.source_info, e.ctx)

  # Sub-jaxprs referenced (for the nesting depth and the inlined size), and
  # what screens dropped.
  for k in used:
    kind, count = kinds[k], counts[k]
    decoder.refs += kind.refs
    decoder.size += kind.weight * count
    for primitive, param in kind.drops:
      r.screen.drop(primitive, param, count)
  return eqns


def _close_over_inputs(r, kinds, kind_ids, used, eqns) -> None:
  """Gives each jaxpr stored open in a slot of
  vocabulary.CLOSURE_FROM_INPUTS_PARAMS (a `run_scoped` body closed over the
  kernel's refs) its equation's inputs as constants, as JAX 0.11+ trace it.
  Param sets are shared between equations: each equation gets its own."""
  slots = [(k, param) for k in used
           for primitive, param in vocabulary.CLOSURE_FROM_INPUTS_PARAMS
           if kinds[k][0].name == primitive and param in kinds[k][1]]
  if not slots:
    return
  params_of = dict(slots)
  for i, k in enumerate(kind_ids.tolist()):
    param = params_of.get(k)
    if param is None or not eqns[i].invars:
      continue
    e = eqns[i]
    closed = compat.close_over_inputs(e.params[param], e.invars)
    if closed is None:
      raise FormatError(
          f"equation {i} ({_name(r, k)}): its inputs are not variables "
          f"of the types its {param!r} begins with, which it closes over")
    eqns[i] = compat.JaxprEqn(e.invars, e.outvars, e.primitive,
                              {**e.params, param: closed}, e.effects,
                              e.source_info, e.ctx)


def _raise_for_first_bad_kind(r, kind_ids: np.ndarray, bad: int,
                              error: Exception):
  """Raises the FormatError of the first equation whose kind does not
  resolve. `decode` resolves kinds in index order, which is fast, and kind
  `bad` failed with `error`; an error names the first equation it concerns,
  so the unresolved kinds first used before `bad` are tried in order."""
  kind_list = kind_ids.tolist()
  first_use = {}
  for i, k in enumerate(kind_list):
    first_use.setdefault(k, i)
  for k in sorted(first_use, key=first_use.get):
    if k == bad:
      break
    if r.kinds[k] is None:
      try:
        resolve_kind(r, k)
      except validate.DECODE_ERRORS as earlier:
        bad, error = k, earlier
        break
  raise FormatError(f"equation {first_use[bad]} ({_name(r, bad)}): "
                    f"{validate.describe_error(error)}") from None


def objects(items: list) -> np.ndarray:
  """`items` as a 1-d object array (tuples stay elements), for gathering
  many of them by an index column at once."""
  return np.fromiter(items, object, len(items))


_objects = objects


def _equation_of(position: int, n_ins: np.ndarray) -> int:
  """The equation whose inputs hold flat input `position`."""
  return int(np.searchsorted(np.cumsum(n_ins), position, side="right"))


def _bounds(ends: np.ndarray) -> list[int]:
  """[0, ends[0], ends[1], ...]: where each equation's part of a flat column
  begins, and the column's end, as Python ints."""
  bounds = np.zeros(len(ends) + 1, np.int64)
  bounds[1:] = ends
  return _python_ints(bounds)


# Python ints 0, 1, 2, ... made once, as CPython keeps -5 to 256: `tolist`
# allocates an int for every element past 256, while gathering them from
# this pool only copies references, which halves the cost of the bounds of a
# large jaxpr. It grows to the largest bound met, within _INT_POOL_LIMIT.
_INT_POOL = np.zeros(0, object)
_INT_POOL_LIMIT = 1 << 17


def _python_ints(values: np.ndarray) -> list[int]:
  """`values.tolist()` for non-negative `values` in ascending order."""
  global _INT_POOL
  top = int(values[-1]) + 1
  if top > len(_INT_POOL):
    if top > _INT_POOL_LIMIT:
      return values.tolist()
    size = 1 << (top - 1).bit_length()
    _INT_POOL = np.fromiter(range(size), object, size)
  return _INT_POOL[values].tolist()


def _check_index(column: np.ndarray, table_len: int, what: str) -> None:
  if len(column) and int(column.max()) >= table_len:
    i = _first(column >= table_len)
    raise FormatError(f"equation {i}: {what} index {column[i]} is out of "
                      f"range (the table has {table_len} entries)")


def _name(reader, k) -> str:
  primitive = reader.kind_keys[k][0] if k is not None else None
  if primitive is None or primitive >= len(reader.strings):
    return "?"
  return reader.strings[primitive]


# ------------------------------------------------ editing, for tools and tests
def unpack(program_msg, jaxpr_msg) -> list:
  """The equations of a version 3 jaxpr message as `Equation` messages (the
  one-message-per-equation form of versions 1-2), for inspecting or editing
  a file at the protobuf level; `pack` stores them back. Trusts its input:
  run it only on files that load."""
  m = jaxpr_msg.equations
  kinds, refs, outs, stacks, contexts, dropped = (
      np.frombuffer(getattr(m, f), dt).tolist() for f, dt in (
          ("kinds", _U32), ("invars", _I32), ("outvars", _U32),
          ("name_stacks", _U32), ("contexts", _U32), ("dropped", _U32)))
  effects = {e.equation: e.effects for e in m.effects}
  dropped_set = set(dropped)
  eqns, ip, op = [], 0, 0
  for i, (k, stack, ctx) in enumerate(zip(kinds, stacks, contexts)):
    kind = program_msg.equation_kinds[k]
    e = pb.Equation(primitive=kind.primitive, param_set=kind.param_set,
                    name_stack=stack, ctx=ctx)
    e.invars.extend(refs[ip:ip + kind.num_invars])
    e.outvars.extend(outs[op:op + kind.num_outvars])
    e.dropped.extend(p for p in range(kind.num_outvars)
                     if op + p in dropped_set)
    if i in effects:
      e.effects.extend(effects[i])
    ip += kind.num_invars
    op += kind.num_outvars
    eqns.append(e)
  return eqns


def pack(program_msg, jaxpr_msg, eqns) -> None:
  """Stores `Equation` messages as the columns of `jaxpr_msg`, adding the
  kinds they need to `program_msg.equation_kinds` (the inverse of
  `unpack`). Values are stored as given, unchecked, so that tests can build
  malformed files."""
  index = {(k.primitive, k.param_set, k.num_invars, k.num_outvars): i
           for i, k in enumerate(program_msg.equation_kinds)}
  kinds, refs, outs, stacks, contexts, dropped = [], [], [], [], [], []
  m = jaxpr_msg.equations
  del m.effects[:]
  for i, e in enumerate(eqns):
    key = (e.primitive, e.param_set, len(e.invars), len(e.outvars))
    if key not in index:
      index[key] = len(program_msg.equation_kinds)
      program_msg.equation_kinds.add(primitive=key[0], param_set=key[1],
                                     num_invars=key[2], num_outvars=key[3])
    kinds.append(index[key])
    dropped += [len(outs) + p for p in e.dropped]
    refs += e.invars
    outs += e.outvars
    stacks.append(e.name_stack)
    contexts.append(e.ctx)
    if e.effects:
      m.effects.add(equation=i).effects.extend(e.effects)
  del jaxpr_msg.eqns[:]
  for field, values, dtype in (("kinds", kinds, _U32), ("invars", refs, _I32),
                               ("outvars", outs, _U32),
                               ("name_stacks", stacks, _U32),
                               ("contexts", contexts, _U32),
                               ("dropped", dropped, _U32)):
    setattr(m, field, np.asarray(values, dtype).tobytes())
