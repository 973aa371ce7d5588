"""JAX's hi primitives and JAX 0.10's boxes and logs."""
