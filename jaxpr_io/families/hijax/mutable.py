"""JAX 0.10's boxes and logs: their avals and quasi-dynamic data (version 8).

A `jax._src.hijax.Box` is a mutable container whose aval, `BoxTy`, says
nothing about its contents: what a box holds at a point of the program is
the quasi-dynamic data (QDD) of the variable, a `BoxTypeState` (the leaf
avals and treedef of its value). JAX 0.10 keeps it on the variable
(`Var.initial_qdd`, `Var.final_qdd`); jit lowers a program with boxes from
its inputs' QDD (`pe.lower_jaxpr`'s `new_from_loval`/`read_loval_out`) and
the tracer of a call updates the caller's box from the callee's
`final_qdd`. A `Log` (`LogTy`) is a write-only dict of lists whose QDD is
always `()`.

They are stored as `Aval.hi_mutable` (which type) and `Jaxpr.qdds` (each
variable's QDD that is not None: for every jaxpr, the inputs' and what
`new_box` gives its output), see schema/jaxpr.proto. JAX 0.11.1 and later
have no boxes: their readers refuse such files naming a release that has
them (`compat.hi_mutable.RELEASE_WITH_BOXES`).

On load, beyond what the format checks of every file:
* a variable's QDD matches its aval (a box's is a `BoxTypeState` of array
  leaf avals whose treedef has that many leaves; a log's is empty), and
  every input of a box or log type has both;
* `new_box`, `box_get`, `box_set`, `new_log` and `log_extend` take and make
  boxes and logs where JAX's rules expect them, with params that fit the
  equation (`equation_problem`), which their abstract evaluation does not
  check and their lowering assumes.
`load(..., check=True)` runs JAX's type checker, which follows each box's
QDD through the program.
"""

from __future__ import annotations

from typing import Any

from jaxpr_io.format import _proto as pb
from jaxpr_io import compat
from jaxpr_io.codec import params
from jaxpr_io.compat import hi_mutable as compat_hi_mutable
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.safety import validate
from jaxpr_io.errors import FormatError, UnsupportedError

_KIND_BOX = pb.MutableHiKind["MUTABLE_HI_KIND_BOX"]
_KIND_LOG = pb.MutableHiKind["MUTABLE_HI_KIND_LOG"]
_KINDS = ({compat_hi_mutable.BoxTy: _KIND_BOX, compat_hi_mutable.LogTy: _KIND_LOG}
          if compat_hi_mutable.SUPPORTED else {})
_TYPE_NAMES = {_KIND_BOX: "a Box (jax._src.hijax.BoxTy)",
               _KIND_LOG: "a Log (jax._src.hijax.LogTy)"}
TYPES = tuple(_KINDS)


def is_hi_mutable(aval) -> bool:
  """Whether `aval` is a box's or a log's type."""
  return type(aval) in _KINDS


# -------------------------------------------------------------- writing
def encode_aval(aval, out) -> None:
  """Fills the `Aval` message `out` with a `BoxTy` or `LogTy`."""
  out.hi_mutable.kind = _KINDS[type(aval)]


def encode_qdds(w, numbered: list[tuple[int, Any]], out) -> None:
  """Appends a `VarQdd` to `out` (a `Jaxpr.qdds`) for each (number,
  variable) of `numbered`, in ascending order of number."""
  for number, var in numbered:
    initial, final = compat_hi_mutable.var_qdds(var)
    entry = out.add(var=number)
    try:
      if initial is not None:
        _encode_qdd(w, var.aval, initial, entry.initial)
      if final is not None:
        _encode_qdd(w, var.aval, final, entry.final)
    except UnsupportedError as e:
      raise UnsupportedError(f"variable {number} of type "
                             f"{var.aval.str_short()}: {e}") from None


def _encode_qdd(w, aval, qdd, out) -> None:
  t = type(aval)
  if t is compat_hi_mutable.LogTy and qdd == ():
    out.log.SetInParent()
    return
  if t is compat_hi_mutable.BoxTy and type(qdd) is compat_hi_mutable.BoxTypeState:
    leaves = qdd.leaf_avals
    bad = [a for a in leaves if type(a) is not compat.ShapedArray]
    if bad:
      raise UnsupportedError(
          f"a box holding a value of type {bad[0].str_short()} cannot be "
          "stored (boxes of arrays can): put arrays in the box")
    box = out.box
    box.SetInParent()
    box.leaf_avals.extend(w.aval(a) for a in leaves)
    params.encode_value(w, qdd.treedef, box.treedef)
    return
  raise UnsupportedError(
      f"its quasi-dynamic data {qdd!r:.100} is not what JAX gives a "
      f"{t.__name__} (a BoxTypeState for a box, () for a log)")


# -------------------------------------------------------------- reading
def decode_aval(r, m):
  """The `BoxTy` or `LogTy` of the `MutableHiType` message `m`."""
  if r.msg.format_version < 8:
    raise FormatError("a box or log aval in a file before version 8")
  name = _TYPE_NAMES.get(m.kind)
  if name is None:
    raise FormatError(f"unknown mutable hijax type kind {m.kind}")
  if not compat_hi_mutable.SUPPORTED:
    raise FormatError(
        f"the file holds {name}, a mutable hijax type that JAX "
        f"{compat.JAX_VERSION} does not have (JAX 0.11.1 removed it; the "
        f"file was written with JAX "
        f"{r.msg.producer.jax_version or '(unknown)'}); load it with JAX "
        f"{compat_hi_mutable.RELEASE_WITH_BOXES}")
  r.has_hi_mutable = True
  return compat_hi_mutable.BoxTy() if m.kind == _KIND_BOX else compat_hi_mutable.LogTy()


def apply_qdds(r, m, env: list, n_inputs: int) -> None:
  """Gives the variables of one jaxpr (`env`, numbered; the first
  `n_inputs` its constvars and invars) the QDD of its message `m`, and
  checks that every input of a box or log type has both."""
  if m.qdds and r.msg.format_version < 8:
    raise FormatError("variables with quasi-dynamic data (Jaxpr.qdds) in a "
                      "file before version 8")
  previous = -1
  for entry in m.qdds:
    number = entry.var
    if number <= previous:
      raise FormatError(f"quasi-dynamic data of variable {number} after "
                        f"that of variable {previous}: entries must be in "
                        "ascending order of variable number, each once")
    previous = number
    if number >= len(env):
      raise FormatError(f"quasi-dynamic data of variable {number}, but "
                        f"the jaxpr binds {len(env)}")
    var = env[number]
    if type(var) is not compat.Var or not is_hi_mutable(var.aval):
      raise FormatError(
          f"variable {number} of type {var.aval.str_short()} has "
          "quasi-dynamic data (only boxes and logs have any)")
    try:
      initial = (_decode_qdd(r, var.aval, entry.initial)
                 if entry.HasField("initial") else None)
      final = (_decode_qdd(r, var.aval, entry.final)
               if entry.HasField("final") else None)
    except FormatError as e:
      raise FormatError(f"variable {number}: {e}") from None
    compat_hi_mutable.set_var_qdds(var, initial, final)
  if getattr(r, "has_hi_mutable", False):
    for number, var in enumerate(env[:n_inputs]):
      if is_hi_mutable(var.aval) and None in compat_hi_mutable.var_qdds(var):
        raise FormatError(
            f"input variable {number} of type {var.aval.str_short()} has no "
            "initial or no final quasi-dynamic data (what the box holds "
            "when the jaxpr starts and ends); JAX needs both to run it")


def _decode_qdd(r, aval, m):
  kind = m.WhichOneof("kind")
  if type(aval) is compat_hi_mutable.LogTy:
    if kind != "log":
      raise FormatError(f"a log's quasi-dynamic data is {kind or 'empty'}, "
                        "not a log's")
    return ()
  if kind != "box":
    raise FormatError(f"a box's quasi-dynamic data is {kind or 'empty'}, "
                      "not a box's")
  box = m.box
  leaves = []
  for i in box.leaf_avals:
    leaf = r.aval(i)
    if type(leaf) is not compat.ShapedArray:
      raise FormatError(f"a box holds a leaf of type {leaf.str_short()}, "
                        "not an array type")
    leaves.append(leaf)
  if not box.HasField("treedef"):
    raise FormatError("a box's quasi-dynamic data has no treedef")
  treedef = params.decode_value(r, box.treedef)
  if type(treedef) is not compat_pytrees.PyTreeDef:
    raise FormatError(f"a box's treedef is {treedef!r:.80}, not a PyTreeDef")
  if treedef.num_leaves != len(leaves):
    raise FormatError(f"a box's treedef {treedef} has {treedef.num_leaves} "
                      f"leaves, but it holds {len(leaves)} leaf avals")
  return compat_hi_mutable.BoxTypeState(tuple(leaves), treedef)


# ------------------------------------------------------------ equations
PRIMITIVE_NAMES = frozenset(compat_hi_mutable.PRIMITIVES)


def _is_array(atom) -> bool:
  return type(atom.aval) is compat.ShapedArray


def _treedef_problem(params_: dict, n_leaves: int) -> str | None:
  treedef = params_.get("treedef")
  if type(treedef) is not compat_pytrees.PyTreeDef:
    return f"param 'treedef' is {treedef!r:.80}, not a PyTreeDef"
  if treedef.num_leaves != n_leaves:
    return (f"param 'treedef' ({treedef}) has {treedef.num_leaves} leaves, "
            f"but the equation stores {n_leaves} values")
  return None


def _log_treedef_problem(treedef) -> str | None:
  # Lowering unflattens the values into a dict and extends the log's list
  # under each key with the value there (LogExtend.to_lojax).
  node = treedef.node_data()
  if node is None or node[0] is not dict or any(
      (c.node_data() or (None,))[0] not in (list, tuple)
      for c in treedef.children()):
    return (f"param 'treedef' ({treedef}) is not that of a dict of lists, "
            "what log_extend appends to a log")
  return None


def equation_problem(eqn) -> str | None:
  """What is wrong with a `new_box`, `box_get`, `box_set`, `new_log` or
  `log_extend` equation's input and output types and params, or None."""
  name, ins, outs, p = (eqn.primitive.name, eqn.invars, eqn.outvars,
                        eqn.params)
  first = type(ins[0].aval) if ins else None
  if name in ("new_box", "new_log"):
    want = compat_hi_mutable.BoxTy if name == "new_box" else compat_hi_mutable.LogTy
    if ins or len(outs) != 1 or type(outs[0].aval) is not want:
      return (f"takes {len(ins)} inputs and returns "
              f"{[v.aval.str_short() for v in outs]}, not one "
              f"{want.__name__} from none")
    if name == "new_box":
      return _treedef_problem(p, 0)
    return None
  want = compat_hi_mutable.LogTy if name == "log_extend" else compat_hi_mutable.BoxTy
  if first is not want:
    return (f"its first input is a {first.__name__ if first else 'nothing'}"
            f", not a {want.__name__}")
  if name == "box_get":
    avals = p.get("avals")
    if (len(ins) != 1 or type(avals) is not tuple
        or [type(a) for a in avals] != [compat.ShapedArray] * len(avals)):
      return ("needs one input and a tuple of array types in param 'avals'"
              f", got {len(ins)} inputs and {avals!r:.80}")
    if [v.aval for v in outs] != list(avals):
      return (f"returns {[v.aval.str_short() for v in outs]}, but its "
              f"'avals' are {[a.str_short() for a in avals]}")
    return None
  if outs:
    return f"returns {len(outs)} values, not none"
  if not all(map(_is_array, ins[1:])):
    return "stores a value that is not an array"
  problem = _treedef_problem(p, len(ins) - 1)
  if problem is None and name == "log_extend":
    problem = _log_treedef_problem(p["treedef"])
  return problem


# ------------------------------------------------------------- calling
def example_arg(var):
  """A value of `var`'s box or log type holding what its `initial_qdd`
  says: an argument to lower and compile the program with."""
  if type(var.aval) is compat_hi_mutable.LogTy:
    return compat_hi_mutable.new_log_value()
  return compat_hi_mutable.new_box_value(var.initial_qdd)


def arg_problem(var, value) -> str | None:
  """Why `value` cannot be passed for the box or log input `var`, or None.
  Evaluation trusts its arguments, as JAX's jit asserts what the box holds
  (`pjit_staging_rule`) before it runs the program."""
  current = compat_hi_mutable.current_state(value)
  if current is None or current[0] is not type(var.aval):
    what = current[0].__name__ if current else type(value).__name__
    return (f"is of type {what}, but the program takes a "
            f"{var.aval.str_short()}")
  state = current[1]
  if type(state) is compat_hi_mutable.BoxTypeState:
    got = (state.treedef, [(a.shape, a.dtype) for a in state.leaf_avals])
    want = var.initial_qdd
    if got != (want.treedef, [(a.shape, a.dtype) for a in want.leaf_avals]):
      return (f"is a box holding {state}, but the program takes one "
              f"holding {want}")
  return None


def has_boxes(jaxpr) -> bool:
  """Whether `jaxpr` or a sub-jaxpr binds a box or log variable."""
  if not compat_hi_mutable.SUPPORTED:
    return False
  for sub in validate.walk_jaxprs(jaxpr):
    if any(is_hi_mutable(v.aval) for v in (*sub.constvars, *sub.invars)) or any(
        is_hi_mutable(v.aval) for e in sub.eqns for v in e.outvars):
      return True
  return False


def exact_inputs(avals, flat: list, paths: list[str]) -> list:
  """`flat` (arguments of a program with boxes) with each array given its
  input's weak type. What a box holds is typed by the values put in it, and
  JAX asserts that a call's box holds exactly what the callee's
  `initial_qdd` says (`pjit_staging_rule`): a strongly typed array passed
  for a weakly typed input would fail that assertion inside JAX. Raises
  TypeError, naming the input by its path in `paths`, for an array of
  another dtype."""
  import jax  # pylint: disable=g-import-not-at-top
  out = list(flat)
  for i, (aval, x) in enumerate(zip(avals, flat)):
    if type(aval) is not compat.ShapedArray or compat.is_key_array(x):
      continue
    if jax.numpy.result_type(x) != aval.dtype:
      raise TypeError(f"input {paths[i]} has dtype {jax.numpy.result_type(x)}, but "
                      f"the program (which has boxes) takes "
                      f"{aval.str_short()}")
    if compat_hi_mutable.is_weakly_typed(x) != aval.weak_type:
      out[i] = compat_hi_mutable.with_weak_type(x, aval)
  return out
