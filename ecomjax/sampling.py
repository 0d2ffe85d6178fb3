"""Keyed draws shared by the generators (SPEC §12): the episode key folded by a stream
tag, then by the listed indices. Rejection sampling keeps memory O(tries), not O(N)."""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.types import EnvParams, Problem, empty_problem

TRIES = 64
N_TODAY = 365


def stream(key: jax.Array, name: str, *indices) -> jax.Array:
    key = jax.random.fold_in(key, C.STREAM[name])
    for i in indices:
        key = jax.random.fold_in(key, i)
    return key


def first_valid(
    key: jax.Array,
    lo: jax.Array,
    hi: jax.Array,
    ok: Callable[[jax.Array], jax.Array],
    tries: int = TRIES,
) -> jax.Array:
    """A keyed uniform draw from positions [lo, hi) that satisfy ``ok``; -1 if every try
    fails. Uniform over the valid positions, since tries are i.i.d."""
    cand = jax.random.randint(key, (tries,), 0, jnp.maximum(hi - lo, 1)) + lo
    good = jax.vmap(ok)(cand) & (hi > lo)
    return jnp.where(good.any(), cand[jnp.argmax(good)], -1)


def in_category(catalog: Catalog, cat: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Bounds of a category's run in ``cat_order``."""
    return catalog.cat_offsets[cat], catalog.cat_offsets[cat + 1]


def base_problem(key: jax.Array, d: jax.Array, env: int, params: EnvParams) -> Problem:
    """Fields every family shares: env, d, today (TIME), tier (ACCOUNT), T_max."""
    diff = D.difficulty(d, params.overrides)
    today = jax.random.randint(stream(key, "TIME"), (), 0, N_TODAY)
    tier = jax.random.randint(stream(key, "ACCOUNT"), (), 0, 3)
    return empty_problem().replace(
        env=jnp.int32(env),
        d=jnp.asarray(d, jnp.int32),
        today=today,
        tier=tier,
        t_max=diff.t_max,
    )
