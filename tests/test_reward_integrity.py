"""SPEC v1.1 §7 and invariant 14: a never-retrieved id earns no task credit anywhere, U
holds every stored answer entry, and JOURNEY's CART sub-goal needs its own sub-answer.

The oracle episodes come from the shared suite rollout (conftest ``suite``), so the only
compiles here are the memoriser's replay and the verifier."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import SUITE_AGENTS
from ecomjax import constants as C
from ecomjax.actions import make_action
from ecomjax.agents.memoriser import ID_FAMILIES, memo_from, play_memorised
from ecomjax.core import reset, step, verify
from ecomjax.registry import family
from ecomjax.rollout import max_turns_for
from ecomjax.testing import suite_part

E = C.Env
_verify = jax.jit(jax.vmap(lambda cat, s, p: verify(cat, s, p), (None, 0, None)), static_argnums=2)


def _oracle(suite, env):
    return suite_part(suite, env, "oracle", SUITE_AGENTS)


@pytest.fixture(scope="module")
def memorised(suite, catalog, params):
    """(env, d, oracle final states, memo, memoriser final states) over every id family,
    replayed as ONE mixed batch (one compile)."""
    parts = [(env, *_oracle(suite, env)) for env in ID_FAMILIES]
    states = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *[p[2] for p in parts])
    memo = jax.vmap(memo_from)(states)
    play = jax.jit(jax.vmap(play_memorised, (None, 0, 0, None, 0, None)), static_argnums=(3, 5))
    out = play(catalog, states.key, states.problem, params, memo, max_turns_for([E.JOURNEY]))
    envs = np.concatenate([[env] * d.shape[0] for env, d, _ in parts])
    d = np.concatenate([d for _, d, _ in parts])
    return envs, d, states, memo, out


@pytest.mark.parametrize("env", ID_FAMILIES)
def test_memoriser_scores_below_the_oracle(memorised, env):
    """Invariant 14: answering with the oracle's final ids (and making its cart / return
    calls) at once, never retrieving them, is never IsCorrect where the oracle used an id,
    and its mean r_total there is strictly below the oracle's."""
    envs, d, orc, memo, mem = memorised
    sel = (envs == env) & np.asarray(memo.uses_ids)
    assert sel.sum() >= 10, f"{env}: too few episodes with ids to compare"
    ok_o = np.asarray(orc.reward.is_correct)[sel]
    ok_m = np.asarray(mem.reward.is_correct)[sel]
    r_o = np.asarray(orc.reward.r_total)[sel]
    r_m = np.asarray(mem.reward.r_total)[sel]
    print(
        f"{env}: oracle {ok_o.mean():.2f} / {r_o.mean():+.3f}, memoriser "
        f"{ok_m.mean():.2f} / {r_m.mean():+.3f} (IsCorrect / mean r_total, n={sel.sum()})"
    )
    assert ok_o.mean() >= 0.99  # the comparison means something only against a solver
    assert not ok_m.any(), f"{env}: memoriser IsCorrect at d={d[sel][ok_m].tolist()}"
    assert r_m.mean() < r_o.mean()
    # It did play its hand: every episode ended without a hard fail, and every id it used
    # counts as hallucinated.
    assert (np.asarray(mem.reward.hard_fail)[sel] == 0).all()
    assert (np.asarray(mem.reward.r_hall)[sel] < 0).all()


def _flip_first_answer_id(state, rec):
    """The state with the first id of ``rec`` marked hallucinated at its first use (it was
    recorded there when the answer was stored, so |U| does not change)."""
    w = state.world
    pid = rec[jnp.argmax(rec >= 0)]
    hit = (w.used == pid) & (jnp.arange(C.MAX_USED_IDS) < w.n_used)
    return state.replace(world=w.replace(used_hall=w.used_hall | hit))


@pytest.mark.parametrize("env", ["PD", "SUB", "BUNDLE", "JOURNEY"])
def test_a_hallucinated_recommended_id_loses_task_credit(suite, catalog, params, env):
    """Invariant 7 under v1.1: one seen recommended id turned into a hallucinated one lowers
    r_hall by exactly 1/|U| and r_task too (PD/SUB: rel 0 and unavailable; BUNDLE: an
    invalid token; JOURNEY: inside a sub-answer)."""
    _, st = _oracle(suite, env)
    if env == "JOURNEY":
        sub = st.dialogue.sub_answers
        has = (sub.env[..., None] >= 0) & (sub.rec >= 0)
        which = jnp.argmax(has.any(-1), -1)
        rec = jnp.take_along_axis(sub.rec, which[:, None, None], 1)[:, 0]
        keep = np.asarray(has.any((-2, -1)))
    else:
        rec = st.dialogue.answer.main.rec
        keep = np.asarray((rec >= 0).any(-1))
    keep = keep & np.asarray(st.reward.is_correct)
    st = jax.tree_util.tree_map(lambda x: x[np.flatnonzero(keep)], st)
    rec = rec[np.flatnonzero(keep)]
    assert keep.sum() >= 10
    before = _verify(catalog, st, params)
    after = _verify(catalog, jax.vmap(_flip_first_answer_id)(st, rec), params)
    n_u = np.asarray(st.world.n_used).astype(np.float32)
    np.testing.assert_allclose(
        np.asarray(after.r_hall), np.asarray(before.r_hall) - 1.0 / n_u, rtol=0, atol=1e-6
    )
    assert (np.asarray(after.r_task) < np.asarray(before.r_task)).all()
    assert (np.asarray(after.r_total) < np.asarray(before.r_total) - 0.10 / n_u + 1e-6).all()
    if env == "BUNDLE":  # one category is now missing
        assert not np.asarray(after.is_correct).any()


def test_journey_cart_needs_a_stored_sub_answer(suite, catalog, params):
    """SPEC §8.8 v1.1: with the CART sub-answer nulled, the same cart scores r_task_i = -1."""
    _, st = _oracle(suite, "JOURNEY")
    is_cart = np.asarray(st.problem.sub_env) == E.CART
    keep = np.flatnonzero(is_cart.any(-1) & np.asarray(st.reward.is_correct))
    assert keep.size >= 5
    st = jax.tree_util.tree_map(lambda x: x[keep], st)
    sub = st.dialogue.sub_answers
    nulled = jnp.where(jnp.asarray(is_cart[keep]), -1, sub.env)
    cut = st.replace(dialogue=st.dialogue.replace(sub_answers=sub.replace(env=nulled)))
    before, after = _verify(catalog, st, params), _verify(catalog, cut, params)
    n_sub = (np.asarray(st.problem.sub_env) >= 0).sum(-1)
    assert not np.asarray(after.is_correct).any()
    np.testing.assert_allclose(
        np.asarray(before.r_task) - np.asarray(after.r_task), 2.0 / n_sub, atol=1e-5
    )


def _journey_with_pd_first(catalog, params):
    gen = jax.jit(family("JOURNEY").generate, static_argnums=3)
    for seed in range(200):
        key = jax.random.key(seed)
        prob = gen(key, catalog, jnp.int32(6), params)
        if int(prob.sub_env[0]) == E.PD:
            return key, prob
    raise AssertionError("no JOURNEY problem opens with PD")


def _answer_sub0(catalog, ids, done: bool, env: int):
    a = make_action(answer_env=E.JOURNEY, done=done, embed_dim=catalog.embed_dim)
    sub = a.answer.sub
    rec = jnp.full(C.MAX_ANSWER_IDS, -1, jnp.int32).at[: len(ids)].set(jnp.asarray(ids, jnp.int32))
    sub = sub.replace(env=sub.env.at[0].set(env), rec=sub.rec.at[0].set(rec))
    return a.replace(answer=a.answer.replace(sub=sub))


def test_a_journey_entry_stored_then_nulled_stays_in_u_and_the_safety_guard(catalog, params):
    """SPEC §7 v1.1: an entry of never-seen ids stored with done false, then nulled, is
    still scored, so it counts in U and the safety guard reads it."""
    key, prob = _journey_with_pd_first(catalog, params)
    stp = jax.jit(step, static_argnums=3)
    ids = [3, 5, 7]  # never delivered: no tool ran
    state, _ = reset(key, catalog, prob, params)
    state, _ = stp(catalog, state, _answer_sub0(catalog, ids, False, E.PD), params)
    state, _ = stp(catalog, state, _answer_sub0(catalog, [], True, -1), params)
    r = state.reward
    assert int(state.dialogue.termination) == C.Termination.AGENT_DONE
    assert float(r.r_hall) == -1.0 and not bool(r.is_correct)
    # The same trajectory with the first id's category denied is a safety violation.
    cat = int(catalog.category[ids[0]])
    unsafe = catalog.replace(cat_denied=catalog.cat_denied.at[cat].set(True))
    state, _ = reset(key, unsafe, prob, params)
    state, _ = stp(unsafe, state, _answer_sub0(unsafe, ids, False, E.PD), params)
    state, _ = stp(unsafe, state, _answer_sub0(unsafe, [], True, -1), params)
    assert int(state.dialogue.hard_fail) == C.HardFail.SAFETY_VIOLATION
    assert float(state.reward.r_total) == -1.0
