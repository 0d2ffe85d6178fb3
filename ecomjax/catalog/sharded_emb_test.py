"""Row-sharded embedding reads (``catalog.sharded_emb``) and the rollout over them equal
the whole table's, bit for bit. The multi-device checks run on simulated CPU devices in a
subprocess (``sharding.run_on_host_devices``); the multi-process ones are in
``tests/test_distributed.py``."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import PartitionSpec

from ecomjax.catalog.sharded_emb import catalog_specs, emb_rows, lockstep_any, lockstep_max
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.runner import RunConfig, run
from ecomjax.sharding import run_on_host_devices
from tests.support.child_cache import share_compile_cache

CATALOG = generate_catalog(42, 97)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-200, 300), min_size=1, max_size=12))
def test_whole_table_reads_follow_jnp_indexing(ids):
    """Unsharded, ``emb_rows`` is ``emb[ids]`` exactly, out-of-range ids included (the
    sharded read reproduces these rules, so both layouts agree on every id)."""
    idx = jnp.asarray(ids, jnp.int32)
    got = np.asarray(emb_rows(CATALOG, idx))
    want = np.asarray(CATALOG.emb[idx].astype(jnp.float32))
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32))


def test_whole_table_needs_no_collectives():
    flag, count = jnp.bool_(True), jnp.int32(3)
    assert lockstep_any(CATALOG, flag) is flag and lockstep_max(CATALOG, count) is count
    specs = catalog_specs(CATALOG, "rows")
    assert specs.emb == PartitionSpec("rows") and specs.price_cents == PartitionSpec()


def test_split_reads_on_four_devices():
    """N = 203 rows over 4 devices (51 each, one padding row): every id's row equals the
    whole table's, plain and under vmap."""
    share_compile_cache()
    report = run_on_host_devices("emb", n_devices=4, timeout=600)
    assert report == {"devices": 4, "n": 203, "rows_per_device": 51, "identical": True}


def test_a_split_catalog_needs_several_devices():
    with pytest.raises(ValueError, match="several processes"):
        run(RunConfig(tasks="CART", batch=2, rounds=1, catalog_size=50, shard_catalog=True))
    with pytest.raises(ValueError, match="search_chunk"):
        run(RunConfig(tasks="CART", batch=2, rounds=1, catalog_size=50, search_chunk=-1))


@pytest.mark.slow
def test_rollout_over_a_split_table_on_four_devices():
    """PD, SUB and CART episodes of the random agent (which searches, by relevance and by
    keyed sorts with category filters, and recommends ids SUB scores by cosine), with the
    episodes and the embedding rows split over 4 devices: every leaf of the final state
    equals one device's whole-table run."""
    share_compile_cache()
    kwargs = dict(tasks="PD,SUB,CART", per_device=4, shard_catalog=True, search_chunk=64)
    report = run_on_host_devices("rollout", 4, 1800, {**kwargs, "agent": "random"})
    assert report["identical"] and report["emb_rows_per_device"] == 75
