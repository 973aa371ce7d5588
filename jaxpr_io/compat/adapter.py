"""The base of every JAX release's adapter: maps between the release's
equations and the format's vocabulary (jaxpr_io/format/vocabulary.py).

An adapter is one object per release line (`jaxpr_io.compat.ADAPTER`). The
base class implements what every release shares: primitive renames,
per-primitive param rules, and the vocabulary's optional params
(`vocabulary.OPTIONAL_PARAMS`), which a release either has (the writer stores
them, the reader fills in the default when the file's writer lacked them) or
lacks (the reader drops them when they hold the default and refuses other
values); which releases have them is part of the vocabulary.
Subclasses (jax_0_10.py, jax_0_11.py, jax_0_12.py) fill in the tables.
"""

from __future__ import annotations

from typing import Any, Callable

from jaxpr_io.format import vocabulary
from jaxpr_io.errors import FormatError

ToFormat = Callable[[dict], dict]
FromFormat = Callable[[dict, "vocabulary.Where"], dict]


class Adapter:
  """Identity mapping; subclasses set the tables below."""

  release_line = "?"
  # This release's primitive name -> vocabulary name (and the reverse, with
  # extra vocabulary names this release reads as one of its primitives).
  name_to_format: dict[str, str] = {}
  name_from_format: dict[str, str] = {}
  # Per vocabulary primitive: rules that change params (on a fresh dict).
  params_to_format: dict[str, ToFormat] = {}
  params_from_format: dict[str, FromFormat] = {}
  # The `vocabulary.RELEASE_HINT_PARAMS` this release does not use: the
  # reader skips them without decoding their values.
  skipped_params: frozenset = frozenset()
  # Record types only this release has: (class, name, encode, decode).
  record_codecs: list = []
  # Programs that this release's XLA aborts the process on while compiling
  # (XLA bugs any JAX program can hit): `check=True` and the first call
  # refuse them instead. See validate.KNOWN_COMPILER_ABORTS.
  compiler_aborts: frozenset = frozenset()
  # JAX's own hi primitive classes (the `_prim` param of
  # `call_hi_primitive`) that this release defines: stable serialized name
  # -> class. jaxpr_io/families/hijax/prims.py stores exactly these; the names are part
  # of the format and MUST stay the same across releases.
  hi_prim_classes: dict[str, type] = {}
  # The base class(es) of every hi primitive of this release, JAX's own and
  # the user's (jax.experimental.hijax): what `dumps` refuses by name when
  # a class is not in `hi_prim_classes`.
  hi_prim_bases: tuple[type, ...] = ()

  def __init__(self):
    # Vocabulary names that `from_format` may change.
    self._touched = frozenset(
        {*self.name_from_format, *self.params_from_format,
         *vocabulary.OPTIONAL_PARAMS})

  def format_name(self, name: str) -> str:
    """The vocabulary name of this release's primitive `name`."""
    return self.name_to_format.get(name, name)

  def to_format(self, name: str, params: dict) -> tuple[str, dict]:
    """(vocabulary name, vocabulary params) of an equation of this release.
    Returns `params` itself when nothing changes (the writer caches by it)."""
    name = self.name_to_format.get(name, name)
    rule = self.params_to_format.get(name)
    return name, (params if rule is None else rule(dict(params)))

  def from_format(self, name: str, params: dict,
                  where: vocabulary.Where) -> tuple[str, dict]:
    """(this release's primitive name, params) of a vocabulary equation.
    `params` is a fresh dict that this may change."""
    if name not in self._touched:  # most equations: nothing to map
      return name, params
    for param, (default, _) in vocabulary.OPTIONAL_PARAMS.get(name, {}).items():
      if where.reader_has(name, param):
        # Only a file from a release without the param lacks it for sure;
        # JAX's own code may bind the primitive without it, too.
        if not where.writer_had(name, param):
          params.setdefault(param, default)
      elif param in params:
        value = params.pop(param)
        if not _same(value, default):
          raise FormatError(vocabulary.unrepresentable(
              where, name, param, value,
              f"this JAX's {name} has no {param!r} param; it behaves as "
              f"{param}={default!r}"))
    rule = self.params_from_format.get(name)
    if rule is not None:
      params = rule(params, where)
    return self.name_from_format.get(name, name), params

  def future_done(self, aval):
    """The primitive whose `bind` a `core.AbstractFuture` holds as its
    `done_fun` (JAX 0.11+), or None: JAX 0.10's futures hold none."""
    del aval
    return None

  def new_future(self, inner_aval, done):
    """A `core.AbstractFuture` resolving to `inner_aval`; `done` is the
    primitive that resolves it or None. Subclasses build it."""
    raise NotImplementedError

  def context_to_format(self, ctx) -> dict:
    """Equation-context settings beyond JAX 0.10's (see EqnContext in the
    schema): {"layout_mode": str, "no_collectives": frozenset}."""
    del ctx
    return {}

  def context_from_format(self, layout_mode: str, no_collectives: frozenset,
                          where: vocabulary.Where) -> dict:
    """Fields for `compat.new_eqn_context` from the vocabulary's settings;
    by default the release has neither setting."""
    if layout_mode != "AUTO":
      raise FormatError(vocabulary.unrepresentable(
          where, "equation context", "layout_mode", layout_mode,
          "this JAX has no layout tracing modes"))
    if no_collectives:
      raise FormatError(vocabulary.unrepresentable(
          where, "equation context", "no_collectives", no_collectives,
          "this JAX cannot forbid collectives"))
    return {}


def _same(value: Any, default: Any) -> bool:
  return type(value) is type(default) and value == default
