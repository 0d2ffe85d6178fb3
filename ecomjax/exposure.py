"""Seen (SPEC §7) and the forced out-of-stock overlay (§6, §8.2) as one per-episode set.

Two layouts, chosen statically from the catalog size (``EnvParams.exposure``):

* **dense**: ``World.seen`` / ``World.oos`` are bitmaps over the N products. Exact and
  cheapest for small catalogs, but every episode carries 2·N bytes and the stock-shock
  draw touches all N products each turn, which is what stops large-N batches.
* **sparse**: ``World.seen_ids`` is a sorted list of the product ids the episode has
  touched (PAD-filled), and ``seen`` / ``oos`` are flags aligned with it. Its static
  capacity is a proven bound on the distinct ids an episode can be delivered
  (``worst_case_capacity``), so nothing is ever dropped, and per-episode memory and shock
  work follow that bound instead of N.

Both layouts give bit-identical episodes: lookups answer the same questions, and
``members`` lists the same products in the same (ascending id) order for the shock draw.
The forced out-of-stock set is a subset of Seen plus the SUB original (shocks only hit seen
products), so the list holds the SUB original as an entry that is out of stock but unseen.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.types import SMALL_ROWS, EnvParams, World

I32 = jnp.int32
PAD = np.iinfo(np.int32).max
ALL_ENVS: tuple[int, ...] = tuple(int(e) for e in C.Env)
# Auto picks the sparse layout once the bitmaps would be this many times its id list.
AUTO_RATIO = 4


@functools.lru_cache(maxsize=64)
def worst_case_capacity(
    overrides: D.AxisOverrides | None = None,
    d_max: int = C.D_MAX,
    families: tuple[int, ...] = ALL_ENVS,
) -> int:
    """An upper bound on the distinct product ids one episode can hold.

    Why it is a bound: a turn runs at most b_tool(d) calls (more is a hard fail, whose calls
    are discarded), a call delivers at most max(top_k(d), SMALL_ROWS) product rows (a search
    is cut at top_k; every other tool fills at most SMALL_ROWS rows), an episode has at most
    T_max turns (JOURNEY: one T_max per sub-goal, at most L_int of them), and a finished
    episode never changes. One more entry holds the SUB original."""
    with jax.ensure_compile_time_eval():
        diff = D.difficulty(jnp.arange(d_max + 1), overrides)
        turns = np.asarray(diff.t_max, np.int64)
        if int(C.Env.JOURNEY) in families:
            turns = np.maximum(turns, turns * np.asarray(diff.l_int, np.int64))
        rows = np.maximum(np.asarray(diff.top_k, np.int64), SMALL_ROWS)
        per_episode = turns * np.asarray(diff.b_tool, np.int64) * rows
    return int(per_episode.max()) + 1


def capacity(n_products: int, params: EnvParams) -> int | None:
    """The sparse list's length, or None for the dense layout."""
    mode = params.exposure
    if mode == "dense":
        return None
    bound = worst_case_capacity(params.overrides, params.d_max)
    if mode == "sparse":
        return bound
    if mode == "auto":
        return bound if n_products > AUTO_RATIO * bound else None
    raise ValueError(f"EnvParams.exposure must be 'auto', 'dense' or 'sparse', not {mode!r}")


def init_fields(
    n_products: int, cap: int | None, forced_oos: jax.Array | None = None
) -> dict[str, jax.Array]:
    """The World fields of a fresh episode: nothing seen, ``forced_oos`` (a few ids, -1 or
    out of range ignored) out of stock. Built directly rather than by ``insert`` into an
    empty list: XLA would constant-fold that merge's capacity-long prefix sums for minutes."""
    forced = jnp.zeros(0, I32) if forced_oos is None else jnp.asarray(forced_oos, I32).ravel()
    valid = (forced >= 0) & (forced < n_products)
    if cap is None:
        oos = (
            jnp.zeros(n_products, bool)
            .at[jnp.where(valid, forced, n_products)]
            .set(True, mode="drop")
        )
        return {"seen_ids": jnp.full(0, PAD, I32), "seen": jnp.zeros(n_products, bool), "oos": oos}
    x = jnp.sort(jnp.where(valid, forced, PAD))
    x = jnp.sort(jnp.where(x == jnp.concatenate([jnp.full(1, -1, I32), x[:-1]]), PAD, x))
    k = min(cap, x.shape[0])
    ids = jnp.full(cap, PAD, I32).at[:k].set(x[:k])
    return {"seen_ids": ids, "seen": jnp.zeros(cap, bool), "oos": ids != PAD}


def is_dense(world: World | Overlay) -> bool:
    """Static: the layout is a property of the shapes (of one world or a batch of them)."""
    return world.seen_ids.shape[-1] == 0


class Overlay(NamedTuple):
    """What ``is_oos`` reads of a world: a search query carries it to the devices that
    hold the embedding rows (``tools.search``), instead of the whole world."""

    seen_ids: jax.Array
    oos: jax.Array


def overlay(world: World) -> Overlay:
    return Overlay(world.seen_ids, world.oos)


def lookup(world: World | Overlay, pids: jax.Array) -> tuple[jax.Array, jax.Array]:
    """(slot, hit) of each product id: the index into ``seen`` / ``oos`` and whether the id
    has a slot at all (unknown ids and, sparse, untouched products have none)."""
    pids = jnp.asarray(pids, I32)
    if is_dense(world):
        n = world.oos.shape[0]
        return jnp.clip(pids, 0, n - 1), (pids >= 0) & (pids < n)
    ids = world.seen_ids
    slot = jnp.clip(jnp.searchsorted(ids, pids), 0, ids.shape[0] - 1).astype(I32)
    return slot, (ids[slot] == pids) & (pids >= 0) & (pids != PAD)


def is_seen(world: World, pids: jax.Array) -> jax.Array:
    slot, hit = lookup(world, pids)
    return hit & world.seen[slot]


def is_oos(world: World | Overlay, pids: jax.Array) -> jax.Array:
    """Forced out of stock (a shock or the SUB original), whatever the catalog stock says."""
    slot, hit = lookup(world, pids)
    return hit & world.oos[slot]


def members(world: World) -> tuple[jax.Array, jax.Array]:
    """(ids [M], live [M]): every product with a slot, in ascending id order, so a draw over
    them is the same in both layouts."""
    if is_dense(world):
        n = world.seen.shape[0]
        return jnp.arange(n, dtype=I32), jnp.ones(n, bool)
    return world.seen_ids, world.seen_ids != PAD


def insert(world: World, pids: jax.Array, n_products: int, *, seen: bool, oos: bool) -> World:
    """Adds product ids (any shape; ids outside [0, N) are ignored) and sets the given flags
    on them; flags already set stay set."""
    flat = jnp.asarray(pids, I32).reshape(-1)
    valid = (flat >= 0) & (flat < n_products)
    if is_dense(world):
        idx = jnp.where(valid, flat, n_products)  # out of range: dropped
        out = {}
        if seen:
            out["seen"] = world.seen.at[idx].set(True, mode="drop")
        if oos:
            out["oos"] = world.oos.at[idx].set(True, mode="drop")
        return world.replace(**out)
    old = world.seen_ids
    m = old.shape[0]
    x = jnp.sort(jnp.where(valid, flat, PAD))
    first = x != jnp.concatenate([jnp.full(1, -1, I32), x[:-1]])
    pt = jnp.searchsorted(old, x).astype(I32)  # first slot whose id >= x
    hit = (old[jnp.minimum(pt, m - 1)] == x) & (x != PAD)
    keep = first & ~hit & (x != PAD)
    # Merge: a kept new id lands after the old ids below it and the kept new ids before it;
    # an old id moves up by the kept new ids below it. Past the capacity is dropped, which
    # worst_case_capacity rules out.
    rank = jnp.cumsum(keep.astype(I32)) - keep
    dest_new = jnp.where(keep, pt + rank, m)
    below = jnp.zeros(m + 1, I32).at[jnp.where(keep, pt, m + 1)].add(1, mode="drop")
    dest_old = jnp.arange(m, dtype=I32) + jnp.cumsum(below)[:m]
    hit_slot = jnp.where(hit, pt, m)

    def merged(values: jax.Array, fill, new_value) -> jax.Array:
        out = jnp.full(m, fill, values.dtype).at[dest_old].set(values, mode="drop")
        return out.at[dest_new].set(new_value, mode="drop")

    def flag(values: jax.Array, on: bool) -> jax.Array:
        if on:
            values = values.at[hit_slot].set(True, mode="drop")
        return merged(values, False, jnp.bool_(on))

    return world.replace(
        seen_ids=merged(old, PAD, x), seen=flag(world.seen, seen), oos=flag(world.oos, oos)
    )


def _bitmap(world: World, flags: jax.Array, n_products: int) -> np.ndarray:
    flags = np.asarray(flags)
    ids = np.asarray(world.seen_ids)
    if ids.shape[-1] == 0:
        return flags
    out = np.zeros((*ids.shape[:-1], n_products + 1), bool)
    np.put_along_axis(out, np.where(flags & (ids != PAD), ids, n_products), flags, axis=-1)
    return out[..., :n_products]


def oos_bitmap(world: World, n_products: int) -> np.ndarray:
    """Host-side bool [..., N] of the forced out-of-stock set, for either layout (a batch of
    worlds gives a batch of bitmaps). For references and host retrieval, not the hot path."""
    return _bitmap(world, world.oos, n_products)


def seen_bitmap(world: World, n_products: int) -> np.ndarray:
    """Host-side bool [..., N] of Seen, for either layout."""
    return _bitmap(world, world.seen, n_products)
