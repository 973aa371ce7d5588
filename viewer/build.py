"""Builds the viewer page, jaxpr_io/_viewer/viewer.html, from viewer/src/:
the template with the stylesheet and the scripts (schema.js, reader.js,
ui.js, in that order) pasted in. Deterministic: the same sources give the
same bytes (tests/viewer/test_viewer.py checks the shipped page equals a fresh
build), and pip installs the built page with the package: no npm.

Usage: python viewer/build.py [--check]
"""

from __future__ import annotations

import pathlib
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
SRC = ROOT / "viewer" / "src"
OUT = ROOT / "jaxpr_io" / "_viewer" / "viewer.html"
SCRIPTS = ("schema.js", "reader.js", "ui.js")


def build() -> str:
  template = (SRC / "template.html").read_text()
  script = "\n".join((SRC / name).read_text() for name in SCRIPTS)
  # A script must not close its own element; none of ours does.
  assert "</script" not in script.lower()
  return (template.replace("/*STYLE*/", (SRC / "style.css").read_text(), 1)
          .replace("/*SCRIPT*/", script, 1))


def main(argv) -> int:
  page = build()
  if "--check" in argv:
    if not OUT.exists() or OUT.read_text() != page:
      print(f"{OUT} is stale: run python viewer/build.py")
      return 1
    return 0
  OUT.parent.mkdir(exist_ok=True)
  OUT.write_text(page)
  return 0


if __name__ == "__main__":
  sys.exit(main(sys.argv[1:]))
