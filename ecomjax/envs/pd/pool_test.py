"""SPEC §13 invariant 15 (ranking is a ranking) and §8.1/§8.2 v1.1 witnesses for PD and SUB:
the initial pool holds min(k_rec(d), 1 + eligible witnesses) products, the drawn witnesses
are exactly that many eligible products, JOURNEY never reuses them, and a "repeat one id"
agent is never IsCorrect once two products are feasible and available. Also availability
(§6, §7): the verifiers count a unit an active exchange holds as gone, as the tools do.

Eligibility is recomputed here in numpy from the final C, independently of the generator.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.constraints import IS_NUMERIC, attr_values, feasible
from ecomjax.envs.pd.shortcut import repeat_one_id_agent
from ecomjax.registry import family
from ecomjax.rollout import run_plan_jit
from ecomjax.testing import reset_batch
from ecomjax.types import EnvParams, empty_answer_fields
from ecomjax.world import init_world, product_stock_qty
from tests.support.pd_checks import keys_for, one, pd_reference, sub_reference

E = C.Env
B = 420  # 20 problems per d, the shape pd_test / sub_test compile
DS = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
PARAMS = EnvParams()
ROW = {"PD": 0, "SUB": 1}


def _pool(catalog, problem, world, row: int) -> jax.Array:
    """bool [N]: feasible, stock_qty > 0 by the tools' rule, and not the SUB original."""
    ids = jnp.arange(catalog.n_products, dtype=jnp.int32)
    cons = (problem.cons_attr[row], problem.cons_op[row], problem.cons_val[row])
    ok = feasible(catalog, ids, *cons) & (product_stock_qty(catalog, problem, world, ids) > 0)
    return ok & (ids != problem.sub_original) if row == 1 else ok


@pytest.fixture(scope="module")
def problems(catalog):
    gen = lambda name: jax.jit(  # noqa: E731
        jax.vmap(family(name).generate, (0, None, 0, None)), static_argnums=3
    )(keys_for(3, B), catalog, DS, PARAMS)
    return {name: gen(name) for name in ROW}


@pytest.fixture(scope="module")
def every_attr(catalog):
    return np.asarray(attr_values(catalog, jnp.arange(catalog.n_products)))


def _eligible(catalog, every_attr, problem, name: str, b: int) -> np.ndarray:
    """bool [N]: in-stock products meeting every discrete constraint of C (so in the goal
    category) that have every numeric attribute C names, other than the references."""
    row = ROW[name]
    attr = np.asarray(problem.cons_attr[b, row])
    op = np.asarray(problem.cons_op[b, row])
    val = np.asarray(problem.cons_val[b, row])
    ok = np.asarray(catalog.stock) > 0
    for a, o, v in zip(attr, op, val, strict=True):
        if a < 0:
            continue
        col = every_attr[:, a]
        ok &= (col > 0) & ~np.isnan(col) if IS_NUMERIC[a] else (col == v) & (o == 0)
    refs = [problem.pd_target] if name == "PD" else [problem.sub_original, problem.sub_witness]
    for r in refs:
        ok[int(r[b])] = False
    return ok


@pytest.mark.parametrize("name", ["PD", "SUB"])
def test_initial_pool_holds_k_or_every_eligible_witness(catalog, problems, every_attr, name):
    """|F_init| >= min(k_rec(d), 1 + eligible witnesses) in every episode (invariant 15)."""
    p = problems[name]
    states, _ = reset_batch(keys_for(3, B), catalog, p, PARAMS)
    pool = jax.jit(jax.vmap(lambda pr, w: _pool(catalog, pr, w, ROW[name])))
    f_init = np.asarray(pool(states.problem, states.world)).sum(1)
    k = np.asarray(D.k_rec(DS))
    n_elig = np.array([_eligible(catalog, every_attr, p, name, b).sum() for b in range(B)])
    short = np.flatnonzero(f_init < np.minimum(k, 1 + n_elig))
    assert short.size == 0, (
        f"{name}: {short.size}/{B} episodes with |F_init| < min(k, 1 + eligible); first: "
        f"d={int(DS[short[0]])} |F_init|={f_init[short[0]]} eligible={n_elig[short[0]]}"
    )
    # Not vacuous: many episodes have a witness to cover.
    assert (n_elig >= 1).mean() > 0.2


@pytest.mark.parametrize("name", ["PD", "SUB"])
def test_witnesses_are_the_drawn_eligible_products(catalog, problems, every_attr, name):
    """W holds min(k_rec − 1, eligible) distinct eligible products, every one feasible; the
    target / p1 stays protected and the extra witnesses do not (SPEC §6 lists no more)."""
    p = problems[name]
    row = ROW[name]
    w = np.asarray(p.pool_witness[:, row])
    other = np.asarray(p.pool_witness[:, 1 - row])
    assert np.all(other == -1)
    k = np.asarray(D.k_rec(DS))
    prot = np.asarray(p.protected)
    ref = np.asarray(p.pd_target if name == "PD" else p.sub_witness)
    draws = []
    for b in range(B):
        elig = _eligible(catalog, every_attr, p, name, b)
        got = w[b][w[b] >= 0]
        assert np.all(w[b][got.size :] == -1)
        assert got.size == min(k[b] - 1, elig.sum()), (b, got.size, elig.sum())
        assert len(set(got.tolist())) == got.size and np.all(elig[got])
        assert not np.isin(got, prot[b]).any() and ref[b] in prot[b]
        draws.extend(got.tolist())
    cons = tuple(x[:, row] for x in (p.cons_attr, p.cons_op, p.cons_val))
    fe = jax.vmap(lambda ids, a, o, v: feasible(catalog, ids, a, o, v))
    feas = np.asarray(fe(p.pool_witness[:, row], *cons))
    assert np.all(feas[w >= 0])
    assert len(set(draws)) > 100  # the draw spreads over the catalog


def test_journey_never_reuses_a_witness(catalog):
    """A later JOURNEY sub-goal never uses an earlier one's target, original or witness
    (SPEC §8.8), extra witnesses included: every product role is distinct."""
    n = 24
    keys = keys_for(8, n)
    d = jnp.asarray(np.resize([12, 16, 20], n), jnp.int32)  # 5 sub-goals of 7
    gen = jax.jit(jax.vmap(family("JOURNEY").generate, (0, None, 0, None)), static_argnums=3)
    p = gen(keys, catalog, d, PARAMS)
    envs = np.asarray(p.sub_env)
    both = (envs == E.PD).any(1) & (envs == E.SUB).any(1)
    assert both.sum() >= 5 and (np.asarray(p.pool_witness) >= 0).sum() > 0
    for i in range(n):
        ids = np.concatenate(
            [
                np.asarray(p.item_pid[i]),
                np.asarray([p.pd_target[i], p.sub_original[i], p.sub_witness[i], p.ret_witness[i]]),
                np.asarray(p.pool_witness[i]).reshape(-1),
                np.asarray(p.line_pid[i]).reshape(-1),
            ]
        )
        ids = ids[ids >= 0]
        assert len(set(ids.tolist())) == len(ids), i


def test_repeat_one_id_is_never_correct_with_two_in_the_pool(catalog, params):
    """Invariant 15 end to end: the oracle's first id listed k times, over full PD and SUB
    rollouts, is never IsCorrect when |F_end| >= 2 (with enough such episodes to tell)."""
    n = 21 * 4
    plan = (("PD", n, 0), ("SUB", n, 0))
    keys = keys_for(15, 2 * n)
    d = jnp.arange(2 * n, dtype=jnp.int32) % (C.D_MAX + 1)
    res = run_plan_jit(catalog, keys, d, plan, (repeat_one_id_agent,), params)
    st = res.state
    rows = np.repeat([0, 1], n)
    both = lambda pr, w, r: jnp.where(  # noqa: E731
        r == 0, _pool(catalog, pr, w, 0), _pool(catalog, pr, w, 1)
    )
    pool = jax.jit(jax.vmap(both))
    f_end = np.asarray(pool(st.problem, st.world, jnp.asarray(rows))).sum(1)
    ok = np.asarray(st.reward.is_correct)
    answered = np.asarray(st.dialogue.termination) == C.Termination.AGENT_DONE
    assert answered.mean() > 0.9
    bad = np.flatnonzero(ok & (f_end >= 2))
    assert bad.size == 0, f"IsCorrect with |F_end| >= 2 at {bad.tolist()}"
    for r in (0, 1):  # enough multi-product pools to mean something
        assert (f_end[rows == r] >= 2).sum() >= 15
    assert ok.any()  # a one-product pool is still solvable by listing it


@pytest.mark.parametrize("name", ["PD", "SUB"])
def test_exchange_reservation_makes_a_unit_unavailable(catalog, problems, name):
    """The last free unit of a recommended product held by an active exchange: the tools
    show stock_qty 0, and the verifier scores the product unavailable and out of F_end
    (old rule: only plain cart lines counted)."""
    p = one(problems[name], 7)
    pid = int(p.pd_target if name == "PD" else p.sub_witness)
    stock = int(np.asarray(catalog.stock)[pid])
    assert stock > 0
    world = init_world(catalog.n_products)
    if name == "SUB":
        world = world.replace(oos=world.oos.at[int(p.sub_original)].set(True))
    free_one = world.replace(
        cart_pid=world.cart_pid.at[0].set(pid),
        cart_qty=world.cart_qty.at[0].set(stock - 1),
        cart_no=world.cart_no.at[0].set(jnp.where(stock > 1, 1, 0)),
    )
    held = free_one.replace(
        ret_active=free_one.ret_active.at[0].set(True),
        exch_pid=free_one.exch_pid.at[0].set(pid),
    )
    ids = jnp.asarray([pid])
    assert int(product_stock_qty(catalog, p, free_one, ids)[0]) == 1
    assert int(product_stock_qty(catalog, p, held, ids)[0]) == 0
    rec = np.full(C.MAX_ANSWER_IDS, -1, np.int32)
    rec[0] = pid
    ans = empty_answer_fields().replace(env=jnp.int32(E[name]), rec=jnp.asarray(rec))
    verify = jax.jit(family(name).verify)
    sc = verify(catalog, p, held, None, ans, jnp.bool_(True))
    assert float(sc.detail[2]) == -1.0  # r_avail: its one entry is unavailable
    assert not bool(_pool(catalog, p, held, ROW[name])[pid])
    reference = pd_reference if name == "PD" else sub_reference
    np.testing.assert_allclose(float(sc.r_task), reference(catalog, p, held, rec)[0], atol=2e-5)


@pytest.mark.parametrize("name", ["PD", "SUB"])
def test_goal_category_pool_scores_as_the_whole_catalog(catalog, problems, name):
    """The verifier reads only the goal category's rows for F_end (``goal_pool_stats``);
    over 420 problems x 2 worlds with random forced-out products and answers mixing goal
    category products, other ids and unknown ids, every Score field equals the
    whole-catalog scan's (a catalog without its category index) bit for bit. Every other
    problem loses its category constraint, which takes the whole-catalog path, and every
    fifth has no answer (its pool is not read)."""
    p = problems[name]
    row = ROW[name]
    n = catalog.n_products
    strip = (jnp.arange(B) % 2 == 1)[:, None] & (p.cons_attr[:, row] == C.Attr.CAT)
    p = p.replace(cons_attr=p.cons_attr.at[:, row].set(jnp.where(strip, -1, p.cons_attr[:, row])))
    goal = jnp.where(
        strip.any(1),
        0,
        jnp.take_along_axis(
            p.cons_val[:, row], jnp.argmax(p.cons_attr[:, row] == C.Attr.CAT, 1)[:, None], 1
        )[:, 0],
    ).astype(jnp.int32)

    def case(key, problem, cat):
        k1, k2, k3, k4 = jax.random.split(key, 4)
        world = init_world(n)
        world = world.replace(oos=jax.random.uniform(k1, (n,)) < 0.3)
        start, size = (
            catalog.cat_offsets[cat],
            catalog.cat_offsets[cat + 1] - catalog.cat_offsets[cat],
        )
        in_cat = catalog.cat_order[start + jax.random.randint(k2, (C.MAX_ANSWER_IDS,), 0, size)]
        other = jax.random.randint(k3, (C.MAX_ANSWER_IDS,), -3, n)
        rec = jnp.where(jax.random.uniform(k4, (C.MAX_ANSWER_IDS,)) < 0.6, in_cat, other)
        ans = empty_answer_fields().replace(env=jnp.int32(E[name]), rec=rec.astype(jnp.int32))
        return world, ans

    verify = family(name).verify
    whole = catalog.replace(max_cat_size=0)
    for seed in (1, 2):
        keys = jax.random.split(jax.random.key(seed), B)
        worlds, answers = jax.vmap(case)(keys, p, goal)
        args = (p, worlds, None, answers, jnp.arange(B) % 5 != 0)  # some without an answer
        axes = (0, 0, None, 0, 0)
        got = jax.jit(jax.vmap(lambda *a: verify(catalog, *a), axes))(*args)
        ref = jax.jit(jax.vmap(lambda *a: verify(whole, *a), axes))(*args)
        for field in ("r_task", "is_correct", "detail"):
            np.testing.assert_array_equal(
                np.asarray(getattr(got, field)), np.asarray(getattr(ref, field)), err_msg=field
            )
        r = np.asarray(got.r_task)
        assert len(np.unique(r)) > 50 and r.max() > 0.25  # varied, some answers good
