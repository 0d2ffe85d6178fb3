"""Exact masked top-k over a large catalog, chunked so memory never grows as O(Q·N).

SPEC §5.1: filters apply before ranking and ties go to the lower catalog index. SPEC §1.6:
searches with filters or a non-relevance sort MUST be exact, so this is brute force over the
filtered subset, one chunk of rows at a time, with a running top-k per query.

Tie-break guarantee. Every result is ordered by the key ``(score descending, catalog index
ascending)``, for any ``chunk`` (dividing ``n`` or not, larger than ``n``) and any ``k``. We do
not rely on ``lax.top_k`` breaking ties by position: its docstring promises it, but the XLA /
StableHLO op it lowers to does not, and GPU top-k kernels need not honour it. Instead:

* per chunk, ``lax.top_k`` on the scores is used only for the *value* of the k-th best score
  (a multiset property, independent of how ties are broken); the chunk's candidates are then
  chosen explicitly: every score above that threshold, plus the lowest-index rows equal to
  it, via a top_k over distinct integer keys (so again no tie to break);
* the running block and the chunk's candidates are merged with a two-key ``lax.sort`` on
  ``(-score, index)``, which is a total order because the indices are distinct.

Scores are canonicalised first: NaN counts as filtered out (-inf), -0.0 and subnormals as
+0.0, so the IEEE comparisons of the selection and the total order of the sort agree on
every backend.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = [
    "ScoreFn",
    "TopK",
    "category_slice_topk",
    "embedding_scores",
    "masked_topk",
    "masked_topk_reference",
]

PyTree = Any
# score_fn(queries, rows_chunk, row_index_chunk) -> float32 [Q, C]; -inf where a row fails.
ScoreFn = Callable[[PyTree, PyTree, jax.Array], jax.Array]

_NEG_INF = float("-inf")


class TopK(NamedTuple):
    """Result of an exact masked top-k; padding slots are (-inf, -1)."""

    scores: jax.Array  # float32 [Q, k], descending; -inf where fewer than k rows passed
    indices: jax.Array  # int32 [Q, k], catalog row index; -1 where no candidate
    n_valid: jax.Array  # int32 [Q], rows scoring > -inf over the whole catalog (|T|)


def _leading(tree: PyTree, what: str) -> int:
    """Leading axis of a pytree; all leaves must agree, since rows/queries are columns."""
    leaves = jax.tree_util.tree_leaves(tree)
    if not leaves:
        raise ValueError(f"{what} must contain at least one array")
    sizes = {int(jnp.shape(x)[0]) for x in leaves}
    if len(sizes) != 1:
        raise ValueError(f"{what} leaves disagree on the leading axis: {sorted(sizes)}")
    return sizes.pop()


def _canon(scores: jax.Array) -> jax.Array:
    """float32, NaN -> -inf (filtered), -0.0 and subnormals -> +0.0: one ordering everywhere.

    lax.top_k ranks -0.0 below +0.0 while IEEE compare and the spec see them equal, and XLA
    on CPU flushes subnormals to zero in some ops but not others; flushing them here makes
    every backend agree.
    """
    s = scores.astype(jnp.float32)
    s = jnp.where(jnp.isnan(s), _NEG_INF, s)
    return jnp.where(jnp.abs(s) < jnp.finfo(jnp.float32).tiny, jnp.float32(0), s)


def _empty(q: int, k: int) -> TopK:
    return TopK(
        jnp.full((q, k), _NEG_INF, jnp.float32),
        jnp.full((q, k), -1, jnp.int32),
        jnp.zeros((q,), jnp.int32),
    )


def _drop_slots(res: TopK) -> TopK:
    """k = 0: no slots, but n_valid (|T|, SPEC §5.1 total_matches) is still wanted."""
    return res._replace(scores=res.scores[:, :0], indices=res.indices[:, :0])


def hide_empty_slots(scores: jax.Array, ids: jax.Array, count: jax.Array) -> TopK:
    """Hide the ids of -inf slots, so filtered or padded rows can never leak out."""
    ids = jnp.where(scores > _NEG_INF, ids, -1).astype(jnp.int32)
    return TopK(scores, ids, count.astype(jnp.int32))


def _select_exact(s: jax.Array, ids: jax.Array, kc: int) -> tuple[jax.Array, jax.Array]:
    """The exact top-``kc`` set of [Q, C] under (score desc, position asc), in no fixed order.

    Why not just ``lax.top_k(s, kc)`` indices: which of several equal scores it keeps is not
    guaranteed on every backend. Its *values* are, so the kc-th value is a safe threshold.
    A second top_k then runs on distinct keys: rows above the threshold get keys in
    (c, 2c], rows at it get (0, c] (lower position = larger key), the rest 0. Fewer than kc
    rows lie above, and at least kc lie above or at, so the kc largest keys are positive and
    distinct: all rows above plus the lowest-position ties, with no tie left to break.
    The keys are integers held in float32 (exact below 2^24; int32 above): XLA:CPU has a
    fast top_k only for floats and sorts whole rows for int32 (measured 25x slower).
    Positions must be ascending in catalog index (true for every caller).
    """
    c = s.shape[-1]
    if kc >= c:
        return s, ids
    key_dtype = jnp.float32 if 2 * c <= 1 << 24 else jnp.int32  # int32: exact, slower
    thr = jnp.min(lax.top_k(s, kc)[0], axis=-1, keepdims=True)
    rev = jnp.int32(c) - jnp.arange(c, dtype=jnp.int32)  # c .. 1
    key = jnp.where(s > thr, rev + c, jnp.where(s == thr, rev, 0)).astype(key_dtype)
    _, pos = lax.top_k(key, kc)
    return jnp.take_along_axis(s, pos, axis=-1), jnp.take_along_axis(ids, pos, axis=-1)


def _auto_group(c: int, kc: int) -> int:
    """Group width g for the two-level selection: ~sqrt(C/kc) balances the group pass
    (C/g maxima) against the gathered candidates (kc·g); a power of two dividing C, else 1."""
    g = 1
    while g * 2 <= math.isqrt(max(c // max(kc, 1), 1)) and c % (g * 2) == 0:
        g *= 2
    return g if g >= 4 else 1


def _chunk_candidates(
    s: jax.Array, ids: jax.Array, kc: int, group: int | None = None
) -> tuple[jax.Array, jax.Array]:
    """The chunk's exact top-``kc`` set under (score desc, position asc), in no fixed order.

    Two levels when ``group`` g > 1 (g divides C): rank the C/g contiguous groups by (max
    desc, group index asc), keep the top kc groups, and select exactly among their kc·g
    rows. Exact because each row r of the true top-kc lies in a kept group: if r's group G
    were dropped, kc groups H rank before G, and each H's best row (lowest position among
    its maxima) ranks before r (max(H) > s(r), or max(H) = s(r) with H wholly left of G),
    so r would not be in the top-kc. Cost: top_k over C/g + kc·g values instead of C.
    """
    c = s.shape[-1]
    g = _auto_group(c, kc) if group is None else group
    if kc >= c or g <= 1 or c % g or kc * g >= c:
        return _select_exact(s, ids, kc)
    gmax = jnp.max(s.reshape(*s.shape[:-1], c // g, g), axis=-1)
    gidx = jnp.broadcast_to(jnp.arange(c // g, dtype=jnp.int32), gmax.shape)
    _, keep = _select_exact(gmax, gidx, kc)
    keep = jnp.sort(keep, axis=-1)  # positions stay ascending in catalog index
    pos = (keep[..., :, None] * g + jnp.arange(g, dtype=jnp.int32)).reshape(*keep.shape[:-1], -1)
    return _select_exact(
        jnp.take_along_axis(s, pos, axis=-1), jnp.take_along_axis(ids, pos, axis=-1), kc
    )


def _merge(
    best_s: jax.Array, best_i: jax.Array, cand_s: jax.Array, cand_i: jax.Array, k: int
) -> tuple[jax.Array, jax.Array]:
    """Keep the k best of both blocks by the total order (-score, index)."""
    neg = -jnp.concatenate([best_s, cand_s], axis=-1)
    idx = jnp.concatenate([best_i, cand_i], axis=-1)
    neg, idx = lax.sort((neg, idx), dimension=-1, num_keys=2)
    return -neg[..., :k], idx[..., :k]


def _running_topk(
    step: Callable[[jax.Array], tuple[jax.Array, jax.Array]],
    n_steps: int,
    q: int,
    k: int,
    c: int,
    group: int | None = None,
) -> TopK:
    """Scan ``step(i) -> (scores [Q, C], catalog ids [Q, C])`` keeping a [Q, k] running best.

    Live memory is the carry (Q·k) plus one chunk's temporaries (a few Q·C).
    """
    kc = min(k, c)

    def candidates(i: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
        """Chunk i's exact top-kc candidates (no fixed order) and its count of valid rows."""
        s, ids = step(i)
        # Barriers: XLA:CPU vectorises a reduction that reads a materialised array but not
        # one with fused compares/selects (~6x slower, measured at [256, 65536]); writing
        # the canonical scores and the 0/1 validity once is cheaper than fusing them.
        s = lax.optimization_barrier(_canon(s))
        ids = jnp.broadcast_to(ids, s.shape).astype(jnp.int32)
        valid = lax.optimization_barrier((s > _NEG_INF).astype(jnp.float32))
        count = jnp.sum(valid, axis=-1).astype(jnp.int32)  # exact: C < 2^24
        cand_s, cand_i = _chunk_candidates(s, ids, kc, group)
        return cand_s, cand_i, count

    init = _empty(q, k)
    if n_steps == 1:  # one chunk (a catalog up to ``chunk`` rows): nothing to merge into
        cand_s, cand_i, count = candidates(jnp.int32(0))
        best_s, best_i = _merge(init.scores[:, :0], init.indices[:, :0], cand_s, cand_i, k)
        pad = ((0, 0), (0, k - best_s.shape[-1]))
        best_s = jnp.pad(best_s, pad, constant_values=_NEG_INF)
        return hide_empty_slots(best_s, jnp.pad(best_i, pad, constant_values=-1), count)

    Carry = tuple[jax.Array, jax.Array, jax.Array]

    def body(carry: Carry, i: jax.Array) -> tuple[Carry, None]:
        best_s, best_i, count = carry
        cand_s, cand_i, n = candidates(i)
        best_s, best_i = _merge(best_s, best_i, cand_s, cand_i, k)
        return (best_s, best_i, count + n), None

    (best_s, best_i, count), _ = lax.scan(
        body, (init.scores, init.indices, init.n_valid), jnp.arange(n_steps, dtype=jnp.int32)
    )
    return hide_empty_slots(best_s, best_i, count)


def masked_topk(
    score_fn: ScoreFn,
    rows: PyTree,
    queries: PyTree,
    n: int,
    k: int,
    chunk: int = 8192,
    *,
    group: int | None = None,
    index_offset: jax.Array | int = 0,
) -> TopK:
    """Exact top-k per query over ``n`` catalog rows, filters applied before ranking.

    ``score_fn(queries, rows_chunk, row_index_chunk)`` returns float32 [Q, C] with -inf for
    rows that fail the filters; the env plugs in its own filter/score logic there. Rows are
    read ``chunk`` at a time with ``dynamic_slice``, so memory is O(Q·k + Q·chunk) and the
    catalog is never padded or copied: the last window is clamped to end at row ``n`` and the
    rows it re-reads from the previous window are masked with -inf by row index, so no row is
    counted or returned twice. ``n``, ``k`` and ``chunk`` are static; works under jit and vmap.

    ``group`` (static) sets the width of the two-level per-chunk selection (None: automatic,
    1: flat); every value gives the same result. ``index_offset`` (may be traced) is added to
    the row indices that ``score_fn`` sees and that are returned: a shard holding rows
    ``offset .. offset + n - 1`` of a larger catalog reports global indices (``sharded.py``).
    """
    if k < 0 or chunk < 1:
        raise ValueError(f"need k >= 0 and chunk >= 1, got k={k}, chunk={chunk}")
    if _leading(rows, "rows") != n:
        raise ValueError(f"rows have leading axis {_leading(rows, 'rows')}, expected n={n}")
    q = _leading(queries, "queries")
    if n == 0:
        return _empty(q, k)
    if k == 0:  # still report n_valid
        res = masked_topk(score_fn, rows, queries, n, 1, chunk, index_offset=index_offset)
        return _drop_slots(res)
    c = min(chunk, n)
    n_steps = math.ceil(n / c)
    lane = jnp.arange(c, dtype=jnp.int32)

    def step(i: jax.Array) -> tuple[jax.Array, jax.Array]:
        fresh_from = i * c
        start = jnp.minimum(fresh_from, n - c)
        part = jax.tree_util.tree_map(lambda a: lax.dynamic_slice_in_dim(a, start, c, 0), rows)
        idx = start + lane
        gidx = idx + jnp.asarray(index_offset, jnp.int32)
        s = score_fn(queries, part, gidx)
        return jnp.where(idx >= fresh_from, s, _NEG_INF), gidx[None, :]

    return _running_topk(step, n_steps, q, k, c, group)


def masked_topk_reference(score_fn: ScoreFn, rows: PyTree, queries: PyTree, n: int, k: int) -> TopK:
    """Plain jnp oracle: one score_fn call over all n rows (O(Q·N) memory), then a full sort.

    A full two-key sort on (-score, index) states the tie rule directly instead of trusting
    ``lax.top_k``'s tie behaviour; for tests and small catalogs only.
    """
    q = _leading(queries, "queries")
    if n == 0:
        return _empty(q, k)
    if k == 0:
        return _drop_slots(masked_topk_reference(score_fn, rows, queries, n, 1))
    idx = jnp.arange(n, dtype=jnp.int32)
    s = _canon(score_fn(queries, rows, idx))
    count = jnp.sum(s > _NEG_INF, axis=-1, dtype=jnp.int32)
    ids = jnp.broadcast_to(idx, s.shape)
    if k > n:
        s = jnp.pad(s, ((0, 0), (0, k - n)), constant_values=_NEG_INF)
        ids = jnp.pad(ids, ((0, 0), (0, k - n)), constant_values=-1)
    neg, ids = lax.sort((-s, ids), dimension=-1, num_keys=2)
    return hide_empty_slots(-neg[:, :k], ids[:, :k], count)


def category_slice_topk(
    score_fn: ScoreFn,
    rows: PyTree,
    queries: PyTree,
    cat_order: jax.Array,
    cat_offsets: jax.Array,
    query_cat: jax.Array,
    k: int,
    max_cat_size: int,
    chunk: int = 2048,
) -> TopK:
    """Fast path for queries filtering on one category: score only that category's rows.

    Query q reads ``cat_order[cat_offsets[c] : cat_offsets[c] + max_cat_size]`` with
    ``c = query_cat[q]``, masking positions past ``cat_offsets[c + 1]``; indices returned are
    catalog indices. ``cat_order`` must list each category's rows in ascending catalog index
    (what a stable argsort of the category ids gives): the cross-chunk merge sorts by catalog
    index anyway, but ties inside a chunk are resolved by position. ``max_cat_size`` (static)
    must be >= the largest category. ``score_fn`` sees one query at a time (Q = 1) with its
    own gathered rows, vmapped over queries, so memory is O(Q·k + Q·chunk·row_width).
    """
    if k < 0 or chunk < 1 or max_cat_size < 0:
        raise ValueError(f"bad k={k}, chunk={chunk}, max_cat_size={max_cat_size}")
    q = _leading(queries, "queries")
    n = int(cat_order.shape[0])
    if n == 0 or max_cat_size == 0:
        return _empty(q, k)
    if k == 0:
        args = (cat_order, cat_offsets, query_cat, 1, max_cat_size, chunk)
        return _drop_slots(category_slice_topk(score_fn, rows, queries, *args))
    c = min(chunk, max_cat_size)
    n_steps = math.ceil(max_cat_size / c)
    query_cat = query_cat.astype(jnp.int32)
    start = cat_offsets[query_cat].astype(jnp.int32)  # [Q]
    size = cat_offsets[query_cat + 1].astype(jnp.int32) - start  # [Q]
    lane = jnp.arange(c, dtype=jnp.int32)

    def one(query: PyTree, ids: jax.Array) -> jax.Array:
        part = jax.tree_util.tree_map(lambda a: jnp.take(a, ids, axis=0), rows)
        single = jax.tree_util.tree_map(lambda x: x[None], query)
        return score_fn(single, part, ids)[0]

    def step(i: jax.Array) -> tuple[jax.Array, jax.Array]:
        j = i * c + lane  # [C] positions inside the category
        live = j[None, :] < size[:, None]  # [Q, C]
        ids = cat_order[jnp.clip(start[:, None] + j[None, :], 0, n - 1)].astype(jnp.int32)
        s = jax.vmap(one)(queries, ids)
        return jnp.where(live, s, _NEG_INF), ids

    return _running_topk(step, n_steps, q, k, c)


def embedding_scores(
    query_emb: jax.Array, emb_chunk: jax.Array, *, normalize: bool = False
) -> jax.Array:
    """Cosine scores float32 [Q, C] of query_emb [Q, D] against emb_chunk [C, D].

    SPEC §1.6 stores L2-normalised vectors and defines cos as their dot product, so by
    default this is that dot product (zero vectors stay at 0). ``normalize=True`` divides by
    the norms for inputs that are not normalised (a zero vector still scores 0). Products run
    in the promoted input dtype (bf16 x bf16 stays on bf16 units) and always accumulate in
    float32; precision HIGHEST stops float32 matmuls silently dropping to TF32 on GPU.
    """
    dt = jnp.promote_types(query_emb.dtype, emb_chunk.dtype)
    qe = query_emb.astype(dt)
    ee = emb_chunk.astype(dt)
    dots = lax.dot_general(
        qe,
        ee,
        (((1,), (1,)), ((), ())),
        precision=lax.Precision.HIGHEST,
        preferred_element_type=jnp.float32,
    )
    if not normalize:
        return dots

    def inv_norm(x: jax.Array) -> jax.Array:
        norm = jnp.sqrt(jnp.sum(jnp.square(x.astype(jnp.float32)), axis=-1))
        return jnp.where(norm > 0, 1.0 / jnp.where(norm > 0, norm, 1.0), 0.0)

    return dots * inv_norm(qe)[:, None] * inv_norm(ee)[None, :]
