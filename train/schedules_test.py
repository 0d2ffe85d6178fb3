"""The traced schedules must reproduce ecomjax.curriculum exactly, and sample in range."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax import curriculum as cur
from ecomjax.train import schedules as sch


def _stream(seed: int, n: int, n_tasks: int, p_correct: float):
    rng = np.random.default_rng(seed)
    task = rng.integers(0, n_tasks, n).astype(np.int32)
    correct = rng.random(n) < p_correct
    mask = rng.random(n) < 0.9
    return task, correct, mask


@pytest.mark.parametrize("convention", ["default", "rlve"])
@pytest.mark.parametrize(("tau_acc", "tau_num"), [(0.9, 32), (0.7, 16), (0.8, 5)])
def test_update_matches_ecomjax_curriculum(convention, tau_acc, tau_num):
    cfg = cur.CurriculumConfig(convention=convention, tau_acc=tau_acc, tau_num=tau_num)
    mode = "batch" if convention == "rlve" else "stream"
    s = sch.make_schedule("adaptive", convention=convention, tau_acc=tau_acc, tau_num=tau_num)
    ref = mine = cur.init(3)
    upd_ref = jax.jit(lambda st, t, d, c, m: cur.update(st, t, d, c, m, cfg, mode=mode))
    upd_mine = jax.jit(sch.update)
    moved = 0
    for r in range(25):
        task, correct, mask = _stream(r, 64, 3, 0.93)
        # d near the frontier, so both counted and ignored episodes occur.
        rng = np.random.default_rng(100 + r)
        d = np.asarray(ref.h)[task] - rng.integers(0, 2, task.shape)
        ref = upd_ref(ref, task, d, correct, mask)
        mine = upd_mine(mine, s, task, d, correct, mask)
        for a, b in zip(
            jax.tree_util.tree_leaves(ref), jax.tree_util.tree_leaves(mine), strict=True
        ):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
        moved = int(np.asarray(ref.h).max())
    assert moved > 0  # the streams did exercise the promotion rule


def test_window_matches_ecomjax_curriculum():
    state = cur.CurriculumState(
        l=jnp.array([0, 2, 5], jnp.int32),
        h=jnp.array([0, 6, 9], jnp.int32),
        a=jnp.zeros(3, jnp.int32),
        b=jnp.zeros(3, jnp.int32),
    )
    for conv in ("default", "rlve"):
        want = cur.window(state, cur.CurriculumConfig(convention=conv))
        got = sch.window(state, sch.make_schedule("adaptive", convention=conv))
        for w, g in zip(want, got, strict=True):
            np.testing.assert_array_equal(np.asarray(w), np.asarray(g))


def test_sample_kinds_stay_in_their_ranges():
    key = jax.random.key(3)
    state = cur.CurriculumState(
        l=jnp.array([1, 0], jnp.int32),
        h=jnp.array([3, 0], jnp.int32),
        a=jnp.zeros(2, jnp.int32),
        b=jnp.zeros(2, jnp.int32),
    )
    task = jnp.tile(jnp.array([0, 1], jnp.int32), 500)
    idx = jnp.arange(task.shape[0], dtype=jnp.int32)
    d = np.asarray(sch.sample(key, state, sch.make_schedule("adaptive"), task, idx))
    assert set(d[::2]) == {1, 2, 3} and set(d[1::2]) == {0}
    d = np.asarray(sch.sample(key, state, sch.make_schedule("static", d_lo=8), task, idx))
    assert set(d) == {8}
    d = np.asarray(sch.sample(key, state, sch.make_schedule("uniform", d_hi=12), task, idx))
    assert set(d) == set(range(13))
    # Same draws as ecomjax.curriculum for the adaptive kind (keyed by the index).
    want = cur.sample(key, state, task, idx, cur.CurriculumConfig.default())
    got = sch.sample(key, state, sch.make_schedule("adaptive"), task, idx)
    np.testing.assert_array_equal(np.asarray(want), np.asarray(got))


def test_make_schedule_rejects_bad_ranges():
    with pytest.raises(ValueError):
        sch.make_schedule("uniform", d_lo=5, d_hi=2)
    with pytest.raises(ValueError):
        sch.make_schedule("sometimes")
