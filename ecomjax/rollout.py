"""Batched episodes on device: generate, reset, then agent and step in a while loop.

Retrieval is a separate stage (DESIGN): it runs under a batch-level ``lax.cond`` only on
turns where some episode searches, so families that never search pay nothing for it.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.agents.base import Agent
from ecomjax.catalog.types import Catalog
from ecomjax.core import reset, step
from ecomjax.tools.search import resolve_batch
from ecomjax.types import EnvParams, EpisodeState

AGENT_STREAM = 0xA6E  # the agent's own randomness, apart from the env's streams


@struct.dataclass
class RolloutResult:
    state: EpisodeState  # final states, batched
    env_steps: jax.Array  # int32: agent turns taken over the whole batch
    turns: jax.Array  # int32: while-loop iterations (longest episode)


def run_batch(
    catalog: Catalog,
    keys: jax.Array,
    d: jax.Array,
    generate,
    agent: Agent,
    params: EnvParams,
    max_turns: int = 4 + C.D_MAX // 2,
) -> RolloutResult:
    """B full episodes of one family. ``keys`` [B] are episode keys, ``d`` [B] difficulties."""
    problems = jax.vmap(generate, (0, None, 0, None))(keys, catalog, d, params)
    states, ts = jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, params)
    akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
    memory = jax.vmap(agent.init, (0, 0, None))(akeys, ts.observation, catalog)

    def running(states):
        return states.dialogue.termination == C.Termination.RUNNING

    def cond(carry):
        states, _, _, t, _ = carry
        return running(states).any() & (t < max_turns)

    def body(carry):
        states, obs, memory, t, n_steps = carry
        live = running(states)
        k = jax.vmap(lambda key: jax.random.fold_in(key, t))(akeys)
        memory, actions = jax.vmap(agent.act, (0, 0, 0, None))(k, memory, obs, catalog)
        # Agents often emit constant fields (no filters); without this barrier XLA would
        # constant-fold [B, calls, N] filter masks at compile time, for minutes.
        actions = jax.lax.optimization_barrier(actions)
        search = resolve_batch(catalog, states, actions, params, live)
        states, ts = jax.vmap(step, (None, 0, 0, None, 0))(catalog, states, actions, params, search)
        return states, ts.observation, memory, t + 1, n_steps + live.sum()

    init = (states, ts.observation, memory, jnp.int32(0), jnp.int32(0))
    states, _, _, turns, n_steps = jax.lax.while_loop(cond, body, init)
    return RolloutResult(state=states, env_steps=n_steps, turns=turns)


@partial(jax.jit, static_argnames=("generate", "agent", "params", "max_turns"))
def run_batch_jit(catalog, keys, d, generate, agent, params, max_turns=4 + C.D_MAX // 2):
    return run_batch(catalog, keys, d, generate, agent, params, max_turns)
