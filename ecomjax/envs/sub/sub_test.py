"""SUB against SPEC §8.2 and §13: generator invariants (original out of stock everywhere,
witness in F_end, unique description), the verifier against a numpy re-implementation over
the whole catalog, and rollout sweeps over d = 0..20.

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
from ecomjax.constraints import attr_values, feasible
from ecomjax.customer import opening
from ecomjax.envs.sub.generator import COMPAT, compat_attr, generate
from ecomjax.envs.sub.verifier import verify
from ecomjax.testing import reset_batch
from ecomjax.types import EnvParams, empty_answer_fields
from ecomjax.world import init_world, product_stock_qty
from tests.support.pd_checks import (
    answer_cases,
    keys_for,
    one,
    sub_reference,
)

A = C.Attr
S = C.Slot
TM = C.Termination
B = 420
DS = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
PARAMS = EnvParams()
ORACLE = make_oracle((C.Env.SUB,))


@pytest.fixture(scope="module")
def problems(catalog):
    return jax.jit(jax.vmap(generate, (0, None, 0, None)), static_argnums=3)(
        keys_for(3, B), catalog, DS, PARAMS
    )


def test_original_witness_and_constraints(catalog, problems):
    p = problems
    p0, p1 = np.asarray(p.sub_original), np.asarray(p.sub_witness)
    cat = np.asarray(catalog.category)
    assert np.all(p0 >= 0) and np.all(p1 >= 0) and np.all(p0 != p1)
    assert np.all(cat[p0] == cat[p1])
    assert np.all(np.asarray(catalog.stock)[p1] > 0)
    assert np.all((np.asarray(p.protected) == p1[:, None]).any(1))
    cons = tuple(x[:, 1] for x in (p.cons_attr, p.cons_op, p.cons_val))
    fe = jax.vmap(feasible, (None, 0, 0, 0, 0))
    assert np.all(np.asarray(fe(catalog, p.sub_witness, *cons)))  # p1 in F_end
    assert np.all(np.asarray(fe(catalog, p.sub_original, *cons)))  # both refs satisfy C
    attr = np.asarray(cons[0])
    assert np.all(attr[:, 0] == A.CAT)
    n = (attr >= 0).sum(1)
    assert np.all(n <= np.asarray(D.m(DS)))
    # The compatibility attribute is in C whenever p0 and p1 share it.
    comp = np.asarray(jax.vmap(lambda q: compat_attr(catalog, q))(p.sub_original))
    v0 = np.asarray(attr_values(catalog, p.sub_original))
    v1 = np.asarray(attr_values(catalog, p.sub_witness))
    shared = (comp >= 0) & (v0[np.arange(B), comp] == v1[np.arange(B), comp])
    # The witness shares p0's compatibility value whenever any candidate does (§8.2).
    stock = np.asarray(catalog.stock)
    every = np.asarray(attr_values(catalog, jnp.arange(catalog.n_products)))  # one compile
    for b in np.flatnonzero(~shared):
        peers = (cat == cat[p0[b]]) & (stock > 0) & (np.arange(catalog.n_products) != p0[b])
        assert comp[b] < 0 or not np.any(every[peers, comp[b]] == v0[b, comp[b]])
    assert all(comp[b] in attr[b] for b in np.flatnonzero(shared))
    assert set(comp.tolist()) <= {int(a) for a in COMPAT} | {-1}
    # The identifying description names exactly one product of the catalog.
    form, key = np.asarray(p.ref_form[:, 0]), np.asarray(p.ref_key[:, 0])
    keys_all = np.asarray(catalog.desc_key)
    assert np.all(form >= 1)
    for b in range(B):
        assert (keys_all[:, form[b] - 1] == key[b]).sum() == 1
        assert keys_all[p0[b], form[b] - 1] == key[b]


def test_original_is_out_of_stock_in_every_tool(catalog, problems):
    keys = keys_for(3, B)
    states, _ = reset_batch(keys, catalog, problems, PARAMS)
    qty = jax.vmap(lambda pr, w, q: product_stock_qty(catalog, pr, w, q[None])[0])(
        states.problem, states.world, problems.sub_original
    )
    assert np.all(np.asarray(qty) == 0)
    assert np.all(np.asarray(states.world.oos).sum(1) == 1)


def test_slots_and_opening(catalog, problems):
    p = problems
    has = np.asarray(p.has_slot[:, 0, 0])
    pend = np.asarray(p.pending[:, 0, 0])
    for s in (S.ORIGINAL, S.CATEGORY, S.NUM_RESULTS):
        assert np.all(has[:, s]) and not np.any(pend[:, s])
    assert not np.any(has[:, S.PRIORITY])
    act = jax.vmap(opening)(p)
    stated = np.asarray(act.slot_stated[:, 0])
    np.testing.assert_array_equal(stated, has & ~pend)
    np.testing.assert_array_equal(np.asarray(act.ref_key[:, 0]), np.asarray(p.ref_key[:, 0]))
    assert np.all(np.asarray(act.slot_value[:, 0, S.NUM_RESULTS]) == np.asarray(p.k_rec))


def test_verifier_matches_numpy_reference(catalog, problems):
    rng = np.random.default_rng(1)
    n = catalog.n_products
    vjit = jax.jit(verify)
    emb = np.asarray(catalog.emb, np.float64)
    checked = 0
    for b in range(0, B, 19):
        p = one(problems, b)
        p0 = int(p.sub_original)
        oos = rng.random(n) < 0.2
        oos[int(p.sub_witness)] = False
        oos[p0] = True
        world = init_world(n).replace(oos=jnp.asarray(oos))
        cons = (p.cons_attr[1], p.cons_op[1], p.cons_val[1])
        feas = np.asarray(feasible(catalog, jnp.arange(n), *cons)) & ~oos
        feas &= (np.asarray(catalog.stock) > 0) & (np.arange(n) != p0)
        cos = emb @ emb[p0]
        ideal = [int(i) for i in np.argsort(-cos, kind="stable") if feas[i]][: int(p.k_rec)]
        for rec in [*answer_cases(rng, ideal, n, int(p.k_rec)), np.array([p0] + [-1] * 49)]:
            ans = empty_answer_fields().replace(env=jnp.int32(C.Env.SUB), rec=jnp.asarray(rec))
            sc = vjit(catalog, p, world, None, ans, jnp.bool_(True))
            ref = sub_reference(catalog, p, world, rec)
            got = (float(sc.r_task), float(sc.detail[0]), float(sc.detail[2]))
            np.testing.assert_allclose(got, ref, atol=2e-5, err_msg=str(rec))
            checked += 1
        ans = empty_answer_fields().replace(
            env=jnp.int32(C.Env.SUB), rec=jnp.asarray(answer_cases(rng, ideal, n, 1)[0])
        )
        assert float(vjit(catalog, p, world, None, ans, jnp.bool_(True)).r_task) > 1 - 1e-5
        assert float(vjit(catalog, p, world, None, ans, jnp.bool_(False)).r_task) == -1.0
    assert checked >= 100
