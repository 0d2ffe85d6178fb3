"""Episodes per second against ``EnvParams.search_batch`` (queries per retrieval loop
step), in one process: oracle episodes of one family, compile timed apart, median of
``--repeats`` blocked runs. Rows go to benchmarks/results/search_batch.jsonl.

    python benchmarks/search_batch.py --family PD --n 100000 --batch 64
    python benchmarks/search_batch.py --family CART --n 1000 --batch 4096
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import jax
from rows_io import append_rows
from throughput import env_info, episode_inputs

from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.registry import family
from ecomjax.rollout import run_batch
from ecomjax.types import EnvParams

OUT = Path(__file__).parent / "results" / "search_batch.jsonl"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--family", default="PD")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 32])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    fam = family(args.family.upper())
    catalog = generate_catalog(42, args.n)
    agent = make_oracle((fam.env,))
    rows = []
    for size in args.sizes:
        params = EnvParams(search_batch=size)

        def fn(c, k, d, params=params):
            res = run_batch(c, k, d, fam.generate, agent, params, families=(int(fam.env),))
            return res.state.reward.is_correct

        keys, d = episode_inputs(args.batch, 0)
        t0 = time.perf_counter()
        compiled = jax.jit(fn).lower(catalog, keys, d).compile()
        compile_s = time.perf_counter() - t0
        jax.block_until_ready(compiled(catalog, keys, d))
        times = []
        for r in range(args.repeats):
            keys, d = episode_inputs(args.batch, 1 + r)
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(catalog, keys, d))
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        row = env_info() | {
            "kind": "search_batch", "family": fam.name, "N": args.n, "B": args.batch,
            "search_batch": size, "compile_s": compile_s, "median_s": med,
            "repeats": args.repeats, "episodes_per_s": args.batch / med,
        }  # fmt: skip
        rows.append(row)
        print(f"{fam.name} N={args.n} B={args.batch} search_batch={size}: "
              f"{row['episodes_per_s']:.0f} episodes/s", flush=True)  # fmt: skip
    append_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
