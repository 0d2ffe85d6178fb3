"""Ranking pieces shared by the PD and SUB verifiers (SPEC §6, §7): availability at
termination, the answer list L[:k], DCG / IDCG over the exact pool, and r_avail."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import exposure as X
from ecomjax.catalog.types import Catalog
from ecomjax.compact import compact
from ecomjax.kernels.pool import PoolStats, dcg_weights
from ecomjax.types import World

K = C.MAX_K_REC
POOL_CHUNK = 4096  # rows per step of the pool kernel (a 1000-product catalog is one step)


def known(catalog: Catalog, pids: jax.Array) -> jax.Array:
    return (pids >= 0) & (pids < catalog.n_products)


def available(catalog: Catalog, world: World, pids: jax.Array) -> jax.Array:
    """bool [...]: product-SKU stock_qty > 0 in the episode's overlay at termination
    (base stock minus plain cart reservations, 0 once forced out), as
    the shocks' exposure rule (``shocks.reserved_out``) but read at any ``pids``."""
    p = jnp.clip(pids, 0, catalog.n_products - 1)
    plain = (world.cart_no > 0) & (world.cart_var == -1)
    hit = plain & (world.cart_pid == p[..., None])
    reserved = jnp.where(hit, world.cart_qty, 0).sum(-1)
    free = catalog.stock[p].astype(jnp.int32) - reserved
    return known(catalog, pids) & (free > 0) & ~X.is_oos(world, pids)


def answer_list(rec: jax.Array, k: jax.Array) -> tuple[jax.Array, jax.Array, jax.Array]:
    """(L [K] = the first K listed ids in order, live [K] = position < min(k, |L|),
    first [K] = the id's first occurrence in L). -1 is padding; ids <= -2 are unknown."""
    listed = rec != -1
    ids = compact(rec, listed, K)
    live = (jnp.arange(K) < listed.sum()) & (jnp.arange(K) < k)
    earlier = (ids[None, :] == ids[:, None]) & (jnp.arange(K)[None, :] < jnp.arange(K)[:, None])
    first = ~(earlier & live[None, :]).any(-1)
    return jnp.where(live, ids, -1), live, first


def idcg(stats: PoolStats, rel_of_key, k: jax.Array) -> jax.Array:
    """IDCG@k: the DCG of the top-k relevance values of the pool, where relevance is a
    non-decreasing function of the pool key."""
    top_live = (jnp.arange(K) < jnp.minimum(k, stats.count)) & (stats.top > -jnp.inf)
    rel = jnp.where(top_live, rel_of_key(jnp.where(top_live, stats.top, 0.0)), 0.0)
    return (rel * dcg_weights(K)).sum()


def ndcg(dcg: jax.Array, ideal: jax.Array) -> jax.Array:
    """min(1, DCG / IDCG), 0 if IDCG = 0."""
    return jnp.where(ideal > 0, jnp.minimum(1.0, dcg / jnp.where(ideal > 0, ideal, 1.0)), 0.0)


def r_avail(catalog: Catalog, world: World, ids: jax.Array, live: jax.Array) -> jax.Array:
    """1 - 2·(unknown or unavailable in L[:k]) / |L[:k]|; -1 for an empty list."""
    n = live.sum()
    bad = (live & ~available(catalog, world, ids)).sum()
    return jnp.where(n > 0, 1.0 - 2.0 * bad / jnp.maximum(n, 1), -1.0).astype(jnp.float32)
