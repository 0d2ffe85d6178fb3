"""Constraint sets (SPEC §1.2, §8.0): every reference satisfies what gen_constraints draws,
satisfaction agrees exactly with the equivalent search filters, and the slot encoding
round-trips."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.constraints import (
    attr_mask,
    constraint_values,
    constraints_from_slots,
    feasible,
    gen_constraint_units,
    gen_constraints,
    grid_value,
    satisfaction,
    to_filters,
    widen,
    write_constraint_slots,
)
from ecomjax.predicates import disc_values, filters_pass, num_values_scaled
from ecomjax.types import empty_problem

B = 256


def _draw(catalog, params, key, d):
    k1, k2, k3 = jax.random.split(key, 3)
    n = catalog.n_products
    r0 = jax.random.randint(k1, (), 0, n)
    # Second reference from the same category half the time, else absent.
    r1 = jnp.where(jax.random.bernoulli(k2), jax.random.randint(k3, (), 0, n), -1)
    refs = jnp.stack([r0, r1])
    attr, op, val = gen_constraints(
        key, catalog, refs, 2 + d // 2, d, attr_mask(C.Attr.CAT), params
    )
    idx = jnp.arange(n)
    fd, fn = to_filters(attr, op, val)
    by_filter = filters_pass(disc_values(catalog, idx), num_values_scaled(catalog, idx), fd, fn)
    return refs, attr, op, val, by_filter, feasible(catalog, idx, attr, op, val)


def test_references_satisfy_and_filters_agree(catalog, params):
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(5), i))(jnp.arange(B))
    d = jnp.arange(B, dtype=jnp.int32) % 21
    refs, attr, op, val, by_filter, feas = jax.jit(
        jax.vmap(_draw, (None, None, 0, 0)), static_argnums=1
    )(catalog, params, keys, d)
    np.testing.assert_array_equal(np.asarray(by_filter), np.asarray(feas))
    s = np.asarray(jax.vmap(satisfaction, (None, 0, 0, 0, 0))(catalog, refs, attr, op, val))
    refs = np.asarray(refs)
    assert np.all(s[:, 0] == 1.0) and np.all(s[refs[:, 1] >= 0, 1] == 1.0)
    attr, op = np.asarray(attr), np.asarray(op)
    for row, ops in zip(attr, op, strict=True):
        live = row[row >= 0]
        assert len(set(live.tolist())) == live.size and C.Attr.CAT not in live
        for a, o in zip(row, ops, strict=True):
            if a >= 0 and C.Attr(a) in C.NUMERIC_OP and C.NUMERIC_OP[C.Attr(a)] != 0:
                assert o == C.NUMERIC_OP[C.Attr(a)]
            elif a >= 0 and a < C.N_DISC_FILTERS:
                assert o == 0
    # Two references: discrete constraints only on shared values.
    assert (attr >= 0).sum(1).max() <= 12


def test_satisfaction_is_the_mean_and_empty_is_one(catalog):
    idx = jnp.arange(catalog.n_products)
    attr = jnp.full(12, -1, jnp.int32).at[:2].set(jnp.array([C.Attr.CAT, C.Attr.PRICE]))
    op = jnp.zeros(12, jnp.int32).at[1].set(-1)
    val = jnp.zeros(12, jnp.float32).at[0].set(3.0).at[1].set(20.0)
    s = np.asarray(satisfaction(catalog, idx, attr, op, val))
    cat = np.asarray(catalog.category) == 3
    cheap = np.asarray(catalog.price_cents) <= 2000
    np.testing.assert_allclose(s, (cat.astype(float) + cheap) / 2)
    empty = jnp.full(12, -1, jnp.int32)
    assert np.all(np.asarray(satisfaction(catalog, idx, empty, op, val)) == 1.0)
    assert float(satisfaction(catalog, jnp.int32(-3), attr, op, val)) == 0.0
    # A missing attribute fails: wattage on a non-charger.
    watt = jnp.full(12, -1, jnp.int32).at[0].set(C.Attr.WATTAGE)
    no_watt = np.isnan(np.asarray(catalog.num)[:, 0])
    got = np.asarray(feasible(catalog, idx, watt, jnp.ones(12, jnp.int32), jnp.zeros(12)))
    assert not np.any(got[no_watt])


def test_slot_round_trip():
    attr = (
        jnp.full(12, -1, jnp.int32).at[:3].set(jnp.array([C.Attr.CAT, C.Attr.RATING, C.Attr.COLOR]))
    )
    op = jnp.zeros(12, jnp.int32).at[1].set(1)
    val = jnp.zeros(12, jnp.float32).at[:3].set(jnp.array([4.0, 4.2, 7.0]))
    p = write_constraint_slots(
        empty_problem(), 2, attr, op, val, jnp.zeros(12, bool).at[1].set(True)
    )
    assert bool(p.has_slot[2, 0, C.Slot.RATING]) and bool(p.pending[2, 0, C.Slot.RATING])
    assert not bool(p.pending[2, 0, C.Slot.COLOR])
    a2, o2, v2 = constraints_from_slots(p.has_slot[2, 0], p.slot_value[2], p.slot_op[2])
    got = sorted(
        zip(np.asarray(a2).tolist(), np.asarray(o2).tolist(), np.asarray(v2).tolist(), strict=True)
    )
    want = sorted(
        zip(
            np.asarray(attr).tolist(),
            np.asarray(op).tolist(),
            np.asarray(val).tolist(),
            strict=True,
        )
    )
    assert [g for g in got if g[0] >= 0] == [w for w in want if w[0] >= 0]


def test_grid_value_rounds_toward_satisfaction_exactly():
    """n / inv as the nearest float32 on the satisfying side (lte up, gte down), the same
    bits jitted and eager (SPEC §12); float64 holds c·inv exactly, so the check is exact."""
    for inv, top in ((100, 2_000_000), (10, 200_000), (1, 200_000)):
        n = np.arange(0, top, 3, dtype=np.int32)
        for up in (True, False):
            args = (jnp.asarray(n), jnp.full(n.size, inv), jnp.full(n.size, up))
            c = np.asarray(jax.jit(grid_value)(*args))
            assert np.array_equal(c, np.asarray(grid_value(*args)))
            prod = c.astype(np.float64) * inv
            assert np.all(prod >= n) if up else np.all(prod <= n)
            step = np.nextafter(c, np.float32(-np.inf if up else np.inf)).astype(np.float64)
            tight = (step * inv < n) if up else (step * inv > n)
            assert np.all(tight | (prod == n))  # the nearest such float


def test_widen_covers_members_with_the_same_rounding(catalog, params):
    """Widening moves each numeric bound just far enough (to the precision grid) that
    every member satisfies it; discrete codes never move."""
    rng = np.random.default_rng(7)
    n = catalog.n_products
    cat = np.asarray(catalog.category)
    counts = np.asarray(catalog.rating_count)  # members need every constrained attribute > 0
    numeric_only = ~attr_mask(C.Attr.PRICE, C.Attr.RATING, C.Attr.RATING_COUNT, C.Attr.SHIP_DAYS)
    checked = 0
    for i in range(40):
        ref = int(rng.integers(0, n))
        peers = np.flatnonzero((cat == cat[ref]) & (np.arange(n) != ref) & (counts > 0))
        members = jnp.asarray(rng.choice(peers, 4, replace=False), jnp.int32)
        refs = jnp.asarray([ref, -1], jnp.int32)
        attr, op, units = gen_constraint_units(
            jax.random.key(i), catalog, refs, 4, 20, numeric_only, params
        )
        wide = widen(catalog, attr, op, units, members)
        val = constraint_values(attr, op, wide)
        both = jnp.concatenate([refs[:1], members])
        assert np.all(np.asarray(feasible(catalog, both, attr, op, val)))
        live = np.asarray(attr) >= 0
        moved = live & (np.asarray(wide) != np.asarray(units))
        # A moved bound sits on a member: one step tighter leaves that member out.
        for j in np.flatnonzero(moved):
            tighter = wide.at[j].set(wide[j] + (1 if int(op[j]) > 0 else -1))
            tv = constraint_values(attr, op, tighter)
            assert not np.all(np.asarray(feasible(catalog, members, attr, op, tv)))
            checked += 1
    assert checked > 20
