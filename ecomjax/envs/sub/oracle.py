"""The SUB oracle plan of SPEC §8.9 as an array policy that reads only observations.

Plan: ask_user(every SUB slot) · find the original p0 · catalog_search(similar_to = p0,
filters = C, in_stock_only, top_k = the cap) · answer with the best k valid cards by
score. With B_tool >= 2 the find rides along with the ask. Cards are re-verified against C
and the shock events; fewer than k left while more matches exist means a new search.

Finding p0. The description names p0 as "{Brand} {Noun}" (or a longer form), so the brand
is part of what the customer said: ``brand_of`` reads it back from the description key, as
an LLM reads the brand name out of the text. p0 itself is found only among the search's
cards, by its description. The search's text query stays the category's display name
(the only query the text bridge renders, and the one that follows a custom embedder), so
the narrowing comes from filters: {cat, brand} plus every constraint the customer has
stated. p0 satisfies those by construction (§8.2: C is drawn so that both p0 and the
witness satisfy it), and at large N the same-brand products of a category are far more
than top_k(d), so the brand alone is not enough. When the turn allows another call, the
find is repeated with {cat, brand} only, as a fallback. A find that misses is repeated
the next turn with whatever the customer has said since (the ask's CLARIFY).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import constraints_from_slots, to_filters
from ecomjax.envs.pd.oracle import (
    Cards,
    ask_call,
    empty_cards,
    enough,
    pick,
    read_cards,
    search_call,
    top_by,
    valid_cards,
    with_answer,
)
from ecomjax.envs.sub import generator
from ecomjax.slot_memory import SlotMemory, empty_slots, listen
from ecomjax.types import Action, Observation, empty_action

T = C.Tool
S = C.Slot
R = C.MAX_SEARCH_RESULTS
SB = C.SortBy
# The find searches of one turn, in call order: (filter on the stated constraints, sort_by).
# The stated constraints find p0 alone (210 / 210 at N = 100k, 63 / 63 at 400k, measured);
# {cat, brand} alone is the fallback in case a constraint the customer stated excludes it.
# More sort orders would find it a turn earlier now and then, for a full-catalog scan each.
FIND_VARIANTS: tuple[tuple[bool, int], ...] = (
    (True, SB.RELEVANCE),
    (False, SB.RELEVANCE),
)


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


def find_filters(catalog: Catalog, slots: SlotMemory) -> tuple[jax.Array, jax.Array]:
    """(filter_disc [2, N_DISC_FILTERS], filter_num [2, N_NUM_FILTERS]) of a find: row 0 is
    {cat, brand} plus the stated constraints, row 1 {cat, brand} only. Stock is ignored:
    p0 is out of stock."""
    cat = jnp.clip(slots.value[S.CATEGORY].astype(jnp.int32), 0, catalog.n_categories - 1)
    brand = brand_of(catalog, slots.ref_form, slots.ref_key)
    fd, fn = to_filters(*constraints_from_slots(slots.known, slots.value, slots.op))
    only = jnp.full_like(fd, -1)
    fd = jnp.stack([fd, only]).at[:, 0].set(cat)
    fd = fd.at[:, 1].set(jnp.where(brand >= 0, brand, fd[:, 1]))
    return fd, jnp.stack([fn, jnp.full_like(fn, jnp.nan)])


def find_calls(
    action: Action, first: int, budget: jax.Array, catalog: Catalog, slots: SlotMemory
) -> Action:
    """Call slots first, first + 1, ... (as many as the turn's budget allows) = the
    FIND_VARIANTS in order: catalog_search(query = the category's display name, filters,
    sort_by, top_k = the cap)."""
    n = len(FIND_VARIANTS)
    row = jnp.array([0 if stated else 1 for stated, _ in FIND_VARIANTS], jnp.int32)
    sort = jnp.array([int(s) for _, s in FIND_VARIANTS], jnp.int32)
    fd, fn = find_filters(catalog, slots)
    v = jnp.arange(C.MAX_TOOL_CALLS) - first  # the variant of each call slot
    use = (v >= 0) & (v < jnp.minimum(budget - first, n))
    v = jnp.clip(v, 0, n - 1)
    wide = use[:, None]
    qemb = catalog.cat_emb[fd[0, 0]].astype(jnp.float32)
    return action.replace(
        tool=jnp.where(use, T.CATALOG_SEARCH, action.tool),
        product=jnp.where(use, -1, action.product),
        qty=jnp.where(use, R, action.qty),
        enum_a=jnp.where(use, sort[v], action.enum_a),
        flag=jnp.where(use, False, action.flag),
        has_query=jnp.where(use, True, action.has_query),
        query_emb=jnp.where(wide, qemb[None, :], action.query_emb),
        filter_disc=jnp.where(wide, fd[row[v]], action.filter_disc),
        filter_num=jnp.where(wide, fn[row[v]], action.filter_num),
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
    ask = ask_call(base, 0, generator.SLOTS)
    budget = obs.tool_budget
    ask = pick(find_now, find_calls(ask, 1, budget, catalog, slots), ask)
    find = find_calls(base, 0, budget, catalog, slots)
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
