"""Adapter for JAX 0.12.x: 0.11's data model (jax_0_11.py) plus what 0.12
added: `erfc`'s `accuracy` param and the `no_collectives` context setting
(detected in jax_0_11.py, which both releases share)."""

from __future__ import annotations

from jaxpr_io.compat.jax_0_11 import Jax011


class Jax012(Jax011):
  release_line = "0.12"
  optional_params = Jax011.optional_params | {("erfc", "accuracy")}


ADAPTER = Jax012()
