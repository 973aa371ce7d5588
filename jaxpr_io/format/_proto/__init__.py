"""Message classes of schema/jaxpr.proto.

The schema is compiled by protoc into `jaxpr.desc` (a serialized
FileDescriptorSet, committed; tests/format/test_schema.py fails when it is
stale). Building the classes from the descriptor at import time, rather than
committing protoc's Python output, keeps the package independent of the
protobuf runtime's gencode version checks: any protobuf >= 4.25 works.

Regenerate after editing the schema:
  python -m grpc_tools.protoc -Ischema \
      --descriptor_set_out=jaxpr_io/format/_proto/jaxpr.desc schema/jaxpr.proto
"""

from __future__ import annotations

from importlib import resources

from google.protobuf import descriptor_pb2
from google.protobuf import descriptor_pool
from google.protobuf import message_factory

DESCRIPTOR_SET_BYTES: bytes = (
    resources.files(__package__).joinpath("jaxpr.desc").read_bytes())

_PACKAGE = "jaxpr_io.v1"
_pool = descriptor_pool.DescriptorPool()
for _file in descriptor_pb2.FileDescriptorSet.FromString(
    DESCRIPTOR_SET_BYTES).file:
  _pool.Add(_file)


def _message(name: str):
  return message_factory.GetMessageClass(
      _pool.FindMessageTypeByName(f"{_PACKAGE}.{name}"))


def _enum(name: str) -> dict[str, int]:
  return {v.name: v.number
          for v in _pool.FindEnumTypeByName(f"{_PACKAGE}.{name}").values}


Program = _message("Program")
Producer = _message("Producer")
KeyValue = _message("KeyValue")
TypeRef = _message("TypeRef")
Dim = _message("Dim")
Aval = _message("Aval")
ShapedArray = _message("ShapedArray")
Array = _message("Array")
Blob = _message("Blob")
EqnContext = _message("EqnContext")
NameStack = _message("NameStack")
Jaxpr = _message("Jaxpr")
Equation = _message("Equation")
Param = _message("Param")
ParamSet = _message("ParamSet")
ClosedJaxpr = _message("ClosedJaxpr")
DebugInfo = _message("DebugInfo")
Effect = _message("Effect")
Value = _message("Value")
Tuple = _message("Tuple")
Record = _message("Record")
PyTree = _message("PyTree")
AbstractFuture = _message("AbstractFuture")
AbstractLinVal = _message("AbstractLinVal")
MutableHiType = _message("MutableHiType")
Qdd = _message("Qdd")
VarQdd = _message("VarQdd")

# Enum name -> number maps.
DType = _enum("DType")
HostKind = _enum("HostKind")
MemorySpace = _enum("MemorySpace")
NameStackKind = _enum("NameStack.Entry.Kind")
PyTreeKind = _enum("PyTree.Kind")
LinValMemorySpace = _enum("LinValMemorySpace")
MutableHiKind = _enum("MutableHiKind")
