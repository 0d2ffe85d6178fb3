"""POLICY verifier (SPEC §8.6): numeric answers by the ρ⁴ ratio, categorical ones by
normalised equality (the host parser maps a string to its ANSWER_VOCAB code after the
§8.6 normalisation, so equal codes are equal normalised strings)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import policy_rules as P
from ecomjax.catalog.types import Catalog
from ecomjax.types import AnswerFields, Dialogue, Problem, Score, World, make_score

TINY = 1e-9


def ratio(x: jax.Array, y: jax.Array) -> jax.Array:
    """ρ of SPEC §8.6: 1 if both ~0; 0 if one is ~0 or the signs differ; else
    (min/max of the absolute values)⁴."""
    ax, ay = jnp.abs(x), jnp.abs(y)
    zx, zy = ax < TINY, ay < TINY
    r = (jnp.minimum(ax, ay) / jnp.maximum(jnp.maximum(ax, ay), TINY)) ** 4
    r = jnp.where(jnp.sign(x) != jnp.sign(y), 0.0, r)
    return jnp.where(zx & zy, 1.0, jnp.where(zx | zy, 0.0, r)).astype(jnp.float32)


def verify(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    ans: AnswerFields,
    has: jax.Array,
) -> Score:
    """detail: (ρ,) — 1/0 for categorical topics; 0 without a parsed answer."""
    del catalog, world, dlg
    topic = jnp.maximum(problem.pol_topic, 0)
    categorical = jnp.asarray(P.TABLES.topic_categorical)[topic]
    x = ans.policy_value.astype(jnp.float32)
    y = problem.pol_answer.astype(jnp.float32)
    rho = jnp.where(categorical, (jnp.round(x) == jnp.round(y)).astype(jnp.float32), ratio(x, y))
    ok = has & ans.policy_ok
    rho = jnp.where(ok, rho, 0.0)
    r_task = jnp.where(ok, 2.0 * rho - 1.0, -1.0)
    return make_score(r_task, ok & (r_task >= 0.95), rho)
