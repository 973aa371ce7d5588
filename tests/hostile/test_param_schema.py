"""Every traced primitive's params are checked against the declared param
schema (jaxpr_io/format/param_schema.json, issue 28): an unknown param, a
missing one, or a value of a kind the param never holds is a FormatError at
load, naming the equation, the primitive and the param; before the schema,
such files passed `check=True`, printing, `jit` and `dumps`, and then
`vmap` raised AttributeError and `grad` TypeError inside JAX.

Files are crafted at the protobuf level from real programs. The reference
for what is accepted is JAX itself: the params that JAX's own traces hold
(`test_traced_params_fit_the_schema`, on this release's programs), and the
golden files of every format version (tests/format/test_golden.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import compat
from jaxpr_io.codec import registry
from jaxpr_io.format import param_schema
from jaxpr_io.safety import validate
from tests import hostile as h

F32 = np.float32


def _reduce_sum_file() -> bytes:
  x = np.arange(6, dtype=F32).reshape(2, 3)
  return jaxpr_io.dumps(jaxpr_io.trace(lambda x: jnp.sum(x, axis=1) * 2, x))


def _broadcast_file() -> bytes:
  x = np.arange(3, dtype=F32)
  return jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: jnp.sin(x) + jnp.broadcast_to(x, (2, 3)), x))


def _first(msg, primitive):
  """(equation index in the root jaxpr, the equation) of `primitive`."""
  root = h.proto_edit.equations(msg, msg.closed_jaxprs[msg.root].jaxpr)
  index = list(msg.strings).index(primitive)
  i = next(i for i, e in enumerate(root) if e.primitive == index)
  return i, root[i]


def _load_error(data: bytes, check: bool = False) -> str:
  with pytest.raises(jaxpr_io.FormatError) as info:
    jaxpr_io.loads(data, check=check)
  return str(info.value)


def test_unknown_param_of_reduce_sum_is_refused():
  data = _reduce_sum_file()
  where = {}

  def mutate(msg):
    where["i"], eqn = _first(msg, "reduce_sum")
    h.param(msg, eqn, "unrolled", add=True).int = 3
  bad = h.craft(data, mutate)
  message = _load_error(bad)
  assert f"equation {where['i']} (reduce_sum)" in message
  assert "'unrolled'" in message and "not a param of 'reduce_sum'" in message
  assert _load_error(bad, check=True) == message


def test_sharding_param_set_to_an_int_is_refused():
  data = _broadcast_file()
  where = {}

  def mutate(msg):
    where["i"], eqn = _first(msg, "broadcast_in_dim")
    value = h.param(msg, eqn, "sharding")
    value.Clear()
    value.int = 3
  message = _load_error(h.craft(data, mutate))
  assert f"equation {where['i']} (broadcast_in_dim)" in message
  assert "param 'sharding'" in message and "int+" in message


def _reduce_sum_axes_error(set_axes) -> str:
  """The load error of the reduce_sum file whose `axes` value, cleared,
  `set_axes(msg, value)` rewrites."""
  def mutate(msg):
    _, eqn = _first(msg, "reduce_sum")
    value = h.param(msg, eqn, "axes")
    value.Clear()
    set_axes(msg, value)
  return _load_error(h.craft(_reduce_sum_file(), mutate))


def test_param_value_of_another_type_is_refused():
  message = _reduce_sum_axes_error(
      lambda msg, value: setattr(value, "str", h.intern(msg, "1")))
  assert "param 'axes' of 'reduce_sum'" in message and "str" in message


def test_negative_axes_are_out_of_range():
  # JAX binds reduce_sum with canonical, non-negative axes only.
  message = _reduce_sum_axes_error(
      lambda msg, value: value.ints.items.append(-1))
  assert "param 'axes' of 'reduce_sum'" in message and "tuple/int-" in message


def test_missing_param_is_refused():
  data = _reduce_sum_file()

  def mutate(msg):
    _, eqn = _first(msg, "reduce_sum")
    params = h.private_params(msg, eqn)
    keep = [p for p in params if msg.strings[p.name] != "axes"]
    del params[:]
    for p in keep:
      params.add().CopyFrom(p)
  message = _load_error(h.craft(data, mutate))
  assert "'reduce_sum' lacks its param(s) axes" in message


def test_unmutated_files_load_and_transform():
  for data in (_reduce_sum_file(), _broadcast_file()):
    prog = jaxpr_io.loads(data, check=True)
    shape = prog.in_avals[0].shape
    jax.make_jaxpr(jax.vmap(prog))(np.ones((2, *shape), F32))
    jax.make_jaxpr(jax.grad(lambda x: jnp.sum(prog(x))))(np.ones(shape, F32))


def _format_params(closed):
  """(vocabulary name, format params) of every equation, sub-jaxprs too."""
  stack = [closed]
  while stack:
    j = stack.pop()
    j = compat.open_jaxpr(j) if compat.is_closed_jaxpr(j) else j
    for eqn in j.eqns:
      name = registry.PRIMITIVES.name_of(eqn.primitive) or eqn.primitive.name
      fmt_name, params = compat.ADAPTER.to_format(name, eqn.params)
      yield fmt_name, params
      for value in params.values():
        for item in value if type(value) is tuple else (value,):
          if compat.is_jaxpr(item):
            stack.append(item)


def test_traced_params_fit_the_schema():
  """JAX's own traces on this release (the test programs) fit the schema
  that was generated from every supported release's traces."""
  from tests.support import programs  # pylint: disable=import-outside-toplevel
  seen = 0
  for fn, args, kwargs in programs.PROGRAMS.values():
    for name, params in _format_params(jax.make_jaxpr(fn)(*args, **kwargs)):
      validate.check_param_schema(name, params)
      seen += name in param_schema.table()
  assert seen > 20


@pytest.mark.once
def test_schema_names_only_vocabulary_primitives_and_is_not_empty():
  table = param_schema.table()
  assert len(table) > 100
  assert {"0.10.2", "0.12.0.1"} <= set(param_schema.releases())
  vocabulary = open(h.os.path.join(h.REPO, "schema", "VOCABULARY.md")).read()
  assert not [n for n in table if f"| `{n}` |" not in vocabulary]
  # Required params are declared params.
  assert all(s.required <= set(s.params) for s in table.values())
  # A trace of defaults cannot show what a sharding param holds: WIDENED
  # adds shardings, never a plain int.
  sharding = table["broadcast_in_dim"].params["sharding"]
  assert "sharding" in sharding and not any(k.startswith("int")
                                            for k in sharding)



def test_a_set_of_the_wrong_items_is_refused():
  # Found by the fuzzer (issue 28): a sharding constraint's unconstrained
  # dimensions holding axis names passed check=True; vmap then compared
  # them with ints inside JAX. A set's items have kinds, as a tuple's.
  mesh = jax.sharding.Mesh(np.array(jax.devices()[:1]), ("x",))
  spec = jax.sharding.PartitionSpec(None, jax.sharding.PartitionSpec.UNCONSTRAINED)
  sharding = jax.sharding.NamedSharding(mesh, spec)
  x = np.arange(8, dtype=F32).reshape(2, 4)
  data = jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: jax.lax.with_sharding_constraint(x * 2, sharding), x))
  assert jaxpr_io.loads(data).closed_jaxpr.jaxpr.eqns[1].params[
      "unconstrained_dims"] == frozenset({1})

  def mutate(msg):
    _, eqn = _first(msg, "sharding_constraint")
    h.set_value(msg, h.param(msg, eqn, "unconstrained_dims"), frozenset({"x"}))
  message = _load_error(h.craft(data, mutate))
  assert "param 'unconstrained_dims' of 'sharding_constraint'" in message
  assert "frozenset/str" in message


def test_an_array_in_axes_is_refused():
  # JAX binds numpy integer scalars in axes where a caller passed them
  # (kind int+, as an int); a file that makes one an array is refused.
  x = np.arange(6, dtype=F32).reshape(2, 3)
  data = jaxpr_io.dumps(jaxpr_io.trace(
      lambda x: jax.lax.reduce_sum_p.bind(x, axes=(np.int64(1),),
                                          out_sharding=None), x))
  assert jaxpr_io.loads(data, check=True)(x).tolist() == [3.0, 12.0]

  def mutate(msg):
    (array,) = [a for a in msg.arrays
                if a.kind == h.pb.HostKind["NUMPY_SCALAR"]]
    array.kind = h.pb.HostKind["NUMPY_ARRAY"]
  message = _load_error(h.craft(data, mutate))
  assert "param 'axes' of 'reduce_sum'" in message and "tuple/array" in message


# (primitive, the param a file adds, the rule lacking it, the program):
# neg's lowering names an optional `accuracy` (the schema has it: a
# release's definitions), its transpose rule takes no params; sub's JVP
# rule is registered directly, `_sub_jvp(primals, tangents)`, and JAX calls
# every JVP rule as `jvp(primals, tangents, **params)`, so a file's mul
# turned into sub that kept mul's `out_dtype` (fuzz seed 0 case 46522) is
# refused alike. Each file binds, runs, and failed jax.grad inside JAX.
_PARAMS_A_RULE_LACKS = [
    ("neg", "accuracy", "transpose", lambda x: jnp.sum(-jnp.sin(x))),
    ("sub", "out_dtype", "JVP", lambda x: jnp.sum(jnp.sin(x) - x)),
]


@pytest.mark.parametrize("primitive,param,role,fn", _PARAMS_A_RULE_LACKS,
                         ids=[c[0] for c in _PARAMS_A_RULE_LACKS])
def test_a_param_a_transformation_rule_lacks_is_refused_by_check(
    primitive, param, role, fn):
  x = np.linspace(0.5, 1.5, 4).astype(F32)
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, x))
  where = {}

  def mutate(msg):
    where["i"], eqn = _first(msg, primitive)
    h.param(msg, eqn, param, add=True).none.SetInParent()
  bad = h.craft(data, mutate)
  loaded = jaxpr_io.loads(bad)   # the schema allows it: it runs
  assert loaded.closed_jaxpr.jaxpr.eqns[where["i"]].params == {param: None}
  np.testing.assert_array_equal(loaded(x), jax.jit(fn)(x))
  with pytest.raises(TypeError, match=param):
    jax.grad(loaded)(x)
  message = _load_error(bad, check=True)
  assert (f"equation {where['i']} ({primitive}): param '{param}' is not one "
          f"that this JAX release's {role} rule for {primitive} "
          "takes") in message
  # The unmutated file: check=True, and grad as the original's.
  np.testing.assert_array_equal(
      jax.grad(jaxpr_io.loads(data, check=True))(x), jax.grad(fn)(x))


def test_a_param_a_transformation_rule_requires_must_be_there():
  # tanh's JVP rule is `lambda g, ans, x, accuracy: ...` on 0.12 (a
  # required param it is passed by name); the schema, merged over the
  # releases, does not require it. A file's tanh without it ran and failed
  # jax.grad (fuzz case 4901). Where this release's rule has no such
  # parameter, the file is a valid program and must load.
  from jaxpr_io.compat import rule_params  # pylint: disable=g-import-not-at-top
  x = np.linspace(0.5, 1.5, 4).astype(F32)
  fn = lambda x: jnp.sum(jnp.tanh(x))
  data = jaxpr_io.dumps(jaxpr_io.trace(fn, x))

  def mutate(msg):
    _, eqn = _first(msg, "tanh")
    del h.private_params(msg, eqn)[:]
  bad = h.craft(data, mutate)
  loaded = jaxpr_io.loads(bad)
  tanh = registry.PRIMITIVES.all()["tanh"]
  required = [n for r in rule_params.transform_rule_keywords(tanh)
              for n in r.required(1)]
  if "accuracy" not in required:
    np.testing.assert_array_equal(jax.grad(jaxpr_io.loads(bad, check=True))(
        x), jax.grad(fn)(x))
    return
  with pytest.raises(TypeError, match="accuracy"):
    jax.grad(loaded)(x)
  assert ("(tanh): param 'accuracy' is missing, and this JAX release's "
          "JVP rule for tanh requires it") in _load_error(bad, check=True)
