"""Auto-reset rollouts for training: a lane whose episode ended starts its next one.

``rollout.run_plan`` plays a batch to its longest episode, so a lane whose episode ended
early idles until the last one ends (evaluation wants exactly that). For training
throughput, ``advance`` plays a fixed number of steps instead, and after every step
recycles ended lanes into fresh episodes of the same family (as gymnax's and jumanji's
auto-reset wrappers do). Throughput is then counted in completed episodes.

Recycling costs generation, reset, verification and agent set-up. To keep that cost
bounded and static, each plan slice has ``slots`` recycle slots per step: ended lanes take
them in order from a clock hand that moves past the last lane served, and any others wait
for the next step (their episode is over, so waiting changes nothing but time; the hand
means none waits forever). Every completed episode is scored once, when its lane
is recycled, and reported in a [steps, slots] table in completion order, ready for the
curriculum's stream update.

Episode identity does not depend on batching: episode ``e`` has key
``fold_in(run_key, e)`` and its d comes from ``sample_d(e, task)``; ids are handed out from
one counter in (step, slice, service) order. ``rollout.run_plan`` on the same key and d plays
the same episode bit for bit (tested). Over a mesh of S devices each device runs its own
lanes with its own counter and hands out ids ``c * S + j`` (``ids_of``), so ids stay unique
and no step needs a collective (``runner`` gathers the completions once per round).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.agents.base import batch_act
from ecomjax.catalog.types import Catalog
from ecomjax.core import reset
from ecomjax.registry import family
from ecomjax.rollout import (
    AGENT_STREAM,
    Plan,
    agent_runs,
    families_for,
    narrowed_agents,
    score_states,
    slices,
    step_batch,
)
from ecomjax.types import EnvParams, EpisodeState, Observation, RewardInfo, empty_results

SampleD = Callable[[jax.Array, jax.Array], jax.Array]  # (episode ids, task ids) -> d


@struct.dataclass
class Lanes:
    """The batch between steps: one running (or ended, awaiting recycling) episode per lane."""

    state: EpisodeState
    obs: Observation
    memory: tuple  # per agent run, as in rollout._play
    akey: jax.Array  # [B] agent key of the lane's current episode
    t: jax.Array  # int32 [B], turns taken in the current episode
    d: jax.Array  # int32 [B]
    episode: jax.Array  # int32 [B], id of the lane's current episode
    next_episode: jax.Array  # int32, the next id to hand out
    # Lanes whose episode has just been reset: their observation's tool results are the
    # empty results of a reset, left unwritten in ``obs`` (see ``observation``).
    fresh: jax.Array  # bool [B]
    # Per slice, where the next search for ended lanes starts (a clock hand: the lanes
    # after the last one recycled come first, so no waiting lane starves).
    hand: jax.Array  # int32 [slices]

    @property
    def observation(self) -> Observation:
        """What each lane's agent sees. Tool results are ~85 % of an observation's bytes,
        and a reset's are empty: selecting them here, where the agent reads them, is far
        cheaper than scattering them into every recycled row."""
        empty = empty_results()
        results = jax.tree_util.tree_map(
            lambda x, e: jnp.where(self.fresh.reshape((-1,) + (1,) * e.ndim), e, x),
            self.obs.results,
            empty,
        )
        return self.obs.replace(results=results)


@struct.dataclass
class Completed:
    """Episodes scored at recycling, [steps, total slots] in completion order."""

    valid: jax.Array  # bool: the slot held an episode this step
    lane: jax.Array  # int32
    episode: jax.Array  # int32
    task: jax.Array  # int32, the plan slice's task index
    d: jax.Array  # int32
    turns: jax.Array  # int32
    reward: RewardInfo


SLACK = 1.2  # slots per expected completion, for bursts of short episodes


def default_slots(plan: Plan) -> tuple[int, ...]:
    """Recycle slots per slice: ``SLACK`` times the completions expected per step."""
    out = []
    for entry in plan:
        turns = family(entry[0]).mean_turns
        out.append(min(entry[1], max(1, math.ceil(SLACK * entry[1] / turns))))
    return tuple(out)


def _families(plan: Plan) -> tuple[int, ...]:
    return tuple(sorted({int(family(e[0]).env) for e in plan}))


def fixed_d(d: int) -> SampleD:
    """Every episode at one difficulty."""
    return lambda ids, task: jnp.full(ids.shape, d, jnp.int32)


def _fresh(catalog, ids, task, entry, agent, params, run_key, sample_d):
    """Episodes ``ids`` of one slice: generated, reset, agent memory initialised."""
    keys = jax.vmap(lambda e: jax.random.fold_in(run_key, e))(ids)
    d = sample_d(ids, task).astype(jnp.int32)
    gen = family(entry[0]).generate
    problems = jax.vmap(gen, (0, None, 0, None))(keys, catalog, d, params)
    state, ts = jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, params)
    akey = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
    memory = jax.vmap(agent.init, (0, 0, None))(akey, ts.observation, catalog)
    return state, ts.observation, memory, akey, d


def _cat(*xs):
    return jax.tree_util.tree_map(lambda *ys: jnp.concatenate(ys), *xs)


def _blank(like):
    """Zeros shaped like ``like`` (ShapeDtypeStructs); key leaves hold key 0."""

    def one(x):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            return jnp.broadcast_to(jax.random.key(0), x.shape)
        return jnp.zeros(x.shape, x.dtype)

    return jax.tree_util.tree_map(one, like)


def init(catalog: Catalog, plan: Plan, agent, params: EnvParams) -> Lanes:
    """Lanes holding no episode yet: placeholders marked ended, which the first steps of
    ``advance`` recycle at the slot rate. Nothing is generated here (so nothing compiles
    twice), and the staggered start spreads later recycling over the steps."""
    agents, ids = narrowed_agents(plan, agent)
    parts = []
    for entry, (_, a, b) in zip(plan, slices(plan), strict=True):
        zeros = jnp.zeros(b - a, jnp.int32)
        shapes = jax.eval_shape(
            lambda: _fresh(
                catalog, zeros, zeros, entry, agents[ids[a]], params, jax.random.key(0), fixed_d(0)
            )
        )
        parts.append(_blank(shapes))
    starts = [a for _, a, _ in slices(plan)]
    memory = tuple(  # one memory tree per agent run, over the slices it spans
        _cat(*[p[2] for p, a in zip(parts, starts, strict=True) if ra <= a < rb])
        for _, ra, rb in agent_runs(ids)
    )
    batch = int(ids.shape[0])
    state = _cat(*[p[0] for p in parts])
    ended = jnp.full(batch, C.Termination.T_MAX, state.dialogue.termination.dtype)
    return Lanes(
        state=state.replace(dialogue=state.dialogue.replace(termination=ended)),
        obs=_cat(*[p[1] for p in parts]),
        memory=memory,
        akey=_cat(*[p[3] for p in parts]),
        t=jnp.zeros(batch, jnp.int32),
        d=jnp.zeros(batch, jnp.int32),
        episode=jnp.full(batch, -1, jnp.int32),  # -1: a placeholder, never reported
        next_episode=jnp.int32(0),
        fresh=jnp.zeros(batch, bool),
        hand=jnp.zeros(len(plan), jnp.int32),
    )


def _set(tree, dest, new):
    """Rows ``dest`` of ``tree`` replaced by ``new``; out-of-range rows are dropped."""
    return jax.tree_util.tree_map(lambda x, y: x.at[dest].set(y, mode="drop"), tree, new)


IdsOf = Callable[[jax.Array], jax.Array]  # a lane group's counter values -> episode ids


def _same(c: jax.Array) -> jax.Array:
    return c


def _recycle(
    catalog, lanes: Lanes, run_key, plan, agents, ids, params, sample_d, slots, ids_of: IdsOf
):
    """Score ended lanes and start their next episodes, up to ``slots[i]`` per slice."""
    runs = agent_runs(ids)
    batch = int(ids.shape[0])
    ended = lanes.state.dialogue.termination != C.Termination.RUNNING
    rows = []
    for i, (entry, (name, a, b), k) in enumerate(zip(plan, slices(plan), slots, strict=True)):
        n = b - a
        hand = lanes.hand[i]
        turn = jnp.nonzero(jnp.roll(ended[a:b], -hand), size=k, fill_value=n)[0]
        valid = turn < n
        lane = a + (jnp.minimum(turn, n - 1) + hand) % n
        last = jnp.max(jnp.where(valid, turn, -1))
        new_hand = jnp.where(valid.any(), (hand + last + 1) % n, hand)
        old = jax.tree_util.tree_map(lambda x: x[lane], lanes.state)
        fam = family(name).env
        reward = score_states(catalog, old, params, families_for(fam))
        rows.append(
            Completed(
                valid=valid & (lanes.episode[lane] >= 0),
                lane=lane,
                episode=lanes.episode[lane],
                task=jnp.full(k, i, jnp.int32),
                d=lanes.d[lane],
                turns=lanes.t[lane],
                reward=reward.reward,
            )
        )
        new_ids = ids_of(lanes.next_episode + jnp.cumsum(valid, dtype=jnp.int32) - 1)
        task = jnp.full(k, i, jnp.int32)
        agent = agents[ids[a]]
        state, obs, memory, akey, d = _fresh(
            catalog, new_ids, task, entry, agent, params, run_key, sample_d
        )
        dest = jnp.where(valid, lane, batch)
        r = next(j for j, (_, ra, rb) in enumerate(runs) if ra <= a < rb)
        mdest = jnp.where(valid, lane - runs[r][1], batch)
        mems = list(lanes.memory)
        mems[r] = _set(mems[r], mdest, memory)
        rest = _set(lanes.obs.replace(results=None), dest, obs.replace(results=None))
        lanes = lanes.replace(
            state=_set(lanes.state, dest, state),
            obs=rest.replace(results=lanes.obs.results),
            fresh=lanes.fresh.at[dest].set(True, mode="drop"),
            memory=tuple(mems),
            akey=lanes.akey.at[dest].set(akey, mode="drop"),
            t=lanes.t.at[dest].set(0, mode="drop"),
            d=lanes.d.at[dest].set(d, mode="drop"),
            episode=lanes.episode.at[dest].set(new_ids, mode="drop"),
            next_episode=lanes.next_episode + valid.sum(dtype=jnp.int32),
            hand=lanes.hand.at[i].set(new_hand),
        )
    return lanes, _cat(*rows)


def advance(
    catalog: Catalog,
    lanes: Lanes,
    run_key: jax.Array,
    plan: Plan,
    agent,
    params: EnvParams,
    sample_d: SampleD,
    steps: int,
    slots: tuple[int, ...] | None = None,
    ids_of: IdsOf = _same,
) -> tuple[Lanes, Completed, jax.Array]:
    """``steps`` agent/env steps of every lane, recycling ended lanes after each.

    Returns the lanes (pass them to the next call: episodes in flight carry over), the
    completed episodes, [steps, sum(slots)] with ``valid`` marking filled slots, and the
    number of agent turns taken (int32). ``ids_of`` maps the lanes' counter to episode
    ids (``lanes.next_episode`` stays the counter)."""
    agents, ids = narrowed_agents(plan, agent)
    runs = agent_runs(ids)
    slots = default_slots(plan) if slots is None else tuple(slots)
    if len(slots) != len(plan) or min(slots) < 1:
        raise ValueError(f"slots needs one positive count per plan slice, got {slots}")
    present = _families(plan)

    def one(lanes: Lanes, _):
        live = lanes.state.dialogue.termination == C.Termination.RUNNING
        k = jax.vmap(jax.random.fold_in)(lanes.akey, lanes.t)
        obs = lanes.observation
        outs = [
            batch_act(agents[j])(k[a:b], m, jax.tree_util.tree_map(lambda x: x[a:b], obs), catalog)
            for (j, a, b), m in zip(runs, lanes.memory, strict=True)
        ]
        actions = _cat(*[x for _, x in outs])
        wide = {"query_emb": actions.query_emb, "query_tokens": actions.query_tokens}
        actions = jax.lax.optimization_barrier(  # see rollout._turns
            actions.replace(query_emb=None, query_tokens=None)
        ).replace(**wide)
        state, ts = step_batch(catalog, lanes.state, actions, params, live, present)
        lanes = lanes.replace(
            state=state,
            obs=ts.observation,
            fresh=jnp.zeros_like(lanes.fresh),
            memory=tuple(m for m, _ in outs),
            t=lanes.t + live.astype(jnp.int32),
        )
        lanes, done = _recycle(
            catalog, lanes, run_key, plan, agents, ids, params, sample_d, slots, ids_of
        )
        return lanes, (done, live.sum(dtype=jnp.int32))

    lanes, (done, taken) = jax.lax.scan(one, lanes, None, length=steps)
    return lanes, done, taken.sum()
