"""BUNDLE verifier (SPEC §8.7): F1 of the recommended categories against S_req, minus a
budget penalty.

Each recommended id maps to its category when it is known and in stock at termination,
else to an invalid token of its own (one per distinct id), so Ŝ = {categories of valid
ids} ∪ {distinct invalid ids}. Repeats of a category or id add nothing to Ŝ.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax.catalog.types import Catalog
from ecomjax.types import AnswerFields, Dialogue, Problem, Score, World, make_score
from ecomjax.world import is_known, product_stock_qty, safe


def bundle_score(catalog: Catalog, problem: Problem, world: World, rec: jax.Array):
    """(r_task, is_correct, F1, pen) for a recommendation list rec [MAX_ANSWER_IDS]."""
    n = rec.shape[0]
    pos = jnp.arange(n)
    present = rec != -1
    first = present & ~((rec[None, :] == rec[:, None]) & (pos[None, :] < pos[:, None])).any(-1)
    known = is_known(catalog, rec)
    avail = known & (product_stock_qty(catalog, problem, world, safe(rec)) > 0)
    valid = first & avail
    invalid = first & ~avail
    cat = jnp.where(valid, catalog.category[safe(rec)].astype(jnp.int32), -1)
    # Distinct categories among the valid ids: count each category at its first id.
    earlier = (cat[None, :] == cat[:, None]) & valid[None, :] & (pos[None, :] < pos[:, None])
    cat_first = valid & ~earlier.any(-1)
    req = problem.bundle_cats
    in_req = ((cat[:, None] == req[None, :]) & (req[None, :] >= 0)).any(-1)
    tp = (cat_first & in_req).sum()
    n_hat = cat_first.sum() + invalid.sum()
    n_req = (req >= 0).sum()
    p = tp / jnp.maximum(n_hat, 1)
    r = tp / jnp.maximum(n_req, 1)
    f1 = jnp.where(tp > 0, 2 * p * r / jnp.maximum(p + r, 1e-12), 0.0).astype(jnp.float32)
    total = jnp.where(valid, catalog.price_cents[safe(rec)], 0).sum().astype(jnp.float32)
    b = problem.budget_cents.astype(jnp.float32)
    over = (problem.budget_cents >= 0) & (total > b)
    pen = jnp.where(over, jnp.minimum(1.0, (total - b) / jnp.maximum(b, 1.0)), 0.0)
    r_task = jnp.clip(2.0 * f1 - 1.0 - pen, -1.0, 1.0)
    exact = (tp == n_req) & (n_hat == n_req) & (n_req > 0)
    return r_task.astype(jnp.float32), exact & (pen == 0), f1, pen.astype(jnp.float32)


def verify(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    ans: AnswerFields,
    has: jax.Array,
) -> Score:
    """detail: (F1, pen). No answer: r_task = -1."""
    del dlg
    r_task, ok, f1, pen = bundle_score(catalog, problem, world, ans.rec)
    return make_score(
        jnp.where(has, r_task, -1.0),
        has & ok,
        jnp.where(has, f1, 0.0),
        jnp.where(has, pen, 0.0),
    )
