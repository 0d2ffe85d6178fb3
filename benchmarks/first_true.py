"""``compact.first_true`` and ``compact.compact`` by packed words against the prefix
count's scatter, vmapped over B lanes of n-entry masks, in one process on the same inputs
(rows to ``results/first_true.jsonl``). This sets ``compact._use_words``' threshold.

    python benchmarks/first_true.py
    python benchmarks/first_true.py --shapes 4096x1000x32,1x4096x4096

A shape is BxNxK: lanes, mask length, entries wanted. Both ways' outputs are checked
equal before they are timed; times are medians of ``--repeats`` calls after a warm-up.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import numpy as np

from ecomjax import compact as CP

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import append_rows  # noqa: E402
from throughput import env_info  # noqa: E402
from timing import compiled, median_s  # noqa: E402

OUT = Path(__file__).parent / "results" / "first_true.jsonl"
# The stock shocks' events (n = N, k = 32), the search's compaction (R = 200), a 300-row
# listing, k = n at N, and the batch-wide lane orders (one unbatched mask of B lanes).
SHAPES = "4096x1000x32,4096x200x200,4096x300x50,4096x1000x1000,4096x60x60,1x4096x4096,1x65536x4096"


VARIANTS = {
    "first_true": {"words": CP._first_true_words, "scatter": CP._first_true_scatter},
    "compact": {
        "words": lambda v, m, k: CP._compact_words(v, m, k, -1),
        "scatter": lambda v, m, k: CP._compact_scatter(v, m, k, -1),
    },
}


def measure(b: int, n: int, k: int, density: float, repeats: int) -> list[dict]:
    keep = jax.random.uniform(jax.random.key(0), (b, n)) < density
    values = jax.random.randint(jax.random.key(1), (b, n), 0, 1 << 30)
    rows = []
    for op, ways in VARIANTS.items():
        outs, secs, comp = {}, {}, {}
        for way, fn in ways.items():
            if op == "first_true":
                prog, comp[way] = compiled(lambda m, fn=fn: jax.vmap(lambda x: fn(x, k))(m), keep)
                secs[way], out = median_s(prog, lambda _: (keep,), repeats)
            else:
                prog, comp[way] = compiled(
                    lambda v, m, fn=fn: jax.vmap(lambda v, x: fn(v, x, k))(v, m), values, keep
                )
                secs[way], out = median_s(prog, lambda _: (values, keep), repeats)
            outs[way] = np.asarray(out)
        if not np.array_equal(outs["words"], outs["scatter"]):
            raise AssertionError(f"{op} {b}x{n}x{k}: the two ways differ")
        row = {
            "kind": "first_true",
            "op": op,
            "B": b,
            "n": n,
            "k": k,
            "density": density,
            "repeats": repeats,
            "chosen": "words" if CP._use_words(n, k) else "scatter",
            **{f"{w}_us_per_lane": 1e6 * s / b for w, s in secs.items()},
            **{f"{w}_compile_s": c for w, c in comp.items()},
            "scatter_over_words": secs["scatter"] / secs["words"],
        }
        print(
            f"{op:10s} {b}x{n}x{k}: words {row['words_us_per_lane']:9.3f} µs/lane, "
            f"scatter {row['scatter_us_per_lane']:9.3f} ({row['scatter_over_words']:.2f}x), "
            f"chosen {row['chosen']}"
        )
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--shapes", default=SHAPES, help="BxNxK, comma-separated")
    ap.add_argument("--density", type=float, default=0.3, help="share of True entries")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    info = env_info()
    rows = []
    for shape in filter(None, args.shapes.split(",")):
        b, n, k = (int(x) for x in shape.split("x"))
        rows += [info | r for r in measure(b, n, k, args.density, args.repeats)]
    append_rows(args.out, rows)
    print(f"wrote {len(rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
