"""Uniform values from raw hashed words (``jax.random.bits``), shared by the synthetic
catalog, the search's distractor positions and the generators' rejection draws
(``sampling.first_valid``): one threefry word per value, where
``jax.random.randint`` or ``uniform`` per value would hash a key each."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def below(bits: jax.Array, k: jax.Array | int) -> jax.Array:
    """Uniform integer in {0..k-1}: floor(bits * k / 2**32) in 32-bit arithmetic.

    Why not ``jax.random.randint``: it needs a key (more hashing) per draw, and it
    dominated the 2M build. The multiply-shift map has bias below k / 2**32 (k < 2**15).
    """
    k = jnp.asarray(k).astype(jnp.uint32)
    hi, lo = bits >> 16, bits & jnp.uint32(0xFFFF)
    return ((hi * k + ((lo * k) >> 16)) >> 16).astype(jnp.int32)


def below_wide(bits: jax.Array, k: jax.Array | int) -> jax.Array:
    """Uniform integer in {0..k-1} for any k < 2**31 (catalog positions at N = 2M):
    floor(bits * k / 2**32) by 16-bit limbs, since 32-bit products would overflow.
    Bias below k / 2**32 (5e-4 at k = 2M, 2e-5 at 100k)."""
    k = jnp.asarray(k).astype(jnp.uint32)
    m16 = jnp.uint32(0xFFFF)
    bh, bl, kh, kl = bits >> 16, bits & m16, k >> 16, k & m16
    s1 = bh * kl + ((bl * kl) >> 16)
    s2 = bl * kh + (s1 & m16)
    return (bh * kh + (s1 >> 16) + (s2 >> 16)).astype(jnp.int32)


def u01(bits: jax.Array) -> jax.Array:
    """Uniform float32 in [0, 1) from the top 23 bits (as ``jax.random.uniform``)."""
    one = jax.lax.bitcast_convert_type((bits >> 9) | jnp.uint32(0x3F800000), jnp.float32)
    return one - 1.0


def distinct_positions(bits: jax.Array, total: jax.Array, n: jax.Array, size: int) -> jax.Array:
    """bool [size]: ``n`` distinct positions of [0, total), uniform over the n-subsets
    (Floyd's algorithm), from one word each of ``bits`` [m] (``0 <= n <= min(m, total)``,
    ``total <= size``; m static).

    Why: priorities for all ``size`` slots and the n lowest cost ``size`` hashed words
    and a top-k, where SPEC's distractors (n <= 20 of up to 200 slots) need n words.
    Pick i takes t uniform in [0, j] for j = total - n + i, or j itself when t was
    already picked (j never was: every earlier pick is below j)."""
    picks = jnp.full(bits.shape[0], -1, jnp.int32)
    for i in range(bits.shape[0]):
        j = total - n + i
        t = below(bits[i], j + 1)
        t = jnp.where((picks == t).any(), j, t)
        picks = picks.at[i].set(jnp.where(i < n, t, -1))
    return jnp.zeros(size, bool).at[jnp.where(picks >= 0, picks, size)].set(True, mode="drop")
