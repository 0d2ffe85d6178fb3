"""The random agent of SPEC §13.6: schema-valid but aimless, it bounds chance success.

Each turn it sends a message. With probability 0.5 it makes 1..B_tool random calls, with
product ids drawn from what it has seen or made up. With probability 1/T_max it answers.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.agents.base import Agent
from ecomjax.catalog.sharded_emb import emb_rows
from ecomjax.compact import compact
from ecomjax.types import AnswerFields, empty_action

T = C.Tool
B = C.MAX_TOOL_CALLS
SEEN = 64
UNKNOWN_ID = -2  # an id string the catalog does not know


@struct.dataclass
class RandomMemory:
    seen: jax.Array  # int32 [SEEN], ring buffer of product ids from results
    n_seen: jax.Array  # int32


def _init(key, obs, catalog):
    del key, obs, catalog
    return RandomMemory(seen=jnp.full(SEEN, -1, jnp.int32), n_seen=jnp.int32(0))


def _remember(mem: RandomMemory, obs) -> RandomMemory:
    res = obs.results
    rows = jnp.arange(res.ids.shape[1])[None, :] < res.count[:, None]
    product_rows = res.tool != T.CATALOG_LIST_CATEGORIES
    small = jnp.where(rows & product_rows[:, None] & (res.ids >= 0), res.ids, -1).reshape(-1)
    ids = jnp.concatenate([small, res.search.ids.reshape(-1)])
    keep = ids >= 0
    new, n_new = compact(ids, keep, SEEN), jnp.minimum(keep.sum(), SEEN)
    pos = (mem.n_seen + jnp.arange(SEEN)) % SEEN
    seen = mem.seen.at[jnp.where(jnp.arange(SEEN) < n_new, pos, SEEN)].set(new, mode="drop")
    return mem.replace(seen=seen, n_seen=mem.n_seen + n_new)


def _random_fields(key, mem: RandomMemory, env, lead: tuple[int, ...]) -> AnswerFields:
    """A schema-valid answer object: ids from Seen, uniform enums, numbers in [0, 100]."""
    ks = jax.random.split(key, 6)
    n_known = jnp.minimum(mem.n_seen, SEEN)
    n_ids = jax.random.randint(ks[0], lead, 0, C.MAX_K_REC + 1)
    picks = mem.seen[
        jax.random.randint(ks[1], (*lead, C.MAX_ANSWER_IDS), 0, jnp.maximum(n_known, 1))
    ]
    live = (jnp.arange(C.MAX_ANSWER_IDS) < n_ids[..., None]) & (n_known > 0)
    return AnswerFields(
        env=jnp.broadcast_to(jnp.asarray(env, jnp.int32), lead),
        rec=jnp.where(live, picks, -1),
        order=jax.random.randint(ks[2], lead, 0, C.MAX_ORDERS),
        line=jax.random.randint(ks[3], lead, 0, C.MAX_ORDER_LINES),
        status=jax.random.randint(ks[4], lead, 0, 5),
        policy_value=jax.random.uniform(ks[5], lead, maxval=100.0),
        policy_ok=jnp.ones(lead, bool),
    )


def _act(key, mem: RandomMemory, obs, catalog):
    mem = _remember(mem, obs)
    ks = jax.random.split(key, 20)
    n_known = jnp.minimum(mem.n_seen, SEEN)
    pick_seen = mem.seen[jax.random.randint(ks[0], (B,), 0, jnp.maximum(n_known, 1))]
    use_seen = jax.random.bernoulli(ks[1], 0.5, (B,)) & (n_known > 0)
    product = jnp.where(use_seen, pick_seen, UNKNOWN_ID)
    tool = jax.random.randint(ks[2], (B,), 1, C.N_TOOLS)
    calls = jnp.where(
        jax.random.bernoulli(ks[3]), jax.random.randint(ks[4], (), 1, obs.tool_budget + 1), 0
    )
    tool = jnp.where(jnp.arange(B) < calls, tool, T.NONE)
    qty_hi = jnp.select(
        [
            tool == T.CATALOG_SEARCH,
            tool == T.ORDER_LIST,
            tool == T.POLICY_SEARCH,
            tool == T.CATALOG_RERANK,
            tool == T.CART_SET_QUANTITY,
        ],
        [500, 365, 10, 100, 99],
        99,
    )
    qty_lo = jnp.where(tool == T.CART_SET_QUANTITY, 0, 1)
    u = jax.random.uniform(ks[5], (B,))
    qty = qty_lo + jnp.floor(u * (qty_hi - qty_lo + 1)).astype(jnp.int32)
    # Small quantities are far more common in real use: half the calls ask for 1..4.
    qty = jnp.where(jax.random.bernoulli(ks[6], 0.5, (B,)), 1 + (qty % 4), qty)
    qty = jnp.clip(qty, qty_lo, qty_hi)
    n_slots = jax.random.randint(ks[7], (B,), 1, 4)
    slot_prio = jax.random.uniform(ks[8], (B, C.N_SLOTS))
    slots = jnp.argsort(jnp.argsort(slot_prio, -1), -1) < n_slots[:, None]
    query = emb_rows(catalog, jax.random.randint(ks[9], (B,), 0, catalog.n_products))
    action = empty_action(catalog.embed_dim)
    answer_now = jax.random.bernoulli(ks[10], 1.0 / jnp.maximum(obs.turn + obs.turns_left, 1))
    env = jnp.where(obs.env >= 0, obs.env, C.Env.CART).astype(jnp.int32)
    main = _random_fields(ks[18], mem, env, ())
    # JOURNEY: each entry a random non-JOURNEY answer object or null.
    sub_env = jax.random.randint(ks[19], (C.MAX_SUBGOALS,), -1, C.Env.JOURNEY)
    sub = _random_fields(jax.random.fold_in(ks[19], 1), mem, sub_env, (C.MAX_SUBGOALS,))
    answer = action.answer.replace(
        present=answer_now,
        done=jax.random.bernoulli(ks[11], 0.5),
        main=main,
        sub=jax.tree_util.tree_map(
            lambda x, e: jnp.where(env == C.Env.JOURNEY, x, e), sub, action.answer.sub
        ),
    )
    action = action.replace(
        has_message=jnp.bool_(True),
        tool=tool,
        product=product,
        variant=jnp.where(
            jax.random.bernoulli(ks[12], 0.5, (B,)),
            -1,
            jax.random.randint(ks[13], (B,), 0, C.MAX_VARIANTS),
        ),
        line=jax.random.randint(ks[14], (B,), 1, 6),
        order=jax.random.randint(ks[15], (B,), 0, C.MAX_ORDERS),
        qty=qty,
        # sort_by has 4 values; reason_code has 8.
        enum_a=jax.random.randint(ks[16], (B,), 0, jnp.where(tool == T.CATALOG_SEARCH, 4, 8)),
        enum_b=jnp.where(tool == T.ASK_USER, -1, jax.random.randint(ks[17], (B,), 0, 3)),
        has_query=jnp.ones(B, bool),
        query_emb=query,
        slots=slots,
        answer=answer,
    )
    return mem, action


random_agent = Agent("random", _init, _act)
