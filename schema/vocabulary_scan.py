"""Lists the vocabulary a JAX release's programs use, for schema/VOCABULARY.md
and the param schema (jaxpr_io/format/param_schema.json).

    python schema/vocabulary_scan.py OUT.json        # under each release
    python schema/vocabulary_scan.py --definitions DEFS.json  # each release
    python schema/vocabulary_scan.py --markdown A.json B.json ... > NEW.md
    mv NEW.md schema/VOCABULARY.md
    python schema/vocabulary_scan.py --schema A.json B.json ... DEFS_A.json ...

The first form traces every CPU harness of JAX's primitive test suite and the
test programs, maps each equation to the format's vocabulary with the
running release's adapter (exactly what the writer stores), and records, per
vocabulary primitive, each param's kind of value and the release's own name
for the primitive. The second form (seconds, no tracing) records what the
running release's rules for each primitive accept
(jaxpr_io/compat/param_definitions.py): the params they name, which they
require, which they show to be optional, and the kinds their annotations
give. The third form merges the releases' lists into the
table that documents the vocabulary. Rows of primitives that no scanned
program holds (kernel primitives, JAX 0.12's thunky) keep the params text
written by hand in the current schema/VOCABULARY.md; a primitive that the
scan saw without params says "(no params)", one it never saw and that has
no hand-written text says "(not traced)". The last form writes the param
schema from both kinds of file (see `write_schema`).
"""

from __future__ import annotations

import collections
import json
import os
import re
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))


def _kind(value, compat) -> str:
  t = type(value)
  if value is None:
    return "none"
  if compat.is_jaxpr(value):
    return "jaxpr"
  if t is tuple:
    kinds = sorted({_kind(v, compat) for v in value})
    return "tuple" + (f"[{'|'.join(kinds)}]" if kinds else "")
  if t in (bool, int, float, str, complex, frozenset):
    return t.__name__
  if t.__module__.startswith("numpy") and t.__name__.startswith("dtype"):
    return "dtype"
  return f"{t.__qualname__}"


# The sharding cases of the exchange set need 8 devices: without them their
# primitives (sharding_constraint, all_gather, ...) are not traced.
_DEVICES_FLAG = "--xla_force_host_platform_device_count=8"


def scan(out_path: str) -> None:
  if _DEVICES_FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " "
                               + _DEVICES_FLAG).strip()
  import jax  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  from jaxpr_io import compat
  from jaxpr_io.compat import tables as compat_tables
  from jaxpr_io.codec import registry
  from tests.support import programs  # pylint: disable=g-import-not-at-top
  from tests.support.harness_list import cpu_harnesses  # pylint: disable=g-import-not-at-top

  from jaxpr_io.compat import param_kinds  # pylint: disable=g-import-not-at-top
  table: dict = collections.defaultdict(
      lambda: {"release_name": None, "params": collections.defaultdict(set)})
  # The param schema: per vocabulary primitive, each param's kinds
  # (param_kinds.kinds_of) and the params every equation had.
  schema: dict = collections.defaultdict(
      lambda: {"kinds": collections.defaultdict(set), "required": None})

  def record(fmt_name, params):
    kinds = schema[fmt_name]
    kinds["required"] = (set(params) if kinds["required"] is None
                         else kinds["required"] & set(params))
    for key, value in params.items():
      kinds["kinds"][key].update(param_kinds.kinds_of(value))

  def walk(j):
    j = compat.open_jaxpr(j) if compat.is_closed_jaxpr(j) else j
    for eqn in j.eqns:
      name = registry.PRIMITIVES.name_of(eqn.primitive) or eqn.primitive.name
      fmt_name, params = compat.ADAPTER.to_format(name, eqn.params)
      entry = table[fmt_name]
      entry["release_name"] = name
      record(fmt_name, params)
      for key, value in params.items():
        entry["params"][key].add(_kind(value, compat))
        for item in value if type(value) is tuple else (value,):
          if compat.is_jaxpr(item):
            walk(item)

  for x64 in (False, True):
    for h in cpu_harnesses(x64):
      with jax.enable_x64(x64):
        try:
          args = h.dyn_args_maker(np.random.RandomState(0))
          closed = jax.make_jaxpr(h.dyn_fun)(*args)
        except Exception:  # pylint: disable=broad-except
          continue  # JAX itself does not trace it
        walk(closed)
  for fn, args, kwargs in programs.PROGRAMS.values():
    walk(jax.make_jaxpr(fn)(*args, **kwargs))
  for closed in _more_programs(record):
    walk(closed)
  result = {"jax": jax.__version__, "schema": {
      k: {"params": {p: sorted(s) for p, s in v["kinds"].items()},
          "required": sorted(v["required"] or ())}
      for k, v in schema.items()}, "primitives": {
      k: {"release_name": v["release_name"],
          "params": {p: sorted(s) for p, s in v["params"].items()}}
      for k, v in table.items()},
            "all_primitives": sorted(
                compat.ADAPTER.format_name(n)
                for n in registry.PRIMITIVES.all())}
  with open(out_path, "w") as f:
    json.dump(result, f, indent=1, sort_keys=True)


def definitions(out_path: str) -> None:
  """Writes what the running release's rules say of each primitive's params
  (the `--definitions` form), by vocabulary name."""
  import jax  # pylint: disable=g-import-not-at-top
  from jaxpr_io import compat  # pylint: disable=g-import-not-at-top
  from jaxpr_io.codec import registry  # pylint: disable=g-import-not-at-top
  from jaxpr_io.compat import param_definitions  # pylint: disable=g-import-not-at-top
  out = {}
  for name, prim in sorted(registry.PRIMITIVES.all().items()):
    d = param_definitions.definition(prim)
    out[compat.ADAPTER.format_name(name)] = {
        "named": dict(sorted(d.named.items())),
        "optional": sorted(d.optional),
        "kinds": {k: list(v) for k, v in sorted(d.kinds.items())}}
  with open(out_path, "w") as f:
    json.dump({"jax": jax.__version__, "definitions": out}, f, indent=1,
              sort_keys=True)


def _more_programs(record):
  """The closed jaxprs of the other programs the tests store: every
  exchange case, every zoo program, the fuzzer's seeds and the golden files
  of every format version that this release loads. Files are read with the
  reader's param schema check replaced by `record`: the schema is what this
  scan writes, and it must take the params exactly as files of every
  format version store them (version 1's boolean `inline`, ...)."""
  import glob  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  import jaxpr_io  # pylint: disable=g-import-not-at-top
  from jaxpr_io.safety import validate  # pylint: disable=g-import-not-at-top
  from tests.compat.exchange import cases  # pylint: disable=g-import-not-at-top
  from tests.support import zoo, zoo2  # pylint: disable=g-import-not-at-top
  validate.check_param_schema = record
  for name, build in cases.enumerate_cases():
    try:
      case = build()
      yield jax.make_jaxpr(case.fn)(*(case.trace_args or case.args),
                                    **case.kwargs)
    except Exception as e:  # pylint: disable=broad-except
      print(f"scan: case {name} skipped: {type(e).__name__}", file=sys.stderr)
  for table in (zoo.ZOO, zoo2.ZOO2):
    for name, make in sorted(table.items()):
      try:
        fn, args, kwargs = make()
        yield jax.make_jaxpr(fn)(*args, **kwargs)
      except Exception as e:  # pylint: disable=broad-except
        print(f"scan: zoo {name} skipped: {type(e).__name__}", file=sys.stderr)
  files = sorted(glob.glob(os.path.join(_ROOT, "tests", "golden", "**",
                                        "*.jaxpr"), recursive=True))
  files += sorted(glob.glob(os.path.join(_ROOT, "tests", "compat",
                                         "cross_release", "*.jaxpr")))
  for path in files:
    try:
      with open(path, "rb") as f:
        yield jaxpr_io.loads(f.read(), trusted=True).closed_jaxpr
    except Exception as e:  # pylint: disable=broad-except
      print(f"scan: {os.path.relpath(path, _ROOT)} skipped: "
            f"{type(e).__name__}", file=sys.stderr)
  try:
    from tests.fuzz import seeds  # pylint: disable=g-import-not-at-top
    files, _ = seeds.build()
  except Exception as e:  # pylint: disable=broad-except
    print(f"scan: fuzz seeds skipped: {type(e).__name__}", file=sys.stderr)
    files = {}
  for name, data in sorted(files.items()):
    yield jaxpr_io.loads(data, trusted=True).closed_jaxpr


_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")

# Kinds that traces of JAX's defaults cannot show: param name -> kinds its
# values may have besides those traced, wherever the param appears. (A
# `sharding` traced as None holds a NamedSharding under explicit sharding.)
# Never a plain int, float or str where JAX takes an object.
WIDENED = {
    "sharding": ("none", "sharding"),
    "out_sharding": ("none", "sharding"),
    "accuracy": ("none", "Tolerance", "enum:AccuracyMode"),
    "use_magma": ("none", "bool"),
    "subset_by_index": ("none", "tuple/int+"),
    "algorithm": ("enum:EighImplementation",),
    "implementation": ("none", "enum:EigImplementation"),
    "out_dtype": ("none", "dtype"),
    "update_jaxpr": ("none", "jaxpr"),
    "in_shardings": ("tuple/sharding",),
    "out_shardings": ("tuple/sharding",),
    **{name: ("tuple/none", "tuple/Layout", "tuple/Format",
              "tuple/AutoLayout", "tuple/AutoLayoutSingleton")
       for name in ("in_layouts", "out_layouts")},
    "layout": ("none", "Layout", "Format", "AutoLayout",
               "AutoLayoutSingleton"),
    # Meshes: concrete, or abstract under explicit sharding.
    **{name: ("Mesh", "AbstractMesh")
       for name in ("mesh", "ctx_mesh", "context_mesh")},
    "logging_record": ("none", "LogRecord"),
    "vmap_method": ("none", "str"),
    "preferred_element_type": ("none", "dtype"),
    "precision": ("none", "enum:Precision", "tuple/enum:Precision",
                  "enum:DotAlgorithmPreset", "DotAlgorithm"),
    "policy": ("none", "callable"),
    "devices": ("tuple/none", "tuple/sharding", "tuple/Device",
                "tuple/TransferToMemoryKind", "tuple/enum:MemorySpace",
                "tuple/Layout", "tuple/Format"),
    "srcs": ("tuple/none", "tuple/sharding", "tuple/Device"),
    # xla_metadata_call's derivative metadata: "same", or (key, value)
    # string pairs as its `xla_metadata` (jaxpr_io/format/vocabulary.py).
    "ad_metadata": ("str", "tuple/tuple/str"),
    # compute_on's XLA options as JSON (dropped from untrusted files).
    "compiler_options_json": ("none", "str"),
    "compiler_options_kvs": ("tuple/tuple/str", "tuple/tuple/int+",
                             "tuple/tuple/int-", "tuple/tuple/bool",
                             "tuple/tuple/float"),
    "fill_value": ("none", "bool", "int+", "int-", "float"),
    # Negative padding crops (lax.pad, convolutions, windows); "SAME"
    # padding of a symbolic size is symbolic.
    "padding": ("tuple/tuple/int+", "tuple/tuple/int-", "tuple/tuple/dim"),
    "padding_config": ("tuple/tuple/int+", "tuple/tuple/int-",
                       "tuple/tuple/dim"),
    # Sizes may be symbolic dimensions in shape-polymorphic programs.
    **{name: ("tuple/int+", "tuple/dim") for name in (
        "shape", "new_sizes", "slice_sizes", "sizes", "start_indices",
        "limit_indices", "fft_lengths", "window_dimensions")},
    "length": ("int+", "dim"),
    "k": ("int+", "dim"),   # top_k of x.shape[-1] - 1
    # approx_top_k's default -1, which vmap makes a non-negative axis.
    "reduction_dimension": ("int+", "int-"),
    # Objects of classes that users, libraries or Pallas backends define
    # (a hi primitive, a remat policy, a kernel's compiler params, a
    # composite's attributes), which their families check: any kind.
    "_prim": ("*",),
    "policy": ("*",),
    "compiler_params": ("*",),
    "attributes": ("*",),
    "static_args": ("*",),   # debug_print's (index, static value) pairs
    "effect": ("DebugEffect", "OrderedDebugEffect"),
    # custom_vmap's rule: JAX's, or a loaded one (a program re-dumped after
    # loading holds jaxpr_io's rule, which the file stores the same way).
    "rule": ("ClosedRule", "StoredVmapRule"),
    # Sets: a shard_map's manual axis names, a sharding constraint's
    # unconstrained dimensions (traces of defaults hold empty ones).
    "newly_manual_axes": ("frozenset", "frozenset/str"),
    "unconstrained_dims": ("frozenset", "frozenset/int+"),
}



# Primitives left out of the schema: those of libraries (`equinox.*`,
# `lineax.*`: their params are the library's, versioned with it and checked
# by their codecs, jaxpr_io/families/libraries/) and JAX's kernel
# primitives with names of their own, which no scan holds.
def _in_schema(name: str, vocabulary: set) -> bool:
  return name in vocabulary and "." not in name


def write_schema(paths, out_path: str) -> None:
  """Merges the releases' scans into jaxpr_io/format/param_schema.json.

  `paths` holds trace scans (the first form) and definition scans
  (`--definitions`) of each release. A primitive's params are the traced
  ones and those its definitions name on any release; kinds are the traced
  ones, the definitions' (annotations, param_definitions.PARAM_KINDS) and
  `WIDENED`. A named param without any kind (a helper's keyword with a
  default that no binding site passes: naryop_dtype_rule's
  `allow_extended_dtype`) is left out and listed on stderr. Required: what
  every trace held on every release, less what a release's definitions
  show JAX runs without (`optional`)."""
  scans = [json.load(open(p)) for p in paths]
  releases = [r for r in scans if "schema" in r]
  defined = [r for r in scans if "definitions" in r]
  vocabulary = set().union(*(r["all_primitives"] for r in releases))
  merged: dict = {}
  for r in releases:
    for name, entry in r["schema"].items():
      if not _in_schema(name, vocabulary):
        continue
      m = merged.setdefault(name, {"params": collections.defaultdict(set),
                                   "required": None})
      for p, kinds in entry["params"].items():
        m["params"][p].update(kinds)
      req = set(entry["required"])
      m["required"] = req if m["required"] is None else m["required"] & req
  _merge_definitions(merged, defined)
  for m in merged.values():
    for p, kinds in m["params"].items():
      kinds.update(WIDENED.get(p, ()))
  data = {
      "comment": "Generated by schema/vocabulary_scan.py --schema; see "
                 "jaxpr_io/format/param_schema.py. Do not edit by hand.",
      "releases": [r["jax"] for r in releases],
      "definitions": [r["jax"] for r in defined],
      "primitives": {
          name: {"params": {p: sorted(k) for p, k in sorted(
              m["params"].items())},
                 "required": sorted(m["required"] or ())}
          for name, m in sorted(merged.items())}}
  with open(out_path, "w") as f:
    json.dump(data, f, indent=1, sort_keys=True)
    f.write("\n")


def _merge_definitions(merged: dict, defined: list) -> None:
  for r in defined:
    for name, d in r["definitions"].items():
      m = merged.get(name)
      if m is None:   # not in the schema (see _in_schema)
        continue
      for p in d["named"]:
        kinds = set(d["kinds"].get(p, ())) | set(WIDENED.get(p, ()))
        if not kinds and not m["params"].get(p):
          print(f"schema: {name}: {p!r} ({r['jax']}) has no kind: left out",
                file=sys.stderr)
          continue
        m["params"][p].update(kinds)
      if m["required"] is not None:
        m["required"] -= set(d["optional"])


def _format_version() -> int:
  from jaxpr_io.format import version  # pylint: disable=g-import-not-at-top
  return version.FORMAT_VERSION


_VOCABULARY = os.path.join(os.path.dirname(__file__), "VOCABULARY.md")
_NOT_TRACED = "(not traced)"


def _hand_written(path: str) -> dict[str, str]:
  """name -> params text of the rows of `path` that the scan cannot write
  (see the module docstring). The last column may hold "|" (`tuple[a|b]`),
  so each row is split into as many cells as the header has."""
  rows: dict[str, str] = {}
  if not os.path.exists(path):
    return rows
  n_cells = None
  with open(path) as f:
    for line in f:
      line = line.rstrip("\n")
      if line.startswith("| primitive |"):
        n_cells = line.count(" | ") + 1
        continue
      if n_cells is None or not line.startswith("| `") or not line.endswith(" |"):
        continue
      cells = line[2:-2].split(" | ", n_cells - 1)
      name, text = cells[0].strip("`"), cells[-1]
      if len(cells) == n_cells and text != _NOT_TRACED:
        rows[name] = text
  return rows


def markdown(paths, previous: str = _VOCABULARY) -> str:
  releases = [json.load(open(p)) for p in paths]
  hand_written = _hand_written(previous)
  names = sorted(set().union(*(r["all_primitives"] for r in releases)))
  lines = [
      f"# The jaxpr_io vocabulary (format version {_format_version()})",
      "",
      "Generated by `schema/vocabulary_scan.py` from each release's traces of",
      "JAX's primitive harness suite and the test programs; see",
      "`jaxpr_io/format/vocabulary.py` for the rules and `jaxpr_io/compat/jax_*.py`",
      "for each release's mapping. A primitive's params are listed with the",
      "kinds of value seen; a param listed for some releases only is",
      "optional in the file (e.g. `scan`'s `ft_in`/`ft_out`). `jaxpr` params",
      "hold closed jaxprs except those in `OPEN_JAXPR_PARAMS`.",
      _NOTES,
      "| primitive | " + " | ".join(f"jax {r['jax']}" for r in releases)
      + " | params (kinds) |",
      "| --- | " + " | ".join("---" for _ in releases) + " | --- |",
  ]
  for name in names:
    cells = []
    traced = False
    params: dict = collections.defaultdict(set)
    for r in releases:
      entry = r["primitives"].get(name)
      if name not in r["all_primitives"]:
        cells.append("absent")
      elif entry is None:
        cells.append("yes")
      else:
        rel = entry["release_name"]
        cells.append("yes" if rel == name else f"as `{rel}`")
        traced = True
        for p, kinds in entry["params"].items():
          params[p].update(kinds)
    text = ", ".join(f"`{p}`: {'/'.join(sorted(k))}"
                     for p, k in sorted(params.items()))
    if not text:
      text = ("(no params)" if traced
              else hand_written.get(name, _NOT_TRACED))
    lines.append(f"| `{name}` | " + " | ".join(cells) + f" | {text} |")
  return "\n".join(lines) + "\n" + _OWN_NAMES


# Written by hand: what the scan cannot see (primitives that only the test
# programs of one release hold, how some params are stored).
_NOTES = """
JAX 0.12's `thunky.*` primitives (jax._src.thunky, jaxpr_io/families/thunky.py) were
added by hand from the programs of tests/families/test_thunky.py: a *slice spec*
is a tuple (offset: int, shape: tuple[int], dtype): the bytes of a buffer
ref that the thunk reads or writes.
`thunky.ptx_kernel` is not in the vocabulary (PTX source: native code
chosen by the file).

`mpmd_map` (jax._src.pallas.mpmd: `pl.kernel` over meshes) and the
SparseCore kernel primitives (`sparsecore.*`, see "Names of their own")
were added by hand from the programs of tests/families/pallas/test_pallas_sparsecore.py.
`mpmd_map`'s params: `jaxprs`: tuple of jaxprs (open, one per mesh),
`meshes`: tuple of mesh records (`jax.pallas.sparsecore.VectorSubcoreMesh`,
`jax.pallas.sparsecore.ScalarSubcoreMesh`, `jax.pallas.tpu.TensorCoreMesh`
(0.11+); every field stored), `external_meshes`, `out_avals`,
`input_output_aliases`, `interpret`, `compiler_params`, `debug`,
`cost_estimate`, `metadata`, `name`.
`run_scoped`'s `jaxpr` is stored open with constvars when the body closes
over the enclosing kernel's refs (`CLOSURE_FROM_INPUTS_PARAMS`): its
constvars are the equation's inputs, as JAX 0.10 holds it; JAX 0.11+
readers attach the equation's input variables as its constants.
"""

# Primitives whose JAX name another primitive has too: the format's names
# for them (jaxpr_io.compat.tables.MODULE_PRIMITIVE_NAMES), the same on every
# release. Kept here because the table above lists the harness suite's
# primitives, which do not include kernel primitives.
_OWN_NAMES = """
## Names of their own

A JAX primitive whose name another JAX primitive has too is stored under a
name of its own (`jaxpr_io.compat.tables.MODULE_PRIMITIVE_NAMES`), the same on
every release:

| name in the file | JAX's name | defined in |
| --- | --- | --- |
| `mosaic_gpu.load` | `load` | `jax._src.pallas.mosaic_gpu.primitives` |
| `mosaic_gpu.store` | `store` (0.12) | `jax._src.pallas.mosaic_gpu.primitives` |
| `mosaic_gpu.semaphore_signal` | `semaphore_signal` | `jax._src.pallas.mosaic_gpu.primitives` |
| `mosaic_gpu.semaphore_wait` | `semaphore_wait` | `jax._src.pallas.mosaic_gpu.primitives` |
| `sparsecore.all_reduce_ffs` | `all_reduce_ffs` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.all_reduce_population_count` | `all_reduce_population_count` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.barrier` | `barrier` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.bitcast` | `bitcast` (0.10, 0.11) | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.gather` | `gather` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.load` | `load` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.masked_cummax` | `masked_cummax` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.masked_cummin` | `masked_cummin` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.masked_cumsum` | `masked_cumsum` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.masked_sort` | `masked_sort` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.pack` | `pack` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.parallel_loop` | `parallel_loop` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.sc_fetch_and_add` | `sc_fetch_and_add` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.scan_count` | `scan_count` (0.11+) | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.scatter` | `scatter` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.swap` | `swap` | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.unique` | `unique` (0.10) | `jax._src.pallas.mosaic.sc_primitives` |
| `sparsecore.unpack` | `unpack` | `jax._src.pallas.mosaic.sc_primitives` |

Kernel primitives that JAX 0.12 renamed keep their earlier names in files:
`debug_barrier_p` (Triton), `wgmma_accumulator_deref_p`,
`wgmma_accumulator_store_p` and `set_max_registers_p` (Mosaic GPU).
"""


if __name__ == "__main__":
  if sys.argv[1] == "--markdown":
    sys.stdout.write(markdown(sys.argv[2:]))
  elif sys.argv[1] == "--definitions":
    definitions(sys.argv[2])
  elif sys.argv[1] == "--schema":
    write_schema(sys.argv[2:], os.path.join(
        _ROOT, "jaxpr_io", "format", "param_schema.json"))
  else:
    scan(sys.argv[1])
