"""Difficulty schedules as traced data, so many runs vmap under one compile.

``ecomjax.curriculum`` takes its thresholds as a static config (a change recompiles). A
study that compares schedules and sweeps tau_acc x tau_num side by side wants them as
arrays instead: here every knob of SPEC §3 is a field of ``Schedule`` (int32 scalars),
and ``update`` runs ``ecomjax.curriculum``'s own counting and checks on them (tested
equal to ``ecomjax.curriculum.update`` on the same random streams, both conventions).
Three kinds share one code path:

* adaptive: d ~ U{lo..hi} of the curriculum window (default or rlve convention);
* static: d = d_lo always;
* uniform: d ~ U{d_lo..d_hi}.

The curriculum state advances under every kind (it only counts episodes played at its
frontier h), so a static or uniform run still reports what the adaptive rule would have
concluded from its episodes.
"""

from __future__ import annotations

import dataclasses
from fractions import Fraction

import jax
import jax.numpy as jnp
from flax import struct

from ecomjax import constants as C
from ecomjax.curriculum import (
    CurriculumState,
    count_batch,
    count_stream,
    draw,
    prepare,
    window,
)

I32 = jnp.int32
ADAPTIVE, STATIC, UNIFORM = 0, 1, 2
KINDS = {"adaptive": ADAPTIVE, "static": STATIC, "uniform": UNIFORM}


@struct.dataclass
class Schedule:
    kind: jax.Array  # int32: ADAPTIVE / STATIC / UNIFORM
    d_lo: jax.Array  # int32: static d, or the uniform range's low end
    d_hi: jax.Array  # int32: the uniform range's high end
    rlve: jax.Array  # bool: RLVE-paper convention (window W, per-batch check)
    tau_num: jax.Array  # int32
    tau_acc_num: jax.Array  # int32: tau_acc as an exact fraction num / den
    tau_acc_den: jax.Array  # int32
    d_delta: jax.Array  # int32 (default convention)
    window: jax.Array  # int32 (rlve convention)
    d_max: jax.Array  # int32


def make_schedule(
    kind: str = "adaptive",
    *,
    convention: str = "default",
    d_lo: int = 0,
    d_hi: int = 0,
    tau_acc: float = 0.9,
    tau_num: int | None = None,
    d_delta: int = 4,
    window: int = 4,
    d_max: int = C.D_MAX,
) -> Schedule:
    """A schedule with SPEC §3's defaults (tau_num 32, or 128 for rlve)."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {sorted(KINDS)}, got {kind!r}")
    if convention not in ("default", "rlve"):
        raise ValueError(f"convention must be 'default' or 'rlve', got {convention!r}")
    if not 0 <= d_lo <= d_max or (kind == "uniform" and not d_lo <= d_hi <= d_max):
        raise ValueError(f"need 0 <= d_lo <= d_hi <= d_max, got {d_lo}, {d_hi}, {d_max}")
    tau_num = tau_num if tau_num is not None else (128 if convention == "rlve" else 32)
    frac = Fraction(tau_acc).limit_denominator(4096)
    return Schedule(
        kind=I32(KINDS[kind]),
        d_lo=I32(d_lo),
        d_hi=I32(d_hi if kind == "uniform" else d_lo),
        rlve=jnp.bool_(convention == "rlve"),
        tau_num=I32(tau_num),
        tau_acc_num=I32(frac.numerator),
        tau_acc_den=I32(frac.denominator),
        d_delta=I32(d_delta),
        window=I32(window),
        d_max=I32(d_max),
    )


def as_dict(s: Schedule) -> dict:
    """Field name -> value (for logs)."""
    return {f.name: getattr(s, f.name) for f in dataclasses.fields(s)}


def stack(schedules: list[Schedule]) -> Schedule:
    """Stack schedules along a new leading (run) axis for vmap."""
    return jax.tree_util.tree_map(lambda *xs: jnp.stack(xs), *schedules)


def sample(
    key: jax.Array, state: CurriculumState, s: Schedule, task: jax.Array, index: jax.Array
) -> jax.Array:
    """d per entry, keyed by ``index`` (episode or group counter) as ecomjax.curriculum."""
    lo, hi = window(state, s)
    lo = jnp.where(s.kind == ADAPTIVE, lo[task], s.d_lo)
    hi = jnp.where(s.kind == ADAPTIVE, hi[task], s.d_hi)
    return draw(key, index, lo, hi).reshape(task.shape)


def update(
    state: CurriculumState,
    s: Schedule,
    task: jax.Array,
    d: jax.Array,
    is_correct: jax.Array,
    mask: jax.Array | None = None,
) -> CurriculumState:
    """SPEC §3 update: per-episode stream check (default convention) or one check per
    batch (rlve), as ``ecomjax.curriculum.update`` with mode "stream" / "batch"."""
    task, d, correct, valid = prepare(state, task, d, is_correct, mask)
    streamed = count_stream(state, task, d, correct, valid, s)
    batched = count_batch(state, task, d, correct, valid, s)
    return jax.tree_util.tree_map(lambda x, y: jnp.where(s.rlve, y, x), streamed, batched)


__all__ = [
    "ADAPTIVE",
    "STATIC",
    "UNIFORM",
    "Schedule",
    "as_dict",
    "make_schedule",
    "sample",
    "stack",
    "update",
    "window",
]
