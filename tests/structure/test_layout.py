"""The package's shape (docs/architecture.md): no import cycles, `jax._src`
only in `compat/`, every lazy import says why, and modules and functions of
a size a reader can hold.

The import graph is read from the source (every `import` statement, at
module level or inside a function), not from a running process, so a cycle
that only a lazy import closes is still a cycle.
"""

from __future__ import annotations

import ast
import os
import pathlib

import pytest

from tests.support import paths

# Release-independent: CI runs it under one release (docs/testing.md).
pytestmark = pytest.mark.once

PACKAGE = pathlib.Path(paths.ROOT) / "jaxpr_io"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
# A lazy import of a jaxpr_io module says why on its line or the one above.
LAZY_MARK = "lazy:"


def _modules() -> dict[str, pathlib.Path]:
  """Dotted module name -> file, for every module of the package."""
  found = {}
  for path in sorted(PACKAGE.rglob("*.py")):
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
      parts.pop()
    found[".".join(parts)] = path
  return found


MODULES = _modules()


def _trees():
  return {name: ast.parse(path.read_text(), str(path))
          for name, path in MODULES.items()}


TREES = _trees()


def _imported(module: str, node) -> list[str]:
  """The jaxpr_io modules an import statement of `module` imports."""
  if isinstance(node, ast.Import):
    targets = [a.name for a in node.names]
  else:
    base = node.module or ""
    if node.level:  # relative: resolve against the module's package
      pkg = module.split(".")
      if not MODULES[module].name == "__init__.py":
        pkg = pkg[:-1]
      pkg = pkg[:len(pkg) - node.level + 1]
      base = ".".join(pkg + ([base] if base else []))
    targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in MODULES else base
               for a in node.names]
  return [t for t in targets if t in MODULES]


def _edges() -> dict[str, set[str]]:
  graph: dict[str, set[str]] = {m: set() for m in MODULES}
  for module, tree in TREES.items():
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        graph[module].update(t for t in _imported(module, node)
                             if t != module)
  return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """One cycle per strongly connected component with more than one module
  (Tarjan's algorithm)."""
  index, low, stack, on_stack, out = {}, {}, [], set(), []
  counter = [0]

  def visit(v):
    index[v] = low[v] = counter[0]
    counter[0] += 1
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        out.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_the_import_graph_has_no_cycle():
  graph = _edges()
  # Importing a package runs its __init__; an edge into a package that
  # only its own submodules close is how Python packages work, not a cycle
  # of ours, so a package's edge to its own submodules is left out.
  for module in graph:
    graph[module] = {t for t in graph[module]
                     if not t.startswith(module + ".")}
  cycles = _cycles(graph)
  assert not cycles, "import cycles:\n" + "\n".join(
      " <-> ".join(c) for c in cycles)


# The layers of docs/architecture.md, bottom first: a module imports only
# from its own folder and the layers below. (errors.py and static.py are
# leaves that import no jaxpr_io module; the top layer is what users call.)
LAYERS = (
    ("errors", "static"),
    ("format",),
    ("compat",),
    ("codec",),
    ("safety",),
    ("pytree",),
    ("families",),
    ("read", "write"),
    ("api",),
    ("jaxpr_io", "converters", "orbax"),
    ("tools",),
    ("__main__",),
)
_LAYER_OF = {folder: i for i, layer in enumerate(LAYERS) for folder in layer}


def _folder(module: str) -> str:
  parts = module.split(".")
  return parts[1] if len(parts) > 1 else "jaxpr_io"


def test_every_folder_has_a_layer():
  assert {_folder(m) for m in MODULES} <= set(_LAYER_OF)


def test_folders_import_only_the_layers_below():
  upward = []
  for module, targets in _edges().items():
    here = _folder(module)
    for target in targets:
      there = _folder(target)
      if there != here and _LAYER_OF[there] >= _LAYER_OF[here]:
        upward.append(f"{module} -> {target}")
  assert not upward, "imports against the layers:\n" + "\n".join(upward)


def test_the_graph_is_read():
  """The reading above finds the edges it must (a check of the test)."""
  graph = _edges()
  assert "jaxpr_io.read.reader" in graph["jaxpr_io.api.program"]
  assert "jaxpr_io.codec.registry" in graph["jaxpr_io.families.remat"]


def test_jax_internals_only_in_compat():
  offenders = []
  for module, tree in TREES.items():
    if module == "jaxpr_io.compat" or module.startswith("jaxpr_io.compat."):
      continue
    for node in ast.walk(tree):
      names = []
      if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom) and not node.level:
        names = [node.module or ""]
      elif (isinstance(node, ast.Call)
            and getattr(node.func, "attr", None) == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant)):
        names = [str(node.args[0].value)]
      offenders += [f"{module}:{node.lineno} {n}" for n in names
                    if n == "jax._src" or n.startswith("jax._src.")]
  assert not offenders, ("jax._src outside jaxpr_io/compat/: "
                         + ", ".join(offenders))


def test_every_lazy_import_says_why():
  unmarked = []
  for module, tree in TREES.items():
    lines = MODULES[module].read_text().splitlines()
    top = {id(n) for n in tree.body}
    for node in ast.walk(tree):
      if (isinstance(node, (ast.Import, ast.ImportFrom))
          and id(node) not in top and _imported(module, node)):
        here = lines[node.lineno - 1] + lines[node.lineno - 2]
        if LAZY_MARK not in here:
          unmarked.append(f"{module}:{node.lineno}")
  assert not unmarked, (
      f"imports of jaxpr_io modules inside functions without a "
      f"'# {LAZY_MARK} <why>' comment: {', '.join(unmarked)}")


@pytest.mark.parametrize("module", sorted(MODULES))
def test_module_size(module):
  n = len(MODULES[module].read_text().splitlines())
  assert n <= MAX_MODULE_LINES, (
      f"{os.path.relpath(MODULES[module], paths.ROOT)} has {n} lines, more "
      f"than {MAX_MODULE_LINES}: split it by job")


def test_function_size():
  long = []
  for module, tree in TREES.items():
    for node in ast.walk(tree):
      if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        n = node.end_lineno - node.lineno + 1
        if n > MAX_FUNCTION_LINES:
          long.append(f"{module}.{node.name} ({n} lines)")
  assert not long, (f"functions over {MAX_FUNCTION_LINES} lines: "
                    + ", ".join(long))
