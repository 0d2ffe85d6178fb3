"""Float reductions whose rounding does not depend on the program around them.

XLA may split and vectorise a ``sum`` differently for each operand shape and fusion, so
the same row's dot product can differ by an ulp between two programs (a category-bounded
pool against the whole-catalog scan: ``envs/pd/pool_test.py``). Elementwise adds are
exact IEEE operations that XLA does not reassociate, so a sum written as a fixed tree of
them has one answer everywhere. A product feeding an add may be fused into an FMA in one
program and not in another, so weighted sums round their products first.
"""

from __future__ import annotations

from collections.abc import Sequence

import jax
import jax.numpy as jnp


def ordered_sum(x: jax.Array) -> jax.Array:
    """float [...]: the last axis summed as a fixed pairwise tree (halves added while the
    length is even, then left to right), the same bits for any leading shape."""
    while x.shape[-1] > 1 and x.shape[-1] % 2 == 0:
        half = x.shape[-1] // 2
        x = x[..., :half] + x[..., half:]
    total = x[..., 0]
    for i in range(1, x.shape[-1]):
        total = total + x[..., i]
    return total


def weighted_sum(weights: Sequence[float], parts: Sequence[jax.Array]) -> jax.Array:
    """float32: sum_i w_i·x_i with each product rounded before it is added, adds left to
    right: the eager value in every program.

    XLA:CPU fuses a multiply feeding an add into an FMA wherever both land in one loop,
    which depends on the code around them: two programs that differ only in how the pool
    is gathered gave PD's r_task an ulp apart (``envs/pd/pool_test.py``). An optimisation
    barrier, ``reduce_precision`` or a bitcast round trip do not stop it (they are folded
    away first); a select that only a NaN x takes does, since the add then reads a select,
    not a multiply (``tests/test_numerics.py``; the others were tried on jax 0.10.2)."""
    products = [jnp.where(x == x, w * x, x) for w, x in zip(weights, parts, strict=True)]
    total = products[0]
    for x in products[1:]:
        total = total + x
    return total
