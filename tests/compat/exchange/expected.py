"""Known failures of the exchange: the cases that may fail, by name, for a
(writer release, reader release) pair, each with the text its FormatError
must contain.

Keys are release series ("0.10", "0.11", "0.12"; "*" matches any); values
map a case name to a substring of the expected `jaxpr_io.FormatError`
message. A listed case passes the table only if it fails with a
FormatError whose message contains that text: any other failure of it
(a wrong result, another exception type, a different message) is
unexpected. An entry must say why the file cannot be read, e.g. a primitive
that the reader's JAX release does not have.
"""

from __future__ import annotations

# (writer series, reader series) -> {case name: expected message substring}
# None now: JAX 0.11's `log2`, which 0.10 refused, loads there through a
# polyfill (jaxpr_io/compat/polyfills.py; the table flags such cases).
EXPECTED: dict[tuple[str, str], dict[str, str]] = {}


def expected_failure(writer: str, reader: str, case: str) -> str | None:
  """The FormatError message substring expected for `case` written by
  release series `writer` and read by `reader`, or None if it must pass."""
  for (w, r), cases in EXPECTED.items():
    if w in ("*", writer) and r in ("*", reader) and case in cases:
      return cases[case]
  return None
