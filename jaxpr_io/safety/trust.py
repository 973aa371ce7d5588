"""What a file may ask of the loading process: the trust policy of `load`.

A file is untrusted data. Most of what it holds only describes a
computation, and the reader validates it structurally (jaxpr_io/read/reader.py).
A few params, though, reach past the computation, into native code, the
filesystem, the caller's buffers or Python's formatting machinery. For each
such (primitive, param) this module decides what an untrusted file gets:

* **dropped**: the param is reset to the value that asks for nothing, and a
  `DroppedParamWarning` names it (once per load, with the equation count);
* **allowlisted**: the value must be one the loading process registered
  (`register_ffi_target`); anything else is a `FormatError`;
* **validated**: the value must match a grammar (format strings: fields are
  names or positions only, widths and precisions are bounded); anything else
  is a `FormatError`;
* **trusted only**: an equation that nothing in the loading process can
  make safe (cuDNN's LSTM, whose native buffer sizes a file could make
  inconsistent) is a `FormatError` unless the file is trusted.

`load(..., trusted=True)` (and `loads`) restores what the file says for the
dropped, allowlisted and validated params, and lifts the resource limits of
the reader; use it only for files you wrote. What protects the process from
aborting (enum values, mesh shapes, device ids, dimension expressions,
nesting depth) is validated whatever `trusted` says.

`POLICIES` is the table docs/trust-model.md lists; a test keeps the two in
step.
"""

from __future__ import annotations

import dataclasses
import re
import string
import sys
import warnings
from typing import Any, Callable

from jaxpr_io.codec import registry
from jaxpr_io.format import dim_cost
from jaxpr_io.format import dim_grammar
from jaxpr_io.format import limits
from jaxpr_io.safety import printing
from jaxpr_io.errors import FormatError, UnsupportedError


class DroppedParamWarning(UserWarning):
  """An untrusted file asked for something `load` does not grant it."""


@dataclasses.dataclass(frozen=True)
class Policy:
  """One row of the trust-model table (docs/trust-model.md)."""
  what: str            # the primitive and param, or the record or value
  action: str          # "dropped", "allowlisted", "validated" or
  #                      "trusted only" (refused in untrusted files)
  handling: str        # what happens to it
  trusted: str         # what trusted=True changes


# ------------------------------------------------------------ FFI targets
# Native targets a file may call: name -> attribute validator (or None).
FFI_TARGETS: registry.Registry[str] = registry.Registry("FFI target")

# JAX's own host-callback targets take the address or index of a Python
# object in the process that traced the program as an attribute: from a file
# they are a pointer into nowhere. They are refused even for trusted files.
_PROCESS_BOUND_TARGETS = re.compile(
    r"xla_(ffi_)?(partitioned_)?python_.*callback.*")


def register_ffi_target(name: str, *,
                        validate_attributes: Callable[[dict], None]
                        | None = None) -> None:
  """Lets untrusted files call the FFI target `name` with `jax.ffi.ffi_call`.

  Register only targets that are safe to call with any operands and
  attributes a file may choose, or pass `validate_attributes(attributes)`,
  which raises (any exception) to refuse a file's attributes; it gets the
  attributes as a dict. A name registered twice is a ValueError naming the
  earlier registration.
  """
  if validate_attributes is not None and not callable(validate_attributes):
    raise TypeError("validate_attributes must be callable or None")
  FFI_TARGETS.add(name, name, validate_attributes)


# ------------------------------------------------------------ screens
class Screen:
  """The policy applied to one load: refuses, or drops and counts."""

  def __init__(self, trusted: bool):
    self.trusted = trusted
    self.dropped: dict[tuple[str, str], int] = {}

  def drop(self, primitive: str, param: str, equations: int = 1) -> None:
    key = (primitive, param)
    self.dropped[key] = self.dropped.get(key, 0) + equations

  def warn(self, source: str, stacklevel: int) -> None:
    """One warning per dropped (primitive, param), after the load;
    `stacklevel` as for `warnings.warn`, from the caller of this method."""
    for (primitive, param), count in sorted(self.dropped.items()):
      warnings.warn(DroppedParamWarning(
          f"{source}: ignored {param!r} of {count} {primitive!r} "
          f"equation(s): {_DROPPED_WHY[param]} An untrusted file may not "
          f"ask for it; load the file with trusted=True if you wrote it."),
          stacklevel=stacklevel + 1)


_DROPPED_WHY = {
    "donated_invars": "it donates (deletes) the caller's input buffers.",
    "compiler_options_kvs": "it sets XLA compiler options, which can write "
                            "files (xla_dump_to) or change numerics.",
    "compiler_params.flags": "it sets Mosaic compiler flags.",
    "compiler_options_json": "it sets XLA compiler options (the backend "
                             "config of the computation).",
    "compiler_params.profile_space": "it turns on the Mosaic GPU profiler, "
                                     "which writes files.",
    "compiler_params.profile_dir": "it names a directory for the Mosaic GPU "
                                   "profiler to write to.",
    "logging_record": "it chooses the logger name, level and source "
                      "location of what the program logs (jax.debug.log); "
                      f"it logs as {printing.UNTRUSTED_LOGGER!r} at INFO "
                      "instead.",
}


# `call_exported` (`jax.export.Exported.call`) embeds a serialized StableHLO
# module, which may call any custom-call target of the loading process:
# native code the file would choose. It is never stored (see
# tests/support/primitive_census.py, NOT_STORABLE); both sides say so.
_EXPORTED_REFUSED = (
    "call_exported embeds a serialized StableHLO module, which may call any "
    "native custom-call target, and a jaxpr_io file never chooses native "
    "code; store the function that was exported instead (trace it, not its "
    "Exported.call), or ship the Exported itself with jax.export's "
    "serialize/deserialize between parties that trust each other")


def _refuse_exported(value, params: dict):
  del value, params
  raise UnsupportedError(_EXPORTED_REFUSED)


def _refuse_stored_exported(stored, params: dict):
  del stored, params
  raise FormatError(f"the file stores a call_exported equation: "
                    f"{_EXPORTED_REFUSED}")


registry.register_eqn_param_codec("call_exported", "exported",
                                  encode=_refuse_exported,
                                  decode=_refuse_stored_exported)


def _screen_jit(name: str, params: dict, screen: Screen) -> dict:
  if screen.trusted:
    return params
  donated = params.get("donated_invars")
  if type(donated) is tuple and any(donated):
    params["donated_invars"] = (False,) * len(donated)
    screen.drop(name, "donated_invars")
  if params.get("compiler_options_kvs"):
    params["compiler_options_kvs"] = ()
    screen.drop(name, "compiler_options_kvs")
  return params


# compute_on's compute types, as JAX's `compute_on._check_valid` accepts
# them (its check runs when tracing, not when binding a loaded equation).
_COMPUTE_TYPE = re.compile(r"device_host|device|tpu_sparsecore|gpu_stream:\d{1,9}")


def _screen_compute_on(name: str, params: dict, screen: Screen) -> dict:
  compute_type = params.get("compute_type")
  if type(compute_type) is not str or not _COMPUTE_TYPE.fullmatch(
      compute_type):
    raise FormatError(f"compute_on's compute_type {compute_type!r:.80} is "
                      "not one of device_host, device, tpu_sparsecore, "
                      "gpu_stream:<n>")
  options = params.get("compiler_options_json")
  if options is not None and type(options) is not str:
    raise FormatError("compute_on's compiler_options_json is not None or a "
                      "string")
  if options is not None and not screen.trusted:
    params["compiler_options_json"] = None
    screen.drop(name, "compiler_options_json")
  return params


def _screen_ffi_call(name: str, params: dict, screen: Screen) -> dict:
  return _screen_native_target(name, params, screen, "attributes")


def _screen_thunky_custom_call(name: str, params: dict,
                               screen: Screen) -> dict:
  # thunky's custom call runs a custom-call target of the loading process
  # as a thunk, with `backend_config` as its attributes: what ffi_call does.
  return _screen_native_target(name, params, screen, "backend_config")


def _screen_native_target(name: str, params: dict, screen: Screen,
                          attributes_param: str) -> dict:
  target = params.get("target_name")
  if type(target) is not str:
    raise FormatError(f"{name}'s target_name is not a string: {target!r}")
  if _PROCESS_BOUND_TARGETS.fullmatch(target):
    raise FormatError(
        f"{name} target {target!r} is one of JAX's host-callback targets, "
        "whose attributes point into the process that traced the program; "
        "store the callback with jaxpr_io.register_callback instead")
  if screen.trusted:
    return params
  if target not in FFI_TARGETS.by_name:
    raise FormatError(
        f"{name} target {target!r} is not allowed: a file may only call "
        "native targets the loading process allows. Call "
        f"jaxpr_io.register_ffi_target({target!r}) before loading if it is "
        "safe with any operands and attributes, or load with trusted=True "
        "if you wrote the file")
  validate = FFI_TARGETS.by_name[target]
  if validate is not None:
    attributes = params.get(attributes_param, ())
    try:
      validate(dict(attributes))
    except Exception as e:  # pylint: disable=broad-except
      # The validator is the loading process's own code; whatever it raises
      # is a refusal of the file's attributes.
      raise FormatError(f"{name} target {target!r} refuses the file's "
                        f"{attributes_param}: {type(e).__name__}: {e}"
                        ) from None
  return params


# --------------------------------------------------- debug format strings
MAX_FORMAT_WIDTH = 256
MAX_FORMAT_PRECISION = 64
_FIELD_NAME = re.compile(r"|\d{1,4}|[A-Za-z_][A-Za-z0-9_]{0,99}")
# Python's format-spec mini-language, without nested fields:
# [[fill]align][sign][z][#][0][width][grouping][.precision][type].
_FORMAT_SPEC = re.compile(
    r"(?:[^{}]?[<>=^])?[-+ ]?z?#?0?(?P<width>\d+)?[,_]?"
    r"(?:\.(?P<precision>\d+))?[bcdeEfFgGnosxX%]?")


def check_format_string(fmt: str) -> None:
  """Raises FormatError unless every field of `fmt` is a name or position
  with at most a plain format spec of bounded width and precision: no
  attribute access, indexing or nested fields, which would let a file walk
  the objects of the loading process or ask for gigabytes of padding."""
  try:
    fields = list(string.Formatter().parse(fmt))
  except ValueError as e:
    raise FormatError(f"format string {fmt[:60]!r} does not parse: {e}") \
        from None
  for _, field, spec, conversion in fields:
    if field is None:
      continue
    if not _FIELD_NAME.fullmatch(field):
      raise FormatError(
          f"format field {{{field[:40]}}} is not a plain name or position "
          "(attribute access and indexing are refused in untrusted files)")
    if conversion not in (None, "r", "s", "a"):
      raise FormatError(f"format field {{{field}}} has conversion "
                        f"!{conversion}")
    match = _FORMAT_SPEC.fullmatch(spec or "")
    if (match is None
        or int(match["width"] or 0) > MAX_FORMAT_WIDTH
        or int(match["precision"] or 0) > MAX_FORMAT_PRECISION):
      raise FormatError(
          f"format field {{{field}}} has format spec {spec[:40]!r}, which is "
          f"not a plain spec with width <= {MAX_FORMAT_WIDTH} and precision "
          f"<= {MAX_FORMAT_PRECISION}")


class _Blank:
  """Stands for a printed value: formats as nothing, whatever the spec."""

  def __format__(self, spec):
    return ""


def _check_format_arguments(fmt: str, in_tree,
                            what: str = "debug_print") -> None:
  """Every field of `fmt` names an argument the equation passes, as
  jax.debug.print checks when it traces (the file may have changed either).
  `in_tree` is the treedef of (args, kwargs)."""
  if in_tree is None:
    return
  if in_tree.num_nodes > limits.MAX_FORMAT_ARGUMENT_NODES:
    raise FormatError(
        f"{what}'s arguments are a pytree of {in_tree.num_nodes:,} nodes, "
        f"more than the {limits.MAX_FORMAT_ARGUMENT_NODES:,} a format string "
        "is checked against")
  try:
    args, kwargs = in_tree.unflatten([_Blank()] * in_tree.num_leaves)
    fmt.format(*args, **kwargs)
  except (IndexError, KeyError, TypeError, ValueError) as e:
    raise FormatError(f"{what}'s format string {fmt[:60]!r} does not "
                      f"fit its arguments: {type(e).__name__}: {e}") from None


# numpy print options a file may set, with the values allowed.
_PRINT_OPTIONS: dict[str, Callable[[Any], bool]] = {
    "edgeitems": lambda v: type(v) is int and 0 <= v <= 1000,
    "threshold": lambda v: type(v) is int and 0 <= v <= sys.maxsize,
    "floatmode": lambda v: v in ("fixed", "unique", "maxprec",
                                 "maxprec_equal"),
    "precision": lambda v: v is None or (type(v) is int and
                                         0 <= v <= MAX_FORMAT_PRECISION),
    "suppress": lambda v: type(v) is bool,
    "linewidth": lambda v: type(v) is int and 1 <= v <= 10_000,
    "nanstr": lambda v: type(v) is str and len(v) <= 64,
    "infstr": lambda v: type(v) is str and len(v) <= 64,
    "sign": lambda v: v in ("-", "+", " "),
    "formatter": lambda v: v is None,
    "legacy": lambda v: v is False or v in ("1.13", "1.21", "1.25", "2.1",
                                            "2.2"),
    "override_repr": lambda v: v is None,
}


def _screen_debug_print(name: str, params: dict, screen: Screen) -> dict:
  if screen.trusted:
    return params
  fmt = params.get("fmt")
  if type(fmt) is not str:
    raise FormatError(f"debug_print's fmt is not a string: {fmt!r}")
  check_format_string(fmt)
  _check_format_arguments(fmt, params.get("in_tree"))
  options = params.get("np_printoptions", ())
  if type(options) is not tuple:
    raise FormatError("debug_print's np_printoptions is not a tuple")
  for item in options:
    if not (type(item) is tuple and len(item) == 2
            and item[0] in _PRINT_OPTIONS and _PRINT_OPTIONS[item[0]](item[1])):
      raise FormatError(f"debug_print's np_printoptions entry {item!r:.80} "
                        "is not an allowed numpy print option and value")
  if params.get("logging_record") is not None:
    params["logging_record"] = printing.untrusted_record(
        params["logging_record"])
    screen.drop(name, "logging_record")
  return params


# The parts of a screen that only a primitive family knows how to take
# apart (a kernel's compiler params, checkify's error tree): the family
# registers them when it loads (`register_family_screen`).
_FAMILY_SCREENS: dict[str, Callable] = {}


def register_family_screen(what: str, fn: Callable) -> None:
  """Registers the family's part of screen `what` ("pallas compiler
  params", "checkify formats")."""
  if what in _FAMILY_SCREENS:
    raise ValueError(f"the screen {what!r} is already registered")
  _FAMILY_SCREENS[what] = fn


def _family_screen(what: str) -> Callable:
  """The family's part of screen `what`; a file holding the family's
  primitive has loaded the family, and a screen that is missing is never
  skipped: the equation is refused."""
  fn = _FAMILY_SCREENS.get(what)
  if fn is None and registry.load_more():
    fn = _FAMILY_SCREENS.get(what)
  if fn is None:
    raise FormatError(f"no screen for {what} is loaded; the equation is "
                      "refused")
  return fn


def _screen_pallas_call(name: str, params: dict, screen: Screen) -> dict:
  if screen.trusted:
    return params
  return _family_screen("pallas compiler params")(
      params, lambda param: screen.drop(name, param))


def _screen_check(name: str, params: dict, screen: Screen) -> dict:
  # checkify formats a failed check's message with its payload when the
  # error is raised.
  del name
  if screen.trusted:
    return params
  formats = _family_screen("checkify formats")
  for fmt, payload_tree in formats(params["err_tree"]):
    check_format_string(fmt)
    _check_format_arguments(fmt, payload_tree, what="checkify.check")
  return params


# cuDNN's LSTM (jax.experimental.rnn): its lowering builds a cuDNN RNN
# descriptor from the sizes in the params and sizes the workspace and reserve
# space from the equation's avals; nothing checks that the two agree (JAX's
# own abstract evaluation needs jaxlib's CUDA plugin, and does not compare
# `input_size` with the input's shape), and a file that makes them disagree
# has cuDNN read and write past its buffers. Only trusted files may hold it.
_RNN_INT_PARAMS = ("input_size", "hidden_size", "num_layers")
MAX_RNN_SIZE = 1 << 24


def _screen_cudnn_rnn(name: str, params: dict, screen: Screen) -> dict:
  for param in _RNN_INT_PARAMS:
    value = params.get(param)
    if type(value) is not int or not 1 <= value <= MAX_RNN_SIZE:
      raise FormatError(f"{name}'s {param} {value!r:.40} is not an int from "
                        f"1 to {MAX_RNN_SIZE}")
  dropout = params.get("dropout")
  if type(dropout) not in (int, float) or not 0.0 <= dropout < 1.0:
    raise FormatError(f"{name}'s dropout {dropout!r:.40} is not a number "
                      "in [0, 1)")
  for param in ("bidirectional", "cudnn_allow_tf32"):
    if type(params.get(param)) is not bool:
      raise FormatError(f"{name}'s {param} is not a bool")
  if not screen.trusted:
    raise FormatError(
        f"{name} (cuDNN's LSTM) sizes native buffers from its params and "
        "avals, which a file could make disagree; an untrusted file may not "
        "hold it. Load the file with trusted=True if you wrote it")
  return params


SCREENS: dict[str, Callable[[str, dict, Screen], dict]] = {
    "jit": _screen_jit,
    "pjit": _screen_jit,
    "ffi_call": _screen_ffi_call,
    "debug_print": _screen_debug_print,
    "check": _screen_check,
    "pallas_call": _screen_pallas_call,
    # `pl.kernel` over meshes (SparseCore, Mosaic TPU cores, plgpu.kernel):
    # the same compiler params as pallas_call's.
    "mpmd_map": _screen_pallas_call,
    "compute_on": _screen_compute_on,
    "thunky.custom_call": _screen_thunky_custom_call,
    "rnn_fwd": _screen_cudnn_rnn,
    "rnn_bwd": _screen_cudnn_rnn,
}

POLICIES: tuple[Policy, ...] = (
    Policy("`jit` `donated_invars`", "dropped",
           "reset to no donation: a file cannot delete the caller's arrays",
           "kept"),
    Policy("`jit` `compiler_options_kvs`", "dropped",
           "reset to none: a file cannot set XLA options such as "
           "`xla_dump_to`", "kept"),
    Policy("`compute_on` `compiler_options_json`", "dropped",
           "reset to none: a file cannot set XLA compiler options", "kept"),
    Policy("`compute_on` `compute_type`", "validated",
           "one of `device_host`, `device`, `tpu_sparsecore`, "
           "`gpu_stream:<n>`", "the same"),
    Policy("`xla_metadata_call` `xla_metadata`, `ad_metadata`", "validated",
           "sorted (str, str) pairs, each key once (XLA frontend "
           "attributes, as `jax.experimental.xla_metadata` sets them)",
           "the same"),
    Policy("`pallas_call` and `mpmd_map` `compiler_params`: Mosaic TPU "
           "`flags`, Mosaic "
           "GPU `profile_space` and `profile_dir`", "dropped",
           "reset to their defaults: a file cannot set Mosaic compiler flags "
           "or make the profiler write files", "kept"),
    Policy("`ffi_call` `target_name`", "allowlisted",
           "must be registered with `jaxpr_io.register_ffi_target`; JAX's "
           "host-callback targets (`xla_ffi_[partitioned_]python_*callback*`)"
           " are refused",
           "any target except JAX's host-callback targets"),
    Policy("`ffi_call` `attributes`", "allowlisted",
           "passed to the registered target's `validate_attributes`",
           "not validated"),
    Policy("`thunky.custom_call` `target_name` (JAX 0.12)", "allowlisted",
           "as `ffi_call`'s: must be registered with "
           "`jaxpr_io.register_ffi_target`; its `backend_config` is passed "
           "to the target's `validate_attributes`",
           "any target except JAX's host-callback targets"),
    Policy("`rnn_fwd`, `rnn_bwd` (cuDNN's LSTM, `jax.experimental.rnn`)",
           "trusted only",
           "refused: cuDNN's buffers are sized from params and avals that "
           "nothing checks against each other; sizes validated (ints 1 to "
           "{max_rnn_size}, dropout in [0, 1))",
           "loaded, sizes validated"),
    Policy("`call_exported` `exported` (`jax.export.Exported.call`)",
           "never stored",
           "a serialized StableHLO module may call any native custom-call "
           "target: `dumps` refuses it, and a file that holds one is a "
           "`FormatError`", "the same"),
    Policy("`pure_callback`, `io_callback`, `debug_callback` `callback`",
           "allowlisted",
           "resolved by name among the functions the loading process "
           "registered with `jaxpr_io.register_callback`, or one of the "
           "table's library callbacks "
           "(`jaxpr_io.codec.library_table.LIBRARY_CALLBACKS`: Equinox's "
           "`error_if` closures, rebuilt from the loading process's Equinox "
           "with the file's messages, strings only)", "the same"),
    Policy("`custom_partitioning` `partition`, `propagate_user_sharding`, "
           "`infer_sharding_from_operands`, `sharding_rule`", "allowlisted",
           "taken from the `custom_partitioning` object the loading process "
           "registered under the stored name with "
           "`jaxpr_io.register_custom_partitioning`; the file holds only "
           "the name (or None)", "the same"),
    Policy("`call_hi_primitive` and `call_hi_primitive_linearized` "
           "`_prim` (JAX 0.11+ jax.numpy: "
           "`searchsorted`, `nonzero`, `ldexp`, `frexp`, ...; "
           "`lax.custom_root`)", "allowlisted",
           "one of JAX's own hi primitive classes in jaxpr_io's table "
           "(jaxpr_io/families/hijax/prims.py), or a class the loading process "
           "registered with `jaxpr_io.register_hi_primitive`; its "
           "constructor arguments are validated before the call "
           "(`custom_root`'s callables are rebuilt from stored jaxprs whose "
           "signatures are checked, families/hijax/solves.py)",
           "the same"),
    Policy("library functions in Equinox, Lineax, Optimistix and Diffrax "
           "values "
           "(loop bodies, objective rewrites, norms)", "allowlisted",
           "one of `jaxpr_io.codec.library_table.LIBRARY_FUNCTIONS`, by module and "
           "name; never another function of those packages", "the same"),
    Policy("`debug_print` `fmt`", "validated",
           "fields are names or positions only (no attribute access or "
           "indexing), width <= {max_width}, precision <= {max_precision}, "
           "no nested fields", "not validated"),
    Policy("`check` (checkify) error messages", "validated",
           "the format string of each failed check: as `debug_print`'s "
           "`fmt`, and it must fit the check's payload", "not validated"),
    Policy("`debug_print` `np_printoptions`", "validated",
           "known numpy print options with bounded values only; an "
           "equation one call of which could print more than "
           "{max_printed:,} characters (computed from its format string, "
           "options and operand avals) is refused",
           "not validated, no limit"),
    Policy("`debug_print` `logging_record` (`jax.debug.log`)", "dropped",
           "reset to a record of the logger `{untrusted_logger}` at INFO "
           "with no source location: a file cannot log as the "
           "application's loggers, at their levels, from their files",
           "kept"),
    Policy("meshes, `NamedSharding`, `PartitionSpec`, devices", "validated",
           "axis sizes >= 1 matching the device ids, distinct names and "
           "ids, specs naming mesh axes at most once; devices re-bound to "
           "the loading process's own", "the same"),
    Policy("enum params (`Precision`, `GatherScatterMode`, ...)",
           "validated", "members of the registered enum types, by name; "
           "`precision` and `preferred_element_type` must have their types",
           "the same"),
    Policy("symbolic dimensions and constraints", "validated",
           "the grammar of jaxpr_io/format/dim_grammar.py (integers <= 2**62, "
           "exponents <= {max_exponent}, {max_parens} levels of parentheses, "
           "{max_dim_length} characters); constant sizes 0 to 2**62; what "
           "JAX builds from them bounded before it parses them (at most "
           "{max_dim_work:,} monomials, jaxpr_io/format/dim_cost.py; no "
           "variable defined in terms of itself) and its decision procedure "
           "held to {decision_steps:,} steps a load",
           "the same, with no limit on the decision procedure's steps"),
    Policy("nesting", "validated",
           "sub-jaxprs at most {jaxpr_depth} deep, param values "
           "{value_depth}, pytrees {tree_depth}",
           "the same"),
    Policy("memory", "validated",
           "the objects a load builds are charged before they are built: at "
           "most the objects the file stores (their measured floor, bounded by "
           "its size) + {memory_factor}x the file's size + {fixed_mib} MiB "
           "beyond them",
           "no limit"),
    Policy("constant data", "validated",
           "CRC-32 checked before first use, printing, `dumps` or `save`",
           "the same"),
)


def policy_table() -> str:
  """The trust-model table of docs/trust-model.md, from `POLICIES` and the
  limits the modules that enforce them define."""
  values = dict(
      max_exponent=dim_grammar.MAX_EXPONENT,
      max_parens=dim_grammar.MAX_NESTING,
      max_dim_length=dim_grammar.MAX_LENGTH,
      max_dim_work=dim_cost.MAX_DIM_WORK,
      decision_steps=limits.DECISION_STEPS,
      jaxpr_depth=limits.MAX_JAXPR_DEPTH, value_depth=limits.MAX_VALUE_DEPTH,
      tree_depth=limits.MAX_TREE_DEPTH, memory_factor=limits.MEMORY_FACTOR,
      fixed_mib=limits.FIXED_OVERHEAD >> 20, max_width=MAX_FORMAT_WIDTH,
      max_precision=MAX_FORMAT_PRECISION, max_rnn_size=MAX_RNN_SIZE,
      max_printed=limits.MAX_PRINTED_CHARACTERS,
      untrusted_logger=printing.UNTRUSTED_LOGGER)
  rows = ["| what the file holds | action | untrusted (default) | "
          "`trusted=True` |", "| --- | --- | --- | --- |"]
  rows += [f"| {p.what} | {p.action} | {p.handling.format(**values)} | "
           f"{p.trusted} |" for p in POLICIES]
  return "\n".join(rows) + "\n"
