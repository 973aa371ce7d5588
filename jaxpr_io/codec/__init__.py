"""Param values <-> `Value` messages: the registries of stable names, one
codec pair per param type, JAX's structured records, and the format's
vocabulary."""
