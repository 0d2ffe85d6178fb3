"""Exactness, tie order and memory of the chunked masked top-k (SPEC §5.1, §1.6).

Why the shapes are few and fixed: every (k, chunk, shape) is one XLA compile (~1 s on CPU),
so random *contents* vary per example and sweeps are vmapped over a batch of cases instead.
Exact-id checks use scores that are exact in float arithmetic (small integers, table lookups),
so they hold on any backend whatever order a matmul accumulates in.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ecomjax.kernels.topk import (
    TopK,
    category_slice_topk,
    embedding_scores,
    masked_topk,
    masked_topk_reference,
)
from tests.support.topk_oracle import assert_topk_equal, np_topk

# --------------------------------------------------------------------------- oracle helpers
# np_topk (the tie rule by definition) and assert_topk_equal live in topk_oracle.py.


def test_harness_catches_swapped_ties() -> None:
    """The comparison has teeth: swapping two tied ids (same scores) must be reported."""
    s = np.array([[1.0, 3.0, 3.0, 2.0, 3.0]], np.float32)
    want = np_topk(s, 3)
    np.testing.assert_array_equal(want[1], [[1, 2, 4]])
    bad = TopK(jnp.asarray(want[0]), jnp.asarray(want[1][:, [1, 0, 2]]), jnp.asarray(want[2]))
    with pytest.raises(AssertionError):
        assert_topk_equal(bad, want)


# --------------------------------------------------------------- table scores (hypothesis)

TQ, TN, TB = 3, 37, 4  # queries, catalog rows, tables per vmapped call
# (k, chunk): chunk not dividing n, chunk = 1, chunk = n, chunk > n, k = n, k > n, k = 1.
TABLE_CASES = [(1, 8), (5, 8), (4, 1), (12, 37), (37, 16), (40, 64)]


def table_score(queries: dict, rows: dict, idx: jax.Array) -> jax.Array:
    """score_fn whose scores are arbitrary given floats: rows["s"] is [N, Q] (query-major)."""
    del idx
    return rows["s"][:, queries["qi"]].T


@functools.cache
def table_fns(k: int, chunk: int):
    kern = jax.jit(
        jax.vmap(lambda r, q: masked_topk(table_score, r, q, TN, k, chunk), in_axes=(0, None))
    )
    ref = jax.jit(
        jax.vmap(lambda r, q: masked_topk_reference(table_score, r, q, TN, k), in_axes=(0, None))
    )
    return kern, ref


TIE_VALUES = [-np.inf, np.nan, -0.0, 0.0, 1e-45, -1e-40, 1.0, 2.0, 3.0, 0.5, -1.0, np.inf, 1e30]
score_elems = st.one_of(st.sampled_from(TIE_VALUES), st.floats(width=32))
# -0.0 and +0.0 interleaved: equal scores, so the order must be by index alone.
SIGNED_ZEROS = np.where(np.arange(TN)[None, :, None] % 2 == 0, -0.0, 0.0) * np.ones((TB, 1, TQ))


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    case=st.sampled_from(TABLE_CASES),
    tables=hnp.arrays(np.float32, (TB, TN, TQ), elements=score_elems),
)
@example(case=(5, 8), tables=SIGNED_ZEROS.astype(np.float32))
def test_table_scores_match_oracle(case: tuple[int, int], tables: np.ndarray) -> None:
    """Heavy ties, -inf/NaN/±0/±inf, any k/chunk: kernel == reference == numpy definition."""
    k, chunk = case
    kern, ref = table_fns(k, chunk)
    queries = {"qi": jnp.arange(TQ)}
    got = kern({"s": jnp.asarray(tables)}, queries)
    want_ref = ref({"s": jnp.asarray(tables)}, queries)
    for b in range(TB):
        want = np_topk(tables[b].T, k)
        assert_topk_equal(jax.tree_util.tree_map(lambda x, b=b: x[b], got), want)
        assert_topk_equal(jax.tree_util.tree_map(lambda x, b=b: x[b], want_ref), want)


def test_price_sort_ties_vmapped_sweep() -> None:
    """price_asc-style keys (integer cents as float32, many exact ties) + random filters."""
    n, q, k, chunk, batch = 2000, 5, 20, 256, 6  # 2000 = 7 full chunks + 208
    rng = np.random.default_rng(1)
    price = rng.choice(np.arange(199, 2999, 100), size=(batch, n)).astype(np.int32)
    cat = rng.integers(0, 4, size=(batch, n)).astype(np.int32)
    qcat = rng.integers(-1, 4, size=(batch, q)).astype(np.int32)  # -1: no category filter
    qmax = rng.choice([500, 1500, 2999, 10], size=(batch, q)).astype(np.int32)  # 10: none pass

    def score(qs: dict, r: dict, idx: jax.Array) -> jax.Array:
        ok = (qs["cat"][:, None] < 0) | (r["cat"][None, :] == qs["cat"][:, None])
        ok &= r["price"][None, :] <= qs["max"][:, None]
        return jnp.where(ok, -r["price"][None, :].astype(jnp.float32), -jnp.inf)

    rows = {"price": jnp.asarray(price), "cat": jnp.asarray(cat)}
    queries = {"cat": jnp.asarray(qcat), "max": jnp.asarray(qmax)}
    got = jax.jit(jax.vmap(lambda r, qs: masked_topk(score, r, qs, n, k, chunk)))(rows, queries)
    for b in range(batch):
        ok = (qcat[b][:, None] < 0) | (cat[b][None, :] == qcat[b][:, None])
        ok &= price[b][None, :] <= qmax[b][:, None]
        s = np.where(ok, -price[b][None, :].astype(np.float32), -np.inf)
        assert_topk_equal(jax.tree_util.tree_map(lambda x, b=b: x[b], got), np_topk(s, k))
    assert (np.asarray(got.n_valid)[qmax == 10] == 0).all()
    assert (np.asarray(got.indices)[qmax == 10] == -1).all()


def test_k_zero_empty_catalog_and_validation() -> None:
    s = np.array([[1.0, -np.inf, np.nan, 2.0]], np.float32).T  # [N=4, Q=1]
    rows, queries = {"s": jnp.asarray(s)}, {"qi": jnp.arange(1)}
    for fn in (
        lambda: masked_topk(table_score, rows, queries, 4, 0, 3),
        lambda: masked_topk_reference(table_score, rows, queries, 4, 0),
    ):
        res = fn()
        assert res.scores.shape == (1, 0) and res.indices.shape == (1, 0)
        np.testing.assert_array_equal(res.n_valid, [2])
    empty = masked_topk(table_score, {"s": jnp.zeros((0, 1))}, queries, 0, 3)
    np.testing.assert_array_equal(empty.indices, [[-1, -1, -1]])
    with pytest.raises(ValueError):
        masked_topk(table_score, rows, queries, 5, 2)
    with pytest.raises(ValueError):
        masked_topk(table_score, rows, queries, 4, 2, chunk=0)


# ------------------------------------------------------------------------------ embeddings

EN, EQ, ED = 1500, 6, 8


def emb_score(qs: dict, r: dict, idx: jax.Array) -> jax.Array:
    """Relevance with filters: optional category and inclusive max price."""
    cos = embedding_scores(qs["emb"], r["emb"])
    ok = (qs["cat"][:, None] < 0) | (r["cat"][None, :] == qs["cat"][:, None])
    ok &= r["price"][None, :] <= qs["max"][:, None]
    return jnp.where(ok, cos, -jnp.inf)


def emb_case(seed: int, dtype, batch: tuple[int, ...] = (), integer: bool = True):
    """Integer-valued vectors make every dot product exact (and tied) in f32 and bf16."""
    rng = np.random.default_rng(seed)
    if integer:
        emb = rng.integers(-2, 3, size=(EN, ED)).astype(np.float32)
        qe = rng.integers(-2, 3, size=(*batch, EQ, ED)).astype(np.float32)
    else:
        emb = rng.standard_normal((EN, ED)).astype(np.float32)
        emb /= np.linalg.norm(emb, axis=1, keepdims=True)
        qe = rng.standard_normal((*batch, EQ, ED)).astype(np.float32)
    rows = {
        "emb": jnp.asarray(emb, dtype),
        "cat": jnp.asarray(rng.integers(0, 5, EN), jnp.int32),
        "price": jnp.asarray(rng.integers(0, 100, EN), jnp.int32),
    }
    queries = {
        "emb": jnp.asarray(qe, dtype),
        "cat": jnp.asarray(rng.integers(-1, 5, size=(*batch, EQ)), jnp.int32),
        "max": jnp.asarray(rng.choice([-1, 30, 99], size=(*batch, EQ)), jnp.int32),
    }
    return rows, queries


def np_emb_scores(rows: dict, queries: dict) -> np.ndarray:
    e = np.asarray(rows["emb"].astype(jnp.float32), np.float64)
    qe = np.asarray(queries["emb"].astype(jnp.float32), np.float64)
    qc, qm = np.asarray(queries["cat"]), np.asarray(queries["max"])
    ok = (qc[:, None] < 0) | (np.asarray(rows["cat"])[None, :] == qc[:, None])
    ok &= np.asarray(rows["price"])[None, :] <= qm[:, None]
    return np.where(ok, qe @ e.T, -np.inf)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_embeddings_exact_ties_and_vmap_vs_loop(dtype) -> None:
    """f32 and bf16 catalogs: chunked == reference == numpy; vmap over a query batch == loop."""
    k, chunk = 30, 400  # 1500 = 3 full chunks + 300
    kern = jax.jit(lambda r, qs: masked_topk(emb_score, r, qs, EN, k, chunk))
    ref = jax.jit(lambda r, qs: masked_topk_reference(emb_score, r, qs, EN, k))
    rows, queries = emb_case(2, dtype, batch=(3,))
    batched = jax.jit(jax.vmap(lambda qs: masked_topk(emb_score, rows, qs, EN, k, chunk)))(queries)
    for b in range(3):
        qb = jax.tree_util.tree_map(lambda x, b=b: x[b], queries)
        want = np_topk(np_emb_scores(rows, qb).astype(np.float32), k)
        assert_topk_equal(kern(rows, qb), want)
        assert_topk_equal(ref(rows, qb), want)
        assert_topk_equal(jax.tree_util.tree_map(lambda x, b=b: x[b], batched), want)


def test_gaussian_embeddings_are_a_valid_topk() -> None:
    """Continuous scores: any backend's matmul rounding allowed, so check the top-k property
    against float64 scores with a tolerance, and exact ids where neighbours are well apart."""
    k, chunk, tol = 25, 512, 1e-5
    rows, queries = emb_case(3, jnp.float32, integer=False)
    got = jax.jit(lambda r, qs: masked_topk(emb_score, r, qs, EN, k, chunk))(rows, queries)
    s64 = np_emb_scores(rows, queries)
    gi, gs = np.asarray(got.indices), np.asarray(got.scores)
    _, wi, wn = np_topk(s64, k)
    np.testing.assert_array_equal(got.n_valid, wn)
    for r in range(EQ):
        m = int(min(k, wn[r]))
        assert (gi[r, m:] == -1).all() and np.isneginf(gs[r, m:]).all()
        ids = gi[r, :m]
        assert len(set(ids.tolist())) == m and np.isfinite(s64[r, ids]).all()
        np.testing.assert_allclose(gs[r, :m], s64[r, ids], atol=tol)
        assert (np.diff(gs[r, :m]) <= 0).all()
        rest = np.delete(s64[r], ids)
        if m == k and rest.size:
            assert rest.max() <= s64[r, ids].min() + tol
        true = s64[r, wi[r, :m]]
        gap = np.minimum(
            np.abs(np.diff(true, prepend=np.inf)), np.abs(np.diff(true, append=-np.inf))
        )
        np.testing.assert_array_equal(ids[gap > 10 * tol], wi[r, :m][gap > 10 * tol])


def test_embedding_scores_numerics() -> None:
    rng = np.random.default_rng(4)
    q = rng.standard_normal((4, 16)).astype(np.float32)
    e = rng.standard_normal((9, 16)).astype(np.float32)
    e[3] = 0.0
    q[1] = 0.0
    got = np.asarray(embedding_scores(jnp.asarray(q), jnp.asarray(e)))
    np.testing.assert_allclose(got, q.astype(np.float64) @ e.T, rtol=1e-5, atol=1e-5)
    cos = np.asarray(embedding_scores(jnp.asarray(q), jnp.asarray(e), normalize=True))
    nq = np.linalg.norm(q, axis=1, keepdims=True)
    ne = np.linalg.norm(e, axis=1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        want = np.nan_to_num((q @ e.T) / nq / ne.T)
    np.testing.assert_allclose(cos, want, atol=1e-6)
    assert cos[1].tolist() == [0.0] * 9 and (cos[:, 3] == 0).all()
    # bf16 inputs: exact bf16 products, float32 result and accumulation.
    qb, eb = jnp.asarray(q, jnp.bfloat16), jnp.asarray(e, jnp.bfloat16)
    got_b = embedding_scores(qb, eb)
    assert got_b.dtype == jnp.float32
    want_b = np.asarray(qb, np.float64) @ np.asarray(eb, np.float64).T
    np.testing.assert_allclose(np.asarray(got_b), want_b, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ category fast path

CN, CCATS, CMAX, CQ = 300, 8, 96, 6


def cat_catalog(rng: np.random.Generator) -> dict:
    cat = rng.integers(0, CCATS - 1, CN).astype(np.int32)  # category CCATS-1 stays empty
    counts = np.bincount(cat, minlength=CCATS)
    assert counts.max() <= CMAX
    order = np.argsort(cat, kind="stable").astype(np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int32)
    return {
        "emb": rng.integers(-1, 2, size=(CN, 4)).astype(np.float32),
        "cat": cat,
        "price": rng.integers(0, 50, CN).astype(np.int32),
        "order": order,
        "offsets": offsets,
    }


def cat_score(qs: dict, r: dict, idx: jax.Array) -> jax.Array:
    cos = embedding_scores(qs["emb"], r["emb"])
    return jnp.where(r["price"][None, :] <= qs["max"][:, None], cos, -jnp.inf)


def cat_filtered_score(qs: dict, r: dict, idx: jax.Array) -> jax.Array:
    same = r["cat"][None, :] == qs["cat"][:, None]
    return jnp.where(same, cat_score(qs, r, idx), -jnp.inf)


@pytest.mark.parametrize("k", [50])  # k > chunk, and > most filtered categories
def test_category_slice_matches_masked_topk(k: int) -> None:
    """Scoring only the category's rows == full scan with a category filter (ties included)."""
    batch, chunk = 5, 40  # 96 = 2 full chunks + 16
    rng = np.random.default_rng(5)
    cats = [cat_catalog(rng) for _ in range(batch)]
    cat_b = {key: jnp.asarray(np.stack([c[key] for c in cats])) for key in cats[0]}
    qcat = rng.integers(0, CCATS, size=(batch, CQ)).astype(np.int32)
    qcat[:, 0] = CCATS - 1  # the empty category
    queries = {
        "emb": jnp.asarray(rng.integers(-1, 2, size=(batch, CQ, 4)), jnp.float32),
        "max": jnp.asarray(rng.choice([-1, 25, 49], size=(batch, CQ)), jnp.int32),
        "cat": jnp.asarray(qcat),
    }

    def fast(c: dict, qs: dict) -> TopK:
        rows = {key: c[key] for key in ("emb", "cat", "price")}
        args = (c["order"], c["offsets"], qs["cat"], k, CMAX)
        return category_slice_topk(cat_score, rows, qs, *args, chunk=chunk)

    def full(c: dict, qs: dict) -> TopK:
        rows = {key: c[key] for key in ("emb", "cat", "price")}
        return masked_topk(cat_filtered_score, rows, qs, CN, k, chunk=128)

    got = jax.jit(jax.vmap(fast))(cat_b, queries)
    want = jax.jit(jax.vmap(full))(cat_b, queries)
    for b in range(batch):
        c = cats[b]
        e, qe = c["emb"].astype(np.float64), np.asarray(queries["emb"][b], np.float64)
        ok = c["price"][None, :] <= np.asarray(queries["max"][b])[:, None]
        ok &= c["cat"][None, :] == qcat[b][:, None]
        oracle = np_topk(np.where(ok, qe @ e.T, -np.inf).astype(np.float32), k)
        assert_topk_equal(jax.tree_util.tree_map(lambda x, b=b: x[b], got), oracle)
        assert_topk_equal(jax.tree_util.tree_map(lambda x, b=b: x[b], want), oracle)
    assert (np.asarray(got.n_valid)[:, 0] == 0).all()


# -------------------------------------------------------------------------- memory sanity


def test_no_q_by_n_intermediate() -> None:
    """Compile for a 1M-row catalog (abstractly, nothing allocated): no [Q, N] buffer."""
    q, n, d, k, chunk = 16, 1 << 20, 8, 10, 4096

    def score(qs: jax.Array, e: jax.Array, idx: jax.Array) -> jax.Array:
        return embedding_scores(qs, e)

    args = (jax.ShapeDtypeStruct((n, d), jnp.float32), jax.ShapeDtypeStruct((q, d), jnp.float32))
    qn = f"{q}x{n}x"
    lowered_ref = jax.jit(lambda e, qs: masked_topk_reference(score, e, qs, n, k)).lower(*args)
    assert qn in lowered_ref.as_text()  # positive control: the check can see a [Q, N]
    lowered = jax.jit(lambda e, qs: masked_topk(score, e, qs, n, k, chunk)).lower(*args)
    assert qn not in lowered.as_text()
    compiled = lowered.compile()
    assert f"[{q},{n}]" not in compiled.as_text()
    try:
        stats = compiled.memory_analysis()
        temp = int(stats.temp_size_in_bytes)
    except Exception:  # noqa: BLE001 - not every backend/jax version reports it
        pytest.skip("memory_analysis unavailable")
    budget = 64 * q * chunk * 4 + 64 * q * k * 8  # a few [Q, chunk] buffers, never Q·N·4
    assert temp < budget < q * n * 4, (temp, budget)
    assert math.isfinite(temp)
