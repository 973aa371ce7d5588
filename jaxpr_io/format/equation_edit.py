"""Editing a file's equations at the protobuf level, for tools and tests:
the columns of a version 3+ jaxpr message (`Jaxpr.equations`) as one
`Equation` message per equation (the form of versions 1-2), and back."""

from __future__ import annotations

import numpy as np

from jaxpr_io.format import _proto as pb

_U32 = np.dtype("<u4")
_I32 = np.dtype("<i4")


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


def pack(program_msg, jaxpr_msg, eqns, kind_index: dict | None = None
         ) -> None:
  """Stores `Equation` messages as the columns of `jaxpr_msg`, adding the
  kinds they need to `program_msg.equation_kinds` (the inverse of
  `unpack`). Values are stored as given, unchecked, so that tests can build
  malformed files. A caller packing many jaxprs into one program may pass
  the same `kind_index` dict (empty at first) to every call, so that the
  kinds are not re-indexed each time."""
  index = kind_index if kind_index is not None else {}
  for i in range(len(index), len(program_msg.equation_kinds)):
    k = program_msg.equation_kinds[i]
    index[(k.primitive, k.param_set, k.num_invars, k.num_outvars)] = i
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
