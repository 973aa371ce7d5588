"""Pallas kernels (jaxpr_io/families/pallas/core.py): interpret-mode kernels with refs,
grids, BlockSpecs and scratch run after loading as the original; each
backend's compiler params are stored, and a GPU kernel lowers for CUDA from
its file on a machine without a GPU; untrusted files cannot set compiler
flags; records are stored by field name."""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

import jaxpr_io
from tests.support import proto_edit
from jaxpr_io import converters
from tests.support.roundtrip import (assert_bit_identical, assert_roundtrip,
                             assert_same_outcome)

X = np.arange(16 * 128, dtype=np.float32).reshape(16, 128) / 100.0
Y = np.cos(X)


def _blocked_kernel(compiler_params=None, interpret=True):
  def kernel(x_ref, y_ref, o_ref, acc_ref):
    i = pl.program_id(0)
    acc_ref[...] = jnp.tanh(x_ref[...]) * 2.0 + y_ref[...]
    o_ref[...] = acc_ref[...] + i.astype(jnp.float32)

  spec = pl.BlockSpec((8, 128), lambda i: (i, 0))
  return pl.pallas_call(
      kernel, out_shape=jax.ShapeDtypeStruct((16, 128), jnp.float32),
      grid=(2,), in_specs=[spec, spec], out_specs=spec,
      scratch_shapes=[pltpu.VMEM((8, 128), jnp.float32)],
      compiler_params=compiler_params, interpret=interpret)


def test_interpret_kernel_with_grid_blocks_and_scratch():
  f = _blocked_kernel()
  prog = jaxpr_io.trace(f, X, Y)
  loaded = assert_roundtrip(prog)
  assert_bit_identical(loaded(X, Y), f(X, Y))
  assert_same_outcome(jax.vmap, f, loaded, np.stack([X, Y]), np.stack([Y, X]))
  # The grid and blocks, index maps included (jaxprs compare by identity).
  got = loaded.closed_jaxpr.jaxpr.eqns[0].params["grid_mapping"]
  want = prog.closed_jaxpr.jaxpr.eqns[0].params["grid_mapping"]
  assert (got.grid, got.num_inputs, got.num_outputs, got.scratch_avals) == (
      want.grid, want.num_inputs, want.num_outputs, want.scratch_avals)
  for a, b in zip(got.block_mappings, want.block_mappings, strict=True):
    assert (a.block_shape, a.array_aval, a.transformed_block_aval) == (
        b.block_shape, b.array_aval, b.transformed_block_aval)
    assert str(a.index_map_jaxpr) == str(b.index_map_jaxpr)


def test_tpu_compiler_params_round_trip():
  params = pltpu.CompilerParams(dimension_semantics=("parallel",),
                                vmem_limit_bytes=1 << 20)
  prog = jaxpr_io.trace(_blocked_kernel(params), X, Y)
  loaded = assert_roundtrip(prog)
  assert loaded.closed_jaxpr.jaxpr.eqns[0].params["compiler_params"] == params


def test_untrusted_file_cannot_set_mosaic_flags():
  params = pltpu.CompilerParams(flags={"xla_tpu_some_flag": True})
  data = jaxpr_io.dumps(jaxpr_io.trace(_blocked_kernel(params), X, Y))
  with pytest.warns(jaxpr_io.DroppedParamWarning,
                    match="compiler_params.flags"):
    loaded = jaxpr_io.loads(data)
  got = loaded.closed_jaxpr.jaxpr.eqns[0].params["compiler_params"]
  assert got.flags is None
  assert_bit_identical(loaded(X, Y), _blocked_kernel()(X, Y))
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    trusted = jaxpr_io.loads(data, trusted=True)
  assert trusted.closed_jaxpr.jaxpr.eqns[0].params["compiler_params"] == params


def _gpu_mesh():
  """An abstract mesh on an H100, for lowering GPU kernels without a GPU."""
  device = jax.sharding.AbstractDevice(device_kind="NVIDIA H100",
                                       num_cores=None, platform="cuda")
  return jax.sharding.AbstractMesh((1,), ("x",), abstract_device=device)


def test_triton_kernel_lowers_for_cuda_from_its_file():
  def kernel(x_ref, o_ref):
    o_ref[...] = jnp.tanh(x_ref[...]) * 2.0
  spec = pl.BlockSpec((32, 64), lambda i: (i, 0))
  params = pltriton.CompilerParams(num_warps=4, num_stages=2)
  f = pl.pallas_call(kernel,
                     out_shape=jax.ShapeDtypeStruct((64, 64), jnp.float32),
                     grid=(2,), in_specs=[spec], out_specs=spec,
                     compiler_params=params)
  x = jnp.ones((64, 64))
  # Traced as for an H100: the equations' context names the device, so
  # the loaded program lowers for it anywhere.
  with jax.sharding.use_abstract_mesh(_gpu_mesh()):
    prog = jaxpr_io.trace(f, x)
  loaded = assert_roundtrip(prog, check=False)  # no GPU to compile for
  assert loaded.closed_jaxpr.jaxpr.eqns[0].params["compiler_params"] == params
  checks = [jax.export.DisabledSafetyCheck.custom_call("__gpu$xla.gpu.triton")]
  with jax.sharding.use_abstract_mesh(_gpu_mesh()):
    exported = converters.to_exported(loaded, platforms=["cuda"],
                                      disabled_checks=checks)
    want = jax.export.export(jax.jit(f), platforms=["cuda"],
                             disabled_checks=checks)(x)
  assert exported.platforms == ("cuda",)
  module = exported.mlir_module()
  assert "__gpu$xla.gpu.triton" in module
  assert "num_warps = 4" in module and "num_stages = 2" in module
  assert module.count("__gpu$xla.gpu.triton") == want.mlir_module().count(
      "__gpu$xla.gpu.triton")


def test_a_field_this_jax_lacks_is_named():
  params = pltpu.CompilerParams(vmem_limit_bytes=1 << 20)
  data = jaxpr_io.dumps(jaxpr_io.trace(_blocked_kernel(params), X, Y))
  data = proto_edit.rename_string(data, "vmem_limit_bytes", "vmem_limit_bytes_v9")
  with pytest.raises(jaxpr_io.FormatError,
                     match="has no field 'vmem_limit_bytes_v9'"):
    jaxpr_io.loads(data)


def test_callables_in_grid_mapping_are_refused():
  prog = jaxpr_io.trace(_blocked_kernel(), X, Y)
  eqn = prog.closed_jaxpr.jaxpr.eqns[0]
  grid_mapping = eqn.params["grid_mapping"]
  import dataclasses  # pylint: disable=g-import-not-at-top
  bad = dataclasses.replace(grid_mapping, get_grid_indices=lambda *a: a)
  eqn.params["grid_mapping"] = bad
  try:
    with pytest.raises(jaxpr_io.UnsupportedError,
                       match="get_grid_indices.*Python callable"):
      jaxpr_io.dumps(prog)
  finally:
    eqn.params["grid_mapping"] = grid_mapping


def _aval_index(msg, shape):
  for i, a in enumerate(msg.avals):
    if (a.WhichOneof("kind") == "shaped_array"
        and (list(a.shaped_array.sizes)
             or [d.size for d in a.shaped_array.shape]) == list(shape)):
      return i
  raise AssertionError(f"no aval of shape {shape}")


def test_kernel_with_symbolic_block_shapes_is_refused():
  # Found by the fuzzer: a symbolic dimension in the kernel's array types
  # passed check=True, then failed at the first call.
  data = jaxpr_io.dumps(jaxpr_io.trace(_blocked_kernel(), X, Y))
  msg = proto_edit.message(data)
  shape = proto_edit.dims(msg.avals[_aval_index(msg, (16, 128))])
  msg.strings.append("b")
  shape[0].expr = len(msg.strings) - 1
  with pytest.raises(jaxpr_io.FormatError,
                     match="symbolic dimension; Pallas kernels need concrete"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_operands_must_match_the_block_mappings():
  data = jaxpr_io.dumps(jaxpr_io.trace(_blocked_kernel(), X, Y))
  msg = proto_edit.message(data)
  root = msg.jaxprs[msg.closed_jaxprs[msg.root].jaxpr]
  root.invars[0] = _aval_index(msg, (8, 128))  # the first input, retyped
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"pallas_call input 0 has type float32\[8,128\]"):
    jaxpr_io.loads(proto_edit.reframe(msg, data), check=True)


def test_index_map_tree_must_be_args_and_kwargs():
  # Found by the fuzzer (campaign seed 104, case 1631): the grid's
  # index_map_tree replaced by a single leaf, of the right leaf count,
  # passed check=True; Pallas's batching rule unflattens it into (args,
  # kwargs) and vmap failed inside it.
  data = jaxpr_io.dumps(jaxpr_io.trace(_blocked_kernel(), X, Y))
  msg = proto_edit.message(data)
  (grid,) = [p.value.record for ps in msg.param_sets for p in ps.params
             if msg.strings[p.name] == "grid_mapping"]
  (field,) = [f for f in grid.fields
              if msg.strings[f.tuple.items[0].str] == "index_map_tree"]
  tree = field.tuple.items[1].treedef
  tree.Clear()
  tree.kind = msg.tree_nodes[0].__class__.Kind.Value("LEAF")
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"index_map_tree PyTreeDef\(\*\) is not \(args "
                     r"tuple, \{\}\)"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def _grid_field(msg, name: str):
  """The stored field `name` of the program's one GridMapping record."""
  (grid,) = [p.value.record for ps in msg.param_sets for p in ps.params
             if msg.strings[p.name] == "grid_mapping"]
  (field,) = [f for f in grid.fields
              if msg.strings[f.tuple.items[0].str] == name]
  return field.tuple.items[1]


def test_vmapped_dims_must_be_dimensions_of_the_grid():
  # Found by the fuzzer (campaign seed 104, case 33859): the grid's
  # vmapped_dims replaced by another stored tuple (a block shape's
  # ("block_size", 128)) passed check=True; Pallas's batching rule adds 1
  # to each and vmap failed inside it.
  data = jaxpr_io.dumps(jaxpr_io.trace(_blocked_kernel(), X, Y))
  msg = proto_edit.message(data)
  dims = _grid_field(msg, "vmapped_dims")
  dims.Clear()
  dims.ints.items.append(1)  # the grid has one dimension: 0 only
  with pytest.raises(jaxpr_io.FormatError,
                     match=r"vmapped_dims \(1,\) are not distinct "
                     r"dimensions of the 1-dimensional grid"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_block_mappings_must_be_the_inputs_and_outputs():
  data = jaxpr_io.dumps(jaxpr_io.trace(_blocked_kernel(), X, Y))
  msg = proto_edit.message(data)
  count = _grid_field(msg, "num_inputs")
  count.int += 1
  with pytest.raises(jaxpr_io.FormatError,
                     match="do not add up to the 3 block mappings"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))


def test_index_map_tree_must_fit_the_index_map_avals():
  # Found by the fuzzer (issue 28): a shared tree node made the grid's
  # index_map_tree ((i, j), {}) for index maps of one grid index; the file
  # passed check=True and vmap failed inside Pallas's batching rule.
  data = jaxpr_io.dumps(jaxpr_io.trace(_blocked_kernel(), X, Y))
  msg = proto_edit.message(data)
  nodes = list(msg.tree_nodes)
  index = next(i for i, t in enumerate(nodes) if len(t.children) == 2
               and t.children[0].shared
               and len(nodes[t.children[0].shared - 1].children) == 1)
  # An earlier node of two leaves (the kernel's operands (x, y)).
  pair = next(j for j in range(index) if len(nodes[j].children) == 2
              and not any(c.children or c.shared for c in nodes[j].children))
  msg.tree_nodes[index].children[0].shared = pair + 1
  with pytest.raises(jaxpr_io.FormatError,
                     match="index_map_tree has 2 leaves but index_map_avals 1"):
    jaxpr_io.loads(proto_edit.reframe(msg, data))
