"""Adaptive per-task difficulty curriculum of SPEC §3, vectorised over tasks.

Each task (env) keeps (l, h, a, b): a window [l, h] of levels, and the correct / total
counts of episodes played at the frontier h. Episodes off the frontier are ignored, so
the frontier only moves on evidence gathered at the frontier itself.

Two conventions (default: 5-level window, check per episode; rlve: last 4 levels, check
per batch in the paper) and two update modes ("stream": check after every counted
episode, in array order; "batch": count the whole batch, then check once per task) are
independent, so any combination runs. Everything is pure `jnp` with the config static.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction
from typing import Literal

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax.constants import D_MAX, STREAM

I32 = jnp.int32
Convention = Literal["default", "rlve"]
Mode = Literal["stream", "batch"]

# Largest denominator used to turn tau_acc into an exact fraction; a/b >= tau_acc is then
# decided in integers, so it never flips on float rounding at a/b == tau_acc.
_TAU_DENOM = 4096


@dataclass(frozen=True)
class CurriculumConfig:
    """Static (hashable) curriculum settings; changing them recompiles, d never does.

    `tau_num=None` resolves to the convention's default (32 default, 128 rlve).
    """

    convention: Convention = "default"
    tau_acc: float = 0.9
    tau_num: int | None = None
    d_delta: int = 4  # default convention: h - l <= d_delta
    window: int = 4  # rlve convention: W, the window is [max(0, h-(W-1)), h]
    d_max: int = D_MAX

    def __post_init__(self) -> None:
        if self.convention not in ("default", "rlve"):
            raise ValueError(f"convention must be 'default' or 'rlve', got {self.convention!r}")
        if self.tau_num is None:
            object.__setattr__(self, "tau_num", 128 if self.convention == "rlve" else 32)
        if not 0.0 <= self.tau_acc <= 1.0:
            raise ValueError(f"tau_acc must lie in [0, 1], got {self.tau_acc}")
        if self.tau_num < 1:
            raise ValueError(f"tau_num must be >= 1, got {self.tau_num}")
        if self.d_delta < 0 or self.window < 1 or self.d_max < 0:
            raise ValueError("need d_delta >= 0, window >= 1, d_max >= 0")

    @classmethod
    def default(cls) -> CurriculumConfig:
        return cls(convention="default", tau_acc=0.9, tau_num=32, d_delta=4)

    @classmethod
    def rlve(cls) -> CurriculumConfig:
        return cls(convention="rlve", tau_acc=0.9, tau_num=128, window=4)

    @property
    def tau_frac(self) -> tuple[int, int]:
        """tau_acc as (numerator, denominator) for the integer comparison a·den >= num·b."""
        f = Fraction(self.tau_acc).limit_denominator(_TAU_DENOM)
        return f.numerator, f.denominator

    # The threshold fields that ``count_stream`` / ``count_batch`` read; a traced
    # ``train.schedules.Schedule`` carries the same names as arrays (and ``rlve``).
    @property
    def tau_acc_num(self) -> int:
        return self.tau_frac[0]

    @property
    def tau_acc_den(self) -> int:
        return self.tau_frac[1]


@struct.dataclass
class CurriculumState:
    """Per-task window and frontier counters, each int32 [n_tasks]."""

    l: jax.Array  # noqa: E741 (SPEC §3's name)
    h: jax.Array
    a: jax.Array  # correct frontier episodes since the last check
    b: jax.Array  # frontier episodes since the last check

    @property
    def n_tasks(self) -> int:
        return int(self.h.shape[0])


@struct.dataclass
class GroupStats:
    """Group outcome counts per (task, d), int32 [n_tasks, d_max+1].

    Saturated (all correct) and starved (none correct) groups carry no GRPO signal;
    the mixed share is what the curriculum is trying to keep high.
    """

    saturated: jax.Array
    starved: jax.Array
    mixed: jax.Array

    @property
    def total(self) -> jax.Array:
        return self.saturated + self.starved + self.mixed


def init(n_tasks: int) -> CurriculumState:
    """Every task starts at l = h = a = b = 0."""
    z = jnp.zeros((n_tasks,), dtype=I32)
    return CurriculumState(l=z, h=z, a=z, b=z)


def _is_rlve(t) -> jax.Array | bool:
    """The convention of a static config, or a traced ``train.schedules.Schedule``'s flag."""
    return t.convention == "rlve" if isinstance(t, CurriculumConfig) else t.rlve


def window(state: CurriculumState, cfg) -> tuple[jax.Array, jax.Array]:
    """Inclusive sampling window (lo, hi) per task (``cfg`` static or traced, as ``_check``)."""
    rlve_lo = jnp.maximum(0, state.h - (cfg.window - 1))
    return jnp.where(_is_rlve(cfg), rlve_lo, state.l), state.h


def draw(key: jax.Array, index: jax.Array, lo: jax.Array, hi: jax.Array) -> jax.Array:
    """d ~ U{lo..hi} per entry, keyed by ``index`` (an episode or group counter, SPEC §12),
    so a draw does not depend on how episodes are batched."""
    base = jax.random.fold_in(key, STREAM["CURRICULUM"])

    def one(e: jax.Array, a: jax.Array, b: jax.Array) -> jax.Array:
        return jax.random.randint(jax.random.fold_in(base, e), (), a, b + 1, dtype=I32)

    index = jnp.asarray(index, dtype=I32)
    return jax.vmap(one)(index.ravel(), lo.ravel(), hi.ravel()).reshape(index.shape)


def sample(
    key: jax.Array,
    state: CurriculumState,
    task: jax.Array,
    episode_index: jax.Array,
    cfg: CurriculumConfig,
) -> jax.Array:
    """d ~ U{lo..hi} of each episode's task window, keyed by the episode counter (SPEC §12).

    Keying by episode index (not by position in the batch) makes a draw independent of
    how episodes are batched.
    """
    task = jnp.asarray(task, dtype=I32)
    episode_index = jnp.asarray(episode_index, dtype=I32)
    lo, hi = window(state, cfg)
    return draw(key, episode_index, lo[task], hi[task]).reshape(task.shape)


def prepare(
    state: CurriculumState,
    task: jax.Array,
    d: jax.Array,
    is_correct: jax.Array,
    mask: jax.Array | None,
) -> tuple[jax.Array, jax.Array, jax.Array, jax.Array]:
    """Flatten the batch; padding and out-of-range task ids become invalid entries."""
    task = jnp.asarray(task, dtype=I32).ravel()
    d = jnp.asarray(d, dtype=I32).ravel()
    correct = jnp.asarray(is_correct, dtype=bool).ravel()
    valid = jnp.ones(task.shape, bool) if mask is None else jnp.asarray(mask, bool).ravel()
    valid = valid & (task >= 0) & (task < state.n_tasks)
    return jnp.clip(task, 0, state.n_tasks - 1), d, correct, valid


def _check(lo: jax.Array, h: jax.Array, a: jax.Array, b: jax.Array, t):
    """Rules 3-4 of SPEC §3 where b >= tau_num; elementwise, so it serves both modes.
    ``t`` holds the thresholds: a static ``CurriculumConfig`` or traced arrays."""
    check = b >= t.tau_num
    passed = check & (a * t.tau_acc_den >= t.tau_acc_num * b)
    h = jnp.where(passed, jnp.minimum(h + 1, t.d_max), h)
    rlve_lo = jnp.maximum(0, h - (t.window - 1))
    lo = jnp.where(_is_rlve(t), rlve_lo, jnp.where(h - lo > t.d_delta, h - t.d_delta, lo))
    zero = jnp.zeros_like(a)
    return lo, h, jnp.where(check, zero, a), jnp.where(check, zero, b)


def count_stream(state: CurriculumState, task, d, correct, valid, t) -> CurriculumState:
    """The check after every counted episode, in array order (inputs from ``prepare``)."""

    def step(st: CurriculumState, x: tuple) -> tuple[CurriculumState, None]:
        i, dd, c, v = x
        hit = v & (dd == st.h[i])
        a = st.a[i] + (hit & c).astype(I32)
        b = st.b[i] + hit.astype(I32)
        old = (st.l[i], st.h[i], st.a[i], st.b[i])
        # A miss leaves the row as it was (b did not grow, so no check may fire).
        row = [jnp.where(hit, x, y) for x, y in zip(_check(*old[:2], a, b, t), old, strict=True)]
        arrs = (st.l, st.h, st.a, st.b)
        return CurriculumState(*(arr.at[i].set(x) for arr, x in zip(arrs, row, strict=True))), None

    out, _ = jax.lax.scan(step, state, (task, d, correct, valid))
    return out


def count_batch(state: CurriculumState, task, d, correct, valid, t) -> CurriculumState:
    """Count every episode at the batch's starting frontier, then one check per task."""
    hit = valid & (d == state.h[task])
    n = state.n_tasks
    a = state.a + jnp.zeros((n,), I32).at[task].add((hit & correct).astype(I32))
    b = state.b + jnp.zeros((n,), I32).at[task].add(hit.astype(I32))
    lo, h, a, b = _check(state.l, state.h, a, b, t)
    return CurriculumState(l=lo, h=h, a=a, b=b)


def update_stream(
    state: CurriculumState,
    task: jax.Array,
    d: jax.Array,
    is_correct: jax.Array,
    mask: jax.Array | None,
    cfg: CurriculumConfig,
) -> CurriculumState:
    """SPEC §3 with the check after every counted episode, episodes in array order.

    Sequential on purpose: an episode that lands right after h moved is judged against
    the new h, exactly as a streaming trainer would.
    """
    task, d, correct, valid = prepare(state, task, d, is_correct, mask)
    return count_stream(state, task, d, correct, valid, cfg)


def update_batch(
    state: CurriculumState,
    task: jax.Array,
    d: jax.Array,
    is_correct: jax.Array,
    mask: jax.Array | None,
    cfg: CurriculumConfig,
) -> CurriculumState:
    """SPEC §3 as in the RLVE paper: count every frontier episode, then one check per task.

    The frontier is h at the start of the batch (the h the batch was sampled under). A
    task with fewer than tau_num counted episodes carries its counters to the next batch.
    """
    task, d, correct, valid = prepare(state, task, d, is_correct, mask)
    return count_batch(state, task, d, correct, valid, cfg)


def update(
    state: CurriculumState,
    task: jax.Array,
    d: jax.Array,
    is_correct: jax.Array,
    mask: jax.Array | None,
    cfg: CurriculumConfig,
    mode: Mode = "stream",
) -> CurriculumState:
    """One call per batch of terminal episodes (hard fails with is_correct = False)."""
    if mode == "stream":
        return update_stream(state, task, d, is_correct, mask, cfg)
    if mode == "batch":
        return update_batch(state, task, d, is_correct, mask, cfg)
    raise ValueError(f"mode must be 'stream' or 'batch', got {mode!r}")


def group_stats(
    task: jax.Array,
    d: jax.Array,
    is_correct: jax.Array,
    group_id: jax.Array,
    mask: jax.Array | None,
    n_tasks: int,
    d_max: int = D_MAX,
    n_groups: int | None = None,
) -> GroupStats:
    """Count saturated / starved / mixed groups per (task, d).

    Group ids must lie in [0, n_groups) (static; defaults to the batch size, enough for
    any compact numbering). Members of a group share (task, d) by construction (SPEC §3);
    if they disagree, the largest valid value is used. Masked members are left out, and a
    group with no valid member counts nowhere.
    """
    task = jnp.asarray(task, dtype=I32).ravel()
    d = jnp.asarray(d, dtype=I32).ravel()
    correct = jnp.asarray(is_correct, dtype=bool).ravel()
    gid = jnp.asarray(group_id, dtype=I32).ravel()
    g = int(task.shape[0]) if n_groups is None else int(n_groups)
    valid = jnp.ones(task.shape, bool) if mask is None else jnp.asarray(mask, bool).ravel()
    valid = valid & (gid >= 0) & (gid < g)
    seg = jnp.where(valid, gid, g)  # segment g is the dump for invalid entries

    size = jax.ops.segment_sum(valid.astype(I32), seg, g + 1)[:g]
    n_ok = jax.ops.segment_sum((valid & correct).astype(I32), seg, g + 1)[:g]
    g_task = jax.ops.segment_max(jnp.where(valid, task, -1), seg, g + 1)[:g]
    g_d = jax.ops.segment_max(jnp.where(valid, d, -1), seg, g + 1)[:g]

    ok = (size > 0) & (g_task >= 0) & (g_task < n_tasks) & (g_d >= 0) & (g_d <= d_max)
    sat = ok & (n_ok == size)
    starv = ok & (n_ok == 0)
    mixed = ok & ~sat & ~starv
    cells = n_tasks * (d_max + 1)
    cell = jnp.where(ok, g_task * (d_max + 1) + g_d, cells)

    def count(flag: jax.Array) -> jax.Array:
        c = jnp.zeros((cells + 1,), I32).at[cell].add(flag.astype(I32))
        return c[:cells].reshape(n_tasks, d_max + 1)

    return GroupStats(saturated=count(sat), starved=count(starv), mixed=count(mixed))


__all__ = [
    "CurriculumConfig",
    "CurriculumState",
    "GroupStats",
    "count_batch",
    "count_stream",
    "draw",
    "group_stats",
    "init",
    "prepare",
    "sample",
    "update",
    "update_batch",
    "update_stream",
    "window",
]
