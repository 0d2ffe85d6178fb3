"""Micro-benchmarks of the search's sort-free helpers, each against what it replaced, in
one process on the same inputs (rows to ``results/search_helpers.jsonl``):

- the distractor mix (``tools.search._mix_distractors``) with its distractor slots chosen
  by Floyd's algorithm (``bits.distinct_positions``, today's) or as the lowest of R keyed
  priorities (by a double argsort or by ``smallest``, once ``compact.smallest``, kept
  here since Floyd's replaced it), and its
  membership test by sort + binary search or by comparing every pair, for one chunk of 32
  searches;
- ``jnp.searchsorted`` by its default loop, unrolled, and by comparing every pair, for
  [4096, 64] tests of 4,096 sorted 100-entry tables (the order-history draw's shape).

    python benchmarks/search_helpers.py

Every variant's output is checked equal to the first one's that draws its distractor slots
the same way, and every mix to hold the true results in order, before it is timed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.tools import search as S

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import append_rows  # noqa: E402
from throughput import env_info  # noqa: E402

OUT = Path(__file__).parent / "results" / "search_helpers.jsonl"
R, TRIES = S.R, S.TRIES


def argsort_select(prio, n_dist, max_dist):
    """The n_dist lowest priorities by a double argsort (what ``smallest`` replaced)."""
    del max_dist
    return jnp.argsort(jnp.argsort(prio)) < n_dist


def smallest(values: jax.Array, n: jax.Array, max_n: int) -> jax.Array:
    """bool [R]: the ``n`` entries a stable ascending sort of the 1-D ``values`` puts
    first (the lower index first among equal values), for ``0 <= n <= max_n`` (static).

    Why: ``argsort(argsort(values)) < n`` is two comparator-loop sorts of R on XLA:CPU;
    this is one ``top_k`` of ``max_n`` values (its values, not its tie order, are
    guaranteed) and a prefix count over the entries equal to the n-th value. ``values``
    must hold no NaN and no -0.0 (IEEE equality and the sort's total order then agree)."""
    m = min(max_n, values.shape[0])
    if m < 1:
        return jnp.zeros(values.shape, bool)
    low = -jax.lax.top_k(-values, m)[0]  # the m smallest values, ascending
    thr = low[jnp.clip(n - 1, 0, m - 1)]
    below = values < thr
    tie = values == thr
    take_tie = tie & (jnp.cumsum(tie) <= n - below.sum())
    return (n > 0) & (below | take_tie)


def priority_positions(select):
    """Distractor slots as the n_dist lowest of R keyed priorities (what Floyd's replaced)."""

    def positions(key, total, n_dist, max_dist):
        slots = jnp.arange(R)
        prio = jnp.where(slots < total, jax.random.uniform(key, (R,)), 2.0)
        return select(prio, n_dist, max_dist) & (slots < total)

    return positions


SELECT = {"argsort": argsort_select, "smallest": smallest}


def compare_all(true_ids, is_true, cand):
    """Membership by comparing every pair (what sort + binary search replaced)."""
    return (cand[..., None] == jnp.where(is_true, true_ids, -1)).any(-1)


def searchsorted_member(method: str):
    """Membership by sort + ``jnp.searchsorted(method=...)``."""

    def member(true_ids, is_true, cand):
        ts = jnp.sort(jnp.where(is_true, true_ids, jnp.iinfo(jnp.int32).max))
        at = jnp.clip(jnp.searchsorted(ts, cand, method=method), 0, R - 1)
        return ts[at] == cand

    return member


def mix(key, catalog, true_ids, n_true, n_dist, max_dist, select: str, member: str):
    """``_mix_distractors`` with a choice of distractor-slot selection and membership."""
    return S._mix_distractors(
        key,
        catalog,
        true_ids,
        n_true,
        n_dist,
        max_dist,
        positions=None if select == "floyd" else priority_positions(SELECT[select]),
        member=compare_all if member == "compare_all" else searchsorted_member(member),
    )


def timed(fn, args, repeats: int, inner: int) -> float:
    """Median seconds of one call, over ``repeats`` batches of ``inner`` calls."""
    jax.block_until_ready(fn(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(inner):
            out = fn(*args)
        jax.block_until_ready(out)
        times.append((time.perf_counter() - t0) / inner)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--label", default="")
    args = ap.parse_args(argv)
    rows = []
    catalog = generate_catalog(42, 1000)
    n = 32  # searches a retrieval step (EnvParams.search_batch)
    keys = jax.random.split(jax.random.key(5), n)
    perm = jax.vmap(lambda k: jax.random.permutation(k, 1000)[:R])
    ids = perm(jax.random.split(jax.random.key(6), n)).astype(jnp.int32)
    inputs = (keys, ids, jnp.full(n, 150), jnp.full(n, 20))
    variants = [("argsort", "scan"), ("argsort", "compare_all"), ("smallest", "scan"),
                ("smallest", "compare_all"), ("smallest", "scan_unrolled"), ("floyd", "scan"),
                ("floyd", "compare_all")]  # fmt: skip
    refs: dict[bool, np.ndarray] = {}
    true_ids = np.asarray(ids)
    for select, member in variants:
        f = jax.jit(
            jax.vmap(lambda k, i, t, d, s=select, m=member: mix(k, catalog, i, t, d, 20, s, m))
        )
        out = np.asarray(f(*inputs))
        ref = refs.setdefault(select == "floyd", out)
        assert np.array_equal(out, ref), (select, member)
        for row, true in zip(out, true_ids, strict=True):
            assert [x for x in row if x in set(true[:150])] == list(true[:150]), select
        us = timed(f, inputs, args.repeats, 50) / n * 1e6
        rows.append(
            {"bench": "distractor_mix", "select": select, "member": member, "us_per_search": us}
        )
        print(f"distractor mix  {select:9s} {member:14s} {us:7.1f} us a search")
    t = jnp.sort(jax.random.randint(jax.random.key(0), (4096, 100), 0, 1000), axis=-1)
    x = jax.random.randint(jax.random.key(1), (4096, 64), 0, 1000)
    ref = None
    for method in ("scan", "scan_unrolled", "compare_all"):
        f = jax.jit(jax.vmap(lambda a, b, m=method: jnp.searchsorted(a, b, method=m)))
        out = np.asarray(f(t, x))
        ref = out if ref is None else ref
        assert np.array_equal(out, ref), method
        ms = timed(f, (t, x), args.repeats, 20) * 1e3
        rows.append({"bench": "searchsorted", "method": method, "shape": [4096, 64, 100], "ms": ms})
        print(f"searchsorted    {method:14s} {ms:7.2f} ms for [4096, 64] tests of 100 entries")
    append_rows(
        OUT, (env_info() | {"kind": "search_helpers", "label": args.label} | r for r in rows)
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
