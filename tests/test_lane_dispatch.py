"""``run_where``: a per-lane function run only on the lanes that need it, chunk by chunk,
equals computing it on every lane and selecting, bit for bit, for any mask and chunk."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax.lane_dispatch import run_where

B = 37


def fn(x, y):
    """Per-lane work with a pytree result of two ranks and dtypes."""
    return {"a": jnp.sin(x) * y.sum(), "b": (y * 3 + jnp.int32(x > 0)).astype(jnp.int32)}


def _lanes(seed: int) -> tuple[jax.Array, jax.Array]:
    """Random per-lane inputs x [B] float and y [B, 4] int."""
    kx, ky = jax.random.split(jax.random.key(seed))
    return jax.random.normal(kx, (B,)), jax.random.randint(ky, (B, 4), -5, 5)


@partial(jax.jit, static_argnums=3)
def both(need, x, y, chunk):
    out = {"a": jnp.full(B, -7.0), "b": jnp.full((B, 4), -1, jnp.int32)}
    want = jax.tree_util.tree_map(
        lambda r, o: jnp.where(need.reshape((B,) + (1,) * (r.ndim - 1)), r, o),
        jax.vmap(fn)(x, y),
        out,
    )
    return run_where(need, fn, (x, y), out, chunk), want


@settings(max_examples=60, deadline=None)
@given(
    bits=st.lists(st.booleans(), min_size=B, max_size=B),
    chunk=st.sampled_from([1, 5, 8, 36, 37, 50]),
    seed=st.integers(0, 2**16),
)
def test_run_where_equals_select_over_every_lane(bits, chunk, seed):
    got, want = both(jnp.array(bits), *_lanes(seed), chunk)
    for g, w in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))


def test_run_where_with_no_lane_or_every_lane_needed():
    """The loop's edge cases: no chunk runs (``out`` unchanged), and every lane with a last
    chunk that starts early (B = 37 is no multiple of 8)."""
    x = jnp.linspace(-2.0, 2.0, B)
    y = jnp.arange(4 * B, dtype=jnp.int32).reshape(B, 4)
    for need in (jnp.zeros(B, bool), jnp.ones(B, bool)):
        got, want = both(need, x, y, 8)
        for g, w in zip(
            jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(want), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
    got, _ = both(jnp.zeros(B, bool), x, y, 8)
    assert (np.asarray(got["a"]) == -7.0).all()


def masked_fn(x, y):
    """Two outputs; the second is kept only where the lane's own result says so."""
    values = fn(x, y)
    return (values["a"], values["b"]), (True, values["a"] > 0)


@partial(jax.jit, static_argnums=3)
def both_masked(need, x, y, chunk):
    out = (jnp.full(B, -7.0), jnp.full((B, 4), -1, jnp.int32))
    (a, b), (_, keep_b) = jax.vmap(masked_fn)(x, y)
    want = (jnp.where(need, a, out[0]), jnp.where((need & keep_b)[:, None], b, out[1]))
    return run_where(need, masked_fn, (x, y), out, chunk, masked=True), want


@settings(max_examples=40, deadline=None)
@given(
    bits=st.lists(st.booleans(), min_size=B, max_size=B),
    chunk=st.sampled_from([1, 6, 37]),
    seed=st.integers(0, 2**16),
)
def test_masked_outputs_are_written_only_where_kept(bits, chunk, seed):
    got, want = both_masked(jnp.array(bits), *_lanes(seed), chunk)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(g), np.asarray(w))
