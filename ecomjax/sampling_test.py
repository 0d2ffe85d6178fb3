"""``first_valid`` draws its first candidates alone and the rest only when they all fail;
it picks exactly what one full draw of ``TRIES`` candidates picks."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax.sampling import FIRST_TRIES, TRIES, _first_good, first_valid

N = 997


def test_first_valid_equals_one_full_draw_over_many_keys():
    """4,096 keys x validity tables from empty to full (densities 0 .. 1), random ranges:
    the staged draw equals the single full draw everywhere, and the cases cover a pick in
    the first candidates, a pick only among the later ones, and no valid candidate."""
    n = 4096
    keys = jax.random.split(jax.random.key(11), n)
    dens = jnp.asarray([0.0, 0.002, 0.02, 0.1, 0.5, 1.0])[jnp.arange(n) % 6]
    tables = jax.random.uniform(jax.random.key(12), (n, N)) < dens[:, None]
    lo = jax.random.randint(jax.random.key(13), (n,), 0, N // 2)
    hi = lo + jax.random.randint(jax.random.key(14), (n,), 0, N // 2)

    def both(key, table, lo, hi):
        ok = lambda p: table[p]  # noqa: E731
        early = _first_good(key, lo, hi, ok, FIRST_TRIES)[0]
        return first_valid(key, lo, hi, ok), _first_good(key, lo, hi, ok, TRIES)[1], early

    staged, full, early = map(np.asarray, jax.jit(jax.vmap(both))(keys, tables, lo, hi))
    np.testing.assert_array_equal(staged, full)
    assert (early & (full >= 0)).sum() > 1000  # found among the first candidates
    assert (~early & (full >= 0)).sum() > 20  # found only among the later ones
    assert (full < 0).sum() > 100  # no valid candidate at all
