"""What JAX's type checker leaves unchecked in sub-jaxprs, for `check=True`.

`jax.core.check_jaxpr` type-checks a sub-jaxpr only where the primitive
holding it has no typing rule of its own (or one that calls the checker):
the bodies of `scan`, `while`, `cond`, `custom_jvp_call` and
`custom_vjp_call` are compared with their operands by type at most, never
checked inside. And a rule-less primitive that calls its jaxpr on its
operands (`remat2`) is checked inside but not against its operands, whose
types its abstract evaluation ignores. A file can retype a body's input or
an equation inside a body: the program then passes the checker, prints,
compiles as stored, and fails when `grad` or `vmap` re-traces the body
(found by tests/fuzz). Both gaps are closed here, each distinct sub-jaxpr
checked once, so the cost is at most what check_jaxpr walks already. The
stored jaxprs of custom rules (a `custom_jvp` function's JVP rule, a
`custom_vjp` function's forward and backward rules) are checked too: JAX
checks them only when `jvp` or `grad` calls the rule. Their types against
the equation they belong to are checked as the file is read
(jaxpr_io/families/custom_rules/rule_types.py). So are the jaxprs of a hi
primitive object (`lax.custom_root`'s), which only its rules apply.
"""

from __future__ import annotations

from jaxpr_io import compat
from jaxpr_io.compat import hi_solves
from jaxpr_io.errors import FormatError


def _open(j):
  return compat.open_jaxpr(j) if compat.is_closed_jaxpr(j) else j


def _in_avals(j) -> list:
  return [v.aval for v in _open(j).invars]


def _out_avals(j) -> list:
  return [v.aval for v in _open(j).outvars]


def _calls(param: str):
  """Primitives that call `params[param]` on all their operands."""
  def operands(eqn):
    body = eqn.params.get(param)
    if body is None:
      return []
    return [(param, _in_avals(body), [v.aval for v in eqn.invars])]
  return operands


def _while(eqn):
  params = eqn.params
  cond_n, body_n = params["cond_nconsts"], params["body_nconsts"]
  avals = [v.aval for v in eqn.invars]
  carry = avals[cond_n + body_n:]
  body = params["body_jaxpr"]
  return [("cond_jaxpr", _in_avals(params["cond_jaxpr"]),
           avals[:cond_n] + carry),
          ("body_jaxpr", _in_avals(body), avals[cond_n:cond_n + body_n] + carry),
          ("body_jaxpr's outputs", _out_avals(body), carry)]


# Release primitive name -> (eqn -> [(what, the jaxpr's types, the types
# given)]), for the primitives whose typing rule or abstract evaluation does
# not compare them.
_OPERANDS = {
    "remat2": _calls("jaxpr"),
    "checkpoint": _calls("jaxpr"),
    "custom_jvp_call": _calls("call_jaxpr"),
    "custom_vjp_call": _calls("call_jaxpr"),
    "custom_vmap_call": _calls("call"),
    "while": _while,
}


def _check_operands(eqn) -> str | None:
  rule = _OPERANDS.get(eqn.primitive.name)
  if rule is None:
    return None
  for what, expected, given in rule(eqn):
    if len(expected) != len(given):
      return f"{what} takes {len(expected)} values but is given {len(given)}"
    for i, (want, got) in enumerate(zip(expected, given)):
      if not compat.typecompat(want, got):
        return (f"{what} takes {want.str_short()} as its input {i}, but is "
                f"given {got.str_short()}")
  return None


def _sub_jaxprs(value, checked: bool):
  """(jaxpr, whether check_jaxpr checks it) in a param value: `checked`
  for jaxprs, False for the stored jaxprs of a custom rule rebuilt from the
  file (jaxpr_io/families/custom_rules: its `bodies`), which JAX checks
  only when it calls the rule under a transform."""
  if compat.is_jaxpr(value):
    yield value, checked
  elif type(value) is tuple:
    for item in value:
      yield from _sub_jaxprs(item, checked)
  elif compat.wrapped_function(value) is not None:
    rule = compat.wrapped_function(value)
    rule = getattr(rule, "definition", lambda: rule)()   # a ref's target
    for body in getattr(rule, "bodies", None) or ():
      if compat.is_jaxpr(body):
        yield body, False
  elif isinstance(value, compat.ADAPTER.hi_prim_bases):
    # A hi primitive's jaxprs (custom_root's, rebuilt from the file:
    # families/hijax/solves.py), in its params and applied by its
    # callables, which JAX calls only in the object's rules.
    for param in (getattr(value, "params", None) or {}).values():
      body = hi_solves.applied_jaxpr(param) if callable(param) else param
      if compat.is_jaxpr(body):
        yield body, False


def check_sub_jaxprs(jaxpr) -> None:
  """Raises FormatError if a sub-jaxpr of `jaxpr` (an open jaxpr that JAX's
  check_jaxpr accepted) does not type-check inside, where check_jaxpr does
  not look, or does not take the types its equation gives it. Each distinct
  jaxpr is visited once."""
  seen: set[int] = set()
  # (jaxpr, whether check_jaxpr has checked it inside, where); the root was
  # checked by the caller.
  stack = [(jaxpr, True, "the program")]
  while stack:
    j, checked, where = stack.pop()
    j = _open(j)
    if id(j) in seen:
      continue
    seen.add(id(j))
    if not checked:
      try:
        compat.check_jaxpr(j)
      except Exception as e:  # pylint: disable=broad-except
        # JaxprTypeError, or a shape rule's error on a body no tracer built.
        raise FormatError(f"{where} does not type-check: "
                          f"{type(e).__name__}: {e}") from None
    for i, eqn in enumerate(j.eqns):
      name = eqn.primitive.name
      problem = _check_operands(eqn)
      if problem:
        raise FormatError(f"{where}, equation {i} ({name}): {problem}")
      inner = compat.check_jaxpr_checks_sub_jaxprs(eqn.primitive)
      for key, value in eqn.params.items():
        for sub, sub_checked in _sub_jaxprs(value, inner):
          stack.append((sub, sub_checked, f"param {key!r} of equation {i} "
                                          f"({name}) of {where}"))


# Primitives that call a jaxpr in their caller's context (no axis names of
# their own bound), by the param holding it.
_CALL_BODIES = {"jit": "jaxpr", "pjit": "jaxpr", "closed_call": "call_jaxpr",
                "core_call": "call_jaxpr", "remat2": "jaxpr",
                "checkpoint": "jaxpr", "custom_jvp_call": "call_jaxpr",
                "custom_vjp_call": "call_jaxpr"}


def check_shared_calls(jaxpr) -> None:
  """Raises FormatError if a call body used more than once does not
  type-check, checking each such body once, callees before callers.

  JAX's checker checks a called body with its public `check_jaxpr`, which
  on a type error prints up to 20 equations of the body around it with
  every sub-jaxpr they call inlined, at every level of calls: under a chain
  of shared calls, exponential text (a 5 KB file of 10 jaxprs each calling
  the next twice took 65 MiB and a minute). Checked here bottom-up with
  `compat.check_jaxpr` (whose message prints a shared jaxpr as its name),
  an error is found in the smallest shared body that holds it, and JAX's
  own walk that follows meets no error in one. Bodies under primitives
  that bind axis names (shard_map, pmap) are left to JAX's walk, since
  they do not type-check alone."""
  uses: dict[int, int] = {}
  order: list = []
  # Iterative post-order over the call bodies, each distinct body once.
  stack = [(_open(jaxpr), False)]
  seen: set[int] = set()
  while stack:
    j, expanded = stack.pop()
    if expanded:
      order.append(j)
      continue
    if id(j) in seen:
      continue
    seen.add(id(j))
    stack.append((j, True))
    for eqn in j.eqns:
      param = _CALL_BODIES.get(eqn.primitive.name)
      body = eqn.params.get(param) if param else None
      if body is None or not compat.is_jaxpr(body):
        continue
      body = _open(body)
      uses[id(body)] = uses.get(id(body), 0) + 1
      stack.append((body, False))
  for j in order[:-1]:   # the root (last) is the caller's to check
    if uses.get(id(j), 0) > 1:
      try:
        compat.check_jaxpr(j)
      except Exception as e:  # pylint: disable=broad-except
        raise FormatError(f"a call body used {uses[id(j)]} times does not "
                          f"type-check: {type(e).__name__}: {e}") from None
