"""The schema cannot change silently.

* The committed descriptor (jaxpr_io/format/_proto/jaxpr.desc) must be what protoc
  makes of schema/jaxpr.proto today: editing the .proto without regenerating
  fails here.
* Its fingerprint must be the one recorded for the current FORMAT_VERSION:
  changing the schema without bumping the version (and recording the new
  fingerprint in jaxpr_io/format/version.py) fails here.
* Every enum reserves 0 for "unspecified".
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys

import pytest
from google.protobuf import descriptor_pb2

from jaxpr_io.format import _proto as pb
from jaxpr_io.format import version
from tests.support import paths

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

ROOT = paths.ROOT


def test_descriptor_is_fresh(tmp_path):
  pytest.importorskip("grpc_tools")
  out = tmp_path / "jaxpr.desc"
  subprocess.run(
      [sys.executable, "-m", "grpc_tools.protoc", "-I",
       os.path.join(ROOT, "schema"), f"--descriptor_set_out={out}",
       os.path.join(ROOT, "schema", "jaxpr.proto")], check=True)
  fresh = descriptor_pb2.FileDescriptorSet.FromString(out.read_bytes())
  committed = descriptor_pb2.FileDescriptorSet.FromString(
      pb.DESCRIPTOR_SET_BYTES)
  assert fresh == committed, (
      "schema/jaxpr.proto changed: regenerate jaxpr_io/format/_proto/jaxpr.desc "
      "(see jaxpr_io/format/_proto/__init__.py) and bump FORMAT_VERSION")


def test_schema_change_bumps_format_version():
  fingerprint = hashlib.sha256(pb.DESCRIPTOR_SET_BYTES).hexdigest()
  recorded = version.SCHEMA_FINGERPRINTS.get(version.FORMAT_VERSION)
  assert fingerprint == recorded, (
      f"the schema's fingerprint {fingerprint} is not the one recorded for "
      f"format version {version.FORMAT_VERSION}: bump FORMAT_VERSION, add its "
      "entry to schema/CHANGELOG.md and record the new fingerprint in "
      "jaxpr_io/format/version.py")


def test_older_fingerprints_are_kept():
  assert sorted(version.SCHEMA_FINGERPRINTS) == list(
      range(1, version.FORMAT_VERSION + 1))


def _enums(messages):
  for message in messages:
    yield from message.enum_type
    yield from _enums(message.nested_type)


def test_every_enum_reserves_zero():
  (file,) = descriptor_pb2.FileDescriptorSet.FromString(
      pb.DESCRIPTOR_SET_BYTES).file
  enums = [*file.enum_type, *_enums(file.message_type)]
  assert enums
  for enum in enums:
    zero = [v.name for v in enum.value if v.number == 0]
    assert zero and zero[0].endswith("UNSPECIFIED"), enum.name
