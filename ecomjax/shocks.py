"""Stock shocks (SPEC §6): after each non-terminal turn, every exposed product goes out of
stock with the hazard q(d). Exposure never looks at target membership beyond protection,
so a shock reveals nothing about the goal."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.compact import first_true
from ecomjax.types import Problem, World
from ecomjax.world import safe


def keyed_uniform(key: jax.Array, n: int) -> jax.Array:
    """float32 [n] in [0, 1): one draw per product index from a single keyed seed, hashed
    with the murmur3 finalizer, so cost is a few integer ops per product, not a threefry."""
    seed = jax.random.bits(key, (), jnp.uint32)
    h = jnp.arange(n, dtype=jnp.uint32) * jnp.uint32(0x9E3779B1) ^ seed
    h = (h ^ (h >> 16)) * jnp.uint32(0x85EBCA6B)
    h = (h ^ (h >> 13)) * jnp.uint32(0xC2B2AE35)
    h = h ^ (h >> 16)
    return (h >> 8).astype(jnp.float32) * jnp.float32(1.0 / (1 << 24))


def goal_categories(catalog: Catalog, problem: Problem) -> jax.Array:
    """int32 [7]: categories of the CART targets, the PD target and the SUB original."""
    pids = jnp.concatenate([problem.item_pid, problem.pd_target[None], problem.sub_original[None]])
    return jnp.where(pids >= 0, catalog.category[safe(pids)].astype(jnp.int32), -1)


def product_free_stock(catalog: Catalog, world: World) -> jax.Array:
    """int32 [N]: product-SKU stock_qty of every product (variants aside)."""
    plain = (world.cart_no > 0) & (world.cart_var == -1)
    idx = jnp.where(plain, world.cart_pid, catalog.n_products)
    reserved = jnp.zeros(catalog.n_products, jnp.int32).at[idx].add(world.cart_qty, mode="drop")
    # Active exchanges hold one unit of their new product (SPEC §5.2).
    exch = world.ret_active & (world.exch_pid >= 0) & (world.exch_var == -1)
    reserved = reserved.at[jnp.where(exch, world.exch_pid, catalog.n_products)].add(1, mode="drop")
    free = catalog.stock.astype(jnp.int32) - reserved
    return jnp.where(world.oos, 0, jnp.maximum(free, 0))


def apply_shocks(
    key: jax.Array,
    catalog: Catalog,
    problem: Problem,
    world: World,
    turn: jax.Array,
    hazard: jax.Array,
) -> tuple[World, jax.Array, jax.Array, jax.Array]:
    """Returns (world, events [MAX_EVENTS], n_events, shocked CART items [MAX_ITEMS])."""
    cats = goal_categories(catalog, problem)
    cat_mask = jnp.zeros(catalog.n_categories, bool).at[cats].set(cats >= 0, mode="drop")
    in_goal = cat_mask[catalog.category.astype(jnp.int32)]
    protected = (
        jnp.zeros(catalog.n_products, bool)
        .at[problem.protected]
        .set(problem.protected >= 0, mode="drop")
    )
    exposed = world.seen & in_goal & (product_free_stock(catalog, world) > 0) & ~protected
    u = keyed_uniform(
        jax.random.fold_in(jax.random.fold_in(key, C.STREAM["SHOCK"]), turn), catalog.n_products
    )
    shocked = exposed & (u < hazard)
    events = first_true(shocked, C.MAX_EVENTS)
    items = jnp.where(problem.item_pid >= 0, shocked[safe(problem.item_pid)], False)
    return world.replace(oos=world.oos | shocked), events, shocked.sum().astype(jnp.int32), items
