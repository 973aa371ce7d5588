"""Shardings of bound inputs (docs/scale.md).

Two rules:

* A bound `jax.Array` stays on its devices, with its sharding, whichever
  process holds which of its shards: nothing is fetched to the host. If
  the program's input type declares a sharding (an aval over a mesh with
  Explicit axes, `jax.typeof(x).sharding`), the array's own type must
  declare the same: the same mesh axes (names, sizes, types) and the same
  spec. An input without one (Auto axes, no mesh: what most programs
  have) takes an array of any sharding, as a call does.
* An array of an Orbax checkpoint is restored with, in this order, the
  sharding its caller gives (`load_source(..., shardings=, mesh=)`), the
  one the program's input type declares (its Explicit spec, on the
  caller's mesh, the mesh of the jit that takes the input, or the current
  mesh), or the `in_shardings` of the top-level `jit` that takes the input
  directly. Without any of these it is read whole into a numpy array on
  every process, as before.
"""

from __future__ import annotations

import math
from typing import Any

import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxpr_io import compat


def is_device_array(x) -> bool:
  """Whether `x` is a concrete `jax.Array` (not a tracer, not numpy)."""
  return type(x) in compat.jax_array_types()


def _mesh_axes(mesh) -> tuple:
  return (tuple(mesh.axis_names), tuple(mesh.axis_sizes),
          tuple(getattr(mesh, "axis_types", ())))


def _padded(spec, ndim: int) -> tuple:
  """A spec's entries, one per dimension (trailing None made explicit)."""
  entries = tuple(spec)
  return entries + (None,) * (ndim - len(entries))


def declared(aval):
  """The `NamedSharding` (on an abstract mesh) that the type `aval`
  declares, or None. Only a mesh with an Explicit axis declares one: JAX
  types an array on a mesh of Auto axes with that mesh and an empty spec,
  which says nothing of where its shards are."""
  sharding = getattr(aval, "sharding", None)
  mesh = getattr(sharding, "mesh", None)
  if mesh is None or getattr(mesh, "empty", True):
    return None
  explicit = jax.sharding.AxisType.Explicit
  if not any(t == explicit for t in getattr(mesh, "axis_types", ())):
    return None
  return sharding


def _text(sharding, ndim: int) -> str:
  if sharding is None:
    return "without an Explicit mesh axis"
  names = ", ".join(f"{n}={s}" for n, s in zip(sharding.mesh.axis_names,
                                                sharding.mesh.axis_sizes))
  return f"P{_padded(sharding.spec, ndim)} over the mesh ({names})"


def check_array(x, aval, shown: str) -> None:
  """TypeError unless the sharding of the `jax.Array` `x` is compatible
  with the one `aval` declares (module doc): the same mesh axes and spec.
  An input that declares none takes any sharding."""
  want = declared(aval)
  if want is None:
    return
  ndim = len(aval.shape)
  got = declared(jax.typeof(x))
  if got is not None and _mesh_axes(got.mesh) == _mesh_axes(want.mesh) and (
      _padded(got.spec, ndim) == _padded(want.spec, ndim)):
    return
  raise TypeError(
      f"bind {shown}: the program takes {aval.str_short()} sharded as "
      f"{_text(want, ndim)}; the array is sharded as {_text(got, ndim)}: "
      f"jax.device_put it to NamedSharding(mesh, "
      f"P{_padded(want.spec, ndim)}) on a mesh of those axes first")


def _jit_sharding(jaxpr, index: int):
  """The concrete `in_shardings` entry of the first top-level `jit` that
  takes input `index` directly, or None."""
  var = jaxpr.invars[index]
  for eqn in jaxpr.eqns:
    shardings = eqn.params.get("in_shardings")
    if shardings is None:
      continue
    for operand, sharding in zip(eqn.invars, shardings):
      if operand is var and isinstance(sharding, jax.sharding.Sharding) and (
          not isinstance(getattr(sharding, "mesh", None),
                         jax.sharding.AbstractMesh)):
        return sharding
  return None


def _current_mesh():
  """The concrete mesh of `jax.set_mesh` / `jax.sharding.use_mesh`, if
  any."""
  get = getattr(jax.sharding, "get_mesh", None)
  mesh = get() if get is not None else None
  return mesh if isinstance(mesh, Mesh) and not mesh.empty else None


def for_input(closed, index: int, mesh: Mesh | None = None):
  """The sharding to restore input `index` of `closed` with when its
  caller gives none (module doc), or None (read as numpy)."""
  aval = closed.in_avals[index]
  jitted = _jit_sharding(closed.jaxpr, index)
  want = declared(aval)
  if want is not None:
    meshes = [mesh, getattr(jitted, "mesh", None), _current_mesh()]
    for concrete in meshes:
      if isinstance(concrete, Mesh) and (
          _mesh_axes(concrete) == _mesh_axes(want.mesh)):
        return NamedSharding(concrete, want.spec)
    return None
  if jitted is not None and mesh is not None and isinstance(
      jitted, NamedSharding) and (
          _mesh_axes(jitted.mesh)[:2] == _mesh_axes(mesh)[:2]):
    return NamedSharding(mesh, jitted.spec)  # the caller's devices
  return jitted


def given(value: Any, mesh: Mesh | None, where: str):
  """A caller's sharding: a `Sharding` as is, a `PartitionSpec` on `mesh`,
  None as None; TypeError otherwise."""
  if value is None or isinstance(value, jax.sharding.Sharding):
    return value
  if isinstance(value, PartitionSpec):
    if mesh is None:
      raise TypeError(f"{where}: the sharding {value} is a PartitionSpec; "
                      "pass mesh= too (a jax.sharding.Mesh), or give a "
                      "NamedSharding")
    return NamedSharding(mesh, value)
  raise TypeError(f"{where}: a sharding is a jax.sharding.Sharding, a "
                  f"PartitionSpec (with mesh=) or None, not "
                  f"{type(value).__name__}")


def place(array, sharding):
  """Host `array` as a `jax.Array` with `sharding`: each process puts
  only the pieces its devices hold."""
  return jax.make_array_from_callback(array.shape, sharding,
                                      lambda index: array[index])


def make_mesh(closed, names: tuple, sizes: tuple) -> Mesh:
  """A mesh of axes `names` of `sizes` over this process's devices
  (`jax.make_mesh`), its axis types those of a mesh of the same axes that
  an input of `closed` declares, else Auto. ValueError if the devices do
  not fill it."""
  if math.prod(sizes) != jax.device_count():
    raise ValueError(f"a mesh of {math.prod(sizes)} devices over the "
                     f"{jax.device_count()} of this job")
  types = (jax.sharding.AxisType.Auto,) * len(names)
  for aval in closed.in_avals:
    want = declared(aval)
    if want is not None and _mesh_axes(want.mesh)[:2] == (names, sizes):
      types = tuple(want.mesh.axis_types)
      break
  return jax.make_mesh(sizes, names, axis_types=types)
