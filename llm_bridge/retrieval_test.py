"""FAISS host retrieval against the device path (SPEC §1.6, §5.1): same SearchResults, bit
for bit, over random queries, filters, sort modes, difficulties and world states."""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax.actions import Call, make_action
from ecomjax.catalog.embedder import embed_texts
from ecomjax.envs.cart.generator import generate
from ecomjax.testing import QUERY_WORDS, generate_batch, reset_batch
from ecomjax.tools.search import resolve_batch

faiss = pytest.importorskip("faiss")

from ecomjax.llm_bridge import retrieval as RT  # noqa: E402
from ecomjax.llm_bridge.retrieval import FaissIndex, FaissRetriever  # noqa: E402

T = C.Tool
NB = 48  # episodes per batch (the shape tests/test_search.py compiles too)
COLOR = C.DISC_FILTERS.index(C.Attr.COLOR)
NUM = {name: j for j, (name, _, _) in enumerate(C.NUMERIC_FILTERS)}

_JIT: dict[str, object] = {}


def _device_batch(catalog, states, actions, params, live):
    if "batch" not in _JIT:
        _JIT["batch"] = jax.jit(resolve_batch, static_argnums=3)
    return _JIT["batch"](catalog, states, actions, params, live)


@pytest.fixture(scope="module")
def dense_catalog(catalog):
    """The synthetic catalog with random dense vectors (as a sentence model gives), many of
    them exact duplicates, the last row among them: ties broken by index everywhere."""
    rng = np.random.default_rng(5)
    n, d = catalog.n_products, catalog.embed_dim
    e = rng.standard_normal((n, d))
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    dst = np.concatenate([rng.integers(0, n, 200), [n - 1, n - 2]])
    e[dst] = e[rng.integers(0, n, dst.size)]
    return catalog.replace(emb=jnp.asarray(e, jnp.float32))


@pytest.fixture(scope="module")
def catalogs(catalog, dense_catalog):
    return {"hashing": catalog, "dense": dense_catalog}


_RETRIEVERS: dict[tuple, FaissRetriever] = {}

CONFIGS = {
    "default": {},
    # Forces the FAISS path on a 1000-product catalog: shallow first rounds, deeper
    # retries and brute-force fallbacks all happen.
    "faiss": {"subset_max": 0, "margin": 0, "max_candidates": 256},
}


def _retriever(catalogs, name, config) -> FaissRetriever:
    key = (name, config)
    if key not in _RETRIEVERS:
        _RETRIEVERS[key] = FaissRetriever.from_catalog(catalogs[name], **CONFIGS[config])
    return _RETRIEVERS[key]


def _states(catalog, params, seed):
    """NB episodes at d = 0..20, with forced-out stock, carts that use up a product's
    stock, and earlier searches (the distractor counter)."""
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(77), i))(jnp.arange(NB))
    ds = jnp.arange(NB, dtype=jnp.int32) % 21
    prob = generate_batch(generate, keys, catalog, ds, params)
    states, _ = reset_batch(keys, catalog, prob, params)
    rng = np.random.default_rng(seed)
    n, w = catalog.n_products, states.world
    stock = np.asarray(catalog.stock).astype(np.int32)
    pid = np.asarray(w.cart_pid).copy()
    qty = np.asarray(w.cart_qty).copy()
    no = np.asarray(w.cart_no).copy()
    var = np.asarray(w.cart_var).copy()
    for b in range(NB):
        for line in range(rng.integers(0, 4)):
            p = int(rng.integers(n))
            pid[b, line], var[b, line], no[b, line] = p, -1, line + 1
            qty[b, line] = max(1, stock[p] - int(rng.integers(0, 2)))  # often exhausted
    world = w.replace(
        oos=jnp.asarray(rng.random((NB, n)) < 0.15),
        cart_pid=jnp.asarray(pid),
        cart_var=jnp.asarray(var),
        cart_qty=jnp.asarray(qty),
        cart_no=jnp.asarray(no),
        n_searches=jnp.asarray(rng.integers(0, 6, NB), jnp.int32),
    )
    return states.replace(world=world)


def _query(catalog, rng) -> np.ndarray:
    n, d = catalog.n_products, catalog.embed_dim
    u = rng.random()
    if u < 0.35:
        return np.asarray(catalog.emb[int(rng.integers(n))], np.float32)  # hits duplicates
    if u < 0.6:
        return embed_texts([" ".join(rng.choice(QUERY_WORDS, int(rng.integers(1, 4))))], d)[0]
    if u < 0.7:
        return np.asarray(catalog.cat_emb[int(rng.integers(catalog.n_categories))], np.float32)
    if u < 0.9:
        v = rng.standard_normal(d).astype(np.float32)
        return v / np.linalg.norm(v)
    if u < 0.96:
        return np.zeros(d, np.float32)  # no query text: T in index order
    v = np.zeros(d, np.float32)
    v[0] = np.nan if u < 0.98 else np.inf  # garbage from an embedder: the kernel decides
    return v


def _call(catalog, rng) -> Call:
    n = catalog.n_products
    p = int(rng.integers(n))
    fd, fn = {}, {}
    if rng.random() < 0.4:
        fd[0] = int(np.asarray(catalog.category[p]))
    if rng.random() < 0.15:
        fd[1] = int(np.asarray(catalog.brand[p]))
    if rng.random() < 0.2:
        fd[COLOR] = int(np.asarray(catalog.disc[p, C.DISC_ATTRS.index(C.Attr.COLOR)]))
    if rng.random() < 0.05:
        fd[2] = -5  # an unknown value: everything is filtered out
    if rng.random() < 0.3:  # sometimes exactly a product's price: the bound is inclusive
        price = float(np.asarray(catalog.price_cents[p])) / 100.0
        fn[NUM["price_max"]] = price if rng.random() < 0.5 else float(rng.choice([20, 99.99]))
    if rng.random() < 0.2:
        fn[NUM["rating_min"]] = float(rng.choice([3.5, 4.0, 4.5]))
    if rng.random() < 0.1:
        fn[NUM["ship_days_max"]] = float(rng.integers(1, 8))
    if rng.random() < 0.05:
        fn[NUM["wattage_min"]] = 18.0  # most products lack the attribute
    u = rng.random()
    product = -1 if u < 0.85 else (int(rng.integers(n)) if u < 0.97 else int(rng.choice([-2, n])))
    sort = 0 if rng.random() < 0.6 else int(rng.choice([1, 2, 3, 3, 7]))
    return Call(
        T.CATALOG_SEARCH,
        product=product,
        qty=int(rng.choice([1, 3, 10, 50, 200, 500])),
        enum_a=sort,
        in_stock_only=bool(rng.random() < 0.4),
        query=_query(catalog, rng),
        filter_disc=fd,
        filter_num=fn,
    )


def _actions(catalog, rng):
    acts = []
    for _ in range(NB):
        calls = []
        for _ in range(int(rng.integers(0, 4))):
            calls.append(_call(catalog, rng) if rng.random() < 0.85 else Call(T.CART_VIEW))
        acts.append(make_action(calls))
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *acts)


def _assert_same(want, got, live=None):
    for name in want.__dataclass_fields__:
        x, y = np.asarray(getattr(want, name)), np.asarray(getattr(got, name))
        if live is not None:
            x, y = x[live], y[live]
        diff = (x != y) & ~(np.isnan(x) & np.isnan(y)) if x.dtype.kind == "f" else x != y
        bad = np.argwhere(diff.reshape(x.shape[0], -1).any(-1))
        assert np.array_equal(x, y, equal_nan=True), f"{name} differs at {np.ravel(bad)[:8]}"


def _sweep(catalogs, params, name, config, seed) -> Counter:
    catalog = catalogs[name]
    ret = _retriever(catalogs, name, config)
    rng = np.random.default_rng(seed)
    states = _states(catalog, params, seed)
    actions = _actions(catalog, rng)
    live = rng.random(NB) < 0.85
    want = _device_batch(catalog, states, actions, params, jnp.asarray(live))
    got = ret.resolve_batch(catalog, states, actions, params, live)
    _assert_same(want, got)
    assert np.all(np.asarray(got.ids)[~live] == -1)
    return ret.stats.paths


@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", ["hashing", "dense"])
def test_batch_equals_device(catalogs, params, name, config):
    seed = 10 * ["hashing", "dense"].index(name) + list(CONFIGS).index(config)
    paths = _sweep(catalogs, params, name, config, seed)
    if config == "faiss":
        assert paths["faiss"] + paths["faiss_deep"] > 0


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("config", list(CONFIGS))
@pytest.mark.parametrize("name", ["hashing", "dense"])
def test_batch_equals_device_sweep(catalogs, params, name, config, seed):
    _sweep(catalogs, params, name, config, seed=100 + seed)


def test_single_episode_equals_resolve_searches(catalogs, params):
    """``retriever(catalog, state, action, params)``, the host Session's call. Compared with
    the device batch stage, which tests/test_search.py pins to ``resolve_searches`` on live
    episodes (saves compiling the unbatched device path here)."""
    catalog = catalogs["dense"]
    ret = _retriever(catalogs, "dense", "faiss")
    rng = np.random.default_rng(3)
    states = _states(catalog, params, 3)
    actions = _actions(catalog, rng)
    want = _device_batch(catalog, states, actions, params, jnp.ones(NB, bool))
    take = lambda t, b: jax.tree_util.tree_map(lambda x: x[b], t)
    searched = np.flatnonzero((np.asarray(actions.tool) == T.CATALOG_SEARCH).any(1))
    for b in searched[:3]:
        got = ret(catalog, take(states, b), take(actions, b), params)
        _assert_same(take(want, b), got)


def test_device_ranks_ties_when_layout_is_not_reproducible(catalogs, params, monkeypatch):
    """A backend whose matmul bits depend on the layout: near-tie clusters go to the kernel."""
    catalog = catalogs["hashing"]
    monkeypatch.setattr(RT, "layout_invariant", lambda *a, **k: False)
    ret = FaissRetriever.from_catalog(catalog)
    rng = np.random.default_rng(11)
    states = _states(catalog, params, 11)
    actions = _actions(catalog, rng)
    live = np.ones(NB, bool)
    want = _device_batch(catalog, states, actions, params, jnp.asarray(live))
    _assert_same(want, ret.resolve_batch(catalog, states, actions, params, live))
    assert ret.stats.device_ranked > 0


def test_ties_go_to_the_lower_index_and_filters_hold(catalogs, params):
    """Spec semantics directly, not only agreement: a query equal to a duplicated row
    returns the whole duplicate group first, in ascending index; |T| counts the filter."""
    catalog = catalogs["dense"]
    ret = _retriever(catalogs, "dense", "faiss")
    emb = np.asarray(catalog.emb)
    _, first, counts = np.unique(emb, axis=0, return_index=True, return_counts=True)
    row = int(first[np.argmax(counts)])
    group = np.flatnonzero((emb == emb[row]).all(1))
    assert group.size >= 2
    states = _states(catalog, params, 0)
    states = states.replace(problem=states.problem.replace(d=jnp.zeros(NB, jnp.int32)))
    calls = [
        Call(T.CATALOG_SEARCH, qty=200, query=emb[row]),
        Call(T.CATALOG_SEARCH, qty=200, query=emb[row], filter_num={NUM["price_max"]: 30.0}),
    ]
    actions = jax.tree_util.tree_map(lambda *x: jnp.stack(x), *[make_action(calls)] * NB)
    res = ret.resolve_batch(catalog, states, actions, params, np.ones(NB, bool))
    ids = np.asarray(res.ids[0, 0])
    assert np.array_equal(ids[: group.size], group)
    s = emb[ids] @ emb[row]
    assert np.all(np.diff(s) <= 1e-6)
    cheap = np.asarray(catalog.price_cents) <= 3000
    assert int(res.total[0, 1]) == cheap.sum()
    got = np.asarray(res.ids[0, 1])
    assert cheap[got[got >= 0]].all()


def test_ann_index_is_used_only_for_unfiltered_relevance(catalogs, params):
    catalog = catalogs["dense"]
    ret = FaissRetriever.from_catalog(catalog, kind="hnsw", hnsw_m=16, ef_search=128)
    rng = np.random.default_rng(2)
    states = _states(catalog, params, 2)
    states = states.replace(problem=states.problem.replace(d=jnp.zeros(NB, jnp.int32)))
    emb = np.asarray(catalog.emb)
    qs = emb[rng.integers(0, catalog.n_products, NB)] + rng.standard_normal(emb[:NB].shape) / 4
    qs = (qs / np.linalg.norm(qs, axis=1, keepdims=True)).astype(np.float32)
    plain = [make_action([Call(T.CATALOG_SEARCH, qty=20, query=q)]) for q in qs]
    stack = lambda a: jax.tree_util.tree_map(lambda *x: jnp.stack(x), *a)
    res = ret.resolve_batch(catalog, states, stack(plain), params, np.ones(NB, bool))
    assert ret.stats.paths["ann"] == NB
    exact = np.argsort(-(qs @ emb.T), axis=1, kind="stable")[:, :20]
    got = np.asarray(res.ids[:, 0, :20])
    recall = np.mean([np.isin(got[b], exact[b]).mean() for b in range(NB)])
    assert recall >= 0.9
    # Filtered and sorted searches stay exact.
    actions = _actions(catalog, rng)
    want = _device_batch(catalog, states, actions, params, jnp.ones(NB, bool))
    got = ret.resolve_batch(catalog, states, actions, params, np.ones(NB, bool))
    exact_paths = ("faiss", "faiss_deep", "fallback", "subset", "sort", "none", "device")
    for b, s in np.argwhere(np.asarray(actions.tool) == T.CATALOG_SEARCH):
        call_is_plain = (
            np.all(np.asarray(actions.filter_disc[b, s]) == -1)
            and np.all(np.isnan(np.asarray(actions.filter_num[b, s])))
            and not bool(actions.flag[b, s])
            and int(actions.product[b, s]) == -1
            and int(actions.enum_a[b, s]) == 0
        )
        if not call_is_plain:
            for name in ("ids", "total", "score", "stock", "top_k", "error"):
                x, y = getattr(want, name)[b, s], getattr(got, name)[b, s]
                assert np.array_equal(np.asarray(x), np.asarray(y)), (name, b, s)
    assert set(ret.stats.paths) - {"ann", "zero_query", "bad_ref"} <= set(exact_paths)


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_index_search_and_deterministic_builds(kind):
    rng = np.random.default_rng(0)
    e = rng.standard_normal((3000, 32)).astype(np.float32)
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    q = e[:64] + rng.standard_normal((64, 32)).astype(np.float32) / 3
    a = FaissIndex(e, kind, nlist=32, nprobe=16, hnsw_m=16)
    b = FaissIndex(e, kind, nlist=32, nprobe=16, hnsw_m=16)
    sa, ia = a.search(q, 10, ann=True)
    sb, ib = b.search(q, 10, ann=True)
    assert np.array_equal(ia, ib) and np.array_equal(sa, sb)
    exact = np.argsort(-(q @ e.T), axis=1, kind="stable")[:, :10]
    recall = np.mean([np.isin(ia[i], exact[i]).mean() for i in range(64)])
    assert recall == 1.0 if kind == "flat" else recall >= 0.8
    _, flat_ids = a.search(q, 10)  # the exact index is always there
    assert np.array_equal(np.sort(flat_ids, 1), np.sort(exact, 1))
    ids, scores = a.range_search(q[0], 0.5)
    assert np.array_equal(np.sort(ids), np.flatnonzero(e @ q[0] > 0.5))


def test_error_bound_and_rejections(catalogs):
    rng = np.random.default_rng(1)
    for d in (8, 64, 384):
        e = rng.standard_normal((500, d)).astype(np.float32)
        q = rng.standard_normal(d).astype(np.float32)
        exact = e.astype(np.float64) @ q.astype(np.float64)
        bound = RT.dot_error_bound(d, np.linalg.norm(q), np.linalg.norm(e, axis=1).max())
        assert np.abs((e @ q) - exact).max() <= bound
    with pytest.raises(ValueError, match="NaN"):
        FaissIndex(np.full((4, 3), np.nan, np.float32))
    with pytest.raises(ValueError, match="kind"):
        FaissIndex(np.eye(3, dtype=np.float32), "lsh")
    other = FaissIndex(np.eye(3, dtype=np.float32))
    with pytest.raises(ValueError, match="index is"):
        FaissRetriever(other, catalogs["hashing"])
