"""Mosaic TPU's `emit_pipeline` primitive in each release's form.

JAX 0.10 binds it with its operands in one flat list described by counts
(`body_consts_len`, `_num_extra_dynamic`) and `_static_grid_offsets`; from
0.11 on its operands are an `EmitPipelinePrimitiveArgs` pytree (`args_tree`)
with the refs' own tree (`refs_tree`), `_explicit_indices` and `num_cores`
(0.12 added `output_wait_read_only`: vocabulary.OPTIONAL_PARAMS). The two
forms lay the operands out differently, so neither is rewritten into the
other: a release refuses the other's, naming the param.
"""

from __future__ import annotations

from jaxpr_io.format import vocabulary
from jaxpr_io.errors import FormatError

_FORM_010 = ("body_consts_len", "_static_grid_offsets", "_num_extra_dynamic")
_FORM_011 = ("refs_tree", "_explicit_indices", "num_cores")


def emit_pipeline_from_format(form: str):
  """The adapter rule that reads `emit_pipeline`'s params under a release of
  `form` ("0.10" or "0.11")."""
  ours, theirs = ((_FORM_010, _FORM_011) if form == "0.10"
                  else (_FORM_011, _FORM_010))

  def rule(params, where):
    for name in theirs:
      if name in params:
        raise FormatError(vocabulary.unrepresentable(
            where, "emit_pipeline", name, params[name],
            f"this JAX's emit_pipeline (the {form} form) lays out its "
            "operands differently"))
    for name in ours:
      if name not in params:
        raise FormatError(f"emit_pipeline: the param {name!r} of this "
                          "JAX's form is missing")
    return params
  return rule
