"""Cold and warm start-up of ``ecomjax run`` and ``ecomjax serve`` through the persistent
compilation cache.

Each launch is a fresh interpreter (as a user's would be) against an empty cache
directory first (cold), then against the directory the cold launch filled (warm). For
``run`` it records the process wall time and the compile time the run reports
(``--json``); for ``serve`` (``--serve``) the time from launch until ``/health`` says
ready (every ``--tasks`` family compiled by the background warm-up) and the warm-up's own
elapsed time.

    python benchmarks/startup.py --tasks C8 --batch 4096
    python benchmarks/startup.py --tasks CART,STATUS --batch 1024
    python benchmarks/startup.py --serve --tasks "C8;CART"

Rows go to benchmarks/results/startup.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch_serve(tasks: str, cache: Path, timeout_s: float = 1800.0) -> dict:
    """Seconds from launching ``ecomjax serve`` until ``/health`` reports ready."""
    port = free_port()
    cmd = [sys.executable, "-m", "ecomjax.cli", "serve", "--port", str(port), "--tasks", tasks]
    env = {**os.environ, "ECOMJAX_CACHE_DIR": str(cache)}
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        while time.perf_counter() - t0 < timeout_s:
            if proc.poll() is not None:
                raise RuntimeError(f"ecomjax serve exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5) as r:
                    health = json.loads(r.read())
            except OSError:
                health = None
            if health is not None and health["ready"]:
                return {"wall_s": time.perf_counter() - t0,
                        "compile_s": health["warmup"]["elapsed_s"]}  # fmt: skip
            time.sleep(0.5)
        raise TimeoutError("the server never became ready")
    finally:
        proc.terminate()
        proc.wait(60)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default="C8", help="one spec per measurement, ';'-separated")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--serve", action="store_true", help="measure ecomjax serve's warm-up")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    info = env_info()
    for spec in filter(None, args.tasks.split(";")):
        cmd = [sys.executable, "-m", "ecomjax.cli", "run", "--tasks", spec, "--rounds", "1"]
        cmd += ["--batch", str(args.batch), "--json"]
        with tempfile.TemporaryDirectory() as tmp:
            if args.serve:
                cold, warm = launch_serve(spec, Path(tmp)), launch_serve(spec, Path(tmp))
            else:
                cold, warm = launch(cmd, Path(tmp)), launch(cmd, Path(tmp))
        row = info | {
            "kind": "startup",
            "entry": "ecomjax serve (until /health is ready)" if args.serve else "ecomjax run",
            "tasks": spec,
            "batch": None if args.serve else args.batch,
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
