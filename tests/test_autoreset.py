"""Auto-reset rollouts: every completed episode is the episode ``run_plan`` plays on the
same key and d, bit for bit, whichever lane and step it ran in; ids are handed out once;
recycle slots bound the work per step; the runner's auto-reset rounds feed the
curriculum every completed episode."""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import autoreset as AR
from ecomjax import constants as C
from ecomjax.agents.oracle import make_oracle
from ecomjax.registry import family, resolve_tasks
from ecomjax.rollout import run_plan, slices
from ecomjax.runner import RunConfig, run
from ecomjax.testing import tree_equal

SMALL = (("CART", 12), ("STATUS", 6))
C8 = tuple((name, 4) for name in resolve_tasks("C8"))
KEY = jax.random.key(11)
STEPS = 9


def oracle(plan):
    return make_oracle(tuple(family(t).env for t, _ in plan))


@pytest.fixture(scope="module", params=[SMALL, pytest.param(C8, marks=pytest.mark.slow)])
def plan(request):
    return request.param


def sample_d(ids, task):
    """Spread d over 0..20 by id (any function of the id keeps episodes batch-free)."""
    return (ids * 5 + task * 3) % (C.D_MAX + 1)


@partial(jax.jit, static_argnames=("plan", "params"))
def _start(catalog, plan, params):
    return AR.init(catalog, plan, oracle(plan), params)


@partial(jax.jit, static_argnames=("plan", "params", "slots"))
def _advance(catalog, lanes, plan, params, slots):
    return AR.advance(catalog, lanes, KEY, plan, oracle(plan), params, sample_d, STEPS, slots)


def _play(catalog, params, plan, slots, calls=2):
    """``calls`` advances of ``STEPS`` steps each (one compile), from one start; completed
    rows stacked."""
    lanes = _start(catalog, plan, params)
    outs = []
    for _ in range(calls):
        lanes, done, taken = _advance(catalog, lanes, plan, params, slots)
        outs.append((done, taken))
    done = jax.tree_util.tree_map(lambda *xs: jnp.concatenate(xs), *[o[0] for o in outs])
    return jax.device_get((lanes, done, sum(o[1] for o in outs)))


@pytest.fixture(scope="module")
def tight(catalog, params, plan):
    """One recycle slot per slice: ended lanes queue."""
    return _play(catalog, params, plan, (1,) * len(plan))


@pytest.fixture(scope="module")
def roomy(catalog, params, plan):
    return _play(catalog, params, plan, None)


def _rows(done):
    v = done.valid
    return v, {f: np.asarray(x)[v] for f, x in vars(done).items() if f != "reward"}


def test_completed_episodes_replay_bit_for_bit(catalog, params, plan, roomy):
    """Replaying every completed episode from its id and d through the evaluation rollout
    gives the same reward and turn count, bit for bit. Breaking any part of the lane
    reset (agent key, turn counter, memory, observation) breaks this."""
    _, done, _ = roomy
    v, rows = _rows(done)
    reward = jax.tree_util.tree_map(lambda x: np.asarray(x)[v], done.reward)
    order = np.lexsort((rows["episode"], rows["task"]))  # group by slice for one plan
    counts = [(name, int((rows["task"] == i).sum())) for i, (name, _) in enumerate(plan)]
    replay_plan = tuple(e for e in counts if e[1])
    assert len(replay_plan) == len(plan), "every family completed episodes"
    ids = jnp.asarray(rows["episode"][order])
    keys = jax.vmap(lambda e: jax.random.fold_in(KEY, e))(ids)
    replay = jax.jit(run_plan, static_argnames=("plan", "agent", "params"))(
        catalog, keys, jnp.asarray(rows["d"][order]), replay_plan, oracle(plan), params
    )
    want = jax.tree_util.tree_map(lambda x: x[order], reward)
    assert tree_equal(replay.state.reward, want)
    assert np.array_equal(np.asarray(replay.state.dialogue.turn), rows["turns"][order])
    assert np.array_equal(rows["d"], np.asarray(sample_d(rows["episode"], rows["task"])))
    assert want.is_correct.mean() > 0.9  # the oracle, through recycled lanes


def test_a_lane_group_hands_out_its_own_ids(catalog, params):
    """Over a mesh, device j of S hands out ids ``c * S + j``: the episodes it completes
    are still exactly ``run_plan``'s on those ids (so devices never share an episode)."""
    plan = (("CART", 6), ("STATUS", 4))
    agent = oracle(plan)

    @jax.jit
    def advance(catalog):
        lanes = AR.init(catalog, plan, agent, params)
        return AR.advance(
            catalog, lanes, KEY, plan, agent, params, sample_d, STEPS, ids_of=lambda c: c * 3 + 1
        )

    lanes, done, _ = jax.device_get(advance(catalog))
    v, rows = _rows(done)
    assert v.sum() >= 4
    running = np.asarray(lanes.episode)
    assert np.array_equal(
        np.sort(np.concatenate([rows["episode"], running])),
        np.arange(int(lanes.next_episode)) * 3 + 1,
    )
    order = np.argsort(rows["task"], kind="stable")
    replay_plan = tuple((n, int((rows["task"] == i).sum())) for i, (n, _) in enumerate(plan))
    keys = jax.vmap(lambda e: jax.random.fold_in(KEY, e))(jnp.asarray(rows["episode"][order]))
    replay = jax.jit(run_plan, static_argnames=("plan", "agent", "params"))(
        catalog, keys, jnp.asarray(rows["d"][order]), replay_plan, agent, params
    )
    want = jax.tree_util.tree_map(lambda x: np.asarray(x)[v][order], done.reward)
    assert tree_equal(replay.state.reward, want)


def test_ids_are_handed_out_once(tight, roomy):
    for lanes, done, _ in (tight, roomy):
        v, rows = _rows(done)
        running = np.asarray(lanes.episode)
        ids = np.concatenate([rows["episode"], running[running >= 0]])
        assert np.array_equal(np.sort(ids), np.arange(int(lanes.next_episode)))
        assert (running >= 0).all()  # every placeholder lane has been filled


def test_slots_bound_recycling_per_step(plan, tight, roomy):
    """At most ``slots`` completions per slice and step; with one slot the ended lanes
    queue (fewer completions than with room), and a queued lane is never lost."""
    v_tight, v_roomy = tight[1].valid, roomy[1].valid
    assert v_tight.shape == (2 * STEPS, len(plan))
    assert v_tight.sum() < v_roomy.sum()
    ended = np.asarray(tight[0].state.dialogue.termination) != C.Termination.RUNNING
    # A slice with a lane still waiting used its slot in the last step (the queue drains).
    for i, (_, a, b) in enumerate(slices(plan)):
        assert v_tight[-1, i] or not ended[a:b].any()


def test_an_episode_does_not_depend_on_its_lane_or_step(tight, roomy):
    """The same (id, task) plays the same episode under different slot counts (so in
    different lanes and steps)."""
    a, b = (_rows(x[1])[1] for x in (tight, roomy))
    ra, rb = (jax.tree_util.tree_map(lambda y: np.asarray(y)[x[1].valid], x[1].reward)
              for x in (tight, roomy))  # fmt: skip
    key_a, key_b = (r["episode"] * 64 + r["task"] for r in (a, b))
    common, ia, ib = np.intersect1d(key_a, key_b, return_indices=True)
    assert common.size >= 5  # 9 with the small plan
    assert tree_equal(
        jax.tree_util.tree_map(lambda x: x[ia], ra), jax.tree_util.tree_map(lambda x: x[ib], rb)
    )
    assert np.array_equal(a["turns"][ia], b["turns"][ib])


def test_steps_taken_count_live_lanes(plan, tight, roomy):
    """Each step a live lane takes is one turn of its episode, so the count equals the
    turns of the episodes completed plus those of the episodes still in the lanes (the
    lanes start as placeholders with no turns)."""
    for lanes, done, taken in (tight, roomy):
        in_lanes = int(np.asarray(lanes.t).sum())
        assert in_lanes > 0
        assert int(taken) == int(done.turns[done.valid].sum()) + in_lanes


def test_bad_slots_are_refused(catalog, params):
    with pytest.raises(ValueError, match="slots"):
        AR.advance(catalog, None, KEY, SMALL, oracle(SMALL), params, sample_d, 1, (1, 1, 1))


def test_runner_auto_reset_counts_every_completed_episode(catalog):
    """Two rounds of 8 steps on 16 CART lanes complete more episodes than there are lanes,
    and each one reaches the statistics and the curriculum."""
    cfg = RunConfig(tasks="CART", batch=16, rounds=2, auto_reset=8, catalog_size=1000)
    res = run(cfg, catalog=catalog)
    n = sum(res.per_task["CART"].n.values())
    assert n == res.episodes > cfg.batch
    assert res.env_steps >= n
    assert res.summary()["per_task"]["CART"]["success_rate"] == 1.0
    assert len(res.history) == 2
    with pytest.raises(ValueError, match="auto_reset"):
        run(RunConfig(tasks="CART", batch=4, rounds=1, auto_reset=-1), catalog=catalog)


def test_devices_of_a_mesh_hand_out_disjoint_ids():
    """Over 2 simulated devices each device's lanes hold ids ``c * 2 + j`` from its own
    counter, never another device's (with one shared counter both would play the same
    episodes)."""
    from ecomjax.sharding import run_on_host_devices

    report = run_on_host_devices("tests.support.autoreset_mesh:check_lane_ids", 2, timeout=900)
    ids = np.asarray(report["ids"])
    assert report["completed"] > ids.size  # lanes were recycled
    for j, (row, counter) in enumerate(zip(ids, report["counters"], strict=True)):
        assert (row % 2 == j).all() and (row // 2 < counter).all(), (j, row, counter)
    assert np.unique(ids).size == ids.size


def test_auto_reset_over_a_one_device_mesh_is_the_plain_run(catalog):
    """The mesh path (shard_map, per-device counters, gathered completions) over a single
    device hands out the same ids and so plays the same rounds, bit for bit."""
    from ecomjax.sharding import batch_mesh

    cfg = RunConfig(tasks="CART,STATUS", batch=16, rounds=2, auto_reset=8, catalog_size=1000)
    want = run(cfg, catalog=catalog)
    got = run(cfg, catalog=catalog, mesh=batch_mesh(jax.devices()[:1]))
    assert got.episodes == want.episodes > cfg.batch
    assert (got.digest, got.state) == (want.digest, want.state)
