"""Exact evaluation-pool statistics over the whole catalog, chunked over N (SPEC §7, §8.1-2).

PD and SUB score a ranking against the *whole* catalog: F_end is every feasible, available
product, and IDCG@k needs the k best relevance values in it. Relevance is a monotone map of
one per-product key (PD: the stated priority; SUB: similarity to the original), so the pool
reduces to: |F_end|, min and max of the key over F_end (PD's φ normalisation) and the top-k
key values. ``pool_stats`` computes them with a running state over chunks of rows, so memory
is O(k + chunk) per episode (O(B·(k + chunk)) under vmap) and no [B, N] mask ever exists.

Membership is a function ``member(args, idx) -> (mask bool [C], key float32 [C])`` of the
episode's arguments (constraints, its stock overlay, ...) and a chunk of row ids: it gathers
only the chunk, so a per-episode bitmap such as ``World.oos`` is read chunk by chunk.

Only values are returned, never ids, so ties need no rule: the top-k values are a multiset
property and equal the plain reference for any chunk size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
    "PoolStats",
    "dcg_weights",
    "pool_stats",
    "pool_stats_batch",
    "pool_stats_in_category",
    "pool_stats_reference",
]

PyTree = Any
MemberFn = Callable[[PyTree, jax.Array], tuple[jax.Array, jax.Array]]
_INF = float("inf")


class PoolStats(NamedTuple):
    count: jax.Array  # int32, |pool|
    lo: jax.Array  # float32, min key over the pool (+inf when empty)
    hi: jax.Array  # float32, max key over the pool (-inf when empty)
    top: jax.Array  # float32 [k], the k largest keys, descending; -inf padded


def _canon(key: jax.Array, mask: jax.Array) -> tuple[jax.Array, jax.Array]:
    """NaN keys leave the pool; -0.0 becomes +0.0 so every path sees one value."""
    key = key.astype(jnp.float32)
    mask = mask & ~jnp.isnan(key)
    return jnp.where(key == 0, jnp.float32(0), key), mask


def _empty(k: int) -> PoolStats:
    return PoolStats(
        jnp.int32(0), jnp.float32(_INF), jnp.float32(-_INF), jnp.full(k, -_INF, jnp.float32)
    )


def _fold(state: PoolStats, mask: jax.Array, key: jax.Array, k: int) -> PoolStats:
    key, mask = _canon(key, mask)
    s = jnp.where(mask, key, -_INF)
    both = jnp.concatenate([state.top, s])
    return PoolStats(
        count=state.count + mask.sum(dtype=jnp.int32),
        lo=jnp.minimum(state.lo, jnp.where(mask, key, _INF).min()),
        hi=jnp.maximum(state.hi, s.max()),
        top=lax.top_k(both, k)[0],
    )


def pool_stats(member: MemberFn, args: PyTree, n: int, k: int, chunk: int = 4096) -> PoolStats:
    """Pool statistics of one episode over rows 0..n-1, ``chunk`` rows at a time.

    The last window is clamped to end at row n and rows it re-reads are masked by index,
    so the catalog is never padded and no row counts twice. n, k, chunk are static.
    """
    if k < 1 or chunk < 1:
        raise ValueError(f"need k >= 1 and chunk >= 1, got k={k}, chunk={chunk}")
    if n == 0:
        return _empty(k)
    c = min(chunk, n)
    lane = jnp.arange(c, dtype=jnp.int32)

    def body(state: PoolStats, i: jax.Array) -> tuple[PoolStats, None]:
        fresh_from = i * c
        idx = jnp.minimum(fresh_from, n - c) + lane
        mask, key = member(args, idx)
        return _fold(state, mask & (idx >= fresh_from), key, k), None

    out, _ = lax.scan(body, _empty(k), jnp.arange(math.ceil(n / c), dtype=jnp.int32))
    return out


def pool_stats_in_category(
    member: MemberFn,
    args: PyTree,
    cat_order: jax.Array,
    cat_offsets: jax.Array,
    cat: jax.Array,
    k: int,
    chunk: int,
    whole_chunk: int = 4096,
    active: jax.Array | bool = True,
    lockstep: Callable[[jax.Array], jax.Array] | None = None,
) -> PoolStats:
    """``pool_stats`` of a pool whose members all lie in category ``cat``: only that
    category's run of ``cat_order`` (``cat_offsets[cat]`` to ``cat_offsets[cat + 1]``) is
    read, ``chunk`` rows a step, for as many steps as the run needs. ``cat`` < 0 (no
    category bounds the pool) reads all n rows, ``whole_chunk`` a step; ``active`` False
    reads no row and gives the empty pool's statistics (a lane whose score is discarded).
    The statistics are values (a multiset's count, extremes and top k), so they equal
    ``pool_stats`` over the whole catalog whenever no member lies outside the run.

    Why: PD's and SUB's pools hold only the goal category (its ``eq`` constraint is
    critical), about 1/40 of the catalog; a whole-catalog scan per episode was most of
    their verification and grows with N. Each of the two loops runs, under ``vmap``, to
    the longest lane's count of its own steps, so a batch whose lanes all have a category
    pays nothing for the whole-catalog loop. ``chunk`` and ``whole_chunk`` are static.

    ``lockstep`` maps a lane's "go on" flag to the flag over every device of a mesh axis
    (``catalog.sharded_emb.lockstep_any``), for a ``member`` that reads a row-sharded table
    with collectives: every device then runs as many steps as the mesh's longest lane, and
    the extra steps fold nothing (their positions lie past the lane's rows)."""
    if k < 1 or chunk < 1 or whole_chunk < 1:
        raise ValueError(f"need k, chunk, whole_chunk >= 1, got {k}, {chunk}, {whole_chunk}")
    n = int(cat_order.shape[0])
    if n == 0:
        return _empty(k)
    known = jnp.clip(cat, 0, cat_offsets.shape[0] - 2)
    start = cat_offsets[known].astype(jnp.int32)
    size = (cat_offsets[known + 1] - cat_offsets[known]).astype(jnp.int32)
    in_cat = jnp.asarray(active) & (cat >= 0)
    whole = jnp.asarray(active) & (cat < 0)

    def scan(state: PoolStats, c: int, rows: jax.Array, to_ids) -> PoolStats:
        """Folds positions 0 .. rows - 1, c a step; ``to_ids`` maps positions to rows."""
        lane = jnp.arange(c, dtype=jnp.int32)

        def body(carry: tuple[jax.Array, PoolStats]) -> tuple[jax.Array, PoolStats]:
            i, st = carry
            pos = i * c + lane
            mask, key = member(args, to_ids(jnp.clip(pos, 0, n - 1)))
            return i + 1, _fold(st, mask & (pos < rows), key, k)

        def more(cr: tuple[jax.Array, PoolStats]) -> jax.Array:
            go = cr[0] * c < rows
            return go if lockstep is None else lockstep(go)

        _, out = lax.while_loop(more, body, (jnp.int32(0), state))
        return out

    c = min(chunk, n)
    state = scan(
        _empty(k),
        c,
        jnp.where(in_cat, size, 0),
        lambda pos: cat_order[jnp.clip(start + pos, 0, n - 1)].astype(jnp.int32),
    )
    return scan(state, min(whole_chunk, n), jnp.where(whole, n, 0), lambda pos: pos)


def pool_stats_batch(
    member: MemberFn, args: PyTree, n: int, k: int, chunk: int = 4096
) -> PoolStats:
    """``pool_stats`` for a batch of episodes: ``args`` leaves carry a leading batch axis."""
    return jax.vmap(lambda a: pool_stats(member, a, n, k, chunk))(args)


def pool_stats_reference(member: MemberFn, args: PyTree, n: int, k: int) -> PoolStats:
    """Plain jnp oracle for one episode: all n rows at once, then a full sort."""
    if n == 0:
        return _empty(k)
    mask, key = member(args, jnp.arange(n, dtype=jnp.int32))
    key, mask = _canon(key, mask)
    s = jnp.where(mask, key, -_INF)
    top = -jnp.sort(-s)
    top = jnp.concatenate([top, jnp.full(max(k - n, 0), -_INF, jnp.float32)])[:k]
    return PoolStats(
        count=mask.sum(dtype=jnp.int32),
        lo=jnp.where(mask, key, _INF).min(),
        hi=s.max(),
        top=top,
    )


def dcg_weights(k: int) -> jax.Array:
    """float32 [k]: 1 / log2(i + 1) for ranks i = 1..k (SPEC §7)."""
    return 1.0 / jnp.log2(jnp.arange(2, k + 2, dtype=jnp.float32))
