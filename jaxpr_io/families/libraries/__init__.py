"""Primitives and values of JAX libraries (Equinox, Lineax), by stable name."""
