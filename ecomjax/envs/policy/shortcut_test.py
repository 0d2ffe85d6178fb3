"""SPEC §9.5 rank spread and §13.6b: the POLICY "top rule of the top topic" shortcut stays
at or below 45 % IsCorrect at every d ≥ 2, and no rank position (nor the default) decides
more than 45 % of the questions at any d.

The rates come from a vmapped sweep of generated problems (400 per d; 2,000 with
--runslow), scored by the POLICY verifier; a short rollout shows the agent scores exactly
as that sweep predicts. Bounds are binomial (``rate_exceeds``): a true rate at the bound
passes, while the pre-v1.1 generator (rank 1 deciding ~57 % at d = 3..5 and ~79 % at
d ≥ 6) fails.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.envs.policy.generator import generate
from ecomjax.envs.policy.shortcut import TOP_RULE_VALUE, policy_top_rule_agent, top_rule_value
from ecomjax.envs.policy.verifier import verify
from ecomjax.rollout import run_batch_jit
from ecomjax.testing import rate_exceeds
from ecomjax.types import EnvParams, empty_answer_fields

T = P.TABLES
PARAMS = EnvParams()
BATCH = 4200  # 200 per d: the shape policy_test's problems use, so the compile is shared
BOUND = 0.45
DEFAULT = 0  # position code of "no rule applied: the default"


def _keys(seed: int, n: int) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))


def _score(problems, value: jax.Array) -> jax.Array:
    """The verifier's IsCorrect for answering ``value`` [B] to each problem."""
    ans = jax.vmap(
        lambda v: empty_answer_fields().replace(
            env=jnp.int32(C.Env.POLICY), policy_value=v, policy_ok=jnp.bool_(True)
        )
    )(value)
    one = lambda p, a: verify(None, p, None, None, a, jnp.bool_(True)).is_correct  # noqa: E731
    return jax.vmap(one)(problems, ans)


def answer_position(topic: np.ndarray, rule: np.ndarray, ctx) -> np.ndarray:
    """The rank of the rule that decides each answer (``first`` topics: the winner, or
    DEFAULT when no rule applies). A ``sum`` topic has no deciding rule; it counts at the
    sampled rule's rank, which only ever raises a rank's share."""
    _, _, winner = jax.vmap(P.evaluate_full)(jnp.asarray(topic), ctx)
    winner = np.asarray(winner)
    rank = np.asarray(P.RULE_RANK)
    first = np.where(winner >= 0, rank[np.maximum(winner, 0)], DEFAULT)
    return np.where(T.topic_sum[topic], rank[rule], first)


@pytest.fixture(scope="module")
def sweep(request):
    """(d, shortcut IsCorrect, answer position) over 400 problems per d (2,000 slow)."""
    slow = request.config.getoption("--runslow") or os.environ.get("ECOMJAX_SLOW") == "1"
    gen = jax.jit(jax.vmap(generate, (0, None, 0, None)), static_argnums=3)
    d = jnp.arange(BATCH, dtype=jnp.int32) % (C.D_MAX + 1)
    out = {"d": [], "ok": [], "pos": []}
    for r in range(10 if slow else 2):
        prob = gen(_keys(1500 + r, BATCH), None, d, PARAMS)
        topic, rule = np.asarray(prob.pol_topic), np.asarray(prob.pol_rule)
        out["ok"].append(np.asarray(_score(prob, top_rule_value(prob.pol_topic))))
        out["pos"].append(answer_position(topic, rule, prob.pol_context))
        out["d"].append(np.asarray(d))
    return tuple(np.concatenate(out[k]) for k in ("d", "ok", "pos"))


def test_top_rule_shortcut_at_most_45_percent(sweep):
    """SPEC §13.6b: the top-rule shortcut is IsCorrect in at most 45 % at every d ≥ 2."""
    d, ok, _ = sweep
    rates = [round(float(ok[d == k].mean()), 3) for k in range(C.D_MAX + 1)]
    print("top-rule shortcut IsCorrect by d:", rates)
    for level in range(2, C.D_MAX + 1):
        hit = ok[d == level]
        assert not rate_exceeds(int(hit.sum()), hit.size, BOUND), (level, rates[level])


def test_no_rank_position_decides_more_than_45_percent(sweep):
    """SPEC §9.5: at every d, no fixed rank position, nor the default, is the answer of
    more than 45 % of the questions."""
    d, _, pos = sweep
    for level in range(C.D_MAX + 1):
        at = pos[d == level]
        counts = np.bincount(at, minlength=P.MAX_TOPIC_RULES + 1)
        print(f"d={level}: max share {counts.max() / at.size:.3f} at position {counts.argmax()}")
        for k, n_k in enumerate(counts):
            assert not rate_exceeds(int(n_k), at.size, BOUND), (level, k, n_k / at.size)


def test_shortcut_agent_scores_as_predicted(catalog, params):
    """The agent answers on its first turn with the stated topic's rank-1 value, and is
    IsCorrect exactly where the sweep's verifier call says (10 episodes per d)."""
    n = 10 * (C.D_MAX + 1)
    d = jnp.arange(n, dtype=jnp.int32) % (C.D_MAX + 1)
    res = run_batch_jit(
        catalog, _keys(99, n), d, generate, policy_top_rule_agent, params, None, (C.Env.POLICY,)
    )
    st = res.state
    topic = np.asarray(st.problem.pol_topic)
    predicted = np.asarray(_score(st.problem, jnp.asarray(TOP_RULE_VALUE[topic])))
    assert np.array_equal(np.asarray(st.reward.is_correct), predicted)
    assert np.all(np.asarray(st.dialogue.turn) == 1)
    assert 0 < predicted.mean() < 1
