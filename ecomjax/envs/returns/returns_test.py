"""RETURN against SPEC §1.8, §5.2, §8.4, §10.2 and §13: the order history, the order and
return tools, the generator invariants, the verifier by hand, the customer's CONFIRM /
CORRECT, and rollout sweeps over d = 0..20 (one batch shape, B = 210, per agent)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax import exposure as X
from ecomjax import order_history as O
from ecomjax.actions import Call, make_action
from ecomjax.agents.oracle import make_oracle
from ecomjax.constraints import feasible, satisfaction
from ecomjax.core import reset, step
from ecomjax.envs.returns.customer import return_feedback
from ecomjax.envs.returns.generator import generate
from ecomjax.envs.returns.verifier import verify
from ecomjax.registry import family
from ecomjax.testing import api_test, generate_batch, reset_batch
from ecomjax.types import EnvParams, empty_answer_fields
from ecomjax.world import init_world, record_use

T = C.Tool
S = C.Slot
TE = C.ToolError
TM = C.Termination
RI = C.ReturnIssue
OS = O.OrderStatus
B = 210  # 10 episodes at each d in 0..20
DS = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
PARAMS = EnvParams()
ORACLE = make_oracle((C.Env.RETURN,))


def keys_for(seed: int, n: int = B) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(n))


_GEN = {}


def _gen():
    if "f" not in _GEN:
        _GEN["f"] = jax.jit(generate, static_argnums=3)
    return _GEN["f"]


@pytest.fixture(scope="module")
def problems(catalog):
    prob = generate_batch(generate, keys_for(3), catalog, DS, PARAMS)
    return jax.tree_util.tree_map(np.asarray, prob)


# --- the order history (SPEC §1.8) ------------------------------------------------------------


def _window(catalog, pid):
    pol = np.asarray(catalog.cat_policy)[np.asarray(catalog.category)[pid]]
    return np.asarray(O.WINDOW_DAYS)[pol]


def test_history_follows_section_1_8(catalog, problems):
    p = problems
    cat = np.asarray(catalog.category)
    denied = np.asarray(catalog.cat_denied)[cat]
    age_lo, age_hi = O._AGE_LO, O._AGE_HI
    for b in range(B):
        h = int(p.n_orders[b])
        assert h == 1 + int(DS[b]) // 2
        assert np.all(np.diff(p.order_date[b, :h]) >= 0)  # chronological numbering
        assert np.all(p.order_status[b, h:] == -1) and np.all(p.order_n_lines[b, h:] == 0)
        nl = p.order_n_lines[b, :h]
        assert np.all((nl >= 1) & (nl <= 5))
        live = np.arange(C.MAX_ORDER_LINES)[None, :] < p.order_n_lines[b][:, None]
        pids = p.line_pid[b][live]
        assert np.all(p.line_pid[b][~live] == -1)
        assert len(set(pids.tolist())) == pids.size  # no product on two lines
        assert not denied[pids].any()
        qty = p.line_qty[b][live]
        assert np.all((qty >= 1) & (qty <= 3))
        today = int(p.today[b])
        for o in range(h):
            s, date = int(p.order_status[b, o]), int(p.order_date[b, o])
            aux, trk = int(p.order_aux_date[b, o]), int(p.order_tracking[b, o])
            age = today - date
            if o != int(p.ret_order[b]):
                assert age_lo[s] <= age <= age_hi[s], (s, age)
            if s == OS.DELIVERED:
                assert 1 <= aux - date <= min(age, 5) or (age == 0 and aux == date)
            elif s == OS.SHIPPED:
                assert 2 <= aux - today <= 10
            elif s == OS.IN_TRANSIT:
                assert 1 <= aux - today <= 7
            elif s == OS.CONFIRMED:
                assert 5 <= aux - date <= 14
            else:
                assert aux == -1
            tracked = s in (OS.DELIVERED, OS.SHIPPED, OS.IN_TRANSIT)
            assert (0 <= trk < 10**9) if tracked else trk == -1


def test_non_target_status_mix(catalog):
    """The u table gives 10/15/20/45/10 % (2100 histories of 11 orders, minus targets)."""
    n = 10 * B  # in batches of the module's shape: no compile of its own
    keys = keys_for(4, n)
    parts = [
        generate_batch(generate, keys[i : i + B], catalog, jnp.full(B, 20, jnp.int32), PARAMS)
        for i in range(0, n, B)
    ]
    st = np.concatenate([np.asarray(p.order_status) for p in parts])
    tgt = np.concatenate([np.asarray(p.ret_order) for p in parts])
    mask = st >= 0
    mask[np.arange(n), tgt] = False
    freq = np.bincount(st[mask], minlength=5) / mask.sum()
    np.testing.assert_allclose(freq, [0.10, 0.15, 0.20, 0.45, 0.10], atol=0.015)


# --- the RETURN generator (SPEC §8.4) ---------------------------------------------------------


def test_target_window_edge_and_witness(catalog, problems):
    p = problems
    cat = np.asarray(catalog.category)
    stock = np.asarray(catalog.stock)
    keys = np.asarray(catalog.desc_key)
    n_edge = n_inel = 0
    for b in range(B):
        o, j = int(p.ret_order[b]), int(p.ret_line[b])
        assert 0 <= o < p.n_orders[b] and 0 <= j < p.order_n_lines[b, o]
        assert p.order_status[b, o] == OS.DELIVERED
        pid = int(p.line_pid[b, o, j])
        w = int(_window(catalog, pid))
        t = int(p.today[b] - p.order_date[b, o])
        assert t in (w - 1, w, w + 1) or 1 <= t <= max(1, w - 5), (t, w)
        n_edge += t >= w - 1
        n_inel += t > w
        assert 0 <= p.ret_reason[b] < 8 and -1 <= p.ret_method[b] < 3
        # The identifying description names exactly this line within the history.
        form, key = int(p.ref_form[b, 0]), int(p.ref_key[b, 0])
        assert form >= 1
        live = np.arange(C.MAX_ORDER_LINES)[None, :] < p.order_n_lines[b][:, None]
        hist = p.line_pid[b][live]
        hits = hist[keys[hist, form - 1] == key]
        assert hits.tolist() == [pid]
        # Replacement: witness of the same category, in stock, satisfying C_rep, protected.
        attr, op, val = p.cons_attr[b, 2], p.cons_op[b, 2], p.cons_val[b, 2]
        if p.ret_replace[b]:
            wit = int(p.ret_witness[b])
            assert wit != pid and cat[wit] == cat[pid] and stock[wit] > 0
            assert attr[0] == C.Attr.CAT and val[0] == cat[pid]
            m = 2 + int(DS[b]) // 2
            assert (attr >= 0).sum() <= 1 + max(1, m - 1)
            assert bool(feasible(catalog, jnp.int32(wit), attr, op, val))
            assert wit in p.protected[b]
            assert wit not in hist
        else:
            assert p.ret_witness[b] == -1 and np.all(attr == -1)
    # The edge is real at high d: some targets sit outside their window.
    assert n_edge > 20 and n_inel > 5


def test_slots_and_opening(catalog, problems):
    p = problems
    for b in range(B):
        has, pend = p.has_slot[b, 0, 0], p.pending[b, 0, 0]
        for s in (S.ITEMS, S.PURCHASE_DATE, S.REASON, S.REPLACEMENT):
            assert has[s]
        assert has[S.RETURN_METHOD] == (p.ret_method[b] >= 0)
        assert has[S.CATEGORY] == bool(p.ret_replace[b])
        assert not pend[S.ITEMS] and np.all(~pend | has)
        if p.ret_replace[b]:
            assert pend[S.CATEGORY] == pend[S.REPLACEMENT]
        assert p.slot_value[b, 0, S.REASON] == p.ret_reason[b]
        assert p.slot_value[b, 0, S.PURCHASE_DATE] == p.order_date[b, p.ret_order[b]]
        assert p.slot_value[b, 0, S.REPLACEMENT] == float(p.ret_replace[b])
    # p_missing omits slots at high d.
    assert p.pending[:, 0, 0, S.REASON].sum() > 20


def test_opening_states_exactly_the_non_pending_slots(catalog, params, problems):
    keys = keys_for(3)
    prob = jax.tree_util.tree_map(jnp.asarray, problems)
    _, ts = reset_batch(keys, catalog, prob, params)
    reply = ts.observation.reply
    stated = np.asarray(reply.slot_stated[:, 0])
    expect = np.asarray(prob.has_slot[:, 0, 0] & ~prob.pending[:, 0, 0])
    assert np.array_equal(stated, expect)
    assert np.array_equal(np.asarray(reply.ref_key[:, 0]), np.asarray(prob.ref_key[:, 0]))
    # No order or line id, eligibility or window is stated: no tool result yet either.
    assert np.all(np.asarray(ts.observation.results.ids) == -1)
    assert np.all(np.asarray(ts.observation.results.ord_status) == -1)


# --- the tools (SPEC §5.2) --------------------------------------------------------------------

_STEP = {}


def _step_jit():
    if "f" not in _STEP:
        from ecomjax.types import no_search

        f = jax.jit(step, static_argnums=3)
        _STEP["f"] = lambda c, s, a, p: f(c, s, a, p, no_search())
    return _STEP["f"]


def _find(catalog, d, pred, tries=200):
    for s in range(tries):
        key = jax.random.key(500 + s)
        prob = _gen()(key, catalog, jnp.int32(d), PARAMS)
        if pred(prob):
            return key, prob
    raise AssertionError("no matching problem")


def _with_age(catalog, prob, days):
    """The target order dated ``days`` before today (eligibility is only date-based)."""
    o = int(prob.ret_order)
    return prob.replace(order_date=prob.order_date.at[o].set(prob.today - days))


def _results(ts, n):
    res = jax.tree_util.tree_map(np.asarray, ts.observation.results)
    return res, res.error[:n].tolist()


@pytest.fixture(scope="module")
def replace_problem(catalog):
    """d = 20 (B_tool 11): a replacement is wanted; H = 11 orders."""
    return _find(catalog, 20, lambda p: bool(p.ret_replace) and int(p.ret_method) >= 0)


def test_order_list_and_get_status(catalog, replace_problem):
    key, prob = replace_problem
    prob = _with_age(catalog, prob, 1)
    state, _ = reset(key, catalog, prob, PARAMS)
    today = int(prob.today)
    dates = np.asarray(prob.order_date)
    n = int(prob.n_orders)
    calls = [
        Call(T.ORDER_LIST, qty=365),
        Call(T.ORDER_LIST, qty=5),
        Call(T.ORDER_GET_STATUS, order=n - 1),
        Call(T.ORDER_GET_STATUS, order=n),
        Call(T.ORDER_GET_STATUS, order=-2),
    ]
    state, ts = _step_jit()(catalog, state, make_action(calls), PARAMS)
    res, errors = _results(ts, len(calls))
    assert errors == [TE.NONE, TE.NONE, TE.NONE, TE.UNKNOWN_ORDER, TE.UNKNOWN_ORDER]
    assert int(state.dialogue.termination) == TM.RUNNING
    for i, days in ((0, 365), (1, 5)):
        shown = (dates[:n] >= today - days).nonzero()[0]
        assert res.total[i] == shown.size
        assert np.array_equal(np.flatnonzero(res.ord_status[i] >= 0), shown)
        rows = res.count[i]
        assert rows == np.asarray(prob.order_n_lines)[shown].sum()
        orders = res.var[i, :rows]
        assert np.all(np.diff(orders) <= 0)  # newest first
        pid = np.asarray(prob.line_pid)[orders, res.aux[i, :rows]]
        assert np.array_equal(res.ids[i, :rows], pid)
        assert np.array_equal(res.ord_track[i, shown], np.asarray(prob.order_tracking)[shown])
    assert res.count[2] == prob.order_n_lines[n - 1] and np.all(res.var[2, : res.count[2]] == n - 1)
    assert np.flatnonzero(res.ord_status[2] >= 0).tolist() == [n - 1]
    # Order lines count as Seen.
    assert bool(np.asarray(state.world.seen)[res.ids[0, : res.count[0]]].all())


@pytest.mark.parametrize("offset", [0, 1])
def test_window_edge_is_exact(catalog, replace_problem, offset):
    """t_days = W is eligible; W + 1 is window_expired, and return_initiate refuses it."""
    key, prob = replace_problem
    o, j = int(prob.ret_order), int(prob.ret_line)
    w = int(_window(catalog, int(prob.line_pid[o, j])))
    prob = _with_age(catalog, prob, w + offset)
    state, _ = reset(key, catalog, prob, PARAMS)
    calls = [
        Call(T.RETURN_CHECK_ELIGIBILITY, order=o, line=j),
        Call(T.RETURN_INITIATE, order=o, line=j, enum_a=0, enum_b=0),
    ]
    state, ts = _step_jit()(catalog, state, make_action(calls), PARAMS)
    res, errors = _results(ts, 2)
    info = res.info[0]
    assert info[2] == w and info[3] == w + offset
    if offset == 0:
        assert info[0] == 1 and info[1] == O.Ineligible.NONE and errors == [TE.NONE, TE.NONE]
        assert int(state.world.n_returns) == 1
    else:
        assert info[0] == 0 and info[1] == O.Ineligible.WINDOW_EXPIRED
        assert errors == [TE.NONE, TE.INELIGIBLE] and int(state.world.n_returns) == 0
    # Fees from return_fee with the tier: mail 5.99 (0 for premium), others 0.
    mail = 0.0 if int(prob.tier) == 2 else 5.99
    np.testing.assert_allclose(info[4:7], [mail, 0.0, 0.0], atol=1e-6)


def test_eligibility_reasons(catalog, replace_problem):
    _, prob = replace_problem
    for status, reason in (
        (OS.CANCELLED, O.Ineligible.CANCELLED),
        (OS.SHIPPED, O.Ineligible.NOT_DELIVERED),
        (OS.CONFIRMED, O.Ineligible.NOT_DELIVERED),
    ):
        p = prob.replace(order_status=prob.order_status.at[prob.ret_order].set(status))
        ok, why, _, _ = O.eligibility(catalog, p, p.ret_order, p.ret_line)
        assert not bool(ok) and int(why) == reason
    # A policy category with W = 0 (groceries) is non-returnable.
    groceries = C.POLICY_CATEGORIES.index("groceries")
    cat = catalog.replace(cat_policy=jnp.full_like(catalog.cat_policy, groceries))
    p = _with_age(catalog, prob, 1)
    ok, why, w, _ = O.eligibility(cat, p, p.ret_order, p.ret_line)
    assert not bool(ok) and int(why) == O.Ineligible.NON_RETURNABLE and int(w) == 0


def test_windows_and_fees_agree_with_the_policy_rules():
    """RETURN and POLICY never disagree (SPEC §9.2): W and fees equal the rule base's
    return_window_days and return_fee answers."""
    pr = pytest.importorskip("ecomjax.policy_rules")
    ctx0 = jnp.zeros(pr.N_FIELDS, jnp.float32)
    cat_f, tier_f = pr.FIELD_INDEX["product_category"], pr.FIELD_INDEX["membership_tier"]
    method_f = pr.FIELD_INDEX["return_method"]
    win = pr.TOPIC_INDEX["return_window_days"]
    fee = pr.TOPIC_INDEX["return_fee"]
    for c in range(len(C.POLICY_CATEGORIES)):
        v = pr.evaluate(jnp.int32(win), ctx0.at[cat_f].set(c))
        assert int(v) == O.WINDOW_DAYS[c], C.POLICY_CATEGORIES[c]
    for tier in range(3):
        for m in range(3):
            ctx = ctx0.at[tier_f].set(tier).at[method_f].set(m)
            v = float(pr.evaluate(jnp.int32(fee), ctx))
            assert abs(v - int(O.return_fee_cents(jnp.int32(m), jnp.int32(tier))) / 100) < 1e-6


def test_eligibility_property(catalog, problems):
    """eligible <=> DELIVERED and W > 0 and today - order_date <= W, over every status, ages
    0..40 and every history line of 30 problems (vmapped)."""
    p = jax.tree_util.tree_map(lambda x: jnp.asarray(x[:30]), problems)
    ages = jnp.arange(41)
    st = jnp.arange(5)

    def one(prob, status, age, o, j):
        prob = prob.replace(
            order_status=prob.order_status.at[o].set(status),
            order_date=prob.order_date.at[o].set(prob.today - age),
        )
        return O.eligibility(catalog, prob, o, j)

    grid = jnp.stack(jnp.meshgrid(st, ages, jnp.arange(2), jnp.arange(2), indexing="ij"), -1)
    grid = grid.reshape(-1, 4)
    f = jax.jit(jax.vmap(jax.vmap(one, (None, 0, 0, 0, 0)), (0, None, None, None, None)))
    ok, why, w, days = (np.asarray(x) for x in f(p, *grid.T))
    g = np.asarray(grid)
    pid = np.asarray(p.line_pid)[:, g[:, 2], g[:, 3]]
    w_ref = np.where(pid >= 0, _window(catalog, np.maximum(pid, 0)), 0)
    expect = (g[None, :, 0] == OS.DELIVERED) & (w_ref > 0) & (g[None, :, 1] <= w_ref)
    live = pid >= 0
    assert np.array_equal(ok[live], expect[live])
    assert np.array_equal(days[live], np.broadcast_to(g[None, :, 1], pid.shape)[live])
    assert np.all((why == 0) == ok)


def test_returns_exchanges_and_business_errors(catalog, replace_problem):
    key, prob = replace_problem
    prob = _with_age(catalog, prob, 1)
    o, j = int(prob.ret_order), int(prob.ret_line)
    wit = int(prob.ret_witness)
    oos = int(np.flatnonzero(np.asarray(catalog.stock) == 0)[0])
    stock = int(catalog.stock[wit])
    state, _ = reset(key, catalog, prob, PARAMS)
    stp = _step_jit()
    # Turn 1: the witness must be Seen before use (r_hall), so fetch it first.
    state, ts = stp(catalog, state, make_action([Call(T.CATALOG_GET_PRODUCT, product=wit)]), PARAMS)
    calls = [
        Call(T.RETURN_EXCHANGE, order=o, line=j, product=-2, enum_a=1, enum_b=0),
        Call(T.RETURN_EXCHANGE, order=o, line=j, product=oos, enum_a=1, enum_b=0),
        Call(T.RETURN_EXCHANGE, order=o, line=j, product=wit, variant=9, enum_a=1, enum_b=0),
        Call(T.RETURN_EXCHANGE, order=o, line=99, product=wit, enum_a=1, enum_b=0),
        Call(T.RETURN_EXCHANGE, order=77, line=0, product=wit, enum_a=1, enum_b=0),
        Call(T.RETURN_EXCHANGE, order=o, line=j, product=wit, enum_a=1, enum_b=2),
        Call(T.CATALOG_GET_PRODUCT, product=wit),
        Call(T.RETURN_INITIATE, order=o, line=j, enum_a=1, enum_b=0),
        Call(T.RETURN_CANCEL, order=1),
        Call(T.CATALOG_GET_PRODUCT, product=wit),
        Call(T.RETURN_CANCEL, order=1),
    ]
    state, ts = stp(catalog, state, make_action(calls), PARAMS)
    res, errors = _results(ts, len(calls))
    assert errors == [
        TE.UNKNOWN_PRODUCT,
        TE.OUT_OF_STOCK,
        TE.UNKNOWN_VARIANT,
        TE.UNKNOWN_LINE,
        TE.UNKNOWN_ORDER,
        TE.NONE,
        TE.NONE,
        TE.ALREADY_RETURNED,
        TE.NONE,
        TE.NONE,
        TE.ALREADY_CANCELLED,
    ]
    assert int(state.dialogue.termination) == TM.RUNNING
    # The exchange reserves one unit; cancelling releases it.
    assert res.qty[6, 0] == stock - 1 and res.qty[9, 0] == stock
    assert res.info[5, 0] == 1 and res.info[5, 1] == 1  # ret_001, exc_001
    assert res.ids[5, :2].tolist() == [int(prob.line_pid[o, j]), wit]
    w = jax.tree_util.tree_map(np.asarray, state.world)
    assert w.n_returns == 1 and not w.ret_active[0] and w.exch_pid[0] == wit
    # Turn 3: unknown return ids; a fresh return after the cancel is allowed.
    calls = [
        Call(T.RETURN_CANCEL, order=5),
        Call(T.RETURN_CANCEL, order=-2),
        Call(T.RETURN_INITIATE, order=o, line=j, enum_a=3, enum_b=0),
    ]
    state, ts = stp(catalog, state, make_action(calls), PARAMS)
    res, errors = _results(ts, 3)
    assert errors == [TE.UNKNOWN_RETURN, TE.UNKNOWN_RETURN, TE.NONE]
    mail = 0.0 if int(prob.tier) == 2 else 5.99
    assert res.info[2, 0] == 2 and abs(res.info[2, 1] - mail) < 1e-6 and res.info[2, 4] == 1
    assert int(state.world.n_returns) == 2 and bool(state.world.ret_active[1])
    assert float(state.reward.r_hall) == 0.0


# --- the verifier (SPEC §8.4), by hand --------------------------------------------------------


def _world(catalog, returns, seen=True):
    """A world holding the given returns: (order, line, reason, method, exch_pid, active).
    The exchanged products were retrieved first (Seen), unless ``seen`` is False: then they
    were used unseen, i.e. hallucinated (SPEC §7 v1.1)."""
    w = init_world(catalog.n_products)
    pids = jnp.asarray([x for *_, x, _ in returns] or [-1], jnp.int32)
    if seen:
        w = X.insert(w, pids, catalog.n_products, seen=True, oos=False)
    for x in pids.tolist():
        w = record_use(w, jnp.int32(x), jnp.bool_(x >= 0))
    for k, (o, j, r, m, x, a) in enumerate(returns):
        w = w.replace(
            ret_order=w.ret_order.at[k].set(o),
            ret_line=w.ret_line.at[k].set(j),
            ret_reason=w.ret_reason.at[k].set(r),
            ret_method=w.ret_method.at[k].set(m),
            ret_active=w.ret_active.at[k].set(a),
            exch_pid=w.exch_pid.at[k].set(x),
        )
    return w.replace(n_returns=jnp.int32(len(returns)))


def _ans(order, line):
    return empty_answer_fields().replace(
        env=jnp.int32(C.Env.RETURN), order=jnp.int32(order), line=jnp.int32(line)
    )


def _score(catalog, prob, returns, order, line, has=True, seen=True):
    world = _world(catalog, returns, seen)
    sc = verify(catalog, prob, world, None, _ans(order, line), jnp.bool_(has))
    return float(sc.r_task), bool(sc.is_correct), np.asarray(sc.detail)[:3].tolist()


def _other_line(prob):
    o, j = int(prob.ret_order), int(prob.ret_line)
    n = int(prob.order_n_lines[o])
    if n > 1:
        return o, (j + 1) % n
    return (o + 1) % int(prob.n_orders), 0


def test_verifier_hand_cases_with_replacement(catalog, replace_problem):
    _, prob = replace_problem
    prob = _with_age(catalog, prob, 1)  # eligible
    o, j = int(prob.ret_order), int(prob.ret_line)
    rs, m, wit = int(prob.ret_reason), int(prob.ret_method), int(prob.ret_witness)
    pid = int(prob.line_pid[o, j])
    oo, oj = _other_line(prob)
    bad_m, bad_r = (m + 1) % 3, (rs + 1) % 8
    assert _score(catalog, prob, [(o, j, rs, m, wit, True)], o, j) == (1.0, True, [1, 1, 1])
    # The same exchange to a witness never retrieved is no replacement (SPEC §7 v1.1).
    r = _score(catalog, prob, [(o, j, rs, m, wit, True)], o, j, seen=False)
    assert r == (pytest.approx(0.8), False, [1, 1, -1])
    # Wrong reason or method: r_ret 0.
    r = _score(catalog, prob, [(o, j, bad_r, m, wit, True)], o, j)
    assert r == (pytest.approx(0.55), False, [1, 0, 1])
    assert _score(catalog, prob, [(o, j, rs, bad_m, wit, True)], o, j)[2] == [1, 0, 1]
    # No exchange, or an exchange to the returned product itself: r_rep -1.
    assert _score(catalog, prob, [(o, j, rs, m, -1, True)], o, j)[:2] == (pytest.approx(0.8), False)
    assert _score(catalog, prob, [(o, j, rs, m, pid, True)], o, j)[2] == [1, 1, -1]
    # A product violating some of C_rep: r_rep = 2 s - 1.
    attr = np.asarray(prob.cons_attr[2])
    live = attr >= 0
    others = np.flatnonzero(np.asarray(catalog.category) != int(catalog.category[pid]))
    q = int(others[0])
    s = float(
        satisfaction(catalog, jnp.int32(q), prob.cons_attr[2], prob.cons_op[2], prob.cons_val[2])
    )
    assert s < 1 and live.sum() >= 2
    r_task, ok, det = _score(catalog, prob, [(o, j, rs, m, q, True)], o, j)
    assert det == [1, 1, pytest.approx(2 * s - 1)] and not ok
    assert r_task == pytest.approx(0.9 + 0.1 * (2 * s - 1))
    # A return on another line too: r_ret -1 (harmful side effect).
    r = _score(catalog, prob, [(o, j, rs, m, wit, True), (oo, oj, rs, m, -1, True)], o, j)
    assert r[2] == [1, -1, 1]
    # Cancelled returns do not count; no return at all: r_ret -1, r_rep -1.
    assert _score(catalog, prob, [(o, j, rs, m, wit, False)], o, j)[2] == [1, -1, -1]
    # Wrong selection; no answer at all.
    assert _score(catalog, prob, [(o, j, rs, m, wit, True)], oo, oj)[2] == [-1, 1, 1]
    assert _score(catalog, prob, [(o, j, rs, m, wit, True)], o, j, has=False)[0] == -1.0
    # Ineligible target: +1 only without any active return; r_rep +1 without exchanges.
    w = int(_window(catalog, pid))
    late = _with_age(catalog, prob, w + 1)
    assert _score(catalog, late, [], o, j) == (1.0, True, [1, 1, 1])
    assert _score(catalog, late, [(oo, oj, rs, m, wit, True)], o, j)[2] == [1, -1, -1]


def test_verifier_without_replacement(catalog):
    _, prob = _find(catalog, 6, lambda p: not bool(p.ret_replace) and int(p.ret_method) < 0)
    prob = _with_age(catalog, prob, 1)
    o, j, rs = int(prob.ret_order), int(prob.ret_line), int(prob.ret_reason)
    # No preference: any method fits.
    for m in range(3):
        assert _score(catalog, prob, [(o, j, rs, m, -1, True)], o, j) == (1.0, True, [1, 1, 1])
    # An unwanted exchange: r_rep -1.
    assert _score(catalog, prob, [(o, j, rs, 0, 5, True)], o, j)[2] == [1, 1, -1]


# --- the customer (SPEC §10.2) ----------------------------------------------------------------


def test_return_feedback_confirm_and_correct(catalog, replace_problem):
    key, prob = replace_problem
    prob = _with_age(catalog, prob, 1)
    state, _ = reset(key, catalog, prob, PARAMS)
    dlg = state.dialogue
    o, j = int(prob.ret_order), int(prob.ret_line)
    rs, m, wit = int(prob.ret_reason), int(prob.ret_method), int(prob.ret_witness)
    pid = int(prob.line_pid[o, j])
    oo, oj = _other_line(prob)
    before = _world(catalog, [])

    def fb(returns, prior=()):
        b = _world(catalog, list(prior)) if prior else before
        return return_feedback(catalog, prob, b, _world(catalog, list(prior) + returns), dlg, None)

    right = fb([(o, j, rs, m, wit, True)])
    assert bool(right.confirm) and bool(right.confirm_new) and not bool(right.correct)
    assert bool(right.confirmed[0])
    # Nothing created this turn: no feedback.
    quiet = fb([], prior=[(o, j, rs, m, wit, True)])
    assert not bool(quiet.confirm) and not bool(quiet.correct)
    cases = {
        RI.WRONG_LINE: ([(oo, oj, rs, m, -1, True)], []),
        RI.WRONG_REASON: ([(o, j, (rs + 1) % 8, m, wit, True)], [S.REASON]),
        RI.WRONG_METHOD: ([(o, j, rs, (m + 1) % 3, wit, True)], [S.RETURN_METHOD]),
        RI.REPLACEMENT_MISSING: ([(o, j, rs, m, -1, True)], [S.REPLACEMENT, S.CATEGORY]),
    }
    for issue, (rets, reveals) in cases.items():
        f = fb(rets)
        assert bool(f.correct) and not bool(f.confirm), issue
        assert np.flatnonzero(np.asarray(f.issues)).tolist() == [issue]
        assert sorted(np.flatnonzero(np.asarray(f.reveal)).tolist()) == sorted(reveals)
    # An exchange violating C_rep reveals exactly the violated constraints.
    others = np.flatnonzero(np.asarray(catalog.category) != int(catalog.category[pid]))
    f = fb([(o, j, rs, m, int(others[0]), True)])
    assert np.flatnonzero(np.asarray(f.issues)).tolist() == [RI.REPLACEMENT_CONSTRAINT]
    assert bool(f.reveal[S.CATEGORY])


def test_customer_replies_through_step(catalog, replace_problem):
    """The shared customer carries the RETURN CONFIRM (user-caused) and CORRECT acts."""
    key, prob = replace_problem
    prob = _with_age(catalog, prob, 1)
    o, j = int(prob.ret_order), int(prob.ret_line)
    rs, m, wit = int(prob.ret_reason), int(prob.ret_method), int(prob.ret_witness)
    stp = _step_jit()
    state, _ = reset(key, catalog, prob, PARAMS)
    state, ts = stp(catalog, state, make_action([Call(T.CATALOG_GET_PRODUCT, product=wit)]), PARAMS)
    bad = make_action(
        [Call(T.RETURN_EXCHANGE, order=o, line=j, product=wit, enum_a=(rs + 1) % 8, enum_b=m)]
    )
    state, ts = stp(catalog, state, bad, PARAMS)
    r = ts.observation.reply
    assert bool(r.acts[C.Act.CORRECT]) and bool(r.feedback_issues[RI.WRONG_REASON])
    assert bool(r.slot_stated[0, S.REASON]) and int(r.slot_value[0, S.REASON]) == rs
    fix = make_action(
        [
            Call(T.RETURN_CANCEL, order=1),
            Call(T.RETURN_EXCHANGE, order=o, line=j, product=wit, enum_a=rs, enum_b=m),
        ]
    )
    state, ts = stp(catalog, state, fix, PARAMS)
    r = ts.observation.reply
    assert bool(r.acts[C.Act.CONFIRM]) and bool(r.feedback_confirm) and bool(r.user_caused)
    state, ts = stp(catalog, state, make_action(answer_env=C.Env.RETURN), PARAMS)
    assert int(state.dialogue.termination) == TM.AGENT_DONE


# --- the family API (slow: its own compiles) ----------------------------------------------------


@pytest.mark.slow  # the default sweep runs in tests/test_invariants.py
def test_api_conformance(catalog, params):
    api_test(family("RETURN"), catalog, params, agent="random", n=B)
