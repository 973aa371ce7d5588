"""The library primitive table (jaxpr_io/codec/library_table.py): Equinox's
primitives are stored under stable names, and loading imports their module
from jaxpr_io's own table, never from a name in the file."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import equinox as eqx
import equinox.internal as eqxi
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from tests.support import proto_edit
from jaxpr_io.codec import library_table as libraries
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)

X = np.array([1.0, -2.0, 3.0], np.float32)


def _unvmap(x):
  # Under vmap, unvmap_any asks whether any batch element is positive.
  return jnp.where(eqxi.unvmap_any(x > 0), x * 2.0, -x)


def _strings(data: bytes) -> list[str]:
  return list(proto_edit.message(data).strings)


def test_every_entry_names_a_primitive_of_its_module():
  for entry in libraries.LIBRARY_PRIMITIVES:
    primitive = libraries.load(entry.name)
    assert isinstance(primitive, jaxpr_io.compat.Primitive), entry
    assert entry.name == f"{entry.package}.{primitive.name}"
    assert libraries.name_of(primitive) == entry.name


def test_equinox_primitive_round_trips_under_vmap():
  prog = jaxpr_io.trace(_unvmap, X)
  assert "equinox.unvmap_any" in _strings(jaxpr_io.dumps(prog))
  loaded = assert_roundtrip(prog)
  assert_bit_identical(loaded(X), _unvmap(X))
  batch = np.stack([X, -np.abs(X)])
  assert_same_outcome(jax.vmap, _unvmap, loaded, batch)


def test_equinox_bounded_while_loop_and_nondifferentiable():
  def f(x):
    def body(c):
      return c[0] + 1, c[1] * 0.9 + jnp.sin(c[1])
    y = eqxi.while_loop(lambda c: c[0] < 5, body, (0, x), max_steps=8,
                        kind="bounded")[1]
    return y + eqxi.nondifferentiable(x) * 0.0
  loaded = assert_roundtrip(jaxpr_io.trace(f, X))
  assert_same_outcome(lambda p: p, f, loaded, X)
  assert_same_outcome(jax.vmap, f, loaded, np.stack([X, X * 0.5]))
  # nondifferentiable's JVP rule raises on purpose: the loaded one too.
  with pytest.raises(RuntimeError) as want:
    jax.grad(lambda x: f(x).sum())(X)
  with pytest.raises(RuntimeError) as got:
    jax.grad(lambda x: loaded(x).sum())(X)
  assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


def test_loading_imports_the_library_from_the_table(tmp_path):
  path = tmp_path / "unvmap.jaxpr"
  jaxpr_io.save(path, jaxpr_io.trace(_unvmap, X))
  script = textwrap.dedent(f"""
      import json, sys
      import numpy as np
      import jaxpr_io
      assert "equinox" not in sys.modules
      prog = jaxpr_io.load({str(path)!r}, check=True)
      assert "equinox._unvmap" in sys.modules   # imported from the table
      print(json.dumps(np.asarray(prog(np.array({X.tolist()},
                                                 np.float32))).tolist()))
  """)
  out = subprocess.run([sys.executable, "-c", script], check=True,
                       capture_output=True, text=True, timeout=300)
  assert json.loads(out.stdout) == np.asarray(_unvmap(X)).tolist()


def test_missing_package_names_what_to_install(monkeypatch):
  fake = libraries.LibraryPrimitive("fakelib.prim", "jaxpr_io_no_such_module",
                                    "prim_p", "fakelib-package")
  monkeypatch.setitem(libraries._BY_NAME, fake.name, fake)  # pylint: disable=protected-access
  data = proto_edit.rename_string(jaxpr_io.dumps(jaxpr_io.trace(_unvmap, X)),
                  "equinox.unvmap_any", "fakelib.prim")
  with pytest.raises(jaxpr_io.FormatError,
                     match="pip install fakelib-package"):
    jaxpr_io.loads(data)


def test_a_file_cannot_name_a_module_to_import():
  data = proto_edit.rename_string(jaxpr_io.dumps(jaxpr_io.trace(_unvmap, X)),
                  "equinox.unvmap_any", "antigravity.unvmap_any")
  with pytest.raises(jaxpr_io.FormatError, match="antigravity.unvmap_any"):
    jaxpr_io.loads(data)
  assert "antigravity" not in sys.modules


def test_equinox_model_round_trips():
  model = eqx.nn.MLP(3, 2, 8, 2, key=jax.random.key(0))
  params, static = eqx.partition(model, eqx.is_array)

  def f(params, x):
    return eqx.combine(params, static)(x)
  loaded = assert_roundtrip(jaxpr_io.trace(f, params, X))
  assert_same_outcome(lambda p: jax.grad(lambda a, x: p(a, x).sum()),
                      f, loaded, params, X)


class Scaled(eqx.Module):
  """An Equinox module with a static field (in its auxdata, beside
  Equinox's `Missing` sentinel)."""
  weight: jax.Array
  mode: str = eqx.field(static=True)
  shape: tuple = eqx.field(static=True)


def _scaled(module, x):
  return module.weight * x if module.mode == "mul" else module.weight + x


def test_equinox_modules_come_back_as_their_own_type():
  module = Scaled(X, "mul", (3,))
  prog = jaxpr_io.trace(_scaled, module, X)
  data = jaxpr_io.dumps(prog)
  assert "equinox.Missing" in _strings(data)
  loaded = assert_roundtrip(prog)
  assert loaded.in_tree == prog.in_tree
  assert_bit_identical(loaded(module, X), _scaled(module, X))
  # Other static data than the program was traced with: refused.
  with pytest.raises(TypeError, match="static data"):
    loaded(Scaled(X, "add", (3,)), X)


def test_equinox_module_in_a_fresh_process_imports_equinox_from_the_table(
    tmp_path):
  layer = eqx.nn.Linear(3, 2, key=jax.random.key(0))
  path = tmp_path / "linear.jaxpr"
  jaxpr_io.save(path, jaxpr_io.trace(lambda m, x: m(x), layer, X))
  script = textwrap.dedent(f"""
      import sys
      import jaxpr_io
      assert "equinox" not in sys.modules
      prog = jaxpr_io.load({str(path)!r}, check=True)
      (args, _) = prog.in_tree.children()
      print(args.children()[0].node_data()[0].__qualname__)
      print(sys.modules[args.children()[0].node_data()[0].__module__]
            .__name__)
  """)
  out = subprocess.run([sys.executable, "-c", script], check=True,
                       capture_output=True, text=True, timeout=300)
  assert out.stdout.split() == ["Linear", "equinox.nn._linear"]


def test_lineax_solve_round_trips_with_its_modules():
  import lineax as lx  # pylint: disable=g-import-not-at-top
  a = np.array([[4.0, 1.0, 0.0], [1.0, 3.0, 0.5], [0.0, 0.5, 2.0]],
               np.float32)

  def f(a, b):
    return lx.linear_solve(lx.MatrixLinearOperator(a), b, lx.LU()).value
  prog = jaxpr_io.trace(f, a, X)
  assert "lineax.linear_solve" in _strings(jaxpr_io.dumps(prog))
  loaded = assert_roundtrip(prog)
  assert_same_outcome(lambda p: p, f, loaded, a, X)
  assert_same_outcome(lambda p: jax.grad(lambda a, b: p(a, b).sum()),
                      f, loaded, a, X)
  assert_same_outcome(lambda p: jax.vmap(p, in_axes=(None, 0)), f, loaded, a,
                      np.stack([X, X * 2]))


class Config(eqx.Module):
  """Static fields of the kinds Lineax and Optimistix keep: lists of
  `ShapeDtypeStruct`s, library functions, partials of them."""
  weight: jax.Array
  structs: list = eqx.field(static=True)
  fn: object = eqx.field(static=True)


def _configured(config, x):
  return config.weight * x + len(config.structs)


def test_static_fields_of_library_values_are_stored():
  import functools  # pylint: disable=g-import-not-at-top
  structs = [jax.ShapeDtypeStruct((3,), np.float32),
             jax.ShapeDtypeStruct((2, 1), np.int32, weak_type=True)]
  config = Config(X, structs, eqx.is_array)
  prog = jaxpr_io.trace(_configured, config, X)
  strings = _strings(jaxpr_io.dumps(prog))
  assert "jax.ShapeDtypeStruct" in strings and "builtins.list" in strings
  assert "library.function" in strings
  loaded = assert_roundtrip(prog)
  assert loaded.in_tree == prog.in_tree  # the same list, structs, function
  assert_bit_identical(loaded(config, X), _configured(config, X))
  # A partial of a library function comes back as an equal partial (a new
  # object: partials compare by identity).
  config = Config(X, structs, functools.partial(eqx.is_array_like))
  loaded = assert_roundtrip(jaxpr_io.trace(_configured, config, X))
  args, _ = loaded.in_tree.children()
  _, (_, _, fn) = args.children()[0].node_data()
  assert type(fn) is functools.partial and fn.func is eqx.is_array_like
  # A function of the user's is not a library function: the module is
  # stored without its auxdata and loads as a plain container.
  local = Config(X, structs, lambda v: v)
  loaded = assert_roundtrip(jaxpr_io.trace(_configured, local, X))
  assert "Config (its auxdata is not plain data" in loaded.signature()


def test_a_file_names_only_the_library_functions_of_the_table():
  # Optimistix's static data holds library functions (its norm, its
  # rewritten objective); a crafted file naming another function of a table
  # package (one that writes files) is refused before anything calls it.
  from tests.support.zoo2 import ZOO2  # pylint: disable=g-import-not-at-top
  fn, args, kwargs = ZOO2["optimistix_bfgs"]()
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, *args, **kwargs))
  assert libraries.find_function("optimistix._misc", "max_norm")[0]
  bad = proto_edit.rename_string(
      proto_edit.rename_string(data, "optimistix._misc", "equinox"),
      "max_norm", "tree_serialise_leaves")
  with pytest.raises(jaxpr_io.FormatError,
                     match="equinox.tree_serialise_leaves is not in .*"
                     "LIBRARY_FUNCTIONS"):
    jaxpr_io.loads(bad)
