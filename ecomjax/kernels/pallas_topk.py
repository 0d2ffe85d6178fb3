"""Optional Pallas GPU kernel for the exact masked top-k of ``topk.py`` (embedding scores).

Same contract as ``masked_topk`` with ``embedding_scores`` and a filter: results ordered by
``(score descending, catalog index ascending)``, filtered rows score -inf, NaN -> -inf,
-0.0 and subnormals -> +0.0, ``n_valid`` counts rows > -inf, padding slots are (-inf, -1).
Only the filters fit a kernel, so they are given as arrays instead of a ``score_fn``:

* ``row_valid`` [N] (bool or int, nonzero = row may match), e.g. in stock / not deleted;
* ``row_cat`` [N] or [N, F] discrete attributes (category, brand, ...) and ``query_cat``
  [Q] or [Q, F]: per attribute, -1 is "no filter", else the row must equal it and be >= 0
  (``predicates.filters_pass``'s discrete rule; codes <= -2 match nothing);
* optionally ``row_value`` [N] and ``query_range`` [Q, 2]: inclusive ``lo <= v <= hi``
  (e.g. a price cap), compared in their promoted dtype; use ±inf (or the int limits) for
  an open end; a NaN value never passes.

Design. ``pallas_call`` over the grid (query blocks, row blocks). Each program loads one
``[block_rows, D]`` slab of the catalog (masked loads past row N, so the catalog is never
padded or copied when D is a multiple of 16), computes the ``[block_queries, block_rows]``
scores with a float32-accumulating dot (inputs in the promoted dtype, as
``embedding_scores``; f32 at IEEE precision, never TF32), applies the filters,
canonicalises, counts the rows > -inf, and extracts the block's exact top
``min(k, block_rows)`` by rounds of (max score, then lowest row index at that score), each
round masking the row it took. Out come, per (query, row block), the candidates' scores and
global ids (width ``kw = min(next_pow2(k), block_rows)``, padded with (-inf, -1)) and the
count. Outside, ``n_valid`` is the sum of the counts and the ``Q x n_blocks*kw``
candidates are merged exactly with ``topk.py``'s own selection (``_chunk_candidates``) and
two-key sort (``_merge``). Memory: candidates ``8·Q·n_blocks·kw`` bytes (``kw/block_rows``
of a Q x N score matrix, which is never formed) plus one block per program.

Why the merge is exact. Every row of the global top-k is in its block's top-k under the
same total order. ``_chunk_candidates`` breaks ties by *position*, which here agrees with
catalog index among equal scores: blocks are laid out in index order, and inside a block a
tie is extracted lower index first. (Padding slots are all -inf and their ids are hidden.)

Limits (static): ``block_rows`` and ``block_queries`` powers of two >= 16 (Triton tiles and
``tl.dot``); each round costs a few passes over the score tile, so the kernel suits k up
to ~64 with ``block_rows`` >> k (k > block_rows works, but then every row is a candidate).
A D that is not a multiple of 16 is zero-padded outside (one copy of the catalog; exact:
zero columns add 0). The D loop runs in chunks of 16 to 64 columns (the largest power of
two <= 64 dividing the padded D). A bool ``row_valid`` is converted to int32 per call (O(N)).
On GPU the lowering is Triton's (forced via its ``CompilerParams``, even when Mosaic GPU is
jax's default for Pallas); it is checked by lowering for CUDA on CPU in the tests, but the
compiled kernel's speed and register use are unmeasured here. Scores of non-integer
vectors may differ in the last bits from XLA's matmul (accumulation order), so ids can
differ from ``masked_topk`` at near-ties there, as between any two backends.

``interpret=None`` runs the kernel in Pallas interpret mode unless the default backend is
GPU (interpret mode is for tests; it is not a performance path).
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from ecomjax.kernels.topk import (
    TopK,
    _chunk_candidates,
    _drop_slots,
    _empty,
    _merge,
    hide_empty_slots,
)

try:  # Triton-specific masked loads; present in every jaxlib that can run this on GPU
    from jax.experimental.pallas import triton as pltriton
except ImportError:  # pragma: no cover - depends on the jax build
    pltriton = None

__all__ = ["pallas_masked_topk", "default_interpret"]

_NEG_INF = float("-inf")
_INT_MAX = 2**31 - 1
_SQUEEZED = getattr(pl, "squeezed", None)  # None was the spelling of a squeezed dim before


def default_interpret() -> bool:
    """Interpret mode everywhere except on a GPU default backend."""
    return jax.default_backend() != "gpu"


def _is_pow2(x: int) -> bool:
    return x >= 1 and (x & (x - 1)) == 0


def _next_pow2(x: int) -> int:
    return 1 << max(x - 1, 0).bit_length()


def _masked_load(ref, mask: jax.Array, other):
    """``ref[...]`` where ``mask``, else ``other``: never reads past the array on GPU."""
    if pltriton is not None:
        return pltriton.load(ref, mask=mask, other=other)
    return jnp.where(mask, ref[...], other)  # interpret mode only


def _kernel(*refs, n, r, dc, nd, kb, kw, n_attr, has_valid, has_range, dot_dtype):
    """One (query block, row block) program: scores, filters, count, exact block top-kb."""
    refs = list(refs)
    q_ref = refs.pop(0)
    qcat_ref = refs.pop(0) if n_attr else None
    qrange_ref = refs.pop(0) if has_range else None
    e_ref = refs.pop(0)
    rcat_ref = refs.pop(0) if n_attr else None
    valid_ref = refs.pop(0) if has_valid else None
    value_ref = refs.pop(0) if has_range else None
    out_s_ref, out_i_ref, cnt_ref = refs

    qb = q_ref.shape[0]
    base = pl.program_id(1) * r
    rows = base + lax.broadcasted_iota(jnp.int32, (r,), 0)  # global row ids [R]
    live = rows < n  # the last block may run past the catalog: masked, never read

    def d_step(c, acc):
        cols = pl.ds(pl.multiple_of(c * dc, dc), dc)
        qc = q_ref[:, cols].astype(dot_dtype)
        mask = jnp.broadcast_to(live[:, None], (r, dc))
        ec = _masked_load(e_ref.at[:, cols], mask, 0).astype(dot_dtype)
        return acc + lax.dot_general(
            qc,
            ec,
            (((1,), (1,)), ((), ())),
            precision=(lax.Precision.HIGHEST, lax.Precision.HIGHEST),
            preferred_element_type=jnp.float32,
        )

    s = lax.fori_loop(0, nd, d_step, jnp.zeros((qb, r), jnp.float32))

    ok = jnp.broadcast_to(live[None, :], (qb, r))
    if has_valid:
        ok = ok & (_masked_load(valid_ref, live, 0) != 0)[None, :]
    for f in range(n_attr):  # width-1 slices: a static int index does not discharge
        rc = _masked_load(rcat_ref.at[:, pl.ds(f, 1)], live[:, None], -1).reshape(1, r)
        qc = qcat_ref[:, pl.ds(f, 1)]  # [Qb, 1]
        ok = ok & ((qc == -1) | ((rc == qc) & (rc >= 0)))
    if has_range:
        v = _masked_load(value_ref, live, 0)[None, :]
        lo, hi = qrange_ref[:, pl.ds(0, 1)], qrange_ref[:, pl.ds(1, 1)]  # [Qb, 1]
        ok = ok & (v >= lo) & (v <= hi)

    # Canonical scores (topk._canon): NaN -> -inf, -0.0 and subnormals -> +0.0.
    s = jnp.where(lax.ne(s, s), _NEG_INF, s)
    s = jnp.where(lax.abs(s) < jnp.finfo(jnp.float32).tiny, 0.0, s)
    s = jnp.where(ok, s, _NEG_INF)
    cnt_ref[...] = jnp.sum((s > _NEG_INF).astype(jnp.int32), axis=1)

    ids = jnp.broadcast_to(rows[None, :], (qb, r))
    slots = lax.broadcasted_iota(jnp.int32, (qb, kw), 1)

    def take_best(j, carry):
        s, best_s, best_i = carry
        m = jnp.max(s, axis=1)  # [Qb]
        i = jnp.min(jnp.where(s == m[:, None], ids, _INT_MAX), axis=1)  # lowest id at max
        i = jnp.where(m > _NEG_INF, i, -1)
        best_s = jnp.where(slots == j, m[:, None], best_s)
        best_i = jnp.where(slots == j, i[:, None], best_i)
        return jnp.where(ids == i[:, None], _NEG_INF, s), best_s, best_i

    init = (s, jnp.full((qb, kw), _NEG_INF, jnp.float32), jnp.full((qb, kw), -1, jnp.int32))
    _, best_s, best_i = lax.fori_loop(0, kb, take_best, init)
    out_s_ref[...] = best_s
    out_i_ref[...] = best_i


@functools.partial(
    jax.jit,
    static_argnames=(
        "k",
        "block_rows",
        "block_queries",
        "interpret",
        "num_warps",
        "num_stages",
    ),
)
def _pallas_topk(
    queries: jax.Array,
    emb: jax.Array,
    row_cat: jax.Array | None,
    row_valid: jax.Array | None,
    query_cat: jax.Array | None,
    row_value: jax.Array | None,
    query_range: jax.Array | None,
    *,
    k: int,
    block_rows: int,
    block_queries: int,
    interpret: bool,
    num_warps: int | None,
    num_stages: int | None,
) -> TopK:
    q, d = queries.shape
    n = emb.shape[0]
    r, qb = block_rows, block_queries
    dot_dtype = jnp.promote_types(queries.dtype, emb.dtype)

    d_pad = max(16, -(-d // 16) * 16)
    if d_pad != d:  # zero columns: exact, but a copy of the catalog
        emb = jnp.pad(emb, ((0, 0), (0, d_pad - d)))
        queries = jnp.pad(queries, ((0, 0), (0, d_pad - d)))
    dc = 16
    while dc < 64 and d_pad % (2 * dc) == 0:
        dc *= 2
    q_pad = -(-q // qb) * qb
    n_qb, n_rb = q_pad // qb, pl.cdiv(n, r)
    kb = min(k, r)
    kw = min(_next_pow2(k), r)

    def pad_q(x: jax.Array, fill) -> jax.Array:
        return jnp.pad(x, [(0, q_pad - q)] + [(0, 0)] * (x.ndim - 1), constant_values=fill)

    q_side = [pad_q(queries, 0)]
    q_specs = [pl.BlockSpec((qb, d_pad), lambda i, j: (i, 0))]
    r_side = [emb]
    r_specs = [pl.BlockSpec((r, d_pad), lambda i, j: (j, 0))]
    n_attr = 0
    if row_cat is not None:
        n_attr = row_cat.shape[1]
        q_side.append(pad_q(query_cat, -1))
        q_specs.append(pl.BlockSpec((qb, n_attr), lambda i, j: (i, 0)))
        r_side.append(row_cat)
        r_specs.append(pl.BlockSpec((r, n_attr), lambda i, j: (j, 0)))
    if row_valid is not None:
        r_side.append(row_valid)
        r_specs.append(pl.BlockSpec((r,), lambda i, j: (j,)))
    if row_value is not None:
        q_side.append(pad_q(query_range, 0))
        q_specs.append(pl.BlockSpec((qb, 2), lambda i, j: (i, 0)))
        r_side.append(row_value)
        r_specs.append(pl.BlockSpec((r,), lambda i, j: (j,)))

    kernel = functools.partial(
        _kernel,
        n=n,
        r=r,
        dc=dc,
        nd=d_pad // dc,
        kb=kb,
        kw=kw,
        n_attr=n_attr,
        has_valid=row_valid is not None,
        has_range=row_value is not None,
        dot_dtype=dot_dtype,
    )
    compiler_params = None
    if not interpret and pltriton is not None:
        compiler_params = pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages)
    cand_s, cand_i, counts = pl.pallas_call(
        kernel,
        out_shape=(
            jax.ShapeDtypeStruct((q_pad, n_rb, kw), jnp.float32),
            jax.ShapeDtypeStruct((q_pad, n_rb, kw), jnp.int32),
            jax.ShapeDtypeStruct((q_pad, n_rb), jnp.int32),
        ),
        grid=(n_qb, n_rb),  # query blocks vary fastest: neighbours share a catalog slab
        in_specs=q_specs + r_specs,
        out_specs=(
            pl.BlockSpec((qb, _SQUEEZED, kw), lambda i, j: (i, j, 0)),
            pl.BlockSpec((qb, _SQUEEZED, kw), lambda i, j: (i, j, 0)),
            pl.BlockSpec((qb, _SQUEEZED), lambda i, j: (i, j)),
        ),
        interpret=interpret,
        compiler_params=compiler_params,
        name="masked_topk_block",
    )(*q_side, *r_side)

    cand_s = cand_s[:q].reshape(q, n_rb * kw)
    cand_i = cand_i[:q].reshape(q, n_rb * kw)
    count = jnp.sum(counts[:q], axis=1, dtype=jnp.int32)
    sel_s, sel_i = _chunk_candidates(cand_s, cand_i, min(k, n_rb * kw))
    init = _empty(q, k)
    best_s, best_i = _merge(init.scores, init.indices, sel_s, sel_i, k)
    return hide_empty_slots(best_s, best_i, count)


def pallas_masked_topk(
    queries: jax.Array,
    emb: jax.Array,
    row_cat: jax.Array | None,
    row_valid: jax.Array | None,
    query_cat: jax.Array | None,
    k: int,
    *,
    row_value: jax.Array | None = None,
    query_range: jax.Array | None = None,
    block_rows: int = 256,
    block_queries: int | None = None,
    interpret: bool | None = None,
    num_warps: int | None = None,
    num_stages: int | None = None,
) -> TopK:
    """Exact filtered top-k of ``queries`` [Q, D] against ``emb`` [N, D] (see the module doc).

    Equals ``masked_topk_reference`` with the score ``embedding_scores(queries, emb)``
    masked by the filters, whenever the dot products are exact in float32 (ties included).
    ``row_cat``/``query_cat`` (both or neither), ``row_valid`` and ``row_value``/
    ``query_range`` (both or neither) may be None: no such filter. ``block_queries`` None
    picks 16 or 32. ``num_warps``/``num_stages`` go to Triton on GPU. Jitted inside; the
    static arguments are ``k`` and the block/launch settings.
    """
    if queries.ndim != 2 or emb.ndim != 2 or queries.shape[1] != emb.shape[1]:
        raise ValueError(f"need queries [Q, D] and emb [N, D], got {queries.shape}, {emb.shape}")
    if k < 0:
        raise ValueError(f"need k >= 0, got {k}")
    q, n = queries.shape[0], emb.shape[0]
    if block_queries is None:
        block_queries = 16 if q <= 16 else 32
    for name, v in (("block_rows", block_rows), ("block_queries", block_queries)):
        if not _is_pow2(v) or v < 16:
            raise ValueError(f"{name} must be a power of two >= 16, got {v}")
    if (row_cat is None) != (query_cat is None):
        raise ValueError("row_cat and query_cat go together")
    if (row_value is None) != (query_range is None):
        raise ValueError("row_value and query_range go together")
    if row_cat is not None:
        row_cat = jnp.asarray(row_cat, jnp.int32)
        query_cat = jnp.asarray(query_cat, jnp.int32)
        row_cat = row_cat[:, None] if row_cat.ndim == 1 else row_cat
        query_cat = query_cat[:, None] if query_cat.ndim == 1 else query_cat
        if row_cat.shape[0] != n or query_cat.shape != (q, row_cat.shape[1]):
            raise ValueError(f"row_cat {row_cat.shape} / query_cat {query_cat.shape} vs Q={q}")
    if row_valid is not None:
        row_valid = jnp.asarray(row_valid)
        if row_valid.shape != (n,):
            raise ValueError(f"row_valid must be [N={n}], got {row_valid.shape}")
        row_valid = row_valid.astype(jnp.int32)
    if row_value is not None:
        row_value, query_range = jnp.asarray(row_value), jnp.asarray(query_range)
        if row_value.shape != (n,) or query_range.shape != (q, 2):
            raise ValueError(f"row_value {row_value.shape} / query_range {query_range.shape}")
        dt = jnp.promote_types(row_value.dtype, query_range.dtype)
        row_value, query_range = row_value.astype(dt), query_range.astype(dt)
    if n == 0 or q == 0:
        return _empty(q, k)
    if interpret is None:
        interpret = default_interpret()
    res = _pallas_topk(
        queries,
        emb,
        row_cat,
        row_valid,
        query_cat,
        row_value,
        query_range,
        k=max(k, 1),  # k = 0: no slots, but n_valid is still wanted
        block_rows=block_rows,
        block_queries=block_queries,
        interpret=bool(interpret),
        num_warps=num_warps,
        num_stages=num_stages,
    )
    return _drop_slots(res) if k == 0 else res
