"""Small per-episode vector helpers: stable compaction of masked entries without sorting,
and membership in a sorted table.

XLA's CPU sort is a comparator loop, so ``argsort(~keep, stable=True)`` over a few hundred
entries per episode dominated whole turns. A prefix count gives each kept entry its
output position directly: O(n), and the same result as the stable sort's kept prefix.
Under vmap that count and its scatter run as serial loops, so a per-episode mask is
read as 32-bit words instead (``_first_true_words``).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

WORD = 32  # mask entries per packed word (uint32)


def _use_words(n: int, k: int) -> bool:
    """Static: up to about n wanted of an n-long mask (k·n/32 ≤ 32·max(n, 256)), as in the
    per-episode masks under vmap, the packed words are faster; more wanted, as in the
    batch-wide orders of thousands of lanes, the prefix count's scatter is
    (benchmarks/first_true.py)."""
    return k * -(-n // WORD) <= WORD * max(n, 256)


def first_true(mask: jax.Array, k: int) -> jax.Array:
    """int32 [k]: indices of the first k True (nonzero) entries of a 1-D mask, -1 padded.
    Both ways (``_first_true_words``, ``_first_true_scatter``) give the same indices."""
    mask = jnp.asarray(mask, bool)  # the words pack one bit per entry
    if _use_words(mask.shape[0], k):
        return _first_true_words(mask, k)
    return _first_true_scatter(mask, k)


def _first_true_scatter(mask: jax.Array, k: int) -> jax.Array:
    idx = jnp.arange(mask.shape[0], dtype=jnp.int32)
    return _compact_scatter(idx, mask, k, jnp.int32(-1))


def _first_true_words(mask: jax.Array, k: int) -> jax.Array:
    """Why words: under vmap the prefix count and the scatter of every entry ran as
    serial loops over [B, n] (24.5 µs a lane at n = 1000, k = 32, the stock shocks'
    events), where packing is one fused pass and the rest works on n/32 words and k
    wanted entries (0.85 µs: results/first_true.jsonl). The j-th True lies in the first
    word whose running popcount exceeds j, at the bit where that word's own popcount
    reaches the rest of j (a 5-step binary search)."""
    n = mask.shape[0]
    nb = -(-n // WORD)
    bits = jnp.pad(mask.astype(jnp.uint32), (0, nb * WORD - n)).reshape(nb, WORD)
    words = (bits << jnp.arange(WORD, dtype=jnp.uint32)).sum(-1, dtype=jnp.uint32)
    count = jax.lax.population_count(words).astype(jnp.int32)
    blocks = jnp.arange(nb, dtype=jnp.int32)
    if nb <= 64:  # inclusive running count as one masked sum; cumsum is a multi-pass scan
        running = jnp.where(blocks[None, :] <= blocks[:, None], count[None, :], 0).sum(-1)
    else:
        running = jnp.cumsum(count)
    j = jnp.arange(k, dtype=jnp.int32)
    block = (running[None, :] <= j[:, None]).sum(-1, dtype=jnp.int32)  # nb: fewer than j+1
    at = blocks[None, :] == block[:, None]  # [k, nb] one-hot: a select, not a gather
    word = jnp.where(at, words[None, :], jnp.uint32(0)).sum(-1, dtype=jnp.uint32)
    rank = j - jnp.where(at, (running - count)[None, :], 0).sum(-1)
    bit = jnp.zeros(k, jnp.int32)
    for width in (16, 8, 4, 2, 1):
        low = jax.lax.population_count(
            (word >> bit.astype(jnp.uint32)) & jnp.uint32((1 << width) - 1)
        ).astype(jnp.int32)
        up = rank >= low
        rank = jnp.where(up, rank - low, rank)
        bit = jnp.where(up, bit + width, bit)
    return jnp.where(block < nb, block * WORD + bit, -1)


def compact(values: jax.Array, keep: jax.Array, k: int, fill=-1) -> jax.Array:
    """values[keep] in order, the first k of them, padded with ``fill`` (leading axis)."""
    keep = jnp.asarray(keep, bool)
    fill = jnp.asarray(fill, values.dtype)
    if _use_words(keep.shape[0], k):
        return _compact_words(values, keep, k, fill)
    return _compact_scatter(values, keep, k, fill)


def _compact_words(values: jax.Array, keep: jax.Array, k: int, fill) -> jax.Array:
    """A gather of the k kept rows, not a scatter of all n."""
    idx = _first_true_words(keep, k)
    got = values[jnp.maximum(idx, 0)]
    return jnp.where((idx >= 0).reshape(idx.shape + (1,) * (values.ndim - 1)), got, fill)


def _compact_scatter(values: jax.Array, keep: jax.Array, k: int, fill) -> jax.Array:
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
