"""Writes the golden files of the current format version.

    python tests/golden/make_golden.py

Creates tests/golden/v<FORMAT_VERSION>/jax-<jax version>/<name>.{jaxpr,txt,
npz}: the file, the program as JAX printed it, and inputs (arg0, ...) with
the outputs (out0, ...) of the original function. Run it once per format
version under every supported JAX release (from version 2 on, each release
writes its own directory; version 1 was written by jax 0.10.2 only, in
v1/ itself); never regenerate the files of an older version: every later
jaxpr_io, under every supported release, must keep reading them
(tests/format/test_golden.py).
"""

from __future__ import annotations

import os
import sys

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", ".."))
import jaxpr_io  # noqa: E402  pylint: disable=g-import-not-at-top
from jaxpr_io.compat import hi_mutable as compat_hi_mutable  # noqa: E402  pylint: disable=g-import-not-at-top

_rng = np.random.RandomState(1234)


def mlp(params, x):
  for w, b in params:
    x = jax.nn.sigmoid(x @ w + b)
  return x


MLP_PARAMS = [(_rng.randn(6, 32).astype(np.float32),
               _rng.randn(32).astype(np.float32)),
              (_rng.randn(32, 3).astype(np.float32),
               _rng.randn(3).astype(np.float32))]


def closed_mlp(x):
  return mlp(MLP_PARAMS, x)  # weights become constants (in the data section)


def control_flow(x, n):
  def body(carry, xt):
    return carry * 0.9 + jnp.sin(xt), carry
  carry, ys = jax.lax.scan(body, jnp.zeros(x.shape[1:]), x)
  total = jax.lax.fori_loop(0, n, lambda i, acc: acc + i * 0.5, 0.0)
  return jax.lax.cond(total > 1.0, lambda: carry + ys.sum(), lambda: carry)


@jax.jit
def _shared(v):
  return v * 2.0 + 1.0


def signature(inputs, *, mode):
  out = _shared(inputs["a"]) + _shared(inputs["by_id"][7]) + inputs["by_id"][3]
  return {"sum": out.sum(), "mode": out * mode, "pair": (out, inputs["a"])}


def numerics(x):
  b = x.astype(jnp.bfloat16)
  i4 = jnp.clip(x * 4, -8, 7).astype(jnp.int4)
  key = jax.random.key(7)
  noise = jax.random.uniform(key, x.shape)
  return (b * b).astype(jnp.float32) + i4.astype(jnp.float32) + noise


@jax.custom_vjp
def _clip_gradient(x):
  return x


_clip_gradient.defvjp(lambda x: (x, None),
                      lambda _, g: (jnp.clip(g, -0.1, 0.1),))


def custom_rules(x):
  # relu and softplus are custom_jvp; _clip_gradient is a custom_vjp.
  h = jax.nn.relu(x) + jax.nn.softplus(x)
  return jnp.sum(_clip_gradient(h) ** 2)


def custom_rules_grad(x):
  return jax.grad(custom_rules)(x)


def layers(params, x):
  with jax.named_scope("stack"):
    for i, layer in enumerate(params):
      with jax.named_scope(f"layer{i}"):
        x = jnp.tanh(x @ layer["w"] + layer["b"])
  return x


def ecosystem(x, w, data, indices):
  # From version 4: refs (ref avals, treedef params of get/swap), a ragged
  # dot, a composite with attributes, and a BCOO sparse matmul.
  from jax.experimental import sparse  # pylint: disable=g-import-not-at-top
  acc = jax.new_ref(jnp.zeros_like(x))
  acc[...] += x
  acc[0:2] = acc[0:2] * 2.0
  y = jax.lax.ragged_dot(acc[...], w, jnp.array([1, 3], jnp.int32))
  scaled = jax.lax.composite(lambda v, *, scale: v * scale,
                             name="golden.scale")(y, scale=0.5)
  mat = sparse.BCOO((data, indices), shape=(4, 4))
  return mat @ scaled


def pallas_kernel(x):
  # From version 4: a Pallas kernel (records by field name, ref avals with
  # Pallas memory spaces, the kernel's open jaxpr).
  from jax.experimental import pallas as pl  # pylint: disable=g-import-not-at-top
  from jax.experimental.pallas import tpu as pltpu  # pylint: disable=g-import-not-at-top

  def kernel(x_ref, o_ref, acc_ref):
    acc_ref[...] = x_ref[...] * 2.0
    o_ref[...] = acc_ref[...] + pl.program_id(0).astype(jnp.float32)
  block = pl.BlockSpec((8, 128), lambda i: (i, 0))
  return pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
      grid=(2,), in_specs=[block], out_specs=block,
      scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
      compiler_params=pltpu.CompilerParams(
          dimension_semantics=("parallel",)),
      interpret=True)(x)


def async_collectives(x):
  # From version 7: futures (AbstractFuture avals) of JAX's asynchronous
  # collectives, on a one-device mesh (this script runs on one device).
  from jax._src.lax import parallel  # pylint: disable=g-import-not-at-top
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("i",))

  def body(v):
    shifted = parallel.ppermute_start(v, "i", ((0, 0),)).done()
    total = parallel.psum_start(shifted * 2.0, "i").done()
    return parallel.all_gather_start(total, "i", tiled=True).done() + v
  return jax.jit(jax.shard_map(body, mesh=mesh, in_specs=jax.P("i"),
                               out_specs=jax.P("i")))(x)


def hijax_boxes(x, y):
  # From version 8: JAX 0.10's mutable hijax types. A Box and a Log made in
  # the program and passed to a jit-ted step (whose inputs carry the boxes'
  # quasi-dynamic data), which reads and writes the box and appends to the
  # log. Written only by releases that have them (jax._src.hijax.Box).
  from jax._src import hijax  # pylint: disable=g-import-not-at-top
  box = hijax.Box({"acc": x, "n": jnp.zeros((), jnp.int32)})
  log = hijax.Log()

  @jax.jit
  def step(b, l, v):
    s = b.get()
    b.set({"acc": s["acc"] * 2.0 + v, "n": s["n"] + 1})
    l.append("seen", v)
    return v.sum()
  t = step(box, log, y)
  t = t + step(box, log, y * 3.0)
  final = box.get()
  return final["acc"] + t, final["n"]


@jax.custom_vjp
def _flagged(a, b):
  return jnp.sin(a) * b


def _flagged_fwd(a, b):
  perturbed = (a.perturbed, b.perturbed)
  return _flagged(a.value, b.value), (a.value, b.value, perturbed)


def _flagged_bwd(res, ct):
  a, b, (a_perturbed, b_perturbed) = res
  if b_perturbed:
    raise ValueError("b cannot be differentiated")
  return (jnp.cos(a) * b * ct if a_perturbed else None, None)


_flagged.defvjp(_flagged_fwd, _flagged_bwd, symbolic_zeros=True)


def perturbed_flags(a, b):
  # From version 9: a backward rule that branches on the `perturbed` flags
  # its forward rule returns (as Equinox's do), stored as JAX called it
  # with them when the writer differentiated the program: by `a` (a rule),
  # and by `b` or both (the rule's error). GRADS checks the first.
  return _flagged(a, b) + a


# Cases whose files must also give the original's gradient (by these
# argnums) of the sum of their outputs, stored as grad0, ...
GRADS = {"perturbed_flags": 0}

CASES = {
    "mlp_constants": (closed_mlp, (_rng.randn(4, 6).astype(np.float32),), {}),
    "control_flow": (control_flow, (_rng.randn(5, 3).astype(np.float32),
                                    np.int32(4)), {}),
    "signature": (signature, ({"a": _rng.randn(3).astype(np.float32),
                               "by_id": {7: _rng.randn(3).astype(np.float32),
                                         3: _rng.randn(3).astype(np.float32)}},),
                  {"mode": np.float32(3.0)}),
    "numerics": (numerics, (_rng.randn(8).astype(np.float32),), {}),
    "custom_rules": (custom_rules, (_rng.randn(6).astype(np.float32),), {}),
    "custom_rules_grad": (custom_rules_grad,
                          (_rng.randn(6).astype(np.float32),), {}),
    # From version 3: repeated pytree nodes (one `tree_nodes` entry for the
    # three layers) and nested name scopes (the name stack table).
    "layers": (layers, ([{"w": _rng.randn(4, 4).astype(np.float32),
                          "b": _rng.randn(4).astype(np.float32)}
                         for _ in range(3)],
                        _rng.randn(2, 4).astype(np.float32)), {}),
    "ecosystem": (ecosystem, (_rng.randn(4, 3).astype(np.float32),
                              _rng.randn(2, 3, 2).astype(np.float32),
                              _rng.randn(5).astype(np.float32),
                              np.array([[0, 0], [1, 2], [2, 1], [3, 3],
                                        [0, 3]], np.int32)), {}),
    "pallas_kernel": (pallas_kernel,
                      (_rng.randn(16, 128).astype(np.float32),), {}),
    # From version 7.
    "async_collectives": (async_collectives,
                          (_rng.randn(4, 3).astype(np.float32),), {}),
    # From version 9.
    "perturbed_flags": (perturbed_flags, (_rng.randn(5).astype(np.float32),
                                          _rng.randn(5).astype(np.float32)),
                        {}),
}
# From version 8, where this JAX has boxes (JAX 0.10).
if compat_hi_mutable.SUPPORTED:
  CASES["hijax_boxes"] = (hijax_boxes,
                          (_rng.randn(3).astype(np.float32),
                           _rng.randn(3).astype(np.float32)), {})


def main():
  out_dir = os.path.join(os.path.dirname(__file__),
                         f"v{jaxpr_io.FORMAT_VERSION}", f"jax-{jax.__version__}")
  os.makedirs(out_dir, exist_ok=True)
  for name, (fn, args, kwargs) in CASES.items():
    prog = jaxpr_io.trace(fn, *args, **kwargs)
    prog.metadata["golden"] = name
    jaxpr_io.save(os.path.join(out_dir, f"{name}.jaxpr"), prog)
    with open(os.path.join(out_dir, f"{name}.txt"), "w") as f:
      f.write(str(prog.closed_jaxpr) + "\n")
    flat_in = jax.tree_util.tree_leaves((args, kwargs))
    flat_out = jax.tree_util.tree_leaves(fn(*args, **kwargs))
    arrays = {f"arg{i}": np.asarray(a) for i, a in enumerate(flat_in)}
    arrays.update({f"out{i}": np.asarray(o) for i, o in enumerate(flat_out)})
    if name in GRADS:
      grads = jax.grad(lambda *a: sum(  # pylint: disable=cell-var-from-loop
          jnp.sum(o) for o in jax.tree_util.tree_leaves(fn(*a, **kwargs))),
                       argnums=GRADS[name])(*args)
      arrays.update({f"grad{i}": np.asarray(g) for i, g in
                     enumerate(jax.tree_util.tree_leaves(grads))})
    np.savez(os.path.join(out_dir, f"{name}.npz"), **arrays)
    print("wrote", name)


if __name__ == "__main__":
  main()
