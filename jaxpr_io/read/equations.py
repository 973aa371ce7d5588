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

from jaxpr_io import compat
from jaxpr_io.compat import polyfills as compat_polyfills
from jaxpr_io.safety import trust
from jaxpr_io.safety import validate
from jaxpr_io.format import vocabulary
from jaxpr_io.read import equation_checks
from jaxpr_io.read.polyfill import polyfill_equations
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
  weight: int            # 1 + #inputs + #outputs + sub-jaxprs' sizes inlined
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
  # The stored params, for the schema check below (`from_format` and the
  # screens may change `values`): a copy costs less than decoding again.
  stored = dict(values)
  # From the format's vocabulary to this release's primitive and params.
  release_name, values = compat.ADAPTER.from_format(name, values,
                                                    reader.where)
  fill = reader.polyfill(release_name)
  if fill is not None:
    # A primitive of a newer JAX that this one expresses with its own
    # (compat/polyfills.py): `build` turns each equation into a call.
    if not fill.n_in(n_in) or n_out != 1:
      raise FormatError(f"its polyfill takes no {name!r} equation with "
                        f"{n_in} inputs and {n_out} outputs")
    reader.polyfilled_kinds[k] = release_name
    kind = reader.kinds[k] = Kind(compat_polyfills.CALL, values, n_in,
                                  n_out, refs, 1 + sum(reader.sizes[j]
                                                       for j in refs), ())
    return kind
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
  validate.check_param_schema(name, stored)
  weight = 1 + n_in + n_out + sum(reader.sizes[j] for j in refs)
  kind = reader.kinds[k] = Kind(prim, values, n_in, n_out, refs, weight, drops)
  return kind


def _first(mask: np.ndarray) -> int:
  return int(np.flatnonzero(mask)[0])


class Batch(NamedTuple):
  """The equations of every jaxpr of a program, checked together and
  gathered into program-wide lists (equation e of jaxpr j is entry
  `starts[j] + e`): what building their `JaxprEqn`s takes."""
  starts: list[int]        # per jaxpr, its first equation; then the total
  out_starts: list[int]    # per jaxpr, its first output; then the total
  kind_ids: np.ndarray     # per equation
  first_out: np.ndarray    # per equation: variables of its jaxpr bound before it
  ins: list                # every equation's inputs, in order
  new_vars: list           # every equation's outputs, in order
  in_bounds: list[int]     # equation e's inputs: ins[in_bounds[e]:in_bounds[e + 1]]
  out_bounds: list[int]    # likewise for new_vars
  source_infos: list       # per equation
  contexts: list           # per equation
  used: list[list[tuple[int, int]]]  # per jaxpr: (kind, its equations)
  # Per kind, its primitive and params once resolved (`build`), for
  # gathering per equation.
  kind_primitives: np.ndarray
  kind_params: np.ndarray


def prepare(r, envs: list[list], columns: list[Columns]) -> Batch:
  """Checks the equation columns of all jaxprs of a program at once, and
  builds every equation's output variables and gathers its inputs.

  `envs[j]` holds jaxpr j's constvars and invars. Working on the
  concatenated columns costs a few dozen numpy calls per program instead of
  per jaxpr, which was most of the time of reading a small jaxpr. Errors
  name the jaxpr and equation."""
  counts = _equation_counts(columns)
  starts = np.zeros(len(columns) + 1, np.int64)
  np.cumsum(counts, out=starts[1:])
  kind_ids, name_stacks, contexts, refs, outvars = (
      np.concatenate([getattr(c, field) for c in columns]) if columns
      else np.zeros(0, dtype)
      for field, dtype in (("kinds", _U32), ("name_stacks", _U32),
                           ("contexts", _U32), ("invars", _I32),
                           ("outvars", _U32)))
  where = _Where(r, starts, kind_ids)
  for column, table_len, what in ((kind_ids, len(r.kind_keys), "kind"),
                                  (name_stacks, len(r.source_infos),
                                   "name stack"),
                                  (contexts, len(r.contexts), "eqn context")):
    if len(column) and int(column.max()) >= table_len:
      e = _first(column >= table_len)
      raise FormatError(f"{where.at(e)}: {what} index {column[e]} is out of "
                        f"range (the table has {table_len} entries)")
  kind_n_in, kind_n_out = r.kind_arity()
  n_ins, n_outs = kind_n_in[kind_ids], kind_n_out[kind_ids]
  in_ends, out_ends = np.cumsum(n_ins), np.cumsum(n_outs)  # per equation
  # Per jaxpr, where its part of the inputs (outputs) begins; then the end.
  in_starts = np.concatenate(([0], in_ends))[starts]
  out_starts = np.concatenate(([0], out_ends))[starts]
  _check_parts(r, columns, outvars, in_starts, out_starts)

  # Every output variable, in binding order.
  n_bound = np.array([len(env) for env in envs], np.int64)
  jaxpr_of = np.repeat(np.arange(len(columns)), counts)  # per equation
  first_out = out_ends - n_outs + (n_bound - out_starts[:-1])[jaxpr_of]
  var_array = _output_vars(r, columns, outvars, out_starts)
  ins = _input_vars(r, envs, columns, refs, var_array, where, _Spans(
      n_ins, in_ends, in_starts, out_starts, n_bound, jaxpr_of, first_out))
  return Batch(
      starts.tolist(), out_starts.tolist(), kind_ids, first_out, ins,
      var_array.tolist(), _bounds(in_ends), _bounds(out_ends),
      r.source_info_array()[name_stacks].tolist(),
      # Most programs have one context: repeating it is cheaper.
      (r.contexts * len(contexts) if len(r.contexts) == 1
       else r.context_array()[contexts].tolist()),
      _kinds_used(jaxpr_of, kind_ids, len(columns), len(r.kind_keys)),
      np.full(len(r.kind_keys), None, object),
      np.full(len(r.kind_keys), None, object))


def _equation_counts(columns: list[Columns]) -> list[int]:
  """The number of equations of each jaxpr, its columns checked to agree."""
  counts = []
  for j, cols in enumerate(columns):
    n = len(cols.kinds)
    for field in ("name_stacks", "contexts"):
      if len(getattr(cols, field)) != n:
        raise FormatError(f"jaxpr {j}: equations column {field!r} has "
                          f"{len(getattr(cols, field))} entries for {n} "
                          "equations")
    if n == 0 and (len(cols.invars) or len(cols.outvars) or len(cols.dropped)
                   or cols.effects):
      raise FormatError(f"jaxpr {j}: a jaxpr without equations has equation "
                        "columns")
    if cols.effects and max(cols.effects) >= n:
      raise FormatError(f"jaxpr {j}: effects of equation "
                        f"{max(cols.effects)}, but the jaxpr has {n}")
    counts.append(n)
  return counts


class _Where:
  """Names program-wide equation `e` in errors: its jaxpr and index."""

  def __init__(self, r, starts, kind_ids):
    self.r, self.starts, self.kind_ids = r, starts, kind_ids

  def at(self, e: int) -> str:
    j = int(np.searchsorted(self.starts, e, side="right")) - 1
    return f"jaxpr {j}: equation {e - int(self.starts[j])}"

  def named(self, e: int) -> str:
    return f"{self.at(e)} ({_name(self.r, int(self.kind_ids[e]))})"


class _Spans(NamedTuple):
  """Where each equation's and each jaxpr's inputs and outputs lie in the
  concatenated columns (see `prepare`)."""
  n_ins: Any
  in_ends: Any
  in_starts: Any
  out_starts: Any
  n_bound: Any
  jaxpr_of: Any
  first_out: Any


def _check_parts(r, columns, outvars, in_starts, out_starts) -> None:
  """Each jaxpr's input and output columns have the lengths its equations'
  kinds take; every output's aval is in the table."""
  for field, part_starts in (("invars", in_starts), ("outvars", out_starts)):
    lengths = np.array([len(getattr(c, field)) for c in columns], np.int64)
    wrong = lengths != np.diff(part_starts)
    if wrong.any():
      j = _first(wrong)
      raise FormatError(f"jaxpr {j}: equations column {field!r} has "
                        f"{lengths[j]} entries; the equations' kinds take "
                        f"{int(part_starts[j + 1] - part_starts[j])}")
  if len(outvars) and int(outvars.max()) >= len(r.avals):
    p = _first(outvars >= len(r.avals))
    j = int(np.searchsorted(out_starts, p, side="right")) - 1
    raise FormatError(f"jaxpr {j}: an output's aval index {outvars[p]} is "
                      f"out of range (the table has {len(r.avals)} entries)")


def _output_vars(r, columns, outvars, out_starts):
  """An object array of every equation's output variables, in binding
  order: a `Var`, or a `DropVar` where the jaxpr's column drops it."""
  avals = _objects(r.avals)[outvars].tolist()
  var_array = np.fromiter(map(compat.Var, avals), object, len(avals))
  for j, cols in enumerate(columns):
    dropped = cols.dropped
    if not len(dropped):
      continue
    if (int(dropped[-1]) >= len(cols.outvars)
        or np.any(dropped[1:] <= dropped[:-1])):
      raise FormatError(f"jaxpr {j}: the dropped-output positions are out "
                        "of range, repeat or are not ascending")
    for p in (dropped.astype(np.int64) + out_starts[j]).tolist():
      var_array[p] = compat.DropVar(avals[p])
  return var_array


def _input_vars(r, envs, columns, refs, var_array, where: _Where,
                spans: _Spans) -> list:
  """Every equation's inputs, in order: variables bound before their
  equation (and not dropped), or literals of the arrays table."""
  # `parts` holds each jaxpr's variables, then the literals.
  parts, offsets, size = [], [], 0
  for j, env in enumerate(envs):
    own = var_array[spans.out_starts[j]:spans.out_starts[j + 1]]
    parts += (_objects(env), own)
    offsets.append(size)
    size += len(env) + len(own)
  if not len(refs):
    return []
  bad = refs >= np.repeat(spans.first_out, spans.n_ins)
  if bad.any():
    e = _equation_of(_first(bad), spans.in_ends)
    raise FormatError(f"{where.named(e)}: variable {refs[_first(bad)]} is "
                      f"used before it is bound (only {spans.first_out[e]} "
                      "are bound here)")
  for j, cols in enumerate(columns):
    if len(cols.dropped):
      own = refs[spans.in_starts[j]:spans.in_starts[j + 1]]
      bad = np.isin(own, cols.dropped.astype(np.int64) + spans.n_bound[j])
      if bad.any():
        p = int(spans.in_starts[j]) + _first(bad)
        raise FormatError(
            f"{where.named(_equation_of(p, spans.in_ends))}: variable "
            f"{refs[p]} is a dropped output and cannot be used")
  index = refs.astype(np.int64) + np.repeat(
      np.asarray(offsets, np.int64)[spans.jaxpr_of], spans.n_ins)
  literal = refs < 0
  if literal.any():
    arrays = -1 - refs[literal].astype(np.int64)
    if int(arrays.max()) >= len(r.msg.arrays):
      p = _first(refs < -len(r.msg.arrays))
      raise FormatError(
          f"{where.named(_equation_of(p, spans.in_ends))}: literal reference "
          f"{refs[p]} is out of range (array index {-1 - int(refs[p])}; "
          f"the arrays table has {len(r.msg.arrays)} entries)")
    used_arrays = np.flatnonzero(np.bincount(arrays))
    position = np.zeros(int(used_arrays[-1]) + 1, np.int64)
    position[used_arrays] = np.arange(size, size + len(used_arrays))
    parts.append(_objects([r.literal(a) for a in used_arrays.tolist()]))
    index[literal] = position[arrays]
  # Gathering from an object array is several times faster than indexing
  # a list with Python ints (which `tolist` would first have to allocate).
  return np.concatenate(parts)[index].tolist()


def _kinds_used(jaxpr_of, kind_ids, n_jaxprs: int, n_kinds: int):
  """Per jaxpr, the (kind, number of its equations) of each kind it uses,
  in kind order."""
  used: list[list[tuple[int, int]]] = [[] for _ in range(n_jaxprs)]
  if not len(kind_ids):
    return used
  key = jaxpr_of.astype(np.int64) * n_kinds + kind_ids
  if n_jaxprs * n_kinds <= 8 * len(key) + 4096:
    counts = np.bincount(key)  # small enough to count densely
    keys = np.flatnonzero(counts)
    counts = counts[keys]
  else:
    keys, counts = np.unique(key, return_counts=True)
  for k, count in zip(keys.tolist(), counts.tolist()):
    used[k // n_kinds].append((k % n_kinds, count))
  return used


def build(decoder, batch: Batch, j: int, cols: Columns) -> list:
  """The `JaxprEqn`s of jaxpr `j` of `batch`; binds their outputs in
  `decoder.env`. Resolves the kinds the jaxpr uses first (their params may
  refer to earlier jaxprs only)."""
  r, env = decoder.r, decoder.env
  start, stop = batch.starts[j], batch.starts[j + 1]
  env += batch.new_vars[batch.out_starts[j]:batch.out_starts[j + 1]]
  if start == stop:
    return []
  kind_ids = batch.kind_ids[start:stop]
  used = batch.used[j]
  kinds = r.kinds
  try:
    for k, _ in used:
      if kinds[k] is None:
        resolve_kind(r, k)
  except validate.DECODE_ERRORS as error:
    _raise_for_first_bad_kind(r, kind_ids, k, error)

  # The equations, in one pass over per-equation columns. Equation e's
  # inputs are ins[in_bounds[e]:in_bounds[e + 1]], its outputs likewise.
  ins, new_vars = batch.ins, batch.new_vars
  in_bounds = batch.in_bounds[start:stop + 1]
  out_bounds = batch.out_bounds[start:stop + 1]
  new_eqn, no_effects = compat.JaxprEqn, compat.no_effects
  # Primitives and params gathered apart: cheaper than two subscripts of a
  # Kind per equation.
  kind_primitives, kind_params = batch.kind_primitives, batch.kind_params
  for k, _ in used:
    if kind_primitives[k] is None:
      kind_primitives[k], kind_params[k] = kinds[k].primitive, kinds[k].params
  primitives = kind_primitives[kind_ids].tolist()
  param_dicts = kind_params[kind_ids].tolist()
  eqns = [new_eqn(ins[a:b], new_vars[c:d], primitive, params, no_effects,
                  source_info, ctx)
          for primitive, params, a, b, c, d, source_info, ctx in zip(
              primitives, param_dicts,
              in_bounds, in_bounds[1:], out_bounds, out_bounds[1:],
              batch.source_infos[start:stop], batch.contexts[start:stop])]
  polyfill_equations(r, j, kind_ids, eqns)  # usually nothing to do
  _set_effects(r, env, batch, start, kind_ids, cols, eqns)

  used_kinds = [k for k, _ in used]
  if compat.MERGED_JAXPRS:
    _close_over_inputs(r, kinds, kind_ids, used_kinds, eqns)
  # See compat.DICT_NO_EFFECTS; only programs that use such a primitive pay.
  if any(kinds[k].primitive.name in compat.DICT_NO_EFFECTS
         for k in used_kinds):
    for i, e in enumerate(eqns):
      if e.primitive.name in compat.DICT_NO_EFFECTS and not e.effects:
        eqns[i] = new_eqn(e.invars, e.outvars, e.primitive, e.params, {},
                          e.source_info, e.ctx)

  # Equations with checks of their own; only programs that use such
  # primitives pay.
  equation_checks.check(eqns, {kinds[k].primitive.name for k in used_kinds},
                        r.screen.trusted)

  # Sub-jaxprs referenced (for the nesting depth and the inlined size), and
  # what screens dropped.
  for k, count in used:
    kind = kinds[k]
    decoder.refs += kind.refs
    decoder.size += kind.weight * count
    for primitive, param in kind.drops:
      r.screen.drop(primitive, param, count)
  return eqns


def _set_effects(r, env, batch: Batch, start: int, kind_ids, cols: Columns,
                 eqns: list) -> None:
  """Gives the equations with stored effects their effects (most have
  none)."""
  new_eqn = compat.JaxprEqn
  try:
    for i, messages in cols.effects.items():
      e = eqns[i]
      bound = int(batch.first_out[start + i])  # variables it may name
      eqns[i] = new_eqn(e.invars, e.outvars, e.primitive, e.params,
                        {r.effect(m, env, bound) for m in messages},
                        e.source_info, e.ctx)
  except validate.DECODE_ERRORS as error:
    raise FormatError(f"equation {i} ({_name(r, kind_ids[i])}): "
                      f"{validate.describe_error(error)}") from None


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


def _equation_of(position: int, in_ends: np.ndarray) -> int:
  """The equation whose inputs hold flat input `position` (`in_ends`: where
  each equation's inputs end)."""
  return int(np.searchsorted(in_ends, position, side="right"))


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


def _name(reader, k) -> str:
  primitive = reader.kind_keys[k][0] if k is not None else None
  if primitive is None or primitive >= len(reader.strings):
    return "?"
  return reader.strings[primitive]
