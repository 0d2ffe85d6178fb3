"""The simulated customer (SPEC §10): a deterministic policy over structured acts.

It reads the hidden goal, the world and the agent's turn, and answers with acts that carry
knowable content only: products appear as identifying-description keys, never as indices.
Family-specific feedback (CART now) plugs in beside the shared CLARIFY and composition.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.envs.cart.customer import CartFeedback, cart_feedback
from ecomjax.tools.execute import TurnScratch
from ecomjax.types import Action, Dialogue, Problem, UserAct, World, empty_user_act
from ecomjax.world import safe

S = C.Slot
A = C.Act
CS = C.ClarifyStatus
_CONSTRAINT_SLOTS = (
    S.PRICE,
    S.RATING,
    S.RATING_COUNT,
    S.SHIP_DAYS,
    S.BRAND,
    S.STORE,
    S.COLOR,
    S.SIZE,
    S.MATERIAL,
    S.CONNECTOR_TYPE,
    S.ITEM_FORM,
    S.SKIN_TYPE,
    S.FINISH_TYPE,
    S.AGE_RANGE,
    S.WATTAGE,
    S.WEIGHT_LBS,
    S.SCREEN_SIZE_INCHES,
)
_POLICY_SLOTS = tuple(s for s in S if s >= S.PRODUCT_CATEGORY)
# Which slots make sense in which env (SPEC §10.1 knowable fields). JOURNEY asks within a
# sub-goal, so it uses the sub-goal's row.
_APPLICABLE_SETS = {
    C.Env.PD: (S.CATEGORY, S.NUM_RESULTS, S.PRIORITY, *_CONSTRAINT_SLOTS),
    C.Env.SUB: (S.ORIGINAL, S.CATEGORY, S.NUM_RESULTS, *_CONSTRAINT_SLOTS),
    C.Env.CART: (S.ITEMS, S.VARIANT, S.QUANTITY),
    C.Env.RETURN: (
        S.ITEMS,
        S.PURCHASE_DATE,
        S.REASON,
        S.RETURN_METHOD,
        S.REPLACEMENT,
        S.CATEGORY,
        *_CONSTRAINT_SLOTS,
    ),
    C.Env.STATUS: (S.ORDER_REFERENCE,),
    C.Env.POLICY: (S.TOPIC, *_POLICY_SLOTS),
    C.Env.BUNDLE: (S.ITEMS, S.BUDGET),
    C.Env.JOURNEY: (),
}
APPLICABLE = np.zeros((len(C.Env), C.N_SLOTS), bool)
for _env, _slots in _APPLICABLE_SETS.items():
    APPLICABLE[_env, list(_slots)] = True
# CART quantity has a default (1), so asking for it always gets a value.
_DEFAULTED = np.zeros((len(C.Env), C.N_SLOTS), bool)
_DEFAULTED[C.Env.CART, S.QUANTITY] = True


@struct.dataclass
class Reply:
    act: UserAct
    dialogue: Dialogue
    quit: jax.Array  # bool


def _clarify(problem: Problem, dlg: Dialogue, scratch: TurnScratch, env: jax.Array):
    """(slot_status [N_SLOTS], revealed [MAX_ITEMS, N_SLOTS], n_revealed)."""
    sub = jnp.maximum(scratch.ask_subgoal, 0)
    asked = scratch.ask_slots & scratch.ask_any
    applicable = jnp.asarray(APPLICABLE)[env]
    defaulted = jnp.asarray(_DEFAULTED)[env]
    is_cart = env == C.Env.CART
    # CART asks are scoped to items; other envs keep their slots on item row 0.
    scope = jnp.where(is_cart, scratch.ask_items, jnp.arange(C.MAX_ITEMS) == 0)
    has = (problem.has_slot[sub] & scope[:, None]).any(0)
    status = jnp.select(
        [~asked, ~applicable, has | defaulted],
        [CS.NOT_ASKED, CS.NOT_UNDERSTOOD, CS.VALUE],
        CS.NO_PREFERENCE,
    )
    not_mine = is_cart & scratch.ask_not_mine & ~scratch.ask_items.any()
    status = jnp.where(asked & applicable & not_mine, CS.NOT_MINE, status).astype(jnp.int32)
    revealed = dlg.pending[sub] & asked[None, :] & applicable[None, :] & scope[:, None]
    return status, revealed, revealed.sum()


def required_variant_value(problem: Problem) -> jax.Array:
    """float32 [MAX_ITEMS]: the value of each item's required variant (0 when none)."""
    return problem.item_var_vals[jnp.arange(C.MAX_ITEMS), jnp.clip(problem.item_var_target, 0, 2)]


def _issue_count(item_issue: jax.Array, extra: jax.Array) -> jax.Array:
    return (item_issue != 0).sum() + (extra >= 0).sum()


def _includes(
    item_issue: jax.Array, extra: jax.Array, prev_issue: jax.Array, prev_extra: jax.Array
) -> jax.Array:
    items_ok = ((prev_issue == 0) | (item_issue == prev_issue)).all()
    extras_ok = ((prev_extra[:, None] == extra[None, :]).any(-1) | (prev_extra < 0)).all()
    return items_ok & extras_ok


def reply(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    scratch: TurnScratch,
    action: Action,
    shocked_items: jax.Array,
    stored_pending_done: jax.Array,
) -> Reply:
    """The customer's reply after a non-terminal turn (SPEC §10.2, §10.3)."""
    env = problem.env
    is_cart = env == C.Env.CART
    status, revealed, n_revealed = _clarify(problem, dlg, scratch, env)
    clarify = scratch.ask_any
    fb: CartFeedback = cart_feedback(problem, world, dlg, scratch, action.present, shocked_items)

    inform_update = is_cart & fb.update.any()
    confirm = is_cart & fb.confirm
    correct = is_cart & fb.correct
    done = stored_pending_done & ~dlg.done_emitted
    user_caused = (clarify & (n_revealed > 0)) | (confirm & fb.confirm_new)

    # Frustration (§10.3): resets win over increments within one reply.
    n_issues = _issue_count(fb.item_issue, fb.extra_pid)
    prev_n = _issue_count(dlg.last_issue, dlg.last_extra)
    repeats = (
        correct
        & dlg.had_correct
        & _includes(fb.item_issue, fb.extra_pid, dlg.last_issue, dlg.last_extra)
    )
    fewer = correct & dlg.had_correct & (n_issues < prev_n)
    reset = confirm | (clarify & (n_revealed > 0)) | fewer
    inc = repeats.astype(jnp.int32) + (clarify & (n_revealed == 0)).astype(jnp.int32)
    frustration = jnp.where(reset, 0, dlg.frustration + inc)
    quit_ = frustration >= 3

    # Pending values leave the pending set once revealed (CLARIFY, CORRECT, INFORM-update).
    sub = jnp.maximum(scratch.ask_subgoal, 0)
    pending = dlg.pending.at[sub].set(dlg.pending[sub] & ~revealed)
    cart_reveal = jnp.zeros((C.MAX_ITEMS, C.N_SLOTS), bool)
    cart_reveal = cart_reveal.at[:, S.VARIANT].set(is_cart & correct & fb.reveal_var)
    cart_reveal = cart_reveal.at[:, S.QUANTITY].set(
        is_cart & (fb.reveal_qty & (correct | fb.update))
    )
    pending = pending.at[0].set(pending[0] & ~cart_reveal)

    acts = jnp.zeros(C.N_ACTS, bool)
    acts = acts.at[A.INFORM_UPDATE].set(inform_update)
    acts = acts.at[A.CLARIFY].set(clarify)
    acts = acts.at[A.CONFIRM].set(confirm)
    acts = acts.at[A.CORRECT].set(correct)
    acts = acts.at[A.DONE].set(done)
    acts = acts.at[A.ACK].set(~acts.any())
    acts = jnp.where(quit_, jnp.zeros_like(acts).at[A.QUIT].set(True), acts)

    # Item payload (CART): what this reply states about each item.
    valid = problem.item_pid >= 0
    ask_var = clarify & scratch.ask_slots[S.VARIANT]
    ask_qty = clarify & scratch.ask_slots[S.QUANTITY]
    ask_items = clarify & (scratch.ask_slots[S.ITEMS] | ask_var | ask_qty)
    in_scope = scratch.ask_items & valid
    state_var = (ask_var & in_scope & problem.item_var_req) | (correct & fb.reveal_var)
    state_qty = (ask_qty & in_scope) | (correct & fb.reveal_qty) | fb.update
    mentioned = (ask_items & in_scope) | fb.update | (fb.item_issue != 0) | fb.item_confirm
    mentioned = is_cart & valid & mentioned
    var_value = required_variant_value(problem)
    extra = fb.extra_pid
    act = empty_user_act().replace(
        acts=acts,
        user_caused=user_caused & ~quit_,
        item_valid=mentioned,
        item_desc_form=jnp.where(mentioned, problem.item_desc_form, 0),
        item_desc_key=jnp.where(mentioned, problem.item_desc_key, -1),
        item_qty=jnp.where(mentioned & state_qty, fb.req_final, -1),
        item_var_attr=jnp.where(mentioned & state_var, problem.item_var_attr, -1),
        item_var_value=jnp.where(mentioned & state_var, var_value, 0.0),
        item_var_nopref=mentioned & ask_var & in_scope & ~problem.item_var_req,
        item_update=is_cart & fb.update,
        item_issue=jnp.where(is_cart & correct, fb.item_issue, 0),
        item_confirm=is_cart & fb.item_confirm,
        cart_confirm=is_cart & fb.cart_confirm,
        extra_form=jnp.where(extra >= 0, catalog.desc_form[safe(extra)].astype(jnp.int32), 0),
        extra_key=jnp.where(extra >= 0, _desc_key(catalog, extra), -1),
        extra_kind=jnp.where(is_cart & correct, fb.extra_kind, 0),
        slot_status=jnp.where(clarify, status, 0),
    )
    act = jax.tree_util.tree_map(
        lambda q, a: jnp.where(quit_, q, a),
        empty_user_act().replace(acts=acts),
        act,
    )
    new_dlg = dlg.replace(
        pending=pending,
        req_final=jnp.where(is_cart, fb.req_final, dlg.req_final),
        presented=jnp.where(is_cart, fb.presented, dlg.presented),
        confirmed_fp=jnp.where(is_cart, fb.confirmed_fp, dlg.confirmed_fp),
        n_confirmed=jnp.where(is_cart, fb.n_confirmed, dlg.n_confirmed),
        last_issue=jnp.where(correct, fb.item_issue, dlg.last_issue),
        last_extra=jnp.where(correct, fb.extra_pid, dlg.last_extra),
        had_correct=dlg.had_correct | correct,
        frustration=frustration,
        done_emitted=dlg.done_emitted | done,
    )
    return Reply(act=act, dialogue=new_dlg, quit=quit_)


def _desc_key(catalog: Catalog, pid: jax.Array) -> jax.Array:
    """The catalog-scoped identifying description key of each product (TITLE if none)."""
    p = safe(pid)
    form = jnp.maximum(catalog.desc_form[p].astype(jnp.int32), C.DescForm.SHORT)
    form = jnp.where(catalog.desc_form[p] == C.DescForm.NONE, C.DescForm.TITLE, form)
    return jnp.take_along_axis(catalog.desc_key[p], (form - 1)[..., None], -1)[..., 0]


def opening(problem: Problem) -> UserAct:
    """The opening INFORM: critical slots plus the non-omitted non-critical ones."""
    valid = problem.item_pid >= 0
    is_cart = problem.env == C.Env.CART
    pend_qty = problem.pending[0, :, S.QUANTITY]
    pend_var = problem.pending[0, :, S.VARIANT]
    show_qty = valid & (problem.item_qty > 1) & ~pend_qty
    show_var = valid & problem.item_var_req & ~pend_var
    var_value = required_variant_value(problem)
    return empty_user_act().replace(
        acts=jnp.zeros(C.N_ACTS, bool).at[A.INFORM].set(True),
        item_valid=is_cart & valid,
        item_desc_form=jnp.where(valid, problem.item_desc_form, 0),
        item_desc_key=jnp.where(valid, problem.item_desc_key, -1),
        item_qty=jnp.where(show_qty, problem.item_qty, -1),
        item_var_attr=jnp.where(show_var, problem.item_var_attr, -1),
        item_var_value=jnp.where(show_var, var_value, 0.0),
    )
