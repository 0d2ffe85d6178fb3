"""SUB problem generator (SPEC §8.2): an original p0 that is out of stock in every tool
(core.reset forces ``World.oos[sub_original]``), an in-stock witness p1 of the same
category that preferably shares p0's compatibility attribute, and constraints both
satisfy, widened to cover up to k_rec(d) − 1 further witnesses (v1.1)."""

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
    attr_present,
    attr_values,
    constraint_values,
    gen_constraint_units,
    widen,
    write_constraint_slots,
)
from ecomjax.envs.pd.witnesses import draw_witnesses
from ecomjax.sampling import (
    base_problem,
    first_valid,
    in_category,
    omission,
    protect,
    stream,
    taken_products,
)
from ecomjax.types import EnvParams, Problem

A = C.Attr
S = C.Slot
# The slots the customer can be asked about (SPEC §10.1 knowable fields).
SLOTS = (S.ORIGINAL, S.CATEGORY, S.NUM_RESULTS, *CONSTRAINT_SLOTS)
MC = C.MAX_CONSTRAINTS
COMPAT = (A.CONNECTOR_TYPE, A.SIZE, A.MATERIAL)  # in preference order


def in_stock_per_category(catalog: Catalog) -> jax.Array:
    """int32 [C]: in-stock products per category (catalog-only, so vmap keeps it shared)."""
    cat = catalog.category.astype(jnp.int32)
    return jnp.zeros(catalog.n_categories, jnp.int32).at[cat].add(catalog.stock > 0)


def compat_attr(catalog: Catalog, p: jax.Array) -> jax.Array:
    """The first of connector_type, size, material that p has (an Attr, -1 if none)."""
    present = attr_present(attr_values(catalog, p))[jnp.array(COMPAT)]
    return jnp.where(present.any(), jnp.array(COMPAT)[jnp.argmax(present)], -1)


def fill(
    key: jax.Array,
    catalog: Catalog,
    d: jax.Array,
    params: EnvParams,
    problem: Problem,
    sub: jax.Array | int,
) -> Problem:
    diff = D.difficulty(d, params.overrides)
    k_o, k_w, k_w2, k_c, k_x = jax.random.split(stream(key, "PROBLEM", C.Env.SUB, sub), 5)
    taken = taken_products(problem)
    counts = in_stock_per_category(catalog)

    def original_ok(p):
        cat = catalog.category[p].astype(jnp.int32)
        others = counts[cat] - (catalog.stock[p] > 0)
        denied = catalog.cat_denied[cat]
        return (others >= 1) & (catalog.desc_form[p] > 0) & ~denied & ~(taken == p).any()

    p0 = first_valid(k_o, 0, catalog.n_products, original_ok)
    q0 = jnp.maximum(p0, 0)
    cat = catalog.category[q0].astype(jnp.int32)
    lo, hi = in_category(catalog, cat)
    compat = compat_attr(catalog, q0)
    v0 = attr_values(catalog, q0)[jnp.maximum(compat, 0)]

    def witness_ok(pos, same):
        p = catalog.cat_order[pos]
        shares = attr_values(catalog, p)[jnp.maximum(compat, 0)] == v0
        fine = (catalog.stock[p] > 0) & (p != p0) & ~(taken == p).any()
        return fine & (~same | ((compat >= 0) & shares))

    pos = first_valid(k_w, lo, hi, lambda q: witness_ok(q, True), 512)
    pos = jnp.where(pos >= 0, pos, first_valid(k_w2, lo, hi, lambda q: witness_ok(q, False), 128))
    p1 = jnp.where(pos >= 0, catalog.cat_order[jnp.maximum(pos, 0)], -1)
    refs = jnp.stack([p0, p1])
    r_attr, r_op, r_units = gen_constraint_units(
        k_c, catalog, refs, diff.m - 1, d, attr_mask(A.CAT), params, force=compat
    )
    attr = jnp.concatenate([jnp.array([A.CAT], jnp.int32), r_attr[: MC - 1]])
    op = jnp.concatenate([jnp.zeros(1, jnp.int32), r_op[: MC - 1]])
    units = jnp.concatenate([cat[None], r_units[: MC - 1]])
    # Further witnesses (v1.1): the bounds widen to cover {p1} ∪ W; p0 stays excluded.
    avoid = jnp.concatenate([taken, refs])
    wit = draw_witnesses(k_x, catalog, cat, attr, op, units, avoid, diff.k_rec - 1)
    wit = jnp.where(p1 >= 0, wit, -1)
    units = widen(catalog, attr, op, units, jnp.concatenate([p1[None], wit]))
    val = constraint_values(attr, op, units)

    slots = jnp.asarray(ATTR_SLOT)[jnp.maximum(attr, 0)]
    omit = jax.vmap(lambda s: omission(key, sub, 0, s, diff.p_missing))(slots)
    problem = write_constraint_slots(problem, sub, attr, op, val, omit & (attr != A.CAT))
    form = catalog.desc_form[q0].astype(jnp.int32)
    ref_key = catalog.desc_key[q0, jnp.maximum(form - 1, 0)]
    problem = problem.replace(
        has_slot=problem.has_slot.at[sub, 0, S.NUM_RESULTS]
        .set(True)
        .at[sub, 0, S.ORIGINAL]
        .set(True),
        slot_value=problem.slot_value.at[sub, S.NUM_RESULTS].set(diff.k_rec.astype(jnp.float32)),
        ref_form=problem.ref_form.at[sub].set(jnp.where(p0 >= 0, form, 0)),
        ref_key=problem.ref_key.at[sub].set(jnp.where(p0 >= 0, ref_key, -1)),
        cons_attr=problem.cons_attr.at[1].set(attr),
        cons_op=problem.cons_op.at[1].set(op),
        cons_val=problem.cons_val.at[1].set(val),
        k_rec=diff.k_rec,
        sub_original=p0,
        sub_witness=p1,
        pool_witness=problem.pool_witness.at[1].set(wit),
    )
    return protect(problem, p1)


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    return fill(key, catalog, d, params, base_problem(key, d, C.Env.SUB, params, catalog), 0)
