"""STATUS verifier (SPEC §8.5): the answered order and its status."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import order_history as O
from ecomjax.catalog.types import Catalog
from ecomjax.types import AnswerFields, Dialogue, Problem, Score, World, make_score


def verify(
    catalog: Catalog,
    problem: Problem,
    world: World,
    dlg: Dialogue,
    ans: AnswerFields,
    has: jax.Array,
) -> Score:
    """r_task = 2·(0.5·r_oid + 0.5·r_stat) − 1 ∈ {−1, 0, 1}; no answer gives −1.
    detail: (r_oid, r_stat)."""
    del catalog, world, dlg
    target = problem.status_order
    status = problem.order_status[jnp.clip(target, 0, C.MAX_ORDERS - 1)]
    r_oid = (has & (ans.order == target) & (target >= 0)).astype(jnp.float32)
    r_stat = (has & (ans.status == status) & (target >= 0)).astype(jnp.float32)
    r_task = r_oid + r_stat - 1.0
    return make_score(r_task, (r_oid == 1.0) & (r_stat == 1.0), r_oid, r_stat)


def status_in_range(main: AnswerFields) -> jax.Array:
    """The answered status is one of the order statuses (an INVALID_ANSWER otherwise)."""
    return (main.status >= 0) & (main.status <= O.N_STATUSES - 1)
