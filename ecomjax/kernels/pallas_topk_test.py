"""The Pallas block top-k (ecomjax/kernels/pallas_topk.py) == the jnp reference, in interpret mode.

Scores are exact in float arithmetic (small-integer vectors, so every dot product is an
exact small integer in f32 and bf16, heavily tied), so ids, scores and n_valid must be
*equal* to ``masked_topk_reference`` with the same filters written as a ``score_fn``,
whatever order a backend accumulates in. Every (shape, k, block, filter set) is one compile,
so random contents are swept in a loop over one shape per configuration.
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

from ecomjax.kernels.pallas_topk import default_interpret, pallas_masked_topk
from ecomjax.kernels.topk import TopK, embedding_scores, masked_topk_reference
from tests.support.topk_oracle import assert_topk_equal, np_topk

# ------------------------------------------------------------------------------- oracles


def filter_score(qs: dict, rows: dict, idx: jax.Array) -> jax.Array:
    """The kernel's filters as a score_fn: discrete attributes, row mask, inclusive range."""
    del idx
    s = embedding_scores(qs["emb"], rows["emb"])
    ok = jnp.ones(s.shape, bool)
    if "cat" in rows:
        rc, qc = rows["cat"][None, :, :], qs["cat"][:, None, :]  # [1, N, F], [Q, 1, F]
        ok &= ((qc == -1) | ((rc == qc) & (rc >= 0))).all(-1)
    if "valid" in rows:
        ok &= rows["valid"][None, :]
    if "value" in rows:
        v = rows["value"][None, :]
        ok &= (v >= qs["range"][:, :1]) & (v <= qs["range"][:, 1:])
    return jnp.where(ok, s, -jnp.inf)


@functools.partial(jax.jit, static_argnames="k")
def reference(case: dict, k: int) -> TopK:
    rows = {"emb": case["emb"]}
    qs = {"emb": case["queries"]}
    if case.get("row_cat") is not None:
        rows["cat"] = case["row_cat"].reshape(case["emb"].shape[0], -1)  # [N] -> [N, 1]
        qs["cat"] = case["query_cat"].reshape(case["queries"].shape[0], -1)
    if case.get("row_valid") is not None:
        rows["valid"] = case["row_valid"]
    if case.get("row_value") is not None:
        rows["value"], qs["range"] = case["row_value"], case["query_range"]
    return masked_topk_reference(filter_score, rows, qs, case["emb"].shape[0], k)


def kernel(case: dict, k: int, interpret: bool = True, **kw) -> TopK:
    return pallas_masked_topk(
        case["queries"],
        case["emb"],
        case.get("row_cat"),
        case.get("row_valid"),
        case.get("query_cat"),
        k,
        row_value=case.get("row_value"),
        query_range=case.get("query_range"),
        interpret=interpret,
        **kw,
    )


def np_scores(case: dict) -> np.ndarray:
    """float64 scores with the filters applied, straight from the definitions."""
    e = np.asarray(case["emb"].astype(jnp.float32), np.float64)
    q = np.asarray(case["queries"].astype(jnp.float32), np.float64)
    ok = np.ones((q.shape[0], e.shape[0]), bool)
    if case.get("row_cat") is not None:
        rc = np.asarray(case["row_cat"]).reshape(1, e.shape[0], -1)
        qc = np.asarray(case["query_cat"]).reshape(q.shape[0], 1, -1)
        ok &= ((qc == -1) | ((rc == qc) & (rc >= 0))).all(-1)
    if case.get("row_valid") is not None:
        ok &= np.asarray(case["row_valid"])[None, :]
    if case.get("row_value") is not None:
        v, rg = np.asarray(case["row_value"])[None, :], np.asarray(case["query_range"])
        ok &= (v >= rg[:, :1]) & (v <= rg[:, 1:])
    return np.where(ok, q @ e.T, -np.inf)


def random_case(
    rng: np.random.Generator,
    n: int,
    q: int,
    d: int,
    *,
    n_attr: int = 1,
    valid: bool = True,
    value: bool = False,
    emb_dtype=jnp.float32,
    query_dtype=None,
) -> dict:
    """Small-integer vectors (exact, many ties); categories with missing (-1) and unknown
    (-2) rows; query codes -1 (no filter), real ones, 7 (no row has it) and -2 (an unknown
    value: matches nothing, not even the rows coded -2)."""
    case = {
        "emb": jnp.asarray(rng.integers(-2, 3, (n, d)), emb_dtype),
        "queries": jnp.asarray(rng.integers(-2, 3, (q, d)), query_dtype or emb_dtype),
    }
    if n_attr:
        case["row_cat"] = jnp.asarray(rng.integers(-2, 4, (n, n_attr)), jnp.int32)
        qc = rng.choice([-1, -1, 0, 1, 2, 3, 7, -2], (q, n_attr))
        case["query_cat"] = jnp.asarray(qc, jnp.int32)
    if valid:
        case["row_valid"] = jnp.asarray(rng.random(n) < 0.8)
    if value:
        case["row_value"] = jnp.asarray(rng.integers(0, 100, n), jnp.int32)
        lo = rng.choice([np.iinfo(np.int32).min, 0, 20], q)
        hi = rng.choice([np.iinfo(np.int32).max, 50, 99, -1], q)  # -1: none pass
        case["query_range"] = jnp.asarray(np.stack([lo, hi], 1), jnp.int32)
    return case


# (n, q, d, k, block_rows, block_queries, extra): n never a multiple of the block.
CASES = {
    # D = 8: zero-padded to 16 outside; one D chunk.
    "pad_d": (150, 5, 8, 7, 32, None, {}),
    # D = 48: three 16-wide chunks; two attributes + value range; k > block_rows, so
    # k exceeds most queries' candidates; 20 queries in two 16-query blocks.
    "chunked_d_range": (150, 20, 48, 40, 16, 16, {"n_attr": 2, "value": True}),
    # bf16 x bf16 on bf16 units, float32 accumulation.
    "bf16": (150, 5, 32, 5, 64, None, {"value": True, "emb_dtype": jnp.bfloat16}),
    # bf16 catalog, f32 queries (promoted, as embedding_scores); N < block_rows.
    "bf16_f32_small_n": (100, 3, 16, 3, 128, None, {"emb_dtype": jnp.bfloat16,
                                                    "query_dtype": jnp.float32}),
}  # fmt: skip


def check_random_cases(name: str, interpret: bool) -> None:
    n, q, d, k, block_rows, block_queries, extra = CASES[name]
    rng = np.random.default_rng(sorted(CASES).index(name))
    ties = short = 0
    for _ in range(4):
        case = random_case(rng, n, q, d, **extra)
        got = kernel(case, k, interpret, block_rows=block_rows, block_queries=block_queries)
        assert_topk_equal(got, reference(case, k))
        assert_topk_equal(got, TopK(*np_topk(np_scores(case), k)))
        assert got.scores.shape == (q, k)
        s = np.asarray(got.scores)
        ties += int(((s[:, 1:] == s[:, :-1]) & np.isfinite(s[:, 1:])).sum())
        short += int((np.asarray(got.n_valid) < k).sum())
    assert ties > 0 and short > 0  # the sweep hit tied slots and queries with < k matches


@pytest.mark.parametrize("name", sorted(CASES))
def test_random_filters_match_reference(name: str) -> None:
    check_random_cases(name, interpret=True)


@pytest.mark.skipif(jax.default_backend() != "gpu", reason="the compiled kernel needs a GPU")
@pytest.mark.parametrize("name", sorted(CASES))
def test_compiled_gpu_kernel_matches_reference(name: str) -> None:
    check_random_cases(name, interpret=False)


@pytest.mark.parametrize(
    "d, dtype, filters, k", [(384, jnp.float32, True, 10), (8, jnp.bfloat16, False, 64)]
)
def test_lowers_to_triton_for_cuda(d: int, dtype, filters: bool, k: int) -> None:
    """Without a GPU: lower the compiled (non-interpret) kernel for CUDA, which runs the
    Pallas -> Triton lowering and its checks (power-of-two tiles, supported primitives)."""
    pytest.importorskip("jax._src.pallas.triton.pallas_call_registration")
    q, n = 64, 100_003
    sds = jax.ShapeDtypeStruct
    args = [sds((q, d), dtype), sds((n, d), dtype)]
    if filters:
        args += [sds((n, 2), jnp.int32), sds((n,), bool), sds((q, 2), jnp.int32)]
        args += [sds((n,), jnp.float32), sds((q, 2), jnp.float32)]

    def fn(qs, e, *f):
        rc, rv, qc, val, rng = f if filters else (None,) * 5
        kw = {"row_value": val, "query_range": rng, "block_rows": 256, "interpret": False}
        return pallas_masked_topk(qs, e, rc, rv, qc, k, **kw)

    text = jax.jit(fn).trace(*args).lower(lowering_platforms=("cuda",)).as_text()
    assert "triton" in text.lower()
    assert f"{q}x{n}x" not in text


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    emb=hnp.arrays(np.int8, (40, 4), elements=st.integers(-1, 1)),
    queries=hnp.arrays(np.int8, (3, 4), elements=st.integers(-1, 1)),
    row_cat=hnp.arrays(np.int32, (40,), elements=st.integers(-1, 2)),
    query_cat=hnp.arrays(np.int32, (3,), elements=st.integers(-1, 2)),
    row_valid=hnp.arrays(np.bool_, (40,)),
)
def test_hypothesis_ties(emb, queries, row_cat, query_cat, row_valid) -> None:
    """Vectors in {-1, 0, 1}^4: a handful of distinct scores, so nearly every slot is a tie
    broken across block boundaries (40 rows = 2 blocks of 16 + 8)."""
    case = {
        "emb": jnp.asarray(emb, jnp.float32),
        "queries": jnp.asarray(queries, jnp.float32),
        "row_cat": jnp.asarray(row_cat),
        "query_cat": jnp.asarray(query_cat),
        "row_valid": jnp.asarray(row_valid),
    }
    assert_topk_equal(kernel(case, 6, block_rows=16), reference(case, 6))


# ------------------------------------------------------------------------------ edge cases


def test_no_filters_all_filtered_k_beyond_n_and_k_zero() -> None:
    rng = np.random.default_rng(7)
    n, q, d = 37, 4, 8
    case = random_case(rng, n, q, d, n_attr=0, valid=False)
    # Empty filter: every row passes.
    got = kernel(case, 10, block_rows=16)
    assert_topk_equal(got, reference(case, 10))
    np.testing.assert_array_equal(got.n_valid, [n] * q)
    # k > N: all 37 rows, then (-inf, -1) padding.
    got = kernel(case, 45, block_rows=16)
    assert_topk_equal(got, reference(case, 45))
    assert (np.asarray(got.indices)[:, n:] == -1).all()
    assert np.isneginf(np.asarray(got.scores)[:, n:]).all()
    assert sorted(np.asarray(got.indices)[0, :n].tolist()) == list(range(n))
    # Every row filtered out: by the row mask, and by a category no row has.
    dead = case | {"row_valid": jnp.zeros((n,), bool)}
    got = kernel(dead, 5, block_rows=16)
    assert_topk_equal(got, reference(dead, 5))
    assert (np.asarray(got.indices) == -1).all() and (np.asarray(got.n_valid) == 0).all()
    nocat = case | {
        "row_cat": jnp.zeros((n,), jnp.int32),
        "query_cat": jnp.asarray([3, 0, -1, -2], jnp.int32),
    }
    got = kernel(nocat, 5, block_rows=16)
    assert_topk_equal(got, reference(nocat, 5))
    np.testing.assert_array_equal(got.n_valid, [0, n, n, 0])
    # k = 0: no slots, n_valid still reported.
    got = kernel(nocat, 0, block_rows=16)
    assert got.scores.shape == (q, 0) and got.indices.shape == (q, 0)
    np.testing.assert_array_equal(got.n_valid, [0, n, n, 0])
    # Empty catalog.
    empty = kernel(case | {"emb": jnp.zeros((0, d))}, 3)
    np.testing.assert_array_equal(empty.indices, -np.ones((q, 3)))


def test_nan_inf_signed_zero_and_subnormal_scores() -> None:
    """Canonical scores: NaN filtered, ±inf kept, -0.0 and subnormals tie with +0.0."""
    tiny = np.float32(1e-20)  # tiny * tiny is subnormal (or flushed): both must read 0
    inf = np.inf
    emb = np.array(
        [[inf, 0], [1, 0], [-1, 0], [tiny, 0], [0, 0], [inf, 1], [-inf, 0], [1, 0], [0, -0.0]],
        np.float32,
    )
    # q0: inf * 0 = NaN (rows 0, 5, 6); q1: a subnormal (row 3) and ±inf; q2: -0.0 (row 8).
    queries = np.array([[0, 1], [tiny, 0], [-1, 1]], np.float32)
    case = {"emb": jnp.asarray(emb), "queries": jnp.asarray(queries)}
    got = kernel(case, 9, block_rows=16)
    assert_topk_equal(got, reference(case, 9))
    s = np.asarray(got.scores)
    assert np.isposinf(s[1, 0]) and not np.isnan(s).any()
    assert not (np.signbit(s) & (s == 0)).any()  # no -0.0 comes out
    assert not ((s != 0) & (np.abs(s) < np.finfo(np.float32).tiny)).any()  # no subnormal
    np.testing.assert_array_equal(got.n_valid, [6, 8, 7])  # NaN and -inf rows dropped
    # Ties at 0 (rows 3, 4, 8 for q1, after the positives) come out in index order.
    zeros = np.asarray(got.indices)[1][s[1] == 0]
    np.testing.assert_array_equal(zeros, [3, 4, 8])


# --------------------------------------------------------------------------- memory, API


def test_no_q_by_n_buffer_in_lowering() -> None:
    """Lower (abstractly) for a 1M-row catalog: the candidates are Q x n_blocks x kw, and
    no [Q, N] array appears; the reference is the positive control."""
    q, n, d, k, block = 16, 1 << 20, 16, 10, 256
    args = (jax.ShapeDtypeStruct((q, d), jnp.float32), jax.ShapeDtypeStruct((n, d), jnp.float32))
    fn = jax.jit(lambda qs, e: pallas_masked_topk(qs, e, None, None, None, k, block_rows=block))
    text = fn.lower(*args).as_text()

    def ref(qs: jax.Array, e: jax.Array) -> TopK:
        return masked_topk_reference(filter_score, {"emb": e}, {"emb": qs}, n, k)

    assert f"{q}x{n}x" in jax.jit(ref).lower(*args).as_text()  # the check can see one
    assert f"{q}x{n}x" not in text
    assert f"{q}x{n // block}x16x" in text  # kw = 16 candidates per block


def test_validation_and_default_interpret() -> None:
    assert default_interpret() == (jax.default_backend() != "gpu")
    e, qs = jnp.zeros((20, 4)), jnp.zeros((2, 4))
    cat, qcat = jnp.zeros((20,), jnp.int32), jnp.zeros((2,), jnp.int32)
    bad = [
        lambda: pallas_masked_topk(qs, e, None, None, None, -1),
        lambda: pallas_masked_topk(qs, e, None, None, None, 3, block_rows=24),
        lambda: pallas_masked_topk(qs, e, None, None, None, 3, block_rows=8),
        lambda: pallas_masked_topk(qs, e, None, None, None, 3, block_queries=20),
        lambda: pallas_masked_topk(qs, jnp.zeros((20, 5)), None, None, None, 3),
        lambda: pallas_masked_topk(qs, e, cat, None, None, 3),
        lambda: pallas_masked_topk(qs, e, cat[:5], None, qcat, 3),
        lambda: pallas_masked_topk(qs, e, None, jnp.ones((19,), bool), None, 3),
        lambda: pallas_masked_topk(qs, e, None, None, None, 3, row_value=cat),
    ]
    for fn in bad:
        with pytest.raises(ValueError):
            fn()


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_default_blocks_k64(dtype) -> None:
    """More rows, D = 64, k = 64, the default blocks (256 rows, 2 x 32 queries)."""
    n, q, d, k = 3000, 40, 64, 64
    rng = np.random.default_rng(11)
    for _ in range(3):
        case = random_case(rng, n, q, d, n_attr=2, value=True, emb_dtype=dtype)
        assert_topk_equal(kernel(case, k), reference(case, k))
