"""Argument recipes for the public-API sweep (`tests/support/public_api.py`):
how to call the functions that need more than one to three (3, 3) arrays.

`RECIPES["module.name"]` maps a variant label ('' for the plain call) to
`(letters, body)`: the arrays the call takes, one per letter (see `array`),
and `body(fn, dtype, *arrays)`, the call itself. Python values (shapes, axes,
callables) are written into the body, so they stay static, as a user's
would be. A recipe that a release or a dtype does not accept is refused by
JAX when traced, and the case is skipped.
"""

from __future__ import annotations

import jax
from jax import lax
import jax.numpy as jnp
import numpy as np

# Letter -> shape of an array of the case's dtype.
_SHAPES = {
    "x": (3, 3), "y": (3, 3), "z": (3, 3), "t": (3, 3),
    "v": (3,), "u": (3,), "w": (2, 3, 3),
    "q": (2, 4, 2, 8),        # (batch, sequence, heads, features)
    "a": (1, 2, 5, 5), "k": (3, 2, 2, 2),  # convolution NCHW / OIHW
}
# Letter -> an array whose dtype is fixed: indices, masks, group sizes, keys.
_FIXED = {
    "i": np.array([2, 0, 1], np.int32),
    "j": np.array([[2, 0, 1], [1, 1, 0], [0, 2, 2]], np.int32),
    "o": np.zeros(3, np.int32),
    "g": np.array([1, 2], np.int32),       # ragged_dot group sizes (sum 3)
    "b": np.array([[True, False, True], [False, True, True],
                   [True, True, False]]),
    "K": np.array([1, 2, 3, 4], np.uint32),  # rng_bit_generator key
}


def array(letter: str, dtype: np.dtype) -> np.ndarray:
  """The deterministic array of `letter` (see `_SHAPES`, `_FIXED`)."""
  if letter in _FIXED:
    return _FIXED[letter]
  shape = _SHAPES[letter]
  rng = np.random.RandomState(ord(letter))
  if dtype == np.bool_:
    return rng.rand(*shape) < 0.5
  if dtype.kind in "iu":
    return rng.randint(-3, 4, shape).astype(dtype)
  real = rng.randn(*shape)
  if dtype.kind == "c":
    real = real + 1j * rng.randn(*shape)
  return real.astype(dtype)


def _zero(a):
  return jnp.zeros((), a.dtype)


def _flip(a):
  return jnp.flip(a, 0)


def _under_vmap(call):
  """A collective over a named axis of size 3: the rows of x."""
  return {"": ("x", lambda f, dt, x: jax.vmap(lambda r: call(f, r),
                                              axis_name="i")(x))}


_GATHER = lax.GatherDimensionNumbers(
    offset_dims=(1,), collapsed_slice_dims=(0,), start_index_map=(0,))
_SCATTER = lax.ScatterDimensionNumbers(
    update_window_dims=(1,), inserted_window_dims=(0,),
    scatter_dims_to_operand_dims=(0,))


def _one(letters, body):
  return {"": (letters, body)}


_JNP = {
    "arange": _one("", lambda f, dt: f(6, dtype=dt)),
    **{n: _one("", lambda f, dt: f((3, 3), dtype=dt))
       for n in ("zeros", "ones", "empty")},
    "full": _one("", lambda f, dt: f((3, 3), 1, dtype=dt)),
    **{n: _one("", lambda f, dt: f(3, dtype=dt)) for n in ("eye", "identity",
                                                         "tri")},
    **{n: _one("", lambda f, dt: f(1, 4, 5, dtype=dt))
       for n in ("linspace", "logspace", "geomspace")},
    "indices": _one("", lambda f, dt: f((2, 3), dtype=dt)),
    **{n: _one("", lambda f, dt: f(3)) for n in ("tril_indices", "triu_indices",
                                                 "diag_indices")},
    "mask_indices": _one("", lambda f, dt: f(3, jnp.triu, size=6)),
    **{n: _one("", lambda f, dt: f(5)) for n in ("bartlett", "blackman",
                                                 "hamming", "hanning")},
    "kaiser": _one("", lambda f, dt: f(5, 2.0)),
    "fromfunction": _one("", lambda f, dt: f(lambda i, j: i + j, (3, 3),
                                             dtype=dt)),
    "reshape": _one("x", lambda f, dt, x: f(x, (9,))),
    "resize": _one("x", lambda f, dt, x: f(x, (2, 5))),
    "astype": _one("x", lambda f, dt, x: f(x, jnp.float32)),
    "take": _one("xi", lambda f, dt, x, i: f(x, i, axis=0)),
    "take_along_axis": _one("xj", lambda f, dt, x, j: f(x, j, axis=0)),
    "put": _one("xi", lambda f, dt, x, i: f(x, i, x[0], inplace=False)),
    "put_along_axis": _one("xj", lambda f, dt, x, j: f(x, j, x, axis=0,
                                                       inplace=False)),
    "choose": _one("jxyz", lambda f, dt, j, x, y, z: f(j, [x, y, z],
                                                       mode="clip")),
    "roll": {"": ("x", lambda f, dt, x: f(x, 1)),
             "axis=0": ("x", lambda f, dt, x: f(x, 1, axis=0))},
    "tile": _one("x", lambda f, dt, x: f(x, (2, 1))),
    "repeat": _one("x", lambda f, dt, x: f(x, 2, axis=0)),
    "moveaxis": _one("x", lambda f, dt, x: f(x, 0, 1)),
    "swapaxes": _one("x", lambda f, dt, x: f(x, 0, 1)),
    "rollaxis": _one("x", lambda f, dt, x: f(x, 1)),
    "expand_dims": _one("x", lambda f, dt, x: f(x, 0)),
    "broadcast_to": _one("x", lambda f, dt, x: f(x, (2, 3, 3))),
    "pad": _one("x", lambda f, dt, x: f(x, 1)),
    **{n: _one("x", lambda f, dt, x: f(x, 3)) for n in ("split", "hsplit",
                                                        "vsplit")},
    "array_split": _one("x", lambda f, dt, x: f(x, 2)),
    "dsplit": _one("w", lambda f, dt, w: f(w, 3)),
    "insert": _one("x", lambda f, dt, x: f(x, 1, x[0], axis=0)),
    "delete": _one("x", lambda f, dt, x: f(x, 1, axis=0)),
    **{n: _one("x", lambda f, dt, x: f(x, 1)) for n in ("partition",
                                                        "argpartition")},
    "top_k": _one("x", lambda f, dt, x: f(x, 2)),
    "einsum": _one("xy", lambda f, dt, x, y: f("ij,jk->ik", x, y)),
    "polyfit": _one("vu", lambda f, dt, v, u: f(v, u, 1)),
    "ravel_multi_index": _one("io", lambda f, dt, i, o: f((i, o), (3, 3),
                                                          mode="clip")),
    "unravel_index": _one("i", lambda f, dt, i: f(i, (3, 3))),
    "histogram2d": _one("vu", lambda f, dt, v, u: f(v, u, bins=3)),
    "bincount": _one("i", lambda f, dt, i: f(i, length=4)),
    **{n: _one("x", lambda f, dt, x: f(x, size=3)) for n in (
        "unique", "unique_all", "unique_counts", "unique_inverse",
        "unique_values", "nonzero", "argwhere", "flatnonzero")},
    "extract": _one("bx", lambda f, dt, b, x: f(b, x, size=3)),
    **{n: _one("xy", lambda f, dt, x, y: f(x, y, size=3)) for n in (
        "intersect1d", "setdiff1d", "setxor1d", "union1d")},
    "compress": _one("x", lambda f, dt, x: f(np.array([True, False, True]),
                                             x, axis=0, size=2)),
    "place": _one("bx", lambda f, dt, b, x: f(x, b, x[0], inplace=False)),
    "select": _one("bxy", lambda f, dt, b, x, y: f([b, ~b], [x, y])),
    "piecewise": _one("x", lambda f, dt, x: f(x, [x == x], [lambda a: a])),
    "where": {"": ("bxy", lambda f, dt, b, x, y: f(b, x, y)),
              "size=3": ("x", lambda f, dt, x: f(x, size=3))},
    "meshgrid": _one("vu", lambda f, dt, v, u: f(v, u)),
    "permute_dims": _one("x", lambda f, dt, x: f(x, (1, 0))),
    "apply_along_axis": _one("x", lambda f, dt, x: f(jnp.flip, 0, x)),
    "apply_over_axes": _one("x", lambda f, dt, x: f(jnp.sum, x, [0])),
    "fill_diagonal": _one("x", lambda f, dt, x: f(x, 0, inplace=False)),
    "block": _one("xy", lambda f, dt, x, y: f([[x, y]])),
    **{n: _one("xy", lambda f, dt, x, y: f([x, y])) for n in (
        "concatenate", "concat", "stack", "hstack", "vstack", "dstack",
        "column_stack")},
    "ix_": _one("vu", lambda f, dt, v, u: f(v, u)),
    "vander": _one("v", lambda f, dt, v: f(v, 3)),
    **{n: _one("v", lambda f, dt, v: f(v)) for n in ("poly", "polyder",
                                                     "polyint")},
    "roots": _one("v", lambda f, dt, v: f(v, strip_zeros=False)),
    "polyval": _one("vx", lambda f, dt, v, x: f(v, x)),
    **{n: _one("vu", lambda f, dt, v, u: f(v, u)) for n in (
        "polyadd", "polysub", "polymul", "polydiv", "convolve", "correlate")},
    **{n: _one("x", lambda f, dt, x: f(x, 50)) for n in ("percentile",
                                                         "nanpercentile")},
    **{n: _one("x", lambda f, dt, x: f(x, 0.5)) for n in ("quantile",
                                                          "nanquantile")},
    "searchsorted": _one("vx", lambda f, dt, v, x: f(v, x)),
    "digitize": _one("xv", lambda f, dt, x, v: f(x, v)),
    "interp": _one("xvu", lambda f, dt, x, v, u: f(x, v, u)),
}

_LINALG = {
    "matrix_power": _one("x", lambda f, dt, x: f(x, 3)),
    "multi_dot": _one("xyz", lambda f, dt, x, y, z: f([x, y, z])),
    "tensorinv": _one("x", lambda f, dt, x: f(x, ind=1)),
    "outer": _one("vu", lambda f, dt, v, u: f(v, u)),
    "tensorsolve": _one("xv", lambda f, dt, x, v: f(x, v)),
    "norm": {"": ("x", lambda f, dt, x: f(x)),
             "ord=nuc": ("x", lambda f, dt, x: f(x, ord="nuc")),
             "axis=0": ("x", lambda f, dt, x: f(x, axis=0))},
}

_FFT = {
    **{n: _one("", lambda f, dt: f(8, dtype=dt)) for n in ("fftfreq",
                                                           "rfftfreq")},
}

_SPECIAL = {
    "sph_harm_y": _one("iovu", lambda f, dt, i, o, v, u: f(i, o, v, u,
                                                           n_max=3)),
    "bessel_jn": _one("x", lambda f, dt, x: f(x, v=1)),
    "zeta": _one("xy", lambda f, dt, x, y: f(x, y)),
    "multigammaln": _one("x", lambda f, dt, x: f(x, 2)),
    "bernoulli": _one("", lambda f, dt: f(3)),
    "hyp2f1": _one("xyzt", lambda f, dt, x, y, z, t: f(x, y, z, t)),
}

_NN = {
    "dot_product_attention": {
        "": ("q", lambda f, dt, q: f(q, q, q)),
        "is_causal=True": ("q", lambda f, dt, q: f(q, q, q, is_causal=True))},
    "one_hot": _one("x", lambda f, dt, x: f(x, 4)),
    "glu": _one("q", lambda f, dt, q: f(q)),
}

_DOT = (((1,), (0,)), ((), ()))

_LAX = {
    "slice": _one("x", lambda f, dt, x: f(x, (0, 1), (2, 3))),
    "slice_in_dim": _one("x", lambda f, dt, x: f(x, 0, 2)),
    "index_in_dim": _one("x", lambda f, dt, x: f(x, 1)),
    "dynamic_slice": _one("xi", lambda f, dt, x, i: f(x, (i[0], i[1]),
                                                      (2, 2))),
    "dynamic_slice_in_dim": _one("xi", lambda f, dt, x, i: f(x, i[2], 2)),
    "dynamic_index_in_dim": _one("xi", lambda f, dt, x, i: f(x, i[2])),
    "dynamic_update_slice": _one("xyi", lambda f, dt, x, y, i: f(
        x, y[:1], (i[2], i[1]))),
    "dynamic_update_slice_in_dim": _one("xyi", lambda f, dt, x, y, i: f(
        x, y[:1], i[2], 0)),
    "dynamic_update_index_in_dim": _one("xyi", lambda f, dt, x, y, i: f(
        x, y[0], i[2], 0)),
    "pad": _one("x", lambda f, dt, x: f(x, _zero(x), ((1, 0, 0), (0, 1, 1)))),
    "reshape": _one("x", lambda f, dt, x: f(x, (9,))),
    "broadcast": _one("x", lambda f, dt, x: f(x, (2,))),
    "broadcast_in_dim": _one("x", lambda f, dt, x: f(x, (2, 3, 3), (1, 2))),
    "broadcast_to_rank": _one("x", lambda f, dt, x: f(x, 3)),
    "expand_dims": _one("x", lambda f, dt, x: f(x, (0,))),
    "squeeze": _one("x", lambda f, dt, x: f(x[None], (0,))),
    "transpose": _one("x", lambda f, dt, x: f(x, (1, 0))),
    "rev": _one("x", lambda f, dt, x: f(x, (0,))),
    "collapse": _one("x", lambda f, dt, x: f(x, 0, 2)),
    "tile": _one("x", lambda f, dt, x: f(x, (2, 1))),
    "split": _one("x", lambda f, dt, x: f(x, (1, 2), axis=0)),
    "concatenate": _one("xy", lambda f, dt, x, y: f([x, y], 0)),
    "dot_general": {
        "": ("xy", lambda f, dt, x, y: f(x, y, _DOT)),
        "preferred_element_type=float32": ("xy", lambda f, dt, x, y: f(
            x, y, _DOT, preferred_element_type=jnp.float32))},
    "dot": {"": ("xy", lambda f, dt, x, y: f(x, y)),
            "preferred_element_type=float32": ("xy", lambda f, dt, x, y: f(
                x, y, preferred_element_type=jnp.float32))},
    "batch_matmul": _one("w", lambda f, dt, w: f(w, w)),
    "conv_general_dilated": _one("ak", lambda f, dt, a, k: f(
        a, k, (1, 1), "SAME")),
    "conv": _one("ak", lambda f, dt, a, k: f(a, k, (1, 1), "VALID")),
    "conv_with_general_padding": _one("ak", lambda f, dt, a, k: f(
        a, k, (1, 1), ((0, 0), (1, 1)), None, None)),
    "conv_transpose": _one("ak", lambda f, dt, a, k: f(
        a, k, (1, 1), "SAME", dimension_numbers=("NCHW", "OIHW", "NCHW"))),
    "conv_general_dilated_patches": _one("a", lambda f, dt, a: f(
        a, (2, 2), (1, 1), "VALID")),
    **{n: _one("x", lambda f, dt, x: f(x, (0,))) for n in (
        "reduce_sum", "reduce_max", "reduce_min", "reduce_prod", "reduce_and",
        "reduce_or", "reduce_xor")},
    **{n: _one("x", lambda f, dt, x: f(x, 0, jnp.int32)) for n in (
        "argmax", "argmin")},
    "reduce": _one("x", lambda f, dt, x: f(x, _zero(x), lax.max, (0,))),
    "reduce_window": _one("x", lambda f, dt, x: f(
        x, _zero(x), lax.max, (2, 2), (1, 1), "VALID")),
    "reduce_precision": _one("x", lambda f, dt, x: f(x, 5, 10)),
    "convert_element_type": _one("x", lambda f, dt, x: f(x, jnp.float32)),
    "bitcast_convert_type": _one("x", lambda f, dt, x: f(x, jnp.int32)),
    "iota": _one("", lambda f, dt: f(dt, 4)),
    "broadcasted_iota": _one("", lambda f, dt: f(dt, (3, 3), 0)),
    "full": _one("", lambda f, dt: f((3, 3), 1, dt)),
    "full_like": _one("x", lambda f, dt, x: f(x, 1)),
    "integer_pow": _one("x", lambda f, dt, x: f(x, 3)),
    "select": _one("bxy", lambda f, dt, b, x, y: f(b, x, y)),
    "select_n": _one("bxy", lambda f, dt, b, x, y: f(b, x, y)),
    **{n: _one("x", lambda f, dt, x: f(x, 2)) for n in (
        "top_k", "approx_max_k", "approx_min_k")},
    "gather": _one("xi", lambda f, dt, x, i: f(x, i[:, None], _GATHER,
                                               (1, 3))),
    **{n: _one("xiy", lambda f, dt, x, i, y: f(x, i[:, None], y, _SCATTER))
       for n in ("scatter", "scatter_add", "scatter_sub", "scatter_mul",
                 "scatter_min", "scatter_max")},
    "scatter_apply": _one("xi", lambda f, dt, x, i: f(
        x, i[:, None], jnp.negative, _SCATTER, update_shape=(3, 3))),
    "index_take": _one("xi", lambda f, dt, x, i: f(x, (i,), (0,))),
    "rng_uniform": _one("", lambda f, dt: f(jnp.zeros((), dt),
                                            jnp.ones((), dt), (3,))),
    "rng_bit_generator": _one("K", lambda f, dt, k: f(k, (3, 3))),
    "fft": _one("x", lambda f, dt, x: f(x, "fft", (3,))),
    "cond": _one("bx", lambda f, dt, b, x: f(b[0, 0], lambda a: a, _flip, x)),
    "switch": _one("ix", lambda f, dt, i, x: f(i[0], [lambda a: a, _flip],
                                               x)),
    "while_loop": _one("x", lambda f, dt, x: f(
        lambda c: c[0] < 3, lambda c: (c[0] + 1, _flip(c[1])), (0, x))),
    "fori_loop": _one("x", lambda f, dt, x: f(0, 3, lambda k, a: _flip(a),
                                              x)),
    "scan": _one("x", lambda f, dt, x: f(
        lambda c, r: (jnp.maximum(c, r), c), x[0], x)),
    "map": _one("x", lambda f, dt, x: f(_flip, x)),
    "associative_scan": _one("x", lambda f, dt, x: f(jnp.maximum, x)),
    # Root of y - x, solved by one Newton step (the slope is 1).
    "custom_root": _one("x", lambda f, dt, x: f(
        lambda y: y - x, jnp.zeros_like(x), lambda g, y: y - g(y),
        lambda g, y: y)),
    "custom_linear_solve": _one("x", lambda f, dt, x: f(
        lambda v: v, x, lambda matvec, b: b)),
    "composite": _one("x", lambda f, dt, x: f(_flip, name="jaxpr_io.flip")(
        x)),
    "platform_dependent": _one("x", lambda f, dt, x: f(
        x, default=_flip, cpu=lambda a: a)),
    **{n: _under_vmap(lambda f, r: f(r, "i")) for n in (
        "psum", "pmax", "pmin", "pmean", "all_gather")},
    "axis_index": _under_vmap(lambda f, r: f("i")),
    "axis_size": _under_vmap(lambda f, r: r * f("i")),
    "pswapaxes": _under_vmap(lambda f, r: f(r, "i", 0)),
    "pbroadcast": _under_vmap(lambda f, r: f(r, "i", 0)),
    "after_all": _one("", lambda f, dt: f(lax.create_token(),
                                          lax.create_token())),
    "ppermute": _under_vmap(lambda f, r: f(r, "i", [(0, 1), (1, 2), (2, 0)])),
    "pshuffle": _under_vmap(lambda f, r: f(r, "i", [1, 2, 0])),
    "psum_scatter": _under_vmap(lambda f, r: f(r, "i", tiled=True)),
    "all_to_all": _under_vmap(lambda f, r: f(r, "i", 0, 0, tiled=True)),
    "ragged_dot": {
        "": ("xwg", lambda f, dt, x, w, g: f(x, w, g)),
        "preferred_element_type=float32": ("xwg", lambda f, dt, x, w, g: f(
            x, w, g, preferred_element_type=jnp.float32))},
}

RECIPES = {
    **{f"jnp.{n}": r for n, r in _JNP.items()},
    **{f"jnp.linalg.{n}": r for n, r in _LINALG.items()},
    **{f"jnp.fft.{n}": r for n, r in _FFT.items()},
    **{f"jax.scipy.special.{n}": r for n, r in _SPECIAL.items()},
    **{f"jax.nn.{n}": r for n, r in _NN.items()},
    **{f"lax.{n}": r for n, r in _LAX.items()},
}
