"""The format's vocabulary: primitive names and params that belong to the
format, not to one JAX release.

A file stores equations in this vocabulary; `jaxpr_io.compat.ADAPTER` (one
module per JAX release line) maps the running release's primitives and
params to it when writing and back when reading. The vocabulary is
documented in schema/VOCABULARY.md and versioned with the format
(jaxpr_io/format/version.py): it was first written from JAX 0.10.2, and later
releases' changes are mapped onto it, so a file written by any supported
release loads under every other.

This module holds what is independent of any release: which params hold
closed jaxprs (JAX 0.11 merged the two jaxpr types, so the format, not the
Python type, says which one a param holds), and the wording of errors for
values that a reading release cannot express.
"""

from __future__ import annotations

import dataclasses
import functools
import re

from jaxpr_io.errors import FormatError

# (primitive, param) slots that hold OPEN jaxprs (no constants), or tuples
# of them. Every other jaxpr-valued param holds closed jaxprs (values that a
# param codec returns say for themselves, see custom_rules.py). Read off
# JAX 0.10.2, where the two are different types (see
# tests/format/test_vocabulary.py, which checks this table against it).
OPEN_JAXPR_PARAMS = frozenset({
    ("pallas_call", "jaxpr"),
    ("emit_pipeline", "body_jaxpr"),
    ("reduce_window", "jaxpr"),
    ("remat2", "jaxpr"),
    ("run_state", "jaxpr"),
    ("scatter", "update_jaxpr"),
    ("scatter-add", "update_jaxpr"),
    ("scatter_add", "update_jaxpr"),
    ("scatter_mul", "update_jaxpr"),
    ("scatter_min", "update_jaxpr"),
    ("scatter_max", "update_jaxpr"),
    ("scatter_sub", "update_jaxpr"),
    ("scatter-mul", "update_jaxpr"),
    ("scatter-min", "update_jaxpr"),
    ("scatter-max", "update_jaxpr"),
    ("scatter-sub", "update_jaxpr"),
    ("shard_map", "jaxpr"),
    ("call", "call_jaxpr"),
    ("core_call", "call_jaxpr"),
})


# (primitive, param) slots holding a jaxpr whose constvars are the
# equation's inputs: Pallas's `run_scoped` body closes over the enclosing
# kernel's refs and is bound with them as its inputs. JAX 0.10 keeps such a
# body open (its constvars unvalued), 0.11+ attach the enclosing trace's
# tracers as its constants. The format stores it open, as 0.10 does; a
# merged release's reader makes the equation's inputs its constants again
# (`compat.close_over_inputs`).
CLOSURE_FROM_INPUTS_PARAMS = frozenset({("run_scoped", "jaxpr")})


# Params that some releases' primitives have and others lack: primitive ->
# param -> (the value under which a release without the param behaves the
# same, the first JAX release with it). A reader whose release has the param
# reads a file from a release without it as that value; one whose release
# lacks it drops it when it holds that value and refuses others.
OPTIONAL_PARAMS: dict[str, dict[str, tuple[object, tuple[int, int]]]] = {
    "erfc": {"accuracy": (None, (0, 12))},
    "top_k": {"is_stable": (True, (0, 11))},
    "reduce_max": {"out_sharding": (None, (0, 11))},
    "reduce_min": {"out_sharding": (None, (0, 11))},
    "new_ref": {"pin": (False, (0, 11))},
    # Mosaic TPU's emit_pipeline in its 0.11+ form
    # (jaxpr_io/compat/pallas_pipeline.py).
    "emit_pipeline": {"output_wait_read_only": (False, (0, 12))},
}


# Params that only some releases use and whose values only those releases can
# decode (records of their own classes); the others skip them unread.
RELEASE_HINT_PARAMS = frozenset({("scan", "ft_in"), ("scan", "ft_out")})


def holds_open_jaxpr(primitive: str, param: str) -> bool:
  return (primitive, param) in OPEN_JAXPR_PARAMS


@dataclasses.dataclass(frozen=True)
class Where:
  """Who wrote the file being read and who reads it."""
  source: str
  writer_jax: str
  reader_jax: str

  def reader_has(self, primitive: str, param: str) -> bool:
    """Whether the reading release's `primitive` has the optional `param`."""
    return release_line(self.reader_jax) >= OPTIONAL_PARAMS[primitive][param][1]

  def writer_had(self, primitive: str, param: str) -> bool:
    """Whether the writing release's `primitive` has the optional `param`."""
    return release_line(self.writer_jax) >= OPTIONAL_PARAMS[primitive][param][1]


@functools.lru_cache(maxsize=64)  # per equation on load; few distinct texts
def parse_jax_version(text: str) -> tuple[int, int, int]:
  """(major, minor, patch) of a JAX version string such as '0.12.0.1' or
  '0.13.0.dev20261201'."""
  numbers = re.findall(r"\d+", text)[:3]
  return tuple(int(n) for n in numbers) + (0,) * (3 - len(numbers))


def release_line(jax_version: str) -> tuple[int, int]:
  """(major, minor) of a JAX version string."""
  return parse_jax_version(jax_version)[:2]


def unrepresentable(where: Where, primitive: str, param: str, value,
                    why: str) -> str:
  """The message of a FormatError for a param value the reading release
  cannot express."""
  return (f"{primitive} param {param!r}={value!r} (written by jax "
          f"{where.writer_jax}) has no equivalent in jax {where.reader_jax}: "
          f"{why}. Load the file with the JAX release that wrote it, or "
          "re-trace the program under this one")


def xla_metadata_pairs(value) -> tuple[tuple[str, str], ...]:
  """`xla_metadata_call`'s `xla_metadata` (and a dict-like `ad_metadata`):
  string pairs, sorted by key, each key once (JAX 0.11+ canonicalizes the
  values to strings; so does the format)."""
  if (type(value) is not tuple or not all(
      type(p) is tuple and len(p) == 2 and type(p[0]) is str
      and type(p[1]) is str for p in value)):
    raise FormatError(f"xla_metadata_call metadata {value!r:.80} is not a "
                      "tuple of (str, str) pairs")
  keys = [k for k, _ in value]
  if keys != sorted(set(keys)):
    raise FormatError(f"xla_metadata_call metadata keys {keys!r:.80} are "
                      "not sorted or repeat")
  return value


# Primitives that JAX defines from some release on, by name prefix ->
# (the first release line with them, the module that defines them). A reader
# whose release is older says which release the file needs.
RELEASE_PRIMITIVES: dict[str, tuple[tuple[int, int], str]] = {
    "thunky.": ((0, 12), "jax._src.thunky"),
}


def unknown_primitive(where: Where, name: str) -> str:
  for prefix, (first, module) in RELEASE_PRIMITIVES.items():
    if (name.startswith(prefix)
        and release_line(where.reader_jax) < first):
      release = ".".join(map(str, first))
      return (f"primitive {name!r} is one of {module}'s, which JAX has from "
              f"release {release} on; this is jax {where.reader_jax} (the "
              f"file was written by jax {where.writer_jax}). Load the file "
              f"with jax {release} or later")
  return (f"unknown primitive {name!r}: it is not a primitive of jax "
          f"{where.reader_jax} (the file was written by jax "
          f"{where.writer_jax}) and was not registered with "
          "jaxpr_io.register_primitive. Load it with a JAX release that has "
          f"{name!r}, or register the primitive before loading")
