"""Adapter for JAX 0.12.x: the data model of 0.11 (jax_0_11.py, which also
detects 0.12's `no_collectives` context setting). What 0.12 added to the
vocabulary, `erfc`'s `accuracy` param, is an optional param
(`vocabulary.OPTIONAL_PARAMS`); a 0.12-only mapping would go here."""

from __future__ import annotations

from jaxpr_io.compat.jax_0_11 import Jax011


class Jax012(Jax011):
  release_line = "0.12"


ADAPTER = Jax012()
