"""The simulated customer (SPEC §10): a deterministic policy over structured acts.

It reads the hidden goal, the world and the agent's turn, and answers with acts that carry
knowable content only: products appear as identifying-description keys, never as indices.
CART's item feedback and each family's ``feedback`` hook (RETURN's, a registered family's)
plug in beside the shared CLARIFY, frustration and composition.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog
from ecomjax.envs.cart.customer import CartFeedback, cart_feedback
from ecomjax.envs.journey.agenda import Agenda, agenda
from ecomjax.family import Family, Feedback, slot_mask
from ecomjax.registry import by_env, next_env
from ecomjax.tools.execute import TurnScratch
from ecomjax.types import Action, Dialogue, EnvParams, Problem, UserAct, World, empty_user_act
from ecomjax.world import safe

S = C.Slot
A = C.Act
CS = C.ClarifyStatus


def slot_tables() -> tuple[np.ndarray, np.ndarray]:
    """bool [n families, N_SLOTS] twice: which slots make sense in which env, and which
    always have a value (CART's quantity defaults to 1), from each family's descriptor
    (SPEC §10.1 knowable fields), read when a program is traced so that a registered
    family has its row. JOURNEY asks within a sub-goal, so it uses the sub-goal's row."""
    return _slot_tables(tuple(by_env(e) for e in range(next_env())))


@functools.lru_cache(maxsize=8)
def _slot_tables(fams: tuple[Family, ...]) -> tuple[np.ndarray, np.ndarray]:
    # one array per registry state: a trace reuses the same constant
    applicable = np.stack([f.slot_mask for f in fams])
    defaulted = np.stack([slot_mask(f.defaulted) for f in fams])
    applicable.flags.writeable = defaulted.flags.writeable = False
    return applicable, defaulted


@struct.dataclass
class Reply:
    act: UserAct
    dialogue: Dialogue
    quit: jax.Array  # bool


def cart_row(problem: Problem) -> jax.Array:
    """The sub-goal row that holds CART's item slots (0 outside JOURNEY)."""
    is_journey = problem.env == C.Env.JOURNEY
    return jnp.where(is_journey, jnp.argmax(problem.sub_env == C.Env.CART), 0)


def sub_env(problem: Problem, sub: jax.Array) -> jax.Array:
    """The family of sub-goal ``sub`` (the episode's env outside JOURNEY)."""
    return jnp.where(problem.env == C.Env.JOURNEY, problem.sub_env[sub], problem.env)


def _clarify(problem: Problem, dlg: Dialogue, scratch: TurnScratch, sub: jax.Array):
    """(slot_status [N_SLOTS], revealed [MAX_ITEMS, N_SLOTS], n_revealed)."""
    env = sub_env(problem, sub)
    asked = scratch.ask_slots & scratch.ask_any
    applicable_table, defaulted_table = slot_tables()
    row = jnp.clip(env, 0, len(applicable_table) - 1)
    applicable = jnp.asarray(applicable_table)[row] & (env >= 0)
    defaulted = jnp.asarray(defaulted_table)[row]
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


# Slots that name the episode's reference product (ref_form / ref_key), per family.
_REF_SLOTS = (S.ORIGINAL, S.ITEMS, S.ORDER_REFERENCE)


def _slot_payload(problem: Problem, sub: jax.Array, stated: jax.Array) -> dict:
    """UserAct fields that state ``stated`` [N_SLOTS] slots of sub-goal ``sub``."""
    env = sub_env(problem, sub)
    ms = C.MAX_SUBGOALS
    rows = jnp.arange(ms) == sub
    stated = stated & (env != C.Env.CART)
    slot_stated = rows[:, None] & stated[None, :]
    ref = stated[jnp.array(_REF_SLOTS)].any() & (problem.ref_form[sub] > 0)
    cats = jnp.where((env == C.Env.BUNDLE) & stated[S.ITEMS], problem.bundle_cats, -1)
    facts = (env == C.Env.POLICY) & stated[S.TOPIC]
    return {
        "slot_stated": slot_stated,
        "slot_value": jnp.where(slot_stated, problem.slot_value, 0.0),
        "slot_op": jnp.where(slot_stated, problem.slot_op, 0),
        "ref_form": jnp.where(rows & ref, problem.ref_form, 0),
        "ref_key": jnp.where(rows & ref, problem.ref_key, -1),
        "cats": cats,
        "fact_field": jnp.where(facts, problem.pol_fact_field, -1),
        "fact_value": jnp.where(facts & (problem.pol_fact_field >= 0), problem.pol_fact_value, 0.0),
    }


def _merge_payload(a: dict, b: dict) -> dict:
    """Two statements in one reply (a CLARIFY and a SWITCH): union of stated values."""
    out = {}
    for k in a:
        if k in ("slot_stated",):
            out[k] = a[k] | b[k]
        elif k in ("slot_value", "slot_op"):
            out[k] = jnp.where(b["slot_stated"], b[k], a[k])
        elif k == "ref_form":
            out[k] = jnp.where(b[k] > 0, b[k], a[k])
        elif k == "ref_key":
            out[k] = jnp.where(b["ref_form"] > 0, b[k], a[k])
        else:  # cats, facts: -1 padded lists; only one family states them
            field = "fact_field" if k == "fact_value" else k
            out[k] = jnp.where((b[field] >= 0).any(), b[k], a[k])
    return out


def _opening_stated(problem: Problem, pending: jax.Array, sub: jax.Array) -> jax.Array:
    """bool [N_SLOTS]: the critical slots plus the non-pending non-critical ones."""
    return problem.has_slot[sub, 0] & ~pending[sub, 0]


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


def _any(present: tuple[int, ...], *families: int) -> bool:
    return any(int(f) in present for f in families)


def _when(needed: bool, fn, *args):
    """``fn(*args)`` if its family can occur, else zeros of its output's shape. Every use of
    such an output is selected by a per-episode family test that is then false."""
    if needed:
        return fn(*args)
    shapes = jax.eval_shape(lambda: fn(*args))
    return jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)


def _family_feedback(
    catalog: Catalog,
    problem: Problem,
    world_before: World,
    world: World,
    dlg: Dialogue,
    action: Action,
    present_fams: tuple[int, ...],
    is_journey: jax.Array,
) -> tuple[Feedback, jax.Array, jax.Array]:
    """The CONFIRM / CORRECT of the family whose ``feedback`` hook speaks for this lane (the
    episode's family, or in JOURNEY its sub-goal family with a hook: RETURN), whether it
    speaks (in JOURNEY: once that sub-goal is introduced), and its sub-goal row. A hook is
    traced only when its family can occur; read from the registry at trace time."""
    env = problem.env
    out: tuple[Feedback, jax.Array, jax.Array] | None = None
    for fam in (by_env(e) for e in range(next_env())):
        if fam.feedback is None:
            continue
        subgoal = fam.fill is not None  # a JOURNEY sub-goal family
        journey = (C.Env.JOURNEY,) if subgoal else ()
        fb = _when(
            _any(present_fams, fam.env, *journey),
            fam.feedback,
            catalog,
            problem,
            world_before,
            world,
            dlg,
            action,
        )
        if subgoal:
            has = (env == fam.env) | (is_journey & (problem.sub_env == fam.env).any())
            row = jnp.where(is_journey, jnp.argmax(problem.sub_env == fam.env), 0)
        else:
            has, row = env == fam.env, jnp.int32(0)
        on = has & dlg.introduced[row]
        if out is not None:
            prev, prev_on, prev_row = out
            fb = jax.tree_util.tree_map(lambda a, b: jnp.where(on, a, b), fb, prev)
            on, row = on | prev_on, jnp.where(on, row, prev_row)
        out = (fb, on, row)
    if out is None:  # no registered family gives feedback
        none = Feedback(
            confirm=jnp.bool_(False),
            confirm_new=jnp.bool_(False),
            correct=jnp.bool_(False),
            issues=jnp.zeros(C.MAX_FEEDBACK_ISSUES, bool),
            reveal=jnp.zeros(C.N_SLOTS, bool),
            confirmed=dlg.feedback_confirmed,
        )
        out = (none, jnp.bool_(False), jnp.int32(0))
    return out


def reply(
    catalog: Catalog,
    problem: Problem,
    world_before: World,
    world: World,
    dlg: Dialogue,
    scratch: TurnScratch,
    action: Action,
    shocked_items: jax.Array,
    stored_pending_done: jax.Array,
    key: jax.Array,
    params: EnvParams,
    families: Sequence[int] = tuple(C.Env),
) -> Reply:
    """The customer's reply after a non-terminal turn (SPEC §10.2, §10.3).

    ``world_before`` is the world before this turn's calls (RETURN judges the returns the
    turn created); ``key`` is the episode key (JOURNEY's SWITCH draw). ``families``
    (static) names the families the batch may hold: CART's feedback, JOURNEY's agenda and a
    family's ``feedback`` hook are traced only when their family can occur (elsewhere their
    outputs are never selected)."""
    present_fams = tuple(int(f) for f in families)
    env = problem.env
    is_journey = env == C.Env.JOURNEY
    sub = jnp.where(scratch.ask_subgoal >= 0, scratch.ask_subgoal, dlg.active)
    sub = jnp.clip(sub, 0, C.MAX_SUBGOALS - 1)
    status, revealed, n_revealed = _clarify(problem, dlg, scratch, sub)
    clarify = scratch.ask_any
    # CART feedback: the CART env, or a JOURNEY once its CART sub-goal is introduced.
    crow = cart_row(problem)
    has_cart = (env == C.Env.CART) | (is_journey & (problem.sub_env == C.Env.CART).any())
    cart_on = has_cart & dlg.introduced[crow]
    # Presentations are judged while the CART sub-goal is the one being talked about.
    present = jnp.where(cart_on & (~is_journey | (dlg.active == crow)), action.present, -1)
    cart_fb: CartFeedback = _when(
        _any(present_fams, C.Env.CART, C.Env.JOURNEY),
        cart_feedback,
        problem,
        world,
        dlg,
        scratch,
        present,
        shocked_items,
    )
    fam_fb, fam_on, fam_row = _family_feedback(
        catalog, problem, world_before, world, dlg, action, present_fams, is_journey
    )

    inform_update = cart_on & cart_fb.update.any()
    confirm = (cart_on & cart_fb.confirm) | (fam_on & fam_fb.confirm)
    cart_correct = cart_on & cart_fb.correct
    fam_correct = fam_on & fam_fb.correct & ~(cart_on & cart_fb.correct)
    correct = cart_correct | fam_correct
    confirm_new = (cart_on & cart_fb.confirm & cart_fb.confirm_new) | (fam_on & fam_fb.confirm_new)

    # JOURNEY agenda (SPEC §8.8); outside JOURNEY, DONE follows a stored done=false answer.
    ag: Agenda = _when(_any(present_fams, C.Env.JOURNEY), agenda, problem, dlg, action, key, params)
    switch = is_journey & ag.switch
    done = jnp.where(is_journey, ag.done, stored_pending_done) & ~dlg.done_emitted
    user_caused = (clarify & (n_revealed > 0)) | (confirm & confirm_new) | switch

    # Frustration (§10.3): resets win over increments within one reply.
    n_issues = jnp.where(
        cart_correct, _issue_count(cart_fb.item_issue, cart_fb.extra_pid), fam_fb.issues.sum()
    )
    prev_n = jnp.where(
        dlg.last_feedback_issues.any(),
        dlg.last_feedback_issues.sum(),
        _issue_count(dlg.last_issue, dlg.last_extra),
    )
    cart_repeats = _includes(cart_fb.item_issue, cart_fb.extra_pid, dlg.last_issue, dlg.last_extra)
    fam_repeats = (~dlg.last_feedback_issues | fam_fb.issues).all()
    repeats = correct & dlg.had_correct & jnp.where(cart_correct, cart_repeats, fam_repeats)
    fewer = correct & dlg.had_correct & (n_issues < prev_n)
    reset = confirm | (clarify & (n_revealed > 0)) | fewer | switch
    inc = repeats.astype(jnp.int32) + (clarify & (n_revealed == 0)).astype(jnp.int32)
    frustration = jnp.where(reset, 0, dlg.frustration + inc)
    quit_ = frustration >= 3

    # Pending values leave the pending set once revealed (CLARIFY, CORRECT, INFORM-update).
    pending = dlg.pending.at[sub].set(dlg.pending[sub] & ~revealed)
    cart_reveal = jnp.zeros((C.MAX_ITEMS, C.N_SLOTS), bool)
    cart_reveal = cart_reveal.at[:, S.VARIANT].set(cart_correct & cart_fb.reveal_var)
    cart_reveal = cart_reveal.at[:, S.QUANTITY].set(
        cart_on & (cart_fb.reveal_qty & (cart_correct | cart_fb.update))
    )
    pending = pending.at[crow].set(pending[crow] & ~cart_reveal)
    fam_reveal = fam_correct & fam_fb.reveal
    pending = pending.at[fam_row, 0].set(pending[fam_row, 0] & ~fam_reveal)

    acts = jnp.zeros(C.N_ACTS, bool)
    acts = acts.at[A.INFORM_UPDATE].set(inform_update)
    acts = acts.at[A.CLARIFY].set(clarify)
    acts = acts.at[A.CONFIRM].set(confirm)
    acts = acts.at[A.CORRECT].set(correct)
    acts = acts.at[A.SWITCH].set(switch)
    acts = acts.at[A.DONE].set(done)
    acts = acts.at[A.ACK].set(~acts.any())
    acts = jnp.where(quit_, jnp.zeros_like(acts).at[A.QUIT].set(True), acts)

    # Slot values stated: CLARIFY (asked, applicable, in the goal), the RETURN CORRECT's
    # revealed values, and a SWITCH's sub-goal opening.
    asked = scratch.ask_slots & clarify
    applicable = status != CS.NOT_UNDERSTOOD
    stated = asked & applicable & problem.has_slot[sub, 0]
    payload = _slot_payload(problem, sub, stated)
    fam_stated = fam_reveal & problem.has_slot[fam_row, 0]
    payload = _merge_payload(payload, _slot_payload(problem, fam_row, fam_stated))
    intro = switch & ag.intro
    switch_to = jnp.clip(ag.target, 0, C.MAX_SUBGOALS - 1)
    pend_for_switch = jnp.where(intro, problem.pending, pending)
    sw_stated = switch & _opening_stated(problem, pend_for_switch, switch_to)
    payload = _merge_payload(payload, _slot_payload(problem, switch_to, sw_stated))

    # Item payload (CART): what this reply states about each item.
    valid = problem.item_pid >= 0
    cart_sub = sub_env(problem, sub) == C.Env.CART
    ask_var = clarify & cart_sub & scratch.ask_slots[S.VARIANT]
    ask_qty = clarify & cart_sub & scratch.ask_slots[S.QUANTITY]
    ask_items = clarify & cart_sub & (scratch.ask_slots[S.ITEMS] | ask_var | ask_qty)
    in_scope = scratch.ask_items & valid
    cart_intro = switch & (switch_to == crow) & has_cart
    show_qty_sw = cart_intro & (problem.item_qty > 1) & ~pend_for_switch[crow, :, S.QUANTITY]
    show_var_sw = cart_intro & problem.item_var_req & ~pend_for_switch[crow, :, S.VARIANT]
    state_var = (ask_var & in_scope & problem.item_var_req) | (cart_correct & cart_fb.reveal_var)
    state_var = state_var | show_var_sw
    # Items sold out before the CART sub-goal was introduced: its opening says so.
    update_at_intro = cart_intro & valid & (cart_fb.req_final < problem.item_qty)
    item_update = (cart_on & cart_fb.update) | update_at_intro
    state_qty = (ask_qty & in_scope) | (cart_correct & cart_fb.reveal_qty) | item_update
    state_qty = state_qty | show_qty_sw
    mentioned = (ask_items & in_scope) | (cart_on & (cart_fb.update | cart_fb.item_confirm))
    mentioned = mentioned | (cart_correct & (cart_fb.item_issue != 0)) | cart_intro
    mentioned = has_cart & valid & mentioned
    var_value = required_variant_value(problem)
    extra = jnp.where(cart_correct | (cart_on & cart_fb.correct), cart_fb.extra_pid, -1)
    act = empty_user_act().replace(
        acts=acts,
        user_caused=user_caused & ~quit_,
        item_valid=mentioned,
        item_desc_form=jnp.where(mentioned, problem.item_desc_form, 0),
        item_desc_key=jnp.where(mentioned, problem.item_desc_key, -1),
        item_qty=jnp.where(mentioned & state_qty, cart_fb.req_final, -1),
        item_var_attr=jnp.where(mentioned & state_var, problem.item_var_attr, -1),
        item_var_value=jnp.where(mentioned & state_var, var_value, 0.0),
        item_var_nopref=mentioned & ask_var & in_scope & ~problem.item_var_req,
        item_update=item_update,
        item_issue=jnp.where(cart_correct, cart_fb.item_issue, 0),
        item_confirm=cart_on & cart_fb.item_confirm,
        cart_confirm=cart_on & cart_fb.cart_confirm,
        extra_form=jnp.where(extra >= 0, catalog.desc_form[safe(extra)].astype(jnp.int32), 0),
        extra_key=jnp.where(extra >= 0, _desc_key(catalog, extra), -1),
        extra_kind=jnp.where(cart_correct, cart_fb.extra_kind, 0),
        slot_status=jnp.where(clarify, status, 0),
        subgoal=sub,
        active=jnp.where(is_journey, ag.active, 0),
        switch_intro=intro,
        intro_env=jnp.where(switch, sub_env(problem, switch_to), -1),
        feedback_issues=fam_correct & fam_fb.issues,
        feedback_confirm=fam_on & fam_fb.confirm,
        **payload,
    )
    act = jax.tree_util.tree_map(
        lambda q, a: jnp.where(quit_, q, a),
        empty_user_act().replace(acts=acts, active=act.active),
        act,
    )
    new_dlg = dlg.replace(
        pending=pending,
        # A shock lowers the requirement even before CART is introduced (SPEC §6).
        req_final=jnp.where(has_cart, cart_fb.req_final, dlg.req_final),
        presented=jnp.where(cart_on, cart_fb.presented, dlg.presented),
        confirmed_fp=jnp.where(cart_on, cart_fb.confirmed_fp, dlg.confirmed_fp),
        n_confirmed=jnp.where(cart_on, cart_fb.n_confirmed, dlg.n_confirmed),
        last_issue=jnp.where(
            cart_correct, cart_fb.item_issue, jnp.where(correct, 0, dlg.last_issue)
        ),
        last_extra=jnp.where(
            cart_correct, cart_fb.extra_pid, jnp.where(correct, -1, dlg.last_extra)
        ),
        last_feedback_issues=jnp.where(
            fam_correct, fam_fb.issues, jnp.where(correct, False, dlg.last_feedback_issues)
        ),
        feedback_confirmed=jnp.where(fam_on, fam_fb.confirmed, dlg.feedback_confirmed),
        had_correct=dlg.had_correct | correct,
        frustration=frustration,
        done_emitted=dlg.done_emitted | done,
        introduced=jnp.where(is_journey, ag.introduced, dlg.introduced),
        addressed=jnp.where(is_journey, ag.addressed, dlg.addressed),
        interrupted=jnp.where(is_journey, ag.interrupted, dlg.interrupted),
        active=jnp.where(is_journey, ag.active, dlg.active),
    )
    return Reply(act=act, dialogue=new_dlg, quit=quit_)


def _desc_key(catalog: Catalog, pid: jax.Array) -> jax.Array:
    """The catalog-scoped identifying description key of each product (TITLE if none)."""
    p = safe(pid)
    form = jnp.maximum(catalog.desc_form[p].astype(jnp.int32), C.DescForm.SHORT)
    form = jnp.where(catalog.desc_form[p] == C.DescForm.NONE, C.DescForm.TITLE, form)
    return jnp.take_along_axis(catalog.desc_key[p], (form - 1)[..., None], -1)[..., 0]


def opening(problem: Problem) -> UserAct:
    """The opening INFORM: critical slots plus the non-omitted non-critical ones. In
    JOURNEY it introduces sub-goal 0 ("I have {L} things to sort out today. First: ...")."""
    valid = problem.item_pid >= 0
    crow = cart_row(problem)
    is_journey = problem.env == C.Env.JOURNEY
    cart_first = (problem.env == C.Env.CART) | (is_journey & (problem.sub_env[0] == C.Env.CART))
    pend_qty = problem.pending[crow, :, S.QUANTITY]
    pend_var = problem.pending[crow, :, S.VARIANT]
    show_qty = cart_first & valid & (problem.item_qty > 1) & ~pend_qty
    show_var = cart_first & valid & problem.item_var_req & ~pend_var
    var_value = required_variant_value(problem)
    sub0 = jnp.int32(0)
    payload = _slot_payload(problem, sub0, _opening_stated(problem, problem.pending, sub0))
    return empty_user_act().replace(
        acts=jnp.zeros(C.N_ACTS, bool).at[A.INFORM].set(True),
        item_valid=cart_first & valid,
        item_desc_form=jnp.where(cart_first & valid, problem.item_desc_form, 0),
        item_desc_key=jnp.where(cart_first & valid, problem.item_desc_key, -1),
        item_qty=jnp.where(show_qty, problem.item_qty, -1),
        item_var_attr=jnp.where(show_var, problem.item_var_attr, -1),
        item_var_value=jnp.where(show_var, var_value, 0.0),
        intro_env=sub_env(problem, sub0),
        n_subgoals=jnp.where(is_journey, (problem.sub_env >= 0).sum(), 0).astype(jnp.int32),
        **payload,
    )
