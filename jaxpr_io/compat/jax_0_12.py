"""Adapter for JAX 0.12.x: the data model of 0.11 (jax_0_11.py, which also
detects 0.12's `no_collectives` context setting). What 0.12 added to the
vocabulary, `erfc`'s `accuracy` param, is an optional param
(`vocabulary.OPTIONAL_PARAMS`). 0.12 renamed Triton's `debug_barrier_p`
primitive to `debug_barrier`, and Mosaic GPU's `wgmma_accumulator_deref_p`,
`wgmma_accumulator_store_p` and `set_max_registers_p` the same way, and
the sharding casts `reduced_vary_cast_p` and `vary_unreduced_cast_p`; files
keep the earlier names. 0.12's jax.numpy binds hi primitives (`Ldexp`,
`Frexp` are new)."""

from __future__ import annotations

from jax._src.numpy import ufuncs as numpy_ufuncs

from jaxpr_io.compat.jax_0_11 import Jax011


# This release's name -> the name files hold (0.10's and 0.11's).
_P_SUFFIX_DROPPED = {name: name + "_p" for name in (
    "debug_barrier", "wgmma_accumulator_deref", "wgmma_accumulator_store",
    "set_max_registers", "reduced_vary_cast", "vary_unreduced_cast")}


class Jax012(Jax011):
  release_line = "0.12"
  name_to_format = {**Jax011.name_to_format, **_P_SUFFIX_DROPPED}
  name_from_format = {**Jax011.name_from_format,
                      **{v: k for k, v in _P_SUFFIX_DROPPED.items()}}
  # jnp.searchsorted (and interp, digitize, histogram), jnp.nonzero with a
  # size (and argwhere), jnp.ldexp and jnp.frexp bind these.
  hi_prim_classes = {**Jax011.hi_prim_classes,
                     "jax.numpy.Ldexp": numpy_ufuncs.Ldexp,
                     "jax.numpy.Frexp": numpy_ufuncs.Frexp}


ADAPTER = Jax012()
