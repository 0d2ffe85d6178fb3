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


def scored_ids(dlg: Dialogue) -> jax.Array:
    """int32 [(1 + MAX_SUBGOALS) * MAX_ANSWER_IDS]: the ids of the answer entries the
    verifier scores: the latest answer's main entry and, per sub-goal, the latest non-null
    entry ever stored (a JOURNEY entry stored and later nulled is still scored)."""
    main = jnp.where(dlg.has_answer, dlg.answer.main.rec, -1)
    sub = jnp.where((dlg.sub_answers.env != -1)[:, None], dlg.sub_answers.rec, -1)
    return jnp.concatenate([main[None], sub]).reshape(-1)


def hallucination(world: World) -> jax.Array:
    """-|hallucinated| / max(|U|, 1). U is every id the agent used: in ``cart_add``,
    ``return_exchange`` and every answer entry it ever stored (SPEC §7 v1.1: a JOURNEY
    sub-answer later replaced or nulled still counts), which is exactly the used list."""
    live = jnp.arange(C.MAX_USED_IDS) < world.n_used
    n_h = (live & world.used_hall).sum()
    return -n_h / jnp.maximum(world.n_used, 1).astype(jnp.float32)


def compose(
    r_task: jax.Array,
    r_eff: jax.Array,
    r_hall: jax.Array,
    hard_fail: jax.Array,
    params: EnvParams,
) -> jax.Array:
    total = jnp.clip(params.w_task * r_task + params.w_eff * r_eff + params.w_hall * r_hall, -1, 1)
    return jnp.where(hard_fail != C.HardFail.NONE, -1.0, total).astype(jnp.float32)
