"""Command-line tools: `jaxpr-dump` and `jaxpr-load` (also `python -m
jaxpr_io dump|load`). Installed as `jaxpr_io.tools`."""
