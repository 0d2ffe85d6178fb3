"""Exact batched retrieval: ecomjax's chunked masked top-k against faiss ``IndexFlatIP``.

Both sides do the same exact job (inner product over every row, top-k per query) in the
same process on the same vectors; every timed call blocks until ready, compile time is
kept apart, and each point is the median over ``--repeats``. The two are timed in
alternation (ours, faiss, ours, faiss, ...) so that load from other processes on a shared
machine hits both alike; ``ratio`` is the median of the per-repeat ratios. faiss gets its
BLAS path for batched queries (``distance_compute_blas_threshold``) and runs with one
OpenMP thread per core and with one thread (on a loaded machine the single thread can be
faster); ``ratio_vs_faiss`` is against the faster of the two.

Achieved FLOP/s (2·Q·N·D per search) are reported against a plain XLA matmul peak: one
``[Q, D] x [D, W]`` dot (W = ``--matmul-width`` rows, output materialised) timed in the
same interleaved loop. ``frac_of_matmul`` = our FLOP/s / that peak (median of per-repeat
ratios), so 1.0 means the exact top-k runs at the speed of a bare matmul.

    python benchmarks/retrieval.py                 # N in {100k, 1M}, D in {64, 384}, B 256
    python benchmarks/retrieval.py --quick         # N = 100k only, k = 10, 2 repeats
    python benchmarks/retrieval.py --n 1000000 --d 384 --k 10 200 --dtypes float32 bfloat16
    python benchmarks/retrieval.py --impl pallas --block-rows 256 512   # GPU only

``--impl pallas`` times ``ecomjax/kernels/pallas_topk.py`` (no filters) instead of ``masked_topk``,
one point per ``--block-rows`` value in place of ``--chunks``; on a non-GPU backend it
exits without timing anything (Pallas interpret mode is a test path, not a fast one).

Vectors are random unit Gaussians (retrieval cost does not depend on their content);
they are generated block by block straight into the faiss index and the device array is
filled from the index's storage, so host memory peaks near 2 copies of [N, D] float32
(3 GB at N = 1M, D = 384). Rows go to benchmarks/results/retrieval.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax.kernels.pallas_topk import pallas_masked_topk
from ecomjax.kernels.topk import embedding_scores, masked_topk

sys.path.insert(0, str(Path(__file__).parent))
from throughput import env_info  # noqa: E402

OUT = Path(__file__).parent / "results" / "retrieval.jsonl"

try:  # optional: the `faiss` extra; on a machine without it only our side runs
    import faiss
except ImportError:  # pragma: no cover - depends on the environment
    faiss = None


def unit_rows(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    x = rng.standard_normal((n, d), dtype=np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x


def build(n: int, d: int, seed: int, block: int = 65536) -> tuple[Any, jax.Array]:
    """(faiss index or None, device rows [N, D] float32) holding the same vectors."""
    rng = np.random.default_rng(seed)
    if faiss is None:
        parts = [unit_rows(rng, min(block, n - a), d) for a in range(0, n, block)]
        return None, jnp.asarray(np.concatenate(parts))
    index = faiss.IndexFlatIP(d)
    for a in range(0, n, block):
        index.add(unit_rows(rng, min(block, n - a), d))
    view = faiss.rev_swig_ptr(index.get_xb(), n * d).reshape(n, d)  # no copy
    return index, jax.device_put(np.array(view, copy=True))


def timed(fn, repeats: int) -> list[float]:
    out = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(fn())
        out.append(time.perf_counter() - t0)
    return out


def plain_matmul(rows: jax.Array, width: int):
    """One plain XLA matmul ``[Q, D] x [D, width]`` (``embedding_scores`` on the first
    ``width`` rows, output materialised): the peak our search is compared against."""
    part = rows[: min(width, rows.shape[0])]
    return part, jax.jit(lambda qs, e: embedding_scores(qs, e))


def ours_fn(n: int, k: int, chunk: int, impl: str = "xla"):
    if impl == "pallas":  # chunk is the kernel's block_rows
        return jax.jit(
            lambda e, qs: pallas_masked_topk(qs, e, None, None, None, k, block_rows=chunk)
        )

    def score(qs: jax.Array, e: jax.Array, idx: jax.Array) -> jax.Array:
        del idx
        return embedding_scores(qs, e)

    return jax.jit(lambda e, qs: masked_topk(score, e, qs, n, k, chunk))


def bench_point(
    index, rows: jax.Array, n: int, d: int, b: int, k: int, chunk: int, dtype: str, args
) -> list[dict]:
    rng = np.random.default_rng(args.seed + 1)
    queries = [unit_rows(rng, b, d) for _ in range(args.repeats + 1)]
    e = rows.astype(jnp.dtype(dtype))
    fn = ours_fn(n, k, chunk, args.impl)
    q0 = jnp.asarray(queries[0], e.dtype)
    t0 = time.perf_counter()
    compiled = fn.lower(e, q0).compile()
    compile_s = time.perf_counter() - t0
    res = jax.block_until_ready(compiled(e, q0))  # warm-up
    mm_rows, mm = plain_matmul(e, args.matmul_width)
    jax.block_until_ready(mm(q0, mm_rows))
    mm_flops = 2.0 * b * mm_rows.shape[0] * d
    flops = 2.0 * b * n * d
    ours_t, mm_t, faiss_t = [], [], {}
    faiss_threads = sorted({1, args.threads})
    agree = None
    if index is not None:
        index.search(queries[0], k)  # warm-up
        _, fi = index.search(queries[0], k)
        agree = float(np.mean(np.asarray(res.indices) == fi))
    for r in range(1, args.repeats + 1):  # interleaved: load drifts hit all three alike
        qr = jnp.asarray(queries[r], e.dtype)
        ours_t += timed(lambda qr=qr: compiled(e, qr), 1)
        mm_t += timed(lambda qr=qr: mm(qr, mm_rows), 1)
        for t in faiss_threads if index is not None else ():
            faiss.omp_set_num_threads(t)
            t0 = time.perf_counter()
            index.search(queries[r], k)
            faiss_t.setdefault(t, []).append(time.perf_counter() - t0)
    peak = mm_flops / statistics.median(mm_t)
    base = {"kind": "retrieval", "N": n, "D": d, "batch": b, "k": k, "repeats": args.repeats}
    med = statistics.median(ours_t)
    ours = base | {
        "impl": "ecomjax.pallas_masked_topk" if args.impl == "pallas" else "ecomjax.masked_topk",
        "dtype": dtype,
        "chunk": chunk,
        "compile_s": compile_s,
        "median_s": med,
        "qps": b / med,
        "gflops": flops / med / 1e9,
        "matmul_gflops": peak / 1e9,
        "matmul_width": int(mm_rows.shape[0]),
        "frac_of_matmul": statistics.median([m / o for o, m in zip(ours_t, mm_t, strict=True)]),
        "id_agreement_with_faiss": agree,
    }
    rows_out = [ours]
    if index is not None:
        best = min(faiss_t, key=lambda t: statistics.median(faiss_t[t]))
        ours["ratio_vs_faiss"] = statistics.median(
            [f / o for o, f in zip(ours_t, faiss_t[best], strict=True)]
        )
        ours["faiss_threads_compared"] = best
        for t, ts in faiss_t.items():
            fmed = statistics.median(ts)
            rows_out.append(
                base
                | {
                    "impl": "faiss.IndexFlatIP",
                    "dtype": "float32",
                    "median_s": fmed,
                    "qps": b / fmed,
                    "gflops": flops / fmed / 1e9,
                    "frac_of_matmul": statistics.median(
                        [(flops / f) / (mm_flops / m) for f, m in zip(ts, mm_t, strict=True)]
                    ),
                    "blas_threshold": int(faiss.cvar.distance_compute_blas_threshold),
                    "omp_threads": t,
                    "best_faiss_setting": t == best,
                }
            )
    return rows_out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, nargs="+", default=[100_000, 1_000_000])
    ap.add_argument("--d", type=int, nargs="+", default=[64, 384])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--k", type=int, nargs="+", default=[10, 200])
    ap.add_argument("--chunks", type=int, nargs="+", default=[32768])
    ap.add_argument("--impl", choices=["xla", "pallas"], default="xla")
    ap.add_argument("--block-rows", type=int, nargs="+", default=[256], help="--impl pallas")
    ap.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--matmul-width", type=int, default=262144, help="rows in the peak matmul")
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--quick", action="store_true", help="N = 100k, k = 10, 2 repeats")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    if args.quick:
        args.n, args.k, args.repeats = [100_000], [10], 2
        args.dtypes = args.dtypes[:1]
    if args.impl == "pallas":
        if jax.default_backend() != "gpu":
            print(
                f"--impl pallas needs a GPU (backend is {jax.default_backend()}): Pallas "
                "interpret mode is a test path, not a performance path; nothing timed",
                file=sys.stderr,
            )
            return 0
        args.chunks = args.block_rows
    info = env_info() | {
        "faiss": getattr(faiss, "__version__", None),
        "cpu_count": os.cpu_count(),
    }
    if faiss is not None:
        faiss.cvar.distance_compute_blas_threshold = min(args.batch, 20)
    else:
        print("faiss not installed: timing ecomjax only", file=sys.stderr)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    n_rows = 0
    for n in args.n:
        for d in args.d:
            index, rows = build(n, d, args.seed)
            for k in args.k:
                for dtype in args.dtypes:
                    for chunk in args.chunks:
                        out = bench_point(index, rows, n, d, args.batch, k, chunk, dtype, args)
                        with args.out.open("a") as f:
                            for row in out:
                                f.write(json.dumps(info | row) + "\n")
                        n_rows += len(out)
                        o = out[0]
                        msg = (
                            f"N={n:>8} D={d:>3} k={k:>3} {dtype:>8} chunk={chunk:>6}: "
                            f"{o['qps']:>8.1f} q/s, {o['frac_of_matmul']:.2f} of matmul "
                            f"(compile {o['compile_s']:.1f}s)"
                        )
                        for fr in out[1:]:
                            msg += f" | faiss({fr['omp_threads']}t) {fr['qps']:>7.1f} q/s"
                        if len(out) > 1:
                            msg += f" | x{o['ratio_vs_faiss']:.2f} vs best faiss"
                        print(msg, flush=True)
            del index, rows
    print(f"wrote {n_rows} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
