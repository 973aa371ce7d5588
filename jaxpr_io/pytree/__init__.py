"""Pytrees in files: nodes, treedefs as params, call signatures and static
leaves."""
