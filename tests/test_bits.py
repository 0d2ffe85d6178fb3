"""Floyd's distinct positions: exactly n distinct slots below total, uniform over subsets."""

from __future__ import annotations

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax.bits import below, distinct_positions

M, SIZE = 20, 200  # SPEC's most distractors, and the most results a search shows


@jax.jit
def _positions(keys, total, n):
    def one(key, t, k):
        return distinct_positions(jax.random.bits(key, (M,)), t, k, SIZE)

    return jax.vmap(one)(keys, total, n)


def test_exactly_n_distinct_positions_below_total_over_thousands_of_keys():
    keys = jax.random.split(jax.random.key(0), 8192)
    kt, kn = jax.random.split(jax.random.key(1))
    total = jax.random.randint(kt, (8192,), 0, SIZE + 1)
    n = jnp.minimum(jax.random.randint(kn, (8192,), 0, M + 1), total)
    got = np.asarray(_positions(keys, total, n))
    np.testing.assert_array_equal(got.sum(1), np.asarray(n))
    above = np.arange(SIZE)[None, :] >= np.asarray(total)[:, None]
    assert not (got & above).any()
    assert int(np.asarray(n).sum()) > 8192  # the sweep draws many positions


def test_every_subset_equally_likely():
    """3 of 7 slots over 35,000 keys: each of the 35 subsets about 1,000 times (a
    chi-square bound far in the tail: p < 1e-6 for a fair draw), and no subset missing."""
    total, n, draws = 7, 3, 35_000
    keys = jax.random.split(jax.random.key(2), draws)
    got = np.asarray(_positions(keys, jnp.full(draws, total), jnp.full(draws, n)))
    codes = (got[:, :total] * (1 << np.arange(total))).sum(1)
    subsets = [sum(1 << i for i in s) for s in itertools.combinations(range(total), n)]
    counts = np.array([(codes == c).sum() for c in subsets])
    assert counts.sum() == draws  # every draw is one of the n-subsets
    expected = draws / math.comb(total, n)
    chi2 = ((counts - expected) ** 2 / expected).sum()
    assert chi2 < 90, (chi2, counts)  # 34 degrees of freedom: P(chi2 > 90) < 1e-6


def test_a_longer_word_draw_keeps_the_same_positions():
    """Pick i reads word i only, and JAX's partitionable threefry makes word i the same
    in a longer draw, so a draw sized for R slots (the reference in test_search) and one
    sized for max_distractors agree wherever n fits both."""
    keys = jax.random.split(jax.random.key(3), 2048)
    total = jax.random.randint(jax.random.key(4), (2048,), 0, SIZE + 1)
    n = jnp.minimum(jax.random.randint(jax.random.key(5), (2048,), 0, M + 1), total)

    def both(key, t, k):
        return (
            distinct_positions(jax.random.bits(key, (M,)), t, k, SIZE),
            distinct_positions(jax.random.bits(key, (2 * M,)), t, k, SIZE),
        )

    short, full = jax.jit(jax.vmap(both))(keys, total, n)
    np.testing.assert_array_equal(np.asarray(short), np.asarray(full))


def test_below_stays_in_range_and_covers_it():
    bits = jax.random.bits(jax.random.key(6), (50_000,))
    for k in (1, 2, 7, 200, 32_767):
        v = np.asarray(below(bits, k))
        assert v.min() >= 0 and v.max() < k
        covered = np.unique(v).size / k
        assert covered == 1.0 if k <= 200 else covered > 0.7
