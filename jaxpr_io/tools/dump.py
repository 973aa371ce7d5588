"""jaxpr-dump: trace a Python function and save it as a .jaxpr file."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import re
import sys
from typing import Sequence

import jax
import jax.numpy as jnp

import jaxpr_io
from jaxpr_io.errors import JaxprIoError
from jaxpr_io.tools._common import (CliError, run_main, say, stage,
                                     user_code_error)

PROG = "jaxpr-dump"
EPILOG = """\
examples:
  # a function and the types of its arguments (letters are symbolic dims):
  jaxpr-dump model.py:predict --args f32[b,784] -o predict.jaxpr --text
  # a zero-argument factory returning (fn, args) or (fn, args, kwargs),
  # the way to dump a model whose first argument is a parameter pytree:
  jaxpr-dump mypkg.models:make_train_step --metadata run=42

SPEC is DTYPE[DIMS]: DTYPE one of bool, i8, i16, i32, i64, u8, u16, u32,
u64, f16, bf16, f32, f64, c64, c128; DIMS comma-separated sizes or
dimension variables (b, 2*b, ...), e.g. f32[8,784], i32[], bf16[b,128].
"""

_DTYPES = {"bool": jnp.bool_, "pred": jnp.bool_, "i8": jnp.int8,
           "i16": jnp.int16, "i32": jnp.int32, "i64": jnp.int64,
           "u8": jnp.uint8, "u16": jnp.uint16, "u32": jnp.uint32,
           "u64": jnp.uint64, "f16": jnp.float16, "bf16": jnp.bfloat16,
           "f32": jnp.float32, "f64": jnp.float64, "c64": jnp.complex64,
           "c128": jnp.complex128}
_SPEC = re.compile(r"^\s*([a-z0-9]+)\[([^\]]*)\]\s*$")


def parse_specs(specs: Sequence[str]) -> list[jax.ShapeDtypeStruct]:
  """`jax.ShapeDtypeStruct`s for SPECs; symbolic dims share one scope."""
  scope = jax.export.SymbolicScope()
  out = []
  for spec in specs:
    match = _SPEC.match(spec)
    if not match or match.group(1) not in _DTYPES:
      raise CliError(f"bad argument spec {spec!r}: expected DTYPE[DIMS] like "
                     f"f32[8,784] with DTYPE one of {', '.join(_DTYPES)}")
    dtype, dims = _DTYPES[match.group(1)], match.group(2).strip()
    try:
      shape = jax.export.symbolic_shape(dims, scope=scope) if dims else ()
    except (ValueError, TypeError) as e:
      raise CliError(f"bad dimensions in {spec!r}: {e}") from None
    out.append(jax.ShapeDtypeStruct(tuple(shape), dtype))
  return out


def load_target(target: str):
  """The object NAME of `path/to/file.py:NAME` or `package.module:NAME`."""
  module_part, sep, name = target.rpartition(":")
  if not sep or not module_part or not name:
    raise CliError(f"bad target {target!r}: expected path/to/file.py:NAME "
                   "or package.module:NAME")
  if module_part.endswith(".py") or os.sep in module_part:
    if not os.path.isfile(module_part):
      raise CliError(f"no such file: {module_part}")
    spec = importlib.util.spec_from_file_location(
        os.path.splitext(os.path.basename(module_part))[0], module_part)
    module = importlib.util.module_from_spec(spec)
    sys.path.insert(0, os.path.dirname(os.path.abspath(module_part)))
    try:
      spec.loader.exec_module(module)
    except Exception as e:  # pylint: disable=broad-except
      # Whatever the user's file raises: one line with its file:line.
      raise user_code_error(e, module_part) from e
  else:
    try:
      module = importlib.import_module(module_part)
    except ModuleNotFoundError as e:
      if e.name and (module_part == e.name or
                     module_part.startswith(e.name + ".")):
        raise CliError(f"cannot import {module_part!r}: {e}") from None
      raise user_code_error(e) from e  # an import inside the module failed
    except Exception as e:  # pylint: disable=broad-except
      raise user_code_error(e) from e
  try:
    return getattr(module, name)
  except AttributeError:
    raise CliError(f"{module_part} has no attribute {name!r}") from None


def _target_file(target: str) -> str | None:
  module_part = target.rpartition(":")[0]
  if module_part.endswith(".py") or os.sep in module_part:
    return module_part
  return None


def _fn_and_args(target: str, specs: Sequence[str] | None):
  obj = load_target(target)
  if specs:
    return obj, parse_specs(specs), {}
  try:
    made = obj()
  except Exception as e:  # pylint: disable=broad-except
    raise user_code_error(e, _target_file(target)) from e
  if not isinstance(made, tuple) or len(made) not in (2, 3):
    raise CliError(f"{target} must return (fn, args) or (fn, args, kwargs) "
                   "when --args is not given")
  fn, args = made[0], tuple(made[1])
  kwargs = dict(made[2]) if len(made) == 3 else {}
  return fn, args, kwargs


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog=PROG, description="Trace a JAX function and save it as a .jaxpr "
      "file.", epilog=EPILOG,
      formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("target", metavar="TARGET",
                      help="path/to/file.py:NAME or package.module:NAME")
  parser.add_argument("-o", "--output", metavar="OUT.jaxpr",
                      help="output file (default: NAME.jaxpr)")
  parser.add_argument("--args", nargs="+", metavar="SPEC",
                      help="argument types; NAME is then the function")
  parser.add_argument("--text", action="store_true",
                      help="also print the program as JAX prints it")
  parser.add_argument("--metadata", nargs="+", default=[],
                      metavar="KEY=VALUE", help="metadata saved in the file")
  parser.add_argument("--debug", action="store_true",
                      help="show tracebacks")
  return parser


def _main(argv: Sequence[str]) -> int:
  args = build_parser().parse_args(argv)
  metadata = {}
  for item in args.metadata:
    key, sep, value = item.partition("=")
    if not sep or not key:
      raise CliError(f"bad --metadata {item!r}: expected KEY=VALUE")
    metadata[key] = value
  out = args.output or args.target.rpartition(":")[2] + ".jaxpr"
  out_dir = os.path.dirname(out)
  if out_dir and not os.path.isdir(out_dir):  # before a long trace
    raise CliError(f"cannot write {out}: no such directory {out_dir}")
  fn, fn_args, fn_kwargs = _fn_and_args(args.target, args.args)
  with stage(PROG, f"tracing {args.target}"):
    try:
      prog = jaxpr_io.trace(fn, *fn_args, **fn_kwargs)
    except JaxprIoError:
      raise
    except Exception as e:  # pylint: disable=broad-except
      # The user's function failed while it was traced.
      raise user_code_error(e, _target_file(args.target)) from e
  prog.metadata.update(metadata)
  with stage(PROG, f"writing {out}"):
    jaxpr_io.save(out, prog)
  if args.text:
    say(str(prog.closed_jaxpr))
  print(f"wrote {out} ({os.path.getsize(out):,} bytes)", file=sys.stderr)
  return 0


def main(argv: Sequence[str] | None = None) -> int:
  return run_main(PROG, _main, argv)


if __name__ == "__main__":
  sys.exit(main())
