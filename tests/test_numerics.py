"""ordered_sum: a dot product with one set of bits whatever the rows around it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax.numerics import ordered_sum


def _rows(seed: int, n: int, d: int) -> jax.Array:
    """n products of unit vectors against one query: the SUB verifier's cosine terms."""
    k1, k2 = jax.random.split(jax.random.key(seed))
    e = jax.random.normal(k1, (n, d))
    q = jax.random.normal(k2, (d,))
    e = e / jnp.linalg.norm(e, axis=-1, keepdims=True)
    return e * (q / jnp.linalg.norm(q))


@pytest.mark.parametrize("d", [1, 3, 7, 12, 96, 384])
def test_ordered_sum_is_the_sum_to_float32_rounding(d):
    x = _rows(d, 4096, d)
    got = np.asarray(jax.jit(ordered_sum)(x), np.float64)
    exact = np.asarray(x, np.float64).sum(-1)
    bound = d * np.finfo(np.float32).eps * np.abs(np.asarray(x, np.float64)).sum(-1)
    assert (np.abs(got - exact) <= bound).all()
    assert got.shape == (4096,)


def test_a_rows_sum_has_the_same_bits_in_any_batch_shape():
    """4096 rows of 384 terms read whole, in 32- and 512-row chunks, under vmap,
    fused with the product that makes them, and one row at a time (a sample of 64)."""
    e, q = (
        jax.random.normal(jax.random.key(1), (4096, 384)),
        jax.random.normal(jax.random.key(2), (384,)),
    )
    ref = np.asarray(jax.jit(lambda e, q: ordered_sum(e * q))(e, q))

    def chunked(n: int):
        return jax.jit(
            lambda e, q: jax.lax.map(lambda c: ordered_sum(c * q), e.reshape(-1, n, 384))
        )

    for n in (32, 512):
        got = np.asarray(chunked(n)(e, q))
        assert got.shape == (4096 // n, n)
        np.testing.assert_array_equal(got.reshape(-1), ref, err_msg=str(n))
    vmapped = jax.jit(jax.vmap(lambda r, q: ordered_sum(r * q), (0, None)))(e, q)
    np.testing.assert_array_equal(np.asarray(vmapped), ref)
    one = jax.jit(lambda r, q: ordered_sum(r * q))
    for i in range(0, 4096, 64):
        assert np.asarray(one(e[i], q)) == ref[i], i
