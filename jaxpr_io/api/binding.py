"""`Program.bind`: fix some inputs of a program to concrete arrays.

The bound inputs' variables become constvars of the jaxpr, and the arrays
their constants: nothing else of the program changes, so it prints, runs and
saves as the original with those inputs closed over. The new `in_tree` is
the original's with the bound arguments left out.

A bound value is matched against the argument's part of the signature by
*call paths* (tree_calls.call_path, compared as text): attribute keys, dict
keys and indices are interchangeable, so a Flax `FrozenDict`, an Equinox
module, a checkpoint restored as nested dicts, or a flat mapping from key-path
text to arrays (`FlatSource`, what an `.npz` holds) all bind the same
argument.
"""

from __future__ import annotations

import math
import re
from typing import Any, Mapping

import jax
import numpy as np

from jaxpr_io import compat
from jaxpr_io.families.hijax import mutable as hi_mutable
from jaxpr_io.api import shardings
from jaxpr_io.pytree import static
from jaxpr_io.pytree import calls as tree_calls
from jaxpr_io.pytree import nodes as tree_nodes
from jaxpr_io.pytree import read as tree_read
from jaxpr_io.compat import pytrees as compat_pytrees
from jaxpr_io.compat import symbolic
from jaxpr_io.format import limits
from jaxpr_io.errors import UnsupportedError


class FlatSource(dict):
  """Arrays keyed by key-path text: `['params']['w']`, `.w`, `[0]`, either
  relative to the bound argument or from the top as `jaxpr-load` prints it
  (`args[0]['params']['w']`, `kwargs['scale']`). `name` says where they come
  from, for messages."""

  def __init__(self, arrays: Mapping[str, Any], name: str):
    super().__init__(arrays)
    self.name = name


class SourceError(ValueError):
  """A bind SOURCE that cannot be read, has no such subtree, or is larger
  than it may be (one line)."""


class SourceTree(dict):
  """A source's tree of arrays (an Orbax checkpoint's), with `name`, the
  SOURCE it was read from (`ckpt/7/state:params`), for messages."""

  def __init__(self, tree: Mapping, name: str):
    super().__init__(tree)
    self.name = name


class Lazy:
  """A leaf of a bind source not looked at yet; `resolve()` gives it (a
  `Deferred` known from the source's metadata)."""

  def resolve(self) -> Any:
    raise NotImplementedError


class Deferred:
  """An array of a bind source known by its shape and dtype alone (from the
  source's metadata), read only once every bound input has matched the
  program. Its `source` has `name` (for messages), `limit` (the most bytes
  it may read, or None) and `read(deferreds)` (their arrays, in order)."""

  # The sharding to read it with: the caller's (`load_source(shardings=)`),
  # else what `bind` derives from the program (api/shardings.py), else
  # None (a host numpy array).
  sharding = None

  def __init__(self, shape, dtype, source):
    self.shape = tuple(int(d) for d in shape)
    self.dtype = np.dtype(dtype)
    self.source = source

  @property
  def nbytes(self) -> int:
    return math.prod(self.shape) * self.dtype.itemsize

  @property
  def read_bytes(self) -> int:
    """The memory that reading it takes, charged against the source's
    limit: the array, and what its storage decodes on the way
    (`_OrbaxLeaf` adds its chunks)."""
    return self.nbytes


def _resolved(x):
  return x.resolve() if isinstance(x, Lazy) else x


_TOKEN = re.compile(
    r"\['((?:[^'\\]|\\.)*)'\]|\[\"((?:[^\"\\]|\\.)*)\"\]|\[<flat index (\d+)>\]"
    r"|\[(-?\d+)\]|\.([A-Za-z_][A-Za-z0-9_]*)")
_HEAD = re.compile(r"^(args\[(\d+)\]|kwargs\['([^']*)'\])")


def parse_key_path(text: str) -> tuple[str, ...] | None:
  """The call path (as text) of key-path text, or None if it is not one."""
  keys, pos = [], 0
  while pos < len(text):
    m = _TOKEN.match(text, pos)
    if m is None:
      return None
    keys.append(next(g for g in m.groups() if g is not None))
    pos = m.end()
  return tuple(keys)


def _text_path(call_path) -> tuple[str, ...]:
  return tuple(str(k) for k in call_path)


def _type_text(shape, dtype) -> str:
  return f"{np.dtype(dtype).name}[{','.join(str(d) for d in shape)}]"


def _found_text(x) -> str:
  if static.is_dynamic(x):
    try:
      return _type_text(np.shape(x), _dtype_of(x))
    except TypeError:
      pass
  return f"a {type(x).__name__} ({static.describe(x)})"


def _dtype_of(x):
  if isinstance(x, (bool, int, float, complex)):
    return np.asarray(x).dtype
  return x.dtype


def _given_leaves(value, head: tuple[str, ...], where: str
                  ) -> dict[tuple[str, ...], Any]:
  """call path (text, relative to the argument) -> leaf of a bound value."""
  if isinstance(value, FlatSource):
    given = {}
    for key in value:
      text = key
      m = _HEAD.match(text)
      if m is not None:
        top = (("0", m.group(2)) if m.group(2) is not None
               else ("1", m.group(3)))
        if top != head:
          continue  # another argument's leaves (one .npz for several)
        text = text[m.end():]
      path = parse_key_path(text)
      if path is None:
        raise TypeError(f"bind {where}: {value.name} has the key {key!r}, "
                        "which is not a key path like ['params']['w'] or "
                        "args[0]['params']['w'] (as jaxpr-load prints them)")
      if path in given:
        raise TypeError(f"bind {where}: {value.name} has two arrays for the "
                        f"key path {key!r}")
      # Unresolved: a member's metadata is read only if it is matched.
      given[path] = dict.__getitem__(value, key)
    return given
  if isinstance(value, SourceTree):
    value = dict(value)  # a dict subclass is a leaf to JAX
  pairs, _ = jax.tree_util.tree_flatten_with_path(
      value, is_leaf=lambda x: isinstance(x, static.Static))
  given = {}
  for path, leaf in pairs:
    text = _text_path(tree_calls.call_path(path))
    if text in given:
      raise TypeError(f"bind {where}: two leaves at the key path "
                      f"{jax.tree_util.keystr(tuple(path))}")
    given[text] = leaf
  return given


EXTRA_CHOICES = ("error", "ignore")


def _match(arg_def, value, head: tuple[str, ...], where: str, avals,
           extra: str = "error") -> list:
  """The constants for one bound argument, in its leaves' order. With
  `extra="ignore"` the source's arrays that are no input of the program are
  dropped (unread); every input must still be found and match."""
  paths = tree_calls.leaf_paths(arg_def)
  given = _given_leaves(value, head, where)
  statics = {_text_path(p) for p in static.static_paths(arg_def)}
  leaves = []
  for path, aval in zip(paths, avals):
    text = _text_path(tree_calls.call_path(path))
    shown = where + jax.tree_util.keystr(tuple(path))
    if hi_mutable.is_hi_mutable(aval):
      # A constant is immutable: a box's contents change with each call.
      raise UnsupportedError(
          f"bind {shown}: the input is a {aval.str_short()} (JAX 0.10's "
          "mutable Box or Log), which cannot become a constant; pass it in "
          "each call")
    if any(type(d) is symbolic.DimExpr for d in aval.shape):
      raise UnsupportedError(
          f"bind {shown}: the input has symbolic dimensions "
          f"({aval.str_short()}); fix them first with "
          "Program.specialize (jaxpr-load --dims), or trace the program "
          "with concrete shapes for the bound arguments")
    if text not in given:
      raise TypeError(f"bind {shown}: the program takes {aval.str_short()}, "
                      f"the source has nothing there"
                      f"{_missing_hint(value, given, text)}")
    leaves.append(_leaf_value(_resolved(given.pop(text)), aval, shown))
  if extra == "ignore":
    return leaves
  for text, leaf in given.items():
    leaf = _resolved(leaf)
    if text in statics or leaf is None or isinstance(leaf, static.Static):
      continue  # the static value (function, flag) a call also passes
    shown = where + "".join(f"[{k!r}]" for k in text)
    raise TypeError(f"bind {shown}: the source has {_found_text(leaf)}, "
                    f"which is not an input of the program (it takes "
                    f"{len(paths)} arrays under {where}); to bind only "
                    f"what the program takes, pass extra='ignore' "
                    f"(ProgramRestore: bind_extra='ignore'; jaxpr-load: "
                    f"--bind-ignore-extra)")
  return leaves


def _missing_hint(value, given: dict, text: tuple[str, ...]) -> str:
  """When the input is found one level down in the source (an Orbax state
  bound without `:params`): what the source holds at its top level and the
  SOURCE that selects the input's level."""
  tops = sorted({path[0] for path in given if path}, key=str)
  under = [top for top in tops if (top,) + text in given]
  if len(under) != 1:
    return ""
  name = getattr(value, "name", None)
  shown = ", ".join(map(str, tops[:20])) + (", ..." if len(tops) > 20
                                             else "")
  if isinstance(value, SourceTree) and name:
    spec = f"{name}.{under[0]}" if ":" in name else f"{name}:{under[0]}"
    select = f"bind {spec} instead"
  else:
    select = "bind that subtree instead"
  return (f"; the source holds {shown} at its top level and the input is "
          f"under {under[0]!r}: {select}")


def _leaf_value(x, aval, shown: str):
  """`x` as the constant for an input of type `aval`, or TypeError."""
  if not static.is_dynamic(x):
    raise TypeError(f"bind {shown}: the program takes {aval.str_short()}, "
                    f"the source has {_found_text(x)}")
  if compat.is_prng_key_dtype(aval.dtype):
    if compat.is_prng_key_dtype(getattr(x, "dtype", None)):
      if x.dtype != aval.dtype or tuple(x.shape) != tuple(aval.shape):
        raise TypeError(f"bind {shown}: the program takes "
                        f"{aval.str_short()}, the source has "
                        f"{_found_text(x)}")
      return x
    return _key_data(x, aval, shown)
  if isinstance(x, (bool, int, float, complex)) and aval.weak_type:
    x = np.asarray(x, aval.dtype)  # a Python scalar, as a call passes it
  shape, dtype = tuple(np.shape(x)), np.dtype(_dtype_of(x))
  if shape != tuple(aval.shape) or dtype != aval.dtype:
    raise TypeError(f"bind {shown}: the program takes {aval.str_short()}, "
                    f"the source has {_type_text(shape, dtype)}")
  if isinstance(x, Deferred):
    return x  # read once every input has matched (_read_deferred)
  if shardings.is_device_array(x):
    # Kept on its devices: a global array's shards may be in other
    # processes, and a fetch would copy every host's weights to each.
    shardings.check_array(x, aval, shown)
    return x
  return np.asarray(x)


class KeyData:
  """The raw data of a typed key input (what `jax.random.key_data` gives,
  and what Orbax saves of a key array), to be wrapped as a key of `impl`
  once read."""

  def __init__(self, data, impl):
    self.data, self.impl = data, impl


def _key_data(x, aval, shown: str) -> KeyData:
  """`x`, key data for the key input `aval` of `shown`: a uint32 array of
  the key shape followed by the shape of the program's impl's key data
  (threefry (2,), rbg (4,)); it is wrapped as a key of that impl, as
  `jax.random.wrap_key_data(x, impl=...)` wraps it. A key's data does not
  record its impl: the program's declaration is the one there is."""
  impl = compat.key_impl_of(aval.dtype)
  expected = tuple(aval.shape) + tuple(impl.key_shape)
  shape, dtype = tuple(np.shape(x)), np.dtype(_dtype_of(x))
  if shape != expected or dtype != np.uint32:
    raise TypeError(
        f"bind {shown}: the program takes {aval.str_short()} (impl "
        f"{impl.name}), whose key data is {_type_text(expected, np.uint32)}; "
        f"the source has {_type_text(shape, dtype)}")
  keep = isinstance(x, Deferred) or shardings.is_device_array(x)
  return KeyData(x if keep else np.asarray(x), impl)


def _wrap_keys(bound: dict[int, Any], keys: dict[int, Any]) -> None:
  """The key data in `bound` (read) wrapped as keys of their impls."""
  for i, impl in keys.items():
    data = bound[i]
    if not shardings.is_device_array(data):
      data = np.asarray(data)
    bound[i] = compat.wrap_key_data(data, impl)


def _read_deferred(bound: dict[int, Any], closed, keys) -> None:
  """Reads in place the arrays that only their source's metadata described,
  now that every bound input has matched the program: first each source's
  total against its limit, then the data, each source at once. A source
  that reads by shards (`sharded`) reads each array with the sharding its
  caller gave, else the one the program declares for it (`closed`'s input;
  api/shardings.py); key data (`keys`) is read whole."""
  by_source: dict[int, tuple[Any, list[int]]] = {}
  for i, x in bound.items():
    if isinstance(x, Deferred):
      by_source.setdefault(id(x.source), (x.source, []))[1].append(i)
      if (x.sharding is None and i not in keys
          and getattr(x.source, "sharded", False)):
        x.sharding = shardings.for_input(closed, i,
                                         getattr(x.source, "mesh", None))
  for source, indices in by_source.values():
    total = sum(bound[i].read_bytes for i in indices)
    if source.limit is not None and total > source.limit:
      raise SourceError(
          f"{source.name}: the arrays the program needs (and the chunks "
          f"their storage declares) declare {total:,} bytes, over the "
          f"{source.limit:,} that an untrusted "
          f"source of its size may expand to ({limits.MEMORY_FACTOR}x its "
          f"size on disk + {limits.FIXED_OVERHEAD >> 20} MiB); nothing was "
          f"read. Pass trusted=True (jaxpr-load "
          f"--trusted) if you trust it")
  for source, indices in by_source.values():
    arrays = source.read([bound[i] for i in indices])
    for i, array in zip(indices, arrays):
      bound[i] = array


def _new_in_tree(in_tree, n_args: int, kw_names) -> Any:
  """`in_tree` without its first `n_args` positional and its `kw_names`
  keyword arguments. A tree loaded with plain containers standing in for
  missing types is rebuilt from the nodes it was read from, so that the
  bound program saves those types' names as the file had them."""
  node = tree_nodes._remembered_node(in_tree)  # pylint: disable=protected-access
  if node is not None:
    args_node, kwargs_node = node.children
    keep = [i for i, k in enumerate(kwargs_node.keys) if k not in kw_names]
    new = tree_nodes.Node("tuple", (
        tree_nodes.Node("tuple", args_node.children[n_args:]),
        tree_nodes.Node("dict", tuple(kwargs_node.children[i] for i in keep),
                        keys=tuple(kwargs_node.keys[i] for i in keep))))
    fallbacks: list = []
    tree = tree_read._build(new, (), fallbacks)  # pylint: disable=protected-access
    if fallbacks:
      tree_nodes._remember(tree, new, fallbacks)  # pylint: disable=protected-access
    return tree
  args_def, kwargs_def = in_tree.children()
  names = kwargs_def.node_data()[1]
  keep = [i for i, k in enumerate(names) if k not in kw_names]
  kw_children = kwargs_def.children()
  return compat_pytrees.make_node(tuple, None, [
      compat_pytrees.make_node(tuple, None, args_def.children()[n_args:]),
      compat_pytrees.make_node(dict, [names[i] for i in keep],
                               [kw_children[i] for i in keep])])


def bind(prog, args: tuple, kwargs: dict, extra: str = "error"):
  """`Program.bind` (see there): the bound program's (closed jaxpr,
  in_tree)."""
  if extra not in EXTRA_CHOICES:
    raise ValueError(f"bind: extra={extra!r}; it is 'error' (a source's "
                     "arrays that are no input are refused) or 'ignore' "
                     "(they are dropped)")
  in_tree = prog.in_tree
  if not tree_calls.is_call_signature(in_tree):
    raise UnsupportedError(
        f"bind needs a program whose inputs are (args, kwargs); this one "
        f"takes {in_tree}")
  args_def, kwargs_def = in_tree.children()
  arg_defs = args_def.children()
  names = list(kwargs_def.node_data()[1])
  kw_defs = dict(zip(names, kwargs_def.children()))
  if len(args) > len(arg_defs):
    raise TypeError(f"bind: the program takes {len(arg_defs)} positional "
                    f"arguments, {len(args)} were given")
  for name in kwargs:
    if name not in kw_defs:
      raise TypeError(f"bind: the program has no keyword argument {name!r} "
                      f"(it has: {', '.join(map(repr, names)) or 'none'})")
  closed = prog.closed_jaxpr
  jaxpr = closed.jaxpr
  if any(type(e) in compat.INPUT_EFFECTS.values() for e in jaxpr.effects):
    raise UnsupportedError("bind: the program has effects on its inputs "
                           "(mutable refs), which cannot become constants")
  avals = closed.in_avals
  starts, start = {}, 0
  for i, d in enumerate(arg_defs):
    starts[("0", str(i))] = start
    start += d.num_leaves
  for name in names:
    starts[("1", name)] = start
    start += kw_defs[name].num_leaves
  bound: dict[int, Any] = {}
  items = [(("0", str(i)), f"args[{i}]", arg_defs[i], v)
           for i, v in enumerate(args)]
  items += [(("1", name), f"kwargs[{name!r}]", kw_defs[name], kwargs[name])
            for name in names if name in kwargs]
  for head, where, arg_def, value in items:
    first = starts[head]
    leaves = _match(arg_def, value, head, where,
                    avals[first:first + arg_def.num_leaves], extra)
    bound.update(zip(range(first, first + len(leaves)), leaves))
  keys = {i: x.impl for i, x in bound.items() if isinstance(x, KeyData)}
  bound.update((i, bound[i].data) for i in keys)
  _read_deferred(bound, closed, keys)
  _wrap_keys(bound, keys)
  order = sorted(bound)
  invars = list(jaxpr.invars)
  info = jaxpr.debug_info
  if info is not None and info.arg_names is not None:
    info = info._replace(arg_names=tuple(
        n for i, n in enumerate(info.arg_names) if i not in bound))
  new_jaxpr = compat.new_jaxpr(
      list(jaxpr.constvars) + [invars[i] for i in order],
      [v for i, v in enumerate(invars) if i not in bound],
      jaxpr.outvars, jaxpr.eqns, jaxpr.effects, info,
      getattr(jaxpr, "is_high", False))
  new_closed = compat.make_closed(
      new_jaxpr, list(closed.consts) + [bound[i] for i in order])
  new_tree = _new_in_tree(in_tree, len(args), set(kwargs))
  return new_closed, new_tree
