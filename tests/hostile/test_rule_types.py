"""Stored custom rules are typed against their use sites (issue 38):
jaxpr_io/families/custom_rules/rule_types.py and the table "Typing of
stored rules" in docs/trust-model.md.

Before, a file's stored rules were checked by arity only: a 4-element
`custom_jvp` program whose stored JVP rule returns `f32[1]` passed
`check=True` and called correctly, and then `jax.jvp` returned a primal of
shape [1] and `jax.grad` a wrong gradient, silently; a backward rule with a
mistyped cotangent passed `check=True` and then failed inside JAX.

Each hostile file below is a real saved program with a stored rule's types
edited at the protobuf level, so that the rule's body still type-checks on
its own: each loads in a subprocess with a memory limit and must raise a
FormatError naming the equation, the rule and its pattern, and the type
expected and found, within the budget of untrusted data. The unedited
programs load and transform as the originals do. The table in
docs/trust-model.md is held to the code: every function it names exists,
every site a case above exercises is a row, and every check of
rule_types.py has a row.
"""

from __future__ import annotations

import functools
import importlib
import os
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.compat import custom_rules as compat_custom_rules
from jaxpr_io.families.custom_rules import rule_types
from jaxpr_io.format import _proto as pb
from tests import hostile as h
from tests.hostile.test_hostile_io import assert_within, budget_mib, run_limited
from tests.support import paths
from tests.support import proto_edit
from tests.support import rule_programs
from tests.support.roundtrip import assert_bit_identical, assert_same_outcome

F32 = np.float32
X4 = np.arange(1, 5, dtype=F32)
X3 = np.linspace(0.5, 1.5, 3).astype(F32)


# ------------------------------------------------------------ programs
def _broadcast_sum(x):
  return jnp.broadcast_to(jnp.sum(x), x.shape)


def _jvp_program():
  """A custom_jvp over f32[4] whose JVP rule broadcasts its results."""
  @jax.custom_jvp
  def f(x):
    return _broadcast_sum(x) * 3.0

  @f.defjvp
  def f_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return _broadcast_sum(x) * 3.0, _broadcast_sum(t) * 3.0
  return f, (X4,)


def _vjp(residual_from_broadcast: bool):
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)

  def fwd(x):
    return jnp.sin(x), (_broadcast_sum(x) if residual_from_broadcast
                        else jnp.cos(x))

  def bwd(r, g):
    if residual_from_broadcast:
      return (r * g,)
    return (_broadcast_sum(g * r),)
  f.defvjp(fwd, bwd)
  return f


def _bwd_program():
  """A custom_vjp whose backward rule broadcasts its cotangent."""
  return _vjp(False), (X4,)


def _fwd_program():
  """A custom_vjp whose forward rule broadcasts its residual."""
  return _vjp(True), (X4,)


def _flagged_vjp():
  return rule_programs.flagged_vjp(self_calling=False)


def _residual_values_program():
  return _flagged_vjp(), (X3, X3, X3)


def _vmap_program():
  return rule_programs.scaled_sin_vmap(), (
      np.linspace(0.5, 1.5, 5).astype(F32), F32(1.5))


def _lin_program():
  """A linearized custom_vjp: a `custom_lin` equation (it cannot be
  lowered, so it loads without check=True, as the original traces)."""
  f = jax.custom_vjp(jnp.sin)
  f.defvjp(lambda v: (jnp.sin(v), jnp.cos(v)), lambda r, g: (g * r,))
  return jax.linearize(f, X4)[1], (X4,)


def _recursive_program():
  """A custom_vjp whose forward rule calls the function itself: the
  equation inside the rule stores refs to the rules it lies in."""
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)
  f.defvjp(lambda x: (f(x), jnp.cos(x)), lambda r, g: (g * r,))
  return f, (X4,)


@functools.cache
def _file(program) -> bytes:
  fn, args = program()
  return jaxpr_io.dumps(jaxpr_io.trace(fn, *args))


# ------------------------------------------------------------ editing
def _stored(msg, primitive: str, param: str):
  """The stored value (inside `param_codec`) of `param` of the last
  `primitive` equation (the program's own, after those in its rules)."""
  eqn = h.eqns(msg, primitive)[-1]
  return h.param(msg, eqn, param).param_codec


def _rules(value, at: int) -> list:
  """The stored rule entries (tuples) at item `at` of a stored value."""
  return list(value.tuple.items[at].tuple.items)


def _jaxpr_of(msg, entry) -> int:
  """The jaxpr index of a stored rule entry `(pattern, closed jaxpr,
  ...)`."""
  return msg.closed_jaxprs[entry.tuple.items[1].closed_jaxpr].jaxpr


def _new_aval(msg, old: int, sizes) -> int:
  aval = pb.Aval()
  aval.CopyFrom(msg.avals[old])
  del aval.shaped_array.sizes[:]
  aval.shaped_array.sizes.extend(sizes)
  msg.avals.append(aval)
  return len(msg.avals) - 1


def _shrink_broadcasts(msg, j: int) -> None:
  """Every `broadcast_in_dim` of jaxpr `j` made to broadcast to [1]: the
  body still type-checks, and the rule returns f32[1] where it returned
  f32[4]."""
  name = list(msg.strings).index("broadcast_in_dim")
  eqns = [e for e in proto_edit.equations(msg, j) if e.primitive == name]
  assert eqns
  for e in eqns:
    h.param(msg, e, "shape").ints.items[:] = [1]
    e.outvars[0] = _new_aval(msg, e.outvars[0], [1])
  # What uses the broadcasts (a `mul` by a literal) is retyped too.
  for e in proto_edit.equations(msg, j):
    if e.primitive == list(msg.strings).index("mul"):
      e.outvars[0] = _new_aval(msg, e.outvars[0], [1])


def _retype(msg, j: int, sizes, new_sizes) -> None:
  """Every variable of jaxpr `j` of an f32 array type of `sizes` retyped to
  `new_sizes`, consistently: the body type-checks alone."""
  old = {i for i, a in enumerate(msg.avals)
         if a.WhichOneof("kind") == "shaped_array"
         and list(a.shaped_array.sizes) == list(sizes)}
  new = {i: _new_aval(msg, i, new_sizes) for i in sorted(old)}
  jaxpr = msg.jaxprs[j]
  for field in (jaxpr.invars, jaxpr.constvars):
    field[:] = [new.get(a, a) for a in field]
  for e in proto_edit.equations(msg, j):
    e.outvars[:] = [new.get(a, a) for a in e.outvars]


def _edit_jvp(msg):
  rule, = _rules(_stored(msg, "custom_jvp_call", "jvp_jaxpr_fun"), 3)
  _shrink_broadcasts(msg, _jaxpr_of(msg, rule))


def _edit_bwd(msg):
  rule, = _rules(_stored(msg, "custom_vjp_call", "bwd"), 3)
  _shrink_broadcasts(msg, _jaxpr_of(msg, rule))


def _edit_fwd(msg):
  rule, = _rules(_stored(msg, "custom_vjp_call", "fwd_jaxpr_thunk"), 3)
  _shrink_broadcasts(msg, _jaxpr_of(msg, rule))


def _edit_residual_values(msg):
  rules = _rules(_stored(msg, "custom_vjp_call", "bwd"), 3)
  valued = [r for r in rules if len(r.tuple.items) == 5]
  assert valued, "no backward rule stored with constant residuals"
  _retype(msg, _jaxpr_of(msg, valued[0]), [3], [2])


def _edit_vmap(msg):
  rules = _rules(_stored(msg, "custom_vmap_call", "rule"), 1)
  # The pattern with x batched: f32[n,5] inputs and outputs become f32[n,4]
  # (the batch dimension is symbolic, its size the second).
  unbatched = rules[0]   # (False, False): x is f32[5]
  _retype(msg, _jaxpr_of(msg, unbatched), [5], [4])


def _edit_ref(msg):
  # The equation inside the forward rule (the first in table order) says
  # its residual forwards input 0; its definition's computes it.
  inner = h.eqns(msg, "custom_vjp_call")[0]
  out_trees = h.param(msg, inner, "out_trees").param_codec
  h.set_value(msg, out_trees.tuple.items[2], (0,))


def _edit_lin(msg):
  stored = _stored(msg, "custom_lin", "bwd")
  rule, = _rules(stored, 4)
  _retype(msg, _jaxpr_of(msg, rule), [4], [3])


# site -> (the file, its edit, whether check=True can load the original,
# what the FormatError says). The sites are the rows of the table in
# docs/trust-model.md.
CASES = {
    "JVP rule": (_jvp_program, _edit_jvp, True,
                 r"equation 0 \(custom_jvp_call\): .*JVP rule 0 \(zero "
                 r"tangents \(False,\)\) of custom_jvp function 'f' takes "
                 r"float32\[1\] as its input 0 \(primal 0\)|returns "
                 r"float32\[1\] as its output 0 \(primal output 0\), where "
                 r"its use site gives float32\[4\]"),
    "forward rule": (_fwd_program, _edit_fwd, True,
                     r"equation 0 \(custom_vjp_call\): .*backward rule \(zero"
                     r" cotangents \(False,\)\) of custom_vjp function 'f' "
                     r"takes float32\[4\] as its input 0 \(residual 0\), "
                     r"where its use site gives float32\[1\]"),
    "backward rule": (_bwd_program, _edit_bwd, True,
                      r"equation 0 \(custom_vjp_call\): .*backward rule \("
                      r"zero cotangents \(False,\)\) of custom_vjp function "
                      r"'f' \(stored rule 0\) returns float32\[1\] as its "
                      r"output 0 \(cotangent of input 0\), where its use "
                      r"site gives float32\[4\]"),
    "backward rule with constant residuals": (
        _residual_values_program, _edit_residual_values, True,
        r"equation 0 \(custom_vjp_call\): .*backward rule \(zero cotangents"
        r" \(False,\), constant residuals \(.*\)\) of custom_vjp function "
        r"'f' \(stored rule \d+\) takes float32\[2\] as its input \d+ "
        r"\(cotangent of output 0\), where its use site gives "
        r"float32\[3\]"),
    "custom_vmap rule": (_vmap_program, _edit_vmap, True,
                         r"equation 0 \(custom_vmap_call\): .*the custom_vmap"
                         r" rule '[^']*rule' for batched inputs \(False, False\) "
                         r"takes float32\[4\] as its input 0 \(input 0\), "
                         r"where its use site gives float32\[5\]"),
    "refs": (_recursive_program, _edit_ref, True,
             r"equation 0 \(custom_vjp_call\): .*a ref to custom_vjp "
             r"definition '\w+' in an equation of 'f' stores out_trees "
             r"\(1, 1, \(0,\)\), where the definition's are \(1, 1, "
             r"\(None,\)\): its residuals differ"),
    "custom_lin backward rule": (
        _lin_program, _edit_lin, False,
        r"equation 0 \(custom_lin\): backward rule \(zero cotangents "
        r"\(False,\)\) of linearized custom_vjp function '.*' takes "
        r"float32\[3\] as its input 0 \(residual 0\), where its use site "
        r"gives float32\[4\]"),
}

_CHILD = """
    data = open(ARGS[0], "rb").read()
    expect_format_error(jaxpr_io.loads, data)
    if ARGS[1] == "check":
      expect_format_error(jaxpr_io.loads, data, check=True)
"""


@pytest.mark.parametrize("site", sorted(CASES))
def test_a_rule_of_another_type_than_its_use_site_is_refused(tmp_path, site):
  program, edit, checkable, pattern = CASES[site]
  data = _file(program)
  # The original loads (checked where it can be) and its rule is used.
  jaxpr_io.loads(data, check=checkable)
  bad = h.craft(data, edit)
  path = tmp_path / "bad.jaxpr"
  path.write_bytes(bad)
  child = run_limited(_CHILD, path, "check" if checkable else "plain")
  assert_within(child, budget_mib(len(bad)))
  errors = child.lines("FORMAT_ERROR:")
  assert len(errors) == (2 if checkable else 1), str(child)
  for message in errors:
    assert re.search(pattern, message), message


def _loaded_eqn(data: bytes, primitive: str):
  prog = jaxpr_io.loads(data)
  eqn, = [e for e in prog.closed_jaxpr.jaxpr.eqns
          if e.primitive.name == primitive]
  return eqn


def test_a_loaded_backward_rule_checks_what_it_is_called_with():
  # Where the loaded rule stands in for JAX's `_flatten_bwd`: called with a
  # residual of another type than its jaxpr takes (a program whose
  # equation was fed other types than it declares), it raises, naming it.
  bwd = _loaded_eqn(_file(_bwd_program), "custom_vjp_call").params["bwd"]
  cts, _ = compat_custom_rules.call_bwd(bwd, np.cos(X4), np.ones(4, F32))
  assert_bit_identical(cts, jax.vjp(_vjp(False), X4)[1](np.ones(4, F32)))
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"the backward rule of custom_vjp function 'f' "
                     r"for zero cotangents \(False,\) is called with "
                     r"float32\[3\] as its input 0, where its stored jaxpr "
                     r"takes float32\[4\]"):
    compat_custom_rules.call_bwd(bwd, X3, np.ones(4, F32))


def test_a_loaded_vmap_rule_checks_what_it_is_called_with():
  rule = _loaded_eqn(_file(_vmap_program), "custom_vmap_call").params["rule"]
  out, batched = rule(3, ((), (True, False)), (),
                      (np.ones((3, 5), F32), F32(2.0)))
  assert np.shape(out) == (3, 5) and batched is True
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"the custom_vmap rule '[^']*rule' is called with "
                     r"float32\[3,4\] as its input 0, where its stored jaxpr "
                     r"takes float32\[3,5\]"):
    rule(3, ((), (True, False)), (), (np.ones((3, 4), F32), F32(2.0)))


def test_a_custom_vmap_in_tree_must_split_the_inputs_as_its_rule():
  # The equation's in_tree replaced by the program's own signature,
  # ((x, s), {}): 2 constants and no arguments, where the stored rule takes
  # 2 arguments. JAX would call the rule with a pattern it has no entry
  # for, at the first vmap.
  def edit(msg):
    in_tree = _stored(msg, "custom_vmap_call", "in_tree")
    in_tree.treedef.CopyFrom(msg.in_tree)
  bad = h.craft(_file(_vmap_program), edit)
  for check in (False, True):
    with pytest.raises(jaxpr_io.FormatError,
                       match=r"custom_vmap_call's in_tree splits its inputs "
                       r"into 2 constants and 0 arguments; its rule "
                       r"'[^']*rule' is stored for 2 arguments"):
      jaxpr_io.loads(bad, check=check)


@pytest.mark.parametrize("program", [_jvp_program, _bwd_program,
                                     _fwd_program, _residual_values_program,
                                     _vmap_program, _recursive_program])
def test_unedited_programs_transform_as_the_originals(program):
  fn, args = program()
  original = jaxpr_io.trace(fn, *args)
  loaded = jaxpr_io.loads(_file(program), check=True)
  ones = tuple(np.ones_like(a) for a in args)
  batched = [np.stack([a, 2 * a]) for a in args]
  for transform, inputs in (
      (lambda p: lambda *a: jax.jvp(p, a, ones), args),
      (lambda p: jax.grad(lambda *a: jnp.sum(p(*a)), tuple(range(len(args)))),
       args),
      (jax.vmap, batched)):
    # Bit-identical, or failing alike (custom_vmap is not reverse
    # differentiable, custom_vjp not forward).
    assert_same_outcome(transform, original, loaded, *inputs)


# ------------------------------------------------------------ the table
_TABLE = re.compile(r"<!-- rule-types-table -->\n(.*?)<!-- /rule-types-table"
                    r" -->", re.S)


def _table_rows() -> list[list[str]]:
  with open(os.path.join(paths.ROOT, "docs", "trust-model.md")) as f:
    text = f.read()
  match = _TABLE.search(text)
  assert match, "docs/trust-model.md has no rule-types table"
  lines = [line for line in match.group(1).strip().splitlines()
           if line.startswith("|")]
  return [[cell.strip() for cell in line.strip("|").split("|")]
          for line in lines[2:]]


def _named_functions(cell: str) -> list:
  """The functions a "checked by" cell names (`module.function`, module
  under jaxpr_io), resolved."""
  found = []
  for dotted in re.findall(r"`((?:[a-z_]+/)+[a-z_]+\.[A-Za-z_]+)`", cell):
    module, name = dotted.rsplit(".", 1)
    module = "jaxpr_io." + module.replace("/", ".")
    found.append(getattr(importlib.import_module(module), name))
  return found


def test_the_table_names_functions_that_check_its_sites():
  rows = _table_rows()
  sites = {row[0].strip("*") for row in rows}
  # Each site a hostile case above exercises is a row.
  assert set(CASES) <= sites, set(CASES) - sites
  named = []
  for row in rows:
    functions = _named_functions(row[-1])
    assert functions, f"row {row[0]!r} names no function"
    named += functions
  # Every check of rule_types.py is in the table.
  checks = {rule_types.jvp_rule, rule_types.fwd_rule, rule_types.residuals,
            rule_types.bwd_rule, rule_types.lin_problem,
            rule_types.vmap_rule, rule_types.check_call}
  assert checks <= set(named), checks - set(named)
