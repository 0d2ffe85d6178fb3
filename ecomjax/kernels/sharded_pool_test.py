"""Row-sharded evaluation pools equal one device's bit for bit.

The merge is tested here in-process with hypothesis (random keys, masks and block cuts);
the 8-device check runs in a subprocess (``run_on_host_devices``), since the simulated
device count is an XLA flag read once when JAX starts. The multi-process check is in
``tests/test_distributed.py``.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax.kernels.pool import pool_stats_reference
from ecomjax.kernels.sharded_pool import merge_pool_stats
from ecomjax.sharding import run_on_host_devices
from tests.support.child_cache import share_compile_cache


def member(args, idx):
    keys, mask = args
    return mask[idx], keys[idx]


@functools.cache
def stats(n: int, k: int):
    return jax.jit(lambda keys, mask: pool_stats_reference(member, (keys, mask), n, k))


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 60),
    k=st.sampled_from([1, 3, 8, 70]),
    cuts=st.lists(st.integers(0, 60), max_size=4),
    seed=st.integers(0, 2**31 - 1),
)
def test_merged_blocks_are_the_whole(n: int, k: int, cuts: list[int], seed: int) -> None:
    """Statistics of disjoint row blocks merge into those of all rows: count, extremes and
    the k largest keys, ties (few distinct keys), empty blocks and k > n included."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(-3, 4, n).astype(np.float32)
    mask = rng.random(n) < 0.6
    bounds = [0, *sorted(min(c, n) for c in cuts), n]
    parts = [
        stats(b - a, k)(jnp.asarray(keys[a:b]), jnp.asarray(mask[a:b]))
        for a, b in zip(bounds[:-1], bounds[1:], strict=True)
        if b > a
    ]
    blocks = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *parts)
    got = merge_pool_stats(blocks, k)
    want = stats(n, k)(jnp.asarray(keys), jnp.asarray(mask))
    for a, b in zip(got, want, strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_sharded_pool_eight_devices() -> None:
    """Rows split over 8 simulated CPU devices: every episode's pool statistics equal one
    device's and the reference's (exact and float keys)."""
    share_compile_cache()
    report = run_on_host_devices("pool", n_devices=8, timeout=600)
    assert report == {"devices": 8, "n": 1003, "cases": 5, "identical": True}
