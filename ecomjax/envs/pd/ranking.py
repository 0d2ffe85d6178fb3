"""Ranking pieces shared by the PD and SUB verifiers (SPEC §6, §7): availability at
termination, the answer list L[:k], DCG / IDCG over the exact pool, and r_avail."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.sharded_emb import lockstep_any
from ecomjax.catalog.types import Catalog
from ecomjax.compact import compact
from ecomjax.constraints import feasible, required_category
from ecomjax.kernels.pool import (
    MemberFn,
    PoolStats,
    dcg_weights,
    pool_stats,
    pool_stats_in_category,
)
from ecomjax.types import Problem, World
from ecomjax.world import product_stock_qty, safe

K = C.MAX_K_REC
POOL_CHUNK = 4096  # rows per step of the pool kernel (a 1000-product catalog is one step)
# Rows per step of a category-bounded pool (a 1000-product catalog's largest category, 36
# rows, is one step): small enough that a batch's gathered rows stay small at any N.
CATEGORY_CHUNK = 512


def known(catalog: Catalog, pids: jax.Array) -> jax.Array:
    return (pids >= 0) & (pids < catalog.n_products)


def available(catalog: Catalog, problem: Problem, world: World, pids: jax.Array) -> jax.Array:
    """bool [...]: the product SKU's stock_qty > 0 at termination, by the tools' own rule
    (``world.stock_qty``: base stock minus plain cart lines and active exchanges, 0 once
    forced out), so a unit the tools show as reserved is unavailable here too."""
    shape = jnp.shape(pids)
    flat = jnp.reshape(pids, (-1,))
    qty = product_stock_qty(catalog, problem, world, safe(flat)).reshape(shape)
    return known(catalog, pids) & (qty > 0)


def answer_list(rec: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(L [K] = the first K listed ids in order, live [K] = position < min(k, |L|),
    first [K] = the id's first occurrence in L). -1 is padding; ids <= -2 are unknown."""
    listed = rec != -1
    ids = compact(rec, listed, K)
    live = (jnp.arange(K) < listed.sum()) & (jnp.arange(K) < k)
    earlier = (ids[None, :] == ids[:, None]) & (jnp.arange(K)[None, :] < jnp.arange(K)[:, None])
    first = ~(earlier & live[None, :]).any(-1)
    return jnp.where(live, ids, -1), live, first


def goal_pool_stats(
    catalog: Catalog, problem: Problem, row: int, member: MemberFn, needed: jax.Array
) -> PoolStats:
    """Pool statistics of constraint row ``row`` (0 PD, 1 SUB) for a ``member`` that
    requires the row's constraints: only the goal category's rows are read when the set
    has its category constraint (always, for generated problems), else the whole catalog;
    none where the score is not ``needed`` (no answer to score: a JOURNEY without this
    sub-goal). Equal to the whole-catalog scan bit for bit (``pool_test.py``)."""
    if catalog.max_cat_size <= 0:  # no category index on this catalog
        return pool_stats(member, None, catalog.n_products, K, POOL_CHUNK)
    cons = (problem.cons_attr[row], problem.cons_op[row], problem.cons_val[row])
    cat = required_category(catalog, *cons)
    chunk = min(CATEGORY_CHUNK, catalog.max_cat_size)
    return pool_stats_in_category(
        member, None, catalog.cat_order, catalog.cat_offsets, cat, K, chunk, POOL_CHUNK, needed,
        lockstep=None if catalog.emb_axis is None else partial(lockstep_any, catalog),
    )  # fmt: skip


def idcg(stats: PoolStats, rel_of_key, k: jax.Array) -> jax.Array:
    """IDCG@k: the DCG of the top-k relevance values of the pool, where relevance is a
    non-decreasing function of the pool key."""
    top_live = (jnp.arange(K) < jnp.minimum(k, stats.count)) & (stats.top > -jnp.inf)
    rel = jnp.where(top_live, rel_of_key(jnp.where(top_live, stats.top, 0.0)), 0.0)
    return (rel * dcg_weights(K)).sum()


def ndcg(dcg: jax.Array, ideal: jax.Array) -> jax.Array:
    """min(1, DCG / IDCG), 0 if IDCG = 0."""
    return jnp.where(ideal > 0, jnp.minimum(1.0, dcg / jnp.where(ideal > 0, ideal, 1.0)), 0.0)


def r_avail(
    catalog: Catalog, problem: Problem, world: World, ids: jax.Array, live: jax.Array
) -> jax.Array:
    """1 - 2·(unknown or unavailable in L[:k]) / |L[:k]|; -1 for an empty list."""
    n = live.sum()
    bad = (live & ~available(catalog, problem, world, ids)).sum()
    return jnp.where(n > 0, 1.0 - 2.0 * bad / jnp.maximum(n, 1), -1.0).astype(jnp.float32)


def pool_members(catalog: Catalog, problem: Problem, world: World, row: int) -> jax.Array:
    """bool [N]: the exact pool of constraint row ``row`` (0 PD, 1 SUB) in ``world``:
    feasible and available, and not the SUB original (F_init at reset, F_end at the end)."""
    ids = jnp.arange(catalog.n_products, dtype=jnp.int32)
    cons = (problem.cons_attr[row], problem.cons_op[row], problem.cons_val[row])
    ok = feasible(catalog, ids, *cons) & available(catalog, problem, world, ids)
    return ok & ((ids != problem.sub_original) if row == 1 else True)
