"""The learned policy: shapes, exact log-probs, determinism and always-valid actions."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax.core import reset
from ecomjax.registry import family
from ecomjax.testing import reset_batch
from ecomjax.tools.validate import hard_fail_kind
from ecomjax.train.array_policy import (
    ALL_TOOLS,
    HEADS,
    Policy,
    PolicyConfig,
    _matches,
    encode,
    init_memory,
    observe,
    to_action,
)
from ecomjax.types import EnvParams, empty_action, empty_results, empty_user_act

T = C.Tool
CFG = PolicyConfig(hidden=16, memory=8, rows=8, calls=3, tools=ALL_TOOLS)
N = 64


@jax.jit
def _reset_obs(catalog, keys, d):
    """CART reset observations whose disclosed env then cycles through all eight, so the
    answer heads of every family are exercised (validity depends on the env alone)."""
    prob = jax.vmap(family("CART").generate, (0, None, 0, None))(keys, catalog, d, EnvParams())
    _, ts = reset_batch(keys, catalog, prob, EnvParams())
    env = jnp.arange(keys.shape[0], dtype=jnp.int32) % len(C.Env)
    return ts.observation.replace(env=env), env


@pytest.fixture(scope="module")
def setup(catalog):
    """Reset observations (every env id, d in 0..8), plus a memory whose table is full
    (rows in and out of the cart, variants known or not), so pointer tools are live."""
    pol = Policy(CFG)
    keys = jax.random.split(jax.random.key(0), N)
    obs, env = _reset_obs(catalog, keys, jnp.arange(N, dtype=jnp.int32) % 9)
    mem0 = init_memory(CFG)
    p = CFG.rows
    full = mem0.replace(
        pid=jnp.arange(p, dtype=jnp.int32) * 37 % catalog.n_products,
        cart_qty=jnp.where(jnp.arange(p) % 3 == 0, 2, 0),
        cart_line=jnp.where(jnp.arange(p) % 3 == 0, jnp.arange(p) // 3 + 1, -1),
        n_var=jnp.where(jnp.arange(p) % 2 == 0, 3, -1),
    )
    mems = jax.tree_util.tree_map(
        lambda a, b: jnp.where(
            (jnp.arange(N) % 2 == 0).reshape((N,) + (1,) * a.ndim), a[None], b[None]
        ),
        full,
        mem0,
    )
    first = jax.tree_util.tree_map(lambda x: x[0], obs)
    params_ = jax.jit(pol.init_params)(jax.random.key(1), catalog, first)
    h = jnp.zeros((N, CFG.memory))

    @jax.jit
    def act_(params_, keys, catalog, mems, h, obs):
        def one(mem, h, o, k):
            inp = encode(mem, o, catalog, CFG, False)
            h2, smp, lp, ent = pol.net.apply(params_, inp, h, k)
            return inp, smp, lp, ent, to_action(smp, mem, inp, catalog, CFG)

        return jax.vmap(one)(mems, h, obs, keys)

    def act(params_, keys):
        return act_(params_, keys, catalog, mems, h, obs)

    return pol, params_, obs, env, mems, h, act


def test_shapes(setup):
    pol, params_, obs, env, mems, h, act = setup
    inp, smp, lp, ent, action = act(params_, jax.random.split(jax.random.key(2), N))
    assert lp.shape == (N, len(HEADS)) and ent.shape == (N,)
    assert smp.tool.shape == (N, CFG.calls) and smp.rec.shape == (N, CFG.rows)
    ref = empty_action()
    for got, want in zip(
        jax.tree_util.tree_leaves(action), jax.tree_util.tree_leaves(ref), strict=True
    ):
        assert got.shape == (N, *want.shape) and got.dtype == want.dtype
    assert np.isfinite(np.asarray(lp)).all() and (np.asarray(lp) <= 1e-6).all()


def test_actions_are_always_valid(setup):
    pol, params_, obs, env, mems, h, act = setup
    seen_tools, answered = set(), set()
    for r in range(6):
        _, smp, _, _, action = act(params_, jax.random.split(jax.random.key(10 + r), N))
        kinds = jax.vmap(hard_fail_kind)(action, env, obs.tool_budget)
        assert (np.asarray(kinds) == C.HardFail.NONE).all()
        used = np.asarray(action.tool != T.NONE)
        assert (used.sum(-1) <= np.minimum(np.asarray(obs.tool_budget), CFG.calls)).all()
        # Used call slots come first (the validator counts used slots).
        assert (np.diff(used.astype(int), axis=-1) <= 0).all()
        seen_tools |= set(np.asarray(action.tool)[used].tolist())
        answered |= set(np.asarray(env)[np.asarray(action.answer.present)].tolist())
    # Pointer tools did fire (the table was full for half the episodes).
    assert {T.CART_ADD, T.CATALOG_GET_VARIANTS, T.CART_SET_QUANTITY} <= seen_tools
    assert answered == set(range(len(C.Env)))  # answers of every env's schema were checked


def test_logp_rescoring_matches_sampling(setup):
    pol, params_, obs, env, mems, h, act = setup
    inp, smp, lp, ent, _ = act(params_, jax.random.split(jax.random.key(3), N))
    score = jax.jit(jax.vmap(pol.score, (None, 0, 0, 0)))
    _, lp2, ent2 = score(params_, inp, h, smp)
    np.testing.assert_allclose(np.asarray(lp2), np.asarray(lp), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ent2), np.asarray(ent), rtol=1e-5, atol=1e-5)
    # A different sample scores differently (the score does read the samples).
    other = smp.replace(kind=(smp.kind + 1) % 3)
    _, lp3, _ = score(params_, inp, h, other)
    assert not np.allclose(
        np.asarray(lp3)[:, HEADS.index("answer")], np.asarray(lp)[:, HEADS.index("answer")]
    )


def test_tool_logp_is_a_distribution_and_matches_frequencies(setup):
    """Slot 0's tool head: exp(logp) over every choice sums to 1 (masked tools get 0), and
    sampled frequencies follow exp(logp)."""
    pol, params_, obs, env, mems, h, act = setup
    inp, smp, lp, _, _ = act(params_, jax.random.split(jax.random.key(4), N))
    one = jax.tree_util.tree_map(lambda x: x[0], (inp, smp, h))  # a full-table CART episode
    inp0, smp0, h0 = one
    inp0 = inp0.replace(budget=jnp.int32(1))  # only slot 0 may call a tool

    def tool_lp(t):
        s = smp0.replace(tool=smp0.tool.at[0].set(t))
        _, lp_t, _ = pol.score(params_, inp0, h0, s)
        return lp_t[HEADS.index("tool")]

    probs = np.exp(np.asarray(jax.jit(jax.vmap(tool_lp))(jnp.arange(len(ALL_TOOLS)))))
    assert abs(probs.sum() - 1) < 1e-5
    draw = jax.jit(jax.vmap(lambda k: pol.net.apply(params_, inp0, h0, k)[1].tool[0]))
    draws = draw(jax.random.split(jax.random.key(5), 4000))
    freq = np.bincount(np.asarray(draws), minlength=len(ALL_TOOLS)) / 4000
    np.testing.assert_allclose(freq, probs, atol=0.03)


def test_deterministic_given_the_key(setup):
    pol, params_, obs, env, mems, h, act = setup
    keys = jax.random.split(jax.random.key(6), N)
    a = act(params_, keys)
    b = act(params_, keys)
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    c = act(params_, jax.random.split(jax.random.key(7), N))
    assert not np.array_equal(np.asarray(a[1].tool), np.asarray(c[1].tool))


def test_observe_fills_the_table_from_the_visit_history(catalog):
    """After a user_get_visit_history result, the table holds the history's products and
    exactly the rows the customer described are matched (the encoder's description match)."""
    cfg = PolicyConfig(rows=16)
    key = jax.random.key(11)

    @jax.jit
    def run(catalog, key):
        prob = family("CART").generate(key, catalog, jnp.int32(3), EnvParams())
        _, ts = reset(key, catalog, prob, EnvParams())
        mem = observe(init_memory(cfg), ts.observation, catalog, cfg)
        n = (prob.history >= 0).sum()
        res = empty_results()
        res = res.replace(
            tool=res.tool.at[0].set(T.USER_GET_VISIT_HISTORY),
            count=res.count.at[0].set(n),
            ids=res.ids.at[0, : C.MAX_HISTORY].set(prob.history),
            qty=res.qty.at[0, : C.MAX_HISTORY].set(jnp.where(prob.history >= 0, 5, 0)),
        )
        quiet = ts.observation.replace(results=res, reply=empty_user_act())
        mem = observe(mem, quiet, catalog, cfg)
        return prob, mem, _matches(mem, catalog)[0]

    prob, mem, match = run(catalog, key)
    hist = np.asarray(prob.history)
    assert set(np.asarray(mem.pid)[np.asarray(mem.pid) >= 0].tolist()) == set(
        hist[hist >= 0].tolist()
    )
    targets = set(np.asarray(prob.item_pid)[np.asarray(prob.item_pid) >= 0].tolist())
    matched = set(np.asarray(mem.pid)[np.asarray(match).any(-1)].tolist())
    assert len(targets) == 2 and matched == targets
    assert (np.asarray(mem.stock)[np.asarray(mem.pid) >= 0] == 5).all()
