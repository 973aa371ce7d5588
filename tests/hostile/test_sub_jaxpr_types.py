"""Sub-jaxprs that JAX's type checker does not look into (issue 28's fuzz
campaign): `check=True` checks them itself (jaxpr_io/safety/typecheck.py).
Before, each file below passed `check=True`, printed and compiled, and
then `jax.grad` or `jax.vmap` failed inside JAX when it re-traced the body.
Files are crafted at the protobuf level from real programs; the unmutated
programs pass the check and transform (the reference: JAX traced them)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io.format import _proto as pb
from tests import hostile as h

F32 = np.float32


def _scan_file() -> bytes:
  def f(x, n):
    def body(c, i):
      return c * i.astype(jnp.float32) + jnp.sin(c), None
    return jax.lax.scan(body, x, n)[0]
  return jaxpr_io.dumps(jaxpr_io.trace(f, np.ones(3, F32),
                                       np.arange(4, dtype=np.int32)))


def _remat_file() -> bytes:
  def f(x, y, z):
    return jax.checkpoint(lambda a, b: jnp.sin(a) * 2 + jnp.sum(b))(x, y) + z
  return jaxpr_io.dumps(jaxpr_io.trace(f, np.ones(3, F32),
                                       np.ones((2, 2), F32),
                                       np.ones((3, 3), F32)))


def _check_error(data: bytes) -> str:
  jaxpr_io.loads(data)   # a program: only check=True can tell
  with pytest.raises(jaxpr_io.FormatError) as info:
    jaxpr_io.loads(data, check=True)
  return str(info.value)


def test_unmutated_programs_check_and_transform():
  for data in (_scan_file(), _remat_file()):
    prog = jaxpr_io.loads(data, check=True)
    args = [np.ones(a.shape, a.dtype) for a in prog.in_avals]
    jax.make_jaxpr(jax.grad(lambda x, *r: jnp.sum(prog(x, *r))))(*args)
    jax.make_jaxpr(jax.vmap(prog))(*[np.stack([a, a]) for a in args])


def test_retyped_equation_in_a_scan_body_is_refused():
  # The body's `convert_element_type` made to convert to int32 while its
  # result stays float32: JAX's scan rule compares only the body's inputs
  # and outputs with the scan's.
  def mutate(msg):
    (eqn,) = h.eqns(msg, "convert_element_type")
    h.param(msg, eqn, "new_dtype").dtype.dtype = pb.DType["INT32"]
  message = _check_error(h.craft(_scan_file(), mutate))
  assert "param 'jaxpr' of equation" in message and "(scan)" in message
  assert "does not type-check" in message and "i32[]" in message


def test_remat_body_input_retyped_is_refused():
  # The checkpointed body's input b (f32[2,2]) retyped f32[3,3], which its
  # equations still take (it is only summed): remat's abstract evaluation
  # ignores its operands' types.
  def mutate(msg):
    root = h.root_jaxpr(msg)
    remat = next(j for j in msg.jaxprs if len(j.invars) == 2)
    remat.invars[1] = root.invars[2]
  data = h.craft(_remat_file(), mutate)
  message = _check_error(data)
  assert "(remat2)" in message or "(checkpoint)" in message
  assert "takes float32[3,3] as its input 1, but is given float32[2,2]" in message


def test_retyped_jvp_rule_body_is_refused():
  # Found by the fuzzer (seed 93, case 273): a shape in a custom_jvp
  # function's stored JVP rule grown by a dimension passed check=True (JAX
  # checks a rule only when jvp calls it) and failed grad.
  @jax.custom_jvp
  def f(x):
    return jnp.sin(x)

  @f.defjvp
  def f_jvp(primals, tangents):
    (x,), (t,) = primals, tangents
    return jnp.sin(x), jnp.sum(jnp.broadcast_to(jnp.cos(x), (4, 2, 3)),
                               axis=0) * t

  data = jaxpr_io.dumps(jaxpr_io.trace(f, np.ones((2, 3), F32)))
  jax.make_jaxpr(jax.grad(lambda x: jnp.sum(jaxpr_io.loads(
      data, check=True)(x))))(np.ones((2, 3), F32))

  def mutate(msg):
    (eqn,) = h.eqns(msg, "broadcast_in_dim")
    h.param(msg, eqn, "shape").ints.items.append(4)
  message = _check_error(h.craft(data, mutate))
  assert "param 'jvp_jaxpr_fun' of equation 0 (custom_jvp_call)" in message
  assert "does not type-check" in message


@pytest.mark.parametrize("name,value", [("num_carry", 2), ("num_consts", 2)])
def test_scan_counts_past_its_inputs_or_outputs_are_refused(name, value):
  # JAX's scan type check splits the body's inputs and outputs at
  # num_consts and num_carry without checking that they fit: num_carry 2
  # over a body of one carry passed check=True and failed under grad
  # (campaign seed 101, case 2908).
  def mutate(msg):
    (eqn,) = h.eqns(msg, "scan")
    h.set_value(msg, h.param(msg, eqn, name), value)
  # JAX 0.10's scan takes the counts (checked with its arity); 0.11+'s
  # adapter builds its operand trees from them.
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"equation 0 \(scan\): scan('s num_consts=\d+ and "
                     r"num_carry=\d+ do not fit its body| has 2 inputs and 1 "
                     rf"outputs, which do not hold .*{name}={value})"):
    jaxpr_io.loads(h.craft(_scan_file(), mutate))


@pytest.mark.parametrize("name", ["window_strides", "lhs_dilation"])
def test_conv_windows_of_the_wrong_length_are_refused(name):
  # JAX's shape rule reads a convolution's strides and dilations without
  # checking their lengths: an empty one passed check=True (with symbolic
  # shapes) and failed grad (fuzz campaign seed 103, case 46579).
  def f(x, w):
    return jax.lax.conv_general_dilated(x, w, (1, 1), "SAME")
  data = jaxpr_io.dumps(jaxpr_io.trace(f, np.ones((1, 2, 5, 5), F32),
                                       np.ones((3, 2, 3, 3), F32)))

  def mutate(msg):
    (eqn,) = h.eqns(msg, "conv_general_dilated")
    h.set_value(msg, h.param(msg, eqn, name), ())
  message = _check_error(h.craft(data, mutate))
  # JAX's own rule catches an empty window_strides at concrete shapes.
  assert (f"(conv_general_dilated): param {name!r} has 0 entries for a "
          "convolution of 2 spatial dimensions" in message
          or "window and window_strides must have the same number of "
          "dimensions, but got 2 and 0" in message), message


def test_a_custom_vjp_out_trees_count_is_checked_before_it_is_built():
  # The stored out_trees' output count sized a flat tree before anything
  # compared it with the equation: 2**54 + 1 was a MemoryError (fuzz
  # campaign seed 104, case 15970).
  @jax.custom_vjp
  def f(x):
    return jnp.sin(x)
  f.defvjp(lambda x: (jnp.sin(x), x), lambda x, g: (g * jnp.cos(x),))
  data = jaxpr_io.dumps(jaxpr_io.trace(f, np.ones(3, F32)))

  def mutate(msg):
    (eqn,) = h.eqns(msg, "custom_vjp_call")
    h.param(msg, eqn, "out_trees").param_codec.tuple.items[0].int = 2**54 + 1
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"out_trees has 18014398509481985 output leaves "
                     "for a custom_vjp function with 1 outputs"):
    jaxpr_io.loads(h.craft(data, mutate))
