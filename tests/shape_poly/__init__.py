"""JAX's shape-polymorphism suite run through jaxpr_io (a campaign, not a
CI test: `python -m tests.shape_poly`; docs/symbolic-shapes.md has the
command and the table)."""
