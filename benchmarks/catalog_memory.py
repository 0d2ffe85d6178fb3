"""Synthetic catalog memory and build time at scale (SPEC §1.4; DESIGN "Data model").

Why: the catalog is the one large array every env reads, broadcast across the batch.
This measures its device size (``Catalog.nbytes``), bytes per product, and how long the
jitted generator takes, with compile time kept apart from steady state. Each
(N, dtype) runs in its own subprocess by default so that peak host memory is per run.

    python benchmarks/catalog_memory.py --sizes 100000 2000000 --dtypes float32 bfloat16

Rows are appended as JSONL to benchmarks/results/catalog_memory.jsonl.
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from rows_io import append_rows

RESULTS = Path(__file__).resolve().parent / "results" / "catalog_memory.jsonl"


def measure(n: int, dtype: str, embed_dim: int, repeats: int, seed: int) -> dict[str, Any]:
    """Build the catalog ``1 + repeats`` times; the first call includes compilation."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from ecomjax.catalog.synthetic import generate_catalog

    emb_dtype = jnp.dtype(dtype)
    t0 = time.perf_counter()
    cat = jax.block_until_ready(generate_catalog(seed, n, embed_dim, emb_dtype))
    first = time.perf_counter() - t0
    steady = []
    for r in range(repeats):
        del cat
        t0 = time.perf_counter()
        cat = jax.block_until_ready(generate_catalog(seed + 1 + r, n, embed_dim, emb_dtype))
        steady.append(time.perf_counter() - t0)
    steady_s = float(np.median(steady)) if steady else float("nan")
    nbytes = cat.nbytes()
    dev = jax.devices()[0]
    try:
        dev_peak = (dev.memory_stats() or {}).get("peak_bytes_in_use")
    except Exception:  # memory_stats is not implemented on every backend
        dev_peak = None
    return {
        "benchmark": "catalog_memory",
        "n": n,
        "emb_dtype": dtype,
        "embed_dim": embed_dim,
        "nbytes": nbytes,
        "bytes_per_product": nbytes / n,
        "emb_bytes": int(cat.emb.size * cat.emb.dtype.itemsize),
        "first_call_s": first,
        "steady_s": steady_s,
        "compile_s": first - steady_s if steady else None,
        "repeats": repeats,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "device_peak_bytes": dev_peak,
        "device": f"{dev.platform}:{dev.device_kind}",
        "n_devices": jax.device_count(),
        "jax_version": jax.__version__,
        "python_version": platform.python_version(),
        "machine": platform.machine(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S"),
    }


def _run_isolated(n: int, dtype: str, args: argparse.Namespace) -> dict[str, Any]:
    cmd = [
        sys.executable, __file__, "--one", "--sizes", str(n), "--dtypes", dtype,
        "--embed-dim", str(args.embed_dim), "--repeats", str(args.repeats),
        "--seed", str(args.seed),
    ]  # fmt: skip
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'N':>10} {'emb':>9} {'total MB':>10} {'B/product':>10} {'emb MB':>9} "
        f"{'compile s':>10} {'steady s':>9} {'peak RSS MB':>12}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        comp = r["compile_s"]
        lines.append(
            f"{r['n']:>10,} {r['emb_dtype']:>9} {r['nbytes'] / 1e6:>10.1f} "
            f"{r['bytes_per_product']:>10.1f} {r['emb_bytes'] / 1e6:>9.1f} "
            f"{comp if comp is not None else float('nan'):>10.2f} {r['steady_s']:>9.2f} "
            f"{r['peak_rss_bytes'] / 1e6:>12.0f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--sizes", type=int, nargs="+", default=[100_000, 2_000_000])
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    p.add_argument("--embed-dim", type=int, default=384)
    p.add_argument("--repeats", type=int, default=2, help="steady-state builds after the first")
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--out", type=Path, default=RESULTS)
    p.add_argument("--no-isolate", action="store_true", help="run every size in this process")
    p.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)

    if args.one:  # child: one measurement, one JSON line on stdout
        row = measure(args.sizes[0], args.dtypes[0], args.embed_dim, args.repeats, args.seed)
        print(json.dumps(row))
        return

    rows = []
    args.out.parent.mkdir(parents=True, exist_ok=True)
    for n in args.sizes:
        for dtype in args.dtypes:
            if args.no_isolate:
                row = measure(n, dtype, args.embed_dim, args.repeats, args.seed)
            else:
                row = _run_isolated(n, dtype, args)
            rows.append(row)
            append_rows(args.out, [row])
            print(f"done N={n:,} {dtype}: {row['steady_s']:.2f} s", file=sys.stderr, flush=True)
    print(_table(rows))


if __name__ == "__main__":
    main()
