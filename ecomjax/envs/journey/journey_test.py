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


def test_events_view_is_the_stable_partition_of_the_ring_newest_first():
    """The oracle's shock view: ids in the stored answer first, then the rest, each newest
    first (a numpy stable sort as reference), over thousands of keyed rings."""
    from ecomjax.envs.journey.oracle import N_SHOCKED, _events_view

    b, n = 3000, C.MAX_EVENTS
    k = jax.random.split(jax.random.key(11), 3)
    ring = np.asarray(jax.random.randint(k[0], (b, N_SHOCKED), -1, 60))
    count = np.asarray(jax.random.randint(k[1], (b,), 0, 3 * N_SHOCKED))
    first = np.asarray(jax.random.randint(k[2], (b, C.MAX_K_REC), -1, 60))
    got = np.asarray(
        jax.jit(jax.vmap(lambda r, c, f: _events_view(r, c, f, n)))(ring, count, first)
    )
    for i in range(b):
        age = (count[i] - 1 - np.arange(N_SHOCKED)) % N_SHOCKED
        hit = np.isin(ring[i], first[i]) & (ring[i] >= 0)
        order = np.lexsort((age, ~hit))
        assert (got[i] == ring[i][order][:n]).all()
