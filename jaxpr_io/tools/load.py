"""jaxpr-load: inspect, check, run and convert a .jaxpr file."""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
from typing import Sequence

import jax
import numpy as np

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io.converters._common import PLATFORMS
from jaxpr_io.format import files
from jaxpr_io.tools._common import (CliError, escape, escaped_output,
                                    run_main, say, stage)

PROG = "jaxpr-load"
EPILOG = """\
examples:
  jaxpr-load model.jaxpr                      # summary
  jaxpr-load model.jaxpr --check              # proves it runs, exit 0/1
  jaxpr-load model.jaxpr --text               # the program as JAX prints it
  jaxpr-load model.jaxpr --run in.npz --out out.npz
  jaxpr-load model.jaxpr --to-exported model.exported --platforms cpu,cuda
  jaxpr-load model.jaxpr --to-saved-model models/model/1
  jaxpr-load model.jaxpr --to-onnx model.onnx # checked in onnxruntime
  jaxpr-load model.jaxpr --to-tflite model.tflite   # checked in LiteRT
  jaxpr-load model.jaxpr --html model.html    # the viewer page, offline
  # predict(params, x) with the params of an Orbax checkpoint (or an .npz):
  jaxpr-load predict.jaxpr --bind 0=ckpt/100/state:params \
      --to-saved-model models/predict/1
  jaxpr-load predict.jaxpr --bind params=params.npz -o served.jaxpr
  # a program of a Flax NNX model's params, bound from the whole state:
  jaxpr-load apply.jaxpr --bind 0=ckpt/3/state --bind-ignore-extra -o s.jaxpr
  jaxpr-load vit.jaxpr --dims b=1 --to-tflite vit.tflite  # static batch

--run reads the inputs from IN.npz as arg0, arg1, ... in flattened input
order (the summary lists that order with each input's pytree path) and
writes the outputs to OUT.npz as out0, out1, ... (without --out it prints
their shapes and first values).

--bind ARG=SOURCE fixes the input ARG (a positional index, from 0 up like
functools.partial, or a keyword name) to the arrays of SOURCE: an Orbax
checkpoint item directory, optionally with :KEY.PATH to take a subtree
(ckpt/100/state:params), or an .npz whose arrays are keyed by the key paths
the summary prints (args[0]['w']) or by paths relative to ARG (['w']). The
weights become the program's constants: --run, --to-exported,
--to-saved-model and -o then see a program of the remaining inputs, numbered
arg0, arg1, ... again (a SavedModel's serving_default takes only them, the
weights are its variables). A SOURCE that does not match the program is an
error naming the first mismatching key path. A typed key input (key<fry>[])
takes the key data Orbax saved of a key (uint32[2] for threefry), wrapped
as a key of the program's impl. --bind-ignore-extra binds the part of each
SOURCE that the program takes and drops its other arrays, unread.
An Orbax SOURCE's arrays are restored sharded as the program declares
(the in_shardings of its jit, or its Explicit specs on the mesh of
--bind-mesh AXIS=SIZE[,AXIS=SIZE], made over this process's devices), each
device reading its own shards; arrays declared unsharded are read whole.

--dims NAME=SIZE[,NAME=SIZE] fixes symbolic dimensions (--dims b=1) before
everything else, with the program's constraints checked: a runtime that
wants static shapes (LiteRT) then gets them, and --bind can bind inputs
that had symbolic dimensions.

--to-onnx and --to-tflite run the artifact in its own runtime
(onnxruntime, the LiteRT interpreter) on the --run inputs, or else on zeros
of the input types (each symbolic dimension 2), compare its outputs with
JAX's (|ONNX - JAX| <= 1e-4 + 1e-4 |JAX|) and print the largest
difference; --no-verify skips that.

--platforms (lowering platforms of --to-exported and --to-saved-model) is
a comma-separated subset of: cpu, cuda, rocm, tpu.
"""



def input_paths(prog) -> list[str]:
  """Pytree path of each flat input, e.g. `args[0]['w']`, `kwargs['scale']`."""
  skeleton = jax.tree_util.tree_unflatten(prog.in_tree,
                                          range(prog.in_tree.num_leaves))
  paths = []
  for path, _ in jax.tree_util.tree_flatten_with_path(skeleton)[0]:
    head, rest = path[0], path[1:]
    prefix = "args" if getattr(head, "idx", None) == 0 else "kwargs"
    paths.append(prefix + jax.tree_util.keystr(tuple(rest)))
  return paths


def output_paths(prog) -> list[str]:
  skeleton = jax.tree_util.tree_unflatten(prog.out_tree,
                                          range(prog.out_tree.num_leaves))
  return ["out" + jax.tree_util.keystr(path)
          for path, _ in jax.tree_util.tree_flatten_with_path(skeleton)[0]]


def _walk(closed):
  """Every distinct jaxpr and closed jaxpr of the program."""
  seen, jaxprs, consts = set(), [], {}
  stack = [closed]
  while stack:
    j = stack.pop()
    if type(j) is compat.ClosedJaxpr:
      for c in j.consts:
        consts[id(c)] = c
      j = j.jaxpr
    if id(j) in seen:
      continue
    seen.add(id(j))
    jaxprs.append(j)
    for eqn in j.eqns:
      for v in eqn.params.values():
        for sub in (v if isinstance(v, tuple) else (v,)):
          if type(sub) in (compat.Jaxpr, compat.ClosedJaxpr):
            stack.append(sub)
  return jaxprs, list(consts.values())


def summary(path: str, prog) -> str:
  """The summary of a loaded program; every string from the file (names,
  producer, metadata) is escaped, one line each."""
  closed = prog.closed_jaxpr
  jaxprs, consts = _walk(closed)
  counts = collections.Counter(e.primitive.name for j in jaxprs
                               for e in j.eqns)
  p = prog.producer
  lines = [f"file: {escape(path)}"]
  if p:
    lines.append(escape(
        f"format version: {p['format_version']} (written by jaxpr_io "
        f"{p['jaxpr_io_version']}, jax {p['jax_version']}, jaxlib "
        f"{p['jaxlib_version']})"))
  lines.append("inputs:")
  for i, (name, aval) in enumerate(zip(input_paths(prog), closed.in_avals)):
    lines.append(f"  arg{i}: {escape(name)}: {escape(aval.str_short())}")
  lines.append("outputs:")
  for i, (name, aval) in enumerate(zip(output_paths(prog),
                                       closed.out_avals)):
    lines.append(f"  out{i}: {escape(name)}: {escape(aval.str_short())}")
  total = sum(counts.values())
  lines.append(f"equations: {total} in {len(jaxprs)} jaxprs")
  for name, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
    lines.append(f"  {escape(name)}: {n}")
  const_bytes = sum(int(np.asarray(c).nbytes) for c in consts
                    if not compat.is_key_array(c))
  lines.append(f"constants: {len(consts)}, {const_bytes:,} bytes")
  lines.append("metadata:" + ("" if prog.metadata else " (none)"))
  for key, value in prog.metadata.items():
    lines.append(f"  {escape(key)}: {escape(value)}")
  return "\n".join(lines)


def read_inputs(prog, in_path: str) -> list[np.ndarray]:
  """The flat inputs arg0, arg1, ... of IN.npz, checked against the
  program's input types."""
  closed = prog.closed_jaxpr
  data = np.load(in_path, allow_pickle=False)
  if not isinstance(data, np.lib.npyio.NpzFile):
    raise CliError(f"--run {in_path}: expected an .npz archive of the inputs "
                   "arg0, arg1, ... (np.savez(path, arg0=x)), got a single "
                   ".npy array")
  with data:
    expected = [f"arg{i}" for i in range(len(closed.in_avals))]
    missing = [k for k in expected if k not in data.files]
    if missing:
      raise CliError(f"{in_path} lacks inputs {', '.join(missing)} (the "
                     f"program takes {', '.join(expected)})")
    flat = [data[k] for k in expected]
  for i, (x, aval) in enumerate(zip(flat, closed.in_avals)):
    if x.dtype != aval.dtype or len(x.shape) != len(aval.shape) or any(
        type(d) is int and d != s for d, s in zip(aval.shape, x.shape)):
      raise CliError(f"input arg{i} has type {x.dtype}{list(x.shape)} but "
                     f"the program takes {aval.str_short()}")
  return flat


def run(prog, in_path: str, out_path: str | None) -> None:
  flat = read_inputs(prog, in_path)
  args, kwargs = jax.tree_util.tree_unflatten(prog.in_tree, flat)
  with stage(PROG, "running"):
    outs = jax.tree_util.tree_leaves(jax.jit(prog)(*args, **kwargs))
  outs = [np.asarray(o) for o in outs]
  if out_path:
    np.savez(out_path, **{f"out{i}": o for i, o in enumerate(outs)})
    print(f"wrote {len(outs)} outputs to {out_path}")
    return
  for i, (name, o) in enumerate(zip(output_paths(prog), outs)):
    values = np.array2string(o.reshape(-1)[:6], precision=6)
    print(f"out{i}: {escape(name)}: {o.dtype}{list(o.shape)} {values}"
          f"{' ...' if o.size > 6 else ''}")


def parse_platforms(args) -> tuple[str, ...] | None:
  if not args.platforms:
    return None
  if not (args.to_exported or args.to_saved_model):
    raise CliError("--platforms sets the lowering platforms of "
                   "--to-exported and --to-saved-model; give one of them")
  platforms = tuple(p.strip() for p in args.platforms.split(","))
  for p in platforms:
    if p not in PLATFORMS:
      raise CliError(f"unknown platform {p!r} in --platforms "
                     f"{args.platforms}: valid platforms are "
                     f"{', '.join(PLATFORMS)}"
                     + (" (NVIDIA GPUs are cuda, AMD GPUs rocm)"
                        if p == "gpu" else ""))
  if len(set(platforms)) != len(platforms):
    raise CliError(f"--platforms {args.platforms} names a platform twice")
  return platforms


def parse_binds(items: Sequence[str]) -> list[tuple[int | str, str, str]]:
  """(ARG as an index or a name, SOURCE, the item) of each --bind."""
  binds, seen = [], set()
  for item in items:
    arg, sep, source = item.partition("=")
    if not sep or not arg or not source or not (
        arg.isdigit() or arg.isidentifier()):
      raise CliError(f"bad --bind {item!r}: expected ARG=SOURCE, ARG a "
                     "positional index (0, 1, ...) or a keyword name")
    key = int(arg) if arg.isdigit() else arg
    if key in seen:
      raise CliError(f"--bind binds {arg} twice")
    seen.add(key)
    binds.append((key, source, item))
  indices = sorted(k for k, _, _ in binds if isinstance(k, int))
  if indices != list(range(len(indices))):
    missing = min(set(range(len(indices) + 1)) - set(indices))
    raise CliError(f"--bind binds positional arguments from the first, like "
                   f"functools.partial: --bind {indices[-1]}=... needs "
                   f"--bind {missing}=... too (or bind it by keyword)")
  return binds


_BOUND_ARG = re.compile(r"^bind (args\[(\d+)\]|kwargs\['([^']*)'\])")


def bind(prog, binds, trusted: bool = False, extra: str = "error",
         mesh=None):
  """`prog.bind` with the arrays of each --bind SOURCE: each source's
  metadata first, its arrays once all have matched the program (at most
  16x the source's size + 64 MiB of them unless `trusted`); `extra`
  as for `Program.bind` (--bind-ignore-extra: "ignore"); `mesh` (of
  --bind-mesh) the mesh of the shardings the program declares."""
  # lazy: import time (--bind reads Orbax checkpoints and .npz files).
  from jaxpr_io.api import bind_sources  # pylint: disable=g-import-not-at-top
  positional, keyword = [], {}
  for key, source, _ in sorted(binds, key=lambda b: (
      (0, b[0], "") if isinstance(b[0], int) else (1, 0, b[0]))):
    with stage(PROG, f"reading the metadata of {source}"):
      value = bind_sources.load_source(source, trusted=trusted,
                                       mesh=mesh if os.path.isdir(
                                           bind_sources.split_spec(
                                               source)[0]) else None)
    if isinstance(key, int):
      positional.append(value)
    else:
      keyword[key] = value
  try:
    with stage(PROG, "binding"):
      return prog.bind(*positional, extra=extra, **keyword)
  except TypeError as e:
    # Name the --bind the mismatch comes from.
    m = _BOUND_ARG.match(str(e))
    sources = {str(k): item for k, _, item in binds}
    item = m and sources.get(m.group(2) or m.group(3))
    raise CliError(f"--bind {item}: {e}" if item else str(e)) from None


def parse_dims(text: str, option: str = "--dims") -> dict[str, int]:
  """NAME -> SIZE of --dims (or --bind-mesh) NAME=SIZE[,NAME=SIZE]."""
  dims = {}
  for item in text.split(","):
    name, sep, size = item.strip().partition("=")
    name, size = name.strip(), size.strip()
    # ASCII digits: str.isdigit also takes '²', which int() refuses.
    if (not sep or not name.isidentifier() or not size.isascii()
        or not size.isdigit()):
      raise CliError(f"bad {option} item {item!r}: expected NAME=SIZE, "
                     f"e.g. {option} b=1,c=2")
    if name in dims:
      # --dims fixes a dimension; --bind-mesh names a mesh axis.
      verb = "fixes" if option == "--dims" else "names"
      raise CliError(f"{option} {verb} {name} twice")
    dims[name] = int(size)
  return dims


def bind_mesh(prog, text: str):
  """--bind-mesh: a mesh of these axes over this process's devices, its
  axis types those the program declares for a mesh of the same axes
  (Auto where it declares none)."""
  # lazy: import time (only --bind-mesh builds a mesh).
  from jaxpr_io.api import shardings  # pylint: disable=g-import-not-at-top
  axes = parse_dims(text, "--bind-mesh")
  try:
    return shardings.make_mesh(prog.closed_jaxpr, tuple(axes),
                               tuple(axes.values()))
  except ValueError as e:
    raise CliError(f"--bind-mesh {text}: {str(e).splitlines()[0]}; give "
                   "axes whose sizes multiply to the device count") from None


def specialize(prog, dims: dict[str, int]):
  """--dims: `prog.specialize(**dims)`, its refusals one line."""
  try:
    with stage(PROG, "fixing --dims"):
      return prog.specialize(**dims)
  except (TypeError, ValueError) as e:
    raise CliError(f"--dims: {e}") from None


def _custom_nodes(*trees) -> list[str]:
  """The names of the pytree node types in `trees` that jax.export does not
  serialize by itself: all but tuples, lists, dicts of string keys and
  None (Equinox modules, Flax structs, namedtuples, ...)."""
  builtin = (tuple, list, dict, type(None))
  names, stack = set(), list(trees)
  while stack:
    tree = stack.pop()
    data = tree.node_data()
    if data is not None and data[0] not in builtin:
      names.add(f"{data[0].__module__}.{data[0].__qualname__}")
    elif data is not None and data[0] is dict and not all(
        type(k) is str for k in data[1]):
      names.add("dict with keys that are not strings")
    stack.extend(tree.children())
  return sorted(names)


def save_exported(converters, prog, path: str, platforms) -> None:
  """--to-exported. jax.export serializes a signature's custom pytree nodes
  only if the process registered them with
  `jax.export.register_pytree_node_serialization`, which a CLI user cannot
  do: such a program is exported with its flat signature, the inputs arg0,
  arg1, ... in the order the summary and --run use, the outputs a list."""
  nodes = _custom_nodes(prog.in_tree, prog.out_tree)
  if nodes:
    print(f"{PROG}: note: the signature holds pytree node types that "
          f"jax.export cannot serialize ({', '.join(nodes)}); the exported "
          "program takes the flat inputs arg0, arg1, ... (in the order "
          "jaxpr-load's summary lists) and returns a flat list",
          file=sys.stderr)
    prog = jaxpr_io.Program(prog.closed_jaxpr, *_flat_signature(prog))
  converters.save_exported(prog, path, platforms=platforms)


def _flat_signature(prog):
  n_in, n_out = len(prog.in_avals), len(prog.out_avals)
  return (jax.tree_util.tree_structure((tuple(range(n_in)), {})),
          jax.tree_util.tree_structure(list(range(n_out))))


def convert_for_runtimes(prog, args) -> None:
  """--to-onnx and --to-tflite: each artifact written under a temporary
  name next to its path, run there in its own runtime on the --run inputs
  (or zeros) and compared with JAX, and renamed into place only once it
  matches (with --no-verify, once written): a failure leaves what was at
  the path, and no temporaries."""
  # lazy: import time (the converters import jax2onnx and TensorFlow).
  from jaxpr_io import converters  # pylint: disable=g-import-not-at-top
  inputs = read_inputs(prog, args.run) if args.run else None
  jobs = []
  if args.to_onnx:
    jobs.append((args.to_onnx, "ONNX model", "onnxruntime",
                 lambda tmp: converters.to_onnx(prog, tmp,
                                                opset=args.opset),
                 converters.verify_onnx))
  if args.to_tflite:
    jobs.append((args.to_tflite, "LiteRT model", "the LiteRT interpreter",
                 lambda tmp: converters.to_tflite(prog, tmp),
                 converters.verify_tflite))
  for path, what, runtime, write, check in jobs:
    verdict = None
    with files.replaced_file(path) as tmp:
      with stage(PROG, f"writing {what} {path}"):
        write(tmp)
      if not args.no_verify:
        with stage(PROG, f"checking {path} in {runtime}"):
          verdict = check(prog, tmp, inputs, name=path)
    print(f"wrote {what} {path} ({os.path.getsize(path):,} bytes)")
    if verdict is not None:
      print(f"{path}: {verdict.line()}")


def build_parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog=PROG, description="Inspect, check, run and convert a .jaxpr file.",
      epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("file", metavar="FILE")
  parser.add_argument("--check", action="store_true",
                      help="verify checksums, type-check, lower and compile; "
                      "exit 0 or 1")
  parser.add_argument("--trusted", action="store_true",
                      help="grant what the file asks for beyond the "
                      "computation (donation, compiler options, any FFI "
                      "target, any format string, any amount of printing) "
                      "and read --bind sources of any size: only for files "
                      "you wrote")
  parser.add_argument("--text", action="store_true",
                      help="print the program as JAX prints it")
  parser.add_argument("--run", metavar="IN.npz",
                      help="evaluate on the inputs arg0, arg1, ... of IN.npz")
  parser.add_argument("--out", metavar="OUT.npz",
                      help="with --run: write the outputs out0, out1, ...")
  parser.add_argument("--to-exported", metavar="OUT",
                      help="write jax.export bytes to OUT and StableHLO text "
                      "to OUT.mlir")
  parser.add_argument("--to-saved-model", metavar="DIR",
                      help="write a TensorFlow SavedModel (needs tensorflow)")
  parser.add_argument("--to-onnx", metavar="OUT.onnx",
                      help="write an ONNX model (needs jaxpr_io[onnx]) and "
                      "check it in onnxruntime")
  parser.add_argument("--opset", type=int, metavar="N",
                      help="the ONNX opset of --to-onnx (default: "
                      "jax2onnx's)")
  parser.add_argument("--to-tflite", metavar="OUT.tflite",
                      help="write a LiteRT (TensorFlow Lite) model (needs "
                      "tensorflow) and check it in the LiteRT interpreter "
                      "(jaxpr_io[litert])")
  parser.add_argument("--no-verify", action="store_true",
                      help="do not run --to-onnx / --to-tflite artifacts "
                      "in their runtimes")
  parser.add_argument("--bind", action="append", default=[],
                      metavar="ARG=SOURCE",
                      help="fix input ARG (0, 1, ... or a keyword name) to "
                      "the arrays of SOURCE (an Orbax checkpoint item "
                      "directory[:KEY.PATH] or an .npz); repeatable")
  parser.add_argument("--bind-ignore-extra", action="store_true",
                      help="with --bind: bind the part of each SOURCE that "
                      "the program takes (a whole Flax NNX state to a "
                      "program of its params), dropping its other arrays "
                      "unread")
  parser.add_argument("--bind-mesh", metavar="AXIS=SIZE[,AXIS=SIZE]",
                      help="with --bind: restore the Orbax SOURCE's arrays "
                      "with the shardings the program declares, on a mesh "
                      "of these axes over this process's devices "
                      "(docs/scale.md)")
  parser.add_argument("--dims", metavar="NAME=SIZE[,NAME=SIZE]",
                      help="fix symbolic dimensions (b=1,c=2) before "
                      "--bind, --run and the conversions, with the "
                      "program's constraints checked: for runtimes that "
                      "want static shapes (--to-tflite)")
  parser.add_argument("-o", "--output", metavar="OUT.jaxpr",
                      help="write the program (with --bind: the bound "
                      "program) to OUT.jaxpr")
  parser.add_argument("--platforms", metavar="P1,P2",
                      help="lowering platforms for --to-exported and "
                      "--to-saved-model: cpu, cuda, rocm, tpu (default: "
                      "this machine's)")
  parser.add_argument("--html", metavar="OUT.html",
                      help="write a self-contained viewer page holding the "
                      "file (graph, signature, params, constants, search; "
                      "read by the page's own JavaScript reader, no network)")
  parser.add_argument("--debug", action="store_true", help="show tracebacks")
  return parser


def _main(argv: Sequence[str]) -> int:
  args = build_parser().parse_args(argv)
  if args.out and not args.run:
    raise CliError("--out needs --run")
  if args.opset is not None and not args.to_onnx:
    raise CliError("--opset sets the ONNX opset of --to-onnx; give it")
  if args.no_verify and not (args.to_onnx or args.to_tflite):
    raise CliError("--no-verify skips the check of --to-onnx and "
                   "--to-tflite; give one of them")
  platforms = parse_platforms(args)
  binds = parse_binds(args.bind)
  if args.bind_ignore_extra and not binds:
    raise CliError("--bind-ignore-extra binds the part of a --bind SOURCE "
                   "that the program takes; give --bind")
  if args.bind_mesh and not binds:
    raise CliError("--bind-mesh is the mesh of the shardings that --bind "
                   "restores an Orbax SOURCE with; give --bind")
  dims = parse_dims(args.dims) if args.dims else None
  for out in (args.output, args.out, args.html, args.to_onnx,
              args.to_tflite):
    out_dir = os.path.dirname(out or "")
    if out_dir and not os.path.isdir(out_dir):
      raise CliError(f"cannot write {out}: no such directory {out_dir}")
  if args.html:
    # lazy: import time (only --html writes a page).
    from jaxpr_io.tools import html  # pylint: disable=g-import-not-at-top
    with stage(PROG, f"writing the viewer page {args.html}"):
      size = html.write_page(args.file, args.html)
    print(f"wrote {args.html} ({size:,} bytes; open it in a browser)")
    # The page reads the file itself: nothing else asked, nothing to load
    # (so it also shows files this JAX release cannot load).
    if not (args.check or args.text or args.run or args.to_exported
            or args.to_saved_model or args.to_onnx or args.to_tflite
            or args.output or binds or dims):
      return 0
  with stage(PROG, f"loading {args.file}"):
    prog = load_file(args.file, check=args.check, trusted=args.trusted)
  if dims:
    prog = specialize(prog, dims)
  if binds:
    prog = bind(prog, binds, trusted=args.trusted,
                extra="ignore" if args.bind_ignore_extra else "error",
                mesh=bind_mesh(prog, args.bind_mesh) if args.bind_mesh
                else None)
  acted = False
  if args.output:
    with stage(PROG, f"writing {args.output}"):
      jaxpr_io.save(args.output, prog)
    print(f"wrote {args.output} ({os.path.getsize(args.output):,} bytes)")
    acted = True
  if args.check:
    print(f"{escape(args.file)}: OK (checksums, type check, lowering and "
          "compilation passed)")
    acted = True
  if args.text:
    say(str(prog.closed_jaxpr))
    acted = True
  if args.run:
    run(prog, args.run, args.out)
    acted = True
  if args.to_exported or args.to_saved_model:
    # lazy: import time (the converters import jax.export and TensorFlow).
    from jaxpr_io import converters  # pylint: disable=g-import-not-at-top
    if args.to_exported:
      with stage(PROG, f"exporting StableHLO to {args.to_exported}"):
        save_exported(converters, prog, args.to_exported, platforms)
      print(f"wrote {args.to_exported} and {args.to_exported}.mlir")
    if args.to_saved_model:
      with stage(PROG, f"writing SavedModel {args.to_saved_model}"):
        converters.to_saved_model(prog, args.to_saved_model,
                                  platforms=platforms)
      print(f"wrote SavedModel {args.to_saved_model}")
    acted = True
  if args.to_onnx or args.to_tflite:
    convert_for_runtimes(prog, args)
    acted = True
  if not acted:
    say(summary(args.file, prog))
  return 0


def load_file(path: str, *, check: bool, trusted: bool):
  """The program of FILE, read into memory rather than mapped (what
  `jaxpr_io.load` does by default): jaxpr-load loads and runs in one go,
  and a file rewritten in place meanwhile (a job saving over it without a
  rename) must not crash it with SIGBUS at the first use of a constant. A
  change during the read fails a checksum: a one-line FormatError."""
  return jaxpr_io.load(path, check=check, trusted=trusted, mapped=False)


def _escaped_main(argv: Sequence[str]) -> int:
  """`_main` with what the program prints or logs escaped
  (`escaped_output`): the file chooses it."""
  with escaped_output():
    try:
      return _main(argv)
    finally:
      _wait_for_effects()


def _wait_for_effects() -> None:
  """Waits for the program's pending debug prints (JAX runs them on a
  callback thread), so that they are written while the output is escaped."""
  try:
    jax.effects_barrier()
  except Exception:  # pylint: disable=broad-except
    pass  # the error being raised, if any, is the one to report


def main(argv: Sequence[str] | None = None) -> int:
  return run_main(PROG, _escaped_main, argv)


if __name__ == "__main__":
  sys.exit(main())
