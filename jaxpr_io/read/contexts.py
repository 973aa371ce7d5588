"""Program message tables -> equation contexts and name stacks: what the
equations of a load share besides their params.

`ContextReader` is a part of `jaxpr_io.read.reader.Reader` (a mixin of it): it
builds every `JaxprEqnContext` (compute type, mesh, XLA metadata, layout
mode, collectives) and every name stack with the `SourceInfo` its equations
share, checking that each stack's parent comes before it and charging the
stacks' entries against the load's memory budget before they are built.
Equations gather both from object arrays (`source_info_array`,
`context_array`). Violations raise `FormatError` without a location, which
the reader prefixes. Its state (`contexts`, `source_infos`,
`_name_entries`, `_source_info_array`, `_context_array`) is set up by
`Reader.__init__`.
"""

from __future__ import annotations

import numpy as np

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.read import equations
from jaxpr_io.codec import params
from jaxpr_io.safety import costs
from jaxpr_io.safety import validate
from jaxpr_io.errors import FormatError

_NAME_ENTRY_TYPES = {pb.NameStackKind["SCOPE"]: compat.NameScope,
                     pb.NameStackKind["TRANSFORM"]: compat.NameTransform}


class ContextReader:
  """The equation contexts and name stacks of a `Reader`'s program (see the
  module doc)."""

  def decode_contexts(self) -> None:
    """Builds every equation context."""
    for i, m in enumerate(self.msg.eqn_contexts[:]):
      try:
        self.contexts[i] = self._eqn_context(m)
      except validate.DECODE_ERRORS as e:
        raise FormatError(f"eqn context {i}: "
                          f"{validate.describe_error(e)}") from None

  def _eqn_context(self, m):
    """The `JaxprEqnContext` of an `EqnContext` message."""
    compute_type = (None if m.compute_type == 0
                    else self.string(m.compute_type - 1))
    mesh = params.decode_value(self, m.cur_abstract_mesh)
    if type(mesh) is not compat.AbstractMesh:
      raise FormatError("an equation context's mesh is not an AbstractMesh")
    xla_metadata = (params.decode_value(self, m.xla_metadata)
                    if m.HasField("xla_metadata") else None)
    if xla_metadata is not None:
      try:
        xla_metadata = dict(xla_metadata)
      except (TypeError, ValueError):
        raise FormatError("xla_metadata is not a tuple of pairs") from None
    layout_mode = ("AUTO" if m.layout_mode == 0
                   else self.string(m.layout_mode - 1))
    no_collectives = (params.decode_value(self, m.no_collectives)
                      if m.HasField("no_collectives") else frozenset())
    if type(no_collectives) is not frozenset:
      raise FormatError("no_collectives is not a frozenset")
    extra = compat.ADAPTER.context_from_format(layout_mode, no_collectives,
                                               self.where)
    return compat.new_eqn_context(
        **extra,
        compute_type=compute_type,
        threefry_partitionable=m.threefry_partitionable,
        cur_abstract_mesh=mesh,
        remove_size_one_mesh_axis=m.remove_size_one_mesh_axis,
        xla_metadata=None if xla_metadata is None
        else tuple(sorted(xla_metadata.items())))

  def source_info_array(self) -> np.ndarray:
    """`source_infos` as an object array (equations gather from it)."""
    if self._source_info_array is None:
      self._source_info_array = equations.objects(self.source_infos)
    return self._source_info_array

  def context_array(self) -> np.ndarray:
    """`contexts` as an object array (equations gather from it)."""
    if self._context_array is None:
      self._context_array = equations.objects(self.contexts)
    return self._context_array

  def _name_entry(self, kind: int, name: int):
    # Entries are immutable and repeat across stacks; building one is slow
    # on JAX 0.12 (a frozen dataclass), so each is built once.
    entry = self._name_entries.get((kind, name))
    if entry is None:
      cls = _NAME_ENTRY_TYPES.get(kind)
      if cls is None:
        raise FormatError(f"unknown name stack entry kind {kind}")
      entry = self._name_entries[kind, name] = cls(self.string(name))
    return entry

  def decode_name_stacks(self) -> None:
    """Builds every name stack and its `SourceInfo`."""
    if self.msg.format_version < 3:
      if self.msg.HasField("name_stack_table"):
        raise FormatError("a file before version 3 has a name stack table")
      for i, m in enumerate(self.msg.name_stacks):
        self.source_infos[i] = compat.SourceInfo(None, compat.NameStack(
            tuple(self._name_entry(e.kind, e.name) for e in m.entries)))
      return
    if self.msg.name_stacks:
      raise FormatError(f"a version {self.msg.format_version} file stores "
                        "`name_stacks` messages; from version 3 on, name "
                        "stacks are in `name_stack_table`")
    table = self.msg.name_stack_table
    parents, kinds, names = (equations.column(table, field, "<u4")
                             for field in ("parents", "kinds", "names"))
    n = len(parents)
    if len(kinds) != n or len(names) != n:
      raise FormatError(f"the name stack table's columns have {n}, "
                        f"{len(kinds)} and {len(names)} entries")
    if n and np.any(parents > np.arange(n)):
      i = int(np.flatnonzero(parents > np.arange(n))[0])
      raise FormatError(f"name stack {i}'s parent {int(parents[i]) - 1} does "
                        "not come before it")
    # Each stack holds a tuple of all its entries: charge them first (a
    # chain of stacks would otherwise cost the square of its length).
    depths = [0] * n
    for i, parent in enumerate(parents.tolist()):
      depths[i] = depths[parent - 1] + 1 if parent else 1
    self.charge(costs.name_stack_cost(sum(depths)), "the name stacks")
    if np.any((kinds == 0) & ((parents != 0) | (names != 0))):
      i = int(np.flatnonzero((kinds == 0) & ((parents != 0) | (names != 0)))[0])
      raise FormatError(f"name stack {i} has no entry of its own but is not "
                        "the empty stack")
    known, entry_of = self._name_entries, self._name_entry
    entries = [(known.get((kind, name)) or entry_of(kind, name)) if kind
               else None for kind, name in zip(kinds.tolist(), names.tolist())]
    tuples: list[tuple] = []  # each stack's entries
    append = tuples.append
    for parent, entry in zip(parents.tolist(), entries):
      prefix = tuples[parent - 1] if parent else ()
      append(prefix if entry is None else prefix + (entry,))
    new_stack, new_info = compat.NameStack, compat.SourceInfo
    self.source_infos = [new_info(None, new_stack(t)) for t in tuples]
