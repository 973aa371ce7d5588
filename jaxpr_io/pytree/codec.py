"""Pytree treedefs as param values (`Value.treedef`): the codec pair,
registered with jaxpr_io/codec/params.py. Unlike a signature (read by
read.py, whose GENERIC nodes may load as plain containers), such a treedef
must come back exactly (docs/architecture.md maps the pytree modules).
"""

from __future__ import annotations

from jaxpr_io.codec import params
from jaxpr_io.pytree import read as tree_read
from jaxpr_io.pytree import write as tree_write
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.errors import FormatError, UnsupportedError
from jaxpr_io.pytree.calls import display_path


# A `PyTreeDef` param (`composite`'s attributes, the `tree` of a ref's
# `get`/`swap`, checkify's error trees) is stored as a signature is, in a
# `Value.treedef` (version 4), but it must come back exactly: a plain
# container standing in for a missing type would change what the primitive
# does. So every GENERIC node must have its auxdata stored (checked when
# writing) and be re-bound to its type (checked when reading).
def encode_treedef_value(w, v, out, depth):
  del depth
  problem = tree_write._exact_problem(v)  # pylint: disable=protected-access
  if problem is not None:
    # The reason first: the treedef itself may be long.
    raise UnsupportedError(f"a treedef param cannot be stored exactly: "
                           f"{problem}; the treedef is {v}"[:600])
  node = tree_write._node_of(v, 0, programs=True)  # pylint: disable=protected-access
  tree_write._write(w, node, out.treedef)  # pylint: disable=protected-access


def decode_treedef_value(r, msg, depth):
  del depth
  if r.msg.format_version < 4:
    raise FormatError("a treedef param value in a file before version 4")
  r.charge_tree(msg.treedef, "a treedef value")
  node = tree_read._read(r, msg.treedef, 0, r.tree_memo)  # pylint: disable=protected-access
  fallbacks: list[tuple[tuple, str, str]] = []
  treedef = tree_read._build(node, (), fallbacks)  # pylint: disable=protected-access
  if fallbacks:
    path, type_name, reason = fallbacks[0]
    raise FormatError(
        f"a treedef param needs the pytree node type {type_name} "
        f"(at {display_path(path) or 'its root'}), which cannot be used "
        f"here: {reason}; import the module that defines it before loading")
  return treedef


params.register_value_encoder(compat_pytrees.PyTreeDef, encode_treedef_value)
params.register_value_decoder("treedef", decode_treedef_value)
