"""BUNDLE against SPEC §8.7 and §13: generator invariants (budget always feasible),
hand-computed verifier cases and rollout sweeps over d = 0..20.

Rollouts share one batch shape (B = 420, 20 episodes per d); the oracle's result is
module-scoped and reused by the random-agent bound.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax.catalog.vocabulary import TAXONOMY
from ecomjax.envs.bundle.generator import (
    PROJECT_CATS,
    PROJECT_LEN,
    PROJECTS,
    category_prices,
    generate,
)
from ecomjax.envs.bundle.verifier import verify
from ecomjax.types import EnvParams, empty_answer_fields, empty_problem
from ecomjax.world import init_world

S = C.Slot
TM = C.Termination
B = 420
DS = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
PARAMS = EnvParams()


def keys_for(seed: int, n: int = B) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))


def _host_prices(catalog):
    cat = np.asarray(catalog.category).astype(int)
    price = np.asarray(catalog.price_cents).astype(int)
    ok = np.asarray(catalog.stock) > 0
    out = {}
    for c in range(catalog.n_categories):
        idx = np.flatnonzero(ok & (cat == c))
        p = price[idx]
        cheapest = idx[np.lexsort((idx, p))[0]] if idx.size else -1
        out[c] = (p.min() if idx.size else 0, np.median(p) if idx.size else 0.0, cheapest)
    return out


def test_projects_map_to_leaves():
    assert [len(p[1]) for p in PROJECTS] == [12, 12, 10, 10, 8]
    disp = [t[2] for t in TAXONOMY]
    for p, (_, leaves) in enumerate(PROJECTS):
        assert [disp[c] for c in PROJECT_CATS[p, : PROJECT_LEN[p]]] == list(leaves)
        assert len(set(leaves)) == len(leaves)


def test_category_prices_match_numpy(catalog):
    got = category_prices(catalog)
    ref = _host_prices(catalog)
    for c, (mn, med, cheapest) in ref.items():
        assert int(got.min_cents[c]) == mn
        assert abs(float(got.median_cents[c]) - med) < 1e-3
        assert int(got.cheapest[c]) == cheapest


@pytest.fixture(scope="module")
def problems(catalog):
    n = 4200  # 200 per d
    d = jnp.arange(n, dtype=jnp.int32) % (C.D_MAX + 1)
    gen = jax.jit(jax.vmap(generate, (0, None, 0, None)), static_argnums=3)
    return gen(keys_for(11, n), catalog, d, PARAMS), np.asarray(d)


def test_budget_is_always_feasible(catalog, problems):
    """SPEC §13.3: B >= Σ min_s (indeed >= 1.1·Σ min_s, rounded to cents) in every problem."""
    prob, d = problems
    ref = _host_prices(catalog)
    cats = np.asarray(prob.bundle_cats)
    budget = np.asarray(prob.budget_cents)
    has = budget >= 0
    sum_min = np.array([sum(ref[c][0] for c in row if c >= 0) for row in cats])
    sum_med = np.array([sum(ref[c][1] for c in row if c >= 0) for row in cats])
    assert np.all(budget[has] >= sum_min[has])
    assert np.all(budget[has] >= np.floor(1.10 * sum_min[has]) - 1)
    # B = max(1.1·Σ min, U(0.8, 1.5)·Σ median): within [0.8, 1.5]·Σ median when that leads
    # (on this catalog it always does: prices are log-normal, so medians dwarf minima).
    led = has & (budget > 1.10 * sum_min + 1)
    assert led.any()
    assert np.all(np.abs(budget[has & ~led] - 1.10 * sum_min[has & ~led]) <= 1)
    assert np.all(budget[led] >= 0.8 * sum_med[led] - 1)
    assert np.all(budget[led] <= 1.5 * sum_med[led] + 1)
    # A budget exists only for d >= 2, with probability 0.6.
    assert not np.any(has[d < 2])
    assert 0.55 < has[d >= 2].mean() < 0.65


def test_slots_follow_the_project(catalog, problems):
    prob, d = problems
    cats = np.asarray(prob.bundle_cats)
    n = (cats >= 0).sum(1)
    proj = np.asarray(prob.slot_value[:, 0, S.ITEMS]).astype(int)
    assert np.array_equal(n, np.minimum(np.minimum(12, 3 + d // 2), PROJECT_LEN[proj]))
    ref = _host_prices(catalog)
    prot = np.asarray(prob.protected)
    for i in range(d.size):
        live = cats[i, : n[i]]
        assert np.all(cats[i, n[i] :] == -1)
        assert len(set(live.tolist())) == live.size
        assert set(live.tolist()) <= set(PROJECT_CATS[proj[i]].tolist())
        cheapest = [ref[c][2] for c in live][:8]
        assert prot[i, : len(cheapest)].tolist() == cheapest
    # The keyed shuffle reaches every leaf of every project.
    for p in range(len(PROJECTS)):
        seen = set(cats[proj == p].reshape(-1).tolist()) - {-1}
        assert seen == set(PROJECT_CATS[p, : PROJECT_LEN[p]].tolist())
    has = np.asarray(prob.has_slot[:, 0, 0])
    pend = np.asarray(prob.pending[:, 0, 0])
    budget = np.asarray(prob.budget_cents)
    assert np.all(has[:, S.ITEMS]) and not np.any(pend[:, S.ITEMS])
    assert np.array_equal(has[:, S.BUDGET], budget >= 0)
    assert not np.any(pend & ~has)
    val = np.asarray(prob.slot_value[:, 0, S.BUDGET])
    np.testing.assert_allclose(val[budget >= 0], budget[budget >= 0] / 100.0, rtol=1e-6)
    others = np.setdiff1d(np.arange(C.N_SLOTS), [S.ITEMS, S.BUDGET])
    assert not np.any(has[:, others])


# --- the verifier, hand-computed -------------------------------------------------------------


def _case(catalog, rec, cats, budget_cents=-1, oos=(), has=True):
    prob = empty_problem().replace(
        env=jnp.int32(C.Env.BUNDLE),
        bundle_cats=jnp.asarray(list(cats) + [-1] * (12 - len(cats)), jnp.int32),
        budget_cents=jnp.int32(budget_cents),
    )
    world = init_world(catalog.n_products)
    world = world.replace(oos=world.oos.at[jnp.asarray(list(oos), jnp.int32)].set(True))
    ans = empty_answer_fields().replace(
        env=jnp.int32(C.Env.BUNDLE),
        rec=jnp.asarray(list(rec) + [-1] * (50 - len(rec)), jnp.int32),
    )
    sc = verify(catalog, prob, world, None, ans, jnp.bool_(has))
    return float(sc.r_task), bool(sc.is_correct), float(sc.detail[0]), float(sc.detail[1])


def test_verifier_hand_cases(catalog):
    ref = _host_prices(catalog)
    a, b, c = 0, 1, 2  # headphones, speakers, laptops
    pa, pb, pc = ref[a][2], ref[b][2], ref[c][2]
    price = np.asarray(catalog.price_cents)
    other_a = int(
        np.flatnonzero(
            (np.asarray(catalog.category) == a) & (np.asarray(catalog.stock) > 0)
            & (np.arange(catalog.n_products) != pa)
        )[0]
    )  # fmt: skip
    assert _case(catalog, [pa, pb, pc], [a, b, c]) == (1.0, True, 1.0, 0.0)
    # Two of three slots, nothing extra: P = 1, R = 2/3, F1 = 0.8.
    r, ok, f1, pen = _case(catalog, [pa, pb], [a, b, c])
    assert abs(f1 - 0.8) < 1e-6 and abs(r - 0.6) < 1e-6 and not ok
    # A second product of a covered category adds nothing to Ŝ (F1 stays 1, price counts).
    assert _case(catalog, [pa, other_a, pb, pc], [a, b, c])[:3] == (1.0, True, 1.0)
    # An unknown id and an out-of-stock id are distinct invalid tokens: P = 3/5, R = 1.
    r, ok, f1, _ = _case(catalog, [pa, -2, pb, pc, -3], [a, b, c])
    assert abs(f1 - 0.75) < 1e-6 and not ok
    r, ok, f1, _ = _case(catalog, [pa, pb, pc], [a, b, c], oos=[pc])
    assert abs(f1 - 2 * (2 / 3) * (2 / 3) / (4 / 3)) < 1e-6 and not ok
    # The same unknown id twice is one token.
    assert abs(_case(catalog, [pa, pb, pc, -2, -2], [a, b, c])[2] - 6 / 7) < 1e-6  # P = 3/4
    # Budget: exactly at B is fine; over B costs (Σ - B)/B, capped at 1.
    total = int(price[pa] + price[pb] + price[pc])
    assert _case(catalog, [pa, pb, pc], [a, b, c], budget_cents=total) == (1.0, True, 1.0, 0.0)
    bgt = total - total // 10
    r, ok, f1, pen = _case(catalog, [pa, pb, pc], [a, b, c], budget_cents=bgt)
    assert abs(pen - (total - bgt) / bgt) < 1e-5 and abs(r - (1 - pen)) < 1e-5 and not ok
    r, _, _, pen = _case(catalog, [pa, pb, pc], [a, b, c], budget_cents=1)
    assert pen == 1.0 and r == 0.0
    # Out-of-stock products do not count toward the total.
    assert _case(catalog, [pa, pb, pc], [a, b, c], budget_cents=1, oos=[pa, pb, pc])[3] == 0.0
    # Empty answer and no answer.
    assert _case(catalog, [], [a, b, c]) == (-1.0, False, 0.0, 0.0)
    assert _case(catalog, [pa, pb, pc], [a, b, c], has=False) == (-1.0, False, 0.0, 0.0)
