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

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.compact import first_true
from ecomjax.predicates import SCALE, TOL, attr_column, disc_values, num_values_scaled
from ecomjax.types import EnvParams, Problem

A = C.Attr
S = C.Slot
MC = C.MAX_CONSTRAINTS
N_DISC = C.N_DISC_FILTERS  # Attr 0..10 are the discrete ones, in DISC_FILTERS order
assert tuple(C.DISC_FILTERS) == tuple(A(i) for i in range(N_DISC))

# Per Attr (numeric ones only; discrete rows are unused placeholders).
_SCALE = np.ones(C.N_ATTRS, np.float32)
_INV_PREC = np.ones(C.N_ATTRS, np.int32)  # 1 / precision: 100 for cents, 10 for tenths
_GRID = np.ones(C.N_ATTRS, np.int32)  # scaled units per precision step (rating: 10 hundredths)
_DEFAULT_OP = np.zeros(C.N_ATTRS, np.int32)
for _a, _s in SCALE.items():
    _SCALE[_a] = _s
    _INV_PREC[_a] = round(1.0 / C.NUMERIC_PRECISION[_a])
    _GRID[_a] = round(_s / _INV_PREC[_a])
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
# The slots that state a filterable constraint besides the category (SPEC §10.1).
CONSTRAINT_SLOTS = tuple(s for s in S if SLOT_ATTR[s] >= 0 and s != S.CATEGORY)

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


class AttrBounds(NamedTuple):
    """A constraint set merged per attribute (each bool/float32 [N_ATTRS]): the tightest
    lower bound, the tightest upper bound, and the one value every ``eq`` names."""

    has_ge: jax.Array
    lo: jax.Array  # max over the gte constraints of bound - TOL
    has_le: jax.Array
    hi: jax.Array  # min over the lte constraints of bound + TOL
    has_eq: jax.Array
    eq: jax.Array  # the first eq constraint's value
    eq_conflict: jax.Array  # two eq constraints name different values (or one is NaN)
    void: jax.Array  # a gte or lte bound is NaN, which no value meets


def attr_bounds(attr: jax.Array, op: jax.Array, val: jax.Array) -> AttrBounds:
    """Each constraint's own float32 bound (as ``_holds`` computes it), merged: v >= b_j for
    every j iff v >= max_j b_j, v == c_j for every j iff the c_j agree and v equals them.
    NaN bounds are flagged apart (``void``), not left to the max: XLA:CPU's vectorised
    reductions may drop a NaN."""
    live = attr >= 0
    a = jnp.clip(attr, 0, C.N_ATTRS - 1)
    hit = live[:, None] & (a[:, None] == jnp.arange(C.N_ATTRS)[None, :])  # [MC, N_ATTRS]
    bound = val * jnp.asarray(_SCALE)[a]
    ge, le, eq = (hit & m[:, None] for m in (op > 0, op < 0, op == 0))
    lo, hi = bound - TOL, bound + TOL
    first = val[jnp.argmax(eq, axis=0)]
    return AttrBounds(
        has_ge=ge.any(0),
        lo=jnp.where(ge & ~jnp.isnan(lo)[:, None], lo[:, None], -jnp.inf).max(0),
        has_le=le.any(0),
        hi=jnp.where(le & ~jnp.isnan(hi)[:, None], hi[:, None], jnp.inf).min(0),
        has_eq=eq.any(0),
        eq=first,
        eq_conflict=(eq & (val[:, None] != first[None, :])).any(0),
        void=(ge & jnp.isnan(lo)[:, None]).any(0) | (le & jnp.isnan(hi)[:, None]).any(0),
    )


# Up to this many products, ``feasible`` gathers from one [N_ATTRS, N] float32 table of the
# whole catalog built per call (72 KB at N = 1,000); above it, from the catalog's columns
# (no N-sized temporary; 2-3x slower at N <= 100k, 3x faster at 1M: results/feasible.jsonl).
TABLE_MAX_PRODUCTS = 1 << 17


def _feasible(
    catalog: Catalog, pids: jax.Array, attr: jax.Array, op: jax.Array, val: jax.Array, table: bool
) -> jax.Array:
    if attr.ndim != 1:
        raise ValueError(f"one constraint set a call (vmap for more), got attr {attr.shape}")
    n = catalog.n_products
    ok = (pids >= 0) & (pids < n)
    p = jnp.clip(pids, 0, n - 1)
    b = attr_bounds(attr, op, val)
    cols = attr_values(catalog, jnp.arange(n, dtype=jnp.int32)).T if table else None
    for k in range(C.N_ATTRS):
        v = cols[k][p] if table else attr_column(catalog, p, k)
        hold = ~b.has_ge[k] | (v >= b.lo[k])  # a NaN v (missing) compares false
        hold &= ~b.has_le[k] | (v <= b.hi[k])
        hold &= ~b.has_eq[k] | ((v == b.eq[k]) & (v >= 0) & ~b.eq_conflict[k])
        ok &= hold & ~b.void[k]
    return ok


def feasible(
    catalog: Catalog, pids: jax.Array, attr: jax.Array, op: jax.Array, val: jax.Array
) -> jax.Array:
    """bool [...]: s(p | C) = 1, decided without float division. Equal to
    ``constraint_holds(...).all(-1) & known`` (tests: both ways, random sets with NaN and
    repeated attributes); one elementwise pass per attribute against the merged bounds
    instead, because XLA:CPU reduces the [..., MC] minor axis as a serial loop: 6.6x
    faster at 200 ids a lane, 2.4x at 36, slower at 10 (1.24 against 0.72 µs a lane,
    the table's build dominating), results/feasible.jsonl at N = 1,000."""
    return _feasible(catalog, pids, attr, op, val, catalog.n_products <= TABLE_MAX_PRODUCTS)


def required_category(
    catalog: Catalog, attr: jax.Array, op: jax.Array, val: jax.Array
) -> jax.Array:
    """int32: the category every product satisfying the set must have (its first live
    ``category eq`` constraint, SPEC §8.1-2), or -1 when no such constraint names a
    category of the catalog (then no category bounds the satisfying products)."""
    is_cat = (attr == A.CAT) & (op == 0)
    first = jnp.argmax(is_cat)
    v = val[first]
    ok = is_cat.any() & (v >= 0) & (v < catalog.n_categories) & (v == jnp.floor(v))
    return jnp.where(ok, v, -1).astype(jnp.int32)


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


# --- generated bounds in integer units (SPEC §12) ------------------------------------------
#
# A stated bound is an integer number of precision steps (cents, tenths, whole units) until
# the last moment, and that integer becomes a float32 by integer-only rules. No float
# product, division or transcendental sits on the path, so no compiler rewrite (x / c ->
# x * (1/c), a fused multiply-add, an inlined exp) can move a stated value by an ulp
# between a jitted and an eager program.

SLACK_BITS = 16  # δ = j / 2^16 with j ~ U{0..⌊δ_max·2^16⌋}
SLACK_ONE = 1 << SLACK_BITS
# r / inv correctly rounded to float32, rows inv = 1, 10, 100.
_FRAC = np.zeros((3, 100), np.float32)
_FRAC[1, :10] = np.arange(10) / 10.0
_FRAC[2] = np.arange(100) / 100.0


def slack_max(d: jax.Array, params: EnvParams) -> jax.Array:
    """int32: ⌊δ_max(d)·2^16⌋. δ_max comes from difficulty's per-d table (or a static
    override) and the scaling by 2^16 is exact, so δ is the same in every program."""
    dm = D.difficulty(d, params.overrides).delta_max
    return jnp.minimum(jnp.floor(dm * SLACK_ONE), SLACK_ONE).astype(jnp.int32)


def _ceil_slack(x: jax.Array, j: jax.Array) -> jax.Array:
    """int32 ⌈x·j / 2^16⌉ exactly, for 0 <= x < 2^31 and 0 <= j <= 2^16 (uint32 halves)."""
    x = jnp.maximum(x, 0).astype(jnp.uint32)
    j = jnp.clip(j, 0, SLACK_ONE).astype(jnp.uint32)
    hi, lo = x >> SLACK_BITS, x & (SLACK_ONE - 1)
    return (hi * j + ((lo * j + (SLACK_ONE - 1)) >> SLACK_BITS)).astype(jnp.int32)


def _scaled_ints(vals: jax.Array) -> jax.Array:
    """int32 scaled units (cents, hundredths, tenths) of ``attr_values`` numbers: the
    catalog stores them on that grid, so rounding is exact; NaN reads 0 (mask it)."""
    return jnp.round(jnp.nan_to_num(vals, nan=0.0)).astype(jnp.int32)


def ratio(n: jax.Array, inv: jax.Array) -> jax.Array:
    """float32 n / inv for integer n and inv in {1, 10, 100}, the same bits in every program:
    q + r/inv with q = n // inv and r/inv from an exact host table, so no compiler rewrite
    (x / c into x · (1/c)) can move it by an ulp (SPEC §12)."""
    n = jnp.asarray(n, jnp.int32)
    inv = jnp.asarray(inv, jnp.int32)
    row = (inv >= 10).astype(jnp.int32) + (inv >= 100).astype(jnp.int32)
    return (n // inv).astype(jnp.float32) + jnp.asarray(_FRAC)[row, n % inv]


def grid_value(n: jax.Array, inv: jax.Array, up: jax.Array) -> jax.Array:
    """float32 n / inv for n >= 0 and inv in {1, 10, 100}, rounded up (``up``) or down to a
    float32 with integer arithmetic only: n = q·inv + r gives q + r/inv (a table), then
    the candidate c = m·2^-s is compared exactly (m·inv against n·2^s) and stepped one ulp
    if it lies on the wrong side. An lte bound rounded up and a gte bound rounded down let
    every product on the integer bound pass the float predicate in any program, so no
    reference ever needs a nudge. Exact below 2^23 steps."""
    n = jnp.maximum(n, 0).astype(jnp.int32)
    inv = jnp.asarray(inv, jnp.int32)
    c = ratio(n, inv)
    bits = jax.lax.bitcast_convert_type(c, jnp.uint32)
    s = 150 - ((bits >> 23) & 0xFF).astype(jnp.int32)  # c = m·2^-s
    m = (bits & 0x7FFFFF) | 0x800000
    exact = (n == 0) | (s < 0) | (s > 31)
    s_u = jnp.clip(s, 0, 31).astype(jnp.uint32)
    lhs = m * inv.astype(jnp.uint32)
    rhs = n.astype(jnp.uint32) << s_u
    below, above = ~exact & (lhs < rhs), ~exact & (lhs > rhs)
    c = jnp.where(up & below, jnp.nextafter(c, jnp.float32(jnp.inf)), c)
    return jnp.where(~up & above, jnp.nextafter(c, jnp.float32(-jnp.inf)), c)


def constraint_values(attr: jax.Array, op: jax.Array, units: jax.Array) -> jax.Array:
    """float32 [MC] constraint values from integer units: discrete codes as they are,
    numeric precision steps in natural units rounded toward satisfaction (``grid_value``)."""
    a = jnp.maximum(attr, 0)
    num = grid_value(units, jnp.asarray(_INV_PREC)[a], op < 0)
    val = jnp.where(jnp.asarray(IS_NUMERIC)[a], num, units.astype(jnp.float32))
    return jnp.where(attr >= 0, val, 0.0).astype(jnp.float32)


def _covering_steps(ints: jax.Array, op: jax.Array, grid: jax.Array) -> jax.Array:
    """Precision steps of the tightest bound that an integer scaled value satisfies:
    ⌈v / grid⌉ for lte, ⌊v / grid⌋ for gte."""
    return jnp.where(op < 0, (ints + grid - 1) // grid, ints // grid)


def gen_constraint_units(
    key: jax.Array,
    catalog: Catalog,
    refs: jax.Array,
    n: jax.Array,
    d: jax.Array,
    exclude: jax.Array,
    params: EnvParams,
    force: jax.Array | int = -1,
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """SPEC §8.0 ``gen_constraints(refs, n, d, exclude)`` in integer units: (attr, op,
    units), each [MC]; units are discrete codes or numeric precision steps.

    refs int32 [2] (-1 = absent); n traced; exclude bool [N_ATTRS]. Candidates are the
    attributes every reference has (a numeric value <= 0 never qualifies; a discrete one
    qualifies only if all references share its value), minus ``exclude``. n of them are
    drawn without replacement, in draw order; ``force`` (an Attr, -1 none) is drawn first
    when it is a candidate (SUB's compatibility attribute). Numeric bounds take δ ~ U(0,
    δ_max(d)) on a 2^-16 grid and round toward satisfaction at the §1.2 precision, in exact
    integer arithmetic over the catalog's own units, so every reference satisfies every
    constraint.
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

    # Numeric bounds, for every attribute, then gathered: v·(1 ± j/2^16), exactly.
    j = jax.random.randint(k_delta, (C.N_ATTRS,), 0, slack_max(d, params) + 1)
    screen_dir = jnp.where(jax.random.bernoulli(k_dir), 1, -1)
    op_all = jnp.asarray(_DEFAULT_OP).at[A.SCREEN_SIZE_INCHES].set(screen_dir)
    ints = _scaled_ints(vals)  # [2, NA]
    hi = jnp.where(live_ref[:, None], ints, 0).max(0)
    lo = jnp.where(live_ref[:, None], ints, jnp.iinfo(jnp.int32).max).min(0)
    x = jnp.where(op_all < 0, hi + _ceil_slack(hi, j), lo - _ceil_slack(lo, j))
    steps = _covering_steps(x, op_all, jnp.asarray(_GRID))
    units = jnp.where(numeric, steps, v0.astype(jnp.int32))
    a = jnp.maximum(attr, 0)
    op = jnp.where(take, jnp.where(numeric[a], op_all[a], 0), 0).astype(jnp.int32)
    return attr, op, jnp.where(take, units[a], 0).astype(jnp.int32)


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
    """``gen_constraint_units`` with float32 values (attr, op, val), each [MC]."""
    attr, op, units = gen_constraint_units(key, catalog, refs, n, d, exclude, params, force)
    return attr, op, constraint_values(attr, op, units)


def widen(
    catalog: Catalog, attr: jax.Array, op: jax.Array, units: jax.Array, members: jax.Array
) -> jax.Array:
    """units [MC] with every numeric bound widened just enough that each of ``members``
    (int32 [M], -1 pads; each has every numeric attribute C names) satisfies it, with the
    same rounding toward satisfaction (SPEC §8.1, §8.2 v1.1). Discrete codes and bounds
    the members already meet stay as they are."""
    a = jnp.maximum(attr, 0)
    vals = attr_values(catalog, members)[:, a]  # [M, MC]
    live = (members >= 0)[:, None] & ~jnp.isnan(vals) & (vals > 0)  # numeric rows only
    need = _covering_steps(_scaled_ints(vals), op[None, :], jnp.asarray(_GRID)[a][None, :])
    big = jnp.iinfo(jnp.int32).max
    most = jnp.where(live, need, -1).max(0)
    least = jnp.where(live, need, big).min(0)
    wide = jnp.where(op < 0, jnp.maximum(units, most), jnp.minimum(units, least))
    numeric = (attr >= 0) & jnp.asarray(IS_NUMERIC)[a] & (op != 0)
    return jnp.where(numeric, wide, units).astype(jnp.int32)


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
