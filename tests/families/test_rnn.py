"""cuDNN's LSTM (`jax.experimental.rnn`: `rnn_fwd`, `rnn_bwd`) is stored,
and loads from trusted files only.

Its abstract evaluation asks jaxlib's CUDA plugin for the size of cuDNN's
reserve space, so without the plugin (this machine) no program using it can
be traced. The tests trace JAX's own `rnn.lstm` and its gradient with that
one plugin function standing in (it only sizes the reserve-space output),
then round-trip the programs with the plugin function gone again: loading
never evaluates the primitive, so it needs no GPU.

The lowering builds cuDNN's descriptor from the params and sizes its buffers
from the avals, and nothing checks the two against each other: an untrusted
file may not hold these equations (jaxpr_io/safety/trust.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax.experimental import rnn
from jaxlib import gpu_rnn

import jaxpr_io
from jaxpr_io.safety import trust
from jaxpr_io.safety import validate

_SIZES = "compute_rnn_workspace_reserve_space_sizes"
BATCH, TIME, IN, HIDDEN, LAYERS = 2, 3, 4, 5, 1
X = jnp.linspace(-1.0, 1.0, BATCH * TIME * IN).reshape(BATCH, TIME, IN)
H0 = jnp.zeros((LAYERS, BATCH, HIDDEN))
C0 = jnp.full((LAYERS, BATCH, HIDDEN), 0.5)
W = jnp.linspace(-0.3, 0.3, rnn.get_num_params_in_lstm(IN, HIDDEN, LAYERS,
                                                       False))
LENGTHS = jnp.array([3, 2], jnp.int32)


def _loss(x, h0, c0, w):
  y, h, c = rnn.lstm(x, h0, c0, w, LENGTHS, IN, HIDDEN, LAYERS, 0.0, False)
  return (y ** 2).sum() + h.sum() + c.sum()


def _primitives(prog) -> set[str]:
  return {e.primitive.name for j in validate.walk_jaxprs(
      prog.closed_jaxpr.jaxpr) for e in j.eqns}


@pytest.fixture
def traced(monkeypatch):
  """{name: Program} of the LSTM and its gradient, traced with cuDNN's
  size query standing in for the CUDA plugin's (a workspace and a reserve
  space of 96 floats); the stand-in is gone when the test body runs."""
  if hasattr(gpu_rnn, _SIZES):
    pytest.skip("this jaxlib has the CUDA plugin: nothing stands in")
  monkeypatch.setattr(gpu_rnn, _SIZES, lambda *args: (64, 96),
                      raising=False)
  programs = {
      "lstm": jaxpr_io.trace(_loss, X, H0, C0, W),
      "grad": jaxpr_io.trace(jax.value_and_grad(_loss, argnums=(0, 3)),
                             X, H0, C0, W)}
  # The writer traces custom_vjp rules (lstm's), which evaluate rnn_fwd.
  data = {name: jaxpr_io.dumps(prog) for name, prog in programs.items()}
  monkeypatch.undo()
  assert not hasattr(gpu_rnn, _SIZES)
  return programs, data


def test_without_the_cuda_plugin_nothing_traces():
  if hasattr(gpu_rnn, _SIZES):
    pytest.skip("this jaxlib has the CUDA plugin")
  with pytest.raises(AttributeError, match=_SIZES):
    jax.make_jaxpr(_loss)(X, H0, C0, W)


def test_lstm_and_its_gradient_round_trip_from_trusted_files(traced):
  programs, data = traced
  assert "rnn_fwd" in _primitives(programs["lstm"])
  assert {"rnn_fwd", "rnn_bwd"} <= _primitives(programs["grad"])
  for name, prog in programs.items():
    # From the bytes written with the stand-in (dumping `prog` again here
    # would trace lstm's rules without it): trusted, our own bytes.
    loaded = jaxpr_io.loads(data[name], trusted=True)
    assert str(loaded) == str(prog)
    assert jaxpr_io.dumps(loaded) == data[name]
    (fwd,) = [e for j in validate.walk_jaxprs(loaded.closed_jaxpr.jaxpr)
              for e in j.eqns if e.primitive.name == "rnn_fwd"]
    assert fwd.primitive is rnn.rnn_fwd_p
    assert fwd.params == dict(input_size=IN, hidden_size=HIDDEN,
                              num_layers=LAYERS, dropout=0.0,
                              bidirectional=False, cudnn_allow_tf32=True)
    assert fwd.outvars[3].aval.shape == (96,)  # the reserve space


def test_untrusted_files_may_not_hold_cudnn_rnn(traced):
  _, data = traced
  for blob in data.values():
    with pytest.raises(jaxpr_io.FormatError,
                       match=r"rnn_(fwd|bwd) \(cuDNN's LSTM\) sizes native "
                             r"buffers .* trusted=True"):
      jaxpr_io.loads(blob)


@pytest.mark.parametrize("param,value,match", [
    ("input_size", 0, "input_size 0 is not an int from 1"),
    ("hidden_size", 2 ** 40, "hidden_size 1099511627776 is not an int"),
    ("num_layers", 1.0, "num_layers 1.0 is not an int"),
    ("dropout", 1.5, "dropout 1.5 is not a number in"),
    ("bidirectional", 1, "bidirectional is not a bool"),
])
def test_sizes_are_validated_even_in_trusted_files(param, value, match):
  params = dict(input_size=IN, hidden_size=HIDDEN, num_layers=LAYERS,
                dropout=0.0, bidirectional=False, cudnn_allow_tf32=True)
  screen = trust.Screen(trusted=True)
  assert trust.SCREENS["rnn_fwd"]("rnn_fwd", dict(params), screen) == params
  params[param] = value
  with pytest.raises(jaxpr_io.FormatError, match=f"rnn_bwd's {match}"):
    trust.SCREENS["rnn_bwd"]("rnn_bwd", params, screen)
