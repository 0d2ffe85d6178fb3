"""``rollout.step_batch`` against the plain ``vmap(step)``, for
``tests/test_step_batch.py``, which runs it in a fresh interpreter (see there why).

Test support, not shipped. Returns plain values the test asserts on."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.agents import random_agent
from ecomjax.agents.base import Agent
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.core import reset, step
from ecomjax.gates import turn_gates
from ecomjax.registry import family
from ecomjax.rollout import AGENT_STREAM, step_batch
from ecomjax.testing import tree_equal
from ecomjax.tools.search import resolve_batch
from ecomjax.types import EnvParams

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


def compare(cache_dir: str | None) -> dict:
    """Run both steppers over the same turns; report where they differ and what the
    agents did (so the test can check the sweep exercised what it claims to)."""
    if cache_dir:
        jax.config.update("jax_compilation_cache_dir", cache_dir)
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)
    catalog, params = generate_catalog(42, 1000), EnvParams()
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
    return {
        "state_diffs": _diffs(s1, s2),
        "timestep_diffs": _diffs(ts1, ts2),
        "tools": np.asarray(tools),
        "running": np.asarray(s1.dialogue.termination[-2]) == C.Termination.RUNNING,
        "main_ids": np.asarray(main_ids),
        "sub_ids": np.asarray(sub_ids),
        "failed_search": bool(np.asarray(failed_search).any()),
    }


def _diffs(a, b) -> list[str]:
    """Paths of the leaves that differ bit for bit (none when the trees are equal)."""
    pa, _ = jax.tree_util.tree_flatten_with_path(a)
    pb = jax.tree_util.tree_leaves(b)
    if len(pa) != len(pb):
        return [f"{len(pa)} leaves vs {len(pb)}"]
    return [
        jax.tree_util.keystr(path)
        for (path, x), y in zip(pa, pb, strict=True)
        if not tree_equal(x, y)
    ]
