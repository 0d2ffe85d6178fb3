"""Sort-free compaction equals numpy's boolean indexing, over random masks, by both ways
(packed words and the prefix count's scatter)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax import compact as CP
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


def _want_first(m: np.ndarray, k: int) -> np.ndarray:
    idx = np.flatnonzero(m)[:k]
    return np.concatenate([idx, np.full(k - idx.size, -1)]).astype(np.int32)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 300),
    st.integers(1, 400),
    st.floats(0.0, 1.0),
    st.integers(0, 2**31 - 1),
)
def test_both_ways_match_numpy_across_word_boundaries(n, k, density, seed):
    """Masks of any length (partial last words), from empty to full, any k: the words,
    the scatter and the dispatch all give numpy's indices, and compact numpy's rows (2-D
    values, a non-default fill)."""
    rng = np.random.default_rng(seed)
    m = rng.random(n) < density
    vals = rng.integers(-5, 100, (n, 3)).astype(np.int32)
    want = _want_first(m, k)
    for fn in (CP._first_true_words, CP._first_true_scatter, first_true):
        np.testing.assert_array_equal(np.asarray(jax.jit(fn, static_argnums=1)(m, k)), want)
    rows = np.concatenate([vals[m][:k], np.full((max(0, k - m.sum()), 3), 7)]).astype(np.int32)
    for fn in (CP._compact_words, CP._compact_scatter):
        got = jax.jit(fn, static_argnums=2)(jnp.asarray(vals), jnp.asarray(m), k, 7)
        np.testing.assert_array_equal(np.asarray(got), rows)


def test_words_match_numpy_over_thousands_of_vmapped_masks():
    """The stock shocks' shape (1,000 products, 32 events) under vmap, where the words are
    used: 4,096 masks whose densities run from empty to full."""
    b, n, k = 4096, 1000, 32
    density = jnp.linspace(0.0, 1.0, b)[:, None] ** 3  # many sparse lanes, as shocks are
    masks = jax.random.uniform(jax.random.key(3), (b, n)) < density
    assert CP._use_words(n, k)
    got = np.asarray(jax.jit(jax.vmap(lambda x: first_true(x, k)))(masks))
    m = np.asarray(masks)
    want = np.stack([_want_first(row, k) for row in m])
    np.testing.assert_array_equal(got, want)
    assert (want == -1).any() and (want[:, -1] >= 0).any()  # both short and full lanes


def test_a_nonzero_integer_mask_counts_as_true():
    """A mask of counts (entries above 1) selects as its nonzero entries do, by both ways:
    the words pack one bit per entry, so a 2 or 3 must not spill into a neighbour's bit."""
    counts = np.random.default_rng(5).integers(0, 4, 1000).astype(np.int32)
    vals = np.arange(1000, dtype=np.int32) * 3
    for k in (32, 4000):  # the words, then the scatter (_use_words)
        want = _want_first(counts != 0, k)
        np.testing.assert_array_equal(np.asarray(first_true(jnp.asarray(counts), k)), want)
        got = np.asarray(compact(jnp.asarray(vals), jnp.asarray(counts), k))
        np.testing.assert_array_equal(got, np.where(want >= 0, vals[np.maximum(want, 0)], -1))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(-3, 30), min_size=1, max_size=40), st.integers(0, 9))
def test_in_sorted_matches_numpy(table, seed):
    """Membership in a sorted table equals numpy's."""
    t = np.sort(np.array(table, np.int32))
    x = np.random.default_rng(seed).integers(-5, 35, (7, 3)).astype(np.int32)
    got = np.asarray(in_sorted(jnp.asarray(t), jnp.asarray(x)))
    np.testing.assert_array_equal(got, np.isin(x, t))
