"""What JAX's parser of symbolic dimensions will compute, bounded from the
text before it runs.

JAX's parser (`shape_poly._Parser`) builds each expression as a polynomial
in normal form: every sum is merged term by term, every product multiplies
its factors out, a power `f^k` is `f * f * ... * f`, and `max`/`min`
return one of their arguments when JAX can decide which is larger
(`max(b + c, 0)` is `b + c`). A text of a few hundred bytes that
dim_grammar.py accepts (`max(b+c+d+e+f+g+h+i, 0)^64`) thus asks for about
10^9 monomials. The scope's equality constraints add to it: JAX rewrites
the term on the left of `b == c + d + e` into the right side wherever it
builds one (at most one rewrite each time it normalizes a result).

`Scope(constraints)` bounds, from the syntax tree of each expression, the
work JAX does to build it: the monomials that its sums, products and
powers form. With n1 and n2 the bounds of the parts, a sum has at most
n1 + n2 monomials, a product n1 * n2 (formed one by one), a power `f^k` of
an f of n monomials C(n+k-1, k) (the multisets of k of them), formed n at a
time from each partial power; `floordiv` and `mod` are one atom built
from their arguments, `max` and `min` at most their larger argument. When
the scope has equality constraints, each result may also have one term
rewritten into a rule's right side, so each adds the most monomials of a
right side (each bounded in the order JAX parses them, with the rules
before it), and a power is bounded step by step (n1 * n + that) instead of
by the multinomial. The bound ignores cancellation: it is never below what
JAX builds. An expression whose work is over `MAX_DIM_WORK` is refused
with a `FormatError` before JAX sees it, and so is a shape whose size (the
product of its dimensions, which JAX's shape rules multiply out) would be;
the reader charges the work of every expression it builds against the
load's memory budget (`DIM_WORK_COST` bytes a monomial), so that many
expressions cannot add up to what one may not cost.

The texts are those `dim_grammar.check` has accepted: integers, names, the
operators `+ - * ^`, `mod`, `floordiv`, `max`, `min` (and `non_negative`)
of two (one) arguments, parentheses around the whole text, at most
`dim_grammar.MAX_NESTING` deep, so that the recursion here is bounded.
"""

from __future__ import annotations

import math
import re
from typing import Sequence

from jaxpr_io.errors import FormatError

# The most monomials JAX may form to build one dimension, one side of a
# constraint, or the size of one shape. JAX forms 10,000 to 80,000 a second
# on a 2-core machine (jax 0.10.2; printing and comparing the result in a
# shape rule's error costs more), and a monomial of the result costs
# 150-300 bytes of Python objects. The programs of JAX's shape-polymorphism
# suite cost at most 30 (tests/format/test_dim_cost.py).
MAX_DIM_WORK = 1 << 13
# What the reader charges for each monomial, against the load's memory
# budget, besides the expression's own limit.
DIM_WORK_COST = 256

_SATURATED = 1 << 62
_TOKEN = re.compile(r"\s*(?:(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<int>\d+)"
                    r"|(?P<op>>=|<=|==|[-+*^(),]))")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_BINARY = ("mod", "floordiv", "max", "min")
_PICK = ("max", "min", "non_negative")   # may return an argument itself


def _sat(n: int) -> int:
  return n if n < _SATURATED else _SATURATED


def power_terms(n: int, k: int) -> int:
  """The most monomials of `f^k` for an f of `n` monomials."""
  if k == 0 or n <= 1:
    return 1
  return _sat(math.comb(n + k - 1, k))


class _Cost:
  """(terms, work, keyed): the most monomials of an expression, the most
  JAX forms while building it, and whether a term of it may have a factor
  that an equality constraint rewrites (then so may all it is part of)."""
  __slots__ = ("terms", "work", "keyed")

  def __init__(self, terms: int, work: int, keyed: bool = False):
    self.terms, self.work, self.keyed = _sat(terms), _sat(work), keyed


class _Parser:
  """Recursive descent over the tokens of one accepted text (the grammar of
  dim_grammar.py, as JAX's `_Parser` reads it). `keys`: the names of the
  variables and operations that equality constraints rewrite; `rewrite`:
  the most monomials such a rewrite adds."""

  def __init__(self, text: str, keys: frozenset, rewrite: int):
    self.tokens = []
    position, end = 0, len(text.rstrip())
    while position < end:
      match = _TOKEN.match(text, position)
      if match is None:
        raise ValueError("unexpected character")
      position = match.end()
      self.tokens.append(match["name"] or match["int"] or match["op"])
    self.tokens.append(None)
    self.i = 0
    self.keys, self.rewrite = keys, rewrite
    # The most monomials of an argument of an operation: the right side of
    # the rule JAX adds for `mod(e, k) == 0` is `e`.
    self.largest_argument = 0

  def peek(self):
    return self.tokens[self.i]

  def take(self, expected=None):
    token = self.tokens[self.i]
    if expected is not None and token != expected:
      raise ValueError(f"expected {expected!r}")
    self.i += 1
    return token

  def built(self, terms: int, work: int, keyed: bool) -> _Cost:
    """A result of `terms` monomials formed by `work`, normalized: if
    `keyed`, one of its terms may be rewritten by an equality constraint
    (JAX rewrites at most one each time it normalizes)."""
    extra = self.rewrite if keyed else 0
    return _Cost(terms + extra, work + terms + extra, keyed)

  def whole(self) -> _Cost:
    """`(`* expr `)`*: JAX takes parentheses only around the whole text."""
    opened = 0
    while self.peek() == "(":
      self.take()
      opened += 1
    cost = self.expr()
    for _ in range(opened):
      self.take(")")
    if self.peek() is not None:
      raise ValueError("trailing tokens")
    return cost

  def expr(self) -> _Cost:
    if self.peek() in ("+", "-"):
      self.take()
    acc = self.term()
    while self.peek() in ("+", "-"):
      self.take()
      t = self.term()
      acc = self.built(acc.terms + t.terms, acc.work + t.work,
                       acc.keyed or t.keyed)
    return acc

  def term(self) -> _Cost:
    acc = self.powered()
    while self.peek() == "*":
      self.take()
      f = self.powered()
      acc = self.built(acc.terms * f.terms, acc.work + f.work,
                       acc.keyed or f.keyed)
    return acc

  def powered(self) -> _Cost:
    f = self.factor()
    if self.peek() != "^":
      return f
    self.take()
    k = int(self.take())
    if k == 0:
      return _Cost(1, f.work)
    n, work = f.terms, f.work
    if not f.keyed:
      # f * f * ... * f: step i multiplies f^i by f.
      for i in range(1, k):
        work = _sat(work + power_terms(n, i + 1) + power_terms(n, i) * n)
      return _Cost(power_terms(n, k), work)
    acc = f
    for _ in range(1, k):
      acc = self.built(acc.terms * n, acc.work, True)
    return acc

  def factor(self) -> _Cost:
    token = self.take()
    if token is None:
      raise ValueError("unexpected end")
    if token == "-":
      token = self.take()
      if token is None or not token.isdigit():
        raise ValueError("'-' before a factor that is not an integer")
      return _Cost(1, 1)
    if token.isdigit():
      return _Cost(1, 1)
    if not (token[0].isalpha() or token[0] == "_"):
      raise ValueError(f"unexpected {token!r}")
    if token in _BINARY or (token == "non_negative" and self.peek() == "("):
      return self.operation(token)
    return self.built(1, 0, token in self.keys)

  def operation(self, op: str) -> _Cost:
    self.take("(")
    args = [self.expr()]
    if op != "non_negative":
      self.take(",")
      args.append(self.expr())
    self.take(")")
    largest = max(a.terms for a in args)
    self.largest_argument = max(self.largest_argument, largest)
    work = sum(a.work for a in args)
    if op in _PICK:
      # JAX compares the arguments (their difference) to pick one, or
      # builds the atom.
      work += sum(a.terms for a in args)
      atom = self.built(1, work, op in self.keys)
      return _Cost(max(largest, atom.terms), atom.work + largest,
                   atom.keyed or any(a.keyed for a in args))
    return self.built(1, work, op in self.keys)


def _split(text: str) -> tuple[str, str, str]:
  """A constraint's (left, comparison, right), found as JAX finds it."""
  for cmp in ("==", ">=", "<="):
    at = text.find(cmp)
    if at >= 0:
      return text[:at], cmp, text[at + 2:]
  raise FormatError(f"symbolic constraint {text[:80]!r} has no comparison")


def _top_level_names(text: str) -> list[str]:
  """The variables that are factors of `text` outside any operation (the
  term on the left of an equality constraint that JAX rewrites)."""
  names, depth = [], 0
  tokens = [m.group().strip() for m in _TOKEN.finditer(text)]
  for j, token in enumerate(tokens):
    if token == "(":
      depth += 1
    elif token == ")":
      depth -= 1
    elif depth == 0 and _NAME.fullmatch(token) and (
        j + 1 == len(tokens) or tokens[j + 1] != "("):
      names.append(token)
  return names


def _refuse_cycles(constraints: Sequence[str]) -> None:
  """FormatError if equality constraints define a variable in terms of
  itself (`g == g*c + 1`, or `e == g + 1` with `g == e + 2`). JAX accepts
  them, but its decision procedure, which every `max`, `min` and
  comparison of the scope's dimensions consults, can then take minutes
  (combining a constraint with itself); a real program states each
  variable's definition once."""
  edges: dict[str, set[str]] = {}
  where: dict[str, int] = {}
  for i, c in enumerate(constraints):
    left, cmp, right = _split(c)
    if cmp != "==":
      continue
    names = _top_level_names(left)
    if len(names) != 1 or "(" in left:
      continue  # a product or an operation: not a variable's definition
    edges.setdefault(names[0], set()).update(
        n for n in _NAME.findall(right) if n not in _BINARY)
    where.setdefault(names[0], i)
  state: dict[str, int] = {}  # 1: on the path, 2: done
  for start in edges:
    if start in state:
      continue
    stack = [(start, iter(sorted(edges[start])))]
    state[start] = 1
    while stack:
      name, children = stack[-1]
      child = next(children, None)
      if child is None:
        state[name] = 2
        stack.pop()
      elif state.get(child) == 1:
        i = where[child]
        raise FormatError(
            f"symbolic constraint {i} ({constraints[i][:80]!r}): equality "
            f"constraints define {child!r} in terms of itself, which JAX's "
            "decision procedure may take minutes over; state each "
            "variable's definition once, in terms of other variables")
      elif child in edges and child not in state:
        state[child] = 1
        stack.append((child, iter(sorted(edges[child]))))


def _over(work: int) -> str:
  return "over 2**62" if work >= _SATURATED else f"{work:,}"


class Scope:
  """The bounds of the expressions of one symbolic scope: `cost(text)` of
  each dimension, `shape_cost` of each shape, `constraint_work` of each
  constraint, all checked against `MAX_DIM_WORK`."""

  def __init__(self, constraints: Sequence[str]):
    # JAX parses the constraints in order, each with the rewrites of the
    # equality constraints before it.
    self.keys: frozenset = frozenset()
    self.rewrite = 0
    self.constraint_work = []
    self._dims: dict[str, _Cost] = {}  # each dimension given to `cost`
    _refuse_cycles(constraints)
    for i, c in enumerate(constraints):
      left, cmp, right = _split(c)
      where = f"symbolic constraint {i} ({c[:80]!r}): its side"
      lhs, argument = self._parse(left, where)
      rhs, _ = self._parse(right, where)
      self.constraint_work.append(lhs.work + rhs.work)
      if cmp == "==":
        # The rule's left side is a term: its variables and operations (and
        # for `mod(e, k) == 0`, JAX's own `k*floordiv(e, k) == e`) are
        # rewritten into its right side (or `e`).
        names = set(_NAME.findall(left))
        if "mod" in names:
          names.add("floordiv")
        self.keys |= names
        self.rewrite = max(self.rewrite, rhs.terms, argument)

  def _parse(self, text: str, where: str) -> tuple[_Cost, int]:
    """The cost of `text`, and the most monomials of an argument of an
    operation in it."""
    parser = _Parser(text, self.keys, self.rewrite)
    try:
      cost = parser.whole()
    except (ValueError, IndexError):
      raise FormatError(f"{where} {text[:80]!r} is not well formed"
                        ) from None
    if cost.work > MAX_DIM_WORK:
      raise FormatError(
          f"{where} {text[:80]!r} would make JAX form {_over(cost.work)} "
          f"monomials when it parses it, over the limit of "
          f"{MAX_DIM_WORK:,} (jaxpr_io/format/dim_cost.py: sums raised to "
          "powers and products of sums multiply out)")
    return cost, parser.largest_argument

  def bound(self, text: str) -> tuple[int, int]:
    """(the most monomials of dimension `text`, the most JAX forms to build
    it); FormatError if that is over `MAX_DIM_WORK`."""
    cost, _ = self._parse(text, "symbolic dimension")
    self._dims[text] = cost
    return cost.terms, cost.work

  def cost(self, text: str) -> int:
    """The most monomials JAX forms to build dimension `text` in this
    scope; FormatError over `MAX_DIM_WORK`."""
    return self.bound(text)[1]

  def shape_cost(self, texts: Sequence[str]) -> int:
    """The most monomials JAX forms to multiply out the size of a shape of
    the dimensions `texts` (each bounded as by `cost`), as its shape
    rules do (`math.prod(shape)`: reshape, broadcasts, ...), beyond one a
    dimension; FormatError over `MAX_DIM_WORK`. A dimension repeated counts
    as a power of it, unless an equality constraint may rewrite it."""
    counts: dict[str, int] = {}
    terms, work, keyed = 1, 0, False
    for text in texts:
      if text not in self._dims:
        self.bound(text)
      dim = self._dims[text]
      counts[text] = counts.get(text, 0) + 1
      keyed = keyed or dim.keyed
      extra = self.rewrite if keyed else 0
      product = _sat(terms * dim.terms)
      work = _sat(work + product + extra)
      if keyed:
        terms = _sat(product + extra)
        continue
      terms = 1
      for t, k in counts.items():
        terms = _sat(terms * power_terms(self._dims[t].terms, k))
    if work > MAX_DIM_WORK:
      raise FormatError(
          f"a shape of the symbolic dimensions {', '.join(texts)[:160]!r} "
          f"has a size (the product of its dimensions, which JAX's shape "
          f"rules multiply out) that would make JAX form {_over(work)} "
          f"monomials, over the limit of {MAX_DIM_WORK:,} "
          "(jaxpr_io/format/dim_cost.py)")
    return max(work - len(texts), 0)
