"""Cold and warm start-up of ``ecomjax run`` through the persistent compilation cache.

Each launch is a fresh interpreter (as a user's would be) against an empty cache
directory first (cold), then against the directory the cold launch filled (warm). It
records the process wall time and the compile time the run reports (``--json``).

    python benchmarks/startup.py --tasks C8 --batch 4096
    python benchmarks/startup.py --tasks CART,STATUS --batch 1024

Rows go to benchmarks/results/startup.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rows_io import append_rows
from throughput import env_info

OUT = Path(__file__).parent / "results" / "startup.jsonl"


def launch(cmd: list[str], cache: Path) -> dict:
    env = {**os.environ, "ECOMJAX_CACHE_DIR": str(cache)}
    t0 = time.perf_counter()
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t0
    summary = json.loads(out.stdout.strip().splitlines()[-1])
    return {"wall_s": wall, "compile_s": summary["compile_s"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default="C8", help="one spec per measurement, ';'-separated")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    info = env_info()
    for spec in filter(None, args.tasks.split(";")):
        cmd = [sys.executable, "-m", "ecomjax.cli", "run", "--tasks", spec, "--rounds", "1"]
        cmd += ["--batch", str(args.batch), "--json"]
        with tempfile.TemporaryDirectory() as tmp:
            cold = launch(cmd, Path(tmp))
            warm = launch(cmd, Path(tmp))
        row = info | {
            "kind": "startup",
            "entry": "ecomjax run",
            "tasks": spec,
            "batch": args.batch,
            "cold_wall_s": cold["wall_s"],
            "cold_compile_s": cold["compile_s"],
            "warm_wall_s": warm["wall_s"],
            "warm_compile_s": warm["compile_s"],
        }
        append_rows(args.out, [row])
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
