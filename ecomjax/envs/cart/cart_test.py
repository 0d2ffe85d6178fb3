"""CART against SPEC §13: invariants 1-5, 7-9 and 11-13 over sweeps of d = 0..20.

Batches keep one shape (B = 2100, 100 episodes per d) so each agent compiles once.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax.actions import Call, make_action
from ecomjax.agents import AGENTS, empty_cart_agent
from ecomjax.catalog.vocabulary import VOCAB
from ecomjax.core import reset, step
from ecomjax.envs.cart.generator import generate
from ecomjax.envs.cart.variants import CANDIDATES, own_values
from ecomjax.registry import family
from ecomjax.rollout import run_batch_jit
from ecomjax.testing import (
    api_test,
    generate_batch,
    play_single,
    rate_exceeds,
    reset_batch,
    tree_equal,
)
from ecomjax.types import EnvParams

T = C.Tool
S = C.Slot
TM = C.Termination
HF = C.HardFail
B = 2100  # 100 episodes at each d in 0..20
DS = jnp.arange(B, dtype=jnp.int32) % (C.D_MAX + 1)
CART = (int(C.Env.CART),)  # only CART's verifier is traced


def keys_for(seed: int) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(B))


PARAMS = EnvParams()


def play(catalog, agent, seed=0, params=PARAMS):
    return run_batch_jit(catalog, keys_for(seed), DS, generate, agent, params, families=CART)


# --- invariant 2 (solvability) and 1 (ranges) -----------------------------------------------


@pytest.mark.slow  # the default sweep runs in tests/test_invariants.py
@pytest.mark.parametrize("seeds", [range(5), pytest.param(range(5, 25), marks=pytest.mark.slow)])
def test_oracle_reaches_is_correct(catalog, seeds):
    """10,500 episodes by default (42,000 with --runslow), 500+ at every d."""
    n = correct = 0
    for seed in seeds:
        res = play(catalog, AGENTS["oracle"], seed)
        r = res.state.reward
        ok = np.asarray(r.is_correct)
        n += ok.size
        correct += int(ok.sum())
        bad = np.flatnonzero(~ok)
        assert bad.size == 0, (
            f"seed {seed}: oracle failed at d={np.asarray(DS)[bad][:10]}, termination="
            f"{np.asarray(res.state.dialogue.termination)[bad][:10]}"
        )
        assert np.all(np.asarray(res.state.dialogue.termination) == TM.AGENT_DONE)
        assert np.all(np.asarray(res.state.dialogue.turn) <= np.asarray(res.state.problem.t_max))
    print(f"oracle IsCorrect {correct}/{n} = {correct / n:.4%}")
    assert correct / n >= 0.99


# --- invariant 5 (do-nothing agents) ----------------------------------------------------------


@pytest.mark.slow  # the default sweep runs in tests/test_invariants.py
def test_immediate_done_with_empty_cart_scores_minus_060(catalog, params):
    keys = keys_for(8)
    prob = generate_batch(generate, keys, catalog, DS, params)
    states, ts = reset_batch(keys, catalog, prob, params)
    mem = jax.vmap(empty_cart_agent.init, (0, 0, None))(keys, ts.observation, catalog)
    _, actions = jax.vmap(empty_cart_agent.act, (0, 0, 0, None))(keys, mem, ts.observation, catalog)
    states, ts = jax.jit(jax.vmap(step, (None, 0, 0, None)), static_argnums=3)(
        catalog, states, actions, params
    )
    r = states.reward
    np.testing.assert_allclose(np.asarray(ts.reward), -0.60, atol=1e-6)
    np.testing.assert_allclose(np.asarray(r.r_total), -0.60, atol=1e-6)
    assert np.all(np.asarray(states.dialogue.termination) == TM.AGENT_DONE)
    assert not np.any(np.asarray(r.is_correct))


# --- invariant 3 (targets) ----------------------------------------------------------------------


def test_targets_are_in_stock_unique_and_well_described(catalog, params):
    keys = keys_for(3)
    prob = jax.jit(jax.vmap(generate, (0, None, 0, None)), static_argnums=3)(
        keys, catalog, DS, params
    )
    pid, qty = np.asarray(prob.item_pid), np.asarray(prob.item_qty)
    valid = pid >= 0
    n_items = np.minimum(5, 1 + np.asarray(DS) // 3)
    assert np.array_equal(valid.sum(1), n_items)
    stock = np.asarray(catalog.stock)[np.maximum(pid, 0)]
    assert np.all(stock[valid] >= qty[valid]) and np.all(qty[valid] >= 1)
    for row in pid:
        live = row[row >= 0]
        assert len(set(live.tolist())) == live.size
    # The identifying description matches exactly one product of the catalog.
    keys_all = np.asarray(catalog.desc_key)
    form = np.asarray(prob.item_desc_form)
    dk = np.asarray(prob.item_desc_key)
    assert np.all(form[valid] >= 1)
    for f in (1, 2, 3):
        col = keys_all[:, f - 1]
        uniq, counts = np.unique(col, return_counts=True)
        lookup = dict(zip(uniq.tolist(), counts.tolist(), strict=True))
        sel = valid & (form == f)
        assert all(lookup[k] == 1 for k in dk[sel].tolist())
    # Exactly one of the three synthesized variants carries the required value.
    req = np.asarray(prob.item_var_req)
    vals = np.asarray(prob.item_var_vals)
    tgt = np.asarray(prob.item_var_target)
    attr = np.asarray(prob.item_var_attr)
    cand = [int(a) for a in CANDIDATES]
    has, own = jax.vmap(lambda p: own_values(catalog, p))(jnp.maximum(prob.item_pid, 0).reshape(-1))
    has = np.asarray(has).reshape(*pid.shape, -1)
    own = np.asarray(own).reshape(*pid.shape, -1)
    checked = 0
    for b, i in zip(*np.nonzero(req), strict=True):
        v = vals[b, i]
        assert len(set(v.tolist())) == 3 and 0 <= tgt[b, i] < 3
        c = cand.index(int(attr[b, i]))
        if has[b, i, c]:  # the product's own value is one of the three
            assert np.abs(v - own[b, i, c]).min() < 1e-6
            checked += 1
    assert checked > 100


def _own_value_targets(catalog, prob):
    """Per variant-required item whose card shows the variant attribute: (d, target
    position, whether the wanted value is the card's own value)."""
    req = np.asarray(prob.item_var_req)
    attr = np.asarray(prob.item_var_attr)
    cand = np.array([int(a) for a in CANDIDATES])
    has, own = jax.vmap(jax.vmap(lambda p: own_values(catalog, p)))(jnp.maximum(prob.item_pid, 0))
    ci = np.argmax(cand[None, None, :] == attr[..., None], -1)[..., None]
    shown = np.take_along_axis(np.asarray(has), ci, -1)[..., 0] & req
    own_v = np.take_along_axis(np.asarray(own), ci, -1)[..., 0]
    tgt = np.clip(np.asarray(prob.item_var_target), 0, 2)
    wanted = np.take_along_axis(np.asarray(prob.item_var_vals), tgt[..., None], -1)[..., 0]
    d = np.broadcast_to(np.asarray(prob.d)[:, None], req.shape)
    return d[shown], tgt[shown], np.abs(wanted - own_v)[shown] < 1e-6


def _near(k: int, n: int, lo: float = 0.28, hi: float = 0.39) -> bool:
    """k of n is consistent with a rate in [lo, hi] (binomial bounds at alpha 1e-3)."""
    return not rate_exceeds(k, n, hi) and not rate_exceeds(n - k, n, 1 - lo)


@pytest.mark.parametrize("seeds", [(13,), pytest.param((14, 15, 16, 17), marks=pytest.mark.slow)])
def test_wanted_variant_is_uniform_over_the_three(catalog, params, seeds):
    """SPEC §8.3 (v1.1): the wanted variant is the card's own value a third of the time
    (v1: always), and sits at each of the three listed positions a third of the time.
    2,100 keys per seed over d = 0..20 (about 4,000 items whose card shows the attribute)."""
    parts = [
        _own_value_targets(catalog, generate_batch(generate, keys_for(s), catalog, DS, params))
        for s in seeds
    ]
    d, pos, is_own = (np.concatenate(x) for x in zip(*parts, strict=True))
    n = is_own.size
    assert n >= 2048
    assert _near(int(is_own.sum()), n), f"own-value share {is_own.mean():.3f} of {n}"
    for j in range(3):
        assert _near(int((pos == j).sum()), n), f"position {j}: {(pos == j).mean():.3f}"
    for level in np.unique(d):
        k, m = int(is_own[d == level].sum()), int((d == level).sum())
        assert _near(k, m), f"d={level}: own-value share {k}/{m}"


# --- invariant 4 (determinism) --------------------------------------------------------------------


@pytest.mark.slow  # the default sweep runs in tests/test_invariants.py
@pytest.mark.parametrize("agent", ["oracle", "random"])
def test_same_key_replays_and_vmap_equals_single_runs(catalog, params, agent):
    # n = B shares the compiled batch with the sweeps above.
    api_test(family("CART"), catalog, params, agent=agent, n=B)


def _one_turn(catalog, params):
    from ecomjax.types import no_search

    key = jax.random.key(12)
    problem = jax.jit(generate, static_argnums=3)(key, catalog, jnp.int32(6), params)
    state, _ = reset(key, catalog, problem, params)
    action = make_action(
        [Call(T.ASK_USER, slots=[S.ITEMS, S.VARIANT, S.QUANTITY]), Call(T.USER_GET_VISIT_HISTORY)]
    )
    return state, action, no_search()


def test_jitted_equals_eager_one_turn(catalog, params):
    """One oracle turn (ask_user + visit history at d = 6), dispatched op by op versus
    compiled, with the step narrowed to CART (the default test; the full step is slow)."""
    state, action, search = _one_turn(catalog, params)
    narrow = dict(families=(), present=(C.Env.CART,))
    compiled = jax.jit(lambda *a: step(*a, **narrow), static_argnums=3)(
        catalog, state, action, params, search
    )
    plain = step(catalog, state, action, params, search, **narrow)
    assert tree_equal(compiled, plain)


@pytest.mark.slow
def test_jitted_equals_unjitted_one_turn(catalog, params):
    """The full step (every family's customer and verifier) under disable_jit."""
    state, action, search = _one_turn(catalog, params)
    compiled = _step_jit()(catalog, state, action, params)
    with jax.disable_jit():
        plain = step(catalog, state, action, params, search)
    assert tree_equal(compiled, plain)


@pytest.mark.slow
def test_jitted_equals_unjitted(catalog, params):
    """Two turns of the oracle at d = 0, op by op versus compiled, retrieval included."""
    key = jax.random.key(11)
    args = (catalog, key, 0, family("CART"), AGENTS["oracle"], params)
    jitted = play_single(*args, max_turns=2, jit=True)
    with jax.disable_jit():
        plain = play_single(*args, max_turns=2, jit=False)
    assert tree_equal(jitted, plain)


def test_no_retrace_when_d_varies(catalog, params):
    import chex

    action = make_action([Call(T.USER_GET_VISIT_HISTORY)])

    @jax.jit
    @chex.assert_max_traces(n=1)
    def one_turn(key, d):
        problem = generate(key, catalog, d, params)
        state, _ = reset(key, catalog, problem, params)
        return step(catalog, state, action, params)

    for d in range(C.D_MAX + 1):
        state, _ = one_turn(jax.random.key(d), jnp.int32(d))
        assert int(state.problem.d) == d


def test_padding_is_inert(catalog, params):
    key = jax.random.key(5)
    problem = jax.jit(generate, static_argnums=3)(key, catalog, jnp.int32(4), params)
    n = int((problem.item_pid >= 0).sum())
    assert n < C.MAX_ITEMS
    noisy = problem.replace(
        item_qty=problem.item_qty.at[n:].set(7),
        item_var_vals=problem.item_var_vals.at[n:].set(3.0),
        item_var_attr=problem.item_var_attr.at[n:].set(4),
        item_desc_key=problem.item_desc_key.at[n:].set(12345),
        cons_val=problem.cons_val + 9.0,
    )
    hist = Call(T.USER_GET_VISIT_HISTORY)
    plain = make_action([hist])
    # Padded call slots carry junk arguments; they must not matter.
    junk = plain.replace(product=plain.product.at[1:].set(3), qty=plain.qty.at[1:].set(0))
    stp = _step_jit()
    outs = []
    for prob, act in ((problem, plain), (noisy, junk)):
        state, _ = reset(key, catalog, prob, params)
        state, ts = stp(catalog, state, act, params)
        outs.append((state.world, ts.observation))
    assert tree_equal(outs[0], outs[1])


# --- invariant 8 (no hidden-goal leak) ------------------------------------------------------------


def test_opening_and_replies_carry_no_product_indices(catalog, params):
    keys = keys_for(9)
    prob = generate_batch(generate, keys, catalog, DS, params)
    _, ts = reset_batch(keys, catalog, prob, params)
    obs = ts.observation
    # Before any tool call, no observation array holds a target index where ids live.
    assert np.all(np.asarray(obs.results.ids) == -1)
    assert np.all(np.asarray(obs.events) == -1)
    # Items are described by description keys, which differ from the product index space.
    reply = obs.reply
    assert np.array_equal(np.asarray(reply.item_desc_key), np.asarray(prob.item_desc_key))
    # Pending slots are not stated in the opening INFORM.
    pend_qty = np.asarray(prob.pending[:, 0, :, S.QUANTITY])
    assert np.all(np.asarray(reply.item_qty)[pend_qty] == -1)
    pend_var = np.asarray(prob.pending[:, 0, :, S.VARIANT])
    assert np.all(np.asarray(reply.item_var_attr)[pend_var] == -1)


# --- invariant 13 (write-up examples) ------------------------------------------------------------


def _first_with(catalog, params, d, pred, tries=400):
    gen = jax.jit(generate, static_argnums=3)
    for s in range(tries):
        key = jax.random.key(1000 + s)
        prob = gen(key, catalog, jnp.int32(d), params)
        if pred(prob):
            return key, prob
    raise AssertionError("no matching problem found")


def test_writeup_example_1_scores_plus_080(catalog, params):
    key, prob = _first_with(
        catalog,
        params,
        1,
        lambda p: int(p.item_qty[0]) == 1 and not bool(p.item_var_req[0]),
    )
    stp = _step_jit()
    state, _ = reset(key, catalog, prob, params)
    state, ts = stp(catalog, state, make_action([Call(T.USER_GET_VISIT_HISTORY)]), params)
    assert bool(ts.observation.reply.acts[C.Act.ACK])
    target = int(prob.item_pid[0])
    state, ts = stp(catalog, state, make_action([Call(T.CART_ADD, product=target, qty=1)]), params)
    assert bool(ts.observation.reply.acts[C.Act.CONFIRM]) and bool(ts.observation.reply.user_caused)
    state, ts = stp(catalog, state, make_action(answer_env=C.Env.CART), params)
    r = state.reward
    assert int(state.dialogue.turn) == 3 and int(state.dialogue.t_user) == 1
    assert float(r.r_task) == 1.0 and float(r.r_hall) == 0.0
    assert abs(float(r.r_eff) - 1 / 3) < 1e-6
    assert abs(float(ts.reward) - 0.80) < 0.005


def test_writeup_example_2_scores_minus_006(catalog):
    """Charger x1, air fryer (one variant) x1, tank top (variant XS) x3; the final cart holds
    the charger, the wrong fryer variant, 3 wrong tank tops and 2 right ones: F1 = 0.5."""
    params = EnvParams(overrides=EnvParams().overrides.__class__(p_oos=0.0))
    key = jax.random.key(2)
    base = jax.jit(generate, static_argnums=3)(key, catalog, jnp.int32(8), params)
    cat = np.asarray(catalog.category)
    noun = np.asarray(catalog.noun)
    stock = np.asarray(catalog.stock)
    form = np.asarray(catalog.desc_form)
    from ecomjax.catalog.synthetic import synthetic_tables

    nouns = synthetic_tables().nouns

    def pick(noun_name, min_stock):
        idx = np.flatnonzero(
            (np.asarray([nouns[k] == noun_name for k in noun])) & (stock >= min_stock) & (form > 0)
        )
        return int(idx[0])

    charger = int(np.flatnonzero((cat == 8) & (stock >= 1) & (form > 0))[0])
    fryer, tank = pick("Air Fryer", 1), pick("Tank Top", 5)
    items = jnp.array([charger, fryer, tank, -1, -1])
    size_xs = float(VOCAB[C.Attr.SIZE].index("XS"))
    size_xl = float(VOCAB[C.Attr.SIZE].index("XL"))
    prob = base.replace(
        item_pid=items,
        item_qty=jnp.array([1, 1, 3, 0, 0]),
        item_var_req=jnp.array([False, True, True, False, False]),
        item_var_attr=jnp.array([-1, C.Attr.COLOR, C.Attr.SIZE, -1, -1]),
        item_var_vals=jnp.array(
            [[0, 0, 0], [1.0, 5.0, 7.0], [size_xl, size_xs, 2.0], [0, 0, 0], [0, 0, 0]],
            jnp.float32,
        ),
        item_var_target=jnp.array([-1, 1, 1, -1, -1]),
        item_desc_form=jnp.asarray(form[np.asarray(items).clip(0)] * (np.asarray(items) >= 0)),
        item_desc_key=jnp.asarray(
            np.where(
                np.asarray(items) >= 0,
                np.asarray(catalog.desc_key)[
                    np.asarray(items).clip(0), np.maximum(form[np.asarray(items).clip(0)] - 1, 0)
                ],
                -1,
            )
        ),
        history=jnp.array([charger, fryer, tank] + [-1] * 13),
        pending=base.pending.at[0, 2, S.QUANTITY].set(True),
        has_slot=base.has_slot.at[0, :3, S.ITEMS]
        .set(True)
        .at[0, 2, S.QUANTITY]
        .set(True)
        .at[0, 1:3, S.VARIANT]
        .set(True),
    )
    assert int(prob.t_max) == 8
    stp = _step_jit()
    state, _ = reset(key, catalog, prob, params)
    turns = [
        make_action([Call(T.ASK_USER, slots=[S.QUANTITY])]),  # CLARIFY reveals qty 3
        make_action(present=[fryer]),  # CONFIRM "yes, that's my air fryer"
        make_action(
            [
                Call(T.USER_GET_VISIT_HISTORY),
                Call(T.CATALOG_GET_VARIANTS, product=fryer),
                Call(T.CATALOG_GET_VARIANTS, product=tank),
            ]
        ),
        make_action([Call(T.CART_ADD, product=charger)]),
        make_action([Call(T.CART_ADD, product=fryer, variant=0)]),  # wrong fryer variant
        make_action([Call(T.CART_ADD, product=tank, variant=0, qty=3)]),  # XL x3
        make_action([Call(T.CART_ADD, product=tank, variant=1, qty=2)]),  # XS x2
        make_action(answer_env=C.Env.CART),
    ]
    for a in turns:
        state, ts = stp(catalog, state, a, params)
    r = state.reward
    assert int(state.dialogue.turn) == 8 and int(state.dialogue.t_user) == 2
    assert abs(float(r.f1) - 0.5) < 1e-6 and abs(float(r.r_task)) < 1e-6
    assert abs(float(r.r_eff) - (1 - 2 * 5 / 7)) < 1e-6
    assert abs(float(ts.reward) - (-0.06)) < 0.005


# --- invariant 11 (hard fails) and bad input ------------------------------------------------------

BAD_TURNS = {
    "unknown_tool": (make_action([Call(99)]), HF.INVALID_TOOL_CALL),
    "unknown_argument": (make_action([Call(T.CART_VIEW, bad_args=True)]), HF.INVALID_TOOL_CALL),
    "wrong_type": (make_action([Call(T.CART_ADD, product=1, bad_args=True)]), HF.INVALID_TOOL_CALL),
    "missing_argument": (make_action([Call(T.CART_ADD)]), HF.INVALID_TOOL_CALL),
    "quantity_zero": (make_action([Call(T.CART_ADD, product=1, qty=0)]), HF.INVALID_TOOL_CALL),
    "quantity_1e9": (make_action([Call(T.CART_ADD, product=1, qty=10**9)]), HF.INVALID_TOOL_CALL),
    "too_many_calls": (
        make_action([Call(T.CART_VIEW)] * C.MAX_TOOL_CALLS),
        HF.TOOL_BUDGET_EXCEEDED,
    ),
    "empty_turn": (make_action(message=False), HF.MALFORMED_ACTION),
    "malformed": (make_action(malformed=True), HF.MALFORMED_ACTION),
    "wrong_answer_env": (make_action(answer_env=C.Env.PD), HF.INVALID_ANSWER),
}


@pytest.mark.parametrize("name", sorted(BAD_TURNS))
@pytest.mark.parametrize("at", ["first", "middle", "last"])
def test_bad_turns_hard_fail_anywhere(catalog, params, name, at):
    bad, kind = BAD_TURNS[name]
    key = jax.random.key(21)
    prob = jax.jit(generate, static_argnums=3)(key, catalog, jnp.int32(12), params)
    t_max = int(prob.t_max)
    before = {"first": 0, "middle": t_max // 2, "last": t_max - 1}[at]
    stp = _step_jit()
    state, _ = reset(key, catalog, prob, params)
    for _ in range(before):
        state, ts = stp(catalog, state, make_action(), params)
    state, ts = stp(catalog, state, bad, params)
    assert int(state.dialogue.termination) == TM.HARD_FAIL
    assert int(state.reward.hard_fail) == kind
    assert float(ts.reward) == -1.0 and not bool(state.reward.is_correct)
    # The episode is absorbing afterwards.
    again, ts2 = stp(catalog, state, make_action(), params)
    assert float(ts2.reward) == 0.0 and int(again.dialogue.turn) == int(state.dialogue.turn)


_STEP = {}


def _step_jit():
    """One compiled single-episode step for every scripted test here. None of them
    searches, so the retrieval stage is passed in as empty."""
    if "f" not in _STEP:
        from ecomjax.types import no_search

        f = jax.jit(step, static_argnums=3)
        _STEP["f"] = lambda c, s, a, p, r=None: f(c, s, a, p, no_search() if r is None else r)
    return _STEP["f"]


def test_business_errors_never_fail(catalog, params):
    key = jax.random.key(22)
    prob = jax.jit(generate, static_argnums=3)(key, catalog, jnp.int32(20), params)
    stp = _step_jit()
    state, _ = reset(key, catalog, prob, params)
    oos = int(np.flatnonzero(np.asarray(catalog.stock) == 0)[0])
    calls = [
        Call(T.CART_ADD, product=-2),  # an id string the catalog does not know
        Call(T.CART_ADD, product=oos),
        Call(T.CART_ADD, product=1, variant=3 + int(catalog.var_count[1])),
        Call(T.CART_REMOVE, line=-2),
        Call(T.CART_SET_QUANTITY, line=42, qty=3),
        Call(T.CATALOG_GET_PRODUCT, product=10**6),
        Call(T.CATALOG_GET_VARIANTS, product=-5),
        Call(T.ORDER_GET_STATUS, order=3),
        Call(T.RETURN_CANCEL, order=1),
        Call(T.CART_ADD, product=int(prob.item_pid[0]), qty=99),
    ]
    state, ts = stp(catalog, state, make_action(calls), params)
    assert int(state.dialogue.termination) == TM.RUNNING
    errors = np.asarray(ts.observation.results.error)[: len(calls)]
    TE = C.ToolError
    assert errors.tolist() == [
        TE.UNKNOWN_PRODUCT,
        TE.OUT_OF_STOCK,
        TE.UNKNOWN_VARIANT,
        TE.UNKNOWN_LINE,
        TE.UNKNOWN_LINE,
        TE.UNKNOWN_PRODUCT,
        TE.UNKNOWN_PRODUCT,
        TE.UNKNOWN_ORDER,
        TE.UNKNOWN_RETURN,
        TE.INSUFFICIENT_STOCK,
    ]
    assert int(np.asarray(state.world.cart_no).max()) == 0  # nothing got into the cart


# --- invariant 7 (hallucination) --------------------------------------------------------------


def test_unseen_ids_are_hallucinated(catalog, params):
    key, prob = _first_with(
        catalog, params, 1, lambda p: int(p.item_qty[0]) == 1 and not bool(p.item_var_req[0])
    )
    target = int(prob.item_pid[0])
    stp = _step_jit()

    def final(seen_first: bool):
        state, _ = reset(key, catalog, prob, params)
        if seen_first:
            state, _ = stp(catalog, state, make_action([Call(T.USER_GET_VISIT_HISTORY)]), params)
        else:
            state, _ = stp(catalog, state, make_action(), params)
        state, _ = stp(catalog, state, make_action([Call(T.CART_ADD, product=target)]), params)
        state, _ = stp(catalog, state, make_action(answer_env=C.Env.CART), params)
        return state.reward

    grounded, blind = final(True), final(False)
    assert float(grounded.r_hall) == 0.0 and float(blind.r_hall) == -1.0
    # SPEC §7 v1.1: the blind line matches no requirement (F1 = 0, r_task = -1) but
    # counts in U_cart; one turn shorter would not make up for it.
    assert float(grounded.r_task) == 1.0 and float(blind.r_task) == -1.0
    assert bool(grounded.is_correct) and not bool(blind.is_correct)
