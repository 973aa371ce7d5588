"""The library primitive table (jaxpr_io/libraries.py): Equinox's
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
from tests import proto_edit
from jaxpr_io import libraries
from tests.roundtrip import (assert_bit_identical, assert_roundtrip,
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
