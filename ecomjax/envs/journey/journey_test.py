"""JOURNEY: the agenda rules (§8.8), the generator's shared world, and the oracle sweep."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import SUITE_AGENTS
from ecomjax import constants as C
from ecomjax.agents.oracle import make_oracle
from ecomjax.core import _init_dialogue
from ecomjax.difficulty import AxisOverrides
from ecomjax.envs.journey.agenda import agenda
from ecomjax.envs.journey.generator import generate
from ecomjax.rollout import run_batch_jit
from ecomjax.testing import suite_part
from ecomjax.types import EnvParams, empty_action, empty_problem

E = C.Env
MS = C.MAX_SUBGOALS


def _situation(envs, introduced, addressed, active, interrupted=()):
    problem = empty_problem().replace(
        env=jnp.int32(E.JOURNEY), sub_env=jnp.array(envs + [-1] * (MS - len(envs)), jnp.int32)
    )
    mask = lambda idx: jnp.zeros(MS, bool).at[jnp.array(list(idx) or [MS])].set(True, mode="drop")
    dlg = _init_dialogue(problem).replace(
        introduced=mask(introduced),
        addressed=mask(addressed),
        interrupted=mask(interrupted),
        active=jnp.int32(active),
        turn=jnp.int32(3),
    )
    return problem, dlg


def _answering(sub):
    a = empty_action()
    env = jnp.full(MS, -1, jnp.int32)
    if sub is not None:
        env = env.at[sub].set(0)
    return a.replace(
        answer=a.answer.replace(
            present=jnp.bool_(sub is not None),
            done=jnp.bool_(False),
            sub=a.answer.sub.replace(env=env),
        )
    )


NEVER = EnvParams(overrides=AxisOverrides(p_switch=0.0))
ALWAYS = EnvParams(overrides=AxisOverrides(p_switch=1.0))


def test_rule1_introduces_the_next_subgoal_then_done():
    problem, dlg = _situation([0, 2, 5], introduced=[0], addressed=[], active=0)
    ag = agenda(problem, dlg, _answering(0), jax.random.key(0), NEVER)
    assert bool(ag.switch) and bool(ag.intro) and int(ag.target) == 1 and int(ag.active) == 1
    problem, dlg = _situation([0, 2, 5], introduced=[0, 1, 2], addressed=[0, 1], active=2)
    ag = agenda(problem, dlg, _answering(2), jax.random.key(0), ALWAYS)
    assert bool(ag.done) and not bool(ag.switch)


def test_rule2_resumes_the_oldest_open_subgoal():
    problem, dlg = _situation([0, 2, 5, 3], introduced=[0, 1, 2], addressed=[], active=2)
    ag = agenda(problem, dlg, _answering(2), jax.random.key(0), ALWAYS)
    assert bool(ag.switch) and not bool(ag.intro) and int(ag.target) == 0


def test_rule3_switches_mid_task_once_per_subgoal():
    problem, dlg = _situation([0, 2, 5], introduced=[0], addressed=[], active=0)
    working = _answering(None).replace(tool=empty_action().tool.at[0].set(C.Tool.ORDER_LIST))
    ag = agenda(problem, dlg, working, jax.random.key(0), ALWAYS)
    assert bool(ag.switch) and bool(ag.intro) and int(ag.target) == 1
    assert bool(ag.interrupted[0])
    # A silent turn (no call, no answer) is never interrupted.
    ag = agenda(problem, dlg, _answering(None), jax.random.key(0), ALWAYS)
    assert not bool(ag.switch)
    # An interrupted sub-goal is never interrupted again.
    problem, dlg = _situation([0, 2, 5], introduced=[0, 1], addressed=[], active=0, interrupted=[0])
    ag = agenda(problem, dlg, working, jax.random.key(0), ALWAYS)
    assert not bool(ag.switch)
    # Without any switch probability nothing happens mid-task.
    problem, dlg = _situation([0, 2, 5], introduced=[0], addressed=[], active=0)
    ag = agenda(problem, dlg, _answering(None), jax.random.key(0), NEVER)
    assert not bool(ag.switch) and not bool(ag.done)


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(2, 5),
    intro=st.integers(1, 5),
    addr=st.lists(st.booleans(), min_size=5, max_size=5),
    now=st.integers(-1, 4),
    seed=st.integers(0, 2**16),
)
def test_agenda_invariants(n, intro, addr, now, seed):
    """Introductions go in index order, the active sub-goal is introduced, DONE only when
    every sub-goal is addressed, and introduced/addressed never shrink."""
    intro = min(intro, n)
    envs = [0, 1, 2, 3, 4][:n]
    addressed = [i for i in range(intro) if addr[i]]
    open_ = [i for i in range(intro) if i not in addressed]
    active = open_[-1] if open_ else intro - 1
    problem, dlg = _situation(envs, list(range(intro)), addressed, active)
    answered = now if 0 <= now < intro else None
    ag = agenda(problem, dlg, _answering(answered), jax.random.key(seed), ALWAYS)
    introduced = np.asarray(ag.introduced)
    k = int(introduced.sum())
    assert introduced[:k].all() and not introduced[k:].any()
    assert k >= intro and introduced[int(ag.active)]
    assert (np.asarray(ag.addressed) >= np.asarray(dlg.addressed)).all()
    if bool(ag.done):
        assert np.asarray(ag.addressed)[:n].all() and k == n


def test_generator_draws_distinct_families_in_one_world(suite):
    """From the shared suite's JOURNEY episodes (conftest), so no extra compile."""
    d, st = suite_part(suite, "JOURNEY", "oracle", SUITE_AGENTS)
    p = st.problem
    envs = np.asarray(p.sub_env)
    for row, level in zip(envs, d, strict=True):
        live = row[row >= 0]
        assert len(live) == min(5, 2 + level // 4)
        assert len(set(live)) == len(live) and E.JOURNEY not in live
    want = np.minimum(5, 2 + d // 4) * (4 + d // 2)
    assert (np.asarray(p.t_max) == want).all()
    # No product serves two sub-goals: targets, originals, witnesses and order lines.
    for i in range(len(d)):
        ids = np.concatenate(
            [
                np.asarray(p.item_pid[i]),
                np.asarray([p.pd_target[i], p.sub_original[i], p.sub_witness[i], p.ret_witness[i]]),
                np.asarray(p.line_pid[i]).reshape(-1),
            ]
        )
        ids = ids[ids >= 0]
        assert len(set(ids.tolist())) == len(ids)
    # RETURN and STATUS in one journey target distinct orders.
    both = (envs == E.RETURN).any(1) & (envs == E.STATUS).any(1)
    assert both.any()
    assert (np.asarray(p.ret_order)[both] != np.asarray(p.status_order)[both]).all()


@pytest.fixture(scope="module")
def sweep(catalog, params, request):
    seeds = 10 if not request.config.getoption("--runslow") else 200
    n = 21 * seeds
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(2024), i))(jnp.arange(n))
    d = jnp.arange(n) % 21
    res = run_batch_jit(catalog, keys, d, generate, make_oracle((E.JOURNEY,)), params)
    return d, res


@pytest.fixture(scope="module")
def shocked(catalog):
    """JOURNEY oracle episodes under a high shock hazard (so many shocks land while other
    sub-goals' plans act, and spoiled answers get repaired), replayed turn by turn. Each
    turn also runs the batched oracle (``act_batch``, 5-lane chunks so most plans take
    several chunks) on the same memory and observation and counts the lanes where its
    memory or action differs from the per-lane ``act``'s."""
    from ecomjax.core import reset
    from ecomjax.envs.journey import oracle as journey_oracle
    from ecomjax.rollout import AGENT_STREAM, max_turns_for, step_batch

    params = EnvParams(overrides=AxisOverrides(shock_hazard=0.3))
    b, n = 21 * 12, catalog.n_products
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(77), i))(jnp.arange(b))
    d = jnp.arange(b, dtype=jnp.int32) % 21
    agent = make_oracle((E.JOURNEY,))
    ranked = jnp.array([E.PD, E.SUB])

    @jax.jit
    def replay(keys, d):
        problems = jax.vmap(generate, (0, None, 0, None))(keys, catalog, d, params)
        states, ts = jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, params)
        akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
        memory = jax.vmap(agent.init, (0, 0, None))(akeys, ts.observation, catalog)

        def turn(carry, t):
            states, obs, memory, ever, bad, stored, events, mismatch, several = carry
            live = states.dialogue.termination == C.Termination.RUNNING
            ev = obs.events
            ever = jax.vmap(lambda e, x: e.at[jnp.where(x >= 0, x, n)].set(True, mode="drop"))(
                ever, ev
            )
            k = jax.vmap(lambda key: jax.random.fold_in(key, t))(akeys)
            old = memory
            memory, act = jax.vmap(agent.act, (0, 0, 0, None))(k, memory, obs, catalog)
            mem_b, act_b = journey_oracle.act_batch(old["JOURNEY"], obs, catalog, chunk=5)
            differ = jnp.zeros(b, bool)
            for x, y in zip(
                jax.tree_util.tree_leaves((memory["JOURNEY"], act)),
                jax.tree_util.tree_leaves((mem_b, act_b)),
                strict=True,
            ):
                if jnp.issubdtype(x.dtype, jnp.floating):  # bit for bit, NaN filters too
                    x, y = (jax.lax.bitcast_convert_type(v, jnp.int32) for v in (x, y))
                differ = differ | (x != y).reshape(b, -1).any(1)
            mismatch = mismatch + (live & differ)
            prep = jax.vmap(journey_oracle._prepare)(old["JOURNEY"], obs)
            several = several + (live & (prep.need.sum(1) > 1))
            sub = act.answer.sub
            entry = (live & act.answer.present)[:, None] & jnp.isin(sub.env, ranked)
            ids = sub.rec
            named = jax.vmap(lambda e, x: e[jnp.clip(x, 0, n - 1)] & (x >= 0))(ever, ids)
            bad = bad + (entry[:, :, None] & named).sum((1, 2))
            stored = stored + entry.sum(1)
            events = events + jnp.where(live, (ev >= 0).sum(1), 0)
            states, ts = step_batch(catalog, states, act, params, live, (int(E.JOURNEY),))
            carry = (states, ts.observation, memory, ever, bad, stored, events, mismatch, several)
            return carry, None

        z = jnp.zeros(b, jnp.int32)
        carry = (states, ts.observation, memory, jnp.zeros((b, n), bool), z, z, z, z, z)
        carry, _ = jax.lax.scan(turn, carry, jnp.arange(max_turns_for([E.JOURNEY])))
        return (problems.sub_env,) + carry[4:]

    return tuple(np.asarray(x) for x in replay(keys, d))


def test_oracle_never_stores_a_ranked_answer_naming_a_reported_shock(shocked):
    """A PD/SUB answer the JOURNEY oracle stores or re-makes names no product any earlier
    turn's shock events reported. It failed with the 256-id shock ring and 32-id per-plan
    view this replaced."""
    sub_env, bad, stored, events, _, _ = shocked
    b = len(bad)
    n_ranked = np.isin(sub_env, [E.PD, E.SUB]).sum(1)
    assert events.sum() > 10 * b  # the hazard really shocks
    assert (stored > n_ranked).sum() > b // 10  # spoiled answers really get re-made
    assert bad.sum() == 0, f"{(bad > 0).sum()} of {b} journeys stored a shocked product"
    print(f"events {events.sum()}, re-made {(stored > n_ranked).sum()} of {b}")


def test_batched_oracle_equals_the_per_lane_oracle_on_every_turn(shocked):
    """``act_batch`` runs each sub-goal plan only on the lanes that read it; on every live
    turn of these journeys (repair and closing turns included) its memory and action equal
    ``act``'s, bit for bit."""
    *_, mismatch, several = shocked
    assert several.sum() > 0  # closing turns that need two or three plans occur
    assert mismatch.sum() == 0, f"{(mismatch > 0).sum()} journeys differ"
