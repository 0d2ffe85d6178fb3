"""The RETURN oracle plan of SPEC §8.9 as an array policy.

It reads only observations and the customer's acts: the line product comes as an
identifying description (scoped to the order history), which it resolves against the
order_list rows it retrieved. Plan: ask_user(every RETURN slot) · order_list(365) ·
catalog_search(filters = C_rep, in_stock_only) if a replacement is wanted ·
return_exchange or return_initiate in the same turn as the answer. If the tool refuses an
ineligible line, no return exists, which is what the verifier wants.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import constraints_from_slots, feasible, to_filters
from ecomjax.envs.returns import generator
from ecomjax.family import slot_mask
from ecomjax.order_history import match_line
from ecomjax.slot_memory import SlotMemory, empty_slots, listen
from ecomjax.types import Action, Observation, empty_action

T = C.Tool
S = C.Slot
I32 = jnp.int32
SEARCH_TOP_K = 200  # the tool clamps it to top_k(d)
HISTORY_DAYS = 365
ASK_SLOTS = slot_mask(generator.SLOTS)


@struct.dataclass
class ReturnMemory:
    slots: SlotMemory  # values heard for this sub-goal; ref_*: the line product's description
    asked: jax.Array  # bool
    listed: jax.Array  # bool, order_list came back
    order: jax.Array  # int32, the target order, -1 unknown
    line: jax.Array  # int32
    line_pid: jax.Array  # int32
    searches: jax.Array  # int32, replacement searches made
    cand: jax.Array  # int32, replacement product, -1 none yet


def init_memory() -> ReturnMemory:
    return ReturnMemory(
        slots=empty_slots(),
        asked=jnp.bool_(False),
        listed=jnp.bool_(False),
        order=I32(-1),
        line=I32(-1),
        line_pid=I32(-1),
        searches=I32(0),
        cand=I32(-1),
    )


def _constraints(mem: ReturnMemory):
    return constraints_from_slots(mem.slots.known, mem.slots.value, mem.slots.op)


def _read_results(mem: ReturnMemory, obs: Observation, catalog: Catalog) -> ReturnMemory:
    res = obs.results
    listed = ((res.tool == T.ORDER_LIST) & (res.error == 0)).any()
    found, order, line, pid = match_line(catalog, obs, mem.slots.ref_form, mem.slots.ref_key)
    mem = mem.replace(
        listed=mem.listed | listed,
        order=jnp.where(found, order, mem.order),
        line=jnp.where(found, line, mem.line),
        line_pid=jnp.where(found, pid, mem.line_pid),
    )
    # Replacement: the first in-stock search card (distractors ignore filters) that
    # satisfies C_rep and is not the returned product itself.
    attr, op, val = _constraints(mem)
    # The plan issues one search a turn: read that slot's cards only (checking every
    # slot's 200 cards against C_rep was most of this plan's cost).
    is_search = (res.tool == T.CATALOG_SEARCH) & (res.error == 0)
    i = jnp.argmax(is_search)
    ids = res.search.ids[i]
    ok = (
        is_search[i]
        & (ids >= 0)
        & (res.search.stock[i] > 0)
        & (ids != mem.line_pid)
        & feasible(catalog, ids, attr, op, val)
    )
    cand = jnp.where(ok.any(), ids[jnp.argmax(ok)], -1)
    return mem.replace(cand=jnp.where(mem.cand >= 0, mem.cand, cand))


def act(
    mem: ReturnMemory, obs: Observation, catalog: Catalog, sub: jax.Array | int = 0
) -> tuple[ReturnMemory, Action]:
    sub = jnp.asarray(sub, I32)
    mem = mem.replace(slots=listen(mem.slots, obs, sub))
    mem = _read_results(mem, obs, catalog)
    budget = obs.tool_budget
    slots = mem.slots
    want = slots.known[S.REPLACEMENT] & (slots.value[S.REPLACEMENT] > 0.5)
    need_search = want & (mem.cand < 0) & (mem.searches < 2)
    stage = jnp.select([~mem.asked, ~mem.listed, need_search], [0, 1, 2], 3)

    action = empty_action(catalog.embed_dim)
    b = C.MAX_TOOL_CALLS
    first = jnp.arange(b) == 0
    second = jnp.arange(b) == 1
    # Stage 0: ask_user (+ order_list when the budget allows); 1: order_list; 2: search;
    # 3: the return (exchange when a replacement is wanted and found) and the answer.
    exchange = want & (mem.cand >= 0)
    final_tool = jnp.where(exchange, T.RETURN_EXCHANGE, T.RETURN_INITIATE)
    tool = jnp.select(
        [stage == 0, stage == 1, stage == 2, stage == 3],
        [
            jnp.where(first, T.ASK_USER, jnp.where(second & (budget >= 2), T.ORDER_LIST, T.NONE)),
            jnp.where(first, T.ORDER_LIST, T.NONE),
            jnp.where(first, T.CATALOG_SEARCH, T.NONE),
            jnp.where(first & (mem.order >= 0), final_tool, T.NONE),
        ],
        jnp.full(b, T.NONE),
    ).astype(I32)
    list_slot = jnp.where(stage == 0, 1, 0)
    is_list = (tool == T.ORDER_LIST) & (jnp.arange(b) == list_slot)
    is_search = tool == T.CATALOG_SEARCH
    is_ret = (tool == T.RETURN_EXCHANGE) | (tool == T.RETURN_INITIATE)

    attr, op, val = _constraints(mem)
    fd, fn = to_filters(attr, op, val)
    cat = jnp.clip(slots.value[S.CATEGORY].astype(I32), 0, catalog.n_categories - 1)
    qemb = catalog.cat_emb[cat].astype(jnp.float32)
    method = jnp.where(slots.known[S.RETURN_METHOD], slots.value[S.RETURN_METHOD], 0).astype(I32)
    reason = slots.value[S.REASON].astype(I32)

    ask_slots = jnp.asarray(ASK_SLOTS)
    action = action.replace(
        has_message=jnp.bool_(True),
        tool=tool,
        qty=jnp.where(is_list, HISTORY_DAYS, jnp.where(is_search, SEARCH_TOP_K, 1)).astype(I32),
        order=jnp.where(is_ret, mem.order, -1).astype(I32),
        line=jnp.where(is_ret, mem.line, -1).astype(I32),
        product=jnp.where(is_ret & exchange, mem.cand, -1).astype(I32),
        enum_a=jnp.where(is_ret, reason, 0).astype(I32),
        enum_b=jnp.where(is_ret, method, -1).astype(I32),
        flag=is_search,
        has_query=is_search,
        query_emb=jnp.where(is_search[:, None], qemb[None, :], action.query_emb),
        filter_disc=jnp.where(is_search[:, None], fd[None, :], action.filter_disc),
        filter_num=jnp.where(is_search[:, None], fn[None, :], action.filter_num),
        slots=jnp.where((tool == T.ASK_USER)[:, None], ask_slots[None, :], False),
    )
    answer = action.answer.replace(
        present=stage == 3,
        done=jnp.bool_(True),
        main=action.answer.main.replace(
            env=jnp.int32(C.Env.RETURN), order=mem.order, line=mem.line
        ),
    )
    action = action.replace(answer=answer)
    mem = mem.replace(
        asked=mem.asked | (stage == 0),
        searches=mem.searches + (stage == 2).astype(I32),
    )
    return mem, action
