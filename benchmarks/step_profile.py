"""Where a batched CART turn spends its time: each stage of a rollout jitted and timed
alone at one batch size (the stages fuse differently inside the whole rollout, so the
parts need not add up to it; they show the proportions).

    python benchmarks/step_profile.py --batch 4096

Stages: generate, reset, the agent's act, the retrieval stage, the whole step (through
``rollout.step_batch``), and inside the step the tool loop, Seen marking and stock shocks,
each on the second turn's states and actions. Median of ``--repeats`` after a warm-up;
rows (microseconds per episode) go to benchmarks/results/step_profile.jsonl.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from ecomjax import constants as C
from ecomjax import difficulty as D
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.core import reset
from ecomjax.envs.cart.generator import generate
from ecomjax.rollout import AGENT_STREAM, step_batch
from ecomjax.shocks import apply_shocks
from ecomjax.tools.execute import mark_seen, run_tools, slot_tools
from ecomjax.tools.search import resolve_batch
from ecomjax.types import EnvParams

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import append_rows  # noqa: E402
from throughput import env_info, episode_inputs  # noqa: E402

OUT = Path(__file__).parent / "results" / "step_profile.jsonl"
CART = (C.Env.CART,)


def timed(fn, *args, repeats: int) -> tuple[float, object]:
    compiled = jax.jit(fn).lower(*args).compile()
    out = jax.block_until_ready(compiled(*args))
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--batch", type=int, default=4096)
    ap.add_argument("--catalog-size", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    b, params = args.batch, EnvParams()
    catalog = generate_catalog(42, args.catalog_size)
    agent = make_oracle(CART)
    keys, d = episode_inputs(b, 1)
    live = jnp.ones(b, bool)
    stages: dict[str, float] = {}

    def stage(name, fn, *a):
        sec, out = timed(fn, *a, repeats=args.repeats)
        stages[name] = 1e6 * sec / b
        print(f"{name:10s} {stages[name]:8.1f} µs per episode", flush=True)
        return out

    problems = stage(
        "generate",
        lambda c, k, dd: jax.vmap(generate, (0, None, 0, None))(k, c, dd, params),
        catalog,
        keys,
        d,
    )
    states, ts = stage(
        "reset",
        lambda c, k, p: jax.vmap(reset, (0, None, 0, None))(k, c, p, params),
        catalog,
        keys,
        problems,
    )
    akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
    memory = jax.vmap(agent.init, (0, 0, None))(akeys, ts.observation, catalog)
    act = jax.jit(lambda c, k, m, o: jax.vmap(agent.act, (0, 0, 0, None))(k, m, o, c))
    memory, actions = act(catalog, akeys, memory, ts.observation)
    states, ts = jax.jit(lambda c, s, a: step_batch(c, s, a, params, live, CART))(
        catalog, states, actions
    )
    # The second turn: the oracle adds to the cart, so the tool loop does real work.
    _, actions = stage(
        "agent_act",
        lambda c, k, m, o: jax.vmap(agent.act, (0, 0, 0, None))(k, m, o, c),
        catalog,
        akeys,
        memory,
        ts.observation,
    )
    search = stage(
        "retrieval", lambda c, s, a: resolve_batch(c, s, a, params, live), catalog, states, actions
    )
    stage(
        "step",
        lambda c, s, a: step_batch(c, s, a, params, live, CART, search),
        catalog,
        states,
        actions,
    )
    calls = slot_tools(actions.tool)
    world, _, results = stage(
        "tool_loop",
        lambda c, s, a, r: jax.vmap(lambda s, a, r: run_tools(c, s.problem, s.world, a, r, calls))(
            s, a, r
        ),
        catalog,
        states,
        actions,
        search,
    )
    stage(
        "mark_seen",
        lambda c, w, r: jax.vmap(lambda w, r: mark_seen(w, r, c.n_products, calls))(w, r),
        catalog,
        world,
        results,
    )

    def shocks(c, s):
        def one(s):
            hazard = D.difficulty(s.problem.d, params.overrides).shock_hazard
            return apply_shocks(s.key, c, s.problem, s.world, s.dialogue.turn + 1, hazard)

        return jax.vmap(one)(s)

    stage("shocks", shocks, catalog, states)
    row = env_info() | {
        "kind": "step_profile",
        "B": b,
        "catalog_size": args.catalog_size,
        "repeats": args.repeats,
        "us_per_episode": stages,
    }
    append_rows(args.out, [row])
    print(f"wrote 1 row to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
