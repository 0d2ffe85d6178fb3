"""JOURNEY generator (SPEC §8.8): L_int(d) sub-goals of distinct families in one world.

Sub-goal i is generated at the same d from ``fold_in(key, 0x100 + i)`` by its family's
``fill``, which writes that family's fields and its slot rows at index i. Every family's
``fill`` is traced once and kept only where the family was drawn (no ``switch`` inside
``vmap``). Fills run in family order, each avoiding the products the ones before it use,
so no product serves two sub-goals. The turn limit is L·T_max(d).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.envs.subgoal_families import SUBGOAL_FAMILIES
from ecomjax.sampling import base_problem, random_history, stream
from ecomjax.types import EnvParams, Problem

E = C.Env
MS = C.MAX_SUBGOALS
# None of its own: the customer answers within a sub-goal, by the sub-goal family's slots.
SLOTS: tuple[C.Slot, ...] = ()
SUB_FAMILIES: tuple[E, ...] = tuple(f.env for f in SUBGOAL_FAMILIES)
FILLS = {f.env: f.fill for f in SUBGOAL_FAMILIES}
ORDER_FAMILIES = (E.RETURN, E.STATUS)
SUBGOAL_KEY = 0x100


def draw_families(key: jax.Array, n: jax.Array) -> jax.Array:
    """int32 [MAX_SUBGOALS]: n distinct sub-goal families in request order, -1 padded."""
    perm = jax.random.permutation(stream(key, "PROBLEM", E.JOURNEY, 0), len(SUB_FAMILIES))
    fams = jnp.asarray(SUB_FAMILIES, jnp.int32)[perm[:MS]]
    return jnp.where(jnp.arange(MS) < n, fams, -1)


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    diff = D.difficulty(d, params.overrides)
    n = diff.l_int
    problem = base_problem(key, d, E.JOURNEY, params)
    fams = draw_families(key, n)
    problem = problem.replace(sub_env=fams)
    n_order_goals = jnp.isin(fams, jnp.asarray(ORDER_FAMILIES)).sum()
    h = jnp.maximum(diff.h_orders, n_order_goals)
    has_cart = (fams == E.CART).any()
    for fam in SUB_FAMILIES:
        chosen = (fams == fam).any()
        sub = jnp.argmax(fams == fam).astype(jnp.int32)
        k = jax.random.fold_in(key, SUBGOAL_KEY + sub)
        fill = FILLS[fam]
        if fam in ORDER_FAMILIES:
            cand = fill(k, catalog, d, params, problem, sub, h)
        else:
            cand = fill(k, catalog, d, params, problem, sub)
        # env, today, tier and t_max stay the journey's own.
        cand = cand.replace(env=problem.env, d=problem.d, today=problem.today, tier=problem.tier)
        problem = jax.tree_util.tree_map(lambda a, b: jnp.where(chosen, a, b), cand, problem)
    default_history = random_history(stream(key, "HISTORY"), catalog)
    problem = problem.replace(
        history=jnp.where(has_cart, problem.history, default_history),
        t_max=(n * diff.t_max).astype(jnp.int32),
    )
    return problem
