"""SUB verifier (SPEC §8.2): nDCG@k of the substitutes against the exact pool
F_end = {p != p0 : s(p | C) = 1 and available}, with similarity relevance, and availability.

rel(p) = 1 - λ_sim(d)·(1 - sim01(p0, p)) is increasing in cos(p0, p), so the top-k
relevance values come from the pool kernel's top-k cosines."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import difficulty as D
from ecomjax.catalog.sharded_emb import emb_rows
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import feasible
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
from ecomjax.numerics import ordered_sum, weighted_sum
from ecomjax.types import AnswerFields, Dialogue, Problem, Score, World, make_score


def cosine(catalog: Catalog, p0: jax.Array, pids: jax.Array) -> jax.Array:
    """float32 [...]: cos(p0, p) of the stored L2-normalised embeddings (SPEC §1.6),
    summed in a fixed order, so a product's cosine has the same bits whichever rows it is
    read beside: the goal category's pool, the whole catalog's, or the answer list."""
    e0 = emb_rows(catalog, jnp.maximum(p0, 0))
    e = emb_rows(catalog, jnp.clip(pids, 0, catalog.n_products - 1))
    return ordered_sum(e * e0)


def sub_score(
    catalog: Catalog, problem: Problem, world: World, rec: jax.Array, needed: jax.Array = True
):
    """(r_task, r_rank, r_avail) of a substitute list. ``needed`` False (no answer to
    score, so the caller discards the parts) reads no pool row."""
    attr, op, val = problem.cons_attr[1], problem.cons_op[1], problem.cons_val[1]
    p0, k = problem.sub_original, problem.k_rec
    lam = D.lambda_sim(problem.d)

    def in_pool(ids):
        ok = feasible(catalog, ids, attr, op, val) & available(catalog, problem, world, ids)
        return ok & (ids != p0) & known(catalog, ids)

    def member(_, idx):
        return in_pool(idx), cosine(catalog, p0, idx)

    def rel_of_key(cos):
        return 1.0 - lam * (1.0 - (cos + 1.0) / 2.0)

    stats = goal_pool_stats(catalog, problem, 1, member, needed)
    ids, live, first = answer_list(rec, k)
    rel = jnp.where(live & first & in_pool(ids), rel_of_key(cosine(catalog, p0, ids)), 0.0)
    dcg = (rel * dcg_weights(K)).sum()
    r_rank = 2.0 * ndcg(dcg, idcg(stats, rel_of_key, k)) - 1.0
    r_av = r_avail(catalog, problem, world, ids, live)
    r_task = jnp.clip(weighted_sum((0.8, 0.2), (r_rank, r_av)), -1.0, 1.0)
    return r_task, r_rank, r_av


def verify(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    ans: AnswerFields,
    has: jax.Array,
) -> Score:
    """detail: (r_rank, 0, r_avail) (slot 1 is PD's r_cons). No answer: r_task = -1."""
    del dlg
    r_task, r_rank, r_av = (
        jnp.where(has, x, -1.0) for x in sub_score(catalog, problem, world, ans.rec, has)
    )
    return make_score(r_task, has & (r_task >= 0.95), r_rank, 0.0, r_av)
