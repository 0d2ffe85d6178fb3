"""The SUB oracle plan of SPEC §8.9 as an array policy that reads only observations.

Plan: ask_user(every SUB slot) · catalog_search(filters = {cat, brand}) to find the
original p0 by its identifying description · catalog_search(similar_to = p0, filters = C,
in_stock_only, top_k = the cap) · answer with the best k valid cards by score. With
B_tool >= 2 the find search rides along with the ask. Cards are re-verified against C and
the shock events; fewer than k left while more matches exist means a new search.

The description names p0 as "{Brand} {Noun}" (or a longer form), so the brand is part of
what the customer said: ``brand_of`` reads it back from the description key, as an LLM
reads the brand name out of the text. p0 itself is found only among the search's cards.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.envs.pd.oracle import (
    Cards,
    SlotMemory,
    ask_call,
    empty_cards,
    empty_slots,
    enough,
    listen,
    pick,
    read_cards,
    search_call,
    top_by,
    valid_cards,
    with_answer,
)
from ecomjax.types import Action, Observation, empty_action

T = C.Tool
S = C.Slot
R = C.MAX_SEARCH_RESULTS


@struct.dataclass
class SubMemory:
    slots: SlotMemory
    cards: Cards
    asked: jax.Array  # bool
    p0: jax.Array  # int32, the original once found among cards (-1 before)
    finding: jax.Array  # bool: the last turn issued the find search
    pending_search: jax.Array  # bool: the last turn issued the similar_to search


def init_memory() -> SubMemory:
    return SubMemory(
        slots=empty_slots(),
        cards=empty_cards(),
        asked=jnp.bool_(False),
        p0=jnp.int32(-1),
        finding=jnp.bool_(False),
        pending_search=jnp.bool_(False),
    )


def desc_key_of(catalog: Catalog, pids: jax.Array, form: jax.Array) -> jax.Array:
    """The description key of each product in the given DescForm."""
    p = jnp.clip(pids, 0, catalog.n_products - 1)
    return catalog.desc_key[p, jnp.clip(form - 1, 0, 2)]


def brand_of(catalog: Catalog, form: jax.Array, key: jax.Array) -> jax.Array:
    """The brand a description names (every product with that description shares it)."""
    match = catalog.desc_key[:, jnp.clip(form - 1, 0, 2)] == key
    return jnp.where(match.any(), catalog.brand[jnp.argmax(match)].astype(jnp.int32), -1)


def find_p0(obs: Observation, catalog: Catalog, slots: SlotMemory) -> jax.Array:
    """The card whose description matches the stated one, in any search slot (-1 if none)."""
    res = obs.results
    ids = jnp.where(
        ((res.tool == T.CATALOG_SEARCH) & (res.error == 0))[:, None], res.search.ids, -1
    ).reshape(-1)
    hit = (desc_key_of(catalog, ids, slots.ref_form) == slots.ref_key) & (ids >= 0)
    hit &= slots.ref_form > 0
    return jnp.where(hit.any(), ids[jnp.argmax(hit)], -1)


def find_call(action: Action, i: jax.Array, catalog: Catalog, slots: SlotMemory) -> Action:
    """catalog_search(filters = {cat, brand}), stock ignored: p0 is out of stock."""
    cat = jnp.clip(slots.value[S.CATEGORY].astype(jnp.int32), 0, catalog.n_categories - 1)
    fd = jnp.full(C.N_DISC_FILTERS, -1, jnp.int32).at[0].set(cat)
    fd = fd.at[1].set(brand_of(catalog, slots.ref_form, slots.ref_key))
    return action.replace(
        tool=action.tool.at[i].set(T.CATALOG_SEARCH),
        qty=action.qty.at[i].set(R),
        enum_a=action.enum_a.at[i].set(C.SortBy.RELEVANCE),
        flag=action.flag.at[i].set(False),
        has_query=action.has_query.at[i].set(True),
        query_emb=action.query_emb.at[i].set(catalog.cat_emb[cat].astype(jnp.float32)),
        filter_disc=action.filter_disc.at[i].set(fd),
    )


def act(
    mem: SubMemory, obs: Observation, catalog: Catalog, sub: jax.Array | int = 0
) -> tuple[SubMemory, Action]:
    sub = jnp.asarray(sub, jnp.int32)
    slots = listen(mem.slots, obs, sub)
    found = find_p0(obs, catalog, slots)
    p0 = jnp.where((mem.p0 < 0) & mem.finding, found, mem.p0)
    cards = read_cards(mem.cards, obs, mem.pending_search)
    cards = cards.replace(ids=jnp.where(cards.ids == p0, -1, cards.ids))
    k = slots.value[S.NUM_RESULTS].astype(jnp.int32)
    valid = valid_cards(catalog, cards, slots)
    last_turn = obs.turns_left <= 1
    answer_now = mem.asked & (p0 >= 0) & (enough(cards, valid, k) | (cards.have & last_turn))
    similar_now = mem.asked & (p0 >= 0) & ~answer_now
    find_now = (p0 < 0) & (mem.asked | (obs.tool_budget >= 2))

    base = empty_action(catalog.embed_dim).replace(has_message=jnp.bool_(True))
    ask = ask_call(base, 0, C.Env.SUB)
    ask = pick(find_now, find_call(ask, 1, catalog, slots), ask)
    find = find_call(base, 0, catalog, slots)
    similar = search_call(base, 0, catalog, slots, jnp.int32(C.SortBy.RELEVANCE), p0)
    # Cards of a similar_to search are already in score order; ``top_by`` keeps it stable.
    rec = top_by(cards.ids, valid, cards.score, k)
    answer = with_answer(base, C.Env.SUB, rec, jnp.bool_(True))
    action = pick(
        answer_now,
        answer,
        pick(similar_now, similar, pick(mem.asked, find, ask)),
    )
    mem = SubMemory(
        slots=slots,
        cards=cards,
        asked=jnp.bool_(True),
        p0=p0,
        finding=find_now,
        pending_search=similar_now,
    )
    return mem, action
