"""The JOURNEY oracle (SPEC §8.9): each sub-goal's own plan, one sub-goal at a time.

It finishes the plan it is working on before it turns to another sub-goal, even when the
customer switches mid-task (the agenda only tracks which sub-goals have answers, so the
agent may finish what it started); each plan therefore always reads its own tool results.
Each entry ends with a stored ``subgoal_answers[i]`` (done = false, except the last).

Two details keep the plans sound over a long conversation:
- everything the customer has stated is kept per sub-goal and shown to the plan whenever
  it runs, so values told while another plan was acting are not lost;
- stock shocks keep happening after a PD or SUB answer is stored, and the episode is scored
  against stock at termination. Every turn's shock events are struck from the PD and SUB
  plans' cards whichever plan acts (a plan's own memory moves only on its own turns), and
  a stored answer that names a shocked product is marked spoiled. Once every sub-goal has
  an answer, a spoiled PD/SUB answer is re-made: its plan runs from its verified cards in
  the closing turn itself, so no shock can follow it; a plan left with too few valid cards
  first gets a turn to search again. (An earlier version kept a 256-id ring of shocked ids
  and showed each plan the 32 most relevant: at N = 100k a journey sees ~200 shocks, and
  a card shocked during another plan's turns could be re-offered in the repair.)

``act`` runs all seven plans (under ``vmap`` a per-lane choice computes every branch);
``act_batch``, which batched rollouts use, runs each plan only on the lanes that read it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.envs.pd.oracle import drop_shocked
from ecomjax.envs.subgoal_families import SUBGOAL_FAMILIES
from ecomjax.lane_dispatch import run_where
from ecomjax.types import (
    Action,
    Observation,
    UserAct,
    empty_action,
    empty_answer_fields,
    empty_results,
    empty_user_act,
)

E = C.Env
MS = C.MAX_SUBGOALS
FAMILIES: tuple[E, ...] = tuple(f.env for f in SUBGOAL_FAMILIES)
PLANS = {f.env: f.oracle for f in SUBGOAL_FAMILIES}
RANKED_PLANS: tuple[E, ...] = (E.PD, E.SUB)  # families whose stored answer a shock can spoil
RANKED = jnp.array(RANKED_PLANS)
PD_I, SUB_I = FAMILIES.index(E.PD), FAMILIES.index(E.SUB)


@struct.dataclass
class Known:
    """What the customer has stated so far (the reply fields plans read)."""

    slot_stated: jax.Array
    slot_value: jax.Array
    slot_op: jax.Array
    ref_form: jax.Array
    ref_key: jax.Array
    cats: jax.Array
    fact_field: jax.Array
    fact_value: jax.Array
    item_valid: jax.Array
    item_desc_form: jax.Array
    item_desc_key: jax.Array
    item_qty: jax.Array
    item_var_attr: jax.Array
    item_var_value: jax.Array
    item_update: jax.Array  # a sold-out item stays dropped (its qty is then 0)


def _known_from(act: UserAct) -> Known:
    return Known(**{f: getattr(act, f) for f in Known.__dataclass_fields__})


def _fold(k: Known, act: UserAct) -> Known:
    s = act.slot_stated
    said = act.item_valid
    return Known(
        slot_stated=k.slot_stated | s,
        slot_value=jnp.where(s, act.slot_value, k.slot_value),
        slot_op=jnp.where(s, act.slot_op, k.slot_op),
        ref_form=jnp.where(act.ref_form > 0, act.ref_form, k.ref_form),
        ref_key=jnp.where(act.ref_form > 0, act.ref_key, k.ref_key),
        cats=jnp.where((act.cats >= 0).any(), act.cats, k.cats),
        fact_field=jnp.where((act.fact_field >= 0).any(), act.fact_field, k.fact_field),
        fact_value=jnp.where((act.fact_field >= 0).any(), act.fact_value, k.fact_value),
        item_valid=k.item_valid | said,
        item_desc_form=jnp.where(said, act.item_desc_form, k.item_desc_form),
        item_desc_key=jnp.where(said, act.item_desc_key, k.item_desc_key),
        item_qty=jnp.where(said & (act.item_qty >= 0), act.item_qty, k.item_qty),
        item_var_attr=jnp.where(
            said & (act.item_var_attr >= 0), act.item_var_attr, k.item_var_attr
        ),
        item_var_value=jnp.where(
            said & (act.item_var_attr >= 0), act.item_var_value, k.item_var_value
        ),
        item_update=k.item_update | act.item_update,
    )


@struct.dataclass
class JourneyMemory:
    plans: dict  # family name -> that plan's memory
    known: Known
    sub_env: jax.Array  # int32 [MS], families of the sub-goals introduced so far
    n_subgoals: jax.Array  # int32, L from the opening
    active: jax.Array  # int32
    addressed: jax.Array  # bool [MS], answered by us
    last_actor: jax.Array  # int32, the sub-goal whose plan acted last turn (-1 none)
    working: jax.Array  # int32, the sub-goal being worked on (-1 none)
    spoiled: jax.Array  # bool [MS], a stored PD/SUB answer names a product shocked since
    stored_rec: jax.Array  # int32 [MS, MAX_K_REC], our stored PD/SUB recommendations


def init_memory() -> JourneyMemory:
    return JourneyMemory(
        plans={E(f).name: PLANS[f].init_memory() for f in FAMILIES},
        known=_known_from(empty_user_act()),
        sub_env=jnp.full(MS, -1, jnp.int32),
        n_subgoals=jnp.int32(0),
        active=jnp.int32(0),
        addressed=jnp.zeros(MS, bool),
        last_actor=jnp.int32(-1),
        working=jnp.int32(-1),
        spoiled=jnp.zeros(MS, bool),
        stored_rec=jnp.full((MS, C.MAX_K_REC), -1, jnp.int32),
    )


@struct.dataclass
class Prep:
    """One lane's turn before any plan runs: who acts and which plans it needs."""

    sub_env: jax.Array
    n_sub: jax.Array
    known: Known
    working: jax.Array
    all_done: jax.Array
    spoiled: jax.Array
    slot_of: jax.Array  # int32 [len(FAMILIES)]: each family's sub-goal slot
    chosen: jax.Array  # int32: the family whose plan acts unless a closing repair comes first
    fix: jax.Array  # bool [len(FAMILIES)]: a spoiled stored answer to re-make (PD/SUB only)
    need: jax.Array  # bool [len(FAMILIES)]: the plans whose output this turn reads


def _prepare(mem: JourneyMemory, obs: Observation) -> Prep:
    r = obs.reply
    opened = r.acts[C.Act.INFORM] | r.acts[C.Act.SWITCH]
    # The opening introduces sub-goal 0; a SWITCH introduces or resumes r.active.
    intro_at = jnp.where(r.acts[C.Act.INFORM], 0, r.active)
    sub_env = jnp.where(
        opened & (r.intro_env >= 0) & (jnp.arange(MS) == intro_at), r.intro_env, mem.sub_env
    )
    n_sub = jnp.where(r.n_subgoals > 0, r.n_subgoals, mem.n_subgoals)
    known = _fold(mem.known, r)
    events = obs.events
    named = (mem.stored_rec[:, :, None] == events[None, None, :]) & (events >= 0)
    # Work on one plan until it answers; then on the customer's active sub-goal if open.
    open_ = (sub_env >= 0) & ~mem.addressed
    active = jnp.clip(r.active, 0, MS - 1)
    keep = (mem.working >= 0) & open_[jnp.clip(mem.working, 0, MS - 1)]
    working = jnp.where(
        keep, mem.working, jnp.where(open_[active], active, jnp.argmax(open_))
    ).astype(jnp.int32)
    all_done = mem.addressed.sum() >= jnp.maximum(n_sub, 1)
    spoiled = (mem.spoiled | named.any((1, 2))) & mem.addressed & jnp.isin(sub_env, RANKED)
    fams = jnp.array(FAMILIES, jnp.int32)
    slot_of = jnp.argmax(sub_env[None, :] == fams[:, None], axis=1).astype(jnp.int32)
    # The action comes from the working sub-goal's plan (the first family's when that slot
    # is empty, as ``_pick`` falls back to it); in the closing turns the PD/SUB plans whose
    # stored answers are spoiled run too (repair or re-made answer).
    chosen = sub_env[working]
    chosen = jnp.where(jnp.isin(chosen, fams[1:]), chosen, fams[0])
    fix = spoiled[slot_of] & (sub_env[None, :] == fams[:, None]).any(axis=1)
    fix = fix & jnp.isin(fams, RANKED)
    need = (fams == chosen) | (all_done & fix)
    return Prep(sub_env, n_sub, known, working, all_done, spoiled, slot_of, chosen, fix, need)


def _stuck(prep: Prep, i: int, present) -> jax.Array:
    """A closing turn in which ranked plan ``FAMILIES[i]`` must search again before its
    spoiled answer can be re-made (it produced no answer): that plan acts this turn."""
    return prep.all_done & prep.fix[i] & ~present


def _pick(prep: Prep, actions: dict) -> Action:
    """The acting plan's action: PD's if it is stuck, else SUB's if it is, else the chosen
    plan's (``act_batch`` writes the same choice lane by lane)."""
    s_pd = _stuck(prep, PD_I, actions[E.PD].answer.present)
    s_sub = _stuck(prep, SUB_I, actions[E.SUB].answer.present)
    action = actions[FAMILIES[0]]
    for f in FAMILIES[1:]:
        action = _where(prep.chosen == f, actions[f], action)
    action = _where(s_sub, actions[E.SUB], action)
    return _where(s_pd, actions[E.PD], action)


def _where(c, a, b):
    return jax.tree_util.tree_map(lambda x, y: jnp.where(c, x, y), a, b)


def _run_plan(f: int, plan_mem, last_actor, obs: Observation, known: Known, slot, catalog):
    """Plan ``f`` on what it may see: everything stated so far, and tool results only when
    its own sub-goal acted last turn."""
    own = last_actor == slot
    view = obs.replace(
        env=jnp.int32(f),
        reply=obs.reply.replace(**{k: getattr(known, k) for k in Known.__dataclass_fields__}),
        results=jax.tree_util.tree_map(
            lambda a, b: jnp.where(own, a, b), obs.results, empty_results()
        ),
    )
    return PLANS[f].act(plan_mem, view, catalog, slot)


def act(mem: JourneyMemory, obs: Observation, catalog, sub=0):
    del sub
    prep = _prepare(mem, obs)
    ran = {
        f: _run_plan(
            f, mem.plans[E(f).name], mem.last_actor, obs, prep.known, prep.slot_of[i], catalog
        )
        for i, f in enumerate(FAMILIES)
    }
    outs = {f: a for f, (_, a) in ran.items()}
    ranked = {f: (outs[f].answer.present, outs[f].answer.main) for f in RANKED_PLANS}
    new_plans = [ran[f][0] for f in FAMILIES]
    return _finish(mem, obs, catalog, prep, new_plans, _pick(prep, outs), ranked)


def act_batch(mem: JourneyMemory, obs: Observation, catalog, chunk: int | None = None):
    """``act`` over a batch, running each plan only on the lanes that read its output (one
    or, in closing turns, up to three of the seven), in chunks of ``chunk`` lanes (default
    ``ceil(B / 7)``; ``ecomjax.lane_dispatch``). Each plan writes its action straight into
    one shared buffer on the lanes where it acts (the choice of ``_pick``; PD and SUB go
    first, since a stuck one of them acts instead of the chosen plan), so no lane carries
    seven actions. On a lane whose episode has ended (``obs.done``) no plan runs: its
    action is ignored and its memory never read again. On every other lane the memory and
    action equal ``act``'s."""
    prep = jax.vmap(_prepare)(mem, obs)
    prep = prep.replace(need=prep.need & ~obs.done[:, None])
    b = prep.need.shape[0]
    chunk = chunk or -(-b // len(FAMILIES))
    action = jax.vmap(lambda _: empty_action(catalog.embed_dim))(prep.working)
    no = jnp.zeros(b, bool)
    main0 = jax.vmap(lambda _: empty_answer_fields())(prep.working)
    new_plans, ranked, stuck = [], {}, {E.PD: no, E.SUB: no}
    for i, f in enumerate(FAMILIES):

        def run(plan_mem, last_actor, o, known, p, s_pd, s_sub, i=i, f=f):
            new, a = _run_plan(f, plan_mem, last_actor, o, known, p.slot_of[i], catalog)
            present = a.answer.present
            if f == E.PD:  # stuck PD acts; else the chosen plan, unless SUB is stuck
                s_pd = _stuck(p, i, present)
                acts = s_pd | (p.chosen == f)
            elif f == E.SUB:
                s_sub = _stuck(p, i, present)
                acts = ~s_pd & (s_sub | (p.chosen == f))
            else:
                acts = ~s_pd & ~s_sub & (p.chosen == f)
            values = (new, a, present, a.answer.main, s_pd if f == E.PD else s_sub)
            ranked_f = f in RANKED_PLANS
            return values, (True, acts, ranked_f, ranked_f, ranked_f)

        plan_mem = mem.plans[E(f).name]
        args = (plan_mem, mem.last_actor, obs, prep.known, prep, stuck[E.PD], stuck[E.SUB])
        own_stuck = stuck.get(f, no)
        out = (plan_mem, action, no, main0, own_stuck)
        got = run_where(prep.need[:, i], run, args, out, chunk, masked=True)
        new_plans.append(got[0])
        action = got[1]
        if f in RANKED_PLANS:
            ranked[f] = (got[2], got[3])
            stuck[f] = got[4]
    return jax.vmap(lambda m, o, p, n, a, r: _finish(m, o, catalog, p, n, a, r))(
        mem, obs, prep, new_plans, action, ranked
    )


def _finish(mem: JourneyMemory, obs: Observation, catalog, prep: Prep, new_plans, action, ranked):
    """The turn once the plans have run: ``action`` is the acting plan's (``_pick``),
    ``ranked`` the PD/SUB plans' (answer.present, answer.main)."""
    events = obs.events
    sub_env, n_sub, known = prep.sub_env, prep.n_sub, prep.known
    working, all_done, spoiled = prep.working, prep.all_done, prep.spoiled
    active = jnp.clip(obs.reply.active, 0, MS - 1)
    new_plans = {E(f).name: m for f, m in zip(FAMILIES, new_plans, strict=True)}
    slot_of = {f: prep.slot_of[i] for i, f in enumerate(FAMILIES)}

    # Closing: once every sub-goal has an answer, the spoiled PD/SUB answers are re-made
    # from their plans' verified cards in the closing turn itself (no shock follows a
    # terminal turn). A plan that needs a new search gets a turn for it first.
    fix = {f: prep.fix[FAMILIES.index(f)] for f in RANKED_PLANS}  # one home: _prepare
    ready = {f: ranked[f][0] for f in RANKED_PLANS}
    stuck = {f: fix[f] & ~ready[f] for f in RANKED_PLANS}
    any_stuck = stuck[E.PD] | stuck[E.SUB]
    close = all_done & ~any_stuck
    repair_turn = all_done & any_stuck
    stuck_slot = jnp.where(stuck[E.PD], slot_of[E.PD], slot_of[E.SUB])
    actor = jnp.where(repair_turn, stuck_slot, working).astype(jnp.int32)
    fam = sub_env[actor]

    # Relocate the acting plan's answer into subgoal_answers[actor] (not in a repair turn).
    ans = action.answer
    answering = ans.present & ~close & ~repair_turn
    here = jnp.arange(MS) == actor
    addressed = mem.addressed | (here & answering)
    sub_fields = jax.tree_util.tree_map(lambda s_, m_: s_.at[actor].set(m_), ans.sub, ans.main)
    sub_fields = sub_fields.replace(env=jnp.where(here & answering, fam, -1))
    # The closing turn carries the repaired PD/SUB entries.
    for f in RANKED_PLANS:
        put = close & fix[f] & (jnp.arange(MS) == slot_of[f])
        main_f = ranked[f][1]
        sub_fields = jax.tree_util.tree_map(
            lambda s_, m_, put=put: jnp.where(
                put.reshape(put.shape + (1,) * (s_.ndim - 1)), m_[None], s_
            ),
            sub_fields,
            main_f,
        )
        sub_fields = sub_fields.replace(env=jnp.where(put, f, sub_fields.env))
    # The last plan's answer closes the episode when nothing needs repair.
    last = (addressed.sum() >= n_sub) & ~spoiled.any()
    main = empty_answer_fields().replace(env=jnp.int32(E.JOURNEY))
    answer = ans.replace(
        present=answering | close, done=(answering & last) | close, main=main, sub=sub_fields
    )
    action = jax.tree_util.tree_map(
        lambda a, b: jnp.where(close, a, b),
        empty_action(catalog.embed_dim).replace(has_message=jnp.bool_(True)),
        action,
    )
    is_ask = action.tool == C.Tool.ASK_USER
    action = action.replace(answer=answer, enum_b=jnp.where(is_ask, actor, action.enum_b))
    plans = {}
    for f in FAMILIES:
        name = E(f).name
        commit = (fam == f) | (close & fix.get(f, jnp.bool_(False)))
        kept = mem.plans[name]
        if f in RANKED_PLANS:  # a plan that does not act still loses its shocked cards
            kept = kept.replace(cards=drop_shocked(kept.cards, events))
        plans[name] = jax.tree_util.tree_map(
            lambda a, b, commit=commit: jnp.where(commit, a, b), new_plans[name], kept
        )
    stored = jnp.where(here[:, None] & answering, ans.main.rec[None, : C.MAX_K_REC], mem.stored_rec)
    mem = mem.replace(
        plans=plans,
        known=known,
        sub_env=sub_env,
        n_subgoals=n_sub,
        active=active,
        addressed=addressed,
        last_actor=actor,
        working=working,
        spoiled=jnp.where(here & answering, False, spoiled),
        stored_rec=stored,
    )
    return mem, action
