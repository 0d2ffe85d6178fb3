"""The jitted collect -> verify -> curriculum -> DAPO step, its host loop and checkpoints.

Every test shares one compiled step (``curriculum_study.TINY``'s config, two vmapped runs)
with ``curriculum_study_test.py``, so the whole file costs one compile.
"""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import constants as C
from ecomjax.train import schedules as sch
from ecomjax.train.curriculum_study import TINY, train_config
from ecomjax.train.loop import (
    TrainConfig,
    compiled,
    load_checkpoint,
    make_layout,
    make_train_step,
    save_checkpoint,
    train,
)

CFG = train_config(TINY, "C1")
# Run 0 promotes after every 4 frontier episodes whatever the outcome (tau_acc = 0), so
# its curriculum must move; run 1 samples d uniformly from 0..4.
SCHEDULES = [
    sch.make_schedule("adaptive", tau_acc=0.0, tau_num=4),
    sch.make_schedule("uniform", d_lo=0, d_hi=4),
]


def _leaves_equal(a, b) -> bool:
    la, lb = jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)
    return len(la) == len(lb) and all(
        np.asarray(x).dtype == np.asarray(y).dtype and np.array_equal(np.asarray(x), np.asarray(y))
        for x, y in zip(la, lb, strict=True)
    )


@pytest.fixture(scope="module")
def run(catalog, tmp_path_factory):
    out = tmp_path_factory.mktemp("train")
    rows = train(
        CFG,
        SCHEDULES,
        steps=3,
        seeds=[0, 1],
        names=["adaptive", "uniform"],
        out=out,
        ckpt_every=2,
        progress=False,
        catalog=catalog,
    )
    return out, rows


@pytest.fixture(scope="module")
def stepped(catalog):
    comp = compiled(CFG)
    keys = jax.vmap(jax.random.key)(jnp.arange(2, dtype=jnp.uint32))
    s0 = comp.init(keys, catalog)
    s1, m1 = comp.step(s0, catalog, sch.stack(SCHEDULES), 0)
    return comp, s0, s1, m1


def test_steps_run_with_finite_loss_and_logs(run):
    out, rows = run
    assert any(r["kept_fraction"] > 0 for r in rows)
    assert [(r["step"], r["run"]) for r in rows] == [
        (s, n) for s in (1, 2, 3) for n in ("adaptive", "uniform")
    ]
    per_step = CFG.groups * CFG.group_size
    for r in rows:
        assert r["episodes"] == r["step"] * per_step
        for k in ("loss", "pg_loss", "entropy", "grad_norm"):
            assert np.isfinite(r[k]), k
        # DAPO drops groups whose rewards all tie: a gradient exactly when one is kept.
        assert (r["grad_norm"] > 0) == (r["kept_fraction"] > 0)
        assert (r["entropy"] > 0) == (r["kept_fraction"] > 0)
        assert r["hard_fail"] == [0.0]  # the policy's actions are always valid
        assert 0 <= r["kept_fraction"] <= 1
        assert np.asarray(r["eval_success"]).shape == (1, len(CFG.eval_d))
    logged = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert logged == rows
    meta = json.loads((out / "config.json").read_text())
    assert meta["config"]["group_size"] == CFG.group_size and len(meta["runs"]) == 2


def test_params_change_and_curriculum_advances(stepped):
    comp, s0, s1, m1 = stepped
    assert np.isfinite(np.asarray(m1["loss"])).all()
    kept = np.asarray(m1["kept_fraction"]) > 0
    assert kept.any()
    for r in range(2):
        p0 = jax.tree_util.tree_map(lambda x, r=r: x[r], s0.params)
        p1 = jax.tree_util.tree_map(lambda x, r=r: x[r], s1.params)
        assert _leaves_equal(p0, p1) == (not kept[r])
    # Run 0: the first 4 of its 16 training episodes sit at the frontier d = 0 and pass the
    # tau_acc = 0 check, so h becomes 1; the other 12 (d = 0 != h) are ignored.
    assert np.asarray(s1.cstate.h).tolist() == [[1], [0]]
    assert np.asarray(s1.cstate.b)[0].tolist() == [0]
    assert np.asarray(s1.step).tolist() == [1, 1]
    n = CFG.groups * CFG.group_size
    assert np.asarray(s1.episodes).tolist() == [n, n]
    # Run 1 keeps counting frontier (d = 0) episodes toward tau_num = 32.
    assert 0 <= int(np.asarray(s1.cstate.b)[1, 0]) <= n


def test_runs_are_independent_of_their_neighbours(stepped, catalog):
    """A vmapped run's outcome does not depend on which runs sit beside it."""
    comp, s0, s1, m1 = stepped
    swapped = jax.tree_util.tree_map(lambda x: x[::-1], s0)
    t1, m = comp.step(swapped, catalog, sch.stack(SCHEDULES[::-1]), 0)
    assert _leaves_equal(jax.tree_util.tree_map(lambda x: x[::-1], t1), s1)


def test_checkpoint_round_trip_is_bit_identical(stepped, catalog, tmp_path):
    comp, s0, s1, m1 = stepped
    path = tmp_path / "ckpt.msgpack"
    save_checkpoint(path, s1)
    back = load_checkpoint(path, s0)
    assert _leaves_equal(back, s1)
    # Training on from the restored state is the same computation.
    a, ma = comp.step(s1, catalog, sch.stack(SCHEDULES), 1)
    b, mb = comp.step(back, catalog, sch.stack(SCHEDULES), 1)
    assert _leaves_equal(a, b) and _leaves_equal(ma, mb)


def test_resume_continues_from_the_checkpoint(run, catalog):
    out, rows = run
    more = train(
        CFG,
        SCHEDULES,
        steps=4,
        seeds=[0, 1],
        names=["adaptive", "uniform"],
        out=out,
        resume=True,
        progress=False,
        catalog=catalog,
    )
    assert [r["step"] for r in more] == [4, 4]
    assert more[0]["episodes"] == 4 * CFG.groups * CFG.group_size
    logged = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in logged] == [1, 1, 2, 2, 3, 3, 4, 4]


def test_group_members_share_the_problem(stepped):
    """SPEC §3: a group's G members share (env, d, problem key); groups differ, held-out
    episodes never reuse a training key, and every agent key is distinct."""
    _, lay, _, _, batch_keys = make_train_step(CFG)
    state = jax.tree_util.tree_map(lambda x: x[0], stepped[2]).replace(step=jnp.int32(3))
    d, pkeys, akeys = jax.jit(batch_keys)(state, sch.make_schedule("uniform", d_lo=0, d_hi=12))
    d, pk, ak = (
        np.asarray(d),
        np.asarray(jax.random.key_data(pkeys)),
        np.asarray(jax.random.key_data(akeys)),
    )
    g = CFG.group_size
    tr = lay.train_idx.reshape(-1, g)
    for members in tr:
        assert len(set(d[members].tolist())) == 1
        assert len({tuple(x) for x in pk[members]}) == 1
    train_keys = {tuple(pk[m[0]]) for m in tr}
    assert len(train_keys) == tr.shape[0]
    ev = np.flatnonzero(~lay.train)
    assert not train_keys & {tuple(x) for x in pk[ev]}
    assert sorted(d[ev].tolist()) == sorted(lay.eval_d[ev].tolist())
    assert len({tuple(x) for x in ak}) == ak.shape[0]


def test_layout_groups_are_contiguous_per_family():
    lay = make_layout(TrainConfig(tasks="C8", groups=8, group_size=2, eval_per=1, eval_d=(0, 4)))
    assert tuple(name for name, _ in lay.plan) == C.ENV_NAMES  # C8, in family order
    assert lay.batch == 8 * (2 + 2)
    grp = lay.group[lay.train_idx]
    assert (grp == np.repeat(np.arange(8), 2)).all()
    # Every group sits inside one family slice.
    assert all(len(set(lay.task[lay.group == k].tolist())) == 1 for k in range(8))
