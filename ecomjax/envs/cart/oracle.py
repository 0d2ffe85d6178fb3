"""The CART oracle plan of SPEC §8.9 as an array policy.

It reads only observations and the customer's acts: products come as identifying
descriptions, which it resolves against the visit-history cards it retrieved, exactly as
an LLM would. Plan: ask_user(items, variant, quantity) · user_get_visit_history ·
catalog_get_variants per variant-required item · cart_add each kept item · answer.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.types import Action, Observation, empty_action
from ecomjax.world import safe

T = C.Tool
S = C.Slot
MI = C.MAX_ITEMS
NONE = -1


@struct.dataclass
class CartMemory:
    item_valid: jax.Array  # bool [MI]
    desc_form: jax.Array  # int32 [MI]
    desc_key: jax.Array  # int32 [MI]
    qty: jax.Array  # int32 [MI], known quantity (1 until told otherwise)
    var_attr: jax.Array  # int32 [MI], -1 = no variant needed / unknown
    var_value: jax.Array  # float32 [MI]
    dropped: jax.Array  # bool [MI], sold out and not wanted any more
    pid: jax.Array  # int32 [MI], resolved product, -1 unknown
    var_index: jax.Array  # int32 [MI], resolved variant, -1 unknown
    var_asked: jax.Array  # bool [MI], catalog_get_variants was called for it
    asked: jax.Array  # bool
    history: jax.Array  # int32 [MAX_HISTORY], -1 until fetched
    have_history: jax.Array  # bool


def init_memory() -> CartMemory:
    return CartMemory(
        item_valid=jnp.zeros(MI, bool),
        desc_form=jnp.zeros(MI, jnp.int32),
        desc_key=jnp.full(MI, -1, jnp.int32),
        qty=jnp.ones(MI, jnp.int32),
        var_attr=jnp.full(MI, -1, jnp.int32),
        var_value=jnp.zeros(MI, jnp.float32),
        dropped=jnp.zeros(MI, bool),
        pid=jnp.full(MI, -1, jnp.int32),
        var_index=jnp.full(MI, -1, jnp.int32),
        var_asked=jnp.zeros(MI, bool),
        asked=jnp.bool_(False),
        history=jnp.full(C.MAX_HISTORY, -1, jnp.int32),
        have_history=jnp.bool_(False),
    )


def _listen(mem: CartMemory, obs: Observation) -> CartMemory:
    """Folds the customer's reply into memory: stated items, quantities, variants, drops."""
    r = obs.reply
    said = r.item_valid
    mem = mem.replace(
        item_valid=mem.item_valid | said,
        desc_form=jnp.where(said, r.item_desc_form, mem.desc_form),
        desc_key=jnp.where(said, r.item_desc_key, mem.desc_key),
        qty=jnp.where(said & (r.item_qty >= 0), r.item_qty, mem.qty),
        var_attr=jnp.where(said & (r.item_var_attr >= 0), r.item_var_attr, mem.var_attr),
        var_value=jnp.where(said & (r.item_var_attr >= 0), r.item_var_value, mem.var_value),
        dropped=mem.dropped | (r.item_update & (r.item_qty == 0)),
    )
    return mem


def stated_match(mem: CartMemory, res, pid: jax.Array, catalog: Catalog) -> jax.Array:
    """bool [B, MI, V]: listed variant v of call slot b carries item i's stated variant."""
    del pid, catalog
    return (res.var_attr[:, None, :] == mem.var_attr[None, :, None]) & (
        jnp.abs(res.var_value[:, None, :] - mem.var_value[None, :, None]) < 1e-6
    )


Match = Callable[[CartMemory, object, jax.Array, Catalog], jax.Array]


def _read_results(
    mem: CartMemory, obs: Observation, catalog: Catalog, match: Match = stated_match
) -> CartMemory:
    res = obs.results
    is_hist = (res.tool == T.USER_GET_VISIT_HISTORY) & (res.error == 0)
    got_hist = is_hist.any()
    hist_slot = jnp.argmax(is_hist)
    history = jnp.where(got_hist, res.ids[hist_slot, : C.MAX_HISTORY], mem.history)
    # Resolve each item's description against the history cards.
    form = jnp.maximum(mem.desc_form, 1)
    keys = catalog.desc_key[safe(history)]  # [H, 3]
    card_key = jnp.take_along_axis(keys[None, :, :], (form - 1)[:, None, None], 2)[..., 0]
    match_card = (card_key == mem.desc_key[:, None]) & (history[None, :] >= 0)
    pid = jnp.where(match_card.any(-1), history[jnp.argmax(match_card, -1)], mem.pid)
    # Pick each variant-required item's variant from a get_variants result.
    is_var = (res.tool == T.CATALOG_GET_VARIANTS) & (res.error == 0)
    for_item = is_var[:, None] & (res.ids[:, 0][:, None] == pid[None, :])  # [B, MI]
    hit = for_item[:, :, None] & match(mem, res, pid, catalog)  # [B, MI, V]
    found = hit.any((0, 2))
    v_idx = jnp.argmax(hit.any(0), -1)
    return mem.replace(
        history=history,
        have_history=mem.have_history | got_hist,
        pid=pid,
        var_index=jnp.where(found, v_idx, mem.var_index),
    )


def _calls(tools: jax.Array, products: jax.Array, variants=None, qty=None):
    """Packs up to MAX_TOOL_CALLS calls (NONE-padded) into action arrays."""
    b = C.MAX_TOOL_CALLS
    pad = lambda x, fill: jnp.concatenate([x, jnp.full(b - x.shape[0], fill, x.dtype)])[:b]
    variants = jnp.full_like(products, -1) if variants is None else variants
    qty = jnp.ones_like(products) if qty is None else qty
    return pad(tools, T.NONE), pad(products, -1), pad(variants, -1), pad(qty, 1)


def act(
    mem: CartMemory,
    obs: Observation,
    catalog: Catalog,
    sub: jax.Array | int = 0,
    *,
    ask_variant: bool = True,
    match: Match = stated_match,
) -> tuple[CartMemory, Action]:
    """One turn of the plan. ``ask_variant=False`` with another ``match`` turns the plan
    into a variant-guessing agent (``shortcut.py``): it never asks for the variant, lists
    the variants of every item whose variant it was not told, and lets ``match`` pick."""
    del sub  # CART item acts are not per sub-goal rows
    mem = _read_results(_listen(mem, obs), obs, catalog, match)
    budget = obs.tool_budget
    live = mem.item_valid & ~mem.dropped
    told = mem.var_attr >= 0 if ask_variant else jnp.ones(MI, bool)
    need_var = live & told & (mem.var_index < 0) & ~mem.var_asked & (mem.pid >= 0)
    stage = jnp.select([~mem.asked, ~mem.have_history, need_var.any()], [0, 1, 2], 3)
    action = empty_action(catalog.embed_dim)
    # Stage 0: ask for every CART slot, and fetch the history too when the budget allows.
    ask_tools = jnp.array([T.ASK_USER, T.USER_GET_VISIT_HISTORY])
    ask_tools = jnp.where(jnp.arange(2) < budget, ask_tools, T.NONE)
    # Stage 2: get_variants for each item that needs one (n_items <= B_tool at every d).
    var_tools = jnp.where(need_var, T.CATALOG_GET_VARIANTS, T.NONE)
    var_now = need_var & (jnp.cumsum(need_var) <= budget) & (stage == 2)
    var_tools = jnp.where(var_now, var_tools, T.NONE)
    # Stage 3: add every kept item, then answer in the same turn.
    add_tools = jnp.where(live & (mem.pid >= 0), T.CART_ADD, T.NONE)
    plans = [
        _calls(ask_tools, jnp.full(2, -1, jnp.int32)),
        _calls(jnp.array([T.USER_GET_VISIT_HISTORY]), jnp.array([-1])),
        _calls(var_tools, mem.pid),
        _calls(add_tools, mem.pid, mem.var_index, mem.qty),
    ]
    tools, products, variants, qty = (
        jnp.select([stage == k for k in range(4)], [p[f] for p in plans]) for f in range(4)
    )
    # Compact so used slots come first (the validator counts used slots, order matters).
    order = jnp.argsort(tools == T.NONE, stable=True)
    tools, products, variants, qty = tools[order], products[order], variants[order], qty[order]
    slots = jnp.zeros((C.MAX_TOOL_CALLS, C.N_SLOTS), bool)
    asked = [S.ITEMS, S.VARIANT, S.QUANTITY] if ask_variant else [S.ITEMS, S.QUANTITY]
    slots = slots.at[:, jnp.array(asked)].set(True)
    answer = action.answer.replace(
        present=stage == 3,
        done=jnp.bool_(True),
        main=action.answer.main.replace(env=jnp.int32(C.Env.CART)),
    )
    action = action.replace(
        has_message=jnp.bool_(True),
        tool=tools,
        product=products,
        variant=variants,
        qty=qty,
        slots=jnp.where((tools == T.ASK_USER)[:, None], slots, False),
        answer=answer,
    )
    # A listing is read on the next turn; an item without variants lists none, so an item
    # counts as listed once asked for.
    mem = mem.replace(asked=mem.asked | (stage == 0), var_asked=mem.var_asked | var_now)
    return mem, action
