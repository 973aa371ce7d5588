"""The program API: `Program`, `trace`, `dumps`/`loads`, `save`/`load`."""

from __future__ import annotations

import os
from typing import Any, Callable

import jax

from jaxpr_io import compat
from jaxpr_io import families
from jaxpr_io.api import binding
from jaxpr_io.api import inputs
from jaxpr_io.format import container
from jaxpr_io.format import files
from jaxpr_io.format import limits
from jaxpr_io.families.custom_rules import common as custom_rules
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.compat import specialize
from jaxpr_io.pytree import static
from jaxpr_io.pytree import calls as tree_calls
from jaxpr_io.safety import costs
from jaxpr_io.safety import shape_rules
from jaxpr_io.safety import validate
from jaxpr_io.safety import typecheck
from jaxpr_io.compat import hi_mutable as compat_hi_mutable
from jaxpr_io.compat import polyfills as compat_polyfills
from jaxpr_io.compat import symbolic
from jaxpr_io.read import reader
from jaxpr_io.write import writer
from jaxpr_io.errors import FormatError, UnsupportedError


# `check=True` refuses programs larger than this (equations with their
# inputs and outputs, counting every use of a shared sub-jaxpr) even from a
# trusted file, rather than run JAX's checker and XLA for a very long time;
# an untrusted file gets a limit proportional to what it stores
# (jaxpr_io/safety/costs.py).
MAX_CHECKED_SIZE = limits.MAX_CHECKED_SIZE


class Program:
  """A closed jaxpr with its pytree signature and metadata.

  Calling a `Program` evaluates the jaxpr with JAX's own primitives, so
  `jax.jit`, `jax.grad`, `jax.vmap`, `jax.jvp` and any other transformation
  work on it as on the function it was traced from.

  Attributes:
    closed_jaxpr: the `jax.extend.core.ClosedJaxpr`.
    in_tree: `PyTreeDef` of `(args, kwargs)`.
    out_tree: `PyTreeDef` of the result.
    metadata: `dict[str, str]`, saved with the program.
    producer: for a loaded program, who wrote it (format version, jaxpr_io,
      jax and jaxlib versions); empty for a traced one.
    polyfilled: for a loaded program, the equations whose primitive this
      JAX lacks and that were rebuilt from its own primitives
      (compat/polyfills.py), as (jaxpr index, equation index, primitive
      name) tuples; empty when the program is exactly the file's.
    untrusted: whether the program was loaded without `trusted=True` (or
      is what `bind` or `specialize` made of such a program): the ONNX and
      LiteRT converters then charge what they would fold into constants
      against its budget (jaxpr_io/converters/folding.py).
  """

  def __init__(self, closed_jaxpr, in_tree, out_tree,
               metadata: dict[str, str] | None = None, *,
               producer: dict[str, Any] | None = None,
               _verify: Callable[[], None] | None = None,
               polyfilled: tuple = (), untrusted: bool = False):
    self._closed_jaxpr = closed_jaxpr
    self.untrusted = bool(untrusted)
    self.polyfilled = tuple(polyfilled)
    self.in_tree = in_tree
    self.out_tree = out_tree
    self.metadata = dict(metadata or {})
    self.producer = dict(producer or {})
    self._verify = _verify
    self._fun = None

  @property
  def closed_jaxpr(self):
    """The program; for a loaded one, constant data checksums are verified
    the first time this is read."""
    if self._verify is not None:
      self._verify()
      self._verify = None
    return self._closed_jaxpr

  @property
  def in_avals(self) -> list:
    return list(self._closed_jaxpr.in_avals)

  @property
  def out_avals(self) -> list:
    return list(self._closed_jaxpr.out_avals)

  def __call__(self, *args, **kwargs):
    """Evaluates the program; the result has the structure `out_tree`.

    `(args, kwargs)` must have the structure `in_tree`, or any structure
    whose leaves sit at the same key paths, attribute and dict keys being
    interchangeable: e.g. a program saved with Flax `FrozenDict` params or an
    Equinox module takes those objects, or the same values in nested plain
    dicts (see `signature()` and jaxpr_io/pytree/calls.py). Raises TypeError,
    listing the expected key paths, otherwise.

    Each input's shape and dtype are checked: a wrong one is a TypeError
    naming the input's key path, the type the program takes and the one
    found. Python scalars and other weakly typed values pass where JAX's
    promotion gives the input's dtype (a Python float into a float32
    input, not into an int32 one): jaxpr_io/api/inputs.py.
    """
    call = (args, kwargs)
    statics = static.static_paths(self.in_tree)
    if statics:
      # The function, flag, ... the program was traced with at a static
      # place becomes its `Static` node again (see jaxpr_io/pytree/static.py).
      call = static.mark(call, statics)
    flat = tree_calls.flatten_call_args(self.in_tree, call)
    flat = self._check_dtypes(flat)
    fun = self._flat_fun(flat)
    if self._boxes:
      flat = hi_mutable.exact_inputs(
          self._closed_jaxpr.in_avals, flat,
          list(map(tree_calls.display_path,
                   tree_calls.leaf_paths(self.in_tree))))
    return jax.tree_util.tree_unflatten(self.out_tree, fun(*flat))

  def signature(self) -> str:
    """The call signature as text: each input leaf by its key path in
    `(args, kwargs)` (`args[0]['params']['w']`, `kwargs['scale']`) and each
    output leaf by its key path, with shape and dtype; the `in_tree` and
    `out_tree` structures; and, for a loaded program, the node types the file
    names that this process lacks and that plain containers stand in for."""
    text = tree_calls.signature_text(self.in_tree, self.in_avals, self.out_tree,
                                  self.out_avals)
    statics = static.static_paths(self.in_tree)
    if statics:
      lines = ["static (not inputs; a call passes the same values, None or "
               "nothing there):"]
      lines += [f"  {tree_calls._display_call_path(p)}: {s.description}"  # pylint: disable=protected-access
                for p, s in statics.items()]
      text += "\n" + "\n".join(lines)
    return text

  def bind(self, *args, extra: str = "error", **kwargs) -> "Program":
    """The program with its leading positional arguments `args` and the
    keyword arguments `kwargs` fixed to these values, like
    `functools.partial`: e.g. `predict.bind(params)` of `predict(params, x)`
    is a program of `x` alone.

    Each bound value is a pytree of arrays with the structure, shapes and
    dtypes of that argument (any structure with leaves at the same key paths
    works, as for a call); its arrays become the program's constants, so
    `save` stores them in the data section, `converters.to_saved_model`
    makes them `tf.Variable`s and `converters.to_exported` bakes them in.
    The result's `in_tree` and `signature()` cover the remaining inputs.
    A value read by `jaxpr_io.api.bind_sources.load_source` (what
    `jaxpr-load --bind` reads) holds only its source's metadata until every
    value has matched; its arrays are read then, up to the source's limit,
    an Orbax source's sharded by the caller or as the program declares. A
    `jax.Array` is kept on its devices, never fetched (docs/scale.md).

    A typed PRNG key input (`key<fry>[]`) also takes its key data, as
    `jax.random.key_data` gives it and Orbax saves it (a Flax NNX `RngKey`):
    a uint32 array of the key's shape followed by the shape of the
    program's impl's key data (threefry `(2,)`, rbg `(4,)`), wrapped as a
    key of the program's impl.

    `extra="ignore"` binds the part of a value that the program takes: the
    arrays at key paths that are no input of the program are dropped,
    unread (a whole Flax NNX state bound to a program of its `nnx.Param`s).
    Every input of a bound argument must still be found and match. The
    default, `extra="error"`, refuses them. (`extra` is this method's own:
    a program keyword argument named `extra` cannot be bound by name.)

    Raises:
      TypeError: a value does not match: the message names the first
        mismatching key path, the type the program takes and the one found.
      ValueError (`SourceError`): a source's arrays declare more bytes than
        it may expand to, or its data does not match its metadata.
      UnsupportedError: the program's signature is not `(args, kwargs)`, or
        a bound input has symbolic dimensions or is a mutable ref.
    """
    closed, in_tree = binding.bind(self, args, kwargs, extra)
    return Program(closed, in_tree, self.out_tree, self.metadata,
                   untrusted=self.untrusted)

  def specialize(self, **sizes: int) -> "Program":
    """The program with the symbolic dimensions named fixed to these sizes
    (`prog.specialize(b=1)`), the others left symbolic: what a runtime
    that wants static shapes takes (`converters.to_tflite`), or a program
    whose weights `bind` can then take. It computes what the original
    computes at those sizes, and saves and loads as any program.

    Raises:
      TypeError: a name is not a dimension variable of the program's
        inputs (the message lists them).
      ValueError: a size is below 1, or the sizes violate a constraint of
        the program (the message names it).
    """
    closed = specialize.fix_dims(self.closed_jaxpr, self.in_tree, sizes)
    return Program(closed, self.in_tree, self.out_tree, self.metadata,
                   untrusted=self.untrusted)

  def _check_dtypes(self, flat):
    """`flat` checked against the input dtypes (jaxpr_io/api/inputs.py),
    weakly typed values converted to them."""
    avals = self._closed_jaxpr.in_avals
    skip = [hi_mutable.is_hi_mutable(a)
            or compat_hi_mutable.current_state(x) is not None
            for x, a in zip(flat, avals)]
    return inputs.check_dtypes(avals, flat, skip, lambda i: tree_calls.
                               display_path(tree_calls.leaf_paths(
                                   self.in_tree)[i]))

  def _flat_fun(self, flat):
    """The evaluator for these flat arguments: the program itself, or, for a
    shape-polymorphic program, its specialization to the argument shapes."""
    closed = self.closed_jaxpr
    if self._fun is None:
      try:
        validate.check_backend_dtypes(closed.jaxpr, jax.default_backend())
        validate.check_compiler_aborts(closed.jaxpr)
      except FormatError as e:
        raise TypeError(str(e)) from None
      self._symbolic = specialize.has_symbolic_dims(closed.in_avals)
      self._boxes = hi_mutable.has_boxes(closed.jaxpr)
      self._fun = compat.jaxpr_as_fun(closed)
      self._specialized = {}
    # Boxes and logs (JAX 0.10) have no shape: what they hold is checked.
    boxed = [compat_hi_mutable.current_state(x) is not None for x in flat]
    shapes = [() if b else jax.numpy.shape(x) for b, x in zip(boxed, flat)]
    if not self._symbolic:
      # eval_jaxpr trusts its arguments: a wrong shape would run the
      # program's equations on operands they were not built for.
      for i, (shape, aval) in enumerate(zip(shapes, closed.in_avals)):
        if boxed[i] or hi_mutable.is_hi_mutable(aval):
          problem = hi_mutable.arg_problem(closed.jaxpr.invars[i], flat[i])
          if problem:
            path = tree_calls.display_path(
                tree_calls.leaf_paths(self.in_tree)[i])
            raise TypeError(f"input {path} {problem}")
          continue
        if tuple(shape) != getattr(aval, "shape", ()):  # tokens: ()
          path = tree_calls.display_path(tree_calls.leaf_paths(self.in_tree)[i])
          raise TypeError(f"input {path} has shape {tuple(shape)}, but the "
                          f"program takes {aval.str_short()}")
      return self._fun
    if all(symbolic.same_dims(s, a.shape)
           for s, a in zip(shapes, closed.in_avals)):
      return self._fun  # traced with the program's own symbolic dims
    env = symbolic.solve_dims(closed.in_avals, self.in_tree, shapes)
    if any(symbolic.is_symbolic(v) for v in env.values()):
      # Traced inside another shape-polymorphic trace (jax.export with its
      # own symbolic shapes): re-expressed in that trace's scope, once.
      return compat.jaxpr_as_fun(specialize.specialize(closed, env))
    key = tuple(sorted(env.items()))
    fun = self._specialized.get(key)
    if fun is None:
      fun = self._specialized[key] = compat.jaxpr_as_fun(
          specialize.specialize(closed, env))
    return fun

  def __str__(self) -> str:
    # Verifies constants first: the text prints small ones.
    return str(self.closed_jaxpr)

  def __repr__(self) -> str:
    ins = ", ".join(a.str_short() for a in self.in_avals)
    outs = ", ".join(a.str_short() for a in self.out_avals)
    return (f"Program(({ins}) -> ({outs}), "
            f"{len(self._closed_jaxpr.eqns)} equations)")


def trace(fn: Callable, *args, **kwargs) -> Program:
  """Traces `fn(*args, **kwargs)` into a `Program`.

  Arguments may be arrays, `jax.ShapeDtypeStruct`s or pytrees of them; the
  program's `in_tree` is the structure of `(args, kwargs)`.

  Leaves that are not array-like (functions, strings, other objects: e.g. the
  activation function of an Equinox module) are static, as in
  `eqx.filter_make_jaxpr`: they are passed to `fn` as they are, are not
  inputs, and the `in_tree` records each as a `jaxpr_io.static.Static` node
  (see `Program.signature`).
  """
  leaves, full_tree = jax.tree_util.tree_flatten((args, kwargs))
  if static.has_static(leaves):
    marks, dynamic = static.split(leaves)

    def with_statics(*dynamic_leaves):
      it = iter(dynamic_leaves)
      full = [next(it) if m is None else x for x, m in zip(leaves, marks)]
      fn_args, fn_kwargs = jax.tree_util.tree_unflatten(full_tree, full)
      return fn(*fn_args, **fn_kwargs)
    closed, out_shape = jax.make_jaxpr(with_statics, return_shape=True)(
        *dynamic)
    in_tree = jax.tree_util.tree_structure(jax.tree_util.tree_unflatten(
        full_tree, [x if m is None else m for x, m in zip(leaves, marks)]))
    out_tree = jax.tree_util.tree_structure(out_shape)
    return Program(closed, in_tree, out_tree)
  closed, out_shape = jax.make_jaxpr(fn, return_shape=True)(*args, **kwargs)
  in_tree = jax.tree_util.tree_structure((args, kwargs))
  out_tree = jax.tree_util.tree_structure(out_shape)
  return Program(closed, in_tree, out_tree)


def _flat_trees(closed):
  in_tree = jax.tree_util.tree_structure(
      (tuple(range(len(closed.jaxpr.invars))), {}))
  out_tree = jax.tree_util.tree_structure(
      list(range(len(closed.jaxpr.outvars))))
  return in_tree, out_tree


def as_program(program) -> Program:
  """`program` as a `Program`; a bare ClosedJaxpr gets flat in/out trees."""
  if isinstance(program, Program):
    return program
  if type(program) is compat.ClosedJaxpr:
    return Program(program, *_flat_trees(program))
  raise UnsupportedError(
      f"expected a jaxpr_io.Program or a ClosedJaxpr, got "
      f"{type(program).__name__}")


def serialize(program, *, max_derivative_order: int | None = None):
  """(program message, data layout) of a Program or ClosedJaxpr.

  The message (a `container.PendingProgram`) lacks the checksums of the
  data's blobs: `container.to_bytes` computes them, and
  `files.write_file` computes them while it writes the data.
  `max_derivative_order`: as for `dumps`."""
  program = as_program(program)
  # `closed_jaxpr` verifies a loaded program's constants: a copy must not
  # give corrupt data fresh checksums.
  with custom_rules.derivative_order(max_derivative_order):
    return writer.write_pending(program.closed_jaxpr, program.in_tree,
                                program.out_tree, program.metadata)


# Debug mode, off by default (it costs a `loads` per write):
# `dumps` and `save` read what they wrote back with the reader before
# returning, so that a program the writer stores but the reader refuses
# fails where it is written, with the reader's message, instead of in
# another process later. True or False sets it for this process; None
# follows the environment variable JAXPR_IO_READ_BACK ("1": on). The test
# suite switches it on for every test (tests/conftest.py).
READ_BACK: bool | None = None


def _read_back_enabled() -> bool:
  if READ_BACK is not None:
    return READ_BACK
  return os.environ.get("JAXPR_IO_READ_BACK", "") not in ("", "0")


def _read_back(data_container: container.Container) -> None:
  """Debug mode: rebuilds the program just written (constants unverified:
  their checksums were just computed; trusted: what the writer kept is the
  program's own), or raises FormatError naming the reader's refusal."""
  try:
    reader.read(data_container, verify_blobs=False, trusted=True)
  except FormatError as e:
    raise FormatError(
        f"jaxpr_io's reader refuses the file its writer just wrote (a bug "
        f"of the writer; please report it with the program): {e}") from None


def dumps(program, *, max_derivative_order: int | None = None) -> bytes:
  """The file bytes of a `Program` or a bare `ClosedJaxpr`. Deterministic:
  the same program always gives the same bytes. In debug mode (`READ_BACK`)
  the bytes are read back first.

  `max_derivative_order` (0 to 16; None: 3): custom derivative rules are
  stored for derivatives of the program up to this order. A rule that a
  higher order would first ask for (a rule inside rules nested deeper) is
  stored as one that raises `UnsupportedError`, naming the order, when JAX
  asks for it; a rule that calls its own function with the same types
  serves every order regardless."""
  data = container.to_bytes(*serialize(
      program, max_derivative_order=max_derivative_order))
  if _read_back_enabled():
    _read_back(container.Container(data))
  return data


def save(path: str | os.PathLike, program, *,
         max_derivative_order: int | None = None) -> None:
  """Writes `program` to `path` atomically (temporary file + rename): the
  bytes of `dumps` (`max_derivative_order` as there), with the constants
  written from their own buffers, and checksummed while they are written.
  In debug mode (`READ_BACK`) its bytes are read back before anything is
  written."""
  pending = serialize(program, max_derivative_order=max_derivative_order)
  if _read_back_enabled():
    _read_back(container.Container(container.to_bytes(*pending)))
  files.write_file(path, *pending)


def _from_container(data_container: container.Container, check: bool,
                    lazy: bool, trusted: bool) -> Program:
  closed, in_tree, out_tree, msg, rd = reader.read(
      data_container, verify_blobs=not lazy, trusted=trusted)
  producer = {"format_version": msg.format_version,
              "jaxpr_io_version": msg.producer.jaxpr_io_version,
              "jax_version": msg.producer.jax_version,
              "jaxlib_version": msg.producer.jaxlib_version}
  metadata = {}
  for kv in msg.metadata:
    if kv.key in metadata:
      raise FormatError(f"{data_container.source}: metadata key "
                        f"{kv.key!r} appears twice")
    metadata[kv.key] = kv.value
  rd.screen.warn(data_container.source, stacklevel=3)  # the user's call
  compat_polyfills.warn(data_container.source, rd.polyfilled, stacklevel=3)
  verify = rd.verify_pending_blobs if rd.pending_blobs else None
  program = Program(closed, in_tree, out_tree, metadata, producer=producer,
                    _verify=verify, polyfilled=rd.polyfilled,
                    untrusted=not trusted)
  if check:
    _check_inlined_size(rd, data_container.source, trusted)
    program.closed_jaxpr  # pylint: disable=pointless-statement
    _check(program, data_container.source, rd.decision_steps)
  return program


def _check_inlined_size(rd, source: str, trusted: bool) -> None:
  """Refuses, before `check=True` walks it, a program that expands to more
  inlined equations than the cost model allows (the "inlined equations"
  row of jaxpr_io/safety/costs.py): JAX's type checker and lowering walk a
  shared sub-jaxpr again at every use, and XLA inlines calls, so a file of
  20 jaxprs that each call the one before twice is a million equations."""
  limit = costs.checked_equations_limit(rd.stored_size, trusted)
  if rd.expanded_size <= limit:
    return
  # The first jaxpr over the limit: the sub-jaxprs it calls are within it.
  j = next(i for i, size in enumerate(rd.sizes) if size > limit)
  raise FormatError(
      f"{source}: jaxpr {j} expands to {rd.sizes[j]:,} equations, inputs "
      f"and outputs when its shared sub-jaxprs are inlined, over the "
      f"{limit:,} that check=True walks for a file that stores "
      f"{rd.stored_size:,} ({rd.stored_equations:,} equations): JAX's "
      "checker and XLA walk a shared sub-jaxpr at every use; load it "
      "without check=True"
      + ("" if trusted else ", or with trusted=True if you wrote it"))


# Values that exist only between the equations of a program (futures of
# asynchronous collectives, pinned linear buffers): an input of such a type
# cannot be passed, so a program that takes one cannot be called.
_NOT_PASSABLE = frozenset(t for t in (compat.AbstractFuture,
                                      compat.AbstractLinVal) if t is not None)


def _abstract_arg(aval):
  """A `ShapeDtypeStruct` for lowering with `aval`: with its sharding when
  the program uses explicit sharding, so that lowering sees what a call
  would pass."""
  if aval is compat.abstract_token:
    return jax.lax.create_token()
  if type(aval) in _NOT_PASSABLE:
    raise FormatError(f"an input has type {aval.str_short()}, which no "
                      "caller can pass (only JAX's primitives make one, "
                      "inside a program)")
  sharding = getattr(aval, "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  # Only a mesh with an axis that is not Auto types the value: an Auto
  # mesh's abstract sharding says nothing a caller passes (jit's own
  # shardings are params), and lowering with it alone asks for platforms.
  if any(t != jax.sharding.AxisType.Auto
         for t in getattr(mesh, "axis_types", ())):
    return jax.ShapeDtypeStruct(aval.shape, aval.dtype, sharding=sharding,
                                weak_type=aval.weak_type)
  return jax.ShapeDtypeStruct(aval.shape, aval.dtype,
                              weak_type=aval.weak_type)


def _check(program: Program, source: str, decision_steps: int | None
           ) -> None:
  """`check=True`: everything a caller does first with a program works.

  Runs JAX's type checker (every equation's abstract evaluation and typing
  rule, sub-jaxprs included), prints the program, serializes it again, and
  lowers and compiles it for this process's default backend (a program with
  symbolic dimensions is exported with `jax.export` instead, as it cannot be
  compiled before its shapes are known; one with `checkify.check`s is
  compiled under `checkify.checkify`, as it must be called). A failure in
  any step is a
  `FormatError` naming the step: the file is not a program this process can
  run. Comparisons of symbolic dimensions take at most `decision_steps`
  steps of JAX's decision procedure in all (what the load left of
  `limits.DECISION_STEPS`; None: no limit)."""
  closed = program.closed_jaxpr
  fun = compat.jaxpr_as_fun(closed)
  # checkify's family is loaded wherever a program can hold its checks.
  checks = families.module("checkify")
  if checks is not None and checks.has_checks(closed.jaxpr):
    # `checkify.check`s compile only functionalized, as in the original.
    fun = checks.functionalized(fun)
  try:
    # A box or log input (JAX 0.10) is passed as one holding zeros of the
    # types its initial quasi-dynamic data names.
    args = [hi_mutable.example_arg(v) if hi_mutable.is_hi_mutable(a)
            else _abstract_arg(a)
            for a, v in zip(closed.in_avals, closed.jaxpr.invars)]
  except FormatError as e:
    raise FormatError(f"{source}: the program cannot be called: {e}") from None
  steps = (
      ("does not type-check",
       lambda: typecheck.check_shared_calls(closed.jaxpr)),
      ("does not type-check", lambda: compat.check_jaxpr(closed.jaxpr)),
      ("does not type-check",
       lambda: typecheck.check_sub_jaxprs(closed.jaxpr)),
      ("does not type-check", lambda: shape_rules.check_shapes(closed.jaxpr)),
      ("does not type-check",
       lambda: shape_rules.check_mesh_sizes(closed.jaxpr)),
      ("cannot run here", lambda: validate.check_backend_dtypes(
          closed.jaxpr, jax.default_backend())),
      ("cannot be called here", lambda: validate.check_backend_inputs(
          closed.in_avals, jax.default_backend())),
      ("cannot run here",
       lambda: validate.check_compiler_aborts(closed.jaxpr)),
      ("cannot be printed", lambda: str(closed)),
      ("cannot be serialized again", lambda: serialize(program)),
      ("cannot be lowered and compiled",
       (lambda: jax.export.export(jax.jit(fun))(*args))
       if specialize.has_symbolic_dims(closed.in_avals)
       else lambda: jax.jit(fun).lower(*args).compile()),
  )
  for what, step in steps:
    try:
      with symbolic.decision_budget(decision_steps):
        try:
          step()
        finally:
          decision_steps = symbolic.steps_left()
    except symbolic.DecisionBudgetExceeded:
      raise FormatError(
          f"{source}: the program {what}: comparing its symbolic "
          "dimensions would take JAX's decision procedure over "
          f"{limits.DECISION_STEPS:,} steps, the limit of an untrusted "
          "file; load it with trusted=True if you know where it comes "
          "from") from None
    except Exception as e:  # pylint: disable=broad-except
      # Whatever JAX raises on programs no tracer would build (JaxprTypeError,
      # shape-rule errors, lowering and compiler errors) means the file is
      # not a valid program.
      raise FormatError(f"{source}: the program {what}: "
                        f"{type(e).__name__}: {e}") from None


def loads(data: bytes, *, check: bool = False,
          trusted: bool = False) -> Program:
  """Rebuilds a `Program` from bytes written by `dumps`.

  Trust model: `data` is untrusted. Loading never unpickles, evaluates or
  imports anything named in it; everything it names is looked up in this
  process's registries, every reference and value is validated before it
  reaches JAX (see jaxpr_io/read/reader.py), and the building of the program is
  bounded in memory (16x the data's size plus 64 MiB). What the data asks
  for beyond describing a computation (buffer donation, compiler options,
  native FFI targets, format strings) is dropped with a
  `DroppedParamWarning`, refused unless the process allowed it, or
  validated: jaxpr_io/safety/trust.py. Corrupt or unknown input raises
  `FormatError`.

  `trusted=True` restores what the data says for those params and lifts the
  memory bound: only for data you wrote. `check=True` also proves the
  program runs here: it type-checks every equation, prints, serializes
  again, lowers and compiles it, and raises `FormatError` if any step fails.
  Constants are views of `data`, not copies; their checksums are verified
  before first use.
  """
  if not isinstance(data, (bytes, bytearray, memoryview)):
    raise TypeError(f"loads expects bytes, got {type(data).__name__}")
  return _from_container(container.Container(bytes(data)), check, lazy=True,
                         trusted=trusted)


def load(path: str | os.PathLike, *, check: bool = False,
         trusted: bool = False, mapped: bool = True) -> Program:
  """Loads a `Program` from a file written by `save`.

  The file is mapped, not read: constants are read-only views of the mapping,
  paged in when first used, and their checksums are verified the first time
  `closed_jaxpr` is read or the program is called. The file must not be
  modified in place while the program is alive (replacing it, as `save`
  does, is safe): a mapped page that the file no longer has is a SIGBUS.
  `mapped=False` reads the file into memory instead (what `jaxpr-load`
  does): the program costs the file's size in memory and no longer depends
  on the file. Same trust model as `loads`.
  """
  data = container.map_file(path) if mapped else container.read_file(path)
  return _from_container(data, check, lazy=True, trusted=trusted)
