"""Batched episodes on device: generate, reset, then agent and step in a while loop.

Retrieval is a separate stage (DESIGN): it runs under a batch-level ``lax.cond`` only on
turns where some episode searches, so families that never search pay nothing for it. The
call-slot loop runs to the batch's longest turn with a scalar counter, and each slot only
the tools some episode calls in it (``step_batch``).

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
from ecomjax import exposure as X
from ecomjax.agents.base import Agent, batch_act
from ecomjax.catalog.sharded_emb import lockstep_any
from ecomjax.catalog.types import Catalog
from ecomjax.core import reset, step, turn_hard_fail, verify
from ecomjax.gates import turn_gates
from ecomjax.registry import family
from ecomjax.tools.execute import mark_searched_batch
from ecomjax.tools.search import resolve_batch
from ecomjax.types import Action, EnvParams, EpisodeState, SearchResults, TimeStep, zero_reward
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


def families_for(env: int) -> tuple[int, ...]:
    """The families whose code a batch of ``env`` episodes needs: JOURNEY holds every
    other family's sub-goals. Narrower is cheaper: every traced verifier runs on every
    episode under vmap."""
    return ALL_FAMILIES if env == C.Env.JOURNEY else (int(env),)


def _play(
    catalog,
    keys,
    problems,
    agent,
    params,
    max_turns,
    agent_ids=None,
    long=None,
    families=ALL_FAMILIES,
) -> RolloutResult:
    """Reset, then agent/step turns until every episode ends. Steps do not score.

    ``agent`` may be a tuple of agents with static ``agent_ids`` [B] naming each episode's
    agent; each agent runs only on its own contiguous runs of episodes (one compile for a
    test suite of several agents, and no agent pays for another's episodes).

    ``long`` (static bool [B]) marks episodes that may outlast the others (JOURNEY runs up
    to L_int x T_max turns). Once every other episode has ended, the loop goes on over the
    long ones alone, so a mixed batch does not pay full-batch turns for its journeys.
    Episodes are independent under vmap, so the split changes no result. ``families``
    (static) are the families the batch holds; the customer traces only their parts."""
    states, ts = jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, params)
    akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
    agents = (agent,) if isinstance(agent, Agent) else tuple(agent)
    ids = np.asarray(agent_ids if agent_ids is not None else np.zeros(keys.shape[0], np.int32))
    runs = agent_runs(ids)
    memory = init_runs(catalog, agents, runs, akeys, ts.observation)
    long = None if long is None else np.asarray(long, bool)
    if long is None or long.all() or not long.any():
        carry = (states, ts.observation, memory, jnp.int32(0), jnp.int32(0))
        states, _, _, turns, n_steps = _turns(
            catalog, agents, runs, params, akeys, carry, max_turns, families
        )
        return RolloutResult(state=states, env_steps=n_steps, turns=turns)
    carry = (states, ts.observation, memory, jnp.int32(0), jnp.int32(0))
    states, obs, memory, t, n_steps = _turns(
        catalog, agents, runs, params, akeys, carry, max_turns, families, jnp.asarray(~long)
    )
    idx = np.flatnonzero(long)
    sub_runs = agent_runs(ids[idx])
    carry = (
        _take(states, idx),
        _take(obs, idx),
        _sub_memory(memory, runs, idx, sub_runs),
        t,
        n_steps,
    )
    sub, _, _, turns, n_steps = _turns(
        catalog, agents, sub_runs, params, akeys[idx], carry, max_turns, families
    )
    jidx = jnp.asarray(idx)
    states = jax.tree_util.tree_map(lambda x, y: x.at[jidx].set(y), states, sub)
    return RolloutResult(state=states, env_steps=n_steps, turns=turns)


def step_batch(
    catalog: Catalog,
    states: EpisodeState,
    actions: Action,
    params: EnvParams,
    live: jax.Array,
    present,
    search: SearchResults | None = None,
) -> tuple[EpisodeState, TimeStep]:
    """One turn of a whole batch: the batch-level stages (retrieval, unless ``search`` is
    given, for the live episodes whose action does not hard-fail; the gates of
    ``turn_gates``), then the per-episode ``step``, which does not score (``verify`` runs
    per family slice after the episodes end). ``present`` (static) are the families the
    batch holds."""
    masked = search is None
    if masked:  # resolve only the searches of episodes whose turn will deliver results
        hard = jax.vmap(turn_hard_fail, (0, 0, None))(states, actions, params)
        search = resolve_batch(catalog, states, actions, params, live & (hard == C.HardFail.NONE))
    gates = turn_gates(actions, live)
    # With the dense Seen layout, the search rows join Seen for the whole batch at once,
    # visiting only the rows that hold results (tools.execute.mark_searched_batch).
    batch_mark = masked and X.is_dense(states.world)
    one = partial(
        step,
        families=(),
        present=tuple(present),
        gates=gates,
        search_masked=masked,
        mark_search=not batch_mark,
    )
    states, ts = jax.vmap(one, (None, 0, 0, None, 0))(catalog, states, actions, params, search)
    if batch_mark:
        world = mark_searched_batch(states.world, search, params.search_batch)
        states = states.replace(world=world)
    return states, ts


def _turns(catalog, agents, runs, params, akeys, carry, max_turns, families, watch=None):
    """Agent/step turns while an episode runs (only those in ``watch``, if given)."""

    def running(states):
        return states.dialogue.termination == C.Termination.RUNNING

    def cond(carry):
        states, _, _, t, _ = carry
        live = running(states) if watch is None else running(states) & watch
        return lockstep_any(catalog, live.any()) & (t < max_turns)

    def body(carry):
        states, obs, memory, t, n_steps = carry
        live = running(states)
        k = jax.vmap(lambda key: jax.random.fold_in(key, t))(akeys)
        memory, actions = act_runs(catalog, agents, runs, k, memory, obs)
        # Agents often emit constant fields (no filters); without this barrier XLA would
        # constant-fold [B, calls, N] filter masks at compile time, for minutes. The wide
        # query payloads stay outside it: a constant one would be written out each turn.
        wide = {"query_emb": actions.query_emb, "query_tokens": actions.query_tokens}
        actions = jax.lax.optimization_barrier(
            actions.replace(query_emb=None, query_tokens=None)
        ).replace(**wide)
        states, ts = step_batch(catalog, states, actions, params, live, families)
        return states, ts.observation, memory, t + 1, n_steps + live.sum()

    return jax.lax.while_loop(cond, body, carry)


def init_runs(catalog, agents, runs, akeys, obs) -> tuple:
    """Each run's agent memory: ``agents[j].init`` over the episodes a..b of every run
    (j, a, b) of ``agent_runs``."""
    return tuple(
        jax.vmap(agents[j].init, (0, 0, None))(akeys[a:b], _take(obs, np.arange(a, b)), catalog)
        for j, a, b in runs
    )


def act_runs(catalog, agents, runs, keys, memory, obs) -> tuple[tuple, Action]:
    """One act per run of episodes with the same agent: (each run's new memory, the
    batch's actions in episode order), so no agent pays for another's episodes."""
    outs = [
        batch_act(agents[j])(keys[a:b], m, _take(obs, np.arange(a, b)), catalog)
        for (j, a, b), m in zip(runs, memory, strict=True)
    ]
    actions = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *[x for _, x in outs])
    return tuple(m for m, _ in outs), actions


def _sub_memory(memory, runs, idx: np.ndarray, sub_runs) -> tuple:
    """Agent memory for the episodes ``idx``, laid out by ``sub_runs`` (each a set of
    positions from one or more of the original runs of the same agent)."""
    starts = np.array([a for _, a, _ in runs])
    out = []
    for _, a2, b2 in sub_runs:
        pos = idx[a2:b2]
        owner = np.searchsorted(starts, pos, side="right") - 1
        pieces = [_take(memory[r], pos[owner == r] - runs[r][1]) for r in np.unique(owner).tolist()]
        out.append(jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *pieces))
    return tuple(out)


def agent_runs(ids: np.ndarray) -> list[tuple[int, int, int]]:
    """(agent, start, end) of each maximal run of equal agent ids."""
    cut = np.flatnonzero(np.diff(ids)) + 1
    starts = np.concatenate([[0], cut])
    ends = np.concatenate([cut, [ids.shape[0]]])
    return [(int(ids[a]), int(a), int(b)) for a, b in zip(starts, ends, strict=True)]


def score_states(catalog, states: EpisodeState, params, families) -> EpisodeState:
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
    # A generator leaves other families' fields as constant padding; through the barrier
    # XLA cannot constant-fold their verifiers over [B, N, ...] (minutes of compile).
    problems = jax.lax.optimization_barrier(problems)
    turns = max_turns if max_turns is not None else max_turns_for(families)
    res = _play(catalog, keys, problems, agent, params, turns, families=families)
    return res.replace(state=score_states(catalog, res.state, params, families))


def slices(plan: Plan) -> list[tuple[str, int, int]]:
    """(family, start, end) of each slice of a plan."""
    out, start = [], 0
    for entry in plan:
        out.append((entry[0], start, start + entry[1]))
        start += entry[1]
    return out


def _family_groups(plan: Plan) -> list[tuple[str, np.ndarray]]:
    """Each family's episode positions over all its slices (one trace per family, however
    many agents share it)."""
    pos: dict[str, list[np.ndarray]] = {}
    for name, a, b in slices(plan):
        pos.setdefault(name, []).append(np.arange(a, b))
    return [(name, np.concatenate(p)) for name, p in pos.items()]


def _take(tree, idx: np.ndarray):
    if idx.size and np.array_equal(idx, np.arange(idx[0], idx[0] + idx.size)):
        a = int(idx[0])
        return jax.tree_util.tree_map(lambda x: x[a : a + idx.size], tree)
    return jax.tree_util.tree_map(lambda x: jnp.take(x, jnp.asarray(idx), axis=0), tree)


def _by_family(plan: Plan, fn, *batched):
    """Apply ``fn(family_name, *parts)`` once per family over its positions, and put the
    outputs back in plan order."""
    groups = _family_groups(plan)
    outs = [fn(name, *(_take(x, idx) for x in batched)) for name, idx in groups]
    order = np.concatenate([idx for _, idx in groups])
    out = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *outs)
    if np.array_equal(order, np.arange(order.size)):
        return out
    return _take(out, np.argsort(order))


def narrowed_agents(plan: Plan, agent) -> tuple[tuple[Agent, ...], np.ndarray]:
    """Each slice's agent, narrowed to the slice's family where the agent offers that
    (``Agent.for_family``), and the static agent id of every episode."""
    given = (agent,) if isinstance(agent, Agent) else tuple(agent)
    agents, index, ids = list(given), {}, []
    for entry in plan:
        j = entry[2] if len(entry) > 2 else 0
        if given[j].for_family is not None:
            env = int(family(entry[0]).env)
            if (j, env) not in index:
                index[j, env] = len(agents)
                agents.append(given[j].for_family(env))
            j = index[j, env]
        ids.append(np.full(entry[1], j, np.int32))
    return tuple(agents), np.concatenate(ids)


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
    agents): a whole test suite of agents then shares one compiled rollout. Generation and
    verification are traced once per family, over all of that family's slices."""

    def generate(name, k, dd):
        gen = family(name).generate
        return jax.vmap(gen, (0, None, 0, None))(k, catalog, dd, params)

    problems = _by_family(plan, generate, keys, d)
    envs = tuple(family(entry[0]).env for entry in plan)
    agents, agent_ids = narrowed_agents(plan, agent)
    short = max_turns_for(())
    long = np.concatenate(
        [np.full(e[1], max_turns_for((env,)) > short) for e, env in zip(plan, envs, strict=True)]
    )
    present = tuple(sorted({int(e) for e in envs}))
    res = _play(
        catalog, keys, problems, agents, params, max_turns_for(envs), agent_ids, long, present
    )

    def score(name, states):
        return score_states(catalog, states, params, families_for(family(name).env)).reward

    reward = _by_family(plan, score, res.state)
    return res.replace(state=res.state.replace(reward=reward))


@partial(jax.jit, static_argnames=("generate", "agent", "params", "max_turns", "families"))
def run_batch_jit(catalog, keys, d, generate, agent, params, max_turns=None, families=ALL_FAMILIES):
    return run_batch(catalog, keys, d, generate, agent, params, max_turns, families)


@partial(jax.jit, static_argnames=("plan", "agent", "params"))
def run_plan_jit(catalog, keys, d, plan, agent, params):
    return run_plan(catalog, keys, d, plan, agent, params)
