"""Constraint sets (SPEC §1.2, §7, §8.0): generation, satisfaction and slot encoding.

A constraint set is three arrays over ``MAX_CONSTRAINTS`` slots: ``attr`` (``Attr``, -1
padded), ``op`` (0 eq, +1 gte, -1 lte) and ``val`` (float32). Discrete values are codes
(category index, brand index, store index, or the vocabulary code of ``catalog.disc``);
numeric values are in natural units (dollars, stars, count, days, W, lb, inches), exactly
what a search filter (``Action.filter_num``) carries. The predicate is the search filter's
own float32 comparison (``ecomjax.predicates.filters_pass``), so a product passes the
equivalent filters iff it satisfies the constraints, bit for bit.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.compact import first_true
from ecomjax.predicates import SCALE, TOL, disc_values, num_values_scaled
from ecomjax.types import EnvParams, Problem

A = C.Attr
S = C.Slot
MC = C.MAX_CONSTRAINTS
N_DISC = C.N_DISC_FILTERS  # Attr 0..10 are the discrete ones, in DISC_FILTERS order
assert tuple(C.DISC_FILTERS) == tuple(A(i) for i in range(N_DISC))

# Per Attr (numeric ones only; discrete rows are unused placeholders).
_SCALE = np.ones(C.N_ATTRS, np.float32)
_INV_PREC = np.ones(C.N_ATTRS, np.float32)  # 1 / precision: 100 for cents, 10 for tenths
_DEFAULT_OP = np.zeros(C.N_ATTRS, np.int32)
for _a, _s in SCALE.items():
    _SCALE[_a] = _s
    _INV_PREC[_a] = round(1.0 / C.NUMERIC_PRECISION[_a])
    _DEFAULT_OP[_a] = C.NUMERIC_OP[_a]
IS_NUMERIC = np.arange(C.N_ATTRS) >= N_DISC

# Attr -> the customer slot that states it.
ATTR_SLOT = np.array(
    [
        S.CATEGORY,
        S.BRAND,
        S.STORE,
        S.COLOR,
        S.SIZE,
        S.MATERIAL,
        S.CONNECTOR_TYPE,
        S.ITEM_FORM,
        S.SKIN_TYPE,
        S.FINISH_TYPE,
        S.AGE_RANGE,
        S.PRICE,
        S.RATING,
        S.RATING_COUNT,
        S.SHIP_DAYS,
        S.WATTAGE,
        S.WEIGHT_LBS,
        S.SCREEN_SIZE_INCHES,
    ],
    np.int32,
)
# Slot -> Attr (-1 for slots that are not constraints).
SLOT_ATTR = np.full(C.N_SLOTS, -1, np.int32)
SLOT_ATTR[ATTR_SLOT] = np.arange(C.N_ATTRS)

# NUMERIC_FILTERS index for (attr, direction): the filter a numeric constraint becomes.
_NUM_FILTER = np.full((C.N_ATTRS, 3), -1, np.int32)  # [attr, op + 1]
for _i, (_name, _a, _dir) in enumerate(C.NUMERIC_FILTERS):
    _NUM_FILTER[_a, _dir + 1] = _i


def attr_values(catalog: Catalog, pids: jax.Array) -> jax.Array:
    """float32 [..., N_ATTRS] in Attr order: codes (-1 missing) then scaled numbers (NaN
    missing), the units ``filters_pass`` compares in."""
    p = jnp.maximum(pids, 0)
    disc = disc_values(catalog, p).astype(jnp.float32)
    return jnp.concatenate([disc, num_values_scaled(catalog, p)], axis=-1)


def attr_present(vals: jax.Array) -> jax.Array:
    """bool [..., N_ATTRS]: the product has the attribute (a numeric value <= 0 does not
    qualify as a constraint candidate, SPEC §8.0)."""
    numeric = jnp.asarray(IS_NUMERIC)
    return jnp.where(numeric, ~jnp.isnan(vals) & (vals > 0), vals >= 0)


def _holds(vals: jax.Array, attr: jax.Array, op: jax.Array, val: jax.Array) -> jax.Array:
    """bool [..., MC]: C_j(p) with the search filter's exact float32 arithmetic."""
    a = jnp.clip(attr, 0, C.N_ATTRS - 1)
    v = jnp.take(vals, a, axis=-1)  # [..., MC]
    bound = val * jnp.asarray(_SCALE)[a]
    eq = (v == val) & (v >= 0)
    ge = (v >= bound - TOL) & ~jnp.isnan(v)
    le = (v <= bound + TOL) & ~jnp.isnan(v)
    return jnp.select([op > 0, op < 0], [ge, le], eq)


def constraint_holds(
    catalog: Catalog, pids: jax.Array, attr: jax.Array, op: jax.Array, val: jax.Array
) -> jax.Array:
    """bool [..., MC]: each live constraint holds for each product; padding holds (True);
    an unknown id (< 0 or >= N) fails every live constraint."""
    known = (pids >= 0) & (pids < catalog.n_products)
    ok = _holds(attr_values(catalog, pids), attr, op, val)
    return jnp.where(attr >= 0, ok & known[..., None], True)


def satisfaction(
    catalog: Catalog, pids: jax.Array, attr: jax.Array, op: jax.Array, val: jax.Array
) -> jax.Array:
    """float32 [...]: s(p | C), the mean of C_j(p) over the live constraints; 1 when C is
    empty; 0 for an unknown id (it has no attributes)."""
    ok = constraint_holds(catalog, pids, attr, op, val)
    live = attr >= 0
    n = live.sum()
    s = jnp.where(live, ok, False).sum(-1) / jnp.maximum(n, 1)
    known = (pids >= 0) & (pids < catalog.n_products)
    return jnp.where(known, jnp.where(n > 0, s, 1.0), 0.0).astype(jnp.float32)


def feasible(
    catalog: Catalog, pids: jax.Array, attr: jax.Array, op: jax.Array, val: jax.Array
) -> jax.Array:
    """bool [...]: s(p | C) = 1, decided without float division."""
    known = (pids >= 0) & (pids < catalog.n_products)
    return constraint_holds(catalog, pids, attr, op, val).all(-1) & known


def to_filters(attr: jax.Array, op: jax.Array, val: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The catalog_search filters equivalent to a constraint set: (filter_disc int32
    [N_DISC_FILTERS] with -1 = none, filter_num float32 [N_NUM_FILTERS] with NaN = none)."""
    live = attr >= 0
    a = jnp.clip(attr, 0, C.N_ATTRS - 1)
    disc = live & (a < N_DISC) & (op == 0)
    fd = jnp.full(N_DISC, -1, jnp.int32)
    fd = fd.at[jnp.where(disc, a, N_DISC)].set(val.astype(jnp.int32), mode="drop")
    fi = jnp.asarray(_NUM_FILTER)[a, jnp.clip(op, -1, 1) + 1]
    num = live & (a >= N_DISC) & (fi >= 0)
    fn = jnp.full(C.N_NUM_FILTERS, jnp.nan, jnp.float32)
    fn = fn.at[jnp.where(num, fi, C.N_NUM_FILTERS)].set(val, mode="drop")
    return fd, fn


def gen_constraints(
    key: jax.Array,
    catalog: Catalog,
    refs: jax.Array,
    n: jax.Array,
    d: jax.Array,
    exclude: jax.Array,
    params: EnvParams,
    force: jax.Array | int = -1,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """SPEC §8.0 ``gen_constraints(refs, n, d, exclude)``: (attr, op, val), each [MC].

    refs int32 [2] (-1 = absent); n traced; exclude bool [N_ATTRS]. Candidates are the
    attributes every reference has (a numeric value <= 0 never qualifies; a discrete one
    qualifies only if all references share its value), minus ``exclude``. n of them are
    drawn without replacement, in draw order; ``force`` (an Attr, -1 none) is drawn first
    when it is a candidate (SUB's compatibility attribute). Numeric bounds take δ ~ U(0,
    δ_max(d)) and round toward satisfaction at the §1.2 precision; a float32 check against
    the filter predicate nudges a bound one step further if rounding ever left a reference
    outside it, so every reference satisfies every constraint.
    """
    k_pick, k_delta, k_dir = jax.random.split(key, 3)
    refs = jnp.asarray(refs, jnp.int32)
    live_ref = refs >= 0
    vals = attr_values(catalog, refs)  # [2, NA]
    has = attr_present(vals) | ~live_ref[:, None]
    v0 = vals[0]
    same = ((vals == v0[None, :]) | ~live_ref[:, None]).all(0)
    numeric = jnp.asarray(IS_NUMERIC)
    cand = has.all(0) & ~exclude & (numeric | same) & live_ref[0]
    prio = jax.random.uniform(k_pick, (C.N_ATTRS,))
    prio = jnp.where(jnp.arange(C.N_ATTRS) == force, -1.0, prio)
    prio = jnp.where(cand, prio, 2.0)
    order = jnp.argsort(prio)[:MC].astype(jnp.int32)
    take = (jnp.arange(MC) < jnp.minimum(n, cand.sum())) & cand[order]
    attr = jnp.where(take, order, -1)

    # Numeric bounds, for every attribute, then gathered.
    dmax = D.difficulty(d, params.overrides).delta_max
    delta = jax.random.uniform(k_delta, (C.N_ATTRS,)) * dmax
    screen_dir = jnp.where(jax.random.bernoulli(k_dir), 1, -1)
    op_all = jnp.asarray(_DEFAULT_OP).at[A.SCREEN_SIZE_INCHES].set(screen_dir)
    scale, inv_prec = jnp.asarray(_SCALE), jnp.asarray(_INV_PREC)
    units = vals / scale * inv_prec  # [2, NA], value in precision steps
    hi = jnp.where(live_ref[:, None], units, -jnp.inf).max(0) * (1 + delta)
    lo = jnp.where(live_ref[:, None], units, jnp.inf).min(0) * (1 - delta)
    steps = jnp.where(op_all < 0, jnp.ceil(hi - 1e-4), jnp.floor(lo + 1e-4))
    bound = steps / inv_prec
    ok = _holds(vals, jnp.arange(C.N_ATTRS), op_all, bound)  # [2, NA]
    ok = (ok | ~live_ref[:, None]).all(0)
    bound = jnp.where(ok, bound, (steps - op_all) / inv_prec)  # one step toward satisfaction
    num_val = jnp.where(numeric, bound, v0)
    a = jnp.maximum(attr, 0)
    op = jnp.where(take, jnp.where(numeric[a], op_all[a], 0), 0).astype(jnp.int32)
    val = jnp.where(take, num_val[a], 0.0).astype(jnp.float32)
    return attr, op, val


def attr_mask(*attrs: int) -> jax.Array:
    """bool [N_ATTRS] with the given attributes set (an ``exclude`` argument)."""
    m = np.zeros(C.N_ATTRS, bool)
    m[list(attrs)] = True
    return jnp.asarray(m)


def write_constraint_slots(
    problem: Problem,
    sub: jax.Array | int,
    attr: jax.Array,
    op: jax.Array,
    val: jax.Array,
    pending: jax.Array,
) -> Problem:
    """Writes one constraint set into the goal's slot rows at sub-goal ``sub``: has_slot,
    pending (bool [MC], per constraint; the caller makes critical ones False), slot_value
    and slot_op, with Attr mapped to its Slot (CAT -> CATEGORY, PRICE -> PRICE, ...)."""
    live = attr >= 0
    slot = jnp.where(live, jnp.asarray(ATTR_SLOT)[jnp.maximum(attr, 0)], C.N_SLOTS)
    return problem.replace(
        has_slot=problem.has_slot.at[sub, 0, slot].set(True, mode="drop"),
        pending=problem.pending.at[sub, 0, slot].set(pending & live, mode="drop"),
        slot_value=problem.slot_value.at[sub, slot].set(val, mode="drop"),
        slot_op=problem.slot_op.at[sub, slot].set(op, mode="drop"),
    )


def constraints_from_slots(
    stated: jax.Array, value: jax.Array, op: jax.Array
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """The inverse of ``write_constraint_slots`` for an agent: one sub-goal's known slot
    rows (bool / float32 / int32 [N_SLOTS]) -> a constraint set (attr, op, val) [MC]."""
    is_cons = jnp.asarray(SLOT_ATTR >= 0) & stated
    order = first_true(is_cons, MC)
    take = order >= 0
    attr = jnp.where(take, jnp.asarray(SLOT_ATTR)[order], -1)
    return (
        attr.astype(jnp.int32),
        jnp.where(take, op[order], 0).astype(jnp.int32),
        jnp.where(take, value[order], 0.0).astype(jnp.float32),
    )
