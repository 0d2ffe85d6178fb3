"""SPEC §3 curriculum against a plain-Python scalar re-implementation (invariant 12).

Shapes are fixed (N_TASKS tasks, batches padded to BATCH with mask), so each
(config, mode) compiles once and every hypothesis example reuses it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax import curriculum as cur
from ecomjax.constants import D_MAX

N_TASKS = 8
BATCH = 128
MAX_BATCHES = 16  # streams of up to 2048 episodes


# --- the scalar reference: SPEC §3 read literally ---------------------------------------


class Ref:
    """One task's (l, h, a, b) per list slot; plain ints, one episode at a time."""

    def __init__(self, cfg: cur.CurriculumConfig, l, h, a, b) -> None:  # noqa: E741
        self.cfg = cfg
        self.l, self.h, self.a, self.b = list(l), list(h), list(a), list(b)

    def window(self, t: int) -> tuple[int, int]:
        if self.cfg.convention == "rlve":
            return max(0, self.h[t] - (self.cfg.window - 1)), self.h[t]
        return self.l[t], self.h[t]

    def _check(self, t: int) -> None:
        cfg = self.cfg
        if self.b[t] >= cfg.tau_num:  # rule 3
            if self.a[t] / self.b[t] >= cfg.tau_acc:
                self.h[t] = min(self.h[t] + 1, cfg.d_max)
                if cfg.convention == "rlve":
                    self.l[t] = max(0, self.h[t] - (cfg.window - 1))
                elif self.h[t] - self.l[t] > cfg.d_delta:
                    self.l[t] = self.h[t] - cfg.d_delta
            self.a[t] = self.b[t] = 0  # rule 4

    def stream(self, eps: list[tuple[int, int, bool]]) -> None:
        for t, d, ok in eps:
            if d != self.h[t]:  # rule 1
                continue
            self.b[t] += 1  # rule 2
            self.a[t] += int(ok)
            self._check(t)

    def batch(self, eps: list[tuple[int, int, bool]]) -> None:
        h0 = list(self.h)
        for t, d, ok in eps:
            if d == h0[t]:
                self.b[t] += 1
                self.a[t] += int(ok)
        for t in range(len(self.h)):
            self._check(t)

    def state(self) -> tuple[list[int], ...]:
        return self.l, self.h, self.a, self.b


def _as_lists(s: cur.CurriculumState) -> tuple[list[int], ...]:
    return tuple(np.asarray(x).tolist() for x in (s.l, s.h, s.a, s.b))


@functools.partial(jax.jit, static_argnames=("cfg", "mode"))
def _update(state, task, d, ok, mask, cfg, mode):
    return cur.update(state, task, d, ok, mask, cfg, mode=mode)


@functools.partial(jax.jit, static_argnames=("cfg",))
def _sample(key, state, task, ep, cfg):
    return cur.sample(key, state, task, ep, cfg)


# Spec conventions plus small-threshold variants that move quickly enough for short
# streams to reach the cap, hit exact a/b == tau_acc ties and exercise the window slide.
CONFIGS = {
    "default": cur.CurriculumConfig.default(),
    "rlve": cur.CurriculumConfig.rlve(),
    "default_fast": cur.CurriculumConfig(tau_num=4, tau_acc=0.75, d_delta=2, d_max=7),
    "rlve_fast": cur.CurriculumConfig(convention="rlve", tau_num=5, tau_acc=0.8, d_max=9),
    "default_tie": cur.CurriculumConfig(tau_num=10, tau_acc=0.9, d_delta=4, d_max=D_MAX),
}


def _width_cap(cfg: cur.CurriculumConfig) -> int:
    return cfg.window if cfg.convention == "rlve" else cfg.d_delta + 1


def _pad(eps: list[tuple[int, int, bool]], rng: np.random.Generator):
    """Pad to BATCH; padding is garbage (any task, d, correctness) that mask must neutralise."""
    n = len(eps)
    task = rng.integers(-2, N_TASKS + 2, size=BATCH)
    d = rng.integers(0, D_MAX + 1, size=BATCH)
    ok = rng.random(BATCH) < 0.9
    mask = np.zeros(BATCH, bool)
    # scatter the real episodes at random sorted positions so padding interleaves
    pos = np.sort(rng.choice(BATCH, size=n, replace=False))
    for p, (t, dd, c) in zip(pos, eps, strict=True):
        task[p], d[p], ok[p], mask[p] = t, dd, c, True
    return (jnp.asarray(task, jnp.int32), jnp.asarray(d, jnp.int32), jnp.asarray(ok),
            jnp.asarray(mask))  # fmt: skip


def _random_state(cfg: cur.CurriculumConfig, rng: np.random.Generator) -> tuple[list[int], ...]:
    """A reachable state: h anywhere, l per convention, counters below tau_num."""
    h = rng.integers(0, cfg.d_max + 1, size=N_TASKS)
    if cfg.convention == "rlve":
        lo = np.maximum(0, h - (cfg.window - 1))
    else:
        lo = np.maximum(0, h - rng.integers(0, cfg.d_delta + 1, size=N_TASKS))
    b = rng.integers(0, cfg.tau_num, size=N_TASKS)
    a = (rng.random(N_TASKS) * (b + 1)).astype(int)
    return tuple(x.astype(int).tolist() for x in (lo, h, a, b))


def _run_and_compare(cfg_name: str, mode: str, seed: int, n_batches: int, random_start: bool):
    cfg = CONFIGS[cfg_name]
    rng = np.random.default_rng(seed)
    zeros = tuple([0] * N_TASKS for _ in range(4))
    init = _random_state(cfg, rng) if random_start else zeros
    ref = Ref(cfg, *init)
    state = cur.CurriculumState(*(jnp.asarray(x, jnp.int32) for x in init))
    n_active = int(rng.integers(1, N_TASKS + 1))
    active = rng.choice(N_TASKS, size=n_active, replace=False)
    p_task = rng.choice([0.0, 0.5, 0.85, 0.9, 0.95, 1.0], size=N_TASKS)
    p_off = rng.choice([0.0, 0.1, 0.3])  # share of off-window / stale d values
    prev_h = list(ref.h)
    for _ in range(n_batches):
        n = int(rng.integers(0, BATCH + 1))
        eps = []
        for _ in range(n):
            t = int(rng.choice(active))
            lo, hi = ref.window(t)
            d = (
                int(rng.integers(0, cfg.d_max + 1))
                if rng.random() < p_off
                else int(rng.integers(lo, hi + 1))
            )
            eps.append((t, d, bool(rng.random() < p_task[t])))
        args = _pad(eps, rng)
        state = _update(state, *args, cfg=cfg, mode=mode)
        getattr(ref, mode)(eps)
        got = _as_lists(state)
        assert got == ref.state(), (cfg_name, mode, got, ref.state())
        # invariant 12 properties
        lo_, hi_ = (np.asarray(x) for x in cur.window(state, cfg))
        h = np.asarray(state.h)
        assert (h >= np.asarray(prev_h)).all(), "h decreased"
        assert (h <= cfg.d_max).all() and (lo_ >= 0).all() and (lo_ <= hi_).all()
        assert (hi_ - lo_ + 1 <= _width_cap(cfg)).all()
        assert (np.asarray(state.b) < cfg.tau_num).all(), "counters not reset by a check"
        assert (np.asarray(state.a) <= np.asarray(state.b)).all()
        moved = h != np.asarray(prev_h)
        if mode == "batch":  # a move happens at a check, which resets the counters
            assert (np.asarray(state.b)[moved] == 0).all()
        if cfg.convention == "rlve":
            np.testing.assert_array_equal(state.l, np.maximum(0, h - (cfg.window - 1)))
        prev_h = h.tolist()


@pytest.mark.parametrize("mode", ["stream", "batch"])
@pytest.mark.parametrize("cfg_name", sorted(CONFIGS))
@settings(max_examples=40, deadline=None, database=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    n_batches=st.integers(1, MAX_BATCHES),
    random_start=st.booleans(),
)
def test_matches_scalar_reference(cfg_name, mode, seed, n_batches, random_start):
    _run_and_compare(cfg_name, mode, seed, n_batches, random_start)


def _drive(cfg: cur.CurriculumConfig, mode: str, correct: bool, n_batches: int):
    """Feed one task frontier-only episodes (d = h at batch start)."""
    state = cur.init(N_TASKS)
    hs = []
    for _ in range(n_batches):
        h = int(state.h[0])
        task = jnp.zeros(BATCH, jnp.int32)
        d = jnp.full(BATCH, h, jnp.int32)
        ok = jnp.full(BATCH, correct)
        state = _update(state, task, d, ok, jnp.ones(BATCH, bool), cfg=cfg, mode=mode)
        hs.append(int(state.h[0]))
    return state, hs


@pytest.mark.parametrize("mode", ["stream", "batch"])
@pytest.mark.parametrize("cfg_name", ["default", "rlve"])
def test_always_correct_climbs_to_d_max(cfg_name, mode):
    cfg = CONFIGS[cfg_name]
    # each batch holds >= tau_num frontier episodes, so h climbs exactly one level per batch
    state, hs = _drive(cfg, mode, True, cfg.d_max + 3)
    assert hs == [min(i + 1, cfg.d_max) for i in range(cfg.d_max + 3)]
    assert int(state.h[0]) == cfg.d_max
    lo, hi = cur.window(state, cfg)
    assert int(hi[0]) == cfg.d_max
    assert int(lo[0]) == cfg.d_max - (_width_cap(cfg) - 1)
    assert int(state.l[0]) == int(lo[0])
    # the other tasks never moved
    assert (np.asarray(state.h[1:]) == 0).all()


@pytest.mark.parametrize("mode", ["stream", "batch"])
@pytest.mark.parametrize("cfg_name", ["default", "rlve"])
def test_never_correct_stays_at_zero(cfg_name, mode):
    cfg = CONFIGS[cfg_name]
    state, hs = _drive(cfg, mode, False, 6)
    assert hs == [0] * 6
    assert (np.asarray(state.h) == 0).all() and (np.asarray(state.l) == 0).all()
    assert (np.asarray(state.a) == 0).all()
    # each batch of 128 frontier episodes ends exactly on a check in every combination
    assert int(state.b[0]) == 0


def test_batch_mode_carries_counters_below_tau_num():
    cfg = CONFIGS["rlve"]  # tau_num 128
    state = cur.init(N_TASKS)
    n = 100
    task = jnp.zeros(BATCH, jnp.int32)
    d = jnp.zeros(BATCH, jnp.int32)
    ok = jnp.ones(BATCH, bool)
    mask = jnp.arange(BATCH) < n
    state = _update(state, task, d, ok, mask, cfg=cfg, mode="batch")
    assert (int(state.a[0]), int(state.b[0]), int(state.h[0])) == (n, n, 0)
    state = _update(state, task, d, ok, mask, cfg=cfg, mode="batch")
    # 200 >= 128: one check for the whole batch, h up by one, counters reset
    assert (int(state.a[0]), int(state.b[0]), int(state.h[0])) == (0, 0, 1)


def test_tie_at_tau_acc_passes():
    """a/b == tau_acc exactly counts as a pass (>=), in both modes."""
    cfg = CONFIGS["default_tie"]  # tau_num 10, tau_acc 0.9
    for mode in ("stream", "batch"):
        ok = jnp.asarray([True] * 9 + [False] + [True] * (BATCH - 10))
        mask = jnp.arange(BATCH) < 10
        z = jnp.zeros(BATCH, jnp.int32)
        state = _update(cur.init(N_TASKS), z, z, ok, mask, cfg=cfg, mode=mode)
        assert int(state.h[0]) == 1, mode


@pytest.mark.parametrize("mode", ["stream", "batch"])
def test_padding_inert(mode):
    cfg = CONFIGS["default_fast"]
    rng = np.random.default_rng(7)
    init = _random_state(cfg, rng)
    state = cur.CurriculumState(*(jnp.asarray(x, jnp.int32) for x in init))
    ref = Ref(cfg, *init)
    eps = []
    for _ in range(60):
        t = int(rng.integers(0, N_TASKS))
        lo, hi = ref.window(t)
        eps.append((t, int(rng.integers(lo, hi + 1)), bool(rng.random() < 0.9)))
    outs = []
    for seed in range(4):  # same real episodes, different garbage in the padding
        args = _pad(eps, np.random.default_rng(seed))
        outs.append(_as_lists(_update(state, *args, cfg=cfg, mode=mode)))
    # and the unpadded, mask-free call on exactly the real episodes
    t, d, ok = (jnp.asarray(x) for x in zip(*eps, strict=True))
    outs.append(_as_lists(cur.update(state, t, d, ok, None, cfg, mode=mode)))
    getattr(ref, mode)(eps)
    assert all(o == ref.state() for o in outs)


def test_update_rejects_unknown_mode():
    s = cur.init(2)
    z = jnp.zeros(3, jnp.int32)
    with pytest.raises(ValueError):
        cur.update(s, z, z, z.astype(bool), None, cur.CurriculumConfig.default(), mode="epoch")


def test_config():
    d, r = cur.CurriculumConfig.default(), cur.CurriculumConfig.rlve()
    assert (d.convention, d.tau_acc, d.tau_num, d.d_delta, d.d_max) == ("default", 0.9, 32, 4, 20)
    assert (r.convention, r.tau_acc, r.tau_num, r.window, r.d_max) == ("rlve", 0.9, 128, 4, 20)
    assert cur.CurriculumConfig(convention="rlve") == r  # tau_num follows the convention
    assert cur.CurriculumConfig() == d
    assert len({d, r, cur.CurriculumConfig.default()}) == 2  # hashable
    with pytest.raises(ValueError):
        cur.CurriculumConfig(convention="paper")
    with pytest.raises(ValueError):
        cur.CurriculumConfig(tau_num=0)


# --- sample ------------------------------------------------------------------------------


@pytest.mark.parametrize("cfg_name", ["default", "rlve", "default_fast", "rlve_fast"])
def test_sample_within_window_and_deterministic(cfg_name):
    cfg = CONFIGS[cfg_name]
    rng = np.random.default_rng(3)
    key = jax.random.key(11)
    for _ in range(5):
        state = cur.CurriculumState(*(jnp.asarray(x, jnp.int32) for x in _random_state(cfg, rng)))
        task = jnp.asarray(rng.integers(0, N_TASKS, size=BATCH), jnp.int32)
        ep = jnp.asarray(rng.permutation(10_000)[:BATCH], jnp.int32)
        d = _sample(key, state, task, ep, cfg=cfg)
        assert d.dtype == jnp.int32 and d.shape == (BATCH,)
        lo, hi = (np.asarray(x)[np.asarray(task)] for x in cur.window(state, cfg))
        assert ((np.asarray(d) >= lo) & (np.asarray(d) <= hi)).all()
        np.testing.assert_array_equal(d, _sample(key, state, task, ep, cfg=cfg))
        # keyed by episode index, not batch position: a permuted batch permutes the draws
        perm = rng.permutation(BATCH)
        np.testing.assert_array_equal(
            np.asarray(_sample(key, state, task[perm], ep[perm], cfg=cfg)), np.asarray(d)[perm]
        )
        # the spec key derivation, spelled out
        i = 5
        k = jax.random.fold_in(jax.random.fold_in(key, 15), ep[i])
        w = jax.random.randint(k, (), lo[i], hi[i] + 1, dtype=jnp.int32)
        assert int(w) == int(d[i])


def test_sample_covers_window_uniformly():
    cfg = cur.CurriculumConfig.default()
    state = cur.CurriculumState(
        l=jnp.full(N_TASKS, 3, jnp.int32), h=jnp.full(N_TASKS, 7, jnp.int32),
        a=jnp.zeros(N_TASKS, jnp.int32), b=jnp.zeros(N_TASKS, jnp.int32),
    )  # fmt: skip
    n = 5000
    d = np.asarray(cur.sample(jax.random.key(0), state, jnp.zeros(n, jnp.int32),
                            jnp.arange(n, dtype=jnp.int32), cfg))  # fmt: skip
    counts = np.bincount(d, minlength=D_MAX + 1)
    assert counts[:3].sum() == 0 and counts[8:].sum() == 0
    assert (np.abs(counts[3:8] / n - 0.2) < 0.03).all()
    # a different key gives different draws
    d2 = np.asarray(cur.sample(jax.random.key(1), state, jnp.zeros(n, jnp.int32),
                             jnp.arange(n, dtype=jnp.int32), cfg))  # fmt: skip
    assert (d != d2).any()
    # raw uint32 keys work too
    d3 = cur.sample(jax.random.PRNGKey(0), state, jnp.zeros(4, jnp.int32),
                  jnp.arange(4, dtype=jnp.int32), cfg)  # fmt: skip
    assert ((np.asarray(d3) >= 3) & (np.asarray(d3) <= 7)).all()


# --- group_stats -------------------------------------------------------------------------


def _group_stats_ref(task, d, ok, gid, mask, n_tasks, d_max):
    groups: dict[int, list[int]] = {}
    for i in range(len(task)):
        if mask[i]:
            groups.setdefault(int(gid[i]), []).append(i)
    out = {k: np.zeros((n_tasks, d_max + 1), np.int32) for k in ("sat", "starv", "mixed")}
    for members in groups.values():
        t, dd = int(task[members[0]]), int(d[members[0]])
        n_ok = sum(bool(ok[i]) for i in members)
        kind = "sat" if n_ok == len(members) else "starv" if n_ok == 0 else "mixed"
        out[kind][t, dd] += 1
    return out


@pytest.mark.parametrize("n_groups", [None, 40])
def test_group_stats_matches_reference(n_groups):
    g_max = BATCH if n_groups is None else n_groups
    fn = jax.jit(
        functools.partial(cur.group_stats, n_tasks=N_TASKS, d_max=D_MAX, n_groups=n_groups)
    )
    rng = np.random.default_rng(5)
    for _ in range(20):
        n_g = int(rng.integers(1, min(g_max, BATCH // 2) + 1))
        ids = rng.choice(g_max, size=n_g, replace=False)
        g_task = rng.integers(0, N_TASKS, size=g_max)
        g_d = rng.integers(0, D_MAX + 1, size=g_max)
        g_p = rng.choice([0.0, 0.5, 1.0], size=g_max)
        gid = rng.choice(ids, size=BATCH)
        task, d = g_task[gid], g_d[gid]
        ok = rng.random(BATCH) < g_p[gid]
        mask = rng.random(BATCH) < 0.8
        # garbage in padded slots must not matter
        task = np.where(mask, task, rng.integers(-3, N_TASKS + 3, size=BATCH))
        d = np.where(mask, d, rng.integers(-3, D_MAX + 3, size=BATCH))
        out = fn(jnp.asarray(task, jnp.int32), jnp.asarray(d, jnp.int32), jnp.asarray(ok),
                 jnp.asarray(gid, jnp.int32), jnp.asarray(mask))  # fmt: skip
        want = _group_stats_ref(task, d, ok, gid, mask, N_TASKS, D_MAX)
        np.testing.assert_array_equal(out.saturated, want["sat"])
        np.testing.assert_array_equal(out.starved, want["starv"])
        np.testing.assert_array_equal(out.mixed, want["mixed"])
        assert out.saturated.dtype == jnp.int32 and out.saturated.shape == (N_TASKS, D_MAX + 1)
        assert int(out.total.sum()) == len({int(x) for x in gid[mask]})


def test_group_stats_simple():
    task = jnp.asarray([0, 0, 1, 1, 1, 2, 2], jnp.int32)
    d = jnp.asarray([3, 3, 0, 0, 0, 5, 5], jnp.int32)
    ok = jnp.asarray([True, True, False, True, False, False, False])
    gid = jnp.asarray([0, 0, 1, 1, 1, 2, 2], jnp.int32)
    mask = jnp.asarray([True, True, True, True, True, True, False])
    s = cur.group_stats(task, d, ok, gid, mask, n_tasks=3, d_max=6)
    assert int(s.saturated[0, 3]) == 1 and int(s.saturated.sum()) == 1
    assert int(s.mixed[1, 0]) == 1 and int(s.mixed.sum()) == 1
    assert int(s.starved[2, 5]) == 1 and int(s.starved.sum()) == 1
