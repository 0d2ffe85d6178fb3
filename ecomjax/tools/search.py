"""catalog_search as a stage before the step (SPEC §5.1, DESIGN "Retrieval").

``resolve_searches`` scores every search call of a turn with the ``kernels`` masked top-k
(filters before ranking, exact over the whole catalog), then mixes in the difficulty's
distractors and applies the top_k(d) cut. The step only reads the resolved ids, so a
driver can skip this stage for a whole batch when no episode searches.

With ``catalog.emb_axis`` set (a catalog whose embedding rows are split over a mesh axis,
``catalog.sharded_emb``), ``_resolve_sharded`` ranks every device's queries on every
device's rows and merges the blocks exactly, so the results equal the whole table's.

Two documented simplifications of §5.1: filters and ``in_stock_only`` see the stock as it
was at the start of the turn; a distractor that repeats an earlier distractor is dropped
(each slot draws up to ``TRIES`` keyed candidates from its category and keeps the first
that is not a true result).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax import exposure as X
from ecomjax.bits import distinct_positions
from ecomjax.catalog.sharded_emb import emb_dots, emb_rows, lockstep_max, row_offset
from ecomjax.catalog.types import Catalog
from ecomjax.compact import compact, first_true, in_sorted
from ecomjax.kernels.sharded import merge_topk
from ecomjax.kernels.topk import TopK, category_slice_topk, hide_empty_slots, masked_topk
from ecomjax.predicates import disc_values, filters_pass, num_values_scaled
from ecomjax.types import Action, EnvParams, EpisodeState, SearchResults, no_search
from ecomjax.world import is_known, product_stock_qty, safe

R = C.MAX_SEARCH_RESULTS
TRIES = 8
NEG = -jnp.inf


def _sort_key(catalog: Catalog, idx: jax.Array, mode: jax.Array) -> jax.Array:
    """Higher is better. Sort keys are exact integers in float32."""
    return jnp.select(
        [mode == C.SortBy.PRICE_ASC, mode == C.SortBy.RATING_DESC],
        [
            -catalog.price_cents[idx].astype(jnp.float32),
            catalog.rating_x100[idx].astype(jnp.float32),
        ],
        -catalog.ship_days[idx].astype(jnp.float32),
    )


def shown_score(catalog: Catalog, qvec: jax.Array, idx: jax.Array, mode: jax.Array) -> jax.Array:
    """The card's ``score``: cosine for relevance / similar_to, else the key value."""
    cos = emb_dots(catalog, idx, qvec)
    key = jnp.select(
        [mode == C.SortBy.PRICE_ASC, mode == C.SortBy.RATING_DESC],
        [catalog.price_cents[idx] / 100.0, catalog.rating_x100[idx] / 100.0],
        catalog.ship_days[idx].astype(jnp.float32),
    )
    return jnp.where(mode == C.SortBy.RELEVANCE, cos, key).astype(jnp.float32)


def _query(catalog: Catalog, action: Action, slot: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(qvec [D], mode) of one call slot: similar_to ranks by the reference's vector."""
    ref = action.product[slot]
    similar = ref != -1
    mode = jnp.where(similar, C.SortBy.RELEVANCE, action.enum_a[slot])
    qvec = jnp.where(
        similar,
        emb_rows(catalog, safe(ref)),
        action.query_emb[slot].astype(jnp.float32),
    )
    return qvec, mode


CAT_FILTER = C.DISC_FILTERS.index(C.Attr.CAT)


def category_filtered(catalog: Catalog, action: Action) -> jax.Array:
    """bool [..., MAX_TOOL_CALLS]: searches filtered to one known category and sorted by
    an exact integer key (price, rating, ship days). Only that category's rows can pass
    their filters, so scanning them alone gives the same results bit for bit. Relevance
    (cosine) sorts stay on the full scan: a dot product over gathered rows may round
    differently from the contiguous one, and a near-tie could then swap."""
    cat = action.filter_disc[..., CAT_FILTER]
    keyed = (action.enum_a != C.SortBy.RELEVANCE) & (action.product == -1)
    return (catalog.max_cat_size > 0) & (cat >= 0) & (cat < catalog.n_categories) & keyed


class Query(NamedTuple):
    """One search call slot as the ranking reads it. Small on purpose: with a row-sharded
    ``emb`` every device ranks every device's queries against its own rows."""

    qvec: jax.Array  # float32 [D]
    mode: jax.Array  # SortBy
    fd: jax.Array  # discrete filters
    fn: jax.Array  # numeric filters
    in_stock_only: jax.Array
    ref: jax.Array  # similar_to reference, -1 = none (never its own result)
    exhausted: jax.Array  # [MAX_CART_LINES] SKUs whose free stock the cart used up
    overlay: X.Overlay  # forced out-of-stock products


def search_query(catalog: Catalog, state: EpisodeState, action: Action, slot: jax.Array) -> Query:
    world = state.world
    qvec, mode = _query(catalog, action, slot)
    # Product SKUs whose free stock the cart has used up (at most one per cart line).
    line_free = jnp.where(
        world.cart_var == -1, catalog.stock[safe(world.cart_pid)] - world.cart_qty, 1
    )
    exhausted = jnp.where((world.cart_no > 0) & (line_free <= 0), world.cart_pid, -1)
    return Query(
        qvec, mode, action.filter_disc[slot], action.filter_num[slot], action.flag[slot],
        action.product[slot], exhausted, X.overlay(world),
    )  # fmt: skip


def query_scores(catalog: Catalog, q: Query, emb: jax.Array | None, idx: jax.Array) -> jax.Array:
    """float32 [1, C]: the ranking score of rows ``idx`` (global ids), -inf where a row
    fails the filters or lies past N. ``emb`` [C, D] are those rows' vectors, or None for
    a keyed sort (price, rating, ship days), which never reads them."""
    ok = filters_pass(disc_values(catalog, idx), num_values_scaled(catalog, idx), q.fd, q.fn)
    in_stock = (catalog.stock[idx] > 0) & ~X.is_oos(q.overlay, idx)
    in_stock &= ~(idx[:, None] == q.exhausted).any(-1)
    ok &= ~q.in_stock_only | in_stock
    ok &= (idx != q.ref) & (idx < catalog.n_products)
    key = _sort_key(catalog, idx, q.mode)
    if emb is None:
        s = key
    else:
        s = jnp.where(q.mode == C.SortBy.RELEVANCE, emb.astype(jnp.float32) @ q.qvec, key)
    return jnp.where(ok, s, NEG)[None, :]


def _ranked(catalog: Catalog, q: Query, params: EnvParams, by_category: bool = False) -> TopK:
    """Exact masked top-R of one query over the rows of ``emb`` this device holds (all of
    them when whole), with global ids. ``by_category`` (static; only for a
    ``category_filtered`` slot) scans the filter's category's rows of ``cat_order`` alone:
    a keyed sort, so no embedding row is read and the rows argument is a placeholder."""

    def score_fn(_, r, idx):
        return query_scores(catalog, q, None if by_category else r["emb"], idx)

    if by_category:
        cat = jnp.clip(q.fd[CAT_FILTER], 0, catalog.n_categories - 1)[None]
        return category_slice_topk(
            score_fn, {"stock": catalog.stock}, jnp.zeros((1,)), catalog.cat_order,
            catalog.cat_offsets, cat, R, catalog.max_cat_size, params.search_chunk,
        )  # fmt: skip
    rows = {"emb": catalog.emb}
    n_rows = int(catalog.emb.shape[0])
    return masked_topk(
        score_fn, rows, jnp.zeros((1,)), n_rows, R, params.search_chunk,
        index_offset=row_offset(catalog),
    )  # fmt: skip


def _ranked_candidates(
    catalog: Catalog,
    state: EpisodeState,
    action: Action,
    slot: jax.Array,
    params: EnvParams,
    by_category: bool = False,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Exact masked top-R for one call slot of a whole ``emb``: (ids [R], n_valid, qvec
    [D], mode)."""
    q = search_query(catalog, state, action, slot)
    top = _ranked(catalog, q, params, by_category)
    return top.indices[0], top.n_valid[0], q.qvec, q.mode


def n_distractors(diff: D.Difficulty, n: jax.Array) -> jax.Array:
    """D = round(eps_rank(d)·n) distractors among n results (SPEC §5.1 step 4)."""
    return jnp.round(diff.eps_rank * n).astype(jnp.int32)


def search_counts(diff: D.Difficulty, qty: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(n, D) of one catalog_search call: n = min(clip(qty, 1, 500), top_k(d)) results
    shown, D of them distractors, so at most n - D true results (SPEC §5.1 steps 3-4).

    The one home of this count: ``finish_slot`` and the host retriever's depth caps
    (``llm_bridge.retrieval``) both read it."""
    n = jnp.minimum(jnp.clip(qty, 1, 500), diff.top_k)
    return n, n_distractors(diff, n)


@functools.lru_cache(maxsize=64)
def max_distractors(params: EnvParams) -> int:
    """The most distractors any search can mix in under ``params`` (static): max over d of
    round(eps_rank(d)·top_k(d)), 20 under SPEC's schedule, at most R under overrides."""
    with jax.ensure_compile_time_eval():
        diff = D.difficulty(jnp.arange(C.D_MAX + 1), params.overrides)
        return int(min(max(int(n_distractors(diff, diff.top_k).max()), 1), R))


def _true_member(true_ids: jax.Array, is_true: jax.Array, cand: jax.Array) -> jax.Array:
    """bool, cand's shape: the candidate is one of the true results (sort + binary search)."""
    true_sorted = jnp.sort(jnp.where(is_true, true_ids, jnp.iinfo(jnp.int32).max))
    return in_sorted(true_sorted, cand)


def _mix_distractors(
    key: jax.Array,
    catalog: Catalog,
    true_ids: jax.Array,
    n_true: jax.Array,
    n_dist: jax.Array,
    max_dist: int = R,
    *,
    positions: Callable[[jax.Array, jax.Array, jax.Array, int], jax.Array] | None = None,
    member: Callable[[jax.Array, jax.Array, jax.Array], jax.Array] = _true_member,
) -> jax.Array:
    """Interleave n_dist keyed distractors at distinct positions among n_true + n_dist.
    ``max_dist`` (static) bounds n_dist (``max_distractors``). ``positions`` (key, total,
    n_dist, max_dist -> bool [R], the distractor slots) and ``member`` (candidate among
    the true results) are parameters so that ``benchmarks/search_helpers.py`` times what
    they replaced here."""
    slots = jnp.arange(R)
    total = n_true + n_dist
    pkey = jax.random.fold_in(key, 0)
    if positions is None:
        is_dist = distinct_positions(jax.random.bits(pkey, (max_dist,)), total, n_dist, R)
    else:
        is_dist = positions(pkey, total, n_dist, max_dist)
    t_before = jnp.cumsum(~is_dist & (slots < total)) - (~is_dist & (slots < total))
    # Category of the next true item to emit, else the last emitted; whole catalog if none.
    # Draws only for the distractor slots (at most ``max_dist``, in slot order): the
    # keyed candidates of the other slots were never used, and were most of a search.
    dslot = first_true(is_dist, max_dist)  # [M], -1 padded
    ds = jnp.maximum(dslot, 0)
    nxt = jnp.where(t_before[ds] < n_true, t_before[ds], n_true - 1)
    cat = catalog.category[safe(true_ids[jnp.maximum(nxt, 0)])].astype(jnp.int32)
    lo = jnp.where(n_true > 0, catalog.cat_offsets[cat], 0)
    hi = jnp.where(n_true > 0, catalog.cat_offsets[cat + 1], catalog.n_products)
    u = jax.vmap(lambda s: jax.random.uniform(jax.random.fold_in(key, s + 1), (TRIES,)))(ds)
    pos = lo[:, None] + jnp.floor(u * (hi - lo)[:, None]).astype(jnp.int32)
    pos = jnp.minimum(pos, jnp.maximum(hi - 1, lo)[:, None])
    cand = jnp.where(n_true > 0, catalog.cat_order[pos], pos)
    hit = member(true_ids, slots < n_true, cand)
    ok = ~hit & (hi > lo)[:, None]
    rows = jnp.arange(max_dist)
    pick = jnp.where(ok.any(-1) & (dslot >= 0), cand[rows, jnp.argmax(ok, -1)], -1)
    # Drop a distractor that repeats an earlier one.
    earlier = (pick[None, :] == pick[:, None]) & (rows[None, :] < rows[:, None]) & (pick >= 0)
    pick = jnp.where(earlier.any(-1), -1, pick)
    pick = jnp.full(R, -1, jnp.int32).at[jnp.where(dslot >= 0, dslot, R)].set(pick, mode="drop")
    true_at = true_ids[jnp.clip(t_before, 0, R - 1)]
    out = jnp.where(is_dist, pick, jnp.where(slots < total, true_at, -1))
    return compact(out, out >= 0, R)


def resolve_slot(
    catalog: Catalog,
    state: EpisodeState,
    action: Action,
    slot: jax.Array,
    params: EnvParams,
    by_category: bool = False,
) -> SearchResults:
    """One catalog_search call slot, as a SearchResults row without the slot axis."""
    ids, n_valid, _, _ = _ranked_candidates(catalog, state, action, slot, params, by_category)
    return finish_slot(catalog, state, action, slot, params, ids, n_valid)


def finish_slot(
    catalog: Catalog,
    state: EpisodeState,
    action: Action,
    slot: jax.Array,
    params: EnvParams,
    ids: jax.Array,
    n_valid: jax.Array,
) -> SearchResults:
    """Everything after ranking, given the exact top-R ``ids`` [R] (-1 padded) and |T|:
    distractors, the top_k(d) cut, an unknown similar_to, the cards' scores and stock.

    Why separate: a host retriever (FAISS) ranks on its own and reuses this, so both paths
    share every keyed draw and card field."""
    is_search = action.tool == C.Tool.CATALOG_SEARCH
    counter = state.world.n_searches + jnp.cumsum(is_search)[slot] - 1
    ref = action.product[slot]
    bad_ref = (ref != -1) & ~is_known(catalog, ref)
    qvec, mode = _query(catalog, action, slot)
    diff = D.difficulty(state.problem.d, params.overrides)
    n, n_dist = search_counts(diff, action.qty[slot])
    n_true = jnp.minimum(n_valid, n - n_dist)
    skey = jax.random.fold_in(jax.random.fold_in(state.key, C.STREAM["SEARCH"]), counter)
    mixed = _mix_distractors(skey, catalog, ids, n_true, n_dist, max_distractors(params))
    live = is_search[slot] & ~bad_ref
    mixed = jnp.where(live, mixed, -1)
    score = shown_score(catalog, qvec, safe(mixed), mode)
    stock = product_stock_qty(catalog, state.problem, state.world, safe(mixed))
    return SearchResults(
        ids=mixed,
        score=jnp.where(mixed >= 0, score, 0.0),
        stock=jnp.where(mixed >= 0, stock, 0),
        total=jnp.where(live, n_valid, 0),
        count=(mixed >= 0).sum().astype(jnp.int32),
        top_k=jnp.where(is_search[slot], n, 0),
        error=jnp.where(is_search[slot] & bad_ref, C.ToolError.UNKNOWN_PRODUCT, 0).astype(
            jnp.int32
        ),
    )


def resolve_searches(
    catalog: Catalog, state: EpisodeState, action: Action, params: EnvParams
) -> SearchResults:
    """Every call slot of one episode's action (vmap over episodes).

    Draws come from the episode key's SEARCH stream folded by the search-call counter."""
    slots = jnp.arange(C.MAX_TOOL_CALLS)
    return jax.vmap(resolve_slot, (None, None, None, 0, None))(
        catalog, state, action, slots, params
    )


def resolve_batch(
    catalog: Catalog,
    states: EpisodeState,
    actions: Action,
    params: EnvParams,
    live: jax.Array,
    chunk: int | None = None,
) -> SearchResults:
    """The retrieval stage for a batch: only the search calls of live episodes are scored.

    Search slots are compacted and resolved ``chunk`` at a time, so the cost follows the
    number of searches, not batch x call slots. Searches filtered to one category scan
    only that category's rows (``catalog.max_cat_size`` of them), the rest the whole
    catalog. Results equal ``resolve_searches``."""
    chunk = params.search_batch if chunk is None else chunk
    b = live.shape[0]
    nb = b * C.MAX_TOOL_CALLS
    searching = (actions.tool == C.Tool.CATALOG_SEARCH) & live[:, None]
    out = jax.tree_util.tree_map(lambda x: x.reshape(nb, *x.shape[2:]), no_search((b,)))
    by_cat = category_filtered(catalog, actions)
    passes = ((False, searching & ~by_cat), (True, searching & by_cat))
    for by_category, mask in passes if catalog.max_cat_size > 0 else ((False, searching),):
        out = _resolve_pass(catalog, states, actions, params, mask, chunk, by_category, out)
    return jax.tree_util.tree_map(lambda x: x.reshape(b, C.MAX_TOOL_CALLS, *x.shape[1:]), out)


def _resolve_pass(catalog, states, actions, params, mask, chunk, by_category, out):
    """Resolves the call slots ``mask`` [B, MAX_TOOL_CALLS] into ``out`` (flat rows)."""
    nb = mask.size
    flat = mask.reshape(-1)
    n_q = flat.sum()
    n_pad = -(-nb // chunk) * chunk
    order = jnp.pad(first_true(flat, nb), (0, n_pad - nb), constant_values=-1)
    trips = lockstep_max(catalog, (n_q + chunk - 1) // chunk)

    def body(carry):
        i, out = carry
        idx = jax.lax.dynamic_slice(order, (i * chunk,), (chunk,))
        ep, slot = idx // C.MAX_TOOL_CALLS, idx % C.MAX_TOOL_CALLS
        st = jax.tree_util.tree_map(lambda x: x[ep], states)
        ac = jax.tree_util.tree_map(lambda x: x[ep], actions)
        if catalog.emb_axis is None:
            res = jax.vmap(resolve_slot, (None, 0, 0, 0, None, None))(
                catalog, st, ac, slot, params, by_category
            )
        else:
            res = _resolve_sharded(catalog, st, ac, slot, params, by_category)
        valid = i * chunk + jnp.arange(chunk) < n_q
        dest = jnp.where(valid, idx, nb)
        out = jax.tree_util.tree_map(lambda o, r: o.at[dest].set(r, mode="drop"), out, res)
        return i + 1, out

    _, out = jax.lax.while_loop(lambda c: c[0] < trips, body, (jnp.int32(0), out))
    return out


def _resolve_sharded(catalog, st, ac, slot, params, by_category) -> SearchResults:
    """A chunk of call slots (one per episode of ``st`` / ``ac``) with ``emb`` split by
    rows: every device ranks every device's queries against its own rows, sends each
    device back the top-R of its queries, and each merges the S blocks by (score desc,
    index asc), as ``kernels.sharded.sharded_masked_topk`` does, so ids, tie order and
    |T| equal one device's. Per device and chunk, S · chunk queries come in and
    S · chunk · R (score, id) pairs go out. Category-filtered slots are keyed sorts that
    read no embedding row, so each device ranks its own."""
    q = jax.vmap(search_query, (None, 0, 0, 0))(catalog, st, ac, slot)
    if by_category:
        top = jax.vmap(lambda one: _ranked(catalog, one, params, True))(q)
        ids, n_valid = top.indices[:, 0], top.n_valid[:, 0]
    else:
        axis = catalog.emb_axis

        def rank(queries: Query):
            top = jax.vmap(lambda one: _ranked(catalog, one, params))(queries)
            return top.scores[:, 0], top.indices[:, 0], top.n_valid[:, 0]

        # One source device's chunk at a time: the same [rows, D] x [D, chunk] dots as a
        # whole table's pass, so the float scores round the same way.
        blocks = jax.lax.map(rank, jax.lax.all_gather(q, axis))
        scores, idx, counts = (jax.lax.all_to_all(x, axis, 0, 0) for x in blocks)
        top = hide_empty_slots(*merge_topk(scores, idx, R), counts.sum(0))
        ids, n_valid = top.indices, top.n_valid
    return jax.vmap(finish_slot, (None, 0, 0, 0, None, 0, 0))(
        catalog, st, ac, slot, params, ids, n_valid
    )
