"""Success tables per family and per d for the reference and exploit agents.

Runs the same two mixed rollouts as the test suite (tests/test_invariants.py and
tests/test_mixed.py: one compile each, reused from the persistent compile cache when the
tests ran first) and prints markdown tables of IsCorrect counts per family and per d,
plus JSONL rows.

    python benchmarks/success_tables.py               # 10 episodes per (family, agent, d)
    python benchmarks/success_tables.py --per-d 50
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.agents import empty_cart_agent, random_agent, silent_agent
from ecomjax.agents.exploits import SHORTCUTS
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.rollout import run_plan_jit, slices
from ecomjax.types import EnvParams

sys.path.insert(0, str(Path(__file__).parent))
from throughput import env_info  # noqa: E402

OUT = Path(__file__).parent / "results" / "success_tables.jsonl"
ROOT = Path(__file__).resolve().parents[1]


def rates(plan, d, ok, names):
    """{(agent, family): {d: (correct, n)}}."""
    out = {}
    for (fam, a, b), entry in zip(slices(plan), plan, strict=True):
        dd, oo = np.asarray(d[a:b]), ok[a:b]
        out[(names[entry[2]], fam)] = {
            int(level): (int(oo[dd == level].sum()), int((dd == level).sum()))
            for level in np.unique(dd)
        }
    return out


def table(title: str, rows: dict, levels: list[int]) -> str:
    head = "| " + title + " | " + " | ".join(str(x) for x in levels) + " | all |"
    sep = "|---|" + "---:|" * (len(levels) + 1)
    lines = [head, sep]
    for (agent, fam), per in rows.items():
        cells = [f"{per[x][0]}/{per[x][1]}" if x in per else "" for x in levels]
        c = sum(v[0] for v in per.values())
        n = sum(v[1] for v in per.values())
        lines.append(f"| {fam} {agent} | " + " | ".join(cells) + f" | {c}/{n} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--per-d", type=int, default=10)
    ap.add_argument("--exploit-per-d", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    jax.config.update("jax_compilation_cache_dir", str(ROOT / ".jax_cache"))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 2.0)
    catalog = generate_catalog(42, 1000)
    params = EnvParams()
    # The reference agents, as in conftest.suite.
    names = ("oracle", "random", "silent", "empty")
    agents = (make_oracle(), random_agent, silent_agent, empty_cart_agent)
    n = 21 * args.per_d
    plan = tuple((name, n, j) for j in range(len(agents)) for name in C.ENV_NAMES)
    total = n * len(plan)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(2025), i))(jnp.arange(total))
    d = jnp.arange(total, dtype=jnp.int32) % 21
    res = run_plan_jit(catalog, keys, d, plan, agents, params)
    ref = rates(plan, d, np.asarray(res.state.reward.is_correct), names)
    # The exploit agents, as in tests/test_mixed.py.
    ex_names = tuple(sorted(SHORTCUTS))
    ex_agents = tuple(SHORTCUTS[x][0] for x in ex_names)
    per = args.exploit_per_d
    ex_plan = tuple(
        (C.ENV_NAMES[e], 19 * per, j) for j, x in enumerate(ex_names) for e in SHORTCUTS[x][1]
    )
    ex_total = sum(entry[1] for entry in ex_plan)
    ex_keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(99), i))(jnp.arange(ex_total))
    ex_d = 2 + jnp.arange(ex_total, dtype=jnp.int32) % 19
    ex_res = run_plan_jit(catalog, ex_keys, ex_d, ex_plan, ex_agents, params)
    ex = rates(ex_plan, ex_d, np.asarray(ex_res.state.reward.is_correct), ex_names)
    info = env_info()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("a") as f:
        for (agent, fam), per_d in {**ref, **ex}.items():
            for level, (c, m) in per_d.items():
                row = {"agent": agent, "family": fam, "d": level, "correct": c, "n": m, **info}
                f.write(json.dumps(row) + "\n")
    keep = {k: v for k, v in ref.items() if k[0] in ("oracle", "random")}
    print(table("family agent \\ d", keep, list(range(21))))
    print()
    print(table("exploit \\ d", ex, list(range(2, 21))))
    return 0


if __name__ == "__main__":
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    sys.exit(main())
