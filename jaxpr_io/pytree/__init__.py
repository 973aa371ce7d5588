"""Pytrees in files: a program's signature (`in_tree`, `out_tree`) and its
treedef params are `PyTree` messages (schema/jaxpr.proto).

  nodes.py   the `Node` model and the trees loaded with plain containers
             (so a loaded program saves to the same bytes)
  write.py   treedef -> messages: what each node kind stores
  read.py    messages -> treedef, validated; what a GENERIC node is re-bound
             to (only the library table is ever imported), else its plain
             container
  calls.py   call paths: calling a program with arguments of its signature,
             or of any structure with the same key paths
  codec.py   treedefs as param values, which must come back exactly
  static.py  the non-array leaves of traced arguments (`jaxpr_io.static`)
"""
