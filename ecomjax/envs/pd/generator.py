"""PD problem generator (SPEC §8.1): an in-stock target, constraints it satisfies with
slack, widened to cover up to k_rec(d) − 1 further witnesses (v1.1), k = k_rec(d), and
the aligned persona's stated priority (§8.0)."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import (
    ATTR_SLOT,
    CONSTRAINT_SLOTS,
    attr_mask,
    constraint_values,
    gen_constraint_units,
    widen,
    write_constraint_slots,
)
from ecomjax.envs.pd.witnesses import draw_witnesses
from ecomjax.sampling import (
    base_problem,
    first_valid,
    omission,
    protect,
    stream,
    taken_products,
)
from ecomjax.types import EnvParams, Problem

A = C.Attr
S = C.Slot
# The slots the customer can be asked about (SPEC §10.1 knowable fields).
SLOTS = (S.CATEGORY, S.NUM_RESULTS, S.PRIORITY, *CONSTRAINT_SLOTS)
MC = C.MAX_CONSTRAINTS


def usable(catalog: Catalog, p: jax.Array, taken: jax.Array) -> jax.Array:
    """A product may be a target: in stock, not denied, a unique title, not yet used."""
    denied = catalog.cat_denied[catalog.category[p].astype(jnp.int32)]
    return (catalog.stock[p] > 0) & (catalog.desc_form[p] > 0) & ~denied & ~(taken == p).any()


def persona_priority(key: jax.Array, attr: jax.Array) -> jax.Array:
    """π = argmax(w_price, w_rating, w_ship), w ~ Dirichlet(α) over (price, rating, ship,
    brand, sim) with α = [2, 2, 1, 1, 1] + 3 per constrained dimension (SPEC §8.0)."""
    has = lambda *xs: jnp.isin(attr, jnp.array(xs)).any()
    bonus = jnp.stack(
        [
            has(A.PRICE),
            has(A.RATING, A.RATING_COUNT),
            has(A.SHIP_DAYS),
            has(A.BRAND, A.STORE),
            jnp.bool_(False),
        ]
    )
    alpha = jnp.array([2.0, 2.0, 1.0, 1.0, 1.0]) + 3.0 * bonus
    w = jax.random.dirichlet(key, alpha)
    return jnp.argmax(w[:3]).astype(jnp.int32)


def fill(
    key: jax.Array,
    catalog: Catalog,
    d: jax.Array,
    params: EnvParams,
    problem: Problem,
    sub: jax.Array | int,
) -> Problem:
    diff = D.difficulty(d, params.overrides)
    k_t, k_price, k_rest, k_w = jax.random.split(stream(key, "PROBLEM", C.Env.PD, sub), 4)
    taken = taken_products(problem)
    target = first_valid(k_t, 0, catalog.n_products, lambda p: usable(catalog, p, taken))
    t = jnp.maximum(target, 0)
    refs = jnp.stack([target, jnp.int32(-1)])
    # C = [cat eq (critical), price lte with slack] + gen_constraints(target, m-2, {cat, price}).
    only_price = ~attr_mask(A.PRICE)
    p_attr, p_op, p_units = gen_constraint_units(k_price, catalog, refs, 1, d, only_price, params)
    r_attr, r_op, r_units = gen_constraint_units(
        k_rest, catalog, refs, diff.m - 2, d, attr_mask(A.CAT, A.PRICE), params
    )
    cat = catalog.category[t].astype(jnp.int32)
    attr = jnp.concatenate([jnp.array([A.CAT], jnp.int32), p_attr[:1], r_attr[: MC - 2]])
    op = jnp.concatenate([jnp.zeros(1, jnp.int32), p_op[:1], r_op[: MC - 2]])
    units = jnp.concatenate([cat[None], p_units[:1], r_units[: MC - 2]])
    # Witnesses (v1.1): the bounds widen to cover R = {target} ∪ W.
    avoid = jnp.concatenate([taken, target[None]])
    wit = draw_witnesses(k_w, catalog, cat, attr, op, units, avoid, diff.k_rec - 1)
    units = widen(catalog, attr, op, units, jnp.concatenate([target[None], wit]))
    val = constraint_values(attr, op, units)
    priority = persona_priority(stream(key, "PERSONA"), attr)

    # Slots: category and num_results critical; priority and other constraints omittable.
    slots = jnp.asarray(ATTR_SLOT)[jnp.maximum(attr, 0)]
    omit = jax.vmap(lambda s: omission(key, sub, 0, s, diff.p_missing))(slots)
    problem = write_constraint_slots(problem, sub, attr, op, val, omit & (attr != A.CAT))
    omit_prio = omission(key, sub, 0, S.PRIORITY, diff.p_missing)
    problem = problem.replace(
        has_slot=problem.has_slot.at[sub, 0, S.NUM_RESULTS]
        .set(True)
        .at[sub, 0, S.PRIORITY]
        .set(True),
        pending=problem.pending.at[sub, 0, S.PRIORITY].set(omit_prio),
        slot_value=problem.slot_value.at[sub, S.NUM_RESULTS]
        .set(diff.k_rec.astype(jnp.float32))
        .at[sub, S.PRIORITY]
        .set(priority.astype(jnp.float32)),
        cons_attr=problem.cons_attr.at[0].set(attr),
        cons_op=problem.cons_op.at[0].set(op),
        cons_val=problem.cons_val.at[0].set(val),
        k_rec=diff.k_rec,
        priority=priority,
        pd_target=target,
        pool_witness=problem.pool_witness.at[0].set(jnp.where(target >= 0, wit, -1)),
    )
    return protect(problem, target)


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    return fill(key, catalog, d, params, base_problem(key, d, C.Env.PD, params, catalog), 0)
