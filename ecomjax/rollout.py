"""Batched episodes on device: generate, reset, then agent and step in a while loop.

Retrieval is a separate stage (DESIGN): it runs under a batch-level ``lax.cond`` only on
turns where some episode searches, so families that never search pay nothing for it.

Mixed batches follow a static plan of per-family slices (quotas): generation and
verification are vmapped per slice, while one ``step`` over the whole batch runs the
tools and the customer for every family. There is no ``lax.switch`` over families inside
``vmap`` (it would run every branch). Verification runs once, after the episodes end
(terminal states are absorbing, so the final world is the world at termination).
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from ecomjax import constants as C
from ecomjax.agents.base import Agent
from ecomjax.catalog.types import Catalog
from ecomjax.core import reset, step, verify
from ecomjax.registry import family
from ecomjax.tools.search import resolve_batch
from ecomjax.types import EnvParams, EpisodeState, zero_reward
from ecomjax.verify import ALL_FAMILIES

Plan = tuple[tuple, ...]  # static: (family name, episodes[, agent index]) per slice, in order

AGENT_STREAM = 0xA6E  # the agent's own randomness, apart from the env's streams


@struct.dataclass
class RolloutResult:
    state: EpisodeState  # final states, batched
    env_steps: jax.Array  # int32: agent turns taken over the whole batch
    turns: jax.Array  # int32: while-loop iterations (longest episode)


def max_turns_for(families) -> int:
    """The longest possible episode: T_max(D_MAX), or L_int·T_max for JOURNEY."""
    t = 4 + C.D_MAX // 2
    return t * C.MAX_SUBGOALS if C.Env.JOURNEY in tuple(families) else t


def _play(catalog, keys, problems, agent, params, max_turns, agent_ids=None) -> RolloutResult:
    """Reset, then agent/step turns until every episode ends. Steps do not score.

    ``agent`` may be a tuple of agents with static ``agent_ids`` [B] naming each episode's
    agent; each agent runs only on its own contiguous runs of episodes (one compile for a
    test suite of several agents, and no agent pays for another's episodes)."""
    states, ts = jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, params)
    akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
    agents = (agent,) if isinstance(agent, Agent) else tuple(agent)
    ids = np.asarray(agent_ids if agent_ids is not None else np.zeros(keys.shape[0], np.int32))
    runs = _runs(ids)

    def sl(tree, a, b):
        return jax.tree_util.tree_map(lambda x: x[a:b], tree)

    memory = tuple(
        jax.vmap(agents[j].init, (0, 0, None))(akeys[a:b], sl(ts.observation, a, b), catalog)
        for j, a, b in runs
    )
    step_only = partial(step, families=())

    def running(states):
        return states.dialogue.termination == C.Termination.RUNNING

    def cond(carry):
        states, _, _, t, _ = carry
        return running(states).any() & (t < max_turns)

    def body(carry):
        states, obs, memory, t, n_steps = carry
        live = running(states)
        k = jax.vmap(lambda key: jax.random.fold_in(key, t))(akeys)
        outs = [
            jax.vmap(agents[j].act, (0, 0, 0, None))(k[a:b], m, sl(obs, a, b), catalog)
            for (j, a, b), m in zip(runs, memory, strict=True)
        ]
        memory = tuple(m for m, _ in outs)
        actions = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *[x for _, x in outs])
        # Agents often emit constant fields (no filters); without this barrier XLA would
        # constant-fold [B, calls, N] filter masks at compile time, for minutes.
        actions = jax.lax.optimization_barrier(actions)
        search = resolve_batch(catalog, states, actions, params, live)
        states, ts = jax.vmap(step_only, (None, 0, 0, None, 0))(
            catalog, states, actions, params, search
        )
        return states, ts.observation, memory, t + 1, n_steps + live.sum()

    init = (states, ts.observation, memory, jnp.int32(0), jnp.int32(0))
    states, _, _, turns, n_steps = jax.lax.while_loop(cond, body, init)
    return RolloutResult(state=states, env_steps=n_steps, turns=turns)


def _runs(ids: np.ndarray) -> list[tuple[int, int, int]]:
    """(agent, start, end) of each maximal run of equal agent ids."""
    cut = np.flatnonzero(np.diff(ids)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [ids.shape[0]]])
    return [(int(ids[a]), int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def _score(catalog, states: EpisodeState, params, families) -> EpisodeState:
    ended = states.dialogue.termination != C.Termination.RUNNING
    reward = jax.vmap(lambda s: verify(catalog, s, params, families))(states)
    zero = jax.vmap(lambda _: zero_reward())(ended)
    reward = jax.tree_util.tree_map(
        lambda a, b: jnp.where(ended.reshape(ended.shape + (1,) * (a.ndim - 1)), a, b),
        reward,
        zero,
    )
    return states.replace(reward=reward)


def run_batch(
    catalog: Catalog,
    keys: jax.Array,
    d: jax.Array,
    generate,
    agent: Agent,
    params: EnvParams,
    max_turns: int | None = None,
    families=ALL_FAMILIES,
) -> RolloutResult:
    """B full episodes of one generator. ``keys`` [B] are episode keys, ``d`` [B]
    difficulties; ``families`` (static) bounds which verifiers are traced."""
    problems = jax.vmap(generate, (0, None, 0, None))(keys, catalog, d, params)
    turns = max_turns if max_turns is not None else max_turns_for(families)
    res = _play(catalog, keys, problems, agent, params, turns)
    return res.replace(state=_score(catalog, res.state, params, families))


def slices(plan: Plan) -> list[tuple[str, int, int]]:
    """(family, start, end) of each slice of a plan."""
    out, start = [], 0
    for entry in plan:
        out.append((entry[0], start, start + entry[1]))
        start += entry[1]
    return out


def run_plan(
    catalog: Catalog,
    keys: jax.Array,
    d: jax.Array,
    plan: Plan,
    agent,
    params: EnvParams,
) -> RolloutResult:
    """A mixed batch: slice i holds ``plan[i][1]`` episodes of family ``plan[i][0]``.

    A plan entry may name a third field, the index of its agent in ``agent`` (a tuple of
    agents): a whole test suite of agents then shares one compiled rollout."""
    parts = []
    for name, a, b in slices(plan):
        gen = family(name).generate
        parts.append(jax.vmap(gen, (0, None, 0, None))(keys[a:b], catalog, d[a:b], params))
    problems = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *parts)
    envs = tuple(family(entry[0]).env for entry in plan)
    agent_ids = None
    if not isinstance(agent, Agent):
        agent_ids = np.concatenate(
            [np.full(entry[1], entry[2] if len(entry) > 2 else 0, np.int32) for entry in plan]
        )
    res = _play(catalog, keys, problems, agent, params, max_turns_for(envs), agent_ids)
    scored = []
    for name, a, b in slices(plan):
        sl = jax.tree_util.tree_map(lambda x, a=a, b=b: x[a:b], res.state)
        fam = family(name).env
        fams = ALL_FAMILIES if fam == C.Env.JOURNEY else (fam,)
        scored.append(_score(catalog, sl, params, fams).reward)
    reward = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *scored)
    return res.replace(state=res.state.replace(reward=reward))


@partial(jax.jit, static_argnames=("generate", "agent", "params", "max_turns", "families"))
def run_batch_jit(catalog, keys, d, generate, agent, params, max_turns=None, families=ALL_FAMILIES):
    return run_batch(catalog, keys, d, generate, agent, params, max_turns, families)


@partial(jax.jit, static_argnames=("plan", "agent", "params"))
def run_plan_jit(catalog, keys, d, plan, agent, params):
    return run_plan(catalog, keys, d, plan, agent, params)
