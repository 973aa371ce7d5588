"""The format's grammar of symbolic dimensions, checked before JAX parses.

A symbolic dimension is stored as the text JAX prints for it (`2*b + 1`,
`floordiv(b, 2)`, `b^2`, `max(a, b) - 1`) and rebuilt with JAX's own parser.
That parser trusts its input: `9^99999999` asks Python for a ten-million-
digit power and never returns, and deep nesting recurses. So every text from
a file is first checked against this grammar, which bounds what JAX computes:

    expr       := ["+" | "-"] term (("+" | "-") term)*
    term       := factor ["^" exponent] ("*" factor ["^" exponent])*
    factor     := name | "-"? integer | op "(" expr "," expr ")"
                  | "non_negative" "(" expr ")"
    op         := "mod" | "floordiv" | "max" | "min"
    constraint := expr (">=" | "<=" | "==") expr

* integers have at most 19 digits and are at most 2**62;
* exponents are integers from 0 to `MAX_EXPONENT`;
* parentheses nest at most `MAX_NESTING` deep;
* a text is at most `MAX_LENGTH` characters.

The check is lexical and linear in the text; JAX's parser then rejects what
is lexically fine but not an expression.
"""

from __future__ import annotations

import re

from jaxpr_io.errors import FormatError

MAX_LENGTH = 1000
MAX_EXPONENT = 64
MAX_NESTING = 32
MAX_INT = 1 << 62

_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<int>\d+)"
                    r"|(?P<op>>=|<=|==|[-+*^(),]))")
_COMPARISONS = (">=", "<=", "==")


def check(text: str, *, constraint: bool = False) -> None:
  """Raises FormatError unless `text` is lexically a dimension expression
  (or, with `constraint`, a constraint) of bounded cost."""
  what = "symbolic constraint" if constraint else "symbolic dimension"
  if len(text) > MAX_LENGTH:
    raise FormatError(f"{what} of {len(text)} characters is over the limit "
                      f"of {MAX_LENGTH}")
  position, depth, comparisons, after_caret = 0, 0, 0, False
  end = len(text.rstrip())
  while position < end:
    match = _TOKEN.match(text, position)
    if match is None:
      raise FormatError(f"{what} {text[:80]!r} has an unexpected character "
                        f"at position {position}: {text[position]!r}")
    position = match.end()
    integer, op = match["int"], match["op"]
    if integer is not None:
      if len(integer) > 19 or int(integer) > MAX_INT:
        raise FormatError(f"{what} {text[:80]!r}: the integer {integer[:30]} "
                          "is over 2**62")
      if after_caret and int(integer) > MAX_EXPONENT:
        raise FormatError(f"{what} {text[:80]!r}: the exponent {integer} is "
                          f"over {MAX_EXPONENT}")
    elif after_caret:
      raise FormatError(f"{what} {text[:80]!r}: '^' must be followed by an "
                        "integer exponent")
    after_caret = op == "^"
    if op == "(":
      depth += 1
      if depth > MAX_NESTING:
        raise FormatError(f"{what} {text[:80]!r} nests parentheses over "
                          f"{MAX_NESTING} deep")
    elif op == ")":
      depth -= 1
    elif op in _COMPARISONS:
      comparisons += 1
  if after_caret or depth != 0 or comparisons != (1 if constraint else 0):
    raise FormatError(f"{what} {text[:80]!r} is not well formed")


def check_value(text: str, value) -> None:
  """Range checks on what JAX built from `text`: a constant is a size from 0
  to 2**62, and a symbolic expression has no coefficient over 2**62."""
  if type(value) is int:
    if not 0 <= value <= MAX_INT:
      raise FormatError(f"symbolic dimension {text[:80]!r} is the constant "
                        f"{value}, not a size from 0 to 2**62")
    return
  for integer in re.findall(r"\b\d+\b", str(value)):
    if len(integer) > 19 or int(integer) > MAX_INT:
      raise FormatError(f"symbolic dimension {text[:80]!r} has a coefficient "
                        "over 2**62")
