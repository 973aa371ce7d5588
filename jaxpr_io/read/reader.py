"""File bytes -> ClosedJaxpr + signature, validated while it is rebuilt.

Trust model: the reader treats the file as untrusted data. It never unpickles,
evaluates or imports anything the file names; primitives, enum and record
types, pytree nodes and PRNG implementations are looked up in registries of
the loading process. Every table reference is range-checked, every variable
reference must name a variable bound earlier in the same jaxpr, sub-jaxprs
may only refer to sub-jaxprs before them (so there are no cycles and nesting
is bounded), and array data must have exactly the bytes its type declares.
Values are validated before they reach a JAX constructor (dimension
expressions by jaxpr_io/format/dim_grammar.py, param types by jaxpr_io/safety/validate.py,
records by their codecs), the objects a load builds are charged against a
memory budget before they are built, and params that reach past the
computation pass jaxpr_io/safety/trust.py. Any violation raises `FormatError`
naming the place. Building the program does not call JAX's abstract
evaluation; `check=True` (jaxpr_io/api/program.py) does, and more.

This module orchestrates a load: the memory budget, the string, param set
and equation kind tables, the jaxprs (their variables, equations through
jaxpr_io/read/equations.py, effects) and the signature. Avals and arrays are read
by jaxpr_io/read/avals.py, equation contexts and name stacks by
jaxpr_io/read/contexts.py, both parts of `Reader`.
"""

from __future__ import annotations

import gc
from typing import Any

import numpy as np
from google.protobuf.message import DecodeError

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io import families
from jaxpr_io.compat import polyfills as compat_polyfills
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.format import container
from jaxpr_io.read import equations
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.codec import library_table as libraries
from jaxpr_io.codec import params
from jaxpr_io.pytree import codec as pytrees  # noqa: F401  (registers the treedef param codecs)
from jaxpr_io.read import avals as read_avals
from jaxpr_io.read import contexts as read_contexts
from jaxpr_io.codec import registry
from jaxpr_io.pytree import read as tree_read
from jaxpr_io.safety import costs
from jaxpr_io.safety import trust
from jaxpr_io.safety import validate
from jaxpr_io.format import vocabulary
from jaxpr_io.format import limits
from jaxpr_io.errors import FormatError

_SIZE_CAP = 1 << 62
MAX_JAXPR_DEPTH = limits.MAX_JAXPR_DEPTH
# The budget of an untrusted load (jaxpr_io/format/limits.py).
MEMORY_FACTOR = limits.MEMORY_FACTOR
FIXED_OVERHEAD = limits.FIXED_OVERHEAD
# A variable, charged for the outputs of version 1-2 equations beyond the
# one per equation that `costs.stored_counts` counts.
_VAR_COST = costs.FLOOR["variable"].charge


def parse_program(data: bytes, source: str):
  message = pb.Program()
  try:
    message.ParseFromString(data)
  except DecodeError as e:
    raise FormatError(f"{source}: the program message does not parse: "
                      f"{e}") from None
  return message


class Reader(read_avals.AvalReader, read_contexts.ContextReader):
  """Rebuilds the objects of one `Program` message: its tables, then its
  jaxprs. Avals and arrays are `read_avals.AvalReader`'s job, equation
  contexts and name stacks `read_contexts.ContextReader`'s; this class
  holds the state they share and orchestrates the load."""

  # True while a pytree node's auxdata is read: records of libraries that
  # are not installed become placeholders (params.decode_record). A class
  # attribute, so that the hot `params.decode_value` finds it at once.
  unloaded_records_ok = False
  # Whether the param being decoded holds Equinox's closure-converted
  # jaxprs (`libraries.UNVALUED_CONSTS_PARAMS`; params.decode_jaxpr).
  unvalued_consts_slot = False

  def __init__(self, msg, blobs: container.Container, *, verify_blobs: bool,
               trusted: bool = False):
    self.msg = msg
    self.format_version = msg.format_version
    self.screen = trust.Screen(trusted)
    self.container = blobs
    self.source = blobs.source
    self.verify_blobs = verify_blobs
    self.pending_blobs: set[int] = set()
    self.strings = msg.strings[:]
    self.avals: list[Any] = []
    # Whether an aval is a box's or a log's (format version 8).
    self.has_hi_mutable = False
    self._arrays: list[Any] = [None] * len(msg.arrays)
    self._array_done = [False] * len(msg.arrays)
    self.contexts: list[Any] = [None] * len(msg.eqn_contexts)
    self.jaxprs: list[Any] = []
    self._depths: list[int] = []
    self._param_sets: list[Any] = [None] * len(msg.param_sets)
    self._closed: list[Any] = [None] * len(msg.closed_jaxprs)
    self._primitives: dict[str, Any] = {}
    self._scope = None
    self._dim_costs = None  # dim_cost.Scope of `_scope`
    self._dims: dict[str, Any] = {}
    # Per name stack index: the equations' shared `SourceInfo`
    # (`decode_name_stacks`).
    self.source_infos: list[Any] = [None] * len(msg.name_stacks)
    self._source_info_array: np.ndarray | None = None
    self._context_array: np.ndarray | None = None
    self._name_entries: dict[tuple[int, int], Any] = {}
    # Equation kinds: (primitive string, param set, #inputs, #outputs) of
    # each, and, once checked, the `equations.Kind` its equations share
    # (None if not checked yet or not shareable). Files of versions 1-2 have
    # no kinds table: `legacy_kind` numbers their kinds as they are met.
    self.kind_keys: list[tuple[int, int, int, int]] = [
        (k.primitive, k.param_set, k.num_invars, k.num_outvars)
        for k in msg.equation_kinds[:]]
    if len(set(self.kind_keys)) != len(self.kind_keys):
      raise FormatError("the equation kinds table holds a kind twice")
    if self.kind_keys and msg.format_version < 3:
      raise FormatError(f"a version {msg.format_version} file has an "
                        "equation kinds table (added in version 3)")
    self.kinds: list[Any] = [None] * len(self.kind_keys)
    self._kind_index: dict[tuple[int, int, int, int], int] = {}
    self._kind_arity: tuple[np.ndarray, np.ndarray] | None = None
    self.tree_memo = tree_read.TreeMemo(msg)
    # Nodes and leaves of the file's pytrees, shared nodes expanded, counted
    # before a tree is built (`charge_tree`).
    self.tree_counts = costs.TreeCounts(msg)
    # Equations stored in the file, and those with their inputs and outputs
    # (`charge_tables`): what check=True's limit on inlined equations is
    # proportional to.
    self.stored_equations = 0
    self.stored_size = 0
    # Array index -> (value, aval) of a literal, checked once.
    self._literals: dict[int, tuple] = {}
    # Jaxpr indices referenced by the param set being decoded, for each
    # jaxpr's nesting depth and its size with shared sub-jaxprs inlined.
    self._refs: list[int] | None = None
    # Jaxpr references read so far, and top-level param values by their
    # bytes (`params.decode_value`).
    self.jaxpr_refs_seen = 0
    self.value_memo: dict[bytes, Any] = {}
    self.sizes: list[int] = []
    # Kinds whose primitive this JAX lacks and expresses with a polyfill
    # (kind index -> primitive name), and the equations built from them:
    # (jaxpr index, equation index, primitive name).
    self.polyfilled_kinds: dict[int, str] = {}
    self.polyfilled: list[tuple[int, int, str]] = []
    self.where = vocabulary.Where(blobs.source, msg.producer.jax_version,
                                  compat.JAX_VERSION)
    # What the load may still build beyond the objects the file stores;
    # `charge_tables` sets it (jaxpr_io/safety/costs.py `expansion_budget`).
    self._budget = (None if trusted else
                    MEMORY_FACTOR * len(blobs.buffer) + FIXED_OVERHEAD)
    # What JAX's decision procedure may still take (avals.py `_decided`).
    self.decision_steps = None if trusted else limits.DECISION_STEPS

  # ----------------------------------------------------- resource limits
  def charge(self, nbytes: int, what: str) -> None:
    """Counts `nbytes` of objects about to be built against the budget."""
    if self._budget is None:
      return
    self._budget -= nbytes
    if self._budget < 0:
      raise FormatError(
          f"{what} would take more memory than an untrusted file of "
          f"{len(self.container.buffer):,} bytes may ask for beyond the "
          f"objects it stores ({MEMORY_FACTOR}x its size + "
          f"{FIXED_OVERHEAD >> 20} MiB); load it with trusted=True if you "
          "know where it comes from")

  def charge_tables(self) -> None:
    """Counts what the file stores and sets the load's budget before
    anything is built: the objects the file stores cost their floor
    (jaxpr_io/safety/costs.py `FLOOR`), bounded by the file's size, and
    everything built beyond them is charged against `expansion_budget`, so
    a file cannot make the reader allocate first and refuse later."""
    m = self.msg
    jaxprs = m.jaxprs[:]
    counts = costs.stored_counts(m, len(self.container.program))
    self.stored_equations = counts["equation"]
    self.stored_size = self.stored_equations + sum(
        (len(j.equations.invars) + len(j.equations.outvars)) // 4
        + sum(len(e.invars) + len(e.outvars) for e in j.eqns)  # versions 1-2
        for j in jaxprs)
    if self._budget is not None:
      self._budget = costs.expansion_budget(counts, len(self.container.buffer))

  def charge_tree(self, msg, what: str, expected_leaves: int | None = None
                  ) -> None:
    """Counts the tree of `PyTree` message `msg` with every use of a shared
    node expanded, and charges it before it is built (the "pytree nodes"
    and "pytree leaves" rows of jaxpr_io/safety/costs.py): a file of a few
    hundred bytes can describe a tree of 2**40 nodes. A signature
    (`expected_leaves` given) may not have more leaves than the program has
    inputs or outputs, trusted or not."""
    counts = self.tree_counts.of(msg)
    if expected_leaves is not None:
      problem = costs.signature_leaves_problem(what, counts[1],
                                               expected_leaves)
      if problem is not None:
        raise FormatError(problem)
    if self._budget is not None:
      self.charge(costs.tree_cost(counts),
                  f"{what} (a pytree of {counts[0]:,} nodes, counting every "
                  "use of a shared node)")

  # ------------------------------------------------------------ helpers
  # Errors are raised without a location; the loops that walk the tables
  # prefix their position ("jaxpr 2, equation 7 (gather), param 'mode'")
  # as the error passes up, and `read` prefixes the file name.
  @staticmethod
  def _index(i: int, table_len: int, what: str) -> int:
    if not 0 <= i < table_len:
      raise FormatError(f"{what} index {i} is out of range (the table has "
                        f"{table_len} entries)")
    return i

  def string(self, i: int) -> str:
    try:
      return self.strings[i]  # indices are uint32: never negative
    except IndexError:
      raise FormatError(f"string index {i} is out of range (the table has "
                        f"{len(self.strings)} entries)") from None

  def string_tuple(self, indices) -> tuple[str, ...]:
    """The strings of a repeated string-index field."""
    try:
      return tuple(map(self.strings.__getitem__, indices[:]))
    except IndexError:
      raise FormatError(f"a string index of {list(indices)!r:.80} is out of "
                        f"range (the table has {len(self.strings)} entries)"
                        ) from None

  def primitive(self, name: str):
    prim = self._primitives.get(name)
    if prim is None:
      prim = registry.PRIMITIVES.lookup(name)
      if prim is None:
        raise FormatError(vocabulary.unknown_primitive(self.where, name))
      self._primitives[name] = prim
    return prim

  def polyfill(self, name: str):
    """The polyfill of primitive `name` (compat/polyfills.py) when this JAX
    lacks it and nobody registered it; else None."""
    if name in self._primitives or registry.PRIMITIVES.lookup(name):
      return None
    return compat_polyfills.lookup(name)

  # --------------------------------------------------------- param sets
  def param_set(self, i: int, name: str):
    """The params dict of param set `i`, used by primitive `name`.

    Decoded once and cached; every equation gets its own shallow copy."""
    entry = self._param_sets[self._index(i, len(self._param_sets),
                                         "param set")]
    if entry is None:
      outer_refs, self._refs = self._refs, []
      values: dict[str, Any] = {}
      coded = []
      skipped = compat.ADAPTER.skipped_params
      decoders, shared = params.DECODERS, params.SHARED_KINDS
      for p in self.msg.param_sets[i].params[:]:
        key = self.string(p.name)
        if key in values:
          raise FormatError(f"param set {i}: param {key!r} appears twice")
        if skipped and (name, key) in skipped:
          continue
        value = p.value
        kind = value.WhichOneof("kind")
        try:
          if kind in decoders and kind not in shared:
            # Scalars and other unshared kinds: straight to their decoder
            # (what decode_value would do, without its prologue).
            values[key] = decoders[kind](self, value, 0)
          elif kind == "param_codec":
            codec = registry.EQN_PARAM_CODECS.get((name, key))
            if codec is None:
              raise FormatError(f"{name!r} has no codec for param {key!r}")
            outer, self.unvalued_consts_slot = self.unvalued_consts_slot, (
                (name, key) in libraries.UNVALUED_CONSTS_PARAMS)
            try:
              coded.append((codec, key, params.decode_value(
                  self, value.param_codec)))
            finally:
              self.unvalued_consts_slot = outer
            values[key] = None
          else:
            values[key] = params.decode_value(self, value, 0, kind)
        except validate.DECODE_ERRORS as e:
          raise FormatError(f"param set {i}, param {key!r}: "
                            f"{validate.describe_error(e)}") from None
      for codec, key, stored in coded:
        try:
          values[key] = codec.decode(stored, values)
        except validate.DECODE_ERRORS as e:
          raise FormatError(f"param set {i}, param {key!r}: "
                            f"{validate.describe_error(e)}") from None
      try:
        validate.check_param_values(values)
      except FormatError as e:
        raise FormatError(f"param set {i}: {e}") from None
      entry = self._param_sets[i] = (name, values, tuple(self._refs))
      self._refs = outer_refs
    if entry[0] != name and any(
        (entry[0], key) in registry.EQN_PARAM_CODECS for key in entry[1]):
      raise FormatError(f"param set {i} holds params coded for "
                        f"{entry[0]!r} but is used by {name!r}")
    return dict(entry[1]), entry[2]

  # ----------------------------------------------------- equation kinds
  def legacy_kind(self, primitive: int, param_set: int, n_in: int,
                  n_out: int) -> int:
    """The kind index of an equation of a version 1-2 file."""
    key = (primitive, param_set, n_in, n_out)
    k = self._kind_index.get(key)
    if k is None:
      k = self._kind_index[key] = len(self.kind_keys)
      self.kind_keys.append(key)
      self.kinds.append(None)
    return k

  def kind_arity(self) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, outputs) of each kind, as arrays."""
    if self._kind_arity is None or len(self._kind_arity[0]) != len(
        self.kind_keys):
      keys = np.array(self.kind_keys, np.int64).reshape(-1, 4)
      self._kind_arity = (keys[:, 2].copy(), keys[:, 3].copy())
    return self._kind_arity

  # ------------------------------------------------------------ jaxprs
  def jaxpr(self, i: int):
    """A jaxpr referenced from the jaxpr being built: it must come before."""
    if not 0 <= i < len(self.jaxprs):
      raise FormatError(
          f"jaxpr index {i} does not refer to an earlier jaxpr (only "
          f"{len(self.jaxprs)} are built); sub-jaxprs must precede their "
          "users")
    self.jaxpr_refs_seen += 1
    if self._refs is not None:
      self._refs.append(i)
    return self.jaxprs[i]

  def closed_jaxpr(self, i: int):
    self._index(i, len(self._closed), "closed jaxpr")
    self.jaxpr_refs_seen += 1
    if self._closed[i] is None:
      m = self.msg.closed_jaxprs[i]
      try:
        jaxpr = self.jaxpr(m.jaxpr)
        n_constvars = len(self.msg.jaxprs[m.jaxpr].constvars)
        if len(m.consts) != n_constvars:
          raise FormatError(f"{len(m.consts)} constants for "
                          f"{n_constvars} constvars")
        consts = []
        for var, c in zip(compat.leading_vars(jaxpr, n_constvars), m.consts):
          value = self.array(c)
          aval = self.aval(self.msg.arrays[c].aval)
          if aval != var.aval:
            raise FormatError(f"constant of type {aval.str_short()} for a "
                            f"constvar of type {var.aval.str_short()}")
          consts.append(value)
      except FormatError as e:
        raise FormatError(f"closed jaxpr {i}: {e}") from None
      self._closed[i] = compat.make_closed(jaxpr, consts)
    elif self._refs is not None:
      self._refs.append(self.msg.closed_jaxprs[i].jaxpr)
    return self._closed[i]

  def build_jaxprs(self) -> None:
    messages = self.msg.jaxprs[:]
    decoders, columns = [], []
    for i, m in enumerate(messages):
      decoder = _JaxprDecoder(self, m)
      try:
        decoder.bind_inputs()
        columns.append(equations.columns_of(self, m))
      except FormatError as e:
        raise FormatError(f"jaxpr {i}: {e}") from None
      decoders.append(decoder)
    try:
      batch = equations.prepare(self, [d.env for d in decoders], columns)
    except validate.DECODE_ERRORS as e:
      raise FormatError(validate.describe_error(e)) from None
    for i, (m, decoder, cols) in enumerate(zip(messages, decoders, columns)):
      try:
        self.jaxprs.append(decoder.decode(batch, i, cols))
      except FormatError as e:
        raise FormatError(f"jaxpr {i}: {e}") from None
      if m.eqns:  # versions 1-2: outputs beyond one per equation
        self.charge(max(0, len(decoder.env) - len(m.eqns) - len(m.constvars)
                        - len(m.invars)) * _VAR_COST, f"jaxpr {i}")
      depth = 1 + max((self._depths[j] for j in decoder.refs), default=0)
      if depth > MAX_JAXPR_DEPTH:
        raise FormatError(f"jaxpr {i} nests {depth} levels deep, over the "
                          f"limit of {MAX_JAXPR_DEPTH}")
      self._depths.append(depth)
      self.sizes.append(min(decoder.size, _SIZE_CAP))

  @property
  def expanded_size(self) -> int:
    """Equations of the root program, each with its inputs and outputs,
    with every use of a shared sub-jaxpr counted (what a recursive walk such
    as JAX's type checker visits, and what XLA compiles once calls are
    inlined)."""
    return self.sizes[self.msg.closed_jaxprs[self.msg.root].jaxpr]

  def effect(self, m, env, bound: int | None = None):
    """The effect of message `m`; an input effect may name the first
    `bound` variables of `env` (all of them by default)."""
    name = self.string(m.name)
    singleton = compat_tables.SINGLETON_EFFECTS.get(name)
    if singleton is not None:
      return singleton
    payload = (params.decode_value(self, m.payload)
               if m.HasField("payload") else None)
    if name == "jax.NamedAxisEffect":
      return compat.NamedAxisEffect(payload)
    codec = registry.EFFECTS.by_name.get(name)
    if codec is None and registry.load_more():
      codec = registry.EFFECTS.by_name.get(name)
    if codec is not None:
      return codec.decode(payload)
    cls = compat.INPUT_EFFECTS.get(name)
    if cls is not None:
      if (type(payload) is tuple and len(payload) == 2
          and type(payload[1]) is int):
        if payload[0] == "position":
          return cls(payload[1])
        if payload[0] == "var" and 0 <= payload[1] < (
            len(env) if bound is None else bound):
          return cls(env[payload[1]])
      raise FormatError(f"effect {name!r} has a bad payload {payload!r}")
    raise FormatError(f"unknown effect {name!r}")


class _JaxprDecoder:
  """Rebuilds one jaxpr, binding variables in order and checking uses."""

  def __init__(self, reader: Reader, msg):
    self.r = reader
    self.msg = msg
    self.env: list[Any] = []
    self.constvars: list[Any] = []
    self.invars: list[Any] = []
    self.refs: list[int] = []   # sub-jaxprs referenced by the equations
    self.size = 0               # equations, sub-jaxprs inlined

  def bind(self, aval_index: int, cls=compat.Var):
    var = cls(self.r.aval(aval_index))
    self.env.append(var)
    return var

  def bind_all(self, aval_indices) -> list:
    """Binds a variable of each aval in turn."""
    avals, var = self.r.avals, compat.Var
    try:
      variables = list(map(var, map(avals.__getitem__, aval_indices)))
    except IndexError:
      return [self.bind(a) for a in aval_indices]  # raises the error
    self.env += variables
    return variables

  def atom(self, ref: int):
    r = self.r
    if ref >= 0:
      if ref >= len(self.env):
        raise FormatError(f"variable {ref} is used before it is bound (only "
                     f"{len(self.env)} are bound here)")
      var = self.env[ref]
      if type(var) is compat.DropVar:
        raise FormatError(f"variable {ref} is a dropped output and cannot be used")
      return var
    return r.literal(-1 - ref)

  def effects(self, messages):
    if not messages:
      return compat.no_effects
    return {self.r.effect(m, self.env) for m in messages}

  def bind_inputs(self) -> None:
    """Binds the jaxpr's constvars and invars (variables 0, 1, ...)."""
    m = self.msg
    self.constvars = self.bind_all(m.constvars[:])
    self.invars = self.bind_all(m.invars[:])

  def decode(self, batch, i: int, cols):
    """Jaxpr `i` of the program, its equations from `batch`
    (equations.prepare), after `bind_inputs`."""
    r, m = self.r, self.msg
    constvars, invars = self.constvars, self.invars
    try:
      eqns = equations.build(self, batch, i, cols)
    except validate.DECODE_ERRORS as e:
      raise FormatError(validate.describe_error(e)) from None
    if m.qdds or r.has_hi_mutable:
      # Version 8: boxes' and logs' quasi-dynamic data.
      try:
        hi_mutable.apply_qdds(r, m, self.env, len(constvars) + len(invars))
      except validate.DECODE_ERRORS as e:
        raise FormatError(validate.describe_error(e)) from None
    try:
      outvars = [self.atom(a) for a in m.outvars[:]]
      effects = self.effects(m.effects)
      info = m.debug_info
      # JAX asserts these lengths deep inside transformations (DCE).
      if info.has_arg_names and len(info.arg_names) != len(invars):
        raise FormatError(f"debug info names {len(info.arg_names)} "
                          f"arguments for {len(invars)} inputs")
      if info.has_result_paths and len(info.result_paths) != len(outvars):
        raise FormatError(f"debug info names {len(info.result_paths)} "
                          f"results for {len(outvars)} outputs")
      debug_info = compat.DebugInfo(
          r.string(info.traced_for), r.string(info.func_src_info),
          r.string_tuple(info.arg_names) if info.has_arg_names else None,
          r.string_tuple(info.result_paths) if info.has_result_paths
          else None)
      return compat.new_jaxpr(constvars, invars, outvars, eqns, effects,
                              debug_info, m.is_high)
    except validate.DECODE_ERRORS as e:
      raise FormatError(f"outputs: {validate.describe_error(e)}") from None


def read(data_container: container.Container, *, verify_blobs: bool,
         trusted: bool = False):
  """(closed jaxpr, in_tree, out_tree, message, reader) of a container."""
  # Rebuilding a program allocates tens of thousands of small acyclic
  # objects; the cyclic collector would rescan them many times over (about
  # a quarter of the time of a large load). Reference counting still frees
  # everything; collection resumes, as it was, afterwards.
  was_enabled = gc.isenabled()
  gc.disable()
  try:
    return _read(data_container, verify_blobs=verify_blobs, trusted=trusted)
  finally:
    if was_enabled:
      gc.enable()


def _read(data_container: container.Container, *, verify_blobs: bool,
          trusted: bool):
  source = data_container.source
  families.load_core()  # the rest load if the file names them
  msg = parse_program(data_container.program, source)
  if msg.format_version != data_container.format_version:
    raise FormatError(
        f"{source}: the header says format version "
        f"{data_container.format_version} but the program message says "
        f"{msg.format_version}")
  reader = Reader(msg, data_container, verify_blobs=verify_blobs,
                  trusted=trusted)
  try:
    reader.charge_tables()
    reader.decode_avals()
    reader.decode_name_stacks()
    reader.decode_contexts()
    reader.build_jaxprs()
    closed = reader.closed_jaxpr(msg.root)
    reader.charge_tree(msg.in_tree, "the input signature",
                       len(closed.jaxpr.invars))
    reader.charge_tree(msg.out_tree, "the output signature",
                       len(closed.jaxpr.outvars))
    in_tree, is_call = tree_read.decode_call_signature(reader, msg.in_tree)
    out_tree = tree_read.decode_treedef(reader, msg.out_tree)
  except RecursionError:
    raise FormatError(f"{source}: the program nests too deeply") from None
  except validate.DECODE_ERRORS as e:
    raise FormatError(f"{source}: {validate.describe_error(e)}") from None
  if not is_call:
    raise FormatError(f"{source}: the input signature {in_tree} is not the "
                      "structure of (args tuple, kwargs dict with string "
                      "keys); the program could not be called")
  read_avals.check_boundary_memory_spaces(closed, source)
  if in_tree.num_leaves != len(closed.jaxpr.invars):
    raise FormatError(
        f"{source}: the input signature has {in_tree.num_leaves} leaves but "
        f"the program takes {len(closed.jaxpr.invars)} inputs")
  if out_tree.num_leaves != len(closed.jaxpr.outvars):
    raise FormatError(
        f"{source}: the output signature has {out_tree.num_leaves} leaves "
        f"but the program returns {len(closed.jaxpr.outvars)} outputs")
  return closed, in_tree, out_tree, msg, reader
