"""``rollout.step_batch`` (batch-level slot count and per-slot tool gating) against the
plain ``vmap(step)``: the same states and time steps, bit for bit, for random agents that
call every tool, over a batch that mixes families and difficulties."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.agents import random_agent
from ecomjax.core import reset, step
from ecomjax.registry import family
from ecomjax.rollout import AGENT_STREAM, step_batch
from ecomjax.testing import tree_equal
from ecomjax.tools.search import resolve_batch

FAMILIES = ("CART", "RETURN", "POLICY", "PD", "STATUS")
PER_FAMILY = 24
TURNS = 4


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
    agent = random_agent

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
            return carry, (s1, ts1, s2, ts2, actions.tool)

        start = ((states, ts.observation), (states, ts.observation), memory)
        _, outs = jax.lax.scan(turn, start, jnp.arange(TURNS))
        return outs

    s1, ts1, s2, ts2, tools = both(catalog, keys, d)
    assert tree_equal(s1, s2)
    assert tree_equal(ts1, ts2)
    # The sweep is only meaningful if the agents called many kinds of tools and lived on.
    assert len(set(np.unique(np.asarray(tools)).tolist()) & set(range(1, C.N_TOOLS))) >= 12
    running = np.asarray(s1.dialogue.termination[-2]) == C.Termination.RUNNING
    assert running.any()
