"""Primitive families whose params are not plain data: each module registers
its codecs, and is imported when a program or a file names the family
(`jaxpr_io.families.loader`)."""
