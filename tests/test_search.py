"""catalog_search (SPEC §5.1) against a numpy re-implementation of the candidate set."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax.actions import Call, make_action
from ecomjax.envs.cart.generator import generate
from ecomjax.testing import generate_batch, reset_batch
from ecomjax.tools.search import resolve_batch, resolve_searches

T = C.Tool
NB = 48  # episodes per batch: one compiled shape for every test here
ATTR_COL = {a: i for i, a in enumerate(C.DISC_ATTRS)}


def _states(catalog, params, d):
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(77), i))(jnp.arange(NB))
    ds = jnp.full(NB, d, jnp.int32)
    prob = generate_batch(generate, keys, catalog, ds, params)
    states, _ = reset_batch(keys, catalog, prob, params)
    return states


def _stack(actions):
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *actions)


_RESOLVE = {}


def _resolve(catalog, states, actions, params):
    if "f" not in _RESOLVE:
        _RESOLVE["f"] = jax.jit(jax.vmap(resolve_searches, (None, 0, 0, None)), static_argnums=3)
    return _RESOLVE["f"](catalog, states, actions, params)


def _random_queries(catalog, rng):
    """NB actions of one search each, with random filters, sorts, depths and stock flags."""
    cat = np.asarray(catalog.category)
    disc = np.asarray(catalog.disc)
    specs, actions = [], []
    for _ in range(NB):
        fd, fn = {}, {}
        p = int(rng.integers(catalog.n_products))
        if rng.random() < 0.6:
            fd[0] = int(cat[p])  # cat
        if rng.random() < 0.3:
            col = ATTR_COL[C.Attr.COLOR]
            fd[C.DISC_FILTERS.index(C.Attr.COLOR)] = int(disc[p, col])
        if rng.random() < 0.4:
            fn[1] = float(rng.choice([20.0, 49.99, 100.0, 500.0]))  # price_max
        if rng.random() < 0.3:
            fn[2] = float(rng.choice([3.5, 4.0, 4.5]))  # rating_min
        sort = int(rng.integers(4))
        top_k = int(rng.choice([1, 5, 20, 200, 500]))
        in_stock = bool(rng.random() < 0.5)
        q = np.asarray(catalog.emb[int(rng.integers(catalog.n_products))], np.float32)
        call = Call(
            T.CATALOG_SEARCH,
            qty=top_k,
            enum_a=sort,
            in_stock_only=in_stock,
            query=q,
            filter_disc=fd,
            filter_num=fn,
        )
        specs.append((fd, fn, sort, top_k, in_stock, q))
        actions.append(make_action([call]))
    return specs, _stack(actions)


def _candidates(catalog, fd, fn, in_stock, oos):
    """Boolean mask of T, computed from the catalog with numpy."""
    cat = np.asarray(catalog.category)
    disc = np.asarray(catalog.disc)
    price = np.asarray(catalog.price_cents) / 100.0
    rating = np.asarray(catalog.rating_x100) / 100.0
    ok = np.ones(catalog.n_products, bool)
    for j, v in fd.items():
        attr = C.DISC_FILTERS[j]
        col = cat if attr == C.Attr.CAT else disc[:, ATTR_COL[attr]]
        ok &= col == v
    if 1 in fn:
        ok &= price <= fn[1] + 1e-6
    if 2 in fn:
        ok &= rating >= fn[2] - 1e-6
    if in_stock:
        ok &= (np.asarray(catalog.stock) > 0) & ~oos
    return ok


def _keys(catalog, sort):
    if sort == C.SortBy.PRICE_ASC:
        return -np.asarray(catalog.price_cents, np.int64)
    if sort == C.SortBy.RATING_DESC:
        return np.asarray(catalog.rating_x100, np.int64)
    return -np.asarray(catalog.ship_days, np.int64)


def test_filters_apply_before_ranking_exactly(catalog, params):
    """At d = 0 there are no distractors: results are exactly the top of T, in order."""
    rng = np.random.default_rng(0)
    states = _states(catalog, params, 0)
    specs, actions = _random_queries(catalog, rng)
    res = _resolve(catalog, states, actions, params)
    ids, total = np.asarray(res.ids[:, 0]), np.asarray(res.total[:, 0])
    top_k = np.asarray(res.top_k[:, 0])
    for b, (fd, fn, sort, want_k, in_stock, q) in enumerate(specs):
        mask = _candidates(catalog, fd, fn, in_stock, np.asarray(states.world.oos[b]))
        assert total[b] == mask.sum()
        n = min(want_k, 200)
        assert top_k[b] == n
        got = ids[b][ids[b] >= 0]
        assert got.size == min(n, mask.sum())
        assert mask[got].all(), "a result fails a filter"
        if sort == C.SortBy.RELEVANCE:
            s = np.asarray(catalog.emb, np.float32)[got] @ q
            assert np.all(np.diff(s) <= 1e-5)
            rest = np.setdiff1d(np.flatnonzero(mask), got)
            if rest.size and got.size:
                assert s.min() >= (np.asarray(catalog.emb, np.float32)[rest] @ q).max() - 1e-5
        else:
            key = _keys(catalog, sort)
            cand = np.flatnonzero(mask)
            order = cand[np.lexsort((cand, -key[cand]))]  # key desc, then lower index
            assert np.array_equal(got, order[: got.size])


def test_batched_stage_equals_per_episode_resolution(catalog, params):
    rng = np.random.default_rng(1)
    states = _states(catalog, params, 10)
    _, actions = _random_queries(catalog, rng)
    # Only some episodes are live, and the compacted stage must skip the others.
    live = jnp.asarray(rng.random(NB) < 0.7)
    a = _resolve(catalog, states, actions, params)
    b = jax.jit(resolve_batch, static_argnums=(3, 5))(catalog, states, actions, params, live, 16)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        live_np = np.asarray(live)
        assert np.array_equal(x[live_np], y[live_np])
    assert np.all(np.asarray(b.ids)[~np.asarray(live)] == -1)


def _by_price(catalog):
    """Every product in a price-ascending search's order (ties by index)."""
    allp = np.arange(catalog.n_products)
    return allp[np.lexsort((allp, -_keys(catalog, C.SortBy.PRICE_ASC)))]


@pytest.mark.parametrize("d", [4, 12, 20])
def test_distractors_and_depth_cap(catalog, params, d):
    """n = min(top_k, top_k(d)); D = round(eps_rank(d) n) distractors; the first n - D true
    results stay visible and in order."""
    states = _states(catalog, params, d)
    q = np.asarray(catalog.cat_emb[3], np.float32)
    actions = _stack(
        [make_action([Call(T.CATALOG_SEARCH, qty=500, enum_a=C.SortBy.PRICE_ASC, query=q)])] * NB
    )
    res = _resolve(catalog, states, actions, params)
    n = max(20, 200 - 10 * d)
    n_dist = round(min(0.4, 0.02 * d) * n)
    got = np.asarray(res.ids[:, 0])
    assert np.all(np.asarray(res.top_k[:, 0]) == n)
    truth = _by_price(catalog)[: n - n_dist]
    for b in range(NB):
        row = got[b][got[b] >= 0]
        assert n - n_dist <= row.size <= n
        assert len(set(row.tolist())) == row.size  # no product twice
        true_part = row[np.isin(row, truth)]
        assert np.array_equal(true_part, truth)  # all true items, in order
    # Different episodes draw different distractor positions (keyed by episode).
    assert len({tuple(r.tolist()) for r in got}) > 1


def test_similar_to_excludes_reference_and_unknown_reference_errors(catalog, params):
    states = _states(catalog, params, 0)
    ref = 17
    good = make_action([Call(T.CATALOG_SEARCH, product=ref, qty=50, query=np.zeros(C.EMBED_DIM))])
    bad = make_action([Call(T.CATALOG_SEARCH, product=-2, qty=50, query=np.zeros(C.EMBED_DIM))])
    res = _resolve(catalog, states, _stack([good, bad] * (NB // 2)), params)
    ids = np.asarray(res.ids[0, 0])
    ids = ids[ids >= 0]
    assert ref not in ids and ids.size == 50
    emb = np.asarray(catalog.emb, np.float32)
    s = emb[ids] @ emb[ref]
    assert np.all(np.diff(s) <= 1e-5)
    assert int(res.error[1, 0]) == C.ToolError.UNKNOWN_PRODUCT
    assert np.all(np.asarray(res.ids[1, 0]) == -1)


def test_distractor_draws_bounded_to_distractor_slots_change_nothing(catalog, params):
    """Drawing keyed candidates only for the (at most ``max_distractors``) distractor slots
    gives the same mix as drawing them for all R slots, over thousands of keyed cases."""
    from ecomjax.tools.search import R, _mix_distractors, max_distractors

    m = max_distractors(params)
    assert m == 20  # max over d of round(eps_rank(d) * top_k(d)) under SPEC's schedule
    n = 4096
    keys = jax.random.split(jax.random.key(5), n)
    k_ids, k_true, k_dist = jax.random.split(jax.random.key(6), 3)
    pool = jax.random.randint(k_ids, (n, R), 0, catalog.n_products)
    ids = jax.vmap(lambda p: jnp.unique(p, size=R, fill_value=-1))(pool)
    n_true = jax.random.randint(k_true, (n,), 0, R + 1)
    n_dist = jax.random.randint(k_dist, (n,), 0, m + 1)
    ids = jnp.where(jnp.arange(R)[None, :] < n_true[:, None], ids, -1)
    n_true = (ids >= 0).sum(-1)

    def both(key, ids, nt, nd):
        return (
            _mix_distractors(key, catalog, ids, nt, nd, m),
            _mix_distractors(key, catalog, ids, nt, nd, R),
        )

    fast, full = jax.jit(jax.vmap(both))(keys, ids, n_true, n_dist)
    assert (np.asarray(fast) == np.asarray(full)).all()
    assert int((np.asarray(full) >= 0).sum()) > 0
    # SPEC §5.1: a result never repeats a product (the oracles rely on it).
    for row in np.asarray(full):
        live = row[row >= 0]
        assert live.size == np.unique(live).size


@pytest.mark.parametrize("d", [0, 10])
def test_category_scan_equals_the_full_scan(catalog, params, d):
    """Category-filtered keyed searches scan one category's rows (``max_cat_size``); over
    many random filter sets the batch stage returns what it returns when every search scans
    the whole catalog (``max_cat_size = 0``), bit for bit, and the keyed category slots
    equal the per-episode reference too (their keys are exact integers; relevance slots
    are compared within one program structure only: a vmapped matmul in another program
    may round a cosine by an ulp, docs/limits.md)."""
    from ecomjax.tools.search import category_filtered

    assert catalog.max_cat_size == int(np.diff(np.asarray(catalog.cat_offsets)).max()) > 0
    whole = catalog.replace(max_cat_size=0)
    states = _states(catalog, params, d)
    live = jnp.ones(NB, bool)
    batch = jax.jit(resolve_batch, static_argnums=(3, 5))
    for seed in range(6):
        rng = np.random.default_rng(100 + seed)
        _, actions = _random_queries(catalog, rng)
        by_cat = np.asarray(category_filtered(catalog, actions))
        assert by_cat.any() and not np.asarray(category_filtered(whole, actions)).any()
        scanned = batch(catalog, states, actions, params, live, 16)
        full = batch(whole, states, actions, params, live, 16)
        ref = _resolve(catalog, states, actions, params)
        for x, y, z in zip(*map(jax.tree_util.tree_leaves, (scanned, full, ref)), strict=True):
            x, y, z = np.asarray(x), np.asarray(y), np.asarray(z)
            assert np.array_equal(x, y)
            assert np.array_equal(x[by_cat], z[by_cat])


def test_the_search_call_counter_runs_over_the_episode(catalog, params):
    """SPEC §5.1 keys each distractor by the episode's search-call counter. Over three
    turns of two searches the counter reads 2, 4, 6; a hard-failed turn (7 calls over a
    budget of 6) counts none; and the same search made again in a later turn draws other
    distractors around the same true results. Until 2026-12-06 nothing advanced the
    counter, so a repeated search drew exactly the same ones."""
    from functools import partial

    from ecomjax.core import step

    d = 10  # b_tool 6, eps_rank 0.2: 20 distractors among 100 cards
    states = _states(catalog, params, d)
    q = np.asarray(catalog.cat_emb[3], np.float32)
    call = Call(T.CATALOG_SEARCH, qty=500, enum_a=C.SortBy.PRICE_ASC, query=q)
    two, over = make_action([call, call]), make_action([call] * 7)
    over_budget = np.arange(NB) % 4 == 0
    actions = _stack([over if o else two for o in over_budget])
    one_turn = jax.jit(jax.vmap(partial(step, families=()), (None, 0, 0, None)), static_argnums=3)
    first = _resolve(catalog, states, actions, params)
    for t in (1, 2, 3):
        states, _ = one_turn(catalog, states, actions, params)
        if t == 1:
            again = _resolve(catalog, states, actions, params)  # turn 2's searches
        counter = np.asarray(states.world.n_searches)
        assert np.all(counter[over_budget] == 0)
        assert np.all(counter[~over_budget] == 2 * t)
    # The second turn's first call, against the first turn's first call.
    ids0, ids1 = np.asarray(first.ids[:, 0]), np.asarray(again.ids[:, 0])
    lanes = np.flatnonzero(~over_budget)
    differ = [b for b in lanes if not np.array_equal(ids0[b], ids1[b])]
    assert len(differ) == lanes.size  # 20 keyed positions and draws: never all equal
    truth = _by_price(catalog)[: 100 - 20]  # n = 200 - 10 d, D = 0.2 n at d = 10
    for b in lanes:
        for row in (ids0[b], ids1[b]):
            assert np.array_equal(row[np.isin(row, truth)], truth)
