"""SPEC §13 invariants 1, 2, 5 and 6 for every family, from one shared mixed rollout
(conftest ``suite``: 5 episodes per d per family per agent; 200 with --runslow)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import SUITE_AGENTS
from ecomjax import constants as C
from ecomjax.testing import check_reward_ranges, suite_part

TM = C.Termination
EMPTY_SCORES = ("PD", "SUB", "CART", "BUNDLE", "JOURNEY")  # §13.5: -0.60 exactly


def _part(suite, env: str, agent: str):
    return suite_part(suite, env, agent, SUITE_AGENTS)


@pytest.mark.parametrize("env", C.ENV_NAMES)
def test_oracle_reaches_is_correct(suite, env):
    d, st = _part(suite, env, "oracle")
    r = st.reward
    check_reward_ranges(r)
    ok = np.asarray(r.is_correct)
    print(f"{env} oracle IsCorrect {ok.sum()}/{ok.size}")
    bad = np.flatnonzero(~ok)
    assert ok.mean() >= 0.99, f"{env}: {bad.size} failures at d={d[bad].tolist()}"
    assert (np.asarray(st.dialogue.turn) <= np.asarray(st.problem.t_max)).all()
    # The oracle uses only ids that tools returned, and never breaks the action schema.
    assert (np.asarray(r.hard_fail) == 0).all()
    assert (np.asarray(r.r_hall) == 0).all()


@pytest.mark.parametrize("env", C.ENV_NAMES)
def test_silent_agent_scores_exactly_minus_090(suite, env):
    _, st = _part(suite, env, "silent")
    np.testing.assert_allclose(np.asarray(st.reward.r_total), -0.90, atol=1e-6)
    assert (np.asarray(st.dialogue.termination) == TM.T_MAX).all()
    assert not np.asarray(st.reward.is_correct).any()


@pytest.mark.parametrize("env", C.ENV_NAMES)
def test_immediate_empty_answer_scores_low(suite, env):
    _, st = _part(suite, env, "empty")
    r = st.reward
    check_reward_ranges(r)
    assert not np.asarray(r.is_correct).any()
    if env in EMPTY_SCORES:
        np.testing.assert_allclose(np.asarray(r.r_total), -0.60, atol=1e-6)


@pytest.mark.parametrize("env", C.ENV_NAMES)
def test_random_agent_stays_within_bounds(suite, env):
    d, st = _part(suite, env, "random")
    _, orc = _part(suite, env, "oracle")
    r = st.reward
    check_reward_ranges(r)
    ok = np.asarray(r.is_correct)
    low, high = ok[d < 4], ok[d >= 4]
    print(f"{env} random IsCorrect {ok.sum()}/{ok.size}; mean r_total {r.r_total.mean():.3f}")
    assert low.mean() <= 0.25 and high.mean() <= 0.10
    if ok.size >= 21 * 200:  # the full sweep: the bound of §13.6 per (env, d)
        for level in range(21):
            assert ok[d == level].mean() <= (0.25 if level < 4 else 0.10), (env, level)
    gap = float(np.asarray(orc.reward.r_total).mean() - np.asarray(r.r_total).mean())
    assert gap >= 0.5, f"{env}: random mean r_total only {gap:.3f} below the oracle's"
