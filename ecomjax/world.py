"""Stock, reservations and the cart over the per-episode overlay (SPEC §1.7, §5.2, §6).

The shared catalog is never mutated: an episode changes stock only through its forced
out-of-stock set (``ecomjax.exposure``) and cart reservations.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import exposure as X
from ecomjax.catalog.types import Catalog
from ecomjax.compact import in_sorted
from ecomjax.types import Problem, World

I32 = jnp.int32


def init_world(
    n_products: int, seen_capacity: int | None = None, forced_oos: jax.Array | None = None
) -> World:
    """An empty world with ``forced_oos`` out of stock; ``seen_capacity`` None keeps Seen
    and out-of-stock as bitmaps (``ecomjax.exposure``)."""
    mc, mr, mu = C.MAX_CART_LINES, C.MAX_RETURNS, C.MAX_USED_IDS
    return World(
        cart_pid=jnp.full(mc, -1, I32),
        cart_var=jnp.full(mc, -1, I32),
        cart_qty=jnp.zeros(mc, I32),
        cart_no=jnp.zeros(mc, I32),
        lines_created=I32(0),
        **X.init_fields(n_products, seen_capacity, forced_oos),
        used=jnp.full(mu, -1, I32),
        used_hall=jnp.zeros(mu, bool),
        n_used=I32(0),
        n_searches=I32(0),
        ret_order=jnp.full(mr, -1, I32),
        ret_line=jnp.full(mr, -1, I32),
        ret_reason=jnp.full(mr, -1, I32),
        ret_method=jnp.full(mr, -1, I32),
        ret_active=jnp.zeros(mr, bool),
        exch_pid=jnp.full(mr, -1, I32),
        exch_var=jnp.full(mr, -1, I32),
        n_returns=I32(0),
    )


def is_known(catalog: Catalog, pid: jax.Array) -> jax.Array:
    return (pid >= 0) & (pid < catalog.n_products)


def safe(pid: jax.Array) -> jax.Array:
    """A gather-safe index: unknown ids read row 0 and must be masked by the caller."""
    return jnp.maximum(pid, 0)


def target_item(problem: Problem, pid: jax.Array) -> jax.Array:
    """Index of the CART target with this product id, or -1."""
    hit = (problem.item_pid == pid) & (pid >= 0)
    return jnp.where(hit.any(), jnp.argmax(hit), -1)


def has_synth_variants(problem: Problem, pid: jax.Array) -> jax.Array:
    """CART variant-required targets show exactly their 3 synthesized variants (SPEC §8.3)."""
    item = target_item(problem, pid)
    return (item >= 0) & problem.item_var_req[jnp.maximum(item, 0)]


def variant_count(catalog: Catalog, problem: Problem, pid: jax.Array) -> jax.Array:
    base = catalog.var_count[safe(pid)].astype(I32)
    return jnp.where(has_synth_variants(problem, pid), 3, base)


def reserved(world: World, pid: jax.Array, var: jax.Array) -> jax.Array:
    """Units held by cart lines and by active exchanges (1 unit each, SPEC §5.2)."""
    hit = (world.cart_pid == pid) & (world.cart_var == var) & (world.cart_no > 0)
    exch = (world.exch_pid == pid) & (world.exch_var == var) & world.ret_active & (pid >= 0)
    return jnp.sum(jnp.where(hit, world.cart_qty, 0)) + exch.sum().astype(I32)


def base_stock(catalog: Catalog, problem: Problem, pid: jax.Array, var: jax.Array) -> jax.Array:
    """Stock of one SKU before reservations. Synthesized variants share the product's count."""
    p = safe(pid)
    product = catalog.stock[p].astype(I32)
    catalog_var = catalog.var_stock[p, jnp.clip(var, 0, C.MAX_VARIANTS - 1)].astype(I32)
    per_var = jnp.where(has_synth_variants(problem, pid), product, catalog_var)
    return jnp.where(var < 0, product, per_var)


def stock_qty(
    catalog: Catalog, problem: Problem, world: World, pid: jax.Array, var: jax.Array
) -> jax.Array:
    """Units available now: stock - reserved, and 0 once the product is forced out."""
    free = base_stock(catalog, problem, pid, var) - reserved(world, pid, var)
    forced = X.is_oos(world, pid)
    return jnp.where(is_known(catalog, pid) & ~forced, jnp.maximum(free, 0), 0)


def product_stock_qty(
    catalog: Catalog, problem: Problem, world: World, pids: jax.Array
) -> jax.Array:
    """stock_qty of product SKUs (no variant) for a vector of ids, e.g. search cards."""
    return jax.vmap(lambda p: stock_qty(catalog, problem, world, p, jnp.int32(-1)))(pids)


def cart_fingerprint(world: World) -> jax.Array:
    """Order-free hash of the cart contents, so each cart state is confirmed once."""
    active = world.cart_no > 0
    h = (
        world.cart_pid.astype(jnp.uint32) * jnp.uint32(0x9E3779B1)
        ^ (world.cart_var + 7).astype(jnp.uint32) * jnp.uint32(0x85EBCA77)
        ^ world.cart_qty.astype(jnp.uint32) * jnp.uint32(0xC2B2AE3D)
    )
    h = (h ^ (h >> 15)) * jnp.uint32(0x2C1B3C6D)
    return jnp.sum(jnp.where(active, h, 0), dtype=jnp.uint32).astype(I32) | 1


def record_use(world: World, pid: jax.Array, enabled: jax.Array) -> World:
    """Adds a used product id (SPEC §7). Hallucination is judged against Seen at first use."""
    present = (world.used == pid) & (jnp.arange(C.MAX_USED_IDS) < world.n_used)
    is_new = enabled & (pid != -1) & ~present.any() & (world.n_used < C.MAX_USED_IDS)
    slot = world.n_used
    unseen = ~X.is_seen(world, pid)
    return world.replace(
        used=jnp.where(is_new, world.used.at[slot].set(pid), world.used),
        used_hall=jnp.where(is_new, world.used_hall.at[slot].set(unseen), world.used_hall),
        n_used=world.n_used + is_new.astype(I32),
    )


def hallucinated(world: World, pids: jax.Array) -> jax.Array:
    """bool [...]: ids the agent used before they were delivered to it (SPEC §7), which
    never earn task credit (v1.1). An id missing from the full used list (it overflowed
    MAX_USED_IDS) counts as hallucinated unless it is Seen now: Seen only grows, so an id
    unseen now was unseen at its first use, and a flood of ids cannot buy credit."""
    live = jnp.arange(C.MAX_USED_IDS) < world.n_used
    match = (world.used == pids[..., None]) & live & (pids[..., None] >= 0)
    recorded = match.any(-1)
    flagged = (match & world.used_hall).any(-1)
    return (pids >= 0) & jnp.where(recorded, flagged, ~X.is_seen(world, pids))


def unknown_if_hallucinated(world: World, pids: jax.Array) -> jax.Array:
    """Maps each hallucinated id to an unknown id of its own (<= C.HALLUCINATED_BASE, never
    a host code for a made-up string), so verifiers score it as any unknown id: no
    relevance, unavailable, a distinct invalid BUNDLE token. Ids >= 2**30 are unknown to
    any catalog already and stay as they are."""
    scrub = hallucinated(world, pids) & (pids < (1 << 30))
    return jnp.where(scrub, C.HALLUCINATED_BASE - pids, pids)


def record_uses(world: World, pids: jax.Array, enabled: jax.Array) -> World:
    """Vectorised ``record_use`` for an answer's ids (not tool uses). All ids of one answer
    are judged against the same Seen, so they may be appended in sorted order."""
    big = jnp.iinfo(I32).max
    ids = jnp.sort(jnp.where(enabled & (pids != -1), pids, big))
    first = ids != jnp.concatenate([jnp.full(1, big - 1, I32), ids[:-1]])
    live_used = jnp.where(jnp.arange(C.MAX_USED_IDS) < world.n_used, world.used, big)
    used_sorted = jnp.sort(live_used)
    hit = in_sorted(used_sorted, ids)
    new = (ids != big) & first & ~hit
    pos = world.n_used + jnp.cumsum(new) - 1
    dest = jnp.where(new & (pos < C.MAX_USED_IDS), pos, C.MAX_USED_IDS)
    unseen = ~X.is_seen(world, ids)
    return world.replace(
        used=world.used.at[dest].set(ids, mode="drop"),
        used_hall=world.used_hall.at[dest].set(unseen, mode="drop"),
        n_used=jnp.minimum(world.n_used + new.sum(), C.MAX_USED_IDS).astype(I32),
    )
