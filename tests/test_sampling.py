"""``sampling.first_valid``: the chunked rejection draw every generator uses."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

from ecomjax.bits import below_wide
from ecomjax.sampling import first_try, first_valid

KEYS = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(7), i))(jnp.arange(8192))


def all_tries(key, lo, hi, ok, tries, chunk):
    """The same draw without the early exit: every chunk hashed and tested, then the
    first passing try (what the loop must return, whichever chunk each lane stops in)."""
    n_chunks = -(-tries // chunk)
    words = jnp.concatenate(
        [jax.random.bits(jax.random.fold_in(key, c), (chunk,), jnp.uint32) for c in range(n_chunks)]
    )[:tries]
    cand = lo + below_wide(words, jnp.maximum(hi - lo, 1))
    good = jax.vmap(ok)(cand) & (hi > lo)
    return jnp.where(good.any(), cand[jnp.argmax(good)], -1)


@pytest.mark.parametrize("tries,chunk", [(64, 8), (12, 8), (16, 16), (5, 1)])
def test_early_exit_returns_the_first_passing_try(tries, chunk):
    # A rare predicate, so lanes stop in different chunks (and some in none).
    lo, hi = jnp.int32(100), jnp.int32(1100)
    ok = lambda p: (p * 7919) % 53 == 0
    got = jax.vmap(lambda k: first_valid(k, lo, hi, ok, tries, chunk))(KEYS)
    want = jax.vmap(lambda k: all_tries(k, lo, hi, ok, tries, chunk))(KEYS)
    np.testing.assert_array_equal(got, want)
    found = np.asarray(got) >= 0
    assert 0 < found.mean() < 1


def test_uniform_over_the_valid_positions():
    lo, hi = jnp.int32(3), jnp.int32(43)
    ok = lambda p: p % 4 == 1  # 10 valid positions: 5, 9, ..., 41
    got = np.asarray(jax.vmap(lambda k: first_valid(k, lo, hi, ok))(KEYS))
    assert ((got >= 3) & (got < 43) & (got % 4 == 1)).all()
    counts = np.bincount((got - 5) // 4, minlength=10)
    assert counts.size == 10
    assert stats.chisquare(counts).pvalue > 1e-4


def test_tries_bound_the_search():
    # One valid position of 1,000: P(found in t tries) = 1 - 0.999**t.
    lo, hi = jnp.int32(0), jnp.int32(1000)
    ok = lambda p: p == 417
    for tries in (8, 64):
        got = np.asarray(jax.vmap(lambda k, t=tries: first_valid(k, lo, hi, ok, t))(KEYS))
        assert set(np.unique(got)) <= {-1, 417}
        p = 1 - 0.999**tries
        assert stats.binomtest(int((got == 417).sum()), got.size, p).pvalue > 1e-4


def test_empty_range_and_no_valid_position_draw_nothing():
    ok_all = lambda p: jnp.bool_(True)
    empty = jax.vmap(lambda k: first_valid(k, jnp.int32(5), jnp.int32(5), ok_all))(KEYS[:512])
    assert (np.asarray(empty) == -1).all()
    none = jax.vmap(lambda k: first_valid(k, 0, 50, lambda p: p < 0))(KEYS[:512])
    assert (np.asarray(none) == -1).all()


def test_below_wide_is_the_exact_multiply_shift():
    words = jax.random.bits(jax.random.key(3), (50_000,), jnp.uint32)
    w64 = np.asarray(words).astype(np.uint64)
    for k in (1, 2, 7, 1000, 65_535, 65_536, 100_000, 2_000_000, 2**31 - 1):
        want = (w64 * np.uint64(k)) >> np.uint64(32)
        np.testing.assert_array_equal(np.asarray(below_wide(words, k)), want.astype(np.int64))


def _pair_draw(k):
    """A pytree of tries: a position and a float tag derived from it."""
    pos = below_wide(jax.random.bits(k, (8,), jnp.uint32), 1000)
    return {"pos": pos, "tag": pos.astype(jnp.float32) / 4}


def test_first_try_keeps_a_pytree_together_and_falls_back_to_the_first_try():
    def run(ok, empty=False):
        return jax.vmap(lambda k: first_try(k, _pair_draw, ok, 64, 8, empty))(KEYS[:2048])

    found, v = run(lambda t: t["pos"] % 97 == 3)
    f = np.asarray(found)
    assert 0 < f.mean() < 1
    np.testing.assert_array_equal(np.asarray(v["tag"]), np.asarray(v["pos"]) / 4)
    assert (np.asarray(v["pos"])[f] % 97 == 3).all()
    # No try passes: the value is chunk 0's first try.
    found, v = run(lambda t: t["pos"] < 0)
    first = jax.vmap(lambda k: _pair_draw(jax.random.fold_in(k, 0))["pos"][0])(KEYS[:2048])
    assert not np.asarray(found).any()
    np.testing.assert_array_equal(np.asarray(v["pos"]), np.asarray(first))
    # A lane marked empty draws nothing, even where every try would pass.
    found, v = run(lambda t: jnp.bool_(True), empty=jnp.bool_(True))
    assert not np.asarray(found).any() and (np.asarray(v["pos"]) == 0).all()
