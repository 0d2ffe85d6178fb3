"""RETURN problem generator (SPEC §8.4): the target line in the shared order history, its
window-edge order date, reason, method preference and the optional replacement with its
witness and constraint set C_rep (Problem.cons_* row 2)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax import order_history as O
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import (
    ATTR_SLOT,
    CONSTRAINT_SLOTS,
    attr_mask,
    gen_constraints,
    write_constraint_slots,
)
from ecomjax.envs.cart.generator import omission
from ecomjax.sampling import base_problem, stream, taken_products
from ecomjax.types import EnvParams, Problem

S = C.Slot
# The slots the customer can be asked about (SPEC §10.1 knowable fields).
SLOTS = (
    S.ITEMS,
    S.PURCHASE_DATE,
    S.REASON,
    S.RETURN_METHOD,
    S.REPLACEMENT,
    S.CATEGORY,
    *CONSTRAINT_SLOTS,
)
I32 = jnp.int32
MO, ML, MC = C.MAX_ORDERS, C.MAX_ORDER_LINES, C.MAX_CONSTRAINTS
REP = 2  # Problem.cons_* row of the RETURN replacement
P_REPLACE = 0.5
P_NO_METHOD = 0.5


def _target(key: jax.Array, catalog: Catalog, problem: Problem):
    """(order, line, witness): a uniform order other than the STATUS target among those
    with a line whose category has another usable in-stock product, then a uniform such
    line of it (the SPEC's redraw), with that line's witness draw."""
    k_wit, k_order, k_line = jax.random.split(key, 3)
    avoid = jnp.sort(taken_products(problem))
    o = jnp.repeat(jnp.arange(MO), ML)
    j = jnp.tile(jnp.arange(ML), MO)
    wit = jax.vmap(
        lambda oo, jj: O.witness_for(
            jax.random.fold_in(k_wit, oo * ML + jj), catalog, problem.line_pid[oo, jj], avoid
        )
    )(o, j).reshape(MO, ML)
    live = (jnp.arange(MO) < problem.n_orders)[:, None] & (
        jnp.arange(ML)[None, :] < problem.order_n_lines[:, None]
    )
    qual = live & (wit >= 0)
    other = jnp.arange(MO) != problem.status_order
    order_ok = qual.any(1) & other
    u = jax.random.uniform(k_order, (MO,))
    # Fallback (a catalog without two usable products in any history category): the first
    # order that is not the STATUS target, line 0, no witness.
    fallback = jnp.argmax(other & live[:, 0])
    tgt_o = jnp.where(order_ok.any(), jnp.argmax(jnp.where(order_ok, u, -1.0)), fallback)
    ul = jax.random.uniform(k_line, (ML,))
    tgt_l = jnp.where(order_ok.any(), jnp.argmax(jnp.where(qual[tgt_o], ul, -1.0)), 0)
    return tgt_o.astype(I32), tgt_l.astype(I32), wit[tgt_o, tgt_l]


def fill(
    key: jax.Array,
    catalog: Catalog,
    d: jax.Array,
    params: EnvParams,
    problem: Problem,
    sub: int | jax.Array,
    h: jax.Array | None = None,
) -> Problem:
    """Writes the RETURN goal into ``problem`` at sub-goal ``sub``. Builds the order
    history (H = ``h``, default H_orders(d)) unless an earlier sub-goal already did."""
    diff = D.difficulty(d, params.overrides)
    h = diff.h_orders if h is None else h
    kp = stream(key, "PROBLEM", C.Env.RETURN, sub)
    k_tgt, k_edge, k_t, k_dates, k_reason, k_pref, k_method, k_rep, k_cons = jax.random.split(kp, 9)
    prob = O.ensure_history(key, catalog, problem, h)
    tgt_o, tgt_l, witness = _target(k_tgt, catalog, prob)
    pid = prob.line_pid[tgt_o, tgt_l]

    # Order date: the window edge is real (SPEC §8.4).
    w = O.return_window(catalog, pid)
    edge = jax.random.bernoulli(k_edge, diff.p_edge)
    k_t1, k_t2 = jax.random.split(k_t)
    t_edge = w + jax.random.randint(k_t1, (), -1, 2)
    t_in = jax.random.randint(k_t2, (), 1, jnp.maximum(1, w - 5) + 1)
    t_days = jnp.maximum(jnp.where(edge, t_edge, t_in), 1)
    date, aux, track = O.order_dates(
        k_dates, jnp.int32(O.OrderStatus.DELIVERED), prob.today, t_days
    )
    prob = O.set_order(prob, tgt_o, jnp.int32(O.OrderStatus.DELIVERED), date, aux, track)

    reason = jax.random.randint(k_reason, (), 0, O.N_REASONS)
    has_method = ~jax.random.bernoulli(k_pref, P_NO_METHOD)
    method = jnp.where(has_method, jax.random.randint(k_method, (), 0, O.N_METHODS), -1)
    replace = jax.random.bernoulli(k_rep, P_REPLACE) & (witness >= 0)

    # C_rep = [cat eq] + gen_constraints(p_w, max(1, m - 1), exclude {cat}).
    cat = catalog.category[jnp.maximum(pid, 0)].astype(jnp.float32)
    refs = jnp.stack([witness, jnp.int32(-1)])
    g_attr, g_op, g_val = gen_constraints(
        k_cons, catalog, refs, jnp.maximum(1, diff.m - 1), d, attr_mask(C.Attr.CAT), params
    )
    attr = jnp.concatenate([jnp.array([C.Attr.CAT], I32), g_attr[: MC - 1]])
    op = jnp.concatenate([jnp.zeros(1, I32), g_op[: MC - 1]])
    val = jnp.concatenate([cat[None], g_val[: MC - 1]])
    attr = jnp.where(replace, attr, -1)
    op = jnp.where(replace, op, 0)
    val = jnp.where(replace, val, 0.0)

    prob = prob.replace(
        ret_order=tgt_o,
        ret_line=tgt_l,
        ret_reason=reason.astype(I32),
        ret_method=method.astype(I32),
        ret_replace=replace,
        ret_witness=jnp.where(replace, witness, -1).astype(I32),
        cons_attr=prob.cons_attr.at[REP].set(attr),
        cons_op=prob.cons_op.at[REP].set(op),
        cons_val=prob.cons_val.at[REP].set(val),
    )
    prob = O.sort_orders(prob)
    form, dkey = O.history_desc(catalog, prob, pid)

    # Slots: items is critical; the rest are non-critical, one OMIT draw each.
    def omit(slot):
        return omission(key, sub, 0, slot, diff.p_missing)

    has = prob.has_slot
    pend = prob.pending
    sv = prob.slot_value
    values = {
        S.ITEMS: (jnp.bool_(True), jnp.bool_(False), 0.0),
        S.PURCHASE_DATE: (jnp.bool_(True), omit(S.PURCHASE_DATE), prob.order_date[prob.ret_order]),
        S.REASON: (jnp.bool_(True), omit(S.REASON), reason),
        S.RETURN_METHOD: (has_method, omit(S.RETURN_METHOD), method),
        S.REPLACEMENT: (jnp.bool_(True), omit(S.REPLACEMENT), replace),
    }
    for slot, (h_s, p_s, v) in values.items():
        has = has.at[sub, 0, slot].set(h_s)
        pend = pend.at[sub, 0, slot].set(h_s & p_s)
        sv = sv.at[sub, slot].set(jnp.asarray(v, jnp.float32))
    prob = prob.replace(has_slot=has, pending=pend, slot_value=sv)
    # The C_rep category comes together with the replacement wish.
    cons_slot = jnp.asarray(ATTR_SLOT)[jnp.maximum(attr, 0)]
    cons_pend = jax.vmap(lambda s_: omission(key, sub, 0, s_, diff.p_missing))(cons_slot)
    cons_pend = jnp.where(attr == C.Attr.CAT, pend[sub, 0, S.REPLACEMENT], cons_pend)
    prob = write_constraint_slots(prob, sub, attr, op, val, cons_pend)

    # The witness is never shocked (SPEC §6).
    free = prob.protected < 0
    slot_p = jnp.argmax(free)
    protect = replace & free.any()
    prob = prob.replace(
        protected=jnp.where(protect, prob.protected.at[slot_p].set(witness), prob.protected),
        ref_form=prob.ref_form.at[sub].set(form),
        ref_key=prob.ref_key.at[sub].set(dkey),
    )
    return prob


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    return fill(key, catalog, d, params, base_problem(key, d, C.Env.RETURN, params, catalog), 0)
