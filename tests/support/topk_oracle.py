"""The numpy definition of the top-k tie rule and the exact-equality check, shared by the
top-k kernel tests (``masked_topk`` and the Pallas kernel)."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ecomjax.kernels.topk import TopK


def np_topk(scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Definition of the tie rule: stable sort by score descending, lower index first."""
    s = np.asarray(scores, np.float32).copy()
    s[np.isnan(s)] = -np.inf
    s[np.abs(s) < np.finfo(np.float32).tiny] = 0.0  # -0.0 and subnormals count as +0.0
    q, n = s.shape
    out_s = np.full((q, k), -np.inf, np.float32)
    out_i = np.full((q, k), -1, np.int32)
    for r in range(q):
        order = np.lexsort((np.arange(n), -s[r]))
        order = order[s[r, order] > -np.inf][:k]
        out_s[r, : len(order)] = s[r, order]
        out_i[r, : len(order)] = order
    return out_s, out_i, (s > -np.inf).sum(axis=1).astype(np.int32)


def assert_topk_equal(got: TopK, want) -> None:
    """Exact equality of ids, scores and n_valid (float32 bit-equal up to -0.0 == 0.0) and
    the result dtypes; ``want`` is a ``TopK`` or a (scores, ids, n_valid) tuple."""
    want = tuple(np.asarray(x) for x in want)
    np.testing.assert_array_equal(np.asarray(got.indices), want[1])
    np.testing.assert_array_equal(np.asarray(got.scores), want[0])
    np.testing.assert_array_equal(np.asarray(got.n_valid), want[2])
    assert got.indices.dtype == jnp.int32 and got.scores.dtype == jnp.float32
    assert got.n_valid.dtype == jnp.int32
