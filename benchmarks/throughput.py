"""Full CART episodes per second, batched on device versus looped in Python.

Protocol (DESIGN, after xland-minigrid): compile time is measured apart (lower + compile),
every timed call blocks until ready, each point is the median of ``--repeats`` runs, the
batch size is swept on a log scale, and every row is a JSONL record with device and
versions. The looped baseline drives the same episodes one at a time through the
unbatched jitted functions, in the same run, so the batching gain is a same-machine ratio.

    python benchmarks/throughput.py                      # B = 2^7 .. 2^14
    python benchmarks/throughput.py --sizes 128 4096 --loop-episodes 32
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
from rows_io import add_row_args, append_rows, git_commit

from ecomjax import constants as C
from ecomjax.agents import AGENTS
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.core import reset, step
from ecomjax.envs.cart.generator import generate
from ecomjax.rollout import run_batch
from ecomjax.types import EnvParams

OUT = Path(__file__).parent / "results" / "throughput.jsonl"
CART = (C.Env.CART,)


def env_info() -> dict:
    dev = jax.devices()[0]
    return {
        "device": f"{dev.platform}:{getattr(dev, 'device_kind', '')}",
        "n_devices": jax.device_count(),
        "jax": jax.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "commit": git_commit(),
    }


def episode_inputs(b: int, seed: int) -> tuple[jax.Array, jax.Array]:
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(b))
    return keys, jnp.arange(b, dtype=jnp.int32) % (C.D_MAX + 1)


def state_bytes(catalog, params) -> int:
    key = jax.random.key(0)
    problem = generate(key, catalog, jnp.int32(0), params)
    state, _ = reset(key, catalog, problem, params)
    total = 0
    for x in jax.tree_util.tree_leaves(state):
        if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        total += x.size * x.dtype.itemsize
    return int(total)


def bench_batched(catalog, params, agent, b: int, repeats: int, seed: int) -> dict:
    keys, d = episode_inputs(b, seed)
    fn = jax.jit(lambda c, k, dd: run_batch(c, k, dd, generate, agent, params, families=CART))
    t0 = time.perf_counter()
    compiled = fn.lower(catalog, keys, d).compile()
    compile_s = time.perf_counter() - t0
    jax.block_until_ready(compiled(catalog, keys, d))  # warm-up
    times, steps = [], 0
    for r in range(repeats):
        keys, d = episode_inputs(b, seed + 1 + r)
        t0 = time.perf_counter()
        res = jax.block_until_ready(compiled(catalog, keys, d))
        times.append(time.perf_counter() - t0)
        steps = int(res.env_steps)
        correct = float(jnp.mean(res.state.reward.is_correct))
    med = statistics.median(times)
    return {
        "mode": "batched",
        "B": b,
        "compile_s": compile_s,
        "median_s": med,
        "episodes_per_s": b / med,
        "env_steps_per_s": steps / med,
        "repeats": repeats,
        "success_rate": correct,
    }


def bench_looped(catalog, params, agent, n: int, seed: int) -> dict:
    """The same episode stream, one episode at a time through unbatched jitted functions."""
    gen = jax.jit(generate, static_argnums=3)
    rst = jax.jit(reset, static_argnums=3)
    stp = jax.jit(step, static_argnums=3)
    act = jax.jit(agent.act)
    keys, d = episode_inputs(n, seed)

    def one(i: int) -> int:
        key = keys[i]
        problem = gen(key, catalog, d[i], params)
        state, ts = rst(key, catalog, problem, params)
        akey = jax.random.fold_in(key, 0xA6E)
        memory = agent.init(akey, ts.observation, catalog)
        turns = 0
        for t in range(4 + C.D_MAX // 2):
            memory, action = act(jax.random.fold_in(akey, t), memory, ts.observation, catalog)
            state, ts = stp(catalog, state, action, params)
            turns += 1
            if bool(ts.observation.done):
                break
        return turns

    t0 = time.perf_counter()
    one(0)  # compiles everything once
    compile_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    steps = sum(one(i) for i in range(n))
    elapsed = time.perf_counter() - t0
    return {
        "mode": "looped",
        "B": 1,
        "episodes": n,
        "compile_s": compile_s,
        "median_s": elapsed / n,
        "episodes_per_s": n / elapsed,
        "env_steps_per_s": steps / elapsed,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--sizes", type=int, nargs="*", default=[2**k for k in range(7, 15)])
    add_row_args(ap, OUT, repeats=3)
    ap.add_argument("--agent", default="oracle", choices=sorted(AGENTS))
    ap.add_argument("--loop-episodes", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)

    catalog = generate_catalog(42, args.catalog_size)
    params = EnvParams()
    agent = make_oracle(CART) if args.agent == "oracle" else AGENTS[args.agent]
    info = env_info() | {
        "agent": args.agent,
        "catalog_size": args.catalog_size,
        "state_bytes_per_episode": state_bytes(catalog, params),
    }
    if args.label is not None:
        info["label"] = args.label
    rows = []
    looped = bench_looped(catalog, params, agent, args.loop_episodes, args.seed)
    rows.append(info | looped)
    print(f"looped: {looped['episodes_per_s']:.1f} episodes/s (compile {looped['compile_s']:.1f}s)")
    for b in args.sizes:
        row = bench_batched(catalog, params, agent, b, args.repeats, args.seed)
        row["speedup_vs_looped"] = row["episodes_per_s"] / looped["episodes_per_s"]
        rows.append(info | row)
        print(
            f"B={b:>6}: {row['episodes_per_s']:>10,.0f} episodes/s "
            f"{row['env_steps_per_s']:>10,.0f} env-steps/s  compile {row['compile_s']:.1f}s  "
            f"x{row['speedup_vs_looped']:.0f} vs looped"
        )
        sys.stdout.flush()
    print(f"wrote {append_rows(args.out, rows)} rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
