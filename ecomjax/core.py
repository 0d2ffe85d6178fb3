"""reset and step over the unified episode state (SPEC §4.3), shared by every family.

Both are pure functions of one episode; batch them with ``jit(vmap(...))``. A terminated
episode is absorbing: further steps change nothing and pay nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax import exposure as X
from ecomjax import reward as RW
from ecomjax.catalog.types import Catalog
from ecomjax.customer import opening, reply
from ecomjax.gates import TurnGates
from ecomjax.reward import answer_ids
from ecomjax.shocks import apply_shocks
from ecomjax.tools.execute import mark_seen, run_tools
from ecomjax.tools.search import resolve_searches
from ecomjax.tools.validate import hard_fail_kind
from ecomjax.types import (
    Action,
    Dialogue,
    EnvParams,
    EpisodeState,
    Observation,
    Problem,
    RewardInfo,
    SearchResults,
    TimeStep,
    empty_answer,
    empty_answer_fields,
    empty_results,
    zero_reward,
)
from ecomjax.verify import registered_envs, score
from ecomjax.world import init_world, record_uses, safe

TM = C.Termination
HF = C.HardFail


def _init_dialogue(problem: Problem) -> Dialogue:
    mi = C.MAX_ITEMS
    return Dialogue(
        pending=problem.pending,
        req_final=problem.item_qty,
        presented=jnp.zeros(mi, bool),
        confirmed_fp=jnp.zeros(8, jnp.int32),
        n_confirmed=jnp.int32(0),
        last_issue=jnp.zeros(mi, jnp.int32),
        last_extra=jnp.full(C.MAX_PRESENTED, -1, jnp.int32),
        had_correct=jnp.bool_(False),
        frustration=jnp.int32(0),
        done_emitted=jnp.bool_(False),
        introduced=jnp.zeros(C.MAX_SUBGOALS, bool).at[0].set(True),
        addressed=jnp.zeros(C.MAX_SUBGOALS, bool),
        interrupted=jnp.zeros(C.MAX_SUBGOALS, bool),
        active=jnp.int32(0),
        sub_answers=empty_answer_fields((C.MAX_SUBGOALS,)),
        feedback_confirmed=jnp.zeros(C.MAX_CONFIRMED, bool),
        last_feedback_issues=jnp.zeros(C.MAX_FEEDBACK_ISSUES, bool),
        answer=empty_answer(),
        has_answer=jnp.bool_(False),
        turn=jnp.int32(0),
        t_user=jnp.int32(0),
        termination=jnp.int32(TM.RUNNING),
        hard_fail=jnp.int32(HF.NONE),
    )


def _extras(state: EpisodeState) -> dict:
    r, dlg = state.reward, state.dialogue
    return {
        "env": state.problem.env,
        "d": state.problem.d,
        "r_task": r.r_task,
        "r_eff": r.r_eff,
        "r_hall": r.r_hall,
        "is_correct": r.is_correct,
        "hard_fail": r.hard_fail,
        "f1": r.f1,
        "termination": dlg.termination,
        "turns": dlg.turn,
        "t_user": dlg.t_user,
    }


def _observation(
    state: EpisodeState, params: EnvParams, results, events, n_events, act
) -> Observation:
    p, dlg = state.problem, state.dialogue
    diff = D.difficulty(p.d, params.overrides)
    done = dlg.termination != TM.RUNNING
    return Observation(
        env=p.env if params.disclose_env_id else jnp.int32(-1),
        today=p.today,
        turn=dlg.turn,
        turns_left=jnp.maximum(p.t_max - dlg.turn, 0),
        tool_budget=diff.b_tool,
        results=results,
        events=events,
        n_events=n_events,
        reply=act,
        done=done,
        termination=dlg.termination,
        reward=jax.tree_util.tree_map(
            lambda x: jnp.where(done, x, jnp.zeros_like(x)), state.reward
        ),
    )


def reset(
    key: jax.Array, catalog: Catalog, problem: Problem, params: EnvParams
) -> tuple[EpisodeState, TimeStep]:
    """The episode before turn 1: the opening INFORM is the first observation's reply."""
    # SPEC §8.2: the SUB original is out of stock in every tool from the start.
    n = catalog.n_products
    world = init_world(n, X.capacity(n, params), forced_oos=problem.sub_original)
    state = EpisodeState(
        key=key,
        problem=problem,
        world=world,
        dialogue=_init_dialogue(problem),
        reward=zero_reward(),
    )
    events = jnp.full(C.MAX_EVENTS, -1, jnp.int32)
    obs = _observation(state, params, empty_results(), events, jnp.int32(0), opening(problem))
    ts = TimeStep(obs, jnp.float32(0.0), jnp.bool_(False), jnp.bool_(False), _extras(state))
    return state, ts


def verify(
    catalog: Catalog,
    state: EpisodeState,
    params: EnvParams,
    families: Sequence[int] | None = None,
) -> RewardInfo:
    """Scores a terminated episode from its final world and stored answers (§7).
    ``families`` (static) names the families that may occur, so a one-family batch traces
    only its own verifier (default: every registered family)."""
    p, w, dlg = state.problem, state.world, state.dialogue
    hard = dlg.hard_fail
    sc = score(catalog, p, w, dlg, families)
    r_eff = RW.efficiency(dlg.turn, dlg.t_user, p.t_max).astype(jnp.float32)
    r_hall = RW.hallucination(w).astype(jnp.float32)
    failed = hard != HF.NONE
    zero = jnp.float32(0.0)
    is_cart = p.env == C.Env.CART
    return RewardInfo(
        r_total=RW.compose(sc.r_task, r_eff, r_hall, hard, params),
        r_task=jnp.where(failed, zero, sc.r_task),
        r_eff=jnp.where(failed, zero, r_eff),
        r_hall=jnp.where(failed, zero, r_hall),
        is_correct=~failed & sc.is_correct,
        hard_fail=hard,
        f1=jnp.where(failed | ~is_cart, zero, sc.detail[0]),
        detail=jnp.where(failed, jnp.zeros_like(sc.detail), sc.detail),
    )


def _safety_violation(catalog: Catalog, state: EpisodeState) -> jax.Array:
    """A denied-category product in a scored answer entry or in the cart at termination
    (§4.2). Scored entries include a JOURNEY sub-answer stored earlier and nulled since."""
    ids = jnp.concatenate(
        [
            RW.scored_ids(state.dialogue),
            jnp.where(state.world.cart_no > 0, state.world.cart_pid, -1),
        ]
    )
    known = (ids >= 0) & (ids < catalog.n_products)
    denied = catalog.cat_denied[catalog.category[safe(ids)].astype(jnp.int32)]
    return (known & denied).any()


def _record_answer_ids(world, ans, gates: TurnGates | None):
    """The answer's ids join the used set. Under gates, a batch with no sub-goal ids ranks
    only the main entry's 50 ids (the other 250 are -1), and one without ids skips it."""
    if gates is None:
        return record_uses(world, answer_ids(ans), ans.present)

    def main_only(w):
        return jax.lax.cond(
            gates.main_ids, lambda w: record_uses(w, ans.main.rec, ans.present), lambda w: w, w
        )

    return jax.lax.cond(
        gates.sub_ids, lambda w: record_uses(w, answer_ids(ans), ans.present), main_only, world
    )


def _store_answer(dlg: Dialogue, world, action: Action, gates: TurnGates | None = None):
    ans = action.answer
    world = _record_answer_ids(world, ans, gates)
    # JOURNEY scores each sub-goal's latest non-null entry across all stored answers.
    fresh = ans.present & (ans.sub.env != -1)  # [MAX_SUBGOALS]
    sub_answers = jax.tree_util.tree_map(
        lambda n, o: jnp.where(fresh.reshape(fresh.shape + (1,) * (n.ndim - 1)), n, o),
        ans.sub,
        dlg.sub_answers,
    )
    dlg = dlg.replace(
        answer=jax.tree_util.tree_map(lambda n, o: jnp.where(ans.present, n, o), ans, dlg.answer),
        has_answer=dlg.has_answer | ans.present,
        sub_answers=sub_answers,
    )
    return dlg, world


def turn_hard_fail(state: EpisodeState, action: Action, params: EnvParams) -> jax.Array:
    """int32 HardFail of a turn's action (§4.2); a batched driver reads it before the step."""
    diff = D.difficulty(state.problem.d, params.overrides)
    return hard_fail_kind(action, state.problem.env, diff.b_tool)


def step(
    catalog: Catalog,
    state: EpisodeState,
    action: Action,
    params: EnvParams,
    search: SearchResults | None = None,
    families: Sequence[int] | None = None,
    present: Sequence[int] | None = None,
    gates: TurnGates | None = None,
    search_masked: bool = False,
    mark_search: bool = True,
) -> tuple[EpisodeState, TimeStep]:
    """One agent turn. ``search`` may be resolved beforehand (batch-skippable stage or the
    host's FAISS); otherwise the device retrieval runs here. ``families`` (static) are the
    families the batch may hold (default: every registered family); an empty tuple skips
    scoring, for drivers that verify per family slice after the episode (``verify``).
    ``present`` (static, default ``families`` or all) narrows the customer to the
    families the batch may hold.
    ``gates`` (unbatched) say which parts of the turn any episode of a batch needs, from a
    batched driver (``rollout.step_batch``); see ``ecomjax.gates``. ``search_masked``
    (static) says ``search`` holds no rows for an episode that hard-fails this turn or has
    ended (``step_batch`` resolves only the others'), so they need no masking here.
    ``mark_search=False`` (static) leaves the search rows out of Seen, for a batched driver
    that marks them itself (nothing later in the turn reads Seen).

    There is no step key: every draw comes from the episode key (SPEC §12), so the same
    seed and action sequence replay bit-identically."""
    if families is None:
        families = registered_envs()
    if search is None:
        search = resolve_searches(catalog, state, action, params)
    p = state.problem
    dlg0 = state.dialogue
    running = dlg0.termination == TM.RUNNING
    diff = D.difficulty(p.d, params.overrides)

    # 1. Validate the whole action.
    hard = turn_hard_fail(state, action, params)
    failed = hard != HF.NONE
    # 2-3. Run the calls in order (discarded on a hard fail: no call of the turn runs).
    calls = None if gates is None else gates.calls
    world, scratch, results = run_tools(catalog, p, state.world, action, search, calls)
    world = jax.tree_util.tree_map(lambda a, b: jnp.where(failed, b, a), world, state.world)
    # A hard-failed turn delivers nothing, nor does a step after termination (absorbing):
    # one pass over the result rows for both.
    delivered = running & ~failed
    # SPEC §5.1 keys each distractor by the episode's search-call counter, so a search
    # repeated in a later turn draws afresh: count the calls this turn delivered.
    n_calls = (action.tool == C.Tool.CATALOG_SEARCH).sum(dtype=jnp.int32)
    world = world.replace(n_searches=world.n_searches + jnp.where(delivered, n_calls, 0))

    def mask(rows, empty):
        return jax.tree_util.tree_map(lambda a, b: jnp.where(delivered, a, b), rows, empty)

    if search_masked:  # the search rows are already empty there: skip the widest arrays
        empty = empty_results().replace(search=None)
        results = mask(results.replace(search=None), empty).replace(search=results.search)
    else:
        results = mask(results, empty_results())
    # 4. Count the turn and store the answer.
    turn = dlg0.turn + 1
    dlg, world = _store_answer(dlg0.replace(turn=turn), world, action, gates)
    agent_done = action.answer.present & action.answer.done & ~failed
    t_max_hit = ~failed & ~agent_done & (turn >= p.t_max)
    live = ~failed & ~agent_done & ~t_max_hit
    # 6. Stock shocks, against Seen as it was before this turn's results.
    shocked_world, events, n_events, shocked_items = apply_shocks(
        state.key, catalog, p, world, turn, diff.shock_hazard
    )
    world = jax.tree_util.tree_map(lambda a, b: jnp.where(live, a, b), shocked_world, world)
    events = jnp.where(live, events, -1)
    n_events = jnp.where(live, n_events, 0)
    shocked_items = shocked_items & live
    # 7. The customer's reply.
    pending_done = action.answer.present & ~action.answer.done & (p.env != C.Env.JOURNEY)
    rep = reply(
        catalog,
        p,
        state.world,
        world,
        dlg,
        scratch,
        action,
        shocked_items,
        pending_done,
        state.key,
        params,
        tuple(present if present is not None else (families or registered_envs())),
    )
    dlg = jax.tree_util.tree_map(lambda a, b: jnp.where(live, a, b), rep.dialogue, dlg)
    act = jax.tree_util.tree_map(lambda a: jnp.where(live, a, jnp.zeros_like(a)), rep.act)
    quit_ = live & rep.quit
    dlg = dlg.replace(
        t_user=dlg.t_user + (live & ~rep.quit & rep.act.user_caused).astype(jnp.int32)
    )
    # The results delivered now become Seen for later turns.
    world = mark_seen(world, results, catalog.n_products, calls, mark_search)
    termination = jnp.select(
        [failed, agent_done, t_max_hit, quit_],
        [TM.HARD_FAIL, TM.AGENT_DONE, TM.T_MAX, TM.USER_QUIT],
        TM.RUNNING,
    ).astype(jnp.int32)
    dlg = dlg.replace(termination=termination, hard_fail=hard)
    new = state.replace(world=world, dialogue=dlg)
    # 8. On termination: safety guard, then the verifier and the reward.
    ended = termination != TM.RUNNING
    unsafe = ended & ~failed & _safety_violation(catalog, new)
    dlg = dlg.replace(
        termination=jnp.where(unsafe, TM.HARD_FAIL, termination),
        hard_fail=jnp.where(unsafe, HF.SAFETY_VIOLATION, hard),
    )
    termination = dlg.termination
    new = new.replace(dialogue=dlg)
    reward = verify(catalog, new, params, families) if families else zero_reward()
    new = new.replace(
        reward=jax.tree_util.tree_map(lambda a, b: jnp.where(ended, a, b), reward, zero_reward())
    )
    # Absorbing once terminated: the old state stays, and nothing is paid or delivered.
    state_out = jax.tree_util.tree_map(lambda a, b: jnp.where(running, a, b), new, state)
    events = jnp.where(running, events, -1)
    act = jax.tree_util.tree_map(lambda a: jnp.where(running, a, jnp.zeros_like(a)), act)
    obs = _observation(state_out, params, results, events, n_events * running, act)
    ts_out = TimeStep(
        observation=obs,
        reward=jnp.where(running & ended, new.reward.r_total, 0.0).astype(jnp.float32),
        terminated=running & ended & (termination != TM.T_MAX),
        truncated=running & (termination == TM.T_MAX),
        extras=_extras(state_out),
    )
    return state_out, ts_out
