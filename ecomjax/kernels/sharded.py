"""Row-sharded exact top-k: each device scans its own rows, then one exact merge.

Why: a catalog that outgrows one device's memory (or a retrieval that should use every
device) is split by rows over a mesh axis. Each device runs ``masked_topk`` over its
shard with global row indices (``index_offset``), so filters that read other arrays by
index and the returned ids are the same as on one device. Exactness of the merge: every
row of the global top-k is in its own shard's top-k (a shard's top-k is the exact top-k
of its rows under the same total order), so sorting the gathered ``S x k`` candidates by
``(score desc, index asc)`` and keeping k reproduces the single-device result, tie order
included. Only ``S·Q·k`` scores and ids cross devices; ``n_valid`` is a ``psum``.

``shard_map`` is reached through ``shard_map_compat`` so that the same code runs on
jax 0.10 and 0.11 (``jax.shard_map``) and on older releases (``jax.experimental``).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from ecomjax.kernels.topk import (
    ScoreFn,
    TopK,
    hide_empty_slots,
    masked_topk,
    masked_topk_reference,
)

__all__ = [
    "check_sharded_topk",
    "local_rows",
    "merge_topk",
    "pad_rows",
    "shard_map_compat",
    "shard_rows",
    "sharded_masked_topk",
]

PyTree = Any
_NEG_INF = float("-inf")


def shard_map_compat(f: Callable, mesh: Mesh, in_specs: Any, out_specs: Any) -> Callable:
    """``shard_map`` without replication checks, on any jax that has one.

    Checks are off because per-shard loops (``lax.scan``/``while_loop``) carry values that
    become device-varying inside the body; outputs declared replicated here are made so
    explicitly (``all_gather``/``psum``/``pmax``)."""
    if hasattr(jax, "shard_map"):
        return jax.shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_vma=False)
    from jax.experimental.shard_map import shard_map  # jax < 0.6

    return shard_map(f, mesh=mesh, in_specs=in_specs, out_specs=out_specs, check_rep=False)


def merge_topk(scores: jax.Array, indices: jax.Array, k: int) -> tuple[jax.Array, jax.Array]:
    """Exact k best of blocks ``[..., S, Q, k']`` -> ``[Q, k]`` by (score desc, index asc).

    Blocks must be exact per-block top-k results with disjoint row indices; padding slots
    are (-inf, -1) and stay padding."""
    s = jnp.moveaxis(scores, 0, -2).reshape(*scores.shape[1:-1], -1)
    i = jnp.moveaxis(indices, 0, -2).reshape(*indices.shape[1:-1], -1)
    neg, i = lax.sort((-s, i), dimension=-1, num_keys=2)
    if neg.shape[-1] < k:
        pad = [(0, 0)] * (neg.ndim - 1) + [(0, k - neg.shape[-1])]
        neg = jnp.pad(neg, pad, constant_values=-_NEG_INF)
        i = jnp.pad(i, pad, constant_values=-1)
    return -neg[..., :k], i[..., :k]


def pad_rows(rows: PyTree, multiple: int) -> tuple[PyTree, int]:
    """Zero-pad every leaf's leading axis to a multiple of ``multiple``; returns (rows, n).

    The padded rows are masked by index in ``sharded_masked_topk`` (index >= n), so their
    contents never matter."""
    leaves = jax.tree_util.tree_leaves(rows)
    n = int(leaves[0].shape[0])
    n_pad = math.ceil(max(n, 1) / multiple) * multiple
    if n_pad == n:
        return rows, n

    def pad(x: jax.Array) -> jax.Array:
        return jnp.pad(x, [(0, n_pad - n)] + [(0, 0)] * (x.ndim - 1))

    return jax.tree_util.tree_map(pad, rows), n


def shard_rows(rows: PyTree, mesh: Mesh, axis: str = "rows") -> tuple[PyTree, int]:
    """Pad ``rows`` to the axis size and place them row-sharded on ``mesh``; returns (rows, n).

    Each process reads only the rows of its own devices (``make_array_from_callback``), so
    with a mesh over several processes a leaf may be a ``np.memmap`` larger than one host's
    memory, and no process ever holds the whole catalog on its devices."""
    s = mesh.shape[axis]
    n = int(jax.tree_util.tree_leaves(rows)[0].shape[0])
    n_all = -(-n // s) * s if n else s
    sharding = NamedSharding(mesh, PartitionSpec(axis))

    def place(x):
        def rows_at(idx: tuple) -> np.ndarray:
            lo, hi, _ = idx[0].indices(n_all)
            block = np.asarray(x[lo : min(hi, n)])
            pad = [(0, hi - lo - block.shape[0])] + [(0, 0)] * (block.ndim - 1)
            return np.pad(block, pad)[(slice(None), *idx[1:])]

        return jax.make_array_from_callback((n_all, *x.shape[1:]), sharding, rows_at)

    return jax.tree_util.tree_map(place, rows), n


def local_rows(rows: PyTree, n: int, mesh: Mesh, axis: str) -> int:
    """Rows each device holds of ``rows`` split along ``axis``, which must be padded to a
    multiple of the axis size (``pad_rows`` / ``shard_rows``) and hold the catalog's n."""
    s = mesh.shape[axis]
    n_all = int(jax.tree_util.tree_leaves(rows)[0].shape[0])
    if n_all % s or n > n_all:
        raise ValueError(f"rows ({n_all}) must be padded to a multiple of {s} and hold n={n}")
    return n_all // s


def sharded_masked_topk(
    score_fn: ScoreFn,
    rows: PyTree,
    queries: PyTree,
    n: int,
    k: int,
    mesh: Mesh,
    *,
    axis: str = "rows",
    chunk: int = 8192,
    group: int | None = None,
) -> TopK:
    """``masked_topk`` over rows split along mesh axis ``axis``; queries replicated.

    ``rows`` leaves have a leading axis divisible by the axis size (``pad_rows`` /
    ``shard_rows``); rows at index >= ``n`` are padding and never match. ``score_fn`` sees
    global row indices. The result is replicated and equals ``masked_topk`` on one device
    (same ids, same tie order, same ``n_valid``) whenever ``score_fn`` gives each row the
    same score on both: always for exact scores (integer keys, small-integer vectors);
    for float matmuls, when every shard holds at least ``chunk`` rows, so both sides run
    dots of the same shape (XLA:CPU's float32 dot rounds differently for another shape:
    measured, a [64, 2502] chunk vs a [64, 4096] one swapped near-tied ids at k = 200).
    Works under ``jax.jit``; ``n``, ``k``, ``chunk`` are static.
    """
    if k < 0:
        raise ValueError(f"need k >= 0, got {k}")
    n_local = local_rows(rows, n, mesh, axis)
    kk = max(k, 1)

    def masked(q: PyTree, r: PyTree, idx: jax.Array) -> jax.Array:
        return jnp.where(idx[None, :] < n, score_fn(q, r, idx), _NEG_INF)

    def local(r: PyTree, q: PyTree) -> tuple[jax.Array, jax.Array, jax.Array]:
        off = lax.axis_index(axis) * n_local
        res = masked_topk(masked, r, q, n_local, kk, chunk, group=group, index_offset=off)
        gs = lax.all_gather(res.scores, axis)  # [S, Q, k]
        gi = lax.all_gather(res.indices, axis)
        top_s, top_i = merge_topk(gs, gi, kk)
        return top_s, top_i, lax.psum(res.n_valid, axis)

    fn = shard_map_compat(
        local,
        mesh,
        in_specs=(PartitionSpec(axis), PartitionSpec()),
        out_specs=(PartitionSpec(), PartitionSpec(), PartitionSpec()),
    )
    top_s, top_i, count = fn(rows, queries)
    out = hide_empty_slots(top_s, top_i, count)
    if k == 0:
        return out._replace(scores=out.scores[:, :0], indices=out.indices[:, :0])
    return out


def check_sharded_topk(n_devices: int | None = None, seed: int = 0) -> dict:
    """Sharded top-k == single-device ``masked_topk`` == reference, on this process's devices.

    Exact scores (small-integer embeddings, integer price keys, heavy ties, filters that
    leave nothing, k above the candidate count, N not divisible by the device count), so
    equality must be bit-for-bit. Raises AssertionError on any difference; returns a small
    report. Run it under ``XLA_FLAGS=--xla_force_host_platform_device_count=8`` to simulate
    a mesh on CPU (``ecomjax.sharding.run_on_host_devices`` does that in a subprocess)."""
    devices = jax.devices()[: n_devices or jax.device_count()]
    mesh = Mesh(np.asarray(devices), ("rows",))
    rng = np.random.default_rng(seed)
    n, q, d = 1003, 7, 8
    emb = rng.integers(-2, 3, size=(n, d)).astype(np.float32)
    rows = {
        "emb": jnp.asarray(emb),
        "price": jnp.asarray(rng.integers(0, 40, n), jnp.int32),
        "cat": jnp.asarray(rng.integers(0, 5, n), jnp.int32),
    }
    queries = {
        "emb": jnp.asarray(rng.integers(-2, 3, size=(q, d)), jnp.float32),
        "cat": jnp.asarray([-1, 0, 1, 2, 3, 4, 9], jnp.int32),  # 9: no row matches
        "max": jnp.asarray([39, 10, 39, 0, 20, 39, 39], jnp.int32),
        "mode": jnp.asarray([0, 1, 0, 1, 0, 0, 1], jnp.int32),  # 0 relevance, 1 price asc
    }

    def score(qs: dict, r: dict, idx: jax.Array) -> jax.Array:
        cos = qs["emb"] @ r["emb"].T
        price = -r["price"][None, :].astype(jnp.float32)
        s = jnp.where(qs["mode"][:, None] == 1, price, cos)
        ok = (qs["cat"][:, None] < 0) | (r["cat"][None, :] == qs["cat"][:, None])
        ok &= r["price"][None, :] <= qs["max"][:, None]
        ok &= idx[None, :] % 97 != 5  # a filter on the global index
        return jnp.where(ok, s, _NEG_INF)

    placed, _ = shard_rows(rows, mesh)
    cases = [(10, 64), (1, 16), (50, 128), (300, 64), (0, 32)]  # k > |T| for most queries
    for k, chunk in cases:
        got = jax.jit(
            lambda r, qs, k=k, chunk=chunk: sharded_masked_topk(
                score, r, qs, n, k, mesh, chunk=chunk
            )
        )(placed, queries)
        single = jax.jit(lambda r, qs, k=k, chunk=chunk: masked_topk(score, r, qs, n, k, chunk))(
            rows, queries
        )
        ref = masked_topk_reference(score, rows, queries, n, k)
        for name, want in (("single", single), ("reference", ref)):
            for field in ("scores", "indices", "n_valid"):
                a, b = np.asarray(getattr(got, field)), np.asarray(getattr(want, field))
                if not np.array_equal(a, b):
                    raise AssertionError(f"k={k} chunk={chunk}: {field} differs from {name}")
    # Float scores (unit Gaussian vectors): identical to one device at the same chunk
    # shape, which holds while every shard has at least ``chunk`` rows.
    fe = rng.standard_normal((n, 32)).astype(np.float32)
    fe /= np.linalg.norm(fe, axis=1, keepdims=True)
    fq = jnp.asarray(rng.standard_normal((q, 32)), jnp.float32)
    fchunk = max(1, min(64, n // len(devices)))

    def fscore(qs: jax.Array, e: jax.Array, idx: jax.Array) -> jax.Array:
        return qs @ e.T

    fplaced, _ = shard_rows(jnp.asarray(fe), mesh)
    got = jax.jit(lambda r, qs: sharded_masked_topk(fscore, r, qs, n, 40, mesh, chunk=fchunk))(
        fplaced, fq
    )
    want = jax.jit(lambda r, qs: masked_topk(fscore, r, qs, n, 40, fchunk))(jnp.asarray(fe), fq)
    for field in ("scores", "indices", "n_valid"):
        if not np.array_equal(np.asarray(getattr(got, field)), np.asarray(getattr(want, field))):
            raise AssertionError(f"float embeddings: {field} differs from single")
    return {"devices": len(devices), "n": n, "cases": len(cases) + 1, "identical": True}
