"""The chunked pool kernel equals its plain reference exactly (SPEC §7 IDCG over the whole
catalog), for chunks that divide n or not, exceed n, and with heavy key ties; and it never
materialises a [B, N] intermediate.

Shapes are few and fixed (each is one compile); contents vary per vmapped case.
"""

from __future__ import annotations

import jax
import jax.extend
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ecomjax.kernels.pool import (
    PoolStats,
    pool_stats,
    pool_stats_batch,
    pool_stats_in_category,
    pool_stats_reference,
)

N = 1009  # prime, so no chunk below divides it
B = 64


def member(args, idx):
    """An episode's pool: a per-episode bitmap (like World.oos) read only at the chunk."""
    avail, feas, key = args
    return avail[idx] & feas[idx], key[idx]


def _cases(seed: int, b: int = B, n: int = N):
    k1, k2, k3, k4 = jax.random.split(jax.random.key(seed), 4)
    p = jax.random.uniform(k1, (b, 1)) ** 3  # some pools nearly empty
    avail = jax.random.uniform(k2, (b, n)) < 0.9
    feas = jax.random.uniform(k3, (b, n)) < p
    ints = jax.random.randint(k4, (b, n), -5, 6).astype(jnp.float32)  # many ties, -0 / +0
    floats = jax.random.normal(k4, (b, n))
    key = jnp.where(jnp.arange(b)[:, None] % 2 == 0, ints, floats)
    key = key.at[:, 0].set(-0.0)
    return avail, feas, key


def _assert_equal(a: PoolStats, b: PoolStats):
    for name, x, y in zip(PoolStats._fields, a, b, strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y), err_msg=name)


@pytest.mark.parametrize("k", [1, 10])
@pytest.mark.parametrize("chunk", [7, 64, N, 4096])
def test_chunked_equals_reference_vmapped(k, chunk):
    args = _cases(k * 100 + chunk)
    got = jax.jit(lambda a: pool_stats_batch(member, a, N, k, chunk))(args)
    ref = jax.jit(jax.vmap(lambda a: pool_stats_reference(member, a, N, k)))(args)
    _assert_equal(got, ref)
    # The pool statistics mean what they say, checked against numpy on a few cases.
    avail, feas, key = map(np.asarray, args)
    for i in range(4):
        m = avail[i] & feas[i]
        vals = np.sort(key[i][m])[::-1]
        assert int(got.count[i]) == m.sum()
        top = np.full(k, -np.inf, np.float32)
        top[: min(k, vals.size)] = vals[:k]
        np.testing.assert_array_equal(np.asarray(got.top[i]), top)
        if m.any():
            assert float(got.lo[i]) == vals.min() and float(got.hi[i]) == vals.max()
        else:
            assert float(got.lo[i]) == np.inf and float(got.hi[i]) == -np.inf


@settings(max_examples=30, deadline=None)
@given(
    data=hnp.arrays(np.float32, 23, elements=st.sampled_from([-1.0, 0.0, -0.0, 0.5, 2.0, 3.0])),
    mask=hnp.arrays(np.bool_, 23),
    chunk=st.sampled_from([1, 4, 23]),
)
def test_property_small(data, mask, chunk):
    args = (jnp.asarray(mask), jnp.ones(23, bool), jnp.asarray(data))
    _assert_equal(
        _small(args, chunk),
        _small_ref(args),
    )


@jax.jit
def _small_ref(args):
    return pool_stats_reference(member, args, 23, 5)


def _small(args, chunk):
    return _SMALL[chunk](args)


_SMALL = {c: jax.jit(lambda a, c=c: pool_stats(member, a, 23, 5, c)) for c in (1, 4, 23)}


def test_empty_catalog_and_k_larger_than_n():
    args = _cases(3, b=2, n=5)
    one = jax.tree_util.tree_map(lambda x: x[0], args)
    _assert_equal(pool_stats(member, one, 5, 10, 2), pool_stats_reference(member, one, 5, 10))
    e = pool_stats(member, one, 0, 3)
    assert int(e.count) == 0 and np.all(np.isneginf(np.asarray(e.top)))


def _shapes(jaxpr) -> list[tuple[int, ...]]:
    out = []
    for eqn in jaxpr.eqns:
        out += [tuple(v.aval.shape) for v in eqn.outvars if hasattr(v.aval, "shape")]
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            out += _shapes(sub)
    return out


def test_no_batch_by_catalog_intermediate():
    """Memory O(B·(k + chunk)): no equation outputs anything with an N-sized axis."""
    args = _cases(0)
    jaxpr = jax.make_jaxpr(lambda a: pool_stats_batch(member, a, N, 10, 64))(args).jaxpr
    big = [s for s in _shapes(jaxpr) if N in s]
    assert not big, big


def _categories(seed: int, n: int = N, n_cat: int = 13):
    """A random category per row, and the category index a catalog keeps: rows of each
    category in ascending index (``cat_order``) and each run's start (``cat_offsets``)."""
    cat = np.asarray(jax.random.randint(jax.random.key(seed), (n,), 0, n_cat))
    order = np.argsort(cat, kind="stable").astype(np.int32)
    offsets = np.searchsorted(cat[order], np.arange(n_cat + 1)).astype(np.int32)
    return jnp.asarray(cat), jnp.asarray(order), jnp.asarray(offsets)


@pytest.mark.parametrize("chunk", [5, 64, 2048])
def test_category_pool_equals_the_whole_catalog_scan(chunk):
    """When every member lies in one category, reading that category's rows alone gives
    the whole scan's statistics bit for bit; a lane with category -1 reads every row (in
    chunks of another width), an inactive lane none (the empty pool). It fails if the run
    is cut short (a chunk that stops before the run's end) or misplaced."""
    avail, feas, key = _cases(chunk)
    row_cat, order, offsets = _categories(chunk)
    goal = jax.random.randint(jax.random.key(chunk + 1), (B,), -1, 13)
    # Members only in the goal category (anywhere for the lanes with -1).
    feas = feas & ((row_cat[None, :] == goal[:, None]) | (goal[:, None] < 0))
    args = (avail, feas, key)
    active = jnp.arange(B) % 7 != 3

    def one(a, c, on):
        return pool_stats_in_category(member, a, order, offsets, c, 10, chunk, chunk + 3, on)

    got = jax.jit(jax.vmap(one))(args, goal, active)
    ref = jax.jit(lambda a: pool_stats_batch(member, a, N, 10, 4096))(args)
    empty = jax.vmap(lambda _: pool_stats_reference(member, args, 0, 10))(goal)
    on = np.asarray(active)
    ref = jax.tree_util.tree_map(
        lambda r, e: np.where(on.reshape(-1, *[1] * (r.ndim - 1)), r, e), ref, empty
    )
    _assert_equal(got, ref)
    assert int((goal < 0).sum()) > 0 and int(got.count.min()) >= 0
    assert int((got.count > 0).sum()) > B // 2  # the pools are not trivially empty
