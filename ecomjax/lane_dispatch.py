"""Run a per-lane function only on the lanes that need it, in fixed-size chunks.

Under ``vmap`` a per-lane choice between several expensive functions computes all of them
for every lane. At the batch level we can do better: gather the lanes that need a function
(needed lanes first, in lane order), run it vmapped over ``chunk`` lanes at a time, and
scatter the results back, for as many chunks as there are needed lanes. The shapes stay
static (one chunk); only the trip count of the loop depends on the data. Each lane's
result is the function of that lane's inputs alone, so the outcome is the per-lane
result, bit for bit, whatever the chunk size; lanes that do not need it keep ``out``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp

from ecomjax.compact import first_true


def run_where(
    need: jax.Array,
    fn: Callable[..., Any],
    args: Any,
    out: Any,
    chunk: int,
    masked: bool = False,
) -> Any:
    """``out`` with ``fn(*args[i])`` at every lane i where ``need[i]``.

    ``need`` is bool [B]; ``args`` a tuple of pytrees and ``out`` a pytree, all with a
    leading axis of B; ``fn`` maps one lane's args to one lane's ``out``. With ``masked``,
    ``out`` is a tuple and ``fn`` returns ``(values, keep)``, ``keep`` one bool per element
    of ``out``: element j of a lane is written only where its ``keep[j]`` holds (a lane may
    need the function for one output but not for another)."""
    b = need.shape[0]
    chunk = max(1, min(int(chunk), b))
    # Needed lanes first, in lane order; -1 beyond them. A prefix count, not a stable sort
    # (XLA's CPU sort is a comparator loop: ecomjax/compact.py).
    order = first_true(need, b)
    count = need.sum(dtype=jnp.int32)
    n_chunks = (count + chunk - 1) // chunk
    batched = jax.vmap(fn)

    def body(i, acc):
        # The last chunk may start before i * chunk (clamped to the end of ``order``); its
        # positions below i * chunk were served by the previous chunk and are left alone.
        start = jnp.minimum(i * chunk, b - chunk)
        pos = start + jnp.arange(chunk, dtype=jnp.int32)
        lanes = jax.lax.dynamic_slice(order, (start,), (chunk,))
        mine = (pos >= i * chunk) & (pos < count)
        lanes = jnp.where(mine, lanes, 0)  # padding rows compute on lane 0, then are dropped
        res = batched(*jax.tree_util.tree_map(lambda a: a[lanes], args))

        # Positions that are not this chunk's are sent out of bounds and dropped: no read of
        # ``acc`` here, so the scatter can update the loop's buffers in place.
        def put(acc, res, keep):
            dest = jnp.where(keep, lanes, b)
            return jax.tree_util.tree_map(lambda a, r: a.at[dest].set(r, mode="drop"), acc, res)

        if not masked:
            return put(acc, res, mine)
        res, keep = res
        return tuple(put(a, r, mine & k) for a, r, k in zip(acc, res, keep, strict=True))

    return jax.lax.fori_loop(0, n_chunks, body, out)
