"""Episodes per second and peak memory against catalog size N and batch size B.

Each configuration (collection, N, B) runs in its own subprocess under a wall-clock
timeout, so peak memory is per configuration and a configuration that does not finish
in time is recorded as such (with how far it got) instead of stalling the sweep. Inside,
the protocol of throughput.py: one jitted ``run_plan`` round (oracle agent, d spread
over 0..20, catalog passed as an argument), compile timed apart, a warm-up run, then the
median of ``--repeats`` blocked runs with fresh keys.

Memory: the device allocator's ``peak_bytes_in_use`` where the backend reports it (GPU,
TPU; ``mem_source = "device"``), else the process's peak resident set size from
``getrusage`` (``mem_source = "rss"``: host memory of the whole process, so it includes
the catalog, its build, XLA's compiler and Python).

    python benchmarks/scale.py                                  # the full sweep
    python benchmarks/scale.py --tasks C1 --n-sweep 1000 100000 --b-sweep --timeout 300

Each row names the Seen / out-of-stock layout (``ecomjax.exposure``): up to N = 197k the
default keeps per-episode bitmaps over N, past it a sorted id list of a fixed capacity, so
per-episode memory stops growing with N. Retrieval and the PD/SUB exact pools still scan
all N rows (chunked), so their cost grows with N.
Rows go to benchmarks/results/scale.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

from rows_io import append_rows

OUT = Path(__file__).parent / "results" / "scale.jsonl"
PROGRESS = "PROGRESS "


def _progress(**kw) -> None:
    print(PROGRESS + json.dumps(kw), flush=True)


def one(tasks: str, n: int, b: int, repeats: int) -> dict:
    """Run one configuration in this process; returns its row."""
    import jax
    import jax.numpy as jnp

    from ecomjax import exposure
    from ecomjax.agents.oracle import make_oracle
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.registry import family, resolve_tasks
    from ecomjax.rollout import run_plan
    from ecomjax.runner import make_plan
    from ecomjax.types import EnvParams

    sys.path.insert(0, str(Path(__file__).parent))
    from throughput import env_info, episode_inputs

    t0 = time.perf_counter()
    catalog = jax.block_until_ready(generate_catalog(42, n))
    catalog_s = time.perf_counter() - t0
    _progress(stage="catalog", catalog_s=catalog_s)
    names = resolve_tasks(tasks)
    plan = make_plan(names, b)
    agent = make_oracle(tuple(family(t).env for t in names))
    params = EnvParams()

    def round_fn(catalog, keys, d):
        res = run_plan(catalog, keys, d, plan, agent, params)
        return res.state.reward.is_correct, res.env_steps

    keys, d = episode_inputs(b, 0)
    t0 = time.perf_counter()
    compiled = jax.jit(round_fn).lower(catalog, keys, d).compile()
    compile_s = time.perf_counter() - t0
    _progress(stage="compiled", compile_s=compile_s)
    t0 = time.perf_counter()
    jax.block_until_ready(compiled(catalog, keys, d))
    first_s = time.perf_counter() - t0
    _progress(stage="warm", first_run_s=first_s)
    times, ok, steps = [], None, 0
    for r in range(repeats):
        keys, d = episode_inputs(b, 1 + r)
        t0 = time.perf_counter()
        ok, steps = jax.block_until_ready(compiled(catalog, keys, d))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    cap = exposure.capacity(n, params)
    dev = jax.devices()[0]
    try:
        stats = dev.memory_stats() or {}
    except Exception:  # noqa: BLE001 - not implemented on every backend
        stats = {}
    if "peak_bytes_in_use" in stats:
        mem, source = int(stats["peak_bytes_in_use"]), "device"
    else:
        mem, source = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024, "rss"
    return env_info() | {
        "kind": "scale",
        "status": "ok",
        "tasks": tasks,
        "N": n,
        "B": b,
        "catalog_bytes": catalog.nbytes(),
        "catalog_build_s": catalog_s,
        "compile_s": compile_s,
        "first_run_s": first_s,
        "median_s": med,
        "repeats": repeats,
        "episodes_per_s": b / med,
        "env_steps_per_s": int(steps) / med,
        "success_rate": float(jnp.mean(ok)),
        "peak_mem_bytes": mem,
        "mem_source": source,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "exposure": "dense" if cap is None else "sparse",
        "exposure_capacity": cap,
        "search_batch": params.search_batch,
    }


def _rss(pid: int) -> int:
    """Resident bytes of a live process (Linux /proc; 0 where unavailable)."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def run_config(
    tasks: str, n: int, b: int, repeats: int, timeout: float, mem_limit: float | None = None
) -> dict:
    """One configuration in a subprocess; a timeout row keeps the stages it reached.

    With ``mem_limit`` (bytes) the child is polled and stopped once its resident memory
    passes it (status ``memory_limit``), so a sweep on a shared host stays within bounds."""
    cmd = [sys.executable, __file__, "--one", json.dumps([tasks, n, b, repeats])]
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    status, seen = None, 0
    with ThreadPoolExecutor(1) as pool:  # drain pipes while polling
        pending = pool.submit(proc.communicate)
        while status is None:
            try:
                out, err = pending.result(timeout=0.5)
                status = "ok" if proc.returncode == 0 else f"error rc={proc.returncode}"
            except FutureTimeout:
                seen = max(seen, _rss(proc.pid))
                if time.perf_counter() - t0 > timeout:
                    status = "timeout"
                elif mem_limit is not None and seen > mem_limit:
                    status = "memory_limit"
                if status is not None:
                    proc.kill()
                    out, err = pending.result()
    reached: dict = {}
    row = None
    for line in out.splitlines():
        if line.startswith(PROGRESS):
            reached.update(json.loads(line[len(PROGRESS) :]))
        elif line.startswith("{"):
            row = json.loads(line)
    if status == "ok" and row is not None:
        return row
    return {
        "kind": "scale",
        "status": status,
        "tasks": tasks,
        "N": n,
        "B": b,
        "timeout_s": timeout,
        "elapsed_s": time.perf_counter() - t0,
        "max_rss_seen_bytes": seen,
        **reached,
        "stderr_tail": err[-500:] if status.startswith("error") else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", nargs="+", default=["C1", "C8"])
    ap.add_argument(
        "--n-sweep", type=int, nargs="*", default=[1000, 10_000, 100_000, 1_000_000, 2_000_000]
    )
    ap.add_argument("--b-for-n", type=int, default=256, help="B during the N sweep")
    ap.add_argument("--b-sweep", type=int, nargs="*", default=[64, 256, 1024, 4096])
    ap.add_argument("--n-for-b", type=int, default=10_000, help="N during the B sweep")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per configuration")
    ap.add_argument("--budget", type=float, default=None, help="seconds for the whole sweep")
    ap.add_argument(
        "--mem-limit-gib", type=float, default=None, help="stop a config past this host RSS"
    )
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--one", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.one:
        print(json.dumps(one(*json.loads(args.one))), flush=True)
        return 0
    configs = []
    for tasks in args.tasks:
        configs += [(tasks, n, args.b_for_n) for n in args.n_sweep]
        configs += [(tasks, args.n_for_b, b) for b in args.b_sweep if b != args.b_for_n]
        if args.n_for_b not in args.n_sweep and args.b_for_n in args.b_sweep:
            configs.append((tasks, args.n_for_b, args.b_for_n))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    for tasks, n, b in configs:
        timeout = args.timeout
        if args.budget is not None:
            timeout = min(timeout, args.budget - (time.perf_counter() - start))
            if timeout < 10:
                print(f"budget spent: skipping {tasks} N={n} B={b}", flush=True)
                continue
        limit = None if args.mem_limit_gib is None else args.mem_limit_gib * 2**30
        row = run_config(tasks, n, b, args.repeats, timeout, limit)
        row["sweep_pid"] = os.getpid()
        append_rows(args.out, [row])
        if row["status"] == "ok":
            gib = row["peak_mem_bytes"] / 2**30
            print(
                f"{tasks} N={n:>8} B={b:>5}: {row['episodes_per_s']:>9,.1f} episodes/s  "
                f"peak {gib:.2f} GiB ({row['mem_source']})  compile {row['compile_s']:.0f}s",
                flush=True,
            )
        else:
            print(
                f"{tasks} N={n:>8} B={b:>5}: {row['status']} after {row['elapsed_s']:.0f}s, "
                f"reached { ({k: row[k] for k in row if k.endswith('_s')}) }",
                flush=True,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
