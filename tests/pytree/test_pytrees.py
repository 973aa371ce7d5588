"""Pytree signatures with library node types: NamedTuples, dataclasses,
`register_pytree_node_class` classes, Flax `FrozenDict` and NNX `State`,
Equinox modules and optax states save without any registration; the loaded
program takes the same objects where their types are loaded, and plain
containers with the same key paths everywhere, including a fresh process
that has none of those libraries (and that loading does not import)."""

from __future__ import annotations

import collections
import dataclasses
import functools
import json
import os
import subprocess
import sys
import textwrap
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.format import _proto as pb
from jaxpr_io.format import container
from jaxpr_io.codec import library_table as libraries
from jaxpr_io.pytree import calls as tree_calls
from jaxpr_io.pytree import nodes as tree_nodes
from jaxpr_io.pytree import read as tree_read
from jaxpr_io.write import writer
from tests.support import proto_edit
from tests.support.roundtrip import assert_bit_identical, assert_roundtrip
from tests.support import paths

ROOT = paths.ROOT
LIBRARIES = ("flax", "equinox", "optax")
F32 = np.float32


# ----------------------------------------------------- node types of our own
class Pair(NamedTuple):
  """Not registered with jax.export: stored as a GENERIC node."""
  w: Any
  b: Any


@dataclasses.dataclass
class Scaled:
  # Fields not in sorted order, and plain-data meta fields.
  y: Any
  x: Any
  scale: int
  name: str


jax.tree_util.register_dataclass(Scaled, data_fields=["y", "x"],
                                 meta_fields=["scale", "name"])


@jax.tree_util.register_pytree_node_class
class Box:
  """Registered without keys: children have FlattenedIndexKeys."""

  def __init__(self, value, offset, tag):
    self.value, self.offset, self.tag = value, offset, tag

  def tree_flatten(self):
    return (self.value, self.offset), self.tag

  @classmethod
  def tree_unflatten(cls, tag, children):
    return cls(*children, tag)


# ------------------------------------------------------------------- cases
@dataclasses.dataclass
class Case:
  fn: Any
  args: tuple
  # Whether the loaded program, in this process, has exactly the traced
  # signature (every node type re-bound).
  rebinds: bool = True
  # Whether key paths print alike in plain containers (no attribute or
  # flattened-index keys).
  same_keystr: bool = False


def _arange(*shape):
  return np.arange(np.prod(shape), dtype=F32).reshape(shape) / 7


def _namedtuple():
  return Case(lambda p, x: (Pair(p.w * x, p.b + 1), (p.w * p.b).sum()),
              (Pair(_arange(3), F32(2)), _arange(3)))


def _dataclass():
  def fn(s):
    return Scaled(s.y * s.scale, s.x + s.y, s.scale, s.name)
  return Case(fn, (Scaled(_arange(2), _arange(2) + 1, 3, "half"),))


def _pytree_node_class():
  def fn(b, x):
    return Box(b.value * x + b.offset, b.offset, b.tag)
  return Case(fn, (Box(_arange(4), F32(1), ("tag", 1)), _arange(4)))


def _int_keys():
  return Case(lambda d: {1: d[3] * 2, 0: d[5] + d[3]},
              ({3: _arange(2), 5: _arange(2)},), same_keystr=True)


def _flax_frozen_dict():
  import flax  # pylint: disable=g-import-not-at-top
  from flax import linen as nn  # pylint: disable=g-import-not-at-top
  model = nn.Dense(3)
  x = _arange(2, 4)
  params = flax.core.freeze(model.init(jax.random.key(0), x))
  assert type(params) is flax.core.FrozenDict
  return Case(lambda p, x: model.apply(p, x), (params, x), same_keystr=True)


def _nnx_state():
  from flax import nnx  # pylint: disable=g-import-not-at-top
  graphdef, state = nnx.split(nnx.Linear(4, 3, rngs=nnx.Rngs(0)))
  def fn(state, x):
    return nnx.merge(graphdef, state)(x), state
  return Case(fn, (state, _arange(2, 4)))


def _equinox_module():
  import equinox as eqx  # pylint: disable=g-import-not-at-top
  # tanh, not relu: jax.nn.relu is a custom_jvp function, whose rule
  # jaxpr_io cannot store.
  mlp = eqx.nn.MLP(3, 2, 4, 1, activation=jnp.tanh, key=jax.random.key(1))
  # The callables (activations) are what `partition` takes out.
  params, static = eqx.partition(mlp, eqx.is_array)
  def fn(params, x):
    return eqx.combine(params, static)(x)
  # Equinox modules' auxdata (its `Missing` field sentinel, static fields)
  # is stored with the records of jaxpr_io/families/libraries/codecs.py, so the
  # modules come back as themselves where Equinox can be imported.
  return Case(fn, (params, _arange(3)))


def _optax_state():
  import optax  # pylint: disable=g-import-not-at-top
  opt = optax.adamw(1e-2)
  params = {"w": _arange(2, 3), "b": _arange(3)}
  state = opt.init(params)
  def step(params, state, grads):
    updates, state = opt.update(grads, state, params)
    return optax.apply_updates(params, updates), state
  grads = jax.tree_util.tree_map(lambda p: p * 0.5 + 0.1, params)
  return Case(step, (params, state, grads))


CASES = {
    "namedtuple": _namedtuple,
    "dataclass": _dataclass,
    "pytree_node_class": _pytree_node_class,
    "int_keys": _int_keys,
    "flax_frozen_dict": _flax_frozen_dict,
    "nnx_state": _nnx_state,
    "equinox_module": _equinox_module,
    "optax_state": _optax_state,
}


@functools.cache
def case(name: str) -> tuple[Case, jaxpr_io.Program, bytes]:
  if name in ("flax_frozen_dict", "nnx_state"):
    pytest.importorskip("flax")
  if name == "equinox_module":
    pytest.importorskip("equinox")
  if name == "optax_state":
    pytest.importorskip("optax")
  c = CASES[name]()
  prog = jaxpr_io.trace(c.fn, *c.args)
  return c, prog, jaxpr_io.dumps(prog)


def _call_paths(treedef) -> list[tuple]:
  tree = treedef.unflatten([0] * treedef.num_leaves)
  return [tree_calls.call_path(p)
          for p, _ in jax.tree_util.tree_flatten_with_path(tree)[0]]


# ------------------------------------------------------ in this process
@pytest.mark.parametrize("name", list(CASES))
def test_saves_without_registration_and_takes_the_original_objects(name):
  c, prog, data = case(name)
  loaded = assert_roundtrip(prog)
  if c.rebinds:
    assert loaded.in_tree == prog.in_tree
    assert loaded.out_tree == prog.out_tree
  else:
    assert loaded.in_tree != prog.in_tree
    assert _call_paths(loaded.in_tree) == _call_paths(prog.in_tree)
  out = loaded(*c.args)
  assert_bit_identical(out, prog(*c.args))
  assert_bit_identical(out, c.fn(*c.args))
  if c.rebinds:  # the outputs come back as the original types, too
    assert (jax.tree_util.tree_structure(out) ==
            jax.tree_util.tree_structure(c.fn(*c.args)))
  # Re-saving the loaded program writes the same file.
  assert jaxpr_io.dumps(loaded) == data


def test_equinox_module_loads_as_plain_containers_in_stored_order(
    monkeypatch):
  _, prog, data = case("equinox_module")
  find_class = libraries.find_class

  def without_equinox(module, qualname):
    if module.partition(".")[0] == "equinox":
      return None, "equinox cannot be imported (this test)"
    return find_class(module, qualname)
  monkeypatch.setattr(libraries, "find_class", without_equinox)
  loaded = jaxpr_io.loads(data)
  params, _ = loaded.in_tree.children()[0].children()
  # MLP(layers, activation, final_activation): fields in declaration order,
  # which JAX's dict order would change: an OrderedDict keeps it.
  assert params.node_data() == (
      collections.OrderedDict, ["layers", "activation", "final_activation"])
  text = loaded.signature()
  assert "args[0]['layers'][0]['weight']: float32[4,3]" in text
  assert "equinox.nn._mlp.MLP (equinox cannot be imported (this test))" in text
  # The leaves keep the program's input order.
  assert ([a.str_short() for a in loaded.in_avals] ==
          [a.str_short() for a in prog.in_avals])


def test_plain_containers_work_where_the_types_are_loaded():
  c, _, data = case("flax_frozen_dict")
  loaded = jaxpr_io.loads(data)
  params, x = c.args
  plain = {"params": dict(params["params"])}
  assert_bit_identical(loaded(plain, x), loaded(params, x))
  # Transformations see the caller's structure.
  def loss(p, x):
    return loaded(p, x).sum()
  grads = jax.jit(jax.grad(loss))(plain, x)
  assert type(grads) is dict
  assert_bit_identical(grads, jax.grad(loss)(params, x))
  c, _, data = case("namedtuple")
  loaded = jaxpr_io.loads(data)
  p, x = c.args
  out = loaded({"b": p.b, "w": p.w}, x)
  assert type(out[0]) is Pair  # outputs follow the loaded out_tree
  assert_bit_identical(out, c.fn(p, x))


def test_wrong_structure_lists_the_expected_key_paths():
  c, _, data = case("optax_state")
  loaded = jaxpr_io.loads(data)
  params, state, grads = c.args
  with pytest.raises(TypeError, match="structure") as info:
    loaded(params, params, grads)
  message = str(info.value)
  assert "args[1][0].mu['w']" in message  # expected
  assert "the call lacks args[1][0]['count']" in message
  with pytest.raises(TypeError, match=r"args\[0\]\['b'\]"):
    loaded({"b": params["b"]}, state, grads)


def test_signature_shows_key_paths_shapes_and_dtypes():
  _, _, data = case("optax_state")
  text = jaxpr_io.loads(data).signature()
  assert "args[0]['w']: float32[2,3]" in text
  assert "args[1][0].count: int32[]" in text
  assert "[1][0].nu['b']: float32[3]" in text  # an output
  assert "plain containers" not in text  # every type re-bound here


def test_local_types_load_as_plain_containers():
  class Local(NamedTuple):  # `<locals>` in its qualname: never re-bound
    z: Any
    a: Any
  prog = jaxpr_io.trace(lambda t: t.z * t.a, Local(_arange(2), _arange(2)))
  loaded = assert_roundtrip(prog)
  assert loaded.in_tree.children()[0].children()[0].node_data() == (
      collections.OrderedDict, ["z", "a"])
  assert "<locals>.Local (" in loaded.signature()
  args = (Local(_arange(2), _arange(2) + 1),)
  assert_bit_identical(loaded(*args), prog(*args))
  assert_bit_identical(loaded({"a": args[0].a, "z": args[0].z}), prog(*args))


# ---------------------------------------------------------- hostile files
def _with_in_tree_node(prog, mutate) -> bytes:
  """The file of `prog` with `mutate(node)` applied to the PyTree message of
  its first argument."""
  program, layout = writer.write(prog.closed_jaxpr, prog.in_tree,
                                 prog.out_tree, {})
  msg = pb.Program.FromString(program)
  proto_edit.inline_trees(msg)
  mutate(msg, msg.in_tree.children[0].children[0])
  return container.to_bytes(msg.SerializeToString(deterministic=True), layout)


def _intern(msg, text: str) -> int:
  msg.strings.append(text)
  return len(msg.strings) - 1


def test_loading_never_imports_a_named_module():
  _, prog, _ = case("namedtuple")
  assert "antigravity" not in sys.modules  # importing it opens a browser
  def mutate(msg, node):
    node.type_module = _intern(msg, "antigravity")
  loaded = jaxpr_io.loads(_with_in_tree_node(prog, mutate))
  assert "antigravity" not in sys.modules
  assert "module antigravity is not imported" in loaded.signature()
  # Pair(w, b): an OrderedDict keeps the field order.
  assert loaded.in_tree.children()[0].children()[0].node_data() == (
      collections.OrderedDict, ["w", "b"])


@pytest.mark.parametrize("module, qualname, reason", [
    ("collections", "Counter", "not a registered pytree node type"),
    ("collections", "abc.Mapping", "has no class"),   # a module, not a class
    ("tests.pytree.test_pytrees", "Pair.__init__", "has no class"),
    ("tests.pytree.test_pytrees", "Scaled", "other keys than the file says"),
])
def test_unusable_types_load_as_plain_containers(module, qualname, reason):
  c, prog, _ = case("namedtuple")
  def mutate(msg, node):
    node.type_module = _intern(msg, module)
    node.type_qualname = _intern(msg, qualname)
  loaded = jaxpr_io.loads(_with_in_tree_node(prog, mutate))
  assert reason in loaded.signature()
  assert_bit_identical(loaded(*c.args), prog(*c.args))


def _drop_last_key(msg, node):
  del msg
  del node.child_keys[-1]


@pytest.mark.parametrize("mutation, match", [
    (_drop_last_key, "2 children but 1 child keys"),
    (lambda m, n: setattr(n, "type_module", _intern(m, "")),
     "does not name its type"),
    (lambda m, n: n.child_keys[0].ClearField("kind"), "no known kind"),
    (lambda m, n: setattr(n.child_keys[0], "sequence_index", -1),
     "negative child index"),
    (lambda m, n: setattr(n, "type_module", 10**6), "string index"),
    (lambda m, n: setattr(m.in_tree, "type_qualname", 1),
     "tuple node has fields of a GENERIC node"),
])
def test_bad_generic_nodes_raise_format_error(mutation, match):
  _, prog, _ = case("namedtuple")
  with pytest.raises(jaxpr_io.FormatError, match=match):
    jaxpr_io.loads(_with_in_tree_node(prog, mutation))


# ------------------------------------------------- in a fresh process
_FRESH_PROCESS = textwrap.dedent("""
    import collections, json, sys, types
    LIBRARIES = {libraries!r}
    # Equinox cannot be imported here: its modules load as plain
    # containers (the library table would import it otherwise), and the
    # records of its auxdata are kept as they were read.
    sys.modules["equinox"] = None
    import numpy as np
    import jax
    import jaxpr_io
    from jaxpr_io.pytree import calls as tree_calls

    def node_types(treedef):
      node_data = treedef.node_data()
      if node_data is None:
        return set()
      found = {{node_data[0]}}
      for child in treedef.children():
        found |= node_types(child)
      return found

    def nested_dicts(paths, leaves):
      # The arguments as nested dicts only, from the call paths.
      root = {{}}
      for path, leaf in zip(paths, leaves):
        node = root
        for key in path[:-1]:
          node = node.setdefault(key, {{}})
        node[path[-1]] = leaf
      args = root.get(0, {{}})
      return tuple(args[i] for i in range(len(args))), root.get(1, {{}})

    def bits(x):
      x = np.asarray(x)
      return str(x.dtype), x.shape, x.tobytes()

    # Warm-up with a plain file: JAX imports its lowering modules on first
    # use, which check=True makes.
    jaxpr_io.loads(open(sys.argv[2], "rb").read(), check=True)
    for name in sys.argv[3:]:
      base = sys.argv[1] + "/" + name
      data = open(base + ".jaxpr", "rb").read()
      spec = json.load(open(base + ".json"))
      before = set(sys.modules)
      prog = jaxpr_io.loads(data, check=True)
      assert set(sys.modules) == before, (name, set(sys.modules) - before)
      plain = {{tuple, list, dict, collections.OrderedDict, type(None)}}
      assert node_types(prog.in_tree) <= plain, (name, prog.in_tree)
      assert node_types(prog.out_tree) <= plain, (name, prog.out_tree)
      pairs = jax.tree_util.tree_flatten_with_path(
          prog.in_tree.unflatten([0] * prog.in_tree.num_leaves))[0]
      paths = [tree_calls.call_path(p) for p, _ in pairs]
      assert paths == [tuple(p) for p in spec["call_paths"]], name
      if spec["same_keystr"]:
        assert ([jax.tree_util.keystr(p) for p, _ in pairs] ==
                spec["keystrs"]), name
      inputs = np.load(base + ".in.npz")
      leaves = [inputs["".join(f"[{{k!r}}]" for k in p)] for p in paths]
      outputs = np.load(base + ".out.npz")
      expected = [bits(outputs[str(i)]) for i in range(len(outputs.files))]
      args, kwargs = jax.tree_util.tree_unflatten(prog.in_tree, leaves)
      out = prog(*args, **kwargs)
      assert [bits(x) for x in jax.tree_util.tree_leaves(out)] == expected
      args, kwargs = nested_dicts(paths, leaves)
      out = prog(*args, **kwargs)
      assert [bits(x) for x in jax.tree_util.tree_leaves(out)] == expected
      assert jaxpr_io.dumps(prog) == data, name  # re-saved: the same file
      prog.signature()
      print(name, "ok")
    loaded = sorted(m for m in sys.modules if m.split(".")[0] in LIBRARIES
                    and sys.modules[m] is not None)
    assert not loaded, loaded
    print("all ok")
""")


def test_fresh_process_without_the_libraries(tmp_path):
  names = list(CASES)
  for name in names:
    c, prog, data = case(name)
    base = tmp_path / name
    base.with_suffix(".jaxpr").write_bytes(data)
    pairs = jax.tree_util.tree_flatten_with_path((c.args, {}))[0]
    assert jax.tree_util.tree_structure((c.args, {})) == prog.in_tree
    # Each input under its call path, as text.
    np.savez(f"{base}.in.npz", **{
        "".join(f"[{k!r}]" for k in tree_calls.call_path(p)): np.asarray(v)
        for p, v in pairs})
    out = jax.tree_util.tree_leaves(prog(*c.args))
    np.savez(f"{base}.out.npz", **{str(i): np.asarray(v)
                                    for i, v in enumerate(out)})
    (tmp_path / f"{name}.json").write_text(json.dumps({
        "call_paths": [tree_calls.call_path(p) for p, _ in pairs],
        "keystrs": [jax.tree_util.keystr(p) for p, _ in pairs],
        "same_keystr": c.same_keystr}))
  plain = tmp_path / "plain.jaxpr"
  plain.write_bytes(jaxpr_io.dumps(jaxpr_io.trace(lambda x: x + 1, F32(1))))
  env = dict(os.environ, PYTHONPATH=ROOT, JAX_PLATFORMS="cpu")
  result = subprocess.run(
      [sys.executable, "-c", _FRESH_PROCESS.format(libraries=LIBRARIES),
       str(tmp_path), str(plain), *names],
      cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
      check=False)
  assert result.returncode == 0, result.stdout + result.stderr
  assert result.stdout.splitlines() == [f"{n} ok" for n in names] + [
      "all ok"], result.stdout


def test_same_type_with_other_static_data_is_refused():
  c, _, data = case("dataclass")
  loaded = jaxpr_io.loads(data)
  (s,) = c.args
  with pytest.raises(TypeError, match=r"Scaled at args\[0\] whose static "
                     r"data .* is \(3, 'half'\).*\(4, 'half'\)"):
    loaded(Scaled(s.y, s.x, 4, "half"))
  # Plain containers carry no static data: they are taken by key path.
  assert_bit_identical(loaded({"x": s.x, "y": s.y}), c.fn(s))


# ------------------------------------- the fast reader of plain signatures
def _both_readers(data: bytes, msg):
  """(fast treedef or None, validating reader's treedef or its FormatError)
  of `msg.in_tree`, `msg` being an edited `Program` message of `data`."""
  from jaxpr_io.read import reader as reader_lib  # pylint: disable=import-outside-toplevel
  c = container.Container(data)
  fast = tree_read._plain_fast(  # pylint: disable=protected-access
      reader_lib.Reader(msg, c, verify_blobs=False), msg.in_tree)
  r = reader_lib.Reader(msg, c, verify_blobs=False)
  try:
    slow = tree_read._treedef_of(  # pylint: disable=protected-access
        tree_read._read(r, msg.in_tree, 0, r.tree_memo))  # pylint: disable=protected-access
  except jaxpr_io.FormatError as e:
    slow = e
  return (None if fast is None else fast[0]), slow


def _plain_signature_file(args) -> tuple[bytes, Any]:
  prog = jaxpr_io.trace(lambda *a: sum(jax.tree_util.tree_leaves(a)), *args)
  data = jaxpr_io.dumps(prog)
  return data, prog.in_tree


_X = np.float32(1)
_PLAIN_SIGNATURES = {
    "layers": ({f"layers_{i}": {"w": _X, "b": _X} for i in range(12)}, _X),
    "mixed": ([_X, None, (_X,)], {"a": [_X, _X], "b": (None, _X)}),
    "empty": ((), {}, [], {"e": {}, "f": ((),)}, _X),
}


@pytest.mark.parametrize("name", sorted(_PLAIN_SIGNATURES))
def test_fast_signature_reader_agrees_with_the_validating_reader(name):
  data, in_tree = _plain_signature_file(_PLAIN_SIGNATURES[name])
  fast, slow = _both_readers(data, proto_edit.message(data))
  assert fast is not None  # the fast path took it
  assert fast == slow == in_tree


def _tuple_of(msg, depth: int):
  """`msg.in_tree` wrapped in `depth` one-child tuples."""
  for _ in range(depth):
    inner = pb.PyTree()
    inner.CopyFrom(msg.in_tree)
    msg.in_tree.Clear()
    msg.in_tree.kind = pb.PyTreeKind["TUPLE"]
    msg.in_tree.children.add().CopyFrom(inner)


def _reused_deep(msg, depth: int):
  """`msg.in_tree` (a shared node) read first at depth 1, then again inside
  `depth` one-child tuples: only the depth of its reuse is too deep."""
  ref = pb.PyTree()
  ref.CopyFrom(msg.in_tree)
  _tuple_of(msg, depth)
  inner = pb.PyTree()
  inner.CopyFrom(msg.in_tree)
  msg.in_tree.Clear()
  msg.in_tree.kind = pb.PyTreeKind["TUPLE"]
  msg.in_tree.children.add().CopyFrom(ref)
  msg.in_tree.children.add().CopyFrom(inner)


def _first_dict(tree):
  if tree.kind == pb.PyTreeKind["DICT"] and len(tree.keys) >= 2:
    return tree
  for child in tree.children:
    found = _first_dict(child)
    if found is not None:
      return found
  return None


def _inlined(msg, edit):
  proto_edit.inline_trees(msg)
  edit()


def _set_second_key(msg, index_of):
  proto_edit.inline_trees(msg)
  node = _first_dict(msg.in_tree)
  node.keys[1].str = index_of(msg, node)


@pytest.mark.parametrize("edit, slow_accepts", [
    # What the fast path leaves to the validating reader, valid or not.
    (lambda m: _set_second_key(m, lambda msg, node: node.keys[0].str), False),
    (lambda m: _set_second_key(m, lambda msg, node: len(msg.strings) + 5),
     False),
    (lambda m: setattr(m.in_tree, "shared", len(m.tree_nodes) + 1), False),
    (lambda m: setattr(m.tree_nodes[0], "shared", 1), False),
    (lambda m: _inlined(m, lambda: setattr(m.in_tree, "type_qualname", 1)),
     False),
    (lambda m: _inlined(m, lambda: setattr(m.in_tree, "custom_name", "x")),
     True),
    (lambda m: _tuple_of(m, tree_nodes.MAX_DEPTH), False),
    (lambda m: _tuple_of(m, tree_nodes.MAX_DEPTH - 4), True),
    (lambda m: _reused_deep(m, tree_nodes.MAX_DEPTH - 2), False),
    (lambda m: _reused_deep(m, tree_nodes.MAX_DEPTH - 5), True),
    (lambda m: _inlined(m, lambda: m.in_tree.children[0].children.add(
        kind=pb.PyTreeKind["LEAF"], children=[pb.PyTree()])), False),
])
def test_fast_signature_reader_leaves_the_rest_to_the_validating_reader(
    edit, slow_accepts):
  data, _ = _plain_signature_file(_PLAIN_SIGNATURES["layers"])
  msg = proto_edit.message(data)
  edit(msg)
  fast, slow = _both_readers(data, msg)
  assert isinstance(slow, jaxpr_io.FormatError) != slow_accepts, slow
  if fast is not None:
    assert fast == slow
  else:
    assert not slow_accepts or isinstance(slow, jax.tree_util.PyTreeDef)
  if not slow_accepts:
    assert fast is None
