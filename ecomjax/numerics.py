"""Float reductions whose rounding does not depend on the program around them.

XLA may split and vectorise a ``sum`` differently for each operand shape and fusion, so
the same row's dot product can differ by an ulp between two programs (a category-bounded
pool against the whole-catalog scan: ``envs/pd/pool_test.py``). Elementwise adds are
exact IEEE operations that XLA does not reassociate, so a sum written as a fixed tree of
them has one answer everywhere.
"""

from __future__ import annotations

import jax


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
