"""Benchmarks for the jaxpr_io serialization format.

Two measurements are made:

1. Transformer round trip.  A decoder-only Flax Linen transformer
   (``--layers`` unrolled blocks, parameters passed as an argument so the
   jaxpr carries no large constants) is traced with ``jax.make_jaxpr`` and
   with ``jaxpr_io.trace``.  The script reports the median time of a fresh
   trace in a warm process, of ``jaxpr_io.dumps`` and of ``jaxpr_io.loads``,
   and the ratios trace/dumps and trace/loads against a target of >= 20x.
   It also compares the size of ``jaxpr_io.dumps`` with the size of
   ``jax.export``'s serialized artifact for the same function, and the time
   of ``jaxpr_io.loads`` with the time of constructing the same objects
   without parsing (``construct``: the avals, name stacks and their
   ``SourceInfo``s, every ``Var``, ``Literal``, ``JaxprEqn``, ``Jaxpr`` and
   ``ClosedJaxpr``, sub-jaxprs included, each params dict with its tuples
   and records, and the signature treedefs, built through the constructors
   the reader uses from plain Python data prepared in advance; scalars,
   enum members, dtypes, contexts, literal values and constants are shared,
   not rebuilt), against a target of loads <= 1.3x construct.

2. Lazy constants.  A small program closing over about ``--const-gib`` GiB of
   float32 numpy arrays is saved with ``jaxpr_io.save``.  The script reports
   the median time of ``jaxpr_io.load`` next to the time of a bare
   ``mmap`` of the same file, the resident-set growth caused by ``load``
   (which should be small, since constant data is read lazily), and the time
   and resident-set growth of the first use of the constants. Before that,
   it reports the median time of ``jaxpr_io.save`` next to a plain
   ``os.write`` + fsync of the same number of bytes to a new file in the same
   directory (``--dir``), against a target of save <= 1.2x write + fsync.

Run from the repository root::

    python benchmarks/bench_format.py [--layers 48] [--repeats 5] [--const-gib 1.0] [--dir DIR]
        [--only transformer|constants|loads]

Target ratios that are not met are reported but do not change the exit status.
"""

import argparse
import gc
import math
import mmap
import os
import statistics
import sys
import tempfile
import time

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import jaxprs_in_params

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jaxpr_io  # noqa: E402
import jaxpr_io.format.container  # noqa: E402
import jaxpr_io.read.reader  # noqa: E402
import jaxpr_io.pytree.read  # noqa: E402
from jaxpr_io import compat  # noqa: E402

TARGET_RATIO = 20.0
LOADS_VS_CONSTRUCT_TARGET = 1.3
SAVE_VS_WRITE_TARGET = 1.2
D_MODEL = 64
N_HEADS = 4
SEQ_LEN = 16
BATCH = 2
VOCAB = 256
CONST_COLUMNS = 8192
CONST_CHUNK_BYTES = 256 * 2**20


class Block(nn.Module):
    """Pre-LayerNorm decoder block: causal self-attention and a gelu MLP."""

    d_model: int
    n_heads: int

    @nn.compact
    def __call__(self, x, mask):
        h = nn.LayerNorm()(x)
        x = x + nn.MultiHeadDotProductAttention(num_heads=self.n_heads)(h, mask=mask)
        h = nn.LayerNorm()(x)
        h = nn.gelu(nn.Dense(4 * self.d_model)(h))
        return x + nn.Dense(self.d_model)(h)


class Transformer(nn.Module):
    """Decoder-only transformer with unrolled layers."""

    n_layers: int

    @nn.compact
    def __call__(self, tokens):
        x = nn.Embed(VOCAB, D_MODEL)(tokens)
        x = x + self.param("pos_embedding", nn.initializers.normal(0.02), (SEQ_LEN, D_MODEL))
        mask = nn.make_causal_mask(tokens)
        for _ in range(self.n_layers):
            x = Block(D_MODEL, N_HEADS)(x, mask)
        return nn.Dense(VOCAB)(nn.LayerNorm()(x))


def count_eqns(jaxpr):
    """Number of equations in ``jaxpr`` and, recursively, in its nested jaxprs."""
    return sum(
        1 + sum(count_eqns(sub) for sub in jaxprs_in_params(eqn.params)) for eqn in jaxpr.eqns
    )


def median_time(fn, repeats):
    """Median wall time in seconds of ``repeats`` calls to ``fn``."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def rss_bytes():
    """Resident set size of this process, from /proc/self/status."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("VmRSS not found in /proc/self/status")


def mmap_file(path):
    """Open and map ``path`` read-only, the floor for any mmap-based load."""
    with open(path, "rb") as f:
        mapped = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    mapped.close()


def fmt_ms(seconds):
    return f"{seconds * 1e3:10.2f} ms"


def fmt_mib(nbytes):
    return f"{nbytes / 2**20:10.1f} MiB"


def verdict(ok):
    return "met" if ok else "NOT met"


def print_comparison(name, times, base_name, base_times, target, nbytes=None):
    """Median and minimum of `times` beside those of `base_times`, and their
    ratios: of the medians, of the minimums (the runs least disturbed by
    other work), and the median of the ratios of adjacent runs (the two
    lists alternate), on which the verdict is: this machine's speed drifts
    by up to 2x over minutes, which moves both runs of a pair alike."""
    med, base_med = statistics.median(times), statistics.median(base_times)
    low, base_low = min(times), min(base_times)
    paired = statistics.median(t / b for t, b in zip(times, base_times))
    rate = f"{'GiB/s (med)':>12}" if nbytes else ""
    print(f"{'measurement':<28}{'median':>13}{'min':>13}{rate}   "
          f"{len(times)} runs each, alternating")
    for label, m, lo in ((base_name, base_med, base_low), (name, med, low)):
        speed = f"{nbytes / 2**30 / m:12.2f}" if nbytes else ""
        print(f"{label:<28}{fmt_ms(m)}{fmt_ms(lo)}{speed}")
    print(f"{name} / {base_name}: {med / base_med:.2f}x (medians), "
          f"{low / base_low:.2f}x (minimums), {paired:.2f}x (median of "
          f"adjacent pairs); target <= {target}x: {verdict(paired <= target)}")


# ------------------------------------------------------- loads vs construct
def construction_plan(data):
    """What rebuilding the program of ``data`` takes once parsing is done.

    Reads ``data`` once with jaxpr_io's reader, then keeps plain Python
    data for every object a load builds:

    * the aval table, as (shape, dtype, weak_type, sharding and memory
      space) for each ``ShapedArray`` that these rebuild (other avals are
      kept as built);
    * each name stack as its entries' (type, name) pairs;
    * for each stored jaxpr (sub-jaxprs before their users, as the reader
      builds them): each equation's primitive, where its inputs come from (an
      earlier variable's number, or a literal's value and type), its
      outputs' aval numbers, its params dict's number, its effects, name
      stack number and context; and, for each closed jaxpr, its jaxpr's
      number and constant values;
    * each params dict (once, as equations of a kind share theirs), as a
      plan per value: tuples and frozensets item by item, records through
      their codec's constructor from their fields, a slot for each
      sub-jaxpr;
    * the input and output signatures, as skeleton pytrees.

    Scalars, enum members, dtypes, contexts, literal values and constants
    are kept as built: ``construct`` does not count them.
    """
    c = jaxpr_io.format.container.Container(data)
    closed, in_tree, out_tree, msg, rd = jaxpr_io.read.reader.read(c, verify_blobs=False)
    aval_plans = []
    for aval in rd.avals:
        if type(aval) is compat.ShapedArray:
            kwargs = {"sharding": aval.sharding, "memory_space": aval.memory_space}
            if aval == compat.ShapedArray(aval.shape, aval.dtype, aval.weak_type, **kwargs):
                aval_plans.append((aval.shape, aval.dtype, aval.weak_type, kwargs))
                continue
        aval_plans.append(aval)
    aval_number = {id(a): i for i, a in enumerate(rd.avals)}
    stack_number = {id(info): i for i, info in enumerate(rd.source_infos)}
    stack_plans = [tuple((type(e), e.name) for e in info.name_stack.stack)
                   for info in rd.source_infos]
    slot_of = {}  # id(object the reader built) -> ("open", i) / ("closed", j)
    for i, j in enumerate(rd.jaxprs):
        slot_of[id(j)] = ("open", i)
    closed_plans = []  # (jaxpr number, consts) in the reader's table order
    closed_after = {}  # jaxpr number -> closed-table numbers built from it
    for k, cj in enumerate(rd._closed):  # pylint: disable=protected-access
        if cj is not None:
            slot_of[id(cj)] = ("closed", k)
            jaxpr_index = msg.closed_jaxprs[k].jaxpr
            closed_after.setdefault(jaxpr_index, []).append(k)
            closed_plans.append((k, jaxpr_index, list(cj.consts)))

    def value_plan(value):
        """How to rebuild a param value from plain data: tuples and
        frozensets item by item, records (shardings, meshes, dimension
        numbers...) through their codec's constructor; jaxprs are slots;
        scalars, enum members, dtypes and arrays are shared."""
        if id(value) in slot_of:
            return ("slot", slot_of[id(value)])
        t = type(value)
        if t in (tuple, frozenset, list):
            return ("seq", t, [value_plan(x) for x in value])
        name = jaxpr_io.codec.registry.RECORDS.by_key.get(t)
        if name is not None:
            codec = jaxpr_io.codec.registry.RECORDS.by_name[name]
            return ("record", codec.from_fields,
                    [value_plan(x) for x in codec.to_fields(value)])
        return ("shared", value)

    param_plans = {}  # id(params dict) -> its number; each dict built once

    def param_plan(params):
        if id(params) not in param_plans:
            param_plans[id(params)] = (
                len(param_plans), [(k, value_plan(v)) for k, v in params.items()])
        return param_plans[id(params)][0]

    def atom_plan(ref, atom):
        if ref >= 0:
            return ref
        return (atom.val, aval_number[id(atom.aval)])

    plans = []
    for i, (m, j) in enumerate(zip(msg.jaxprs, rd.jaxprs)):
        eqns = []
        in_refs = iter(jaxpr_io.read.equations.columns_of(rd, m).invars.tolist())
        for eqn in j.eqns:
            eqns.append((
                eqn.primitive,
                [atom_plan(next(in_refs), a) for a in eqn.invars],
                [(type(v) is compat.DropVar, aval_number[id(v.aval)])
                 for v in eqn.outvars],
                param_plan(eqn.params), eqn.effects,
                stack_number[id(eqn.source_info)], eqn.ctx))
        plans.append((
            list(m.constvars), list(m.invars), eqns,
            [atom_plan(r, a) for r, a in zip(m.outvars, j.outvars)],
            j.effects, j.debug_info, m.is_high, closed_after.get(i, [])))
    consts_of = {k: consts for k, _, consts in closed_plans}
    trees = tuple(t.unflatten([0] * t.num_leaves) for t in (in_tree, out_tree))
    dict_plans = [items for _, items in sorted(param_plans.values(),
                                               key=lambda p: p[0])]
    return (aval_plans, stack_plans, dict_plans, plans, consts_of,
            slot_of[id(closed)][1], trees)


def rebuild_value(p, built):
    """A param value from its ``value_plan`` (a module-level function: a
    recursive closure would make a reference cycle that keeps the built
    objects alive until the next collection, hiding their deallocation)."""
    kind = p[0]
    if kind == "shared":
        return p[1]
    if kind == "slot":
        return built[p[1][0]][p[1][1]]
    if kind == "seq":
        return p[1]([rebuild_value(x, built) for x in p[2]])
    return p[1](tuple([rebuild_value(x, built) for x in p[2]]))  # a record


def construct(plan):
    """Builds every object a load of the program builds, from
    ``construction_plan``'s plain data, through the constructors the reader
    uses (jaxpr_io.compat): the avals; each name stack (each entry once) and
    its ``SourceInfo``; every ``Var``, ``Literal``, ``JaxprEqn``, ``Jaxpr``
    and ``ClosedJaxpr``; each params dict with its tuples and records; and
    the two signature treedefs. The cost of the objects, without any parsing
    or checking."""
    aval_plans, stack_plans, dict_plans, plans, consts_of, root, trees = plan
    Var, DropVar, Literal = compat.Var, compat.DropVar, compat.Literal
    # The reader's hot loop calls JaxprEqn itself, without compat.new_eqn.
    new_eqn, new_jaxpr, make_closed = compat.JaxprEqn, compat.new_jaxpr, compat.make_closed
    shaped, new_stack, new_info = compat.ShapedArray, compat.NameStack, compat.SourceInfo
    avals = [shaped(*a[:3], **a[3]) if type(a) is tuple else a for a in aval_plans]
    entries = {}
    source_infos = []
    for stack in stack_plans:
        built_entries = []
        for entry in stack:
            e = entries.get(entry)
            if e is None:
                e = entries[entry] = entry[0](entry[1])
            built_entries.append(e)
        source_infos.append(new_info(None, new_stack(tuple(built_entries))))
    built = {"open": [], "closed": {}}
    param_dicts = [None] * len(dict_plans)  # built when first used

    for const_avals, in_avals, eqns, out_refs, effects, debug_info, is_high, closed in plans:
        constvars = [Var(avals[a]) for a in const_avals]
        invars = [Var(avals[a]) for a in in_avals]
        env = constvars + invars
        new_eqns = []
        for prim, in_refs, outs, dict_number, eqn_effects, stack, ctx in eqns:
            ins = [env[r] if type(r) is int else Literal(r[0], avals[r[1]]) for r in in_refs]
            outvars = [DropVar(avals[a]) if dropped else Var(avals[a]) for dropped, a in outs]
            env.extend(outvars)
            params = param_dicts[dict_number]
            if params is None:
                params = param_dicts[dict_number] = {
                    k: rebuild_value(p, built) for k, p in dict_plans[dict_number]}
            new_eqns.append(new_eqn(ins, outvars, prim, params, eqn_effects,
                                    source_infos[stack], ctx))
        outvars = [env[r] if type(r) is int else Literal(r[0], avals[r[1]]) for r in out_refs]
        jaxpr = new_jaxpr(constvars, invars, outvars, new_eqns, effects, debug_info, is_high)
        built["open"].append(jaxpr)
        for k in closed:
            built["closed"][k] = make_closed(jaxpr, consts_of[k])
    in_tree, out_tree = (jax.tree_util.tree_structure(t) for t in trees)
    return built["closed"][root], in_tree, out_tree


def bench_loads_vs_construct(data, repeats):
    """Times of ``loads`` of ``data`` and of ``construct`` of its plan.

    Both are timed with the cyclic garbage collector paused (``loads``
    pauses it itself while it builds), and a collection runs between runs,
    untimed: the collection that the new objects provoke later is the same
    for any code that builds them. The runs alternate, so both see the same
    machine load."""
    plan = construction_plan(data)
    rebuilt, in_tree, out_tree = construct(plan)
    loaded = jaxpr_io.loads(data)
    assert str(rebuilt) == str(loaded.closed_jaxpr), "construct differs"
    assert (in_tree, out_tree) == (loaded.in_tree, loaded.out_tree), "construct differs"
    loads_times, construct_times = [], []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(max(9 * repeats, 45)):  # cheap: more runs, less noise
            for times, fn in ((loads_times, lambda: jaxpr_io.loads(data)),
                              (construct_times, lambda: construct(plan))):
                gc.collect()
                times.append(median_time(fn, 1))
    finally:
        if was_enabled:
            gc.enable()
    return loads_times, construct_times


def young_collections(data, plan, runs=9):
    """Median time of the collection of the young generation right after
    ``loads`` and after ``construct`` (what the benchmark leaves untimed in
    both), and the number of objects each leaves for the collector."""
    result = {}
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for name, fn in (("loads", lambda: jaxpr_io.loads(data)),
                         ("construct", lambda: construct(plan))):
            times = []
            for _ in range(runs):
                gc.collect()
                before = gc.get_count()[0]
                kept = fn()
                tracked = gc.get_count()[0] - before
                start = time.perf_counter()
                gc.collect(0)
                times.append(time.perf_counter() - start)
                del kept
            result[name] = (statistics.median(times), tracked)
    finally:
        if was_enabled:
            gc.enable()
    return result


# Stages of `loads`, each the calls it makes to these functions (the other
# tables, param sets, name stacks, equation contexts and literals, are
# decoded when an equation first uses them: they count in "jaxprs").
LOADS_STAGES = (
    ("parse (protobuf)", (("parse_program", jaxpr_io.read.reader, "parse_program"),)),
    ("tables (avals, names)", (("charge_tables", jaxpr_io.read.reader.Reader, "charge_tables"),
                                ("decode_avals", jaxpr_io.read.reader.Reader, "decode_avals"),
                                ("decode_name_stacks", jaxpr_io.read.reader.Reader,
                                 "decode_name_stacks"),
                                ("decode_contexts", jaxpr_io.read.reader.Reader,
                                 "decode_contexts"))),
    ("jaxprs (equations)", (("build_jaxprs", jaxpr_io.read.reader.Reader, "build_jaxprs"),)),
    ("trees (signature)", (("decode_call_signature", jaxpr_io.pytree.read,
                            "decode_call_signature"),
                           ("decode_treedef", jaxpr_io.pytree.read, "decode_treedef"))),
)


def loads_breakdown(data, runs=15):
    """Median time of each of `LOADS_STAGES` in ``loads`` of ``data``, and
    of the whole (the rest: the container, closing the root jaxpr, the
    signature checks, metadata and the `Program`), from separate runs with
    the stages' functions wrapped in timers (gc paused as above)."""
    spent = {}
    originals = []
    for label, functions in LOADS_STAGES:
        for _, owner, attr in functions:
            original = getattr(owner, attr)
            originals.append((owner, attr, original))

            def timed(*args, __original=original, __label=label, **kwargs):
                start = time.process_time()
                try:
                    return __original(*args, **kwargs)
                finally:
                    spent[__label] = spent.get(__label, 0.0) + time.process_time() - start

            setattr(owner, attr, timed)
    per_run = {label: [] for label, _ in LOADS_STAGES}
    totals = []
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        for _ in range(runs):
            gc.collect()
            spent.clear()
            start = time.process_time()
            jaxpr_io.loads(data)
            totals.append(time.process_time() - start)
            for label in per_run:
                per_run[label].append(spent.get(label, 0.0))
    finally:
        for owner, attr, original in originals:
            setattr(owner, attr, original)
        if was_enabled:
            gc.enable()
    return {label: statistics.median(t) for label, t in per_run.items()}, statistics.median(totals)


def print_loads_vs_construct(data, repeats):
    loads_times, construct_times = bench_loads_vs_construct(data, repeats)
    print_comparison("jaxpr_io.loads", loads_times, "construct (no parsing)",
                     construct_times, LOADS_VS_CONSTRUCT_TARGET)
    stages, total = loads_breakdown(data)
    print(f"where loads spends its time (CPU time, median of 15 instrumented runs: "
          f"{fmt_ms(total).strip()}):")
    stages["rest (container, checks)"] = total - sum(stages.values())
    for label, seconds in stages.items():
        print(f"  {label:<26}{fmt_ms(seconds)}  {seconds / total:6.1%}")
    young = young_collections(data, construction_plan(data))
    print("collection of the young generation afterwards (untimed in both): "
          + ", ".join(f"{name} {fmt_ms(t).strip()} ({n:,} objects)"
                      for name, (t, n) in young.items()))


def bench_loads_only(n_layers, repeats):
    """Only loads vs construct (and its breakdown), for the same program."""
    model = Transformer(n_layers)
    tokens = jnp.zeros((BATCH, SEQ_LEN), jnp.int32)
    params = model.init(jax.random.key(0), tokens)
    prog = jaxpr_io.trace(lambda p, t: model.apply(p, t), params, tokens)
    data = jaxpr_io.dumps(prog)
    print(f"== Transformer: {n_layers} layers, loads vs construct: "
          f"{count_eqns(prog.closed_jaxpr.jaxpr)} equations, {len(data):,} bytes ==")
    print_loads_vs_construct(data, repeats)


# --------------------------------------------------- save vs write + fsync
def plain_write(path, buffers):
    """The floor for saving: ``os.write`` of each buffer, then fsync."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for buffer in buffers:
            view = memoryview(buffer).cast("B")
            while view:
                view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def bench_save_vs_write(prog, directory, repeats):
    """Times of ``jaxpr_io.save`` and of a plain write + fsync of the same
    bytes' count (the constants' own buffers), in the same directory, each to
    a new file; and the file size.

    The two alternate, and each run starts after ``os.sync()`` with the last
    file deleted, so that neither pays for the other's write-back. (On a
    virtual machine, page-cache pages never used before can cost several
    times more to write than recycled ones: one untimed run of each comes
    first.)"""
    path = os.path.join(directory, "saved.jaxpr")
    plain_path = os.path.join(directory, "plain.bin")
    jaxpr_io.save(path, prog)
    size = os.path.getsize(path)
    consts = [np.asarray(c) for c in prog.closed_jaxpr.consts]
    head = bytes(size - sum(c.nbytes for c in consts))  # header, program, padding
    buffers = [head, *(c.reshape(-1).view(np.uint8) for c in consts)]
    plain_write(plain_path, buffers)  # both once untimed: the page cache
    os.unlink(plain_path)             # then has memory that was in use
    os.unlink(path)

    def timed(fn, target):
        os.sync()
        start = time.perf_counter()
        fn()
        elapsed = time.perf_counter() - start
        assert os.path.getsize(target) == size
        os.unlink(target)
        return elapsed

    save_times, plain_times = [], []
    for i in range(repeats):
        runs = [(save_times, lambda: jaxpr_io.save(path, prog), path),
                (plain_times, lambda: plain_write(plain_path, buffers), plain_path)]
        for times, fn, target in (runs if i % 2 == 0 else runs[::-1]):
            times.append(timed(fn, target))
    return save_times, plain_times, size


def bench_transformer(n_layers, repeats):
    model = Transformer(n_layers)
    tokens = jnp.zeros((BATCH, SEQ_LEN), jnp.int32)
    params = model.init(jax.random.key(0), tokens)

    def fn(params, tokens):
        return model.apply(params, tokens)

    jax.make_jaxpr(fn)(params, tokens)  # warm-up: JAX internals, Flax, lax helpers

    def fresh_trace():
        # A new function object each time, so no JAX tracing cache can hit.
        jax.make_jaxpr(lambda p, t: model.apply(p, t))(params, tokens)

    trace_s = median_time(fresh_trace, repeats)

    prog = jaxpr_io.trace(fn, params, tokens)
    n_eqns = count_eqns(prog.closed_jaxpr.jaxpr)
    data = jaxpr_io.dumps(prog)
    dumps_s = median_time(lambda: jaxpr_io.dumps(prog), repeats)
    loads_s = median_time(lambda: jaxpr_io.loads(data), repeats)
    loaded_eqns = count_eqns(jaxpr_io.loads(data).closed_jaxpr.jaxpr)

    specs = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), (params, tokens))
    export_size = len(jax.export.export(jax.jit(fn))(*specs).serialize())

    dumps_ratio = trace_s / dumps_s
    loads_ratio = trace_s / loads_s
    print(f"== Transformer: {n_layers} layers, d_model={D_MODEL}, heads={N_HEADS}, "
          f"seq={SEQ_LEN}, batch={BATCH}, vocab={VOCAB} ==")
    print(f"equations (incl. nested jaxprs): {n_eqns}"
          f" (after loads: {loaded_eqns}, {'matches' if loaded_eqns == n_eqns else 'MISMATCH'})")
    print(f"{'measurement':<28}{'median':>13}{'trace / x':>12}   target: >= {TARGET_RATIO:.0f}x")
    print(f"{'jax.make_jaxpr (fresh)':<28}{fmt_ms(trace_s)}")
    print(f"{'jaxpr_io.dumps':<28}{fmt_ms(dumps_s)}{dumps_ratio:11.1f}x   "
          f"{verdict(dumps_ratio >= TARGET_RATIO)}")
    print(f"{'jaxpr_io.loads':<28}{fmt_ms(loads_s)}{loads_ratio:11.1f}x   "
          f"{verdict(loads_ratio >= TARGET_RATIO)}")
    print(f"{'size':<28}{'bytes':>13}")
    print(f"{'jaxpr_io.dumps':<28}{len(data):13,d}")
    print(f"{'jax.export serialize':<28}{export_size:13,d}")
    print(f"jaxpr_io <= jax.export: {'yes' if len(data) <= export_size else 'NO'}"
          f" ({len(data) / export_size:.2f}x)")
    print_loads_vs_construct(data, repeats)


def bench_write_checks(n_layers, repeats):
    """dumps of the transformer with the reader's per-equation checks that
    the writer runs (jaxpr_io/write/writer.py `_as_written`) and without
    them, interleaved run by run so that the machine's drift hits both."""
    from jaxpr_io.write import writer  # lazy: only this benchmark patches it
    model = Transformer(n_layers)
    tokens = jnp.zeros((BATCH, SEQ_LEN), jnp.int32)
    params = model.init(jax.random.key(0), tokens)
    prog = jaxpr_io.trace(lambda p, t: model.apply(p, t), params, tokens)
    checked = writer._as_written
    inside = []   # seconds spent in the checks themselves, call by call

    def timed(*args):
        start = time.perf_counter()
        try:
            checked(*args)
        finally:
            inside.append(time.perf_counter() - start)

    with_checks, without = [], []
    pairs = [(with_checks, timed), (without, lambda *args: None)]
    for i in range(repeats):
        for times, check in pairs[::1 if i % 2 else -1]:  # alternate first
            writer._as_written = check
            try:
                times.append(median_time(lambda: jaxpr_io.dumps(prog), 1))
            finally:
                writer._as_written = checked
    a, b = statistics.median(with_checks), statistics.median(without)
    print(f"== dumps of the {n_layers}-layer transformer "
          f"({count_eqns(prog.closed_jaxpr.jaxpr)} equations), "
          f"{repeats} interleaved runs each ==")
    print(f"{'without the checks':<28}{fmt_ms(b)}")
    print(f"{'with the checks':<28}{fmt_ms(a)}   {100 * (a / b - 1):+.1f}%")
    per_dumps = sum(inside) / repeats
    print(f"{'in the checks, per dumps':<28}{fmt_ms(per_dumps)}   "
          f"{100 * per_dumps / b:.1f}% ({len(inside) // repeats} checks)")


def make_constants(const_gib):
    """float32 numpy arrays of CONST_COLUMNS columns totalling about ``const_gib`` GiB."""
    total_bytes = int(const_gib * 2**30)
    n_arrays = max(1, math.ceil(total_bytes / CONST_CHUNK_BYTES))
    rows = max(1, total_bytes // (n_arrays * CONST_COLUMNS * 4))
    rng = np.random.default_rng(0)
    return [
        rng.standard_normal((rows, CONST_COLUMNS), dtype=np.float32) for _ in range(n_arrays)
    ]


def bench_lazy_constants(const_gib, repeats, directory=None):
    weights = make_constants(const_gib)
    rows = weights[0].shape[0]

    def fn(x):
        return sum(x @ w for w in weights)

    prog = jaxpr_io.trace(fn, jax.ShapeDtypeStruct((rows,), jnp.float32))
    consts = prog.closed_jaxpr.consts
    n_consts = len(consts)
    const_bytes = sum(c.nbytes for c in consts)
    expected_sums = [float(w.sum(dtype=np.float64)) for w in weights]

    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        save_times, write_times, save_size = bench_save_vs_write(prog, tmp, repeats)
        path = os.path.join(tmp, "consts.jaxpr")
        jaxpr_io.save(path, prog)
        file_size = os.path.getsize(path)
        del prog, consts, weights, fn
        gc.collect()

        mmap_s = median_time(lambda: mmap_file(path), repeats)
        load_s = median_time(lambda: jaxpr_io.load(path), repeats)
        gc.collect()

        rss_before = rss_bytes()
        loaded = jaxpr_io.load(path)
        rss_after_load = rss_bytes()

        start = time.perf_counter()
        loaded_consts = loaded.closed_jaxpr.consts
        sums = [float(np.asarray(c).sum(dtype=np.float64)) for c in loaded_consts]
        first_use_s = time.perf_counter() - start
        rss_after_use = rss_bytes()
        del loaded, loaded_consts
        gc.collect()

    print(f"== Lazy constants: {n_consts} float32 constants, {fmt_mib(const_bytes).strip()} ==")
    print(f"file size: {fmt_mib(file_size).strip()}")
    print_comparison("jaxpr_io.save", save_times, "os.write + fsync", write_times,
                     SAVE_VS_WRITE_TARGET, nbytes=save_size)
    # Each save ran next to one plain write: the ratio within each pair is
    # the least affected by load that changes over the run.
    paired = sorted(s / w for s, w in zip(save_times, write_times))
    print(f"per pair of runs: median {statistics.median(paired):.2f}x, "
          f"range {paired[0]:.2f}x to {paired[-1]:.2f}x; runs (ms): save "
          f"{[round(t * 1e3) for t in save_times]}, write "
          f"{[round(t * 1e3) for t in write_times]}")
    print(f"{'measurement':<28}{'time':>13}{'RSS increase':>16}")
    print(f"{'open + mmap (baseline)':<28}{fmt_ms(mmap_s)}")
    print(f"{'jaxpr_io.load (median)':<28}{fmt_ms(load_s)}{fmt_mib(rss_after_load - rss_before):>16}")
    print(f"{'first use (consts .sum())':<28}{fmt_ms(first_use_s)}"
          f"{fmt_mib(rss_after_use - rss_after_load):>16}")
    print(f"load / mmap: {load_s / mmap_s:.1f}x; "
          f"load RSS increase is {(rss_after_load - rss_before) / const_bytes:.1%} of constant bytes")
    print(f"constant values after load: {'match' if sums == expected_sums else 'MISMATCH'}")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--layers", type=int, default=48, help="transformer layers")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats per measurement")
    parser.add_argument("--const-gib", type=float, default=1.0,
                        help="GiB of float32 constants for the save and lazy-load benchmarks")
    parser.add_argument("--dir", default=None,
                        help="directory to save in (default: the system's temporary directory)")
    parser.add_argument("--only", choices=("transformer", "constants", "loads",
                                           "write-checks"), default=None,
                        help="run one of the two benchmarks (default: both); `constants` "
                             "is the save and lazy-load one, `loads` only the transformer's "
                             "loads vs construct, `write-checks` the cost of the checks "
                             "dumps runs on what it writes")
    args = parser.parse_args()

    print(f"jax {jax.__version__}, backend {jax.default_backend()}, repeats {args.repeats}\n")
    if args.only in (None, "transformer"):
        bench_transformer(args.layers, args.repeats)
    if args.only == "loads":
        bench_loads_only(args.layers, args.repeats)
    if args.only == "write-checks":
        bench_write_checks(args.layers, args.repeats)
    if args.only is None:
        print()
    if args.only in (None, "constants"):
        bench_lazy_constants(args.const_gib, args.repeats, args.dir)


if __name__ == "__main__":
    main()
