"""Sort-free compaction equals numpy's boolean indexing, over random masks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax.compact import compact, first_true, in_sorted

_first = jax.jit(first_true, static_argnums=1)
_compact = jax.jit(compact, static_argnums=2)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=40), st.integers(1, 50), st.integers(0, 9))
def test_first_true_and_compact_match_numpy(mask, k, seed):
    m = np.array(mask)
    vals = np.random.default_rng(seed).integers(-5, 100, (m.size, 2)).astype(np.int32)
    want_idx = np.flatnonzero(m)[:k]
    got_idx = np.asarray(_first(jnp.asarray(m), k))
    assert got_idx.shape == (k,)
    np.testing.assert_array_equal(got_idx[: want_idx.size], want_idx)
    assert np.all(got_idx[want_idx.size :] == -1)
    got = np.asarray(_compact(jnp.asarray(vals), jnp.asarray(m), k))
    want = vals[m][:k]
    np.testing.assert_array_equal(got[: want.shape[0]], want)
    assert np.all(got[want.shape[0] :] == -1)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 30), min_size=1, max_size=40), st.integers(0, 9))
def test_in_sorted_matches_numpy(table, seed):
    """Membership in a sorted table equals numpy's."""
    t = np.sort(np.array(table, np.int32))
    x = np.random.default_rng(seed).integers(-5, 35, (7, 3)).astype(np.int32)
    got = np.asarray(in_sorted(jnp.asarray(t), jnp.asarray(x)))
    np.testing.assert_array_equal(got, np.isin(x, t))
