"""Seen / out-of-stock layouts (ecomjax.exposure): the sparse id list answers every
question exactly as the dense bitmaps do, and whole episodes are bit-identical in both
(rewards' floats to within float32 rounding: see ``_assert_rewards_match``).

Compiles: one insert/lookup program per layout; a random-agent CART, SUB and PD rollout
and an oracle CART rollout per layout (every family under --runslow)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax import exposure as X
from ecomjax.agents import oracle_agent, random_agent
from ecomjax.difficulty import AxisOverrides
from ecomjax.registry import family
from ecomjax.rollout import families_for, run_batch_jit
from ecomjax.shocks import keyed_uniform
from ecomjax.testing import tree_equal
from ecomjax.types import EnvParams
from ecomjax.world import init_world

N = 300  # small, so random inserts collide often
ROUNDS = 6
Q = 40  # ids per insert, -1 / out-of-range ones included


def _play_inserts(key: jax.Array, cap: int | None):
    """ROUNDS random inserts (seen or out of stock), then every id's answers."""
    world = init_world(N, cap)
    for r in range(ROUNDS):
        k = jax.random.fold_in(key, r)
        ids = jax.random.randint(k, (Q,), -3, N + 3)
        # Round 0 mimics reset (one forced out-of-stock product), later rounds deliveries,
        # with an occasional shock written through members() as apply_shocks does.
        world = X.insert(world, ids[:1] if r == 0 else ids, N, seen=r > 0, oos=r == 0)
        members, live = X.members(world)
        hit = keyed_uniform(jax.random.fold_in(k, 1), members) < 0.1  # a draw per id
        world = world.replace(oos=world.oos | (live & world.seen & hit & (members % 7 == r)))
    probe = jnp.arange(-2, N + 2)
    return world, X.is_seen(world, probe), X.is_oos(world, probe)


@pytest.mark.parametrize("n_keys", [2000])
def test_sparse_answers_equal_dense(n_keys):
    keys = jax.random.split(jax.random.key(11), n_keys)
    dense = jax.jit(jax.vmap(lambda k: _play_inserts(k, None)))(keys)
    sparse = jax.jit(jax.vmap(lambda k: _play_inserts(k, ROUNDS * Q)))(keys)
    np.testing.assert_array_equal(dense[1], sparse[1])
    np.testing.assert_array_equal(dense[2], sparse[2])
    assert dense[1].any() and dense[2].any()  # the sweep exercises both flags
    ids = np.asarray(sparse[0].seen_ids)
    live = ids != X.PAD
    # Sorted, unique, PAD only at the end, and exactly the touched products.
    assert (np.diff(ids.astype(np.int64), axis=1) > 0)[live[:, 1:]].all()
    assert (live[:, :-1] >= live[:, 1:]).all()
    touched = np.asarray(dense[0].seen) | np.asarray(dense[0].oos)
    np.testing.assert_array_equal(live.sum(1), touched.sum(1))
    np.testing.assert_array_equal(X.seen_bitmap(sparse[0], N), np.asarray(dense[0].seen))
    np.testing.assert_array_equal(X.oos_bitmap(sparse[0], N), np.asarray(dense[0].oos))


def test_members_list_the_same_products_in_the_same_order():
    world_d, world_s = init_world(N, None), init_world(N, 64)
    ids = jnp.array([5, 299, 0, 17, 5, -1, 300])
    world_d = X.insert(world_d, ids, N, seen=True, oos=False)
    world_s = X.insert(world_s, ids, N, seen=True, oos=False)
    md, ld = X.members(world_d)
    ms, ls = X.members(world_s)
    np.testing.assert_array_equal(np.asarray(md)[np.asarray(world_d.seen)], [0, 5, 17, 299])
    np.testing.assert_array_equal(np.asarray(ms)[np.asarray(ls)], [0, 5, 17, 299])
    assert ld.all() and int(ls.sum()) == 4


def test_capacity_modes():
    big, small = 10_000_000, 1000
    bound = X.worst_case_capacity()
    assert X.capacity(small, EnvParams()) is None  # auto: dense for small catalogs
    assert X.capacity(big, EnvParams()) == bound
    assert X.capacity(small, EnvParams(exposure="sparse")) == bound
    assert X.capacity(big, EnvParams(exposure="dense")) is None
    with pytest.raises(ValueError, match="exposure"):
        X.capacity(small, EnvParams(exposure="bitmap"))


def test_worst_case_capacity_is_the_largest_delivery():
    """The bound, recomputed from the SPEC §2 formulas in plain Python."""

    def per_episode(d, journey):
        turns = (4 + d // 2) * (min(5, 2 + d // 4) if journey else 1)
        return turns * (1 + d // 2) * max(max(20, 200 - 10 * d), 64)

    for journey in (False, True):
        fams = tuple(int(e) for e in C.Env if journey or e != C.Env.JOURNEY)
        want = max(per_episode(d, journey) for d in range(C.D_MAX + 1)) + 1
        assert X.worst_case_capacity(families=fams) == want
    # Overrides move the bound with them.
    fixed = X.worst_case_capacity(AxisOverrides(t_max=2, b_tool=1, top_k=10), families=(0,))
    assert fixed == 2 * 1 * 64 + 1


def _assert_rewards_match(a, b) -> None:
    """Integer and bool fields bit for bit, float fields to a few float32 ulps. The layouts
    compile to different programs, and XLA contracts w·x + y into one FMA in some fusions
    and not in others: PD's r_task = 0.55·r_rank + 0.35·r_cons + 0.10·r_av once came out
    one ulp apart (-0.75624996 vs -0.75625) from identical parts."""
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True):
        x, y = np.asarray(x), np.asarray(y)
        if np.issubdtype(x.dtype, np.floating):
            np.testing.assert_allclose(x, y, rtol=0, atol=4e-7)
        else:
            np.testing.assert_array_equal(x, y)


AGENT = {"random": random_agent, "oracle": oracle_agent}
DEFAULT = [("CART", "random"), ("SUB", "random"), ("PD", "random"), ("CART", "oracle")]
SLOW = [
    (name, agent)
    for name in ("PD", "SUB", "CART", "RETURN", "STATUS", "POLICY", "BUNDLE", "JOURNEY")
    for agent in ("random", "oracle")
    if (name, agent) not in DEFAULT
]


@pytest.mark.parametrize(
    "name,agent", DEFAULT + [pytest.param(*c, marks=pytest.mark.slow) for c in SLOW]
)
def test_episodes_bit_identical_in_both_layouts(catalog, name, agent):
    """Every d, many keys: final states (reward, dialogue, world as bitmaps) are equal."""
    b = 21 * 4
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(31), i))(jnp.arange(b))
    d = jnp.arange(b, dtype=jnp.int32) % 21
    fam = family(name)
    out = {}
    for mode in ("dense", "sparse"):
        res = run_batch_jit(
            catalog,
            keys,
            d,
            fam.generate,
            AGENT[agent],
            EnvParams(exposure=mode),
            families=families_for(fam.env),
        )
        out[mode] = res.state
    dense, sparse = out["dense"], out["sparse"]
    _assert_rewards_match(dense.reward, sparse.reward)
    assert tree_equal(dense.dialogue, sparse.dialogue)
    n = catalog.n_products
    seen = X.seen_bitmap(dense.world, n)
    np.testing.assert_array_equal(seen, X.seen_bitmap(sparse.world, n))
    np.testing.assert_array_equal(X.oos_bitmap(dense.world, n), X.oos_bitmap(sparse.world, n))
    rest = ("seen_ids", "seen", "oos")
    strip = {f: None for f in rest}
    assert tree_equal(dense.world.replace(**strip), sparse.world.replace(**strip))
    assert seen.any()  # the agents were delivered products
