"""CART problem generator (SPEC §8.3): targets, quantities, variant requirements, the
visit history and the slot omission draws."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.envs.cart.variants import synthesize
from ecomjax.sampling import (
    base_problem,
    first_valid,
    in_category,
    omission,
    stream,
    taken_products,
)
from ecomjax.types import EnvParams, Problem

S = C.Slot
# The slots the customer can be asked about (SPEC §10.1 knowable fields).
SLOTS = (S.ITEMS, S.VARIANT, S.QUANTITY)
MI = C.MAX_ITEMS
MAX_QTY = 4


def _targets(key: jax.Array, catalog: Catalog, diff: D.Difficulty, taken: jax.Array):
    """Distinct targets with enough stock for their quantity and a unique full title,
    none of them used by an earlier JOURNEY sub-goal (``taken``)."""
    n = catalog.n_products

    def draw(picked, j):
        k = jax.random.fold_in(key, j)
        k_qty, k_multi, k_var, k_pid = jax.random.split(k, 4)
        multi = jax.random.bernoulli(k_multi, diff.p_qty)
        qty = jnp.where(multi, jax.random.randint(k_qty, (), 2, MAX_QTY + 1), 1)
        var_req = jax.random.bernoulli(k_var, diff.p_var)

        def ok(p):
            fresh = ~(picked == p).any() & ~(taken == p).any()
            denied = catalog.cat_denied[catalog.category[p]]
            return (catalog.stock[p] >= qty) & (catalog.desc_form[p] > 0) & fresh & ~denied

        live = j < diff.n_items
        pid = jnp.where(live, first_valid(k_pid, 0, n, ok), -1)
        picked = picked.at[j].set(pid)
        return picked, (pid, jnp.where(pid >= 0, qty, 0), live & var_req & (pid >= 0))

    _, (pid, qty, var_req) = jax.lax.scan(draw, jnp.full(MI, -1, jnp.int32), jnp.arange(MI))
    return pid, qty, var_req


def _history(key: jax.Array, catalog: Catalog, targets: jax.Array, n_items: jax.Array):
    """Targets plus max(3, 2·n_items) distractors from their categories, shuffled."""
    n_dist = jnp.maximum(3, 2 * n_items)
    h = C.MAX_HISTORY
    n_valid = jnp.maximum((targets >= 0).sum(), 1)

    def draw(picked, j):
        k = jax.random.fold_in(key, j)
        src = targets[j % n_valid]
        lo, hi = in_category(catalog, catalog.category[jnp.maximum(src, 0)].astype(jnp.int32))
        fresh = lambda i: ~(picked == i).any() & ~(targets == i).any()
        from_cat = first_valid(k, lo, hi, lambda pos: fresh(catalog.cat_order[pos]), 16)
        pid = jnp.where(from_cat >= 0, catalog.cat_order[jnp.maximum(from_cat, 0)], -1)
        anywhere = first_valid(jax.random.fold_in(k, 1), 0, catalog.n_products, fresh, 16)
        pid = jnp.where(pid >= 0, pid, anywhere)
        pid = jnp.where(j < n_dist, pid, -1)
        return picked.at[j].set(pid), pid

    n_slots = h - MI
    _, dist = jax.lax.scan(draw, jnp.full(n_slots, -1, jnp.int32), jnp.arange(n_slots))
    items = jnp.concatenate([targets, dist])
    prio = jnp.where(items >= 0, jax.random.uniform(jax.random.fold_in(key, 1 << 16), (h,)), 2.0)
    return items[jnp.argsort(prio)]


def fill(
    key: jax.Array,
    catalog: Catalog,
    d: jax.Array,
    params: EnvParams,
    problem: Problem,
    sub: int | jax.Array = 0,
) -> Problem:
    """Writes the CART goal into ``problem`` with its slot rows at sub-goal ``sub``."""
    diff = D.difficulty(d, params.overrides)
    taken = taken_products(problem)
    pid, qty, var_req = _targets(stream(key, "PROBLEM", C.Env.CART, sub), catalog, diff, taken)
    var_keys = jax.vmap(lambda j: stream(key, "VARIANT", j))(jnp.arange(MI))
    attr, vals, target = jax.vmap(lambda k, p: synthesize(k, catalog, jnp.maximum(p, 0)))(
        var_keys, pid
    )
    valid = pid >= 0
    p = jnp.maximum(pid, 0)
    form = jnp.where(valid, catalog.desc_form[p].astype(jnp.int32), 0)
    desc_key = jnp.where(
        valid,
        jnp.take_along_axis(catalog.desc_key[p], jnp.maximum(form - 1, 0)[:, None], 1)[:, 0],
        -1,
    )
    items = jnp.arange(MI)
    row = jnp.zeros((MI, C.N_SLOTS), bool)
    row = row.at[:, S.ITEMS].set(valid)
    row = row.at[:, S.QUANTITY].set(valid & (qty > 1))
    row = row.at[:, S.VARIANT].set(var_req)
    omit_qty = jax.vmap(lambda i: omission(key, sub, i, S.QUANTITY, diff.p_missing))(items)
    omit_var = jax.vmap(lambda i: omission(key, sub, i, S.VARIANT, diff.p_missing))(items)
    pend = jnp.zeros_like(row)
    pend = pend.at[:, S.QUANTITY].set(row[:, S.QUANTITY] & omit_qty)
    pend = pend.at[:, S.VARIANT].set(row[:, S.VARIANT] & omit_var)
    return problem.replace(
        item_pid=pid,
        item_qty=qty,
        item_var_req=var_req,
        item_var_attr=jnp.where(var_req, attr, -1),
        item_var_vals=jnp.where(var_req[:, None], vals, 0.0),
        item_var_target=jnp.where(var_req, target, -1),
        item_desc_form=form,
        item_desc_key=desc_key,
        history=_history(stream(key, "HISTORY"), catalog, pid, diff.n_items),
        has_slot=problem.has_slot.at[sub].set(row),
        pending=problem.pending.at[sub].set(pend),
    )


def generate(key: jax.Array, catalog: Catalog, d: jax.Array, params: EnvParams) -> Problem:
    return fill(key, catalog, d, params, base_problem(key, d, C.Env.CART, params), 0)
