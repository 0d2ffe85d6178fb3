"""The BUNDLE oracle plan of SPEC §8.9 as an array policy.

Per slot: catalog_search(filters = {cat: slot}, sort_by = price_asc, in_stock_only,
top_k = the cap) · answer with the cheapest in-stock card of the slot's category per slot.
Calls merge into turns of up to B_tool. The slot list comes from the opening INFORM
(``reply.cats``); the budget need not be asked, since B >= 1.1·Σ min_s. Cards are read
for their category, price and stock_qty, exactly what a card shows.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.types import Action, Observation, empty_action
from ecomjax.world import safe

T = C.Tool
MB = C.MAX_BUNDLE_SLOTS
B = C.MAX_TOOL_CALLS
CAT_FILTER = C.DISC_FILTERS.index(C.Attr.CAT)
BIG = jnp.iinfo(jnp.int32).max


@struct.dataclass
class BundleMemory:
    cats: jax.Array  # int32 [MB], the stated slot categories, -1 pad
    have_cats: jax.Array  # bool
    best: jax.Array  # int32 [MB], cheapest in-stock card found per slot, -1 none
    call_slot: jax.Array  # int32 [B], bundle slot of each call of the previous turn


def init_memory() -> BundleMemory:
    return BundleMemory(
        cats=jnp.full(MB, -1, jnp.int32),
        have_cats=jnp.bool_(False),
        best=jnp.full(MB, -1, jnp.int32),
        call_slot=jnp.full(B, -1, jnp.int32),
    )


def _read_results(mem: BundleMemory, obs: Observation, catalog: Catalog) -> BundleMemory:
    said = (obs.reply.cats >= 0).any()
    cats = jnp.where(said, obs.reply.cats, mem.cats)
    res = obs.results
    ids = res.search.ids  # [B, R]
    is_search = (res.tool == T.CATALOG_SEARCH) & (res.error == 0) & (mem.call_slot >= 0)
    want_cat = cats[jnp.maximum(mem.call_slot, 0)]  # [B]
    card_cat = catalog.category[safe(ids)].astype(jnp.int32)
    ok = is_search[:, None] & (ids >= 0) & (res.search.stock > 0) & (card_cat == want_cat[:, None])
    price = jnp.where(ok, catalog.price_cents[safe(ids)], BIG)
    # Cheapest card per call, ties to the lower catalog index: two minima, not a sort of
    # every [calls, R] row (the sort was most of this agent's cost).
    cheapest = ok & (price == price.min(-1, keepdims=True))
    call_best = jnp.where(ok.any(-1), jnp.where(cheapest, ids, BIG).min(-1), -1)
    for_slot = (mem.call_slot[:, None] == jnp.arange(MB)[None, :]) & (call_best >= 0)[:, None]
    found = for_slot.any(0)
    best = jnp.where(found, call_best[jnp.argmax(for_slot, 0)], mem.best)
    return mem.replace(cats=cats, have_cats=mem.have_cats | said, best=best)


def act(
    mem: BundleMemory, obs: Observation, catalog: Catalog, sub: jax.Array | int = 0
) -> tuple[BundleMemory, Action]:
    del sub  # the slot list travels in reply.cats
    mem = _read_results(mem, obs, catalog)
    live = mem.cats >= 0
    want = live & (mem.best < 0)
    rank = jnp.cumsum(want) - 1
    go = want & (rank < obs.tool_budget)
    # Call k searches the slot of rank k.
    hit = go[None, :] & (rank[None, :] == jnp.arange(B)[:, None])  # [B, MB]
    call_slot = jnp.where(hit.any(-1), jnp.argmax(hit, -1), -1).astype(jnp.int32)
    used = call_slot >= 0
    cat = mem.cats[jnp.maximum(call_slot, 0)]
    action = empty_action(catalog.embed_dim)
    ready = mem.have_cats & live.any() & ~want.any()
    answer = action.answer.replace(
        present=ready,
        done=jnp.bool_(True),
        main=action.answer.main.replace(
            env=jnp.int32(C.Env.BUNDLE),
            rec=jnp.full(C.MAX_ANSWER_IDS, -1, jnp.int32)
            .at[:MB]
            .set(jnp.where(live, mem.best, -1)),
        ),
    )
    action = action.replace(
        has_message=jnp.bool_(True),
        tool=jnp.where(used, T.CATALOG_SEARCH, T.NONE).astype(jnp.int32),
        qty=jnp.where(used, C.MAX_SEARCH_RESULTS, 1).astype(jnp.int32),
        enum_a=jnp.where(used, C.SortBy.PRICE_ASC, 0).astype(jnp.int32),
        flag=used,
        has_query=used,
        query_emb=jnp.where(used[:, None], catalog.cat_emb[jnp.maximum(cat, 0)], 0.0),
        filter_disc=action.filter_disc.at[:, CAT_FILTER].set(jnp.where(used, cat, -1)),
        answer=answer,
    )
    return mem.replace(call_slot=call_slot), action
