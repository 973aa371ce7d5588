"""The `tree` param of `jax.experimental.sparse`'s generic `todense`.

`sparse.todense(mat)` binds `todense` with the operand's flattened buffers and
`tree`, the `PyTreeDef` of the matrix: a leaf for a dense array, or one node
of a sparse format class (BCOO, BCSR, COO, CSR, CSC) over its buffers. The
auxdata of those nodes is a dict (the matrix's shape and sortedness flags),
which the generic treedef param codec cannot store exactly (a `Value` has no
dict). This codec stores such a node as (format name, ((key, value), ...),
number of buffers) and rebuilds it from a fixed table of the sparse classes:
a file names a format, never a class to import. Also the NamedTuples of the
sparse primitives' params (`SparseInfo`, `COOInfo`).
"""

from __future__ import annotations

from jax.experimental import sparse as jsparse

from jaxpr_io.codec import registry
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.compat import sparse as compat_sparse
from jaxpr_io.errors import FormatError, UnsupportedError

# format name -> (class, its auxdata keys in its own order, what each holds,
# number of buffers). The keys are those each class's `tree_unflatten`
# requires (JAX 0.10 to 0.12).
_SHAPE, _FLAG = "shape", "flag"
_FORMATS = {
    "BCOO": (jsparse.BCOO, (("shape", _SHAPE), ("indices_sorted", _FLAG),
                            ("unique_indices", _FLAG)), 2),
    "BCSR": (jsparse.BCSR, (("shape", _SHAPE), ("indices_sorted", _FLAG),
                            ("unique_indices", _FLAG)), 3),
    "COO": (jsparse.COO, (("shape", _SHAPE), ("rows_sorted", _FLAG),
                          ("cols_sorted", _FLAG)), 3),
    "CSR": (jsparse.CSR, (("shape", _SHAPE),), 3),
    "CSC": (jsparse.CSC, (("shape", _SHAPE),), 3),
}
_NAME_OF = {cls: name for name, (cls, _, _) in _FORMATS.items()}
_WHERE = "param 'tree' of todense"


def encode_todense_tree(treedef, params):
  """A dense operand's treedef as itself; a sparse one as its format."""
  del params
  node_data = treedef.node_data()
  if node_data is None:
    return treedef  # a leaf: the generic treedef codec stores it
  node_type, aux = node_data
  name = _NAME_OF.get(node_type)
  if name is None:
    raise UnsupportedError(
        f"{_WHERE} is a {getattr(node_type, '__qualname__', node_type)} "
        f"node; only a dense array or the sparse formats "
        f"{', '.join(_FORMATS)} can be stored")
  children = treedef.children()
  if not all(c.node_data() is None for c in children):
    raise UnsupportedError(f"{_WHERE}: a {name} whose buffers are not "
                           "arrays cannot be stored")
  _, keys, n = _FORMATS[name]
  if list(aux) != [k for k, _ in keys] or len(children) != n:
    raise UnsupportedError(
        f"{_WHERE}: the {name} node holds {sorted(aux)!r} and "
        f"{len(children)} buffers, not the keys and buffers this jaxpr_io "
        "knows; update jaxpr_io for this JAX release")
  return (name, tuple((k, aux[k]) for k, _ in keys), n)


def decode_todense_tree(stored, params):
  del params
  if isinstance(stored, compat_pytrees.PyTreeDef):
    if stored.node_data() is not None:
      raise FormatError(f"{_WHERE} must be a leaf or a sparse format, not "
                        f"{stored}")
    return stored
  if not (isinstance(stored, tuple) and len(stored) == 3
          and isinstance(stored[0], str) and isinstance(stored[1], tuple)):
    raise FormatError(f"{_WHERE} must be (format, auxdata, buffers), not "
                      f"{stored!r:.200}")
  name, pairs, n = stored
  if name not in _FORMATS:
    raise FormatError(f"{_WHERE} names the sparse format {name!r:.80}; "
                      f"known: {', '.join(_FORMATS)}")
  cls, keys, n_buffers = _FORMATS[name]
  if type(n) is not int or n != n_buffers:
    raise FormatError(f"{_WHERE}: a {name} has {n_buffers} buffers, not "
                      f"{n!r:.40}")
  if (len(pairs) != len(keys)
      or any(not isinstance(p, tuple) or len(p) != 2 for p in pairs)
      or [p[0] for p in pairs] != [k for k, _ in keys]):
    raise FormatError(f"{_WHERE}: a {name}'s auxdata must have the keys "
                      f"{[k for k, _ in keys]}, not {pairs!r:.200}")
  aux = {}
  for (key, kind), (_, value) in zip(keys, pairs):
    ok = (type(value) is bool if kind == _FLAG else
          type(value) is tuple and all(type(d) is int and d >= 0
                                       for d in value))
    if not ok:
      raise FormatError(f"{_WHERE}: the {name}'s {key!r} must be "
                        f"{'a bool' if kind == _FLAG else 'a tuple of sizes'}"
                        f", not {value!r:.80}")
    aux[key] = value
  return compat_pytrees.make_node(cls, aux, [compat_pytrees.LEAF] * n)


registry.register_eqn_param_codec("todense", "tree",
                                  encode=encode_todense_tree,
                                  decode=decode_todense_tree)
for _name, _cls in compat_sparse.NAMED_TUPLES.items():
  registry.register_jax_named_tuple(_cls, name=_name)
