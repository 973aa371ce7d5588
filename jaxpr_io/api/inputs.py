"""The dtype check of a call: each input's type against the program's.

A traced function under `jax.jit` is traced again for every new input
dtype; a program is a jaxpr of fixed dtypes, and `eval_jaxpr` trusts its
arguments (an int32 label read as float32 gives `nan`, a uint8 one an XLA
error deep in the compiler, an int32 image a convolution error that names
no input). So a call checks each input's dtype, as it checks shapes, and
accepts what `jax.jit` of the original would run as *the same program*:

* an array (or NumPy scalar, or tracer) of exactly the input's dtype, after
  JAX's canonicalization (a float64 NumPy array is float32 unless x64 is
  enabled, as JAX passes it);
* a weakly typed value (a Python `bool`/`int`/`float`/`complex`, or a weakly
  typed JAX value) whose promotion with the input's dtype is that dtype
  (`jnp.result_type(value, dtype) == dtype`): a Python float or int into a
  float32 or bfloat16 input, a Python int into an int8 or uint32 input. It
  is converted to the input's dtype, as the original's first operation on
  it would promote it.
* A typed PRNG key array whose key type (its impl: `key<fry>`, `key<rbg>`)
  is the input's.

Anything else is a one-line TypeError naming the input's key path, the
type the program takes and the type found. Under `jax.jit` the original
would accept more: a Python float into an int32 input, or float32 labels
where int32 were traced, retrace the original at the new dtype, which is a
different program than the one stored; the loaded program refuses them
(cast the value, or trace the program at that dtype).
"""

from __future__ import annotations

from typing import Callable, Sequence

import jax
import jax.numpy as jnp

_PYTHON_SCALARS = {bool: "bool", int: "int", float: "float",
                   complex: "complex"}


def _found_type(x) -> str:
  """The type of `x` as a message shows it."""
  found = jax.typeof(x)
  text = found.str_short()
  if getattr(found, "weak_type", False):
    text = f"weakly typed {text}"
  name = _PYTHON_SCALARS.get(type(x))
  if name is not None:
    return f"a Python {name} ({text})"
  return f"a {text}" if text.startswith("weakly") else text


def _promotes(x, found, aval) -> bool:
  """Whether the weakly typed `x` promotes to `aval`'s dtype."""
  if not getattr(found, "weak_type", False):
    return False
  try:
    return jnp.result_type(x, aval.dtype) == aval.dtype
  except TypeError:  # key types, extended dtypes: no promotion
    return False


def check_dtypes(avals: Sequence, flat: list, skip: Sequence[bool],
                 path_of: Callable[[int], str]) -> list:
  """`flat` with each input checked against the dtype of its aval in
  `avals` (see the module docstring), weakly typed values converted;
  `skip[i]` leaves input `i` alone (boxes, refs, tokens). `path_of(i)` is
  input `i`'s key path, for the message. Raises TypeError."""
  out = None
  for i, (x, aval) in enumerate(zip(flat, avals)):
    if skip[i] or not hasattr(aval, "dtype"):
      continue
    try:
      found = jax.typeof(x)
    except TypeError:
      raise TypeError(f"input {path_of(i)} is a {type(x).__name__}, but the "
                      f"program takes {aval.str_short()}") from None
    if getattr(found, "dtype", None) is None or found.dtype == aval.dtype:
      continue
    if _promotes(x, found, aval):
      if out is None:
        out = list(flat)
      out[i] = jnp.asarray(x, aval.dtype)
      continue
    raise TypeError(f"input {path_of(i)} is {_found_type(x)}, but the "
                    f"program takes {aval.str_short()} (cast it, or trace "
                    "the program with that dtype)")
  return flat if out is None else out
