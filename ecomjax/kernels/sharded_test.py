"""Multi-device retrieval and rollouts equal their single-device results bit for bit.

The 8-device checks run in a subprocess (``ecomjax.sharding.run_on_host_devices``): the
simulated device count is an XLA flag read once when JAX starts. The merge and the plan
re-cut are also tested here in-process, where hypothesis can vary them cheaply.
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ecomjax.kernels.sharded import merge_topk, pad_rows
from ecomjax.sharding import run_on_host_devices, shard_plan
from tests.support.child_cache import share_compile_cache
from tests.support.topk_oracle import np_topk


def table_score(queries, rows, idx):
    del idx
    return rows[:, queries].T


@functools.cache
def merged(k: int):
    return jax.jit(lambda s, i: merge_topk(s, i, k))


@settings(max_examples=30, deadline=None)
@given(
    blocks=st.sampled_from([1, 3, 5]),
    k=st.sampled_from([1, 4, 9]),
    table=hnp.arrays(
        np.float32, (40, 2), elements=st.sampled_from([-np.inf, 0.0, 1.0, 2.0, 5.0, np.inf])
    ),
)
def test_merge_of_block_topks_is_the_global_topk(blocks: int, k: int, table) -> None:
    """Split rows into contiguous blocks, take each block's exact top-k, merge: == global."""
    n = table.shape[0]
    cuts = np.linspace(0, n, blocks + 1).astype(int)
    parts_s, parts_i = [], []
    for a, b in zip(cuts[:-1], cuts[1:], strict=True):
        bs, bi, _ = np_topk(table[a:b].T, k)
        parts_s.append(bs)
        parts_i.append(np.where(bi >= 0, bi + a, -1))
    # blocks in reverse device order: the merge must not rely on the gather order
    got_s, got_i = merged(k)(jnp.asarray(parts_s[::-1]), jnp.asarray(parts_i[::-1]))
    want_s, want_i, _ = np_topk(table.T, k)
    np.testing.assert_array_equal(np.asarray(got_i), want_i)
    np.testing.assert_array_equal(np.asarray(got_s), want_s)


def test_pad_rows() -> None:
    rows = {"a": jnp.ones((5, 3)), "b": jnp.arange(5)}
    padded, n = pad_rows(rows, 4)
    assert n == 5 and padded["a"].shape == (8, 3) and padded["b"].shape == (8,)
    same, n = pad_rows(rows, 5)
    assert n == 5 and same["a"].shape == (5, 3)


def test_sharded_topk_eight_devices() -> None:
    """Rows split over 8 simulated CPU devices: ids, scores, |T| == one device == reference."""
    share_compile_cache()
    report = run_on_host_devices("topk", n_devices=8, timeout=600)
    assert report == {"devices": 8, "n": 1003, "cases": 6, "identical": True}


@settings(max_examples=40, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 4), min_size=1, max_size=5),
    shards=st.integers(1, 4),
)
def test_shard_plan_layout(sizes: list[int], shards: int) -> None:
    """Device j's block is part j of every slice, in plan order; perm is a permutation."""
    plan = tuple((f"F{i}", m * shards, i % 2) for i, m in enumerate(sizes))
    local, perm = shard_plan(plan, shards)
    assert local == tuple((f"F{i}", m, i % 2) for i, m in enumerate(sizes))
    total = sum(e[1] for e in plan)
    assert sorted(perm.tolist()) == list(range(total))
    starts = np.cumsum([0] + [e[1] for e in plan])[:-1]
    local_starts = np.cumsum([0] + [e[1] for e in local])[:-1]
    per_dev = total // shards
    for j in range(shards):
        block = perm[j * per_dev : (j + 1) * per_dev]
        for s, ls, (_, m, *_) in zip(starts, local_starts, local, strict=True):
            np.testing.assert_array_equal(block[ls : ls + m], np.arange(s + j * m, s + j * m + m))


def test_shard_plan_rejects_uneven_slices() -> None:
    with pytest.raises(ValueError, match="not divisible"):
        shard_plan((("CART", 6), ("PD", 5)), 2)
    with pytest.raises(ValueError):
        shard_plan((("CART", 4),), 0)


@pytest.mark.slow
def test_sharded_mixed_rollout_eight_devices() -> None:
    """A mixed STATUS + POLICY batch, episodes sharded over 8 simulated CPU devices and
    the catalog replicated: every leaf of the final state equals the single-device
    ``run_plan`` bit for bit (two compiles of the rollout: minutes on a small CPU)."""
    share_compile_cache()
    report = run_on_host_devices("rollout", n_devices=8, timeout=1800)
    assert report["identical"] and report["devices"] == 8
    assert report["output_devices"] == [8]
    assert report["env_steps"] > 0 and report["turns"] > 0


def test_device_count_is_not_polluted() -> None:
    """The subprocess flags never leak into this process."""
    assert "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", "")
    assert jax.device_count() >= 1
