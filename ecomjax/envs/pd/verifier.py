"""PD verifier (SPEC §8.1): nDCG@k against the exact pool F_end, constraint satisfaction
of the best listed product, and availability.

F_end = {p : s(p | C) = 1 and available at termination}; it always holds the (protected)
target. Relevance is (1 + φ_π(p)) / 2 with φ the stated priority min-max normalised over
F_end, so the top-k relevance values are those of the top-k priority keys: the pool kernel
returns |F_end|, the key range and the top-k keys in one chunked pass over the catalog.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import feasible, satisfaction
from ecomjax.envs.pd.ranking import (
    K,
    answer_list,
    available,
    goal_pool_stats,
    idcg,
    known,
    ndcg,
    r_avail,
)
from ecomjax.kernels.pool import dcg_weights
from ecomjax.numerics import weighted_sum
from ecomjax.types import AnswerFields, Dialogue, Problem, Score, World, make_score


def priority_key(catalog: Catalog, pids: jax.Array, priority: jax.Array) -> jax.Array:
    """float32 [...], higher is better: -price (0), rating (1), -ship_days (2). Exact
    integers (cents, hundredths, days), so ties are exact."""
    p = jnp.clip(pids, 0, catalog.n_products - 1)
    return jnp.select(
        [priority == 0, priority == 1],
        [
            -catalog.price_cents[p].astype(jnp.float32),
            catalog.rating_x100[p].astype(jnp.float32),
        ],
        -catalog.ship_days[p].astype(jnp.float32),
    )


def pd_score(
    catalog: Catalog, problem: Problem, world: World, rec: jax.Array, needed: jax.Array = True
):
    """(r_task, r_rank, r_cons, r_avail) of a recommendation list. ``needed`` False (no
    answer to score, so the caller discards the parts) reads no pool row."""
    attr, op, val = problem.cons_attr[0], problem.cons_op[0], problem.cons_val[0]
    k = problem.k_rec

    def member(_, idx):
        ok = feasible(catalog, idx, attr, op, val) & available(catalog, problem, world, idx)
        return ok, priority_key(catalog, idx, problem.priority)

    stats = goal_pool_stats(catalog, problem, 0, member, needed)
    span = stats.hi - stats.lo

    def rel_of_key(key):
        phi = jnp.where(span > 0, (key - stats.lo) / jnp.where(span > 0, span, 1.0), 1.0)
        return (1.0 + phi) / 2.0

    ids, live, first = answer_list(rec, k)
    in_pool = live & first & known(catalog, ids)
    in_pool &= feasible(catalog, ids, attr, op, val) & available(catalog, problem, world, ids)
    rel = jnp.where(in_pool, rel_of_key(priority_key(catalog, ids, problem.priority)), 0.0)
    dcg = (rel * dcg_weights(K)).sum()
    r_rank = 2.0 * ndcg(dcg, idcg(stats, rel_of_key, k)) - 1.0
    s = jnp.where(live, satisfaction(catalog, ids, attr, op, val), 0.0)
    alpha = D.alpha(problem.d).astype(jnp.float32)
    r_cons = 2.0 * s.max() ** alpha - 1.0
    r_av = r_avail(catalog, problem, world, ids, live)
    r_task = jnp.clip(weighted_sum((0.55, 0.35, 0.10), (r_rank, r_cons, r_av)), -1.0, 1.0)
    return r_task, r_rank, r_cons, r_av


def verify(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    ans: AnswerFields,
    has: jax.Array,
) -> Score:
    """detail: (r_rank, r_cons, r_avail). No answer: r_task = -1 and every part -1."""
    del dlg
    parts = pd_score(catalog, problem, world, ans.rec, has)
    r_task, r_rank, r_cons, r_av = (jnp.where(has, x, -1.0) for x in parts)
    return make_score(r_task, has & (r_task >= 0.95), r_rank, r_cons, r_av)
