"""Episodes per second per family and for the C8 mixed batch, plus the cost of exact
evaluation-pool scoring (PD/SUB F_end and IDCG over the whole catalog).

Protocol as in throughput.py: compile timed apart, block until ready, median of
``--repeats`` steady-state runs, JSONL rows with device and versions. Each run is one
jitted round of the runner: generate → step* → verify → curriculum.update over a static
plan of per-family slices, with d sampled per episode from d = 0..20 evenly.

    python benchmarks/families.py --n 100000 --batch 4096
    python benchmarks/families.py --n 1000 --batch 512 --tasks CART,PD

``--mode auto`` times the auto-reset rollout (``ecomjax.autoreset``: ended lanes start
their next episode) instead: calls of ``--steps`` steps from carried-over lanes, counting
completed episodes; the first call (all lanes starting at once) is a warm-up. ``--mode
both`` times the two back to back per task spec, so their ratio comes from one run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from ecomjax import autoreset as AR
from ecomjax import constants as C
from ecomjax import curriculum as cur
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.registry import family, resolve_tasks
from ecomjax.rollout import run_plan
from ecomjax.runner import make_plan
from ecomjax.types import EnvParams

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import append_rows  # noqa: E402
from throughput import env_info, episode_inputs  # noqa: E402

OUT = Path(__file__).parent / "results" / "families.jsonl"


def bench_plan(catalog, params, tasks: tuple[str, ...], batch: int, repeats: int) -> dict:
    plan = make_plan(tasks, batch)
    agent = make_oracle(tuple(family(t).env for t in tasks))
    cfg = cur.CurriculumConfig.default()
    task_ids = jnp.concatenate([jnp.full(n, i, jnp.int32) for i, (_, n) in enumerate(plan)])

    # The catalog is an argument, not a closure constant: XLA would otherwise constant-fold
    # catalog-wide sorts at compile time, for minutes at N = 100k.
    def round_fn(catalog, cstate, keys, d):
        res = run_plan(catalog, keys, d, plan, agent, params)
        r = res.state.reward
        cstate = cur.update(cstate, task_ids, d, r.is_correct, None, cfg, mode="stream")
        return cstate, r.is_correct, res.env_steps

    cstate = cur.init(len(tasks))
    keys, d = episode_inputs(batch, 0)
    t0 = time.perf_counter()
    compiled = jax.jit(round_fn).lower(catalog, cstate, keys, d).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(catalog, cstate, keys, d))
    times = []
    for r in range(repeats):
        keys, d = episode_inputs(batch, 1 + r)
        t0 = time.perf_counter()
        _, ok, steps = jax.block_until_ready(compiled(catalog, cstate, keys, d))
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    return {
        "tasks": ",".join(tasks),
        "batch": batch,
        "mode": "run_to_end",
        "episodes_per_s": batch / med,
        "env_steps_per_s": int(steps) / med,
        "median_s": med,
        "compile_s": compile_s,
        "success_rate": float(jnp.mean(ok)),
    }


def bench_autoreset(
    catalog, params, tasks: tuple[str, ...], batch: int, repeats: int, steps: int
) -> dict:
    """Completed episodes per second over calls of ``steps`` auto-reset steps."""
    plan = make_plan(tasks, batch)
    agent = make_oracle(tuple(family(t).env for t in tasks))
    key = jax.random.key(0)

    def sample_d(ids, task):  # d = 0..20 evenly, as episode_inputs
        return ids % (C.D_MAX + 1)

    def start(catalog):
        return AR.init(catalog, plan, agent, params)

    def advance(catalog, lanes):
        lanes, done, taken = AR.advance(catalog, lanes, key, plan, agent, params, sample_d, steps)
        return lanes, done.valid.sum(), (done.reward.is_correct & done.valid).sum(), taken

    t0 = time.perf_counter()
    lanes = jax.jit(start)(catalog)
    compiled = jax.jit(advance, donate_argnums=1).lower(catalog, lanes).compile()
    compile_s = time.perf_counter() - t0
    lanes = jax.block_until_ready(compiled(catalog, lanes)[0])  # warm-up: lanes fill up
    times, done, correct, taken = [], 0, 0, 0
    for _ in range(repeats):
        t0 = time.perf_counter()
        lanes, n, ok, k = jax.block_until_ready(compiled(catalog, lanes))
        times.append(time.perf_counter() - t0)
        done, correct, taken = done + int(n), correct + int(ok), taken + int(k)
    med = statistics.median(times)
    return {
        "tasks": ",".join(tasks),
        "batch": batch,
        "mode": "auto_reset",
        "steps": steps,
        "slots": list(AR.default_slots(plan)),
        "episodes_per_s": done / repeats / med,
        "env_steps_per_s": taken / repeats / med,
        "median_s": med,
        "compile_s": compile_s,
        "success_rate": correct / max(done, 1),
    }


def bench_pool(catalog, params, batch: int, repeats: int) -> dict:
    """Verification alone for PD and SUB episodes at termination of an oracle run."""
    from ecomjax.core import verify
    from ecomjax.rollout import _play

    out = {}
    for name in ("PD", "SUB"):
        fam = family(name)
        keys, d = episode_inputs(batch, 0)
        probs = jax.jit(jax.vmap(fam.generate, (0, None, 0, None)), static_argnums=3)(
            keys, catalog, d, params
        )
        agent = make_oracle((fam.env,))
        play = jax.jit(lambda c, k, p: _play(c, k, p, agent, params, 14, families=(fam.env,)))
        states = jax.block_until_ready(play(catalog, keys, probs).state)
        score = jax.jit(jax.vmap(lambda c, s: verify(c, s, params, (fam.env,)), (None, 0)))
        t0 = time.perf_counter()
        compiled = score.lower(catalog, states).compile()
        compile_s = time.perf_counter() - t0
        jax.block_until_ready(compiled(catalog, states))
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            jax.block_until_ready(compiled(catalog, states))
            times.append(time.perf_counter() - t0)
        med = statistics.median(times)
        out[name] = {"verify_s": med, "per_episode_us": 1e6 * med / batch, "compile_s": compile_s}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="catalog size")
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--tasks", default="C8,PD,SUB,CART,RETURN,STATUS,POLICY,BUNDLE,JOURNEY")
    ap.add_argument("--mode", default="end", choices=["end", "auto", "both"])
    ap.add_argument("--steps", type=int, default=32, help="steps per auto-reset call")
    ap.add_argument("--pool", action="store_true", help="also time PD/SUB verification alone")
    ap.add_argument("--pool-batch", type=int, default=1024)
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--label", default=None, help="tag the rows (ab_throughput.sh: the commit)")
    args = ap.parse_args(argv)
    catalog = generate_catalog(42, args.n)
    params = EnvParams()
    info = env_info()
    for spec in filter(None, args.tasks.split(",")):  # --tasks "" times the pool alone
        tasks = resolve_tasks(spec)
        modes = ("end", "auto") if args.mode == "both" else (args.mode,)
        for mode in modes:
            row = {"kind": "families", "spec": spec, "n_products": args.n, **info}
            if args.label is not None:
                row["label"] = args.label
            if mode == "end":
                row.update(bench_plan(catalog, params, tasks, args.batch, args.repeats))
            else:
                row.update(
                    bench_autoreset(catalog, params, tasks, args.batch, args.repeats, args.steps)
                )
            append_rows(args.out, [row])  # as it comes: a sweep cut short keeps its rows
            print(json.dumps(row), flush=True)
    if args.pool:
        for name, r in bench_pool(catalog, params, args.pool_batch, args.repeats).items():
            row = {"kind": "pool", "spec": name, "n_products": args.n, **info}
            row.update({"batch": args.pool_batch, **r})
            append_rows(args.out, [row])
            print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
