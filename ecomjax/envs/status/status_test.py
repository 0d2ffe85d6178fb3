"""STATUS against SPEC §8.5 and §13: the target and its reference, the verifier by hand, a
shared history with RETURN (JOURNEY), and rollout sweeps over d = 0..20 (B = 210)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax import order_history as O
from ecomjax.agents.oracle import make_oracle
from ecomjax.envs.returns.generator import fill as fill_return
from ecomjax.envs.status.generator import fill as fill_status
from ecomjax.envs.status.generator import generate
from ecomjax.envs.status.verifier import verify
from ecomjax.sampling import base_problem
from ecomjax.testing import generate_batch, reset_batch
from ecomjax.types import EnvParams, empty_answer_fields

S = C.Slot
TM = C.Termination
B = 210
DS = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
PARAMS = EnvParams()
ORACLE = make_oracle((C.Env.STATUS,))


def keys_for(seed: int, n: int = B) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))


@pytest.fixture(scope="module")
def problems(catalog):
    prob = jax.jit(jax.vmap(generate, (0, None, 0, None)), static_argnums=3)(
        keys_for(3), catalog, DS, PARAMS
    )
    return jax.tree_util.tree_map(np.asarray, prob)


def _scoped_hits(catalog, p, b, form, key):
    keys = np.asarray(catalog.desc_key)
    live = np.arange(C.MAX_ORDER_LINES)[None, :] < p.order_n_lines[b][:, None]
    hist = p.line_pid[b][live]
    return hist[keys[hist, form - 1] == key]


def test_target_and_reference(catalog, problems):
    p = problems
    n_ind = 0
    for b in range(B):
        h, t = int(p.n_orders[b]), int(p.status_order[b])
        assert h == 1 + int(DS[b]) // 2 and 0 <= t < h
        assert np.all(np.diff(p.order_date[b, :h]) >= 0)
        assert p.has_slot[b, 0, 0, S.ORDER_REFERENCE] and not p.pending[b, 0, 0, S.ORDER_REFERENCE]
        assert p.has_slot[b, 0, 0].sum() == 1
        ref = p.slot_value[b, 0, S.ORDER_REFERENCE]
        if p.status_indirect[b]:
            n_ind += 1
            assert ref == -1
            form, key = int(p.ref_form[b, 0]), int(p.ref_key[b, 0])
            hits = _scoped_hits(catalog, p, b, form, key)
            assert hits.size == 1 and hits[0] in p.line_pid[b, t, : p.order_n_lines[b, t]]
        else:
            assert ref == t and p.ref_form[b, 0] == 0
    # p_ref: mostly direct at d = 0, mostly indirect at d >= 6.
    ind = p.status_indirect
    d = np.asarray(DS)
    assert ind[d == 0].mean() < 0.5 and ind[d >= 6].mean() > 0.8 and n_ind > 0


def test_target_is_uniform_over_orders(catalog):
    n = 3000
    prob = jax.jit(jax.vmap(generate, (0, None, 0, None)), static_argnums=3)(
        keys_for(5, n), catalog, jnp.full(n, 4, jnp.int32), PARAMS
    )
    counts = np.bincount(np.asarray(prob.status_order), minlength=3)
    np.testing.assert_allclose(counts / n, [1 / 3] * 3, atol=0.035)


def test_opening_states_the_reference_only(catalog, params):
    keys = keys_for(9)
    prob = generate_batch(generate, keys, catalog, DS, params)
    _, ts = reset_batch(keys, catalog, prob, params)
    r = ts.observation.reply
    stated = np.asarray(r.slot_stated[:, 0])
    assert np.all(stated[:, S.ORDER_REFERENCE]) and stated.sum() == B
    ind = np.asarray(prob.status_indirect)
    ref = np.asarray(r.slot_value[:, 0, S.ORDER_REFERENCE])
    assert np.all(ref[ind] == -1)  # an indirect reference states no order id
    assert np.array_equal(np.asarray(r.ref_key[:, 0])[ind], np.asarray(prob.ref_key[:, 0])[ind])
    assert np.all(np.asarray(r.ref_form[:, 0])[~ind] == 0)


def test_verifier_hand_cases(catalog, problems):
    p = jax.tree_util.tree_map(lambda x: jnp.asarray(x[10]), problems)  # d = 10, H = 6
    t = int(p.status_order)
    st = int(p.order_status[t])

    def score(order, status, has=True):
        ans = empty_answer_fields().replace(
            env=jnp.int32(C.Env.STATUS), order=jnp.int32(order), status=jnp.int32(status)
        )
        sc = verify(catalog, p, None, None, ans, jnp.bool_(has))
        return float(sc.r_task), bool(sc.is_correct), np.asarray(sc.detail)[:2].tolist()

    other_o, other_s = (t + 1) % int(p.n_orders), (st + 1) % 5
    assert score(t, st) == (1.0, True, [1, 1])
    assert score(t, other_s) == (0.0, False, [1, 0])
    assert score(other_o, st) == (0.0, False, [0, 1])
    assert score(other_o, other_s) == (-1.0, False, [0, 0])
    assert score(t, st, has=False) == (-1.0, False, [0, 0])


def test_shared_history_with_return(catalog):
    """JOURNEY: whichever order-based family fills first builds the one history; the other
    targets a distinct order, and every index and reference follows the final numbering."""

    def both(key, d, status_first):
        prob = base_problem(key, d, C.Env.JOURNEY, PARAMS)
        h = jnp.maximum(D.h_orders(d), 2)
        if status_first:
            prob = fill_status(key, catalog, d, PARAMS, prob, 0, h)
            return fill_return(key, catalog, d, PARAMS, prob, 1, h)
        prob = fill_return(key, catalog, d, PARAMS, prob, 0, h)
        return fill_status(key, catalog, d, PARAMS, prob, 1, h)

    n = 84
    keys = keys_for(11, n)
    d = jnp.arange(n, dtype=jnp.int32) % (C.D_MAX + 1)
    for status_first in (True, False):
        f = jax.jit(jax.vmap(lambda k, dd, sf=status_first: both(k, dd, sf)))
        p = jax.tree_util.tree_map(np.asarray, f(keys, d))
        s_row, r_row = (0, 1) if status_first else (1, 0)
        for b in range(n):
            h = int(p.n_orders[b])
            assert h == max(1 + int(d[b]) // 2, 2)
            assert np.all(np.diff(p.order_date[b, :h]) >= 0)
            so, ro = int(p.status_order[b]), int(p.ret_order[b])
            assert so != ro and 0 <= so < h and 0 <= ro < h
            assert p.order_status[b, ro] == O.OrderStatus.DELIVERED
            ref = p.slot_value[b, s_row, S.ORDER_REFERENCE]
            if p.status_indirect[b]:
                form, key = int(p.ref_form[b, s_row]), int(p.ref_key[b, s_row])
                hits = _scoped_hits(catalog, p, b, form, key)
                assert hits.size == 1 and hits[0] in p.line_pid[b, so]
            else:
                assert ref == so
            form, key = int(p.ref_form[b, r_row]), int(p.ref_key[b, r_row])
            hits = _scoped_hits(catalog, p, b, form, key)
            assert hits.tolist() == [int(p.line_pid[b, ro, p.ret_line[b]])]
            assert p.slot_value[b, r_row, S.PURCHASE_DATE] == p.order_date[b, ro]
