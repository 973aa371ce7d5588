"""Flax NNX checkpoints bind as users save them (issue 37).

`nnx.split(model)` of a model with `nnx.Dropout` gives a state holding the
dropout stream's key (`RngKey`, a `key<fry>[]`) and counter; Orbax saves
the key as its `uint32[2]` key data. A program traced on the whole state
binds that checkpoint as saved (`Program.bind`, `ProgramRestore(bind=...)`,
`jaxpr-load --bind`), and its result is the original model's, bit for bit.
A program of the model's `nnx.Param`s alone binds the same checkpoint with
`extra="ignore"` (`--bind-ignore-extra`); without it, the refusal's one line
says how to ask for that.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

nnx = pytest.importorskip("flax.nnx")
ocp = pytest.importorskip("orbax.checkpoint")

import jax  # pylint: disable=g-import-not-at-top,wrong-import-position

import jaxpr_io  # pylint: disable=g-import-not-at-top,wrong-import-position
import jaxpr_io.orbax  # pylint: disable=g-import-not-at-top,wrong-import-position
from jaxpr_io.api import bind_sources  # pylint: disable=g-import-not-at-top,wrong-import-position
from jaxpr_io.tools import load as load_tool  # pylint: disable=g-import-not-at-top,wrong-import-position


class Net(nnx.Module):

  def __init__(self, rngs):
    self.linear = nnx.Linear(6, 5, rngs=rngs)
    self.dropout = nnx.Dropout(0.5, rngs=rngs)

  def __call__(self, x):
    return self.dropout(nnx.relu(self.linear(x)))


X = np.random.RandomState(0).randn(4, 6).astype(np.float32)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
  """The model's pieces, and step 3 of a checkpoint holding its state (as
  `nnx.split` gives it) and the two programs: `apply` of the whole state
  (dropout on) and `serve` of the params alone (eval mode)."""
  model = Net(nnx.Rngs(params=0, dropout=1))
  graphdef, state = nnx.split(model)
  _, params, rest = nnx.split(model, nnx.Param, ...)

  def apply(state, x):
    return nnx.merge(graphdef, state)(x)

  def serve(params, x):
    model = nnx.merge(graphdef, params, rest)
    model.eval()
    return model(x)
  path = tmp_path_factory.mktemp("nnx")
  apply_prog = jaxpr_io.trace(apply, state, X)
  serve_prog = jaxpr_io.trace(serve, params, X)
  with ocp.CheckpointManager(path / "ckpt") as mngr:
    mngr.save(3, args=ocp.args.Composite(
        state=ocp.args.StandardSave(state),
        apply=jaxpr_io.orbax.ProgramSave(apply_prog),
        serve=jaxpr_io.orbax.ProgramSave(serve_prog)))
    mngr.wait_until_finished()
  jaxpr_io.save(path / "apply.jaxpr", apply_prog)
  jaxpr_io.save(path / "serve.jaxpr", serve_prog)
  np.savez(path / "x.npz", arg0=X)
  # The original's results, on copies: a model merged from a state shares
  # its variables, and each call advances the dropout stream's count.
  expected = dict(apply=np.asarray(apply(copy.deepcopy(state), X)),
                  serve=np.asarray(serve(copy.deepcopy(params), X)))
  return dict(path=path, state=state, expected=expected,
              apply_prog=apply_prog, serve_prog=serve_prog)


def _source(saved):
  return bind_sources.load_source(str(saved["path"] / "ckpt/3/state"))


def test_orbax_saves_the_dropout_key_as_key_data(saved):
  # What this file is about: the key is no key any more in the checkpoint.
  source = _source(saved)
  key = source["dropout"]["rngs"]["key"]["value"]
  assert (key.shape, key.dtype) == ((2,), np.uint32)
  (taken,) = [a for a in saved["apply_prog"].in_avals
              if jax.dtypes.issubdtype(a.dtype, jax.dtypes.prng_key)]
  assert taken.str_short() == "key<fry>[]"


def test_whole_state_binds_as_saved_and_computes_the_original(saved):
  expected = saved["expected"]["apply"]
  assert (expected == 0).any() and (expected != 0).any()  # dropout did drop
  bound = saved["apply_prog"].bind(_source(saved))
  np.testing.assert_array_equal(np.asarray(bound(X)), expected)
  keys = [c for c in bound.closed_jaxpr.consts
          if jax.dtypes.issubdtype(c.dtype, jax.dtypes.prng_key)]
  assert len(keys) == 1 and str(keys[0].dtype) == "key<fry>"
  np.testing.assert_array_equal(
      jax.random.key_data(keys[0]),
      jax.random.key_data(saved["state"]["dropout"]["rngs"]["key"][...]))
  # The bound program saves, loads and re-dumps to the same bytes.
  data = jaxpr_io.dumps(bound)
  loaded = jaxpr_io.loads(data, check=True)
  assert jaxpr_io.dumps(loaded) == data
  np.testing.assert_array_equal(np.asarray(loaded(X)), expected)
  # What Orbax restores for the user (a typed key again) binds too, and so
  # does the state with its key as key data.
  restored = ocp.StandardCheckpointer().restore(
      saved["path"] / "ckpt/3/state")
  np.testing.assert_array_equal(
      np.asarray(saved["apply_prog"].bind(restored)(X)), expected)
  as_data = jax.tree_util.tree_map(
      lambda x: jax.random.key_data(x) if jax.dtypes.issubdtype(
          x.dtype, jax.dtypes.prng_key) else np.asarray(x),
      saved["state"])
  np.testing.assert_array_equal(
      np.asarray(saved["apply_prog"].bind(as_data)(X)), expected)


def test_orbax_program_restore_binds_the_state_item(saved):
  with ocp.CheckpointManager(saved["path"] / "ckpt") as mngr:
    served = mngr.restore(3, args=ocp.args.Composite(
        apply=jaxpr_io.orbax.ProgramRestore(bind={0: "state"}),
        serve=jaxpr_io.orbax.ProgramRestore(bind={0: "state"},
                                            bind_extra="ignore")))
    np.testing.assert_array_equal(
        np.asarray(served.apply(X)),
        saved["expected"]["apply"])
    np.testing.assert_array_equal(
        np.asarray(served.serve(X)),
        saved["expected"]["serve"])
    with pytest.raises(TypeError, match="ProgramRestore: "
                       "bind_extra='ignore'"):
      mngr.restore(3, args=ocp.args.Composite(
          serve=jaxpr_io.orbax.ProgramRestore(bind={0: "state"})))


def test_params_program_binds_the_whole_state_when_asked(saved):
  prog = saved["serve_prog"]
  with pytest.raises(TypeError) as info:
    prog.bind(_source(saved))
  message = str(info.value)
  assert "\n" not in message
  assert message.startswith("bind args[0]['dropout']['rngs']")
  assert "not an input of the program" in message
  assert "extra='ignore'" in message and "--bind-ignore-extra" in message
  bound = prog.bind(_source(saved), extra="ignore")
  np.testing.assert_array_equal(
      np.asarray(bound(X)), saved["expected"]["serve"])
  # Only what the program does not take is dropped: an input the source
  # lacks is still refused.
  partial = {"linear": {"kernel": {"value": np.zeros((6, 5), np.float32)}}}
  with pytest.raises(TypeError, match=r"\['linear'\]\['bias'\]\.value: "
                     r"the program takes float32\[5\], the source has "
                     r"nothing there"):
    prog.bind(partial, extra="ignore")
  with pytest.raises(ValueError, match="'error'.*'ignore'"):
    prog.bind(_source(saved), extra="drop")


def _cli(capsys, *args):
  capsys.readouterr()
  status = load_tool.main([str(a) for a in args])
  out = capsys.readouterr()
  return status, out.out, out.err


def test_cli_binds_the_checkpoint_as_saved(saved, capsys):
  path = saved["path"]
  state = path / "ckpt/3/state"
  status, _, err = _cli(capsys, path / "apply.jaxpr", "--bind", f"0={state}",
                        "--run", path / "x.npz", "--out", path / "a.npz")
  assert status == 0, err
  np.testing.assert_array_equal(
      np.load(path / "a.npz")["out0"],
      saved["expected"]["apply"])
  # The params program: refused in one line that names the flag, bound
  # with it.
  status, _, err = _cli(capsys, path / "serve.jaxpr", "--bind", f"0={state}",
                        "--run", path / "x.npz")
  lines = [l for l in err.splitlines() if l.startswith("jaxpr-load: error")]
  assert status == 2 and len(lines) == 1, err
  assert "--bind-ignore-extra" in lines[0] and f"--bind 0={state}" in lines[0]
  status, _, err = _cli(capsys, path / "serve.jaxpr", "--bind", f"0={state}",
                        "--bind-ignore-extra", "--run", path / "x.npz",
                        "--out", path / "s.npz")
  assert status == 0, err
  np.testing.assert_array_equal(
      np.load(path / "s.npz")["out0"],
      saved["expected"]["serve"])
  status, _, err = _cli(capsys, path / "serve.jaxpr", "--bind-ignore-extra")
  assert status == 2 and "give --bind" in err
