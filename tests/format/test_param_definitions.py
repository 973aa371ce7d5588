"""The param schema holds what the running release's rules for each
primitive accept (issue 37), read at test time from the rules JAX registers
(jaxpr_io/compat/param_definitions.py). The committed
jaxpr_io/format/param_schema.json fails here when a rule of this release
names a param it lacks: regenerate it as docs/format.md says.

The expected sets below were read from JAX's source of 0.10.2, 0.11.2 and
0.12.0.1 (jax/_src/lax/lax.py, control_flow/loops.py, conditionals.py).
"""

from __future__ import annotations

from jaxpr_io import compat
from jaxpr_io.codec import registry
from jaxpr_io.compat import param_definitions
from jaxpr_io.format import param_schema


def _definition(prim):
  return param_definitions.definition(prim)


def _prim(name: str):
  return registry.PRIMITIVES.all()[name]


def test_definitions_of_primitives_read_from_jax_source():
  # lax.conj binds input_dtype; only the transpose rule names it, and the
  # other rules take **params: named, not required, any name accepted.
  conj = _definition(_prim("conj"))
  assert conj.named == {"input_dtype": False} and conj.accepted is None
  assert set(conj.kinds["input_dtype"]) == {"dtype", "type"}
  # cbrt's lowering (_nary_lower_hlo) takes accuracy=None: optional.
  cbrt = _definition(_prim("cbrt"))
  assert cbrt.named == {"accuracy": False} and cbrt.optional == {"accuracy"}
  # reduce_precision's shape rule: (operand, *, exponent_bits, mantissa_bits).
  rp = _definition(_prim("reduce_precision"))
  assert rp.named == {"exponent_bits": True, "mantissa_bits": True}
  assert rp.accepted == {"exponent_bits", "mantissa_bits"}
  # dot_general: its transpose rule's swap_ans and its dtype rule's name
  # (keywords with defaults) fail at the closed shape rule: not params.
  dot = _definition(_prim("dot_general"))
  assert set(dot.named) == {"dimension_numbers", "precision",
                            "preferred_element_type", "out_sharding"}
  ragged = _definition(_prim("ragged_dot_general"))
  assert set(ragged.named) == {
      "ragged_dot_dimension_numbers", "precision", "preferred_element_type",
      "group_offset", "out_sharding"}
  assert set(ragged.kinds["preferred_element_type"]) == {"dtype", "type",
                                                         "none"}
  # cond's abstract eval: (*avals, branches, **_).
  cond = _definition(_prim("cond"))
  assert cond.named == {"branches": True} and cond.accepted is None
  scan = _definition(_prim("scan"))
  assert {"jaxpr", "length", "reverse", "unroll"} <= set(scan.named)
  assert all(scan.named.values())


def test_schema_holds_every_param_the_rules_name():
  table = param_schema.table()
  missing, over_required, seen = [], [], 0
  for name, prim in sorted(registry.PRIMITIVES.all().items()):
    schema = table.get(compat.ADAPTER.format_name(name))
    if schema is None:
      continue
    seen += 1
    d = _definition(prim)
    # A named param without any kind (a helper's keyword that no binding
    # site passes, such as naryop_dtype_rule's allow_extended_dtype) is left
    # out on purpose (schema/vocabulary_scan.py, write_schema).
    missing += [(name, p) for p in d.named
                if p in d.kinds and p not in schema.params]
    over_required += [(name, p) for p in schema.required & d.optional]
  assert seen > 100
  assert not missing, f"the schema lacks params this release's rules name: {missing}"
  assert not over_required, f"required, but JAX runs without: {over_required}"


def test_conj_and_cbrt_params_are_in_the_schema():
  table = param_schema.table()
  assert "input_dtype" in table["conj"].params
  assert "accuracy" in table["cbrt"].params
  assert "accuracy" not in table["cbrt"].required
  assert "type" in table["ragged_dot_general"].params["preferred_element_type"]


def test_annotation_objects_give_the_kinds_of_their_text():
  # A rule module without `from __future__ import annotations` holds
  # annotation objects: their kinds are those of the same annotation as
  # text.
  import inspect  # pylint: disable=import-outside-toplevel
  import typing  # pylint: disable=import-outside-toplevel

  def kinds(annotation):
    return param_definitions._kinds(inspect.Parameter(  # pylint: disable=protected-access
        "p", inspect.Parameter.KEYWORD_ONLY, annotation=annotation))

  for obj, text in ((typing.Optional[int], "Optional[int]"),
                    (typing.Optional[bool], "bool | None"),
                    (int | None, "int | None"), (bool, "bool"),
                    (tuple[int, ...], "tuple[int, ...]"),
                    (typing.Union[int, str], "Union[int, str]")):
    assert kinds(obj) == kinds(text), (obj, text)
  assert kinds("Optional[int]") == ("int+", "none")


def test_transformation_rules_read_from_jax_source():
  # jax/_src/lax/lax.py of 0.10.2-0.12.0.1: deflinear2(neg_p, lambda t,
  # operand: [neg(t)]); defjvp(sin_p, lambda g, x, accuracy: ...);
  # defbilinear(mul_p, _mul_transpose_left(ct, x, y, *, out_dtype), ...).
  # Rules registered directly are read where JAX calls them with
  # **params: JVP rules (slice's `_slice_jvp_rule(primals, tangents, *,
  # start_indices, limit_indices, strides)`, sub's closed `_sub_jvp(primals,
  # tangents)`); a fancy transpose (slice's, 0.10.2's custom_jvp_call's,
  # which takes the params as one dict) and rules taking **params (exp's)
  # are not read.
  from jaxpr_io.compat import rule_params  # pylint: disable=g-import-not-at-top
  keywords = lambda name: {r.role: r for r in
                           rule_params.transform_rule_keywords(_prim(name))}
  assert keywords("neg")["transpose"].takes == {"t", "operand"}
  sin = keywords("sin")["JVP"]
  assert sin.takes == {"g", "x", "accuracy"}
  assert sin.required(1) == ["accuracy"]
  mul = keywords("mul")["transpose"]
  assert {"ct", "x", "y", "out_dtype"} <= mul.takes
  assert mul.required(2) == ["out_dtype"]
  slice_jvp = keywords("slice")["JVP"]
  assert slice_jvp.keywords(1) == {"start_indices", "limit_indices",
                                   "strides"}
  assert sorted(slice_jvp.required(1)) == ["limit_indices", "start_indices",
                                           "strides"]
  assert keywords("sub")["JVP"].keywords(2) == frozenset()
  assert set(keywords("slice")) == {"JVP"}
  for name in ("custom_jvp_call", "exp"):
    assert keywords(name) == {}, name
