"""The server's curriculum: the difficulty of a reset that names none, per family (SPEC §3).

Why here: a trainer that drives ``ecomjax serve`` through a plain OpenEnv client sends bare
resets, so the server chooses both the family (``served[seed % len]``, a GRPO group of one
seed shares it) and d. d comes from the same per-task curriculum the array runner uses,
fed with every finished episode whose d it drew, in the order they finish (the "stream"
mode). The draw is keyed by the reset's seed, so a replay of the same finishes in the same
order draws the same d. Episodes whose d the client fixed are not counted.
"""

from __future__ import annotations

import threading

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import curriculum as cur
from ecomjax.registry import FAMILIES

_DRAW_KEY = 0x5EED  # the stream of d draws; the seed picks the position in it


@jax.jit
def _draw(state: cur.CurriculumState, task: jax.Array, seed: jax.Array) -> jax.Array:
    return cur.sample(jax.random.key(_DRAW_KEY), state, task, seed, cur.CurriculumConfig())


@jax.jit
def _record(state: cur.CurriculumState, task, d, correct) -> cur.CurriculumState:
    return cur.update(state, task[None], d[None], correct[None], None, cur.CurriculumConfig())


class ServedCurriculum:
    """Thread-safe curriculum state over the families registered when it is made (indexed
    by env id)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._names = tuple(FAMILIES)
        self._state = cur.init(len(self._names))
        self.counted = 0

    def draw(self, family: str, seed: int) -> int:
        task = jnp.int32(self._names.index(family))
        with self._lock:
            state = self._state
        # The seed is a uint32; the episode index it stands for is taken modulo 2**31.
        return int(_draw(state, task, jnp.int32(seed & 0x7FFFFFFF)))

    def record(self, family: str, d: int, correct: bool) -> None:
        task = jnp.int32(self._names.index(family))
        with self._lock:
            self._state = _record(self._state, task, jnp.int32(d), jnp.bool_(correct))
            self.counted += 1

    def snapshot(self) -> dict[str, dict[str, int]]:
        """Per family: the sampling window [lo, hi] and the frontier counters (a of b)."""
        with self._lock:
            s = jax.tree_util.tree_map(np.asarray, self._state)
        lo, hi = cur.window(s, cur.CurriculumConfig())
        return {
            name: {"lo": int(lo[i]), "hi": int(hi[i]), "a": int(s.a[i]), "b": int(s.b[i])}
            for i, name in enumerate(self._names)
        }
