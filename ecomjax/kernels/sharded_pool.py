"""Row-sharded exact evaluation pools (SPEC §7, §8.1-2): each device folds its own rows,
then one exact merge.

Why: PD's and SUB's verification scores a ranking against the whole catalog (|F_end|, the
key's extremes, the top-k keys for IDCG; ``kernels.pool``). A catalog split by rows over a
mesh (devices of one process, or the processes of a ``jax.distributed`` run) must give
every episode the pool statistics one device would. The statistics are a multiset's count,
minimum, maximum and k largest values, so per-shard statistics merge exactly: counts add,
extremes take min / max, and the k largest of the gathered ``S x k`` values are the global
k largest. Only ``S·B·(k + 3)`` numbers cross devices.

Rows are read the way ``sharded.sharded_masked_topk`` reads them (``shard_rows`` places
them; rows past ``n`` are padding and never members), and ``member(args, rows, idx)`` sees
its shard's chunk of rows and their global indices.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import Mesh, PartitionSpec

from ecomjax.kernels.pool import PoolStats, _empty, _fold, pool_stats, pool_stats_reference
from ecomjax.kernels.sharded import local_rows, shard_map_compat, shard_rows

__all__ = ["check_sharded_pool", "merge_pool_stats", "sharded_pool_stats"]

PyTree = Any
# (episode args, a chunk of this shard's rows, their global indices) -> (mask [C], key [C])
RowMemberFn = Callable[[PyTree, PyTree, jax.Array], tuple[jax.Array, jax.Array]]
_INF = float("inf")


def merge_pool_stats(blocks: PoolStats, k: int) -> PoolStats:
    """The statistics of the union of disjoint row blocks from theirs (leading axis S):
    exact, since they are a multiset's count, extremes and k largest values."""
    top = jnp.moveaxis(blocks.top, 0, -2).reshape(*blocks.top.shape[1:-1], -1)
    return PoolStats(
        count=blocks.count.sum(0, dtype=jnp.int32),
        lo=blocks.lo.min(0),
        hi=blocks.hi.max(0),
        top=lax.top_k(top, k)[0],
    )


def _local_stats(
    member: RowMemberFn, args: PyTree, rows: PyTree, n_local: int, n: int, offset, k: int, c: int
) -> PoolStats:
    """One episode's statistics over this shard's rows, ``c`` rows a step (the last window
    clamped to the shard's end, re-read rows masked, as ``pool_stats`` does)."""
    lane = jnp.arange(c, dtype=jnp.int32)

    def body(state: PoolStats, i: jax.Array) -> tuple[PoolStats, None]:
        fresh_from = i * c
        start = jnp.minimum(fresh_from, n_local - c)
        part = jax.tree_util.tree_map(lambda a: lax.dynamic_slice_in_dim(a, start, c, 0), rows)
        idx = offset + start + lane
        mask, key = member(args, part, idx)
        live = (start + lane >= fresh_from) & (idx < n)
        return _fold(state, mask & live, key, k), None

    out, _ = lax.scan(body, _empty(k), jnp.arange(math.ceil(n_local / c), dtype=jnp.int32))
    return out


def sharded_pool_stats(
    member: RowMemberFn,
    args: PyTree,
    rows: PyTree,
    n: int,
    k: int,
    mesh: Mesh,
    *,
    axis: str = "rows",
    chunk: int = 4096,
) -> PoolStats:
    """Pool statistics of a batch of episodes (``args`` leaves lead with B, replicated)
    over ``n`` catalog rows split along mesh axis ``axis`` (``shard_rows``). Equals
    ``pool_stats`` on one device at the same ``chunk`` whenever ``member`` gives each row
    the same key on both: always for exact keys; for float dot products, when every shard
    holds at least ``chunk`` rows, so both sides compute dots of one shape (see
    ``sharded_masked_topk``). ``n``, ``k``, ``chunk`` are static; works under ``jax.jit``."""
    if k < 1 or chunk < 1:
        raise ValueError(f"need k >= 1 and chunk >= 1, got k={k}, chunk={chunk}")
    n_local = local_rows(rows, n, mesh, axis)
    c = min(chunk, n_local)

    def local(r: PyTree, a: PyTree) -> PoolStats:
        off = lax.axis_index(axis) * n_local
        mine = jax.vmap(lambda e: _local_stats(member, e, r, n_local, n, off, k, c))(a)
        gathered = jax.tree_util.tree_map(lambda x: lax.all_gather(x, axis), mine)
        return merge_pool_stats(gathered, k)

    fn = shard_map_compat(
        local, mesh, in_specs=(PartitionSpec(axis), PartitionSpec()), out_specs=PartitionSpec()
    )
    return fn(rows, args)


def check_sharded_pool(n_devices: int | None = None, seed: int = 0) -> dict:
    """Sharded pool statistics == one device's ``pool_stats`` == the plain reference, on
    this process's devices (or every process's, in a ``jax.distributed`` run).

    Exact keys (small integers with heavy ties, a category filter, an index filter, empty
    pools, k above the pool size, N not divisible by the device count), so equality must be
    bit for bit; then float keys (cosine to a unit vector) at a chunk every shard can fill.
    Raises AssertionError on any difference; returns a small report."""
    devices = jax.devices()[: n_devices or jax.device_count()]
    mesh = Mesh(np.asarray(devices), ("rows",))
    rng = np.random.default_rng(seed)
    n, b = 1003, 6
    rows = {
        "price": jnp.asarray(rng.integers(0, 40, n), jnp.int32),
        "cat": jnp.asarray(rng.integers(0, 5, n), jnp.int32),
    }
    args = {
        "cat": jnp.asarray([-1, 0, 1, 2, 4, 9], jnp.int32),  # 9: an empty pool
        "max": jnp.asarray([39, 10, 39, 0, 20, 39], jnp.int32),
    }

    def member_rows(a: dict, r: dict, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
        ok = ((a["cat"] < 0) | (r["cat"] == a["cat"])) & (r["price"] <= a["max"])
        return ok & (idx % 97 != 5), -r["price"].astype(jnp.float32)

    def member_ids(a: dict, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
        return member_rows(a, jax.tree_util.tree_map(lambda x: x[idx], rows), idx)

    def same(got: PoolStats, want: PoolStats, what: str) -> None:
        for field in PoolStats._fields:
            a, w = np.asarray(getattr(got, field)), np.asarray(getattr(want, field))
            if not np.array_equal(a, w):
                raise AssertionError(f"{what}: {field} differs")

    placed, _ = shard_rows(rows, mesh)
    cases = [(10, 64), (1, 16), (50, 128), (400, 64)]  # k above most pools' size
    for k, chunk in cases:
        got = jax.jit(
            lambda r, a, k=k, chunk=chunk: sharded_pool_stats(
                member_rows, a, r, n, k, mesh, chunk=chunk
            )
        )(placed, args)
        single = jax.vmap(lambda a, k=k, chunk=chunk: pool_stats(member_ids, a, n, k, chunk))(args)
        ref = jax.vmap(lambda a, k=k: pool_stats_reference(member_ids, a, n, k))(args)
        same(got, single, f"k={k} chunk={chunk} vs one device")
        same(got, ref, f"k={k} chunk={chunk} vs the reference")
    # Float keys: the cosine of each row to the episode's unit vector, as SUB's similarity.
    emb = rng.standard_normal((n, 32)).astype(np.float32)
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    vec = rng.standard_normal((b, 32)).astype(np.float32)
    vec /= np.linalg.norm(vec, axis=1, keepdims=True)
    fchunk = max(1, min(64, n // len(devices)))

    def cos_rows(v: jax.Array, e: jax.Array, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
        return idx % 3 != 0, e @ v

    def cos_ids(v: jax.Array, idx: jax.Array) -> tuple[jax.Array, jax.Array]:
        return cos_rows(v, jnp.asarray(emb)[idx], idx)

    fplaced, _ = shard_rows(jnp.asarray(emb), mesh)
    got = jax.jit(lambda r, v: sharded_pool_stats(cos_rows, v, r, n, 40, mesh, chunk=fchunk))(
        fplaced, jnp.asarray(vec)
    )
    want = jax.jit(jax.vmap(lambda v: pool_stats(cos_ids, v, n, 40, fchunk)))(jnp.asarray(vec))
    same(got, want, "float keys vs one device")
    return {"devices": len(devices), "n": n, "cases": len(cases) + 1, "identical": True}
