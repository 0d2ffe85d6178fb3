"""Reward composition (SPEC §7): task + efficiency + hallucination, -1 on a hard fail."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax.types import Answer, Dialogue, EnvParams, World


def efficiency(turns: jax.Array, t_user: jax.Array, t_max: jax.Array) -> jax.Array:
    t_eff = jnp.maximum(1, turns - t_user)
    return jnp.clip(1.0 - 2.0 * (t_eff - 1) / jnp.maximum(t_max - 1, 1), -1.0, 1.0)


def answer_ids(answer: Answer) -> jax.Array:
    """int32 [(1 + MAX_SUBGOALS) * MAX_ANSWER_IDS]: every recommended id of an answer. A
    null JOURNEY entry (env -1) recommends nothing, whatever its padding holds."""
    sub = jnp.where((answer.sub.env != -1)[:, None], answer.sub.rec, -1)
    return jnp.concatenate([answer.main.rec[None], sub]).reshape(-1)


def hallucination(world: World, dialogue: Dialogue, ids: jax.Array | None = None) -> jax.Array:
    """-|hallucinated| / max(|U|, 1) over ids used by tools or in the latest answer.
    ``ids`` may narrow the answer's ids to a part that holds all of them (its main entry)."""
    big = jnp.iinfo(jnp.int32).max
    ids = answer_ids(dialogue.answer) if ids is None else ids
    latest = jnp.sort(jnp.where(dialogue.has_answer & (ids != -1), ids, big))
    at = jnp.clip(jnp.searchsorted(latest, world.used), 0, latest.shape[0] - 1)
    in_answer = (latest[at] == world.used) & (world.used != -1)
    live = jnp.arange(C.MAX_USED_IDS) < world.n_used
    in_u = live & (world.used_by_tool | in_answer)
    n_u = in_u.sum()
    n_h = (in_u & world.used_hall).sum()
    return -n_h / jnp.maximum(n_u, 1).astype(jnp.float32)


def compose(
    r_task: jax.Array,
    r_eff: jax.Array,
    r_hall: jax.Array,
    hard_fail: jax.Array,
    params: EnvParams,
) -> jax.Array:
    total = jnp.clip(params.w_task * r_task + params.w_eff * r_eff + params.w_hall * r_hall, -1, 1)
    return jnp.where(hard_fail != C.HardFail.NONE, -1.0, total).astype(jnp.float32)
