"""Small per-episode vector helpers: stable compaction of masked entries without sorting,
and membership in a sorted table.

XLA's CPU sort is a comparator loop, so ``argsort(~keep, stable=True)`` over a few hundred
entries per episode dominated whole turns. A prefix count gives each kept entry its
output position directly: O(n), and the same result as the stable sort's kept prefix.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp


def first_true(mask: jax.Array, k: int) -> jax.Array:
    """int32 [k]: indices of the first k True entries of a 1-D mask, -1 padded."""
    pos = jnp.cumsum(mask.astype(jnp.int32)) - 1
    dest = jnp.where(mask & (pos < k), pos, k)
    idx = jnp.arange(mask.shape[0], dtype=jnp.int32)
    return jnp.full(k, -1, jnp.int32).at[dest].set(idx, mode="drop")


def compact(values: jax.Array, keep: jax.Array, k: int, fill=-1) -> jax.Array:
    """values[keep] in order, the first k of them, padded with ``fill`` (leading axis)."""
    pos = jnp.cumsum(keep.astype(jnp.int32)) - 1
    dest = jnp.where(keep & (pos < k), pos, k)
    out = jnp.full((k, *values.shape[1:]), fill, values.dtype)
    return out.at[dest].set(values, mode="drop")


def in_sorted(table: jax.Array, x: jax.Array, unrolled: bool = False) -> jax.Array:
    """bool, shape of ``x``: ``x`` is an entry of the ascending 1-D ``table``. Testing many
    candidates against one exclusion list: sort it once, then O(log n) per test, not O(n).
    (Comparing every pair instead was slower at batch scale, even for 100-entry tables:
    RETURN 0.67x, benchmarks/README.md.)

    ``unrolled`` (static) unrolls the search: the same steps, fused, where the default
    loop runs ~log2(n) rounds of tiny kernels (2.7x faster at [4096, 64] tests of
    100-entry tables: benchmarks/search_helpers.py). Only where few tests are batched at
    once, as in a loop body: XLA turns the vmapped gathers' index arrays into constants,
    one entry per batched test (a [4096, 60, 64]-test call compiled a 125 MB constant
    into the program)."""
    method = "scan_unrolled" if unrolled else "scan"
    pos = jnp.clip(jnp.searchsorted(table, x, method=method), 0, table.shape[0] - 1)
    return table[pos] == x
