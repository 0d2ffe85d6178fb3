"""Stock shocks (SPEC §6): after each non-terminal turn, every exposed product goes out of
stock with the hazard q(d). Exposure never looks at target membership beyond protection,
so a shock reveals nothing about the goal."""

from __future__ import annotations

import functools
import operator

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


def _flag_at(world: World, pids: jax.Array, size: int) -> jax.Array:
    """bool [size]: True at the exposure slots of ``pids`` (those with one; -1 ignored)."""
    slot, hit = X.lookup(world, pids)
    return jnp.zeros(size, bool).at[jnp.where(hit, slot, size)].set(True, mode="drop")


def member_values(world: World, values: jax.Array, ids: jax.Array) -> jax.Array:
    """A per-product catalog column at the exposure members ``ids``. Dense members are all
    N ids in order, so the column itself, without a gather (whose [N, B] layout under
    vmap kept the shock draw from vectorising)."""
    if X.is_dense(world):
        return values
    return values[jnp.clip(ids, 0, values.shape[0] - 1)]


def reserved_out(catalog: Catalog, world: World) -> jax.Array:
    """int32 [lines + returns]: products whose free product-SKU stock (variants aside) the
    episode's reservations use up, -1 elsewhere. Plain cart lines hold their quantity and
    active exchanges one unit of their new product (SPEC §5.2). Plain lines hold distinct
    products (``cart_add`` merges a repeated product-variant into its line), so only the
    few exchanges need matching, not an N-long count per turn."""
    plain = (world.cart_no > 0) & (world.cart_var == -1)
    exch = world.ret_active & (world.exch_pid >= 0) & (world.exch_var == -1)
    line_pid = jnp.where(plain, world.cart_pid, -1)
    exch_pid = jnp.where(exch, world.exch_pid, -1)
    line_qty = jnp.where(plain, world.cart_qty, 0)
    to_line = (exch_pid[:, None] == line_pid[None, :]) & (exch_pid[:, None] >= 0)  # [R, L]
    to_exch = (exch_pid[:, None] == exch_pid[None, :]) & (exch_pid[:, None] >= 0)  # [R, R]
    # An exchange entry carries its product's whole reservation; a line without exchanges,
    # its own quantity (with exchanges its product is caught by their entries).
    exch_units = to_exch.sum(1) + jnp.where(to_line, line_qty[None, :], 0).sum(1)
    pids = jnp.concatenate([line_pid, exch_pid])
    units = jnp.concatenate([line_qty, exch_units])
    used_up = (pids >= 0) & (units > 0) & (units >= catalog.stock[safe(pids)])
    return jnp.where(used_up, pids, -1)


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
    # One comparison per goal slot (unused slots are -1, no category): elementwise over the
    # members, where a lookup table per episode would be a gather per product.
    member_cat = member_values(world, catalog.category, ids).astype(jnp.int32)
    in_goal = functools.reduce(operator.or_, [member_cat == c for c in cats])
    # Exposed: seen, in a goal category, free stock > 0 (in stock, not forced out, not used
    # up by reservations) and not protected.
    blocked = jnp.concatenate([problem.protected, reserved_out(catalog, world)])
    in_stock = (member_values(world, catalog.stock, ids) > 0) & ~world.oos
    exposed = live & world.seen & in_goal & in_stock & ~_flag_at(world, blocked, m)
    u = keyed_uniform(jax.random.fold_in(jax.random.fold_in(key, C.STREAM["SHOCK"]), turn), ids)
    shocked = exposed & (u < hazard)
    first = first_true(shocked, C.MAX_EVENTS)
    events = jnp.where(first >= 0, ids[jnp.maximum(first, 0)], -1)
    slot, hit = X.lookup(world, problem.item_pid)
    items = hit & shocked[slot]
    return world.replace(oos=world.oos | shocked), events, shocked.sum().astype(jnp.int32), items
