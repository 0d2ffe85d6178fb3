"""PD against SPEC §8.1 and §13: generator invariants, the verifier against a numpy
re-implementation over the whole catalog, and rollout sweeps over d = 0..20.

Batches keep one shape (B = 420, 20 episodes per d) so each agent compiles once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.agents.oracle import make_oracle
from ecomjax.constraints import SLOT_ATTR, feasible, satisfaction
from ecomjax.core import step
from ecomjax.customer import opening
from ecomjax.envs.pd.generator import generate
from ecomjax.envs.pd.verifier import priority_key, verify
from ecomjax.registry import family
from ecomjax.testing import api_test, reset_batch
from ecomjax.types import EnvParams, empty_answer_fields
from ecomjax.world import init_world
from tests.support.pd_checks import (
    answer_cases,
    keys_for,
    one,
    pd_reference,
)

A = C.Attr
S = C.Slot
TM = C.Termination
B = 420
DS = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
PARAMS = EnvParams()
ORACLE = make_oracle((C.Env.PD,))
VERIFY = jax.jit(verify)  # one compile for every verifier test


@pytest.fixture(scope="module")
def problems(catalog):
    return jax.jit(jax.vmap(generate, (0, None, 0, None)), static_argnums=3)(
        keys_for(3, B), catalog, DS, PARAMS
    )


# --- generator (invariant 3, 8, 9, 10) ----------------------------------------------------------


def test_target_in_f_end_and_constraints_well_formed(catalog, problems):
    p = problems
    t = np.asarray(p.pd_target)
    d = np.asarray(DS)
    assert np.all(t >= 0)
    assert np.all(np.asarray(catalog.stock)[t] > 0)
    assert np.all(np.asarray(catalog.desc_form)[t] > 0)
    attr, op, val = (np.asarray(x[:, 0]) for x in (p.cons_attr, p.cons_op, p.cons_val))
    # Target satisfies C: it is in F_end at the start (in stock, protected from shocks).
    assert np.all(
        np.asarray(
            jax.vmap(feasible, (None, 0, 0, 0, 0))(
                catalog, p.pd_target, *(x[:, 0] for x in (p.cons_attr, p.cons_op, p.cons_val))
            )
        )
    )
    assert np.all((np.asarray(p.protected) == t[:, None]).any(1))
    # C = [cat eq, price lte] + up to m-2 others, one per attribute.
    assert np.all(attr[:, 0] == A.CAT) and np.all(val[:, 0] == np.asarray(catalog.category)[t])
    assert np.all(attr[:, 1] == A.PRICE) and np.all(op[:, 1] == -1)
    n = (attr >= 0).sum(1)
    m = np.asarray(D.m(d))
    assert np.all(n <= m) and np.all(n >= np.minimum(m, 6))
    for row in attr:
        live = row[row >= 0]
        assert len(set(live.tolist())) == live.size
    assert np.all(np.asarray(p.k_rec) == np.asarray(D.k_rec(d)))
    assert set(np.unique(np.asarray(p.priority))) <= {0, 1, 2}
    # Numeric bounds: natural direction, slack at most δ_max over the target or else just
    # wide enough for the priciest witness (v1.1), on the precision grid.
    cents = np.asarray(catalog.price_cents)
    price = cents[t] / 100
    dmax = np.asarray(D.delta_max(d))
    wit = np.asarray(p.pool_witness[:, 0])
    top = np.where(wit >= 0, cents[np.maximum(wit, 0)], 0).max(1) / 100
    bound = val[:, 1]
    assert np.all(bound >= np.maximum(price, top) - 1e-4)
    slack = np.ceil(np.round(price * (1 + dmax) * 100, 4)) / 100
    assert np.all(bound <= np.maximum(slack, top) + 1e-4)
    assert np.any(bound > slack + 1e-4)  # some witness needs a wider bound
    cents = np.round(bound * 100)
    np.testing.assert_allclose(cents / 100, bound, atol=1e-4)
    rating = np.where(attr == A.RATING)
    np.testing.assert_allclose(np.round(val[rating] * 10) / 10, val[rating], atol=1e-5)
    assert np.all(op[rating] == 1)


def test_slots_and_opening_hold_no_hidden_value(catalog, problems):
    p = problems
    has = np.asarray(p.has_slot[:, 0, 0])
    pend = np.asarray(p.pending[:, 0, 0])
    assert np.all(has[:, S.CATEGORY] & has[:, S.NUM_RESULTS] & has[:, S.PRIORITY])
    assert not np.any(pend[:, S.CATEGORY] | pend[:, S.NUM_RESULTS])  # critical
    assert pend[:, S.PRIORITY].any() and pend.any(1).mean() > 0.3  # omissions happen
    # Every live constraint is a slot with the constraint's value and op.
    attr = np.asarray(p.cons_attr[:, 0])
    val, op = np.asarray(p.cons_val[:, 0]), np.asarray(p.cons_op[:, 0])
    sv, so = np.asarray(p.slot_value[:, 0]), np.asarray(p.slot_op[:, 0])
    for b in range(B):
        cons_slots = {int(np.flatnonzero(a == SLOT_ATTR)[0]) for a in attr[b][attr[b] >= 0]}
        goal_cons = {s for s in np.flatnonzero(has[b]) if SLOT_ATTR[s] >= 0}
        assert cons_slots == goal_cons
        for j in np.flatnonzero(attr[b] >= 0):
            s = int(np.flatnonzero(attr[b, j] == SLOT_ATTR)[0])
            assert sv[b, s] == val[b, j] and so[b, s] == op[b, j]
    # The opening states exactly the non-pending slots, with their values (invariant 9).
    act = jax.vmap(opening)(p)
    stated = np.asarray(act.slot_stated[:, 0])
    np.testing.assert_array_equal(stated, has & ~pend)
    np.testing.assert_array_equal(np.asarray(act.slot_value[:, 0]), np.where(stated, sv, 0))
    assert not np.any(np.asarray(act.slot_stated[:, 1:]))
    assert np.all(np.asarray(act.item_desc_key) == -1) and np.all(np.asarray(act.ref_key) == -1)


def test_asking_every_slot_reveals_the_scored_goal(catalog, problems):
    """Invariant 10: after one ask_user of every PD slot, the stated values rebuild C, k, π."""
    from ecomjax.actions import Call, make_action
    from ecomjax.customer import slot_tables

    slots = tuple(np.flatnonzero(slot_tables()[0][C.Env.PD]))
    act = make_action([Call(C.Tool.ASK_USER, slots=slots)])
    keys = keys_for(3, B)
    states, ts = reset_batch(keys, catalog, problems, PARAMS)
    pd_step = lambda st: step(catalog, st, act, PARAMS, families=(C.Env.PD,))
    states, ts2 = jax.jit(jax.vmap(pd_step))(states)
    r0, r1 = ts.observation.reply, ts2.observation.reply
    known = np.asarray(r0.slot_stated[:, 0] | r1.slot_stated[:, 0])
    has = np.asarray(problems.has_slot[:, 0, 0])
    np.testing.assert_array_equal(known, has)
    value = np.where(
        np.asarray(r1.slot_stated[:, 0]),
        np.asarray(r1.slot_value[:, 0]),
        np.asarray(r0.slot_value[:, 0]),
    )
    assert np.all(value[:, S.NUM_RESULTS] == np.asarray(problems.k_rec))
    assert np.all(value[:, S.PRIORITY] == np.asarray(problems.priority))


# --- verifier -----------------------------------------------------------------------------------


def test_verifier_matches_numpy_reference(catalog, problems):
    rng = np.random.default_rng(0)
    n = catalog.n_products
    vjit = VERIFY
    checked = 0
    for b in range(0, B, 19):
        p = one(problems, b)
        world = init_world(n)
        # Knock out stock: a few feasible products and random others (never the target).
        oos = rng.random(n) < 0.2
        oos[int(p.pd_target)] = False
        world = world.replace(oos=jnp.asarray(oos))
        cons = (p.cons_attr[0], p.cons_op[0], p.cons_val[0])
        feas = np.asarray(feasible(catalog, jnp.arange(n), *cons)) & ~oos
        feas &= np.asarray(catalog.stock) > 0
        key = np.asarray(priority_key(catalog, jnp.arange(n), p.priority))
        order = np.lexsort((np.arange(n), -key))
        ideal = [int(i) for i in order if feas[i]][: int(p.k_rec)]
        for rec in answer_cases(rng, ideal, n, int(p.k_rec)):
            ans = empty_answer_fields().replace(env=jnp.int32(C.Env.PD), rec=jnp.asarray(rec))
            sc = vjit(catalog, p, world, None, ans, jnp.bool_(True))
            ref = pd_reference(catalog, p, world, rec)
            got = (float(sc.r_task), *np.asarray(sc.detail[:3]).tolist())
            np.testing.assert_allclose(got, ref, atol=2e-5, err_msg=str(rec))
            checked += 1
        # The ideal list scores r_task = 1; no answer at all scores -1.
        ans = empty_answer_fields().replace(
            env=jnp.int32(C.Env.PD), rec=jnp.asarray(answer_cases(rng, ideal, n, 1)[0])
        )
        assert float(vjit(catalog, p, world, None, ans, jnp.bool_(True)).r_task) > 1 - 1e-5
        none = vjit(catalog, p, world, None, ans, jnp.bool_(False))
        assert float(none.r_task) == -1.0 and not bool(none.is_correct)
    assert checked >= 100


def test_hand_computed_case(catalog):
    """C = {cat}, k = 3, priority price, one pool of known prices: every term by hand."""
    n = catalog.n_products
    cat = 0
    members = np.flatnonzero(np.asarray(catalog.category) == cat)
    in_stock = members[np.asarray(catalog.stock)[members] > 0]
    p = jax.jit(generate, static_argnums=3)(jax.random.key(0), catalog, jnp.int32(0), PARAMS)
    p = p.replace(
        cons_attr=jnp.full((3, 12), -1, jnp.int32).at[0, 0].set(A.CAT),
        cons_op=jnp.zeros((3, 12), jnp.int32),
        cons_val=jnp.zeros((3, 12), jnp.float32).at[0, 0].set(cat),
        k_rec=jnp.int32(3),
        priority=jnp.int32(0),
        d=jnp.int32(0),
    )
    price = np.asarray(catalog.price_cents)[in_stock].astype(float)
    order = in_stock[np.argsort(price, kind="stable")]
    lo, hi = price.min(), price.max()
    rel = lambda i: (1 + (hi - np.asarray(catalog.price_cents)[i]) / (hi - lo)) / 2
    w = 1 / np.log2(np.arange(2, 5))
    idcg = sum(rel(order[j]) * w[j] for j in range(3))
    # List: 2nd cheapest, an out-of-category product, the cheapest.
    other = int(np.flatnonzero(np.asarray(catalog.category) != cat)[0])
    rec = np.full(C.MAX_ANSWER_IDS, -1, np.int32)
    rec[:3] = [order[1], other, order[0]]
    ans = empty_answer_fields().replace(env=jnp.int32(C.Env.PD), rec=jnp.asarray(rec))
    sc = VERIFY(catalog, p, init_world(n), None, ans, jnp.bool_(True))
    dcg = rel(order[1]) * w[0] + rel(order[0]) * w[2]
    r_rank = 2 * dcg / idcg - 1
    r_cons, r_avail = 1.0, 1.0  # s_best = 1 (the in-category ones); all three in stock
    expect = np.clip(0.55 * r_rank + 0.35 * r_cons + 0.10 * r_avail, -1, 1)
    np.testing.assert_allclose(float(sc.r_task), expect, atol=1e-5)
    np.testing.assert_allclose(np.asarray(sc.detail[:3]), [r_rank, r_cons, r_avail], atol=1e-5)
    assert (
        float(satisfaction(catalog, jnp.int32(other), p.cons_attr[0], p.cons_op[0], p.cons_val[0]))
        == 0.0
    )


# --- the family API (slow: its own compiles) ----------------------------------------------------


@pytest.mark.slow
def test_api_conformance(catalog, params):
    api_test(family("PD"), catalog, params, agent="oracle", n=B)
