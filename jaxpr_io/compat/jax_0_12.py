"""Adapter for JAX 0.12.x: the data model of 0.11 (jax_0_11.py, which also
detects 0.12's `no_collectives` context setting). What 0.12 added to the
vocabulary, `erfc`'s `accuracy` param, is an optional param
(`vocabulary.OPTIONAL_PARAMS`). 0.12 renamed Triton's `debug_barrier_p`
primitive to `debug_barrier`; files keep the earlier name."""

from __future__ import annotations

from jaxpr_io.compat.jax_0_11 import Jax011


class Jax012(Jax011):
  release_line = "0.12"
  name_to_format = {**Jax011.name_to_format,
                    "debug_barrier": "debug_barrier_p"}
  name_from_format = {**Jax011.name_from_format,
                      "debug_barrier_p": "debug_barrier"}


ADAPTER = Jax012()
