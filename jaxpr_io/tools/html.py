"""`jaxpr-load FILE --html OUT.html`: the viewer page with the file inside.

The page (jaxpr_io/_viewer/viewer.html, built by viewer/build.py from
viewer/src/) reads the file with its own JavaScript reader; Python only
checks that the file is a jaxpr_io container whose pytrees the page's
reader accepts (so a wrong file fails here, not in the browser) and pastes its bytes in as base64. The page fetches
nothing (its Content-Security-Policy forbids any network access) and works
from file://; any other .jaxpr file can be dropped onto it.
"""

from __future__ import annotations

import base64
import html
import os
from importlib import resources

from google.protobuf.message import DecodeError

from jaxpr_io.errors import FormatError
from jaxpr_io.format import _proto as pb
from jaxpr_io.format import container
from jaxpr_io.safety import costs


def page_template() -> str:
  return resources.files("jaxpr_io").joinpath(
      "_viewer/viewer.html").read_text(encoding="utf-8")


def page(data: bytes, name: str) -> str:
  """The viewer page holding `data` (a .jaxpr file's bytes) named `name`.
  Raises jaxpr_io.FormatError if `data` is not a jaxpr_io file, or is one
  that the page's reader would refuse for what it costs (the cost model of
  jaxpr_io/safety/costs.py, which the page's reader applies too)."""
  c = container.Container(data, source=name)  # header and program checksums
  msg = pb.Program()
  try:
    msg.ParseFromString(c.program)
  except DecodeError as e:
    raise FormatError(f"{name}: the program message does not parse: "
                      f"{e}") from None
  costs.check_page_costs(msg, len(data), name)
  return (page_template()
          .replace("/*NAME*/", html.escape(name, quote=True), 1)
          .replace("/*DATA*/", base64.b64encode(data).decode("ascii"), 1))


def write_page(path: str, out_path: str) -> int:
  """Writes the viewer page for the file at `path`; returns its size."""
  with open(path, "rb") as f:
    data = f.read()
  text = page(data, os.path.basename(path))
  with open(out_path, "w", encoding="utf-8") as f:
    f.write(text)
  return len(text)
