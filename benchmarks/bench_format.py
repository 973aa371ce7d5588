"""Benchmarks for the jaxpr_io serialization format.

Two measurements are made:

1. Transformer round trip.  A decoder-only Flax Linen transformer
   (``--layers`` unrolled blocks, parameters passed as an argument so the
   jaxpr carries no large constants) is traced with ``jax.make_jaxpr`` and
   with ``jaxpr_io.trace``.  The script reports the median time of a fresh
   trace in a warm process, of ``jaxpr_io.dumps`` and of ``jaxpr_io.loads``,
   and the ratios trace/dumps and trace/loads against a target of >= 20x.
   It also compares the size of ``jaxpr_io.dumps`` with the size of
   ``jax.export``'s serialized artifact for the same function.

2. Lazy constants.  A small program closing over about ``--const-gib`` GiB of
   float32 numpy arrays is saved with ``jaxpr_io.save``.  The script reports
   the median time of ``jaxpr_io.load`` next to the time of a bare
   ``mmap`` of the same file, the resident-set growth caused by ``load``
   (which should be small, since constant data is read lazily), and the time
   and resident-set growth of the first use of the constants.

Run from the repository root::

    python benchmarks/bench_format.py [--layers 48] [--repeats 5] [--const-gib 1.0]

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

TARGET_RATIO = 20.0
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


def make_constants(const_gib):
    """float32 numpy arrays of CONST_COLUMNS columns totalling about ``const_gib`` GiB."""
    total_bytes = int(const_gib * 2**30)
    n_arrays = max(1, math.ceil(total_bytes / CONST_CHUNK_BYTES))
    rows = max(1, total_bytes // (n_arrays * CONST_COLUMNS * 4))
    rng = np.random.default_rng(0)
    return [
        rng.standard_normal((rows, CONST_COLUMNS), dtype=np.float32) for _ in range(n_arrays)
    ]


def bench_lazy_constants(const_gib, repeats):
    weights = make_constants(const_gib)
    rows = weights[0].shape[0]

    def fn(x):
        return sum(x @ w for w in weights)

    prog = jaxpr_io.trace(fn, jax.ShapeDtypeStruct((rows,), jnp.float32))
    consts = prog.closed_jaxpr.consts
    n_consts = len(consts)
    const_bytes = sum(c.nbytes for c in consts)
    expected_sums = [float(w.sum(dtype=np.float64)) for w in weights]

    with tempfile.TemporaryDirectory() as tmp:
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
                        help="GiB of float32 constants for the lazy-load benchmark")
    args = parser.parse_args()

    print(f"jax {jax.__version__}, backend {jax.default_backend()}, repeats {args.repeats}\n")
    bench_transformer(args.layers, args.repeats)
    print()
    bench_lazy_constants(args.const_gib, args.repeats)


if __name__ == "__main__":
    main()
