"""Encoding one jaxpr: numbering its binders when first bound, its
equations column by column (`Jaxpr.equations`), its effects and debug info.
The tables the jaxpr refers to (avals, params, sub-jaxprs, ...) belong to
the `Writer` (writer.py) that encodes it."""

from __future__ import annotations

from typing import Any

import numpy as np

from jaxpr_io import compat
from jaxpr_io.compat import polyfills as compat_polyfills
from jaxpr_io.compat import tables as compat_tables
from jaxpr_io.format import _proto as pb
from jaxpr_io.codec import params
from jaxpr_io.codec import registry
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.write import arrays
from jaxpr_io.errors import UnsupportedError


class JaxprEncoder:
  """Encodes one jaxpr: numbers its binders and encodes its equations."""

  def __init__(self, writer, jaxpr):
    self.w = writer
    self.jaxpr = jaxpr
    self.env: dict[Any, int] = {}
    # (number, variable) of the variables with quasi-dynamic data (JAX
    # 0.10's boxes and logs: jaxpr_io/families/hijax/mutable.py), in binding order.
    self.qdd_vars: list[tuple[int, Any]] = []

  def bind(self, var) -> None:
    if var in self.env:
      raise UnsupportedError("a variable is bound twice; the jaxpr is "
                             "malformed")
    if compat.var_has_qdd(var):
      self.qdd_vars.append((len(self.env), var))
    self.env[var] = len(self.env)

  def atom(self, atom) -> int:
    if type(atom) is compat.Literal:
      return -1 - self.w.array(atom.val, arrays.host_kind(atom.val), atom.aval)
    number = self.env.get(atom)
    if number is None or type(atom) is compat.DropVar:
      raise UnsupportedError(
          "a variable is used before it is bound; the jaxpr is malformed "
          "(check it with jax.core.check_jaxpr)")
    return number

  def effect(self, effect) -> tuple[str, Any]:
    """(registered name, payload or None) of an effect."""
    name = compat_tables.SINGLETON_EFFECTS.name_of(effect)
    if name is not None:
      return name, None
    t = type(effect)
    if t is compat.NamedAxisEffect:
      return "jax.NamedAxisEffect", effect.name
    name = registry.EFFECTS.by_key.get(t)
    if name is not None:
      return name, registry.EFFECTS.by_name[name].encode(effect)
    name = _INPUT_EFFECT_NAMES.get(t)
    if name is not None:
      if isinstance(effect.input, int):
        return name, ("position", effect.input)
      return name, ("var", self.atom(effect.input))
    raise UnsupportedError(
        f"effect {effect!r} of type {t.__name__} cannot be stored")

  def effects(self, effects, out) -> None:
    # Effects are sets: store them in an order that does not depend on the
    # process (hash seeds), so the bytes are deterministic.
    parts = sorted((self.effect(e) for e in effects),
                   key=lambda p: (p[0], params.canonical_key(p[1])))
    for name, payload in parts:
      message = out.add(name=self.w.string(name))
      if payload is not None:
        params.encode_value(self.w, payload, message.payload)

  def encode(self):
    w, jaxpr = self.w, self.jaxpr
    message = pb.Jaxpr()
    for v in jaxpr.constvars:
      self.bind(v)
      message.constvars.append(w.aval(v.aval))
    for v in jaxpr.invars:
      self.bind(v)
      message.invars.append(w.aval(v.aval))
    columns = _Columns(message.equations)
    for i, eqn in enumerate(jaxpr.eqns):
      try:
        self.equation(i, eqn, columns)
      except UnsupportedError as e:
        # Errors from nested jaxprs pass here at every level, which builds
        # the path: "equation 3 (jit), param 'jaxpr': equation 0 (...), ...".
        raise UnsupportedError(
            f"equation {i} ({eqn.primitive.name}), {e}") from None
    columns.pack()
    if self.qdd_vars:
      hi_mutable.encode_qdds(w, self.qdd_vars, message.qdds)
    message.outvars.extend(self.atom(a) for a in jaxpr.outvars)
    self.effects(jaxpr.effects, message.effects)
    self.debug_info(jaxpr.debug_info, message.debug_info,
                    len(jaxpr.invars), len(jaxpr.outvars))
    message.is_high = jaxpr.is_high
    return message

  def equation(self, i: int, eqn, columns: "_Columns") -> None:
    w, env = self.w, self.env
    # The equation in the format's vocabulary (jaxpr_io/format/vocabulary.py).
    fill = compat_polyfills.original(eqn.primitive, eqn.params)
    if fill is not None:
      # A polyfill's call stands for the file's equation: write that.
      name, eqn_params = fill
    else:
      name, eqn_params = compat.ADAPTER.to_format(
          w.primitive(eqn.primitive), eqn.params)
    for a in eqn.invars:
      number = env.get(a) if type(a) is compat.Var else None
      columns.invars.append(self.atom(a) if number is None else number)
    outvars = columns.outvars
    for v in eqn.outvars:
      if type(v) is compat.DropVar:
        columns.dropped.append(len(outvars))
        env[object()] = len(env)  # numbers a slot nobody can use
      else:
        self.bind(v)
      outvars.append(w.aval(v.aval))
    in_avals = (tuple([a.aval for a in eqn.invars])
                if name in registry.INPUT_TYPED_PRIMITIVES else None)
    columns.kinds.append(w.equation_kind(
        name, w.param_set(name, eqn_params, in_avals), len(eqn.invars),
        len(eqn.outvars), None if fill is not None else eqn.primitive,
        eqn.params))
    if eqn.effects:
      self.effects(eqn.effects, columns.effects.add(equation=i).effects)
    columns.contexts.append(w.eqn_context(eqn.ctx))
    columns.name_stacks.append(w.name_stack(eqn.source_info.name_stack))

  def debug_info(self, info, out, n_in: int, n_out: int) -> None:
    """The debug info of a jaxpr of `n_in` inputs and `n_out` outputs. Its
    argument names and result paths are kept only where there is one per
    input and output: some jaxprs have names that do not match (the JVP
    rule of `jax.scipy.special.log_ndtr`, traced with the debug info of a
    rule that also takes the static `series_order`), and the reader refuses
    those lengths, which JAX asserts inside transformations (DCE); JAX's
    own default, no names, is stored instead."""
    w = self.w
    out.traced_for = w.string(info.traced_for)
    out.func_src_info = w.string(info.func_src_info)
    if info.arg_names is not None and len(info.arg_names) == n_in:
      out.has_arg_names = True
      out.arg_names.extend(w.string(n) for n in info.arg_names)
    paths = info.result_paths
    if paths is not None and not isinstance(paths, tuple):
      paths = tuple(paths())
    if paths is not None and len(paths) == n_out:
      out.has_result_paths = True
      out.result_paths.extend(w.string(p) for p in paths)


class _Columns:
  """The `Equations` message `out` of one jaxpr: its columns are gathered
  as Python lists and packed at the end; effects go to `out` directly."""

  def __init__(self, out):
    self.out = out
    self.kinds: list[int] = []
    self.invars: list[int] = []
    self.outvars: list[int] = []
    self.name_stacks: list[int] = []
    self.contexts: list[int] = []
    self.dropped: list[int] = []
    self.effects = out.effects

  def pack(self) -> None:
    """Writes the gathered columns into `out`."""
    out, refs = self.out, self.invars
    if refs and not _INT32_MIN <= min(refs) <= max(refs) <= _INT32_MAX:
      raise UnsupportedError(
          "a jaxpr refers to more than 2**31 variables or arrays, more than "
          "the format's int32 references hold")
    out.kinds = np.asarray(self.kinds, "<u4").tobytes()
    out.invars = np.asarray(refs, "<i4").tobytes()
    out.outvars = np.asarray(self.outvars, "<u4").tobytes()
    out.name_stacks = np.asarray(self.name_stacks, "<u4").tobytes()
    out.contexts = np.asarray(self.contexts, "<u4").tobytes()
    out.dropped = np.asarray(self.dropped, "<u4").tobytes()


_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


_INPUT_EFFECT_NAMES = {cls: n for n, cls in compat.INPUT_EFFECTS.items()}
