"""ordered_sum: a dot product with one set of bits whatever the rows around it."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax.numerics import ordered_sum, weighted_sum


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


def _unfused(weights, parts) -> np.ndarray:
    """numpy's float32 evaluation: every product rounded, then added left to right."""
    total = np.float32(weights[0]) * parts[0]
    for w, x in zip(weights[1:], parts[1:], strict=True):
        total = total + np.float32(w) * x
    return total


@pytest.mark.parametrize("weights", [(0.55, 0.35, 0.10), (0.8, 0.2), (0.45, 0.45, 0.10)])
def test_a_weighted_sum_has_the_eager_bits_in_any_program(weights):
    """PD's, SUB's and RETURN's r_task weights over 100,000 random parts (with NaN and
    infinities mixed in): jitted alone, fused into a clip and a select, and one lane at a
    time under vmap. The plain w·x + ... expression fuses into FMAs here (about a third of
    the values an ulp off), so this fails for it."""
    rng = np.random.default_rng(len(weights))
    parts = [rng.uniform(-1, 1, 100_000).astype(np.float32) for _ in weights]
    parts[0][:50] = np.nan
    parts[-1][50:60] = np.inf
    want = _unfused(weights, parts)
    xs = [jnp.asarray(x) for x in parts]
    alone = jax.jit(lambda *x: weighted_sum(weights, x))(*xs)
    np.testing.assert_array_equal(np.asarray(alone), want)
    fused = jax.jit(
        lambda *x: jnp.where(x[0] > 0.9, -1.0, jnp.clip(weighted_sum(weights, x), -1, 1))
    )
    np.testing.assert_array_equal(
        np.asarray(fused(*xs)), np.where(parts[0] > 0.9, -1.0, np.clip(want, -1, 1))
    )
    lanes = jax.jit(jax.vmap(lambda *x: weighted_sum(weights, x)))(*(x[:4096] for x in xs))
    np.testing.assert_array_equal(np.asarray(lanes), want[:4096])
