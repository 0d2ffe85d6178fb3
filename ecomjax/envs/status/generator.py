"""STATUS problem generator (SPEC §8.5): a target order of the shared history, referred to
directly ("order ord_003") or, with probability p_ref(d), indirectly by the identifying
description of one of its lines, scoped to the history."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax import order_history as O
from ecomjax.catalog.types import Catalog
from ecomjax.sampling import base_problem, stream
from ecomjax.types import EnvParams, Problem

S = C.Slot
# The slots the customer can be asked about (SPEC §10.1 knowable fields).
SLOTS = (S.ORDER_REFERENCE,)
I32 = jnp.int32


def fill(
    key: jax.Array,
    catalog: Catalog,
    d: jax.Array,
    params: EnvParams,
    problem: Problem,
    sub: int | jax.Array,
    h: jax.Array | None = None,
) -> Problem:
    """Writes the STATUS goal into ``problem`` at sub-goal ``sub``; builds the order
    history (H = ``h``, default H_orders(d)) unless an earlier sub-goal already did."""
    diff = D.difficulty(d, params.overrides)
    h = diff.h_orders if h is None else h
    k_order, k_ref, k_line = jax.random.split(stream(key, "PROBLEM", C.Env.STATUS, sub), 3)
    prob = O.sort_orders(O.ensure_history(key, catalog, problem, h))
    # Uniform over the orders, other than the RETURN target (JOURNEY: distinct orders).
    cand = (jnp.arange(C.MAX_ORDERS) < prob.n_orders) & (jnp.arange(C.MAX_ORDERS) != prob.ret_order)
    u = jax.random.uniform(k_order, (C.MAX_ORDERS,))
    target = jnp.argmax(jnp.where(cand, u, -1.0)).astype(I32)
    indirect = jax.random.bernoulli(k_ref, diff.p_ref)
    n_lines = jnp.maximum(prob.order_n_lines[target], 1)
    line = jax.random.randint(k_line, (), 0, n_lines)
    form, dkey = O.history_desc(catalog, prob, prob.line_pid[target, line])
    return prob.replace(
        status_order=target,
        status_indirect=indirect,
        has_slot=prob.has_slot.at[sub, 0, S.ORDER_REFERENCE].set(True),
        pending=prob.pending.at[sub, 0, S.ORDER_REFERENCE].set(False),
        slot_value=prob.slot_value.at[sub, S.ORDER_REFERENCE].set(
            jnp.where(indirect, -1, target).astype(jnp.float32)
        ),
        ref_form=prob.ref_form.at[sub].set(jnp.where(indirect, form, C.DescForm.NONE)),
        ref_key=prob.ref_key.at[sub].set(jnp.where(indirect, dkey, -1)),
    )


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    return fill(key, catalog, d, params, base_problem(key, d, C.Env.STATUS, params, catalog), 0)
