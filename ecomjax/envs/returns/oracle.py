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
from ecomjax.customer import APPLICABLE
from ecomjax.types import Action, Observation, empty_action
from ecomjax.world import safe

T = C.Tool
S = C.Slot
I32 = jnp.int32
SEARCH_TOP_K = 200  # the tool clamps it to top_k(d)
HISTORY_DAYS = 365
ASK_SLOTS = APPLICABLE[C.Env.RETURN]


@struct.dataclass
class ReturnMemory:
    stated: jax.Array  # bool [N_SLOTS], values heard for this sub-goal
    value: jax.Array  # float32 [N_SLOTS]
    op: jax.Array  # int32 [N_SLOTS]
    ref_form: jax.Array  # int32, the line product's description
    ref_key: jax.Array  # int32
    asked: jax.Array  # bool
    listed: jax.Array  # bool, order_list came back
    order: jax.Array  # int32, the target order, -1 unknown
    line: jax.Array  # int32
    line_pid: jax.Array  # int32
    searches: jax.Array  # int32, replacement searches made
    cand: jax.Array  # int32, replacement product, -1 none yet


def init_memory() -> ReturnMemory:
    return ReturnMemory(
        stated=jnp.zeros(C.N_SLOTS, bool),
        value=jnp.zeros(C.N_SLOTS, jnp.float32),
        op=jnp.zeros(C.N_SLOTS, I32),
        ref_form=I32(0),
        ref_key=I32(-1),
        asked=jnp.bool_(False),
        listed=jnp.bool_(False),
        order=I32(-1),
        line=I32(-1),
        line_pid=I32(-1),
        searches=I32(0),
        cand=I32(-1),
    )


def _listen(mem: ReturnMemory, obs: Observation, sub: jax.Array) -> ReturnMemory:
    r = obs.reply
    said = r.slot_stated[sub]
    ref = r.ref_form[sub] > 0
    return mem.replace(
        stated=mem.stated | said,
        value=jnp.where(said, r.slot_value[sub], mem.value),
        op=jnp.where(said, r.slot_op[sub], mem.op),
        ref_form=jnp.where(ref, r.ref_form[sub], mem.ref_form),
        ref_key=jnp.where(ref, r.ref_key[sub], mem.ref_key),
    )


def match_line(
    catalog: Catalog, obs: Observation, form: jax.Array, key: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """(found, order, line, product) of the order-tool row whose product the description
    (form, key) names; also whether an order list came back at all."""
    res = obs.results
    is_list = ((res.tool == T.ORDER_LIST) | (res.tool == T.ORDER_GET_STATUS)) & (res.error == 0)
    rows = jnp.arange(res.ids.shape[1])[None, :] < res.count[:, None]
    f = jnp.clip(form, 1, 3) - 1
    row_key = catalog.desc_key[safe(res.ids)][..., f]  # [B, S]
    hit = is_list[:, None] & rows & (res.ids >= 0) & (row_key == key) & (form > 0)
    flat = hit.reshape(-1)
    k = jnp.argmax(flat)
    found = flat.any()
    return (
        found,
        res.var.reshape(-1)[k],
        res.aux.reshape(-1)[k],
        res.ids.reshape(-1)[k],
    )


def _constraints(mem: ReturnMemory):
    return constraints_from_slots(mem.stated, mem.value, mem.op)


def _read_results(mem: ReturnMemory, obs: Observation, catalog: Catalog) -> ReturnMemory:
    res = obs.results
    listed = ((res.tool == T.ORDER_LIST) & (res.error == 0)).any()
    found, order, line, pid = match_line(catalog, obs, mem.ref_form, mem.ref_key)
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
    mem = _read_results(_listen(mem, obs, sub), obs, catalog)
    budget = obs.tool_budget
    want = mem.stated[S.REPLACEMENT] & (mem.value[S.REPLACEMENT] > 0.5)
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
    cat = jnp.clip(mem.value[S.CATEGORY].astype(I32), 0, catalog.n_categories - 1)
    qemb = catalog.cat_emb[cat].astype(jnp.float32)
    method = jnp.where(mem.stated[S.RETURN_METHOD], mem.value[S.RETURN_METHOD], 0).astype(I32)
    reason = mem.value[S.REASON].astype(I32)

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
