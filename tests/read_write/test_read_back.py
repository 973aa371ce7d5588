"""The writer's debug mode (jaxpr_io/api/program.py, `READ_BACK`): `dumps`
and `save` read their output back before returning, so a program the
writer stores but the reader refuses fails where it is written. The suite
runs with it on (tests/conftest.py); these tests prove it reads and that
it is off by default."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import jaxpr_io
from jaxpr_io import FormatError
from jaxpr_io.api import program as program_api
from jaxpr_io.read import reader


def _prog():
  return jaxpr_io.trace(lambda x: jnp.sin(x) * 2, np.ones(3, np.float32))


@pytest.fixture
def refusing_reader(monkeypatch):
  """The reader refuses every file, as it would a writer's mistake."""
  calls = []

  def refuse(*args, **kwargs):
    calls.append(args)
    raise FormatError("jaxpr 0: outputs: a made-up refusal")
  monkeypatch.setattr(reader, "read", refuse)
  return calls


def test_the_suite_runs_in_debug_mode():
  assert program_api._read_back_enabled()  # pylint: disable=protected-access


@pytest.mark.parametrize("how", ["flag", "env"])
def test_dumps_and_save_refuse_what_the_reader_refuses(
    refusing_reader, monkeypatch, tmp_path, how):
  if how == "flag":
    monkeypatch.setattr(program_api, "READ_BACK", True)
  else:
    monkeypatch.setenv("JAXPR_IO_READ_BACK", "1")
  with pytest.raises(FormatError, match="reader refuses the file its writer "
                     "just wrote.*a made-up refusal"):
    jaxpr_io.dumps(_prog())
  with pytest.raises(FormatError, match="a made-up refusal"):
    jaxpr_io.save(tmp_path / "p.jaxpr", _prog())
  assert not (tmp_path / "p.jaxpr").exists()  # nothing written
  assert len(refusing_reader) == 2


def test_off_by_default(refusing_reader, monkeypatch, tmp_path):
  monkeypatch.delenv("JAXPR_IO_READ_BACK", raising=False)
  assert program_api.READ_BACK is None
  data = jaxpr_io.dumps(_prog())
  jaxpr_io.save(tmp_path / "p.jaxpr", _prog())
  assert (tmp_path / "p.jaxpr").read_bytes() == data
  monkeypatch.setenv("JAXPR_IO_READ_BACK", "0")
  jaxpr_io.dumps(_prog())
  assert not refusing_reader
