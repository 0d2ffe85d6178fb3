"""The one timing loop of the stage benchmarks (step_profile, generators, search_parts):
compile apart from the steady state, one warm-up call, then the median of ``repeats``
calls, each blocked until ready."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable

import jax


def compiled(fn: Callable, *args) -> tuple[Callable, float]:
    """``jit(fn)`` lowered and compiled for ``args``, and the seconds that took."""
    t0 = time.perf_counter()
    program = jax.jit(fn).lower(*args).compile()
    return program, time.perf_counter() - t0


def median_s(
    program: Callable, inputs: Callable[[int], tuple], repeats: int
) -> tuple[float, object]:
    """(median seconds of ``program(*inputs(r))`` for r in 0..repeats-1, the warm-up
    call's output). ``inputs(-1)`` feeds the warm-up; inputs are built outside the clock."""
    out = jax.block_until_ready(program(*inputs(-1)))
    times = []
    for r in range(repeats):
        args = inputs(r)
        t0 = time.perf_counter()
        jax.block_until_ready(program(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out
