"""The zoos: real programs (Flax Linen and NNX, Equinox, optax, ODE
integration, linear algebra, attention, mixed precision, remat policies,
sharding on 8 CPU devices; tests/support/zoo2.py: a ragged mixture of experts,
`lax.composite`, BCOO and BCSR sparse matrices, refs and `run_state`) saved
and loaded, in this process and in a fresh
one that does not import the model code.

The loaded program must print like the original, re-dump to the same bytes,
pass JAX's type checker and, under jit, grad, vmap, jvp and linearize, give
bit-identical results to the original program (the same computation
compiled by the same XLA), or fail the same way where the original does.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import jax
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import compat
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome, ones_like, scalar)
from tests.support.zoo import ZOO as ZOO1
from tests.support.zoo2 import REFUSED, ZOO2
from tests.support.groups import grouped

# Both zoos, tested alike: the first (issue 3) and the second, of the parts
# of JAX the first leaves out (issue 12).
ZOO = {**ZOO1, **ZOO2}
assert len(ZOO) == len(ZOO1) + len(ZOO2), "zoo names must be unique"


def _refused_here(name: str) -> bool:
  return name in REFUSED and REFUSED[name][0]


@pytest.fixture(scope="module", params=grouped(sorted(ZOO), "zoo"))
def case(request):
  fn, args, kwargs = ZOO[request.param]()
  original = jaxpr_io.trace(fn, *args, **kwargs)
  if _refused_here(request.param):
    # What this release cannot store fails at dumps, naming the equation
    # and saying what to do.
    with pytest.raises(jaxpr_io.UnsupportedError,
                       match="equation .*" + REFUSED[request.param][1]):
      jaxpr_io.dumps(original)
    pytest.skip(f"{request.param}: refused on this JAX release, as asserted")
  loaded = assert_roundtrip(original)
  return request.param, args, kwargs, original, loaded


def _batched(x):
  return jax.tree_util.tree_map(lambda a: np.stack([np.asarray(a)] * 2), x)


def test_zoo_jit(case):
  _, args, kwargs, original, loaded = case
  assert_same_outcome(lambda p: lambda *a: p(*a, **kwargs), original, loaded,
                      *args)


def test_zoo_grad(case):
  _, args, kwargs, original, loaded = case
  assert_same_outcome(
      lambda p: jax.grad(lambda a0, *rest: scalar(p(a0, *rest, **kwargs))),
      original, loaded, *args)


def test_zoo_jvp_and_linearize(case):
  _, args, kwargs, original, loaded = case
  tangent = ones_like(args[0])

  def jvp(p):
    return lambda a0, *rest: jax.jvp(lambda v: p(v, *rest, **kwargs), (a0,),
                                     (tangent,))

  def linearize(p):
    def f(a0, *rest):
      out, f_jvp = jax.linearize(lambda v: p(v, *rest, **kwargs), a0)
      return out, f_jvp(tangent)
    return f
  assert_same_outcome(jvp, original, loaded, *args)
  assert_same_outcome(linearize, original, loaded, *args)


def test_zoo_vmap(case):
  _, args, kwargs, original, loaded = case
  in_axes = (0,) + (None,) * (len(args) - 1)
  assert_same_outcome(
      lambda p: jax.vmap(lambda *a: p(*a, **kwargs), in_axes=in_axes),
      original, loaded, _batched(args[0]), *args[1:])


FRESH = textwrap.dedent("""
    # Loads every zoo program with only jax, numpy and jaxpr_io imported, and
    # records its outputs and the gradient of their sum (or the error name
    # where the program is not differentiable).
    import json, sys
    import jax, numpy as np
    import jaxpr_io
    from jaxpr_io import compat
    workdir = sys.argv[1]
    for name in json.load(open(workdir + "/names.json")):
      prog = jaxpr_io.load(f"{workdir}/{name}.jaxpr", check=True)
      data = np.load(f"{workdir}/{name}.in.npz")
      keys = json.load(open(f"{workdir}/{name}.keys.json"))  # typed PRNG keys
      flat = [jax.random.wrap_key_data(data[f"arg{i}"], impl=keys[str(i)])
              if str(i) in keys else data[f"arg{i}"]
              for i in range(len(data.files))]
      args, kwargs = jax.tree_util.tree_unflatten(prog.in_tree, flat)
      out = jax.tree_util.tree_leaves(jax.jit(prog)(*args, **kwargs))
      try:  # grad of the summed outputs w.r.t. the first argument
        loss = lambda a0, *rest: sum(
            l.astype("float32").sum() for l in jax.tree_util.tree_leaves(
                prog(a0, *rest, **kwargs)))
        out += jax.tree_util.tree_leaves(jax.jit(jax.grad(loss))(*args))
      except Exception as e:
        out.append(np.array(type(e).__name__))
      np.savez(f"{workdir}/{name}.out.npz",
               **{f"out{i}": np.asarray(compat.key_data(o)
                                        if compat.is_key_array(o) else o)
                  for i, o in enumerate(out)})
    # Equinox and Lineax may be imported: by jaxpr_io's library table, for
    # programs with their primitives and modules (tests/families/libraries/test_libraries.py).
    banned = [m for m in ("flax", "optax", "haiku", "numpyro", "blackjax",
                          "keras", "jax_md", "distrax", "jaxopt")
              if m in sys.modules]
    assert not banned, f"model code was imported: {banned}"
""")


# The zoo is checked in a fresh process in shards, so that xdist spreads
# the work over the cores rather than leaving one test of a minute to one.
_FRESH_SHARDS = 2


@pytest.mark.parametrize("shard", range(_FRESH_SHARDS))
def test_zoo_in_a_fresh_process(tmp_path, shard):
  import json  # pylint: disable=g-import-not-at-top
  expected = {}
  for index, (name, build) in enumerate(ZOO.items()):
    if index % _FRESH_SHARDS != shard or _refused_here(name):
      continue
    fn, args, kwargs = build()
    prog = jaxpr_io.trace(fn, *args, **kwargs)
    jaxpr_io.save(tmp_path / f"{name}.jaxpr", prog)
    flat = jax.tree_util.tree_leaves((args, kwargs))
    keys = {str(i): str(jax.random.key_impl(a)) for i, a in enumerate(flat)
            if compat.is_key_array(a)}
    (tmp_path / f"{name}.keys.json").write_text(json.dumps(keys))
    np.savez(tmp_path / f"{name}.in.npz",
             **{f"arg{i}": np.asarray(jax.random.key_data(a) if str(i) in keys
                                      else a)
                for i, a in enumerate(flat)})
    outs = jax.tree_util.tree_leaves(jax.jit(prog)(*args, **kwargs))
    try:
      outs += jax.tree_util.tree_leaves(jax.jit(jax.grad(
          lambda a0, *rest: scalar(prog(a0, *rest, **kwargs))))(*args))
    except Exception as e:  # pylint: disable=broad-except
      outs.append(np.array(type(e).__name__))
    expected[name] = outs
  (tmp_path / "names.json").write_text(json.dumps(sorted(expected)))
  env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8")
  subprocess.run([sys.executable, "-c", FRESH, str(tmp_path)], check=True,
                 env=env, timeout=600)
  for name, want in expected.items():
    got = np.load(tmp_path / f"{name}.out.npz")
    assert_bit_identical([got[f"out{i}"] for i in range(len(got.files))],
                         want)
