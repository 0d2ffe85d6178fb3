"""Problem generation alone: each family's ``generate`` vmapped over a batch and jitted,
compile timed apart from the steady state (median of ``--repeats`` calls after a warm-up),
for a sweep of batch sizes. Rows to ``results/generators.jsonl``.

    python benchmarks/generators.py --batch 1024,4096
    PYTHONPATH=/path/to/old/worktree python benchmarks/generators.py --label OLD

Why a benchmark of its own: the stage profile (``step_profile.py``) showed generation to be
most of a STATUS or RETURN round (their generators build a 60-line order history by
rejection draws), and the whole-round A/B cannot say which stage moved.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax

from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.registry import family
from ecomjax.types import EnvParams

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import add_row_args, append_rows  # noqa: E402
from throughput import env_info, episode_inputs  # noqa: E402
from timing import compiled, median_s  # noqa: E402

OUT = Path(__file__).parent / "results" / "generators.jsonl"
FAMILIES = "PD,SUB,CART,RETURN,STATUS,POLICY,BUNDLE,JOURNEY"


def time_family(name: str, catalog, params, batch: int, repeats: int) -> dict:
    gen = family(name).generate
    keys, d = episode_inputs(batch, 1)
    fn, compile_s = compiled(
        lambda k, dd: jax.vmap(gen, (0, None, 0, None))(k, catalog, dd, params), keys, d
    )
    med, _ = median_s(fn, lambda r: episode_inputs(batch, 2 + r if r >= 0 else 1), repeats)
    return {
        "family": name,
        "batch": batch,
        "us_per_episode": med / batch * 1e6,
        "median_s": med,
        "compile_s": compile_s,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--families", default=FAMILIES)
    ap.add_argument("--batch", default="1024,4096", help="batch sizes, comma-separated")
    add_row_args(ap, OUT, repeats=5, label="")
    args = ap.parse_args(argv)
    catalog = generate_catalog(0, args.catalog_size)
    params = EnvParams()
    info = env_info()
    rows = []
    for batch in (int(b) for b in args.batch.split(",")):
        for name in args.families.split(","):
            row = time_family(name, catalog, params, batch, args.repeats)
            print(
                f"{args.label} {name:8s} B={batch:5d} {row['us_per_episode']:8.1f} us/episode"
                f"  compile {row['compile_s']:5.1f} s",
                flush=True,
            )
            rows.append(
                {**info, "kind": "generators", "label": args.label,
                 "catalog_size": args.catalog_size, "repeats": args.repeats, **row}
            )  # fmt: skip
    append_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
