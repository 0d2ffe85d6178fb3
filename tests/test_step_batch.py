"""``rollout.step_batch`` (the batch-level gates of ``ecomjax.gates``: slot count, per-slot
tool gating, answer-id recording) against the plain ``vmap(step)``: the same states and
time steps, bit for bit, for random agents that call every tool and answer with ids in
main and sub-goal entries, over a batch that mixes families and difficulties."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.agents import random_agent
from ecomjax.agents.base import Agent
from ecomjax.core import reset, step
from ecomjax.gates import turn_gates
from ecomjax.registry import family
from ecomjax.rollout import AGENT_STREAM, step_batch
from ecomjax.testing import tree_equal
from ecomjax.tools.search import resolve_batch

FAMILIES = ("CART", "RETURN", "POLICY", "PD", "STATUS")
PER_FAMILY = 24
TURNS = 4


def _with_stray_sub_answers(agent: Agent) -> Agent:
    """On even turns, some answers also fill every JOURNEY sub-goal entry (allowed outside
    JOURNEY; their ids count as used), so some turns open the sub-goal id gate and others
    only the main one. Some turns also claim more calls than any budget, a hard fail that
    must discard the turn's searches too."""

    def act(key, memory, obs, catalog):
        memory, action = agent.act(key, memory, obs, catalog)
        over = jax.random.bernoulli(jax.random.fold_in(key, 0x0FE), 0.1)
        action = action.replace(n_calls=jnp.where(over, C.MAX_TOOL_CALLS + 1, action.n_calls))
        ans = action.answer
        stray = jax.random.bernoulli(jax.random.fold_in(key, 0x5AB), 0.3) & (obs.turn % 2 == 0)
        sub = ans.sub.replace(
            env=jnp.where(stray, C.Env.PD, ans.sub.env),
            rec=jnp.where(
                stray, jnp.broadcast_to(ans.main.rec[::-1], ans.sub.rec.shape), ans.sub.rec
            ),
        )
        return memory, action.replace(answer=ans.replace(sub=sub))

    return agent._replace(name=f"{agent.name}+sub", act=act)


def _problems(catalog, params, keys, d):
    parts = []
    for j, name in enumerate(FAMILIES):
        sl = slice(j * PER_FAMILY, (j + 1) * PER_FAMILY)
        gen = jax.vmap(family(name).generate, (0, None, 0, None))
        parts.append(gen(keys[sl], catalog, d[sl], params))
    return jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *parts)


def test_step_batch_equals_vmapped_step(catalog, params):
    b = len(FAMILIES) * PER_FAMILY
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(7), i))(jnp.arange(b))
    d = jnp.arange(b, dtype=jnp.int32) % (C.D_MAX + 1)
    present = tuple(sorted(int(family(n).env) for n in FAMILIES))
    agent = _with_stray_sub_answers(random_agent)

    @jax.jit
    def both(catalog, keys, d):
        problems = _problems(catalog, params, keys, d)
        states, ts = jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, params)
        akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
        memory = jax.vmap(agent.init, (0, 0, None))(akeys, ts.observation, catalog)
        plain = partial(step, families=(), present=present)

        def turn(carry, t):
            (s1, o1), (s2, o2), memory = carry
            k = jax.vmap(lambda kk: jax.random.fold_in(kk, t))(akeys)
            memory, actions = jax.vmap(agent.act, (0, 0, 0, None))(k, memory, o1, catalog)
            live = s1.dialogue.termination == C.Termination.RUNNING
            s1, ts1 = step_batch(catalog, s1, actions, params, live, present)
            search = resolve_batch(catalog, s2, actions, params, live)
            s2, ts2 = jax.vmap(plain, (None, 0, 0, None, 0))(catalog, s2, actions, params, search)
            carry = ((s1, ts1.observation), (s2, ts2.observation), memory)
            gates = turn_gates(actions, live)
            failed_search = (
                live & (s1.dialogue.hard_fail != C.HardFail.NONE) & (search.ids >= 0).any((-2, -1))
            ).any()
            outs = (s1, ts1, s2, ts2, actions.tool, gates.main_ids, gates.sub_ids, failed_search)
            return carry, outs

        start = ((states, ts.observation), (states, ts.observation), memory)
        _, outs = jax.lax.scan(turn, start, jnp.arange(TURNS))
        return outs

    s1, ts1, s2, ts2, tools, main_ids, sub_ids, failed_search = both(catalog, keys, d)
    assert tree_equal(s1, s2)
    assert tree_equal(ts1, ts2)
    # The sweep is only meaningful if the agents called many kinds of tools and lived on.
    assert len(set(np.unique(np.asarray(tools)).tolist()) & set(range(1, C.N_TOOLS))) >= 12
    running = np.asarray(s1.dialogue.termination[-2]) == C.Termination.RUNNING
    assert running.any()
    # ... and answered with ids in both ways: turns with sub-goal ids, turns with main only.
    main_ids, sub_ids = np.asarray(main_ids), np.asarray(sub_ids)
    assert sub_ids.any() and (main_ids & ~sub_ids).any(), (main_ids, sub_ids)
    # ... and some hard-failed turns had searches, which step_batch must not deliver.
    assert np.asarray(failed_search).any()
