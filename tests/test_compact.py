"""Sort-free compaction equals numpy's boolean indexing, over random masks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax.compact import compact, first_true, in_sorted, smallest

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


R = 64  # one compiled shape per helper; contents vary


@settings(max_examples=80, deadline=None)
@given(
    st.lists(st.sampled_from([0.0, 0.25, 0.5, 0.75, 1.0, 2.0]), min_size=R, max_size=R),
    st.integers(0, 20),
)
def test_smallest_equals_a_stable_sorts_first_n(values, n):
    """``smallest`` marks what ``argsort(argsort(v)) < n`` marks, with many ties (six
    distinct values over 64 entries), for every n up to its static bound."""
    v = np.array(values, np.float32)
    got = np.asarray(jax.jit(smallest, static_argnums=2)(jnp.asarray(v), jnp.int32(n), 20))
    rank = np.argsort(np.argsort(v, kind="stable"), kind="stable")
    np.testing.assert_array_equal(got, rank < n)


def test_smallest_over_keyed_uniform_draws():
    """The search's own use: R keyed uniforms (ties are rare but occur) padded with 2.0,
    4,096 keys, against the double argsort it replaced."""
    keys = jax.random.split(jax.random.key(3), 4096)
    total = jax.random.randint(jax.random.key(4), (4096,), 0, R + 1)
    n = jnp.minimum(jax.random.randint(jax.random.key(5), (4096,), 0, 21), total)

    def both(key, t, k):
        prio = jnp.where(jnp.arange(R) < t, jax.random.uniform(key, (R,)), 2.0)
        return smallest(prio, k, 20), jnp.argsort(jnp.argsort(prio)) < k

    got, want = jax.jit(jax.vmap(both))(keys, total, n)
    np.testing.assert_array_equal(np.asarray(got), np.asarray(want))
    assert int(np.asarray(got).sum()) > 4096 * 5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 30), min_size=1, max_size=40), st.integers(0, 9))
def test_in_sorted_matches_numpy(table, seed):
    """Membership in a sorted table equals numpy's."""
    t = np.sort(np.array(table, np.int32))
    x = np.random.default_rng(seed).integers(-5, 35, (7, 3)).astype(np.int32)
    got = np.asarray(in_sorted(jnp.asarray(t), jnp.asarray(x)))
    np.testing.assert_array_equal(got, np.isin(x, t))
