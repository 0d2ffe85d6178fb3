"""``ecomjax run`` as 1, 2 and 4 processes of one jax.distributed run on this machine.

Each count is one launch of N fresh processes over loopback (one CPU device each,
``ecomjax.distributed.launch_local``); rows record process 0's steady-state episodes/s
and compile time, whether every process's digest equals the 1-process run's (the same
episodes and curriculum, bit for bit), and the cost of the round's one collective: the
all-gather of the batch's outcome columns (20 bytes an episode), timed alone in the same
processes (median of ``--reps`` after a warm-up, blocked until ready).

    python benchmarks/multiprocess.py --tasks C8 --batch 4096 --rounds 3
    python benchmarks/multiprocess.py --tasks C8 --local-devices 1,2,4   # one process

``--local-devices`` measures the other layout instead: one process whose round is split
over K host devices (``ecomjax run --devices K``), rows of kind "local_devices".

``--auto-reset STEPS`` measures training-mode rounds instead. Each device then hands out
its own episode ids, so N processes equal one process over N devices (compared in the
same launch sequence: ``same_digest_as_local_devices``), not the 1-process run; the round's
collective is the all-gather of its completions (``completion_bytes``, from the shapes).

``--shard-catalog`` runs every N > 1 twice in the same sequence, with the whole table on
each device and with the embedding rows split over the processes (``ecomjax run
--shard-catalog``), so the rows give the split's cost as a ratio of the same run, and what
one retrieval-loop trip sends (``search_trip_bytes``, from the shapes). Give it
``--agent random``: the oracle never searches.

The N processes share this machine's cores; the point is correctness and what the
collectives cost (on 2 cores C8 still ran faster with more processes: benchmarks/README.md).
Rows go to benchmarks/results/multiprocess.jsonl.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from rows_io import append_rows  # noqa: E402

from ecomjax.distributed import launch_local  # noqa: E402

OUT = Path(__file__).parent / "results" / "multiprocess.jsonl"
COLUMNS = 5  # runner.COLUMNS: success, r_total, r_task, r_eff, r_hall (float32)


def gather_cost(batch: int, reps: int = 50) -> dict:
    """Seconds per all-gather of a [batch, 5] float32 array split over every process's
    devices into a replicated one (what each round does), plus the env-steps psum."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from ecomjax.sharding import batch_mesh

    mesh = batch_mesh()
    n = mesh.shape["batch"]
    rows = np.arange(batch * COLUMNS, dtype=np.float32).reshape(batch, COLUMNS)
    x = jax.make_array_from_callback(
        rows.shape, NamedSharding(mesh, PartitionSpec("batch")), lambda i: rows[i]
    )

    @jax.jit
    def gather(x):
        full = jax.lax.with_sharding_constraint(x, NamedSharding(mesh, PartitionSpec()))
        return full, jnp.sum(x[:, 0]).astype(jnp.int32)

    jax.block_until_ready(gather(x))
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        jax.block_until_ready(gather(x))
        times.append(time.perf_counter() - t0)
    return {
        "gather_median_s": statistics.median(times),
        "bytes_in_per_process": batch * COLUMNS * 4 * (n - 1) // n,
        "processes": jax.process_count(),
    }


def completion_bytes(tasks: str, batch: int, n: int, steps: int) -> dict:
    """Bytes an auto-reset round gathers: steps x (recycle slots of all devices) rows of
    ``autoreset.Completed`` (ids, d, turns and the whole RewardInfo)."""
    import jax

    from ecomjax import autoreset
    from ecomjax.registry import resolve_tasks
    from ecomjax.runner import make_plan
    from ecomjax.sharding import shard_plan
    from ecomjax.types import zero_reward

    local, _ = shard_plan(make_plan(resolve_tasks(tasks), batch), n)
    rows = steps * n * sum(autoreset.default_slots(local))
    # One row as the round builds it: the same dtypes, so the size follows the dataclass.
    zero = jax.numpy.zeros((), jax.numpy.int32)
    row = autoreset.Completed(
        valid=jax.numpy.zeros((), bool),
        lane=zero,
        episode=zero,
        task=zero,
        d=zero,
        turns=zero,
        reward=zero_reward(),
    )
    per_row = sum(x.nbytes for x in jax.tree_util.tree_leaves(row))
    return {
        "gathered_rows": rows,
        "bytes_per_row": per_row,
        "bytes_in_per_process": rows * per_row * (n - 1) // n,
    }


def search_trip_bytes(catalog_size: int, n: int) -> dict:
    """Bytes into each device per trip of the split retrieval loop (``tools.search``): the
    other devices' query records (all_gather), their top-R blocks (all_to_all of scores,
    ids, |T|), and the embedding reads of ``finish_slot`` (two reference rows and the R
    shown dots per query). A turn makes as many trips as the busiest device needs."""
    import jax
    import jax.numpy as jnp

    from ecomjax import constants as C
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.core import reset
    from ecomjax.registry import family
    from ecomjax.tools.search import search_query
    from ecomjax.types import EnvParams, empty_action

    catalog, params = generate_catalog(42, catalog_size), EnvParams()

    def query(key):
        problem = family("PD").generate(key, catalog, jnp.int32(10), params)
        state, _ = reset(key, catalog, problem, params)
        return search_query(catalog, state, empty_action(catalog.embed_dim), jnp.int32(0))

    shapes = jax.eval_shape(query, jax.random.key(0))
    q_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree_util.tree_leaves(shapes))
    chunk, r, dim, others = params.search_batch, C.MAX_SEARCH_RESULTS, catalog.embed_dim, n - 1
    parts = {
        "query_records": others * chunk * q_bytes,
        "top_r_blocks": others * chunk * (r * 8 + 4),
        "emb_reads": others * chunk * (2 * (4 + dim * 4) + r * (4 + 4)),
    }
    return {"query_record_bytes": q_bytes, "search_trip_bytes": sum(parts.values()),
            "search_trip_parts": parts}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default="C8")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--processes", default="1,2,4")
    ap.add_argument("--local-devices", default=None, metavar="K,K,...")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--auto-reset", type=int, default=0, metavar="STEPS")
    ap.add_argument("--agent", default="oracle")
    ap.add_argument("--catalog-size", type=int, default=1000)
    ap.add_argument("--search-chunk", type=int, default=0)
    ap.add_argument("--shard-catalog", action="store_true")
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args(argv)
    from throughput import env_info

    info = env_info()
    py = sys.executable
    run = [py, "-m", "ecomjax.cli", "run", "--tasks", args.tasks, "--batch", str(args.batch)]
    run += ["--rounds", str(args.rounds), "--json", "--no-compile-cache"]
    run += ["--agent", args.agent, "--catalog-size", str(args.catalog_size)]
    if args.search_chunk:
        run += ["--search-chunk", str(args.search_chunk)]
    if args.auto_reset:
        run += ["--auto-reset", str(args.auto_reset)]
    if args.local_devices:
        return local_devices(run, [int(k) for k in args.local_devices.split(",")], args, info)
    rows, single, single_outcomes = [], None, None
    counts = [int(x) for x in args.processes.split(",")]
    layouts = [(n, False) for n in counts]
    if args.shard_catalog:
        layouts = [x for n in counts for x in ([(n, False)] + ([(n, True)] if n > 1 else []))]
    whole_rate = {}
    for n, split in layouts:
        t0 = time.perf_counter()
        argv = [*run, "--shard-catalog"] if split else run
        runs = launch_local(argv, n, timeout=None, env={"PYTHONPATH": str(ROOT)})
        wall = time.perf_counter() - t0
        bad = [r for r in runs if r.returncode != 0]
        if bad:
            print(bad[0].stderr[-3000:], file=sys.stderr)
            return 1
        reports = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
        lead = reports[0]
        if single is None and n == 1 and not args.auto_reset:
            single, single_outcomes = lead["digest"], lead["outcome_digest"]
        row = {
            "kind": "multiprocess",
            "tasks": args.tasks,
            "batch": args.batch,
            "rounds": args.rounds,
            "processes": n,
            "auto_reset": args.auto_reset,
            "agent": args.agent,
            "catalog_size": args.catalog_size,
            "search_chunk": args.search_chunk or None,
            "layout": "split_emb" if split else "whole",
            "episodes_per_s": lead["episodes_per_s"],
            "env_steps_per_s": lead["env_steps_per_s"],
            "compile_s": [r["compile_s"] for r in reports],
            "launch_wall_s": wall,
            "same_digest_all_processes": len({r["digest"] for r in reports}) == 1,
            "same_digest_as_1_process": None if single is None else lead["digest"] == single,
            # (task, d, success) only: exact across programs, unlike PD's reward floats
            "same_outcomes_as_1_process": None
            if single_outcomes is None
            else lead["outcome_digest"] == single_outcomes,
            **info,
        }
        if split:
            row["split_vs_whole_episodes_per_s"] = lead["episodes_per_s"] / whole_rate[n]
            row.update(search_trip_bytes(args.catalog_size, n))
        else:
            whole_rate[n] = lead["episodes_per_s"]
        if split:
            pass
        elif n > 1 and args.auto_reset:
            r = subprocess.run([*run, "--devices", str(n)], capture_output=True, text=True,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
            if r.returncode != 0:
                print(r.stderr[-3000:], file=sys.stderr)
                return 1
            one = json.loads(r.stdout.strip().splitlines()[-1])
            row["same_digest_as_local_devices"] = one["digest"] == lead["digest"]
            row["local_devices_episodes_per_s"] = one["episodes_per_s"]
            row.update(completion_bytes(args.tasks, args.batch, n, args.auto_reset))
        elif n > 1:
            check = [py, "-m", "ecomjax.distributed", "check", "multiprocess:gather_cost"]
            check.append(json.dumps({"batch": args.batch, "reps": args.reps}))
            costs = launch_local(check, n, timeout=None, env={"PYTHONPATH": f"{ROOT}/benchmarks"})
            if any(c.returncode for c in costs):
                print(costs[0].stderr[-3000:], file=sys.stderr)
                return 1
            row.update(json.loads(costs[0].stdout.strip().splitlines()[-1]))
            row["gather_share_of_round"] = row["gather_median_s"] / (
                args.batch / row["episodes_per_s"]
            )
        rows.append(row)
        print(json.dumps(row), flush=True)
    append_rows(args.out, rows)
    return 0


def local_devices(run: list[str], counts: list[int], args, info: dict) -> int:
    """One process per count K, its round split over K host devices; outcomes (task, d,
    success) compared with the first count's."""
    rows, first = [], None
    for k in counts:
        t0 = time.perf_counter()
        r = subprocess.run(
            [*run, "--devices", str(k)],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONPATH": str(ROOT)},
        )
        wall = time.perf_counter() - t0
        if r.returncode != 0:
            print(r.stderr[-3000:], file=sys.stderr)
            return 1
        rep = json.loads(r.stdout.strip().splitlines()[-1])
        first = first or rep
        row = {
            "kind": "local_devices",
            "tasks": args.tasks,
            "batch": args.batch,
            "rounds": args.rounds,
            "devices": k,
            "episodes_per_s": rep["episodes_per_s"],
            "env_steps_per_s": rep["env_steps_per_s"],
            "compile_s": rep["compile_s"],
            "launch_wall_s": wall,
            "speedup_vs_first": rep["episodes_per_s"] / first["episodes_per_s"],
            "same_outcomes_as_first": rep["outcome_digest"] == first["outcome_digest"],
            "same_curriculum_as_first": rep["curriculum_state"] == first["curriculum_state"],
            **info,
        }
        rows.append(row)
        print(json.dumps(row), flush=True)
    append_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
