"""Storing custom differentiation rules: `jax.custom_jvp` and `jax.custom_vjp`.

A `custom_jvp_call` or `custom_vjp_call` equation keeps its rules as Python
callables that JAX traces lazily, the first time a transformation asks for
them. A file cannot hold Python code, so the writer asks for every rule a
transformation can ask for, at the call's input types, and stores the
resulting jaxprs; `load` rebuilds callables that return those jaxprs. The
loaded program is then the same program under `jvp`, `grad` (every order the
original supports), `linearize`, `vjp` and `vmap`: JAX's own transformation
rules for the two primitives run unchanged and get the same jaxprs they
would get from the original rules.

What is stored, per param (inside `Value.param_codec`; "closed jaxpr" is a
reference to the closed-jaxpr table, so its constants are file constants):

`custom_jvp_call`, param `jvp_jaxpr_fun` (JAX: `in_zeros -> (jaxpr, consts,
out_zeros)`, with one bool per non-constant input saying whether its tangent
is a symbolic zero):

* `("jvp", key, debug, rules)`: `rules` is a tuple of
  `(in_zeros, rule, out_zeros)`: `in_zeros` a tuple of bools (one per
  input after the `num_consts` constants), `rule` the closed jaxpr of the
  JVP rule for that pattern (inputs: the primals, then the tangents that
  are not zeros; outputs: the primal outputs, then the output tangents
  that are not zeros), `out_zeros` a tuple of bools (one per output: the
  rule returned a symbolic zero). With `symbolic_zeros=False` JAX always
  passes instantiated tangents, so exactly one rule is stored, for the
  all-False pattern; with `symbolic_zeros=True` the rule is stored for all
  2**n patterns, in `itertools.product((False, True), repeat=n)` order, for
  at most `MAX_PATTERN_INPUTS` inputs and `wide.MAX_PATTERN_EQUATIONS`
  equations in all (over either, the widest patterns only:
  jaxpr_io/families/custom_rules/wide.py).
* `("jvp_ref", key, debug)`: the rule of an equation inside the rule of a
  definition with the same `key` (a rule that calls its own function, as
  `jax.nn.relu`'s does): the same rule, stored once (see "Recursion").

`custom_vjp_call`, param `fwd_jaxpr_thunk` (JAX: `in_nonzeros -> (jaxpr,
consts)`, one bool per non-constant input saying whether it is perturbed):

* `("fwd", key, debug, rules)`: `rules` is a tuple of `(in_nonzeros, fwd)`:
  `fwd` the closed jaxpr of the forward rule (inputs: the non-constant
  primal inputs; outputs: the residuals that are not forwarded inputs,
  then the primal outputs). With `symbolic_zeros=False` the forward rule
  never sees the pattern (`_flatten_fwd` drops it), so one rule is stored
  with `in_nonzeros = None`, meaning "every pattern" (traced with every
  input perturbed); with `symbolic_zeros=True` one rule per pattern (2**n,
  at most `MAX_PATTERN_INPUTS` inputs; over it the widest patterns only,
  see wide.py), whose residuals must not depend on the pattern.
* `("fwd_ref", key, debug)`: recursion, as for `jvp_ref`.

`custom_vjp_call`, param `bwd` (JAX: `(*residuals, *output_cotangents) ->
input_cotangents`, an input cotangent may be `ad.Zero`; JAX 0.11 and later
return `(input_cotangents, logs)`, `logs` the backward-pass logs of
`defvjp_with_logs`. The file stores the cotangents only, the same on every
release; a rule that returns logs other than None is refused, and a loaded
rule logs nothing):

* `("bwd", key, debug, rules)`: `rules` is a tuple of
  `(ct_zeros, bwd, cts_in_zeros, zero_types)`: `ct_zeros` a tuple of bools
  (one per output: its cotangent is a symbolic zero), `bwd` the closed
  jaxpr of the backward rule traced over the residual types (from the
  forward jaxpr's outputs and, for forwarded inputs, the inputs' types) and
  the cotangent types (`to_ct_aval` of the outputs) of the non-zero
  cotangents, whose outputs are the input cotangents that are not zeros;
  `cts_in_zeros` a tuple of bools (one per non-constant input: the rule
  gave no cotangent, rebuilt as `ad.Zero`); `zero_types` a jaxpr without
  equations whose inputs have the types of those zeros (None when there
  are none). With `symbolic_zeros=False` cotangents are always
  instantiated and one rule is stored for the all-False pattern; with
  `symbolic_zeros=True` one per pattern (at most `MAX_PATTERN_INPUTS`
  outputs and `wide.MAX_PATTERN_EQUATIONS` equations; over either the
  no-zero pattern only, see wide.py). A rule that raises for a pattern is
  `(ct_zeros, error)`. From version 9, with `symbolic_zeros=True`, up to
  `MAX_CALLS_WITH_VALUES` more entries `(ct_zeros, bwd, cts_in_zeros,
  zero_types, values)` or `(ct_zeros, error, values)`: the rule traced
  with some residuals the constants `values` (one per residual: a numpy
  bool, int or float scalar, or None; at least one scalar), as JAX called
  it when the writer differentiated the program (bwd_table.py,
  requests.py). A reader MUST use such an entry only where it is called
  with those constants (concrete scalars of the same kind and value), and
  otherwise the plain entry of `ct_zeros` or one covering it. The JVP rule
  and forward rule of a rule over the limits above are likewise stored for
  the patterns JAX asked for, beside the widest (plain entries: no new
  form).
* `("bwd_ref", key, debug)`: recursion, as for `jvp_ref`.

`custom_vjp_call`, param `out_trees` (JAX: `() -> (out_tree, res_tree,
input_fwds)`): `(out_leaves, res_leaves, input_fwds)`, two ints and a tuple
of (int or None) per residual: the index of the equation input the residual
forwards, or None. It is rebuilt as flat tuple trees of those sizes: every
caller of `out_trees` in JAX 0.10 to 0.12 (AD, batching, DCE, and
`_flatten_bwd`, which is part of the stored `bwd`) only uses the leaf counts
and `input_fwds`.

An equation without any inputs stores no rules (`rules == ()`) and
`out_trees` as `(0, 0, ())`: JAX never asks for them, since every tangent
is zero, and JAX's partial evaluation of `scan` leaves such dead equations
with rules of their former arity, which cannot be traced.

Where JAX has one type for open and closed jaxprs (0.11 and later), the
writer stores rule jaxprs closed (their params' slot in the vocabulary) and
is told that `zero_types` are open (see `_OpenJaxpr`), so every release
writes the same values.

`debug` is `(traced_for, func_src_info, arg_names)` of the rule's
`lu.DebugInfo` (`arg_names` a tuple of strings or None): JAX prints the
rule's `func_name` from it (`jvp=...`, `fwd=...`, `bwd=...`).

Recursion. A rule usually calls its own function (`relu`'s JVP rule calls
`relu`, a forward rule calls the primal), so the rule's jaxpr holds an
equation of the same kind, whose rule holds another, without end. Each
definition carries a `key`: a hash of the equation's call jaxpr, flags,
debug info and the first stored rule, with nested rules left out. An
equation met while that definition's jaxprs are being written, whose key is
the same, is stored as a `*_ref` to it; the reader links each ref to the
definition it lies inside (found by walking the definition's jaxprs). Like
JAX's tracing caches, this assumes a rule traced twice at the same types
gives the same jaxpr.

A rule that calls its own function with other arguments (e3nn-jax's
spherical harmonics, with twice the degrees) nests without a ref. The
writer stores rules nested up to `max_derivative_order` deep in rules (a
keyword of `dumps`; common.py, `beyond_order`); deeper, in the forms above
and no new one: a JVP rule as `(widest pattern, error)` only, a custom_vjp
(without constants) as the forward rule `(None or every float input
perturbed, call_jaxpr)` with no residuals (`out_trees` `(n_out, 0, ())`)
and the backward rule `(no-zero pattern, error)`. The error's type name is
`jaxpr_io.errors.UnsupportedError`, which the reader raises as
`UnsupportedError`, naming the order and how to save more.

A JVP rule that raises when it is traced at the call's types (Equinox's
`nondifferentiable` does, on purpose) is stored, for that tangent pattern, as
`(in_zeros, (error type name, message))` in place of `(in_zeros, rule,
out_zeros)`: the loaded rule raises that error when JAX asks for it, as the
original does (`RaisingRule`; added in format version 4). A forward or
backward rule that cannot be traced at the call's types raises
`UnsupportedError` naming the function and the cause.

Typing. Each stored jaxpr MUST have the types its use site implies (the
equation's inputs and outputs, their tangent and cotangent types, the
residuals the other rule returns or takes, the ref's definition's); the
reader refuses a file where one does not (rule_types.py, and the table
"Typing of stored rules" in docs/trust-model.md).

Modules: jaxpr_io/families/custom_rules/common.py (what both kinds of rules share:
patterns, keys, raising rules, loaded rules), jaxpr_io/families/custom_rules/jvp.py and
jaxpr_io/families/custom_rules/vjp.py (each kind's codecs). Importing this module
registers the codecs.
"""

from __future__ import annotations

from jaxpr_io.families.custom_rules import jvp as custom_jvp
from jaxpr_io.families.custom_rules import vjp as custom_vjp
from jaxpr_io.codec import registry
from jaxpr_io.families.custom_rules.common import JVP_PRIMITIVE, VJP_PRIMITIVE
from jaxpr_io.families.custom_rules.common import beyond_order, writing_scope


registry.register_eqn_param_codec(JVP_PRIMITIVE, "jvp_jaxpr_fun",
                                  encode=custom_jvp.encode_jvp_rule,
                                  decode=custom_jvp.decode_jvp_rule)
registry.register_eqn_param_codec(VJP_PRIMITIVE, "fwd_jaxpr_thunk",
                                  encode=custom_vjp.encode_fwd_rule,
                                  decode=custom_vjp.decode_fwd_rule)
registry.register_eqn_param_codec(VJP_PRIMITIVE, "bwd",
                                  encode=custom_vjp.encode_bwd_rule,
                                  decode=custom_vjp.decode_bwd_rule)
registry.register_eqn_param_codec(VJP_PRIMITIVE, "out_trees",
                                  encode=custom_vjp.encode_out_trees,
                                  decode=custom_vjp.decode_out_trees)
registry.register_program_scope(writing_scope)
# Whether rules met now are stored beyond the derivative order: a jaxpr
# shared by a rule nested that deep and a shallower place is written for
# each (common.py, `beyond_order`).
registry.register_encoding_context(beyond_order)
