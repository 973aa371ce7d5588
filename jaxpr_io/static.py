"""`Static`: the pytree node that stands for a static leaf of a traced
program's arguments (jaxpr_io/pytree/static.py says when).

Files hold it as a GENERIC node of type `jaxpr_io.static.Static`: that
module and qualname are part of the format, so the class MUST stay here,
under this name, and users see it in a program's `in_tree`.
"""

from __future__ import annotations

import dataclasses

import jax


@dataclasses.dataclass(frozen=True)
class Static:
  """Stands for one static leaf in a program's `in_tree`."""
  description: str

  def __repr__(self) -> str:
    return f"Static({self.description})"


jax.tree_util.register_pytree_node(
    Static, lambda s: ((), s.description), lambda aux, _: Static(aux))
