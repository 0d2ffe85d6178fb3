"""Two-level per-chunk selection, index offsets and dtype edge cases of ``masked_topk``.

The two-level path (rank groups by their max, select inside the kept groups) must give
exactly the flat result for every group width, including heavy ties that straddle group
boundaries. Shapes are few and fixed (each is one compile); contents vary per example.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ecomjax.kernels.topk import (
    _auto_group,
    _chunk_candidates,
    embedding_scores,
    masked_topk,
    masked_topk_reference,
)
from tests.support.topk_oracle import assert_topk_equal, np_topk

N, Q = 512, 3


def table_score(queries: dict, rows: dict, idx: jax.Array) -> jax.Array:
    del idx
    return rows["s"][:, queries["qi"]].T


@functools.cache
def grouped(k: int, chunk: int, group: int | None):
    return jax.jit(lambda r, q: masked_topk(table_score, r, q, N, k, chunk, group=group))


# (k, chunk, group): g | chunk, g not dividing chunk (falls back), kc·g near C, auto.
GROUP_CASES = [(1, 128, 8), (5, 128, 16), (12, 256, 4), (3, 96, 32), (20, 512, None), (7, 60, 8)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    case=st.sampled_from(GROUP_CASES),
    table=hnp.arrays(
        np.float32,
        (N, Q),
        elements=st.sampled_from([-np.inf, np.nan, -0.0, 0.0, 1.0, 2.0, 3.0, np.inf, 0.5]),
    ),
)
def test_grouped_selection_equals_definition(case, table) -> None:
    """Few distinct values -> ties everywhere, across group and chunk edges."""
    k, chunk, group = case
    got = grouped(k, chunk, group)({"s": jnp.asarray(table)}, {"qi": jnp.arange(Q)})
    assert_topk_equal(got, np_topk(table.T, k))


def test_grouped_candidates_direct() -> None:
    """_chunk_candidates with groups keeps the same set as the flat selection."""
    rng = np.random.default_rng(0)
    s = rng.integers(0, 4, size=(4, 1024)).astype(np.float32)  # 4 values: huge ties
    s[1, :] = 1.0  # one row entirely tied
    s[2, 700:] = 9.0  # the best values sit in the last groups
    ids = np.broadcast_to(np.arange(1024, dtype=np.int32), s.shape)
    for kc, g in [(1, 32), (10, 16), (100, 4)]:
        both = jax.jit(
            lambda s, i, kc=kc, g=g: (
                _chunk_candidates(s, i, kc, 1)[1],
                _chunk_candidates(s, i, kc, g)[1],
            )
        )
        fi, gi = both(jnp.asarray(s), jnp.asarray(ids))
        for r in range(4):
            assert sorted(np.asarray(fi[r]).tolist()) == sorted(np.asarray(gi[r]).tolist())
            want = np.lexsort((np.arange(1024), -s[r]))[:kc]
            assert sorted(np.asarray(gi[r]).tolist()) == sorted(want.tolist())


def test_auto_group_is_a_power_of_two_divisor() -> None:
    for c, kc in [(8192, 10), (8192, 200), (32768, 200), (1000, 10), (4096, 4096), (7, 1)]:
        g = _auto_group(c, kc)
        assert g == 1 or (c % g == 0 and g & (g - 1) == 0 and g >= 4 and kc * g < c)
    assert _auto_group(65536, 10) == 64 and _auto_group(1001, 1) == 1


def test_index_offset_shifts_ids_and_score_fn_indices() -> None:
    """A shard at offset o reports global ids, and score_fn sees global ids."""
    rng = np.random.default_rng(1)
    emb = rng.integers(-2, 3, size=(300, 4)).astype(np.float32)
    qe = rng.integers(-2, 3, size=(2, 4)).astype(np.float32)

    def score(q, e, idx):
        return jnp.where(idx[None, :] % 3 == 0, embedding_scores(q, e), -jnp.inf)

    full = masked_topk_reference(score, jnp.asarray(emb), jnp.asarray(qe), 300, 8)
    off = 1000  # global rows 1000..1299 hold the same vectors; 1000 % 3 == 1
    got = jax.jit(lambda e, q: masked_topk(score, e, q, 300, 8, 64, index_offset=jnp.int32(off)))(
        jnp.asarray(emb), jnp.asarray(qe)
    )
    shifted = masked_topk_reference(
        lambda q, e, i: score(q, e, i + off), jnp.asarray(emb), jnp.asarray(qe), 300, 8
    )
    want_ids = np.where(np.asarray(shifted.indices) >= 0, np.asarray(shifted.indices) + off, -1)
    np.testing.assert_array_equal(got.indices, want_ids)
    np.testing.assert_array_equal(got.scores, shifted.scores)
    assert not np.array_equal(np.asarray(full.indices), np.asarray(got.indices))


# ------------------------------------------------------------------ f32 / bf16 edge cases

EN, ED = 777, 16


def edge_case(dtype):
    rng = np.random.default_rng(2)
    emb = rng.integers(-3, 4, size=(EN, ED)).astype(np.float32)
    emb[100:110] = emb[5]  # exact duplicate rows: ties broken by index
    qe = rng.integers(-3, 4, size=(5, ED)).astype(np.float32)
    qe[4] = emb[5]
    rows = {"emb": jnp.asarray(emb, dtype), "cat": jnp.asarray(rng.integers(0, 4, EN))}
    # filter per query: -1 = none (empty filter), 4 = matches nothing, 3 = one category
    queries = {"emb": jnp.asarray(qe, dtype), "cat": jnp.asarray([-1, 4, 3, -1, -1])}
    return rows, queries


def edge_score(q: dict, r: dict, idx: jax.Array) -> jax.Array:
    s = embedding_scores(q["emb"], r["emb"])
    ok = (q["cat"][:, None] < 0) | (r["cat"][None, :] == q["cat"][:, None])
    return jnp.where(ok, s, -jnp.inf)


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
@pytest.mark.parametrize("k", [15, 800])  # 800 > N: k above every candidate count
def test_dtype_edge_cases_match_reference(dtype, k) -> None:
    """No filter, all filtered out, k > |T|, duplicate rows; float32 accumulation for bf16."""
    rows, queries = edge_case(dtype)
    got = jax.jit(lambda r, q: masked_topk(edge_score, r, q, EN, k, 256))(rows, queries)
    ref = masked_topk_reference(edge_score, rows, queries, EN, k)
    e64 = np.asarray(rows["emb"].astype(jnp.float32), np.float64)
    q64 = np.asarray(queries["emb"].astype(jnp.float32), np.float64)
    qc, rc = np.asarray(queries["cat"]), np.asarray(rows["cat"])
    ok = (qc[:, None] < 0) | (rc[None, :] == qc[:, None])
    want = np_topk(np.where(ok, q64 @ e64.T, -np.inf).astype(np.float32), k)
    assert_topk_equal(got, want)
    assert_topk_equal(ref, want)
    assert got.scores.dtype == jnp.float32
    assert int(got.n_valid[1]) == 0 and (np.asarray(got.indices[1]) == -1).all()
    assert int(got.n_valid[0]) == EN
    top4 = np.asarray(got.indices[4]).tolist()  # duplicates of row 5: listed by index
    dup = [i for i in top4 if i == 5 or 100 <= i < 110]
    assert dup == [5, *range(100, 110)]
