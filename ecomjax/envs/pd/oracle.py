"""The PD oracle plan of SPEC §8.9 as an array policy that reads only observations.

Plan: ask_user(every PD slot) · catalog_search(query = display name, filters = C,
sort_by = π, in_stock_only, top_k = the cap) · answer with the first k cards that satisfy
C, re-sorted by π. Cards are re-verified against C and against shock events; if fewer
than k verified cards remain while the search reported more matches, it searches again.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import constraints_from_slots, feasible, to_filters
from ecomjax.envs.pd import generator
from ecomjax.envs.pd.verifier import priority_key
from ecomjax.family import slot_mask
from ecomjax.slot_memory import SlotMemory, empty_slots, listen
from ecomjax.types import Action, Observation, empty_action

T = C.Tool
S = C.Slot
R = C.MAX_SEARCH_RESULTS
NEG = -jnp.inf


@struct.dataclass
class Cards:
    """The latest search's cards, minus products since reported out of stock."""

    ids: jax.Array  # int32 [R], -1 = none or dropped
    stock: jax.Array  # int32 [R], stock_qty on the card
    score: jax.Array  # float32 [R]
    total: jax.Array  # int32, total_matches
    dropped: jax.Array  # int32, cards dropped by shock events since
    have: jax.Array  # bool


@struct.dataclass
class PDMemory:
    slots: SlotMemory
    cards: Cards
    asked: jax.Array  # bool
    pending_search: jax.Array  # bool: the last turn issued the search whose cards come next


def empty_cards() -> Cards:
    return Cards(
        ids=jnp.full(R, -1, jnp.int32),
        stock=jnp.zeros(R, jnp.int32),
        score=jnp.zeros(R, jnp.float32),
        total=jnp.int32(0),
        dropped=jnp.int32(0),
        have=jnp.bool_(False),
    )


def init_memory() -> PDMemory:
    return PDMemory(
        slots=empty_slots(),
        cards=empty_cards(),
        asked=jnp.bool_(False),
        pending_search=jnp.bool_(False),
    )


def read_cards(cards: Cards, obs: Observation, expect: jax.Array) -> Cards:
    """Stores the first search slot's cards when a search was issued last turn, then drops
    every card the shock events name."""
    res = obs.results
    is_search = (res.tool == T.CATALOG_SEARCH) & (res.error == 0)
    got = expect & is_search.any()
    i = jnp.argmax(is_search)
    s = res.search
    cards = jax.tree_util.tree_map(
        lambda new, old: jnp.where(got, new, old),
        Cards(s.ids[i], s.stock[i], s.score[i], s.total[i], jnp.int32(0), jnp.bool_(True)),
        cards,
    )
    return drop_shocked(cards, obs.events)


def drop_shocked(cards: Cards, events: jax.Array) -> Cards:
    """The cards without the products a turn's shock events name."""
    hit = (cards.ids[:, None] == events[None, :]).any(-1) & (cards.ids >= 0)
    return cards.replace(ids=jnp.where(hit, -1, cards.ids), dropped=cards.dropped + hit.sum())


def valid_cards(catalog: Catalog, cards: Cards, slots: SlotMemory) -> jax.Array:
    """bool [R]: cards that satisfy every known constraint and show stock. The cards are
    one search's results, which never repeat a product (SPEC §5.1, tests/test_search.py),
    so no duplicate check is needed (a pairwise one cost a third of this plan's turn)."""
    attr, op, val = constraints_from_slots(slots.known, slots.value, slots.op)
    return (cards.ids >= 0) & (cards.stock > 0) & feasible(catalog, cards.ids, attr, op, val)


def enough(cards: Cards, valid: jax.Array, k: jax.Array) -> jax.Array:
    """k verified cards, or every remaining match."""
    n = valid.sum()
    return cards.have & ((n >= k) | (n >= cards.total - cards.dropped))


def top_by(ids: jax.Array, valid: jax.Array, key: jax.Array, k: jax.Array) -> jax.Array:
    """int32 [MAX_ANSWER_IDS]: the k valid ids of highest key (stable), -1 padded.

    MAX_K_REC first-maximum picks (``argmax`` returns the lowest index among ties, so the
    order is the stable sort's), instead of a stable sort of all R cards, which XLA:CPU
    runs as a comparator loop."""
    left = jnp.where(valid, key.astype(jnp.float32), -jnp.inf)
    pos = jnp.arange(left.shape[0])
    picks = []
    for _ in range(C.MAX_K_REC):
        j = jnp.argmax(left)
        picks.append(jnp.where(left[j] > -jnp.inf, ids[j], -1))
        left = jnp.where(pos == j, -jnp.inf, left)
    best = jnp.stack(picks)
    live = (best >= 0) & (jnp.arange(C.MAX_K_REC) < k)
    out = jnp.full(C.MAX_ANSWER_IDS, -1, jnp.int32)
    return out.at[: C.MAX_K_REC].set(jnp.where(live, best, -1))


def search_call(
    action: Action, i: int, catalog: Catalog, slots: SlotMemory, sort: jax.Array, product=-1
) -> Action:
    """Call slot i = catalog_search(query = display name, filters = the known constraints,
    sort_by, in_stock_only, top_k = 200 (clamped to top_k(d) by the tool))."""
    attr, op, val = constraints_from_slots(slots.known, slots.value, slots.op)
    fd, fn = to_filters(attr, op, val)
    cat = jnp.clip(slots.value[S.CATEGORY].astype(jnp.int32), 0, catalog.n_categories - 1)
    return action.replace(
        tool=action.tool.at[i].set(T.CATALOG_SEARCH),
        product=action.product.at[i].set(product),
        qty=action.qty.at[i].set(R),
        enum_a=action.enum_a.at[i].set(sort),
        flag=action.flag.at[i].set(True),
        has_query=action.has_query.at[i].set(True),
        query_emb=action.query_emb.at[i].set(catalog.cat_emb[cat].astype(jnp.float32)),
        filter_disc=action.filter_disc.at[i].set(fd),
        filter_num=action.filter_num.at[i].set(fn),
    )


def ask_call(action: Action, i: int, slots: tuple[C.Slot, ...]) -> Action:
    """Call slot i = ask_user for every one of ``slots`` (SPEC §8.9: the family's knowable
    slots, all in the first ask)."""
    return action.replace(
        tool=action.tool.at[i].set(T.ASK_USER),
        enum_b=action.enum_b.at[i].set(-1),
        slots=action.slots.at[i].set(jnp.asarray(slot_mask(slots))),
    )


def with_answer(action: Action, env: int, rec: jax.Array, present: jax.Array) -> Action:
    main = action.answer.main.replace(env=jnp.int32(env), rec=rec)
    return action.replace(
        answer=action.answer.replace(present=present, done=jnp.bool_(True), main=main)
    )


def pick(cond: jax.Array, a, b):
    return jax.tree_util.tree_map(lambda x, y: jnp.where(cond, x, y), a, b)


def act(
    mem: PDMemory, obs: Observation, catalog: Catalog, sub: jax.Array | int = 0
) -> tuple[PDMemory, Action]:
    sub = jnp.asarray(sub, jnp.int32)
    slots = listen(mem.slots, obs, sub)
    cards = read_cards(mem.cards, obs, mem.pending_search)
    k = slots.value[S.NUM_RESULTS].astype(jnp.int32)
    prio = jnp.clip(slots.value[S.PRIORITY].astype(jnp.int32), 0, 2)
    valid = valid_cards(catalog, cards, slots)
    last_turn = obs.turns_left <= 1
    answer_now = mem.asked & (enough(cards, valid, k) | (cards.have & last_turn))
    search_now = mem.asked & ~answer_now

    base = empty_action(catalog.embed_dim).replace(has_message=jnp.bool_(True))
    ask = ask_call(base, 0, generator.SLOTS)
    search = search_call(base, 0, catalog, slots, prio + 1)
    rec = top_by(cards.ids, valid, priority_key(catalog, cards.ids, prio), k)
    answer = with_answer(base, C.Env.PD, rec, jnp.bool_(True))
    action = pick(answer_now, answer, pick(search_now, search, ask))
    mem = PDMemory(slots=slots, cards=cards, asked=jnp.bool_(True), pending_search=search_now)
    return mem, action
