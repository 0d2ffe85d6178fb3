"""Stock shocks (SPEC §6): after each non-terminal turn, every exposed product goes out of
stock with the hazard q(d). Exposure never looks at target membership beyond protection,
so a shock reveals nothing about the goal."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import exposure as X
from ecomjax.catalog.types import Catalog
from ecomjax.compact import first_true
from ecomjax.types import Problem, World
from ecomjax.world import safe


def keyed_uniform(key: jax.Array, ids: jax.Array) -> jax.Array:
    """float32 in [0, 1) per product id, from a single keyed seed hashed with the murmur3
    finalizer: a few integer ops per product, not a threefry, and a function of the id
    alone, so a draw over a sparse id list equals the draw over all N at those ids."""
    seed = jax.random.bits(key, (), jnp.uint32)
    h = ids.astype(jnp.uint32) * jnp.uint32(0x9E3779B1) ^ seed
    h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
    h = h ^ (h >> 16)
    return (h >> 8).astype(jnp.float32) * jnp.float32(1.0 / (1 << 24))


def goal_categories(catalog: Catalog, problem: Problem) -> jax.Array:
    """int32 [7]: categories of the CART targets, the PD target and the SUB original."""
    pids = jnp.concatenate([problem.item_pid, problem.pd_target[None], problem.sub_original[None]])
    return jnp.where(pids >= 0, catalog.category[safe(pids)].astype(jnp.int32), -1)


def _count_at(world: World, pids: jax.Array, add: jax.Array, size: int) -> jax.Array:
    """int32 [size]: ``add`` summed onto the exposure slots of ``pids`` (where it has one)."""
    slot, hit = X.lookup(world, pids)
    return jnp.zeros(size, jnp.int32).at[jnp.where(hit, slot, size)].add(add, mode="drop")


def member_free_stock(catalog: Catalog, world: World, ids: jax.Array) -> jax.Array:
    """int32 [M]: product-SKU stock_qty (variants aside) of the exposure members ``ids``."""
    m = ids.shape[0]
    plain = (world.cart_no > 0) & (world.cart_var == -1)
    reserved = _count_at(world, world.cart_pid, jnp.where(plain, world.cart_qty, 0), m)
    # Active exchanges hold one unit of their new product (SPEC §5.2).
    exch = world.ret_active & (world.exch_pid >= 0) & (world.exch_var == -1)
    reserved += _count_at(world, world.exch_pid, exch.astype(jnp.int32), m)
    free = catalog.stock[jnp.clip(ids, 0, catalog.n_products - 1)].astype(jnp.int32) - reserved
    return jnp.where(world.oos, 0, jnp.maximum(free, 0))


def apply_shocks(
    key: jax.Array,
    catalog: Catalog,
    problem: Problem,
    world: World,
    turn: jax.Array,
    hazard: jax.Array,
) -> tuple[World, jax.Array, jax.Array, jax.Array]:
    """Returns (world, events [MAX_EVENTS], n_events, shocked CART items [MAX_ITEMS]).

    Only Seen products can be exposed, so the draw runs over the exposure members alone:
    all N for the dense layout, the id list for the sparse one (same ids, same order)."""
    ids, live = X.members(world)
    m = ids.shape[0]
    cats = goal_categories(catalog, problem)
    cat_mask = jnp.zeros(catalog.n_categories, bool).at[cats].set(cats >= 0, mode="drop")
    in_goal = cat_mask[catalog.category[jnp.clip(ids, 0, catalog.n_products - 1)].astype(jnp.int32)]
    protected = _count_at(world, problem.protected, (problem.protected >= 0).astype(jnp.int32), m)
    exposed = live & world.seen & in_goal & (member_free_stock(catalog, world, ids) > 0)
    exposed &= protected == 0
    u = keyed_uniform(jax.random.fold_in(jax.random.fold_in(key, C.STREAM["SHOCK"]), turn), ids)
    shocked = exposed & (u < hazard)
    first = first_true(shocked, C.MAX_EVENTS)
    events = jnp.where(first >= 0, ids[jnp.maximum(first, 0)], -1)
    slot, hit = X.lookup(world, problem.item_pid)
    items = hit & shocked[slot]
    return world.replace(oos=world.oos | shocked), events, shocked.sum().astype(jnp.int32), items
