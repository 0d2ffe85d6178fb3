"""Test helpers shared by the PD, SUB and pool tests (``ecomjax/envs/pd/pd_test.py``,
``pool_test.py``, ``ecomjax/envs/sub/sub_test.py``): batch keys, answer cases, and plain
numpy re-implementations of the PD / SUB verifier formulas (SPEC §7, §8.1, §8.2) written
independently of the chunked kernel.

Test support, not shipped: ``setup.py`` packages only ``ecomjax/``, ``llm_bridge/``
and ``train/``. Tests import it as ``tests.support.pd_checks`` (pytest puts
the repository root on ``sys.path`` for the test modules inside the ``ecomjax`` package)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.catalog.types import Catalog
from ecomjax.constraints import feasible, satisfaction
from ecomjax.exposure import oos_bitmap

TM = C.Termination


def keys_for(seed: int, b: int) -> jax.Array:
    return jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(b))


def one(tree, i: int):
    return jax.tree_util.tree_map(lambda x: x[i], tree)


# --- numpy reference verifiers -----------------------------------------------------------


def _pool_np(catalog: Catalog, problem, world, row: int, extra_ok=None):
    n = catalog.n_products
    attr, op, val = (
        np.asarray(x[row]) for x in (problem.cons_attr, problem.cons_op, problem.cons_val)
    )
    feas = np.asarray(feasible(catalog, jnp.arange(n), attr, op, val))
    plain = (np.asarray(world.cart_no) > 0) & (np.asarray(world.cart_var) == -1)
    reserved = np.zeros(n, np.int64)
    for p, q in zip(
        np.asarray(world.cart_pid)[plain], np.asarray(world.cart_qty)[plain], strict=True
    ):
        reserved[p] += q
    # An active exchange holds one unit of its new product SKU (SPEC §5.2).
    exch = np.asarray(world.ret_active) & (np.asarray(world.exch_var) == -1)
    for p in np.asarray(world.exch_pid)[exch & (np.asarray(world.exch_pid) >= 0)]:
        reserved[p] += 1
    avail = (np.asarray(catalog.stock).astype(np.int64) - reserved > 0) & ~oos_bitmap(world, n)
    pool = feas & avail
    if extra_ok is not None:
        pool &= extra_ok
    sat = np.asarray(satisfaction(catalog, jnp.arange(n), attr, op, val)).astype(np.float64)
    return pool, avail, sat


def _listed(rec: np.ndarray, k: int) -> list[int]:
    return [int(x) for x in rec if x != -1][:k]


def _dcg(rel: np.ndarray, lst: list[int], n: int) -> float:
    seen, total = set(), 0.0
    for i, p in enumerate(lst):
        if 0 <= p < n and p not in seen:
            total += rel[p] / np.log2(i + 2)
        seen.add(p)
    return total


def _ndcg(rel: np.ndarray, pool: np.ndarray, lst: list[int], k: int, n: int) -> float:
    ideal_vals = np.sort(rel[pool])[::-1][:k]
    idcg = sum(v / np.log2(i + 2) for i, v in enumerate(ideal_vals))
    return min(1.0, _dcg(rel, lst, n) / idcg) if idcg > 0 else 0.0


def _r_avail(lst: list[int], avail: np.ndarray, n: int) -> float:
    if not lst:
        return -1.0
    bad = sum(1 for p in lst if not (0 <= p < n and avail[p]))
    return 1.0 - 2.0 * bad / len(lst)


def pd_reference(catalog: Catalog, problem, world, rec: np.ndarray) -> tuple[float, ...]:
    """(r_task, r_rank, r_cons, r_avail) of SPEC §8.1, in float64 over the whole catalog."""
    n = catalog.n_products
    pool, avail, sat = _pool_np(catalog, problem, world, 0)
    prio = int(problem.priority)
    key = [
        -np.asarray(catalog.price_cents, np.float64),
        np.asarray(catalog.rating_x100, np.float64),
        -np.asarray(catalog.ship_days, np.float64),
    ][prio]
    lo, hi = (key[pool].min(), key[pool].max()) if pool.any() else (0.0, 0.0)
    phi = (key - lo) / (hi - lo) if hi > lo else np.ones(n)
    rel = np.where(pool, (1 + phi) / 2, 0.0)
    k = int(problem.k_rec)
    lst = _listed(rec, k)
    r_rank = 2 * _ndcg(rel, pool, lst, k, n) - 1
    s_best = max([sat[p] if 0 <= p < n else 0.0 for p in lst], default=0.0)
    r_cons = 2 * s_best ** int(D.alpha(int(problem.d))) - 1
    r_av = _r_avail(lst, avail, n)
    r_task = float(np.clip(0.55 * r_rank + 0.35 * r_cons + 0.10 * r_av, -1, 1))
    return r_task, r_rank, r_cons, r_av


def sub_reference(catalog: Catalog, problem, world, rec: np.ndarray) -> tuple[float, ...]:
    """(r_task, r_rank, r_avail) of SPEC §8.2, in float64 over the whole catalog."""
    n = catalog.n_products
    p0 = int(problem.sub_original)
    pool, avail, _ = _pool_np(catalog, problem, world, 1, np.arange(n) != p0)
    emb = np.asarray(catalog.emb, np.float64)
    sim01 = (emb @ emb[p0] + 1) / 2
    lam = float(D.lambda_sim(int(problem.d)))
    rel = np.where(pool, 1 - lam * (1 - sim01), 0.0)
    k = int(problem.k_rec)
    lst = _listed(rec, k)
    r_rank = 2 * _ndcg(rel, pool, lst, k, n) - 1
    r_av = _r_avail(lst, avail, n)
    return float(np.clip(0.8 * r_rank + 0.2 * r_av, -1, 1)), r_rank, r_av


def answer_cases(rng: np.random.Generator, ideal: list[int], n: int, k: int) -> list[np.ndarray]:
    """Recommendation lists that exercise every term: the ideal list, reversed, shifted,
    random products, duplicates, unknown ids (-7, >= N), padding gaps and an empty list."""
    cases = [ideal, ideal[::-1], ideal[1:], rng.integers(0, n, k + 2).tolist()]
    dup = ideal[:2] + ideal[:2] + [-7, n + 3] + ideal[2:]
    cases += [dup, [-1, *ideal], [], [ideal[0]] * k]
    out = []
    for c in cases:
        a = np.full(C.MAX_ANSWER_IDS, -1, np.int32)
        a[: len(c)] = c[: C.MAX_ANSWER_IDS]
        out.append(a)
    return out
