"""Same-run A/B of the retrieval stage: ``ecomjax/tools/search.py`` at a past commit
against the working tree, on the same oracle states and actions, in one process.

The past file is loaded from git as its own module (it imports the rest of the package
from this tree), so the comparison isolates search.py. For each family and each of the
oracle's first turns it checks that both sides return identical results (every field,
bit for bit) and times ``resolve_batch`` alternately (old, new, old, new, ...).

    python benchmarks/ab_retrieval.py --rev 64b66cb --tasks PD,SUB,BUNDLE,RETURN

Rows (µs per episode, medians) go to benchmarks/results/ab_retrieval.jsonl.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import jax

from ecomjax import constants as C
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.core import reset
from ecomjax.registry import family
from ecomjax.rollout import AGENT_STREAM, step_batch
from ecomjax.tools import search as new_search
from ecomjax.types import EnvParams

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import ROOT, append_rows  # noqa: E402
from throughput import env_info, episode_inputs  # noqa: E402

OUT = Path(__file__).parent / "results" / "ab_retrieval.jsonl"


def load_old(rev: str):
    """search.py as it was at ``rev``, imported under a module name of its own."""
    text = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:ecomjax/tools/search.py"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    path = Path(tempfile.mkdtemp()) / "search_at_rev.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location("search_at_rev", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rev", required=True, help="the past commit whose search.py is side A")
    ap.add_argument("--tasks", default="PD,SUB,BUNDLE,RETURN")
    ap.add_argument("--batch", type=int, default=2048)
    ap.add_argument("--catalog-size", type=int, default=1000)
    ap.add_argument("--turns", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    old_search = load_old(args.rev)
    catalog = generate_catalog(42, args.catalog_size)
    params, b = EnvParams(), args.batch
    info = env_info() | {"rev_old": args.rev, "B": b, "catalog_size": args.catalog_size}
    rows = []
    for name in args.tasks.split(","):
        fam = family(name)
        agent = make_oracle((fam.env,))
        keys, d = episode_inputs(b, 1)
        gen = jax.jit(jax.vmap(fam.generate, (0, None, 0, None)), static_argnums=3)
        problems = gen(keys, catalog, d, params)
        rst = jax.jit(jax.vmap(reset, (0, None, 0, None)), static_argnums=3)
        states, ts = rst(keys, catalog, problems, params)
        akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
        memory = jax.jit(jax.vmap(agent.init, (0, 0, None)))(akeys, ts.observation, catalog)
        act = jax.jit(lambda c, k, m, o: jax.vmap(agent.act, (0, 0, 0, None))(k, m, o, c))
        present = (int(fam.env),)
        stp = jax.jit(lambda c, s, a, lv: step_batch(c, s, a, params, lv, present))
        obs = ts.observation
        for turn in range(args.turns):
            memory, actions = act(catalog, akeys, memory, obs)
            live = states.dialogue.termination == C.Termination.RUNNING
            sides = {}
            for side, mod in (("old", old_search), ("new", new_search)):
                fn = jax.jit(lambda c, s, a, lv, mod=mod: mod.resolve_batch(c, s, a, params, lv))
                sides[side] = fn.lower(catalog, states, actions, live).compile()
            outs = {k: f(catalog, states, actions, live) for k, f in sides.items()}
            same = all(
                bool((x == y).all())
                for x, y in zip(*(jax.tree_util.tree_leaves(o) for o in outs.values()), strict=True)
            )
            times: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(args.repeats):
                for side, f in sides.items():
                    t0 = time.perf_counter()
                    jax.block_until_ready(f(catalog, states, actions, live))
                    times[side].append(time.perf_counter() - t0)
            us = {k: 1e6 * statistics.median(v) / b for k, v in times.items()}
            searches = int(((actions.tool == C.Tool.CATALOG_SEARCH) & live[:, None]).sum())
            row = info | {
                "kind": "ab_retrieval",
                "spec": name,
                "turn": turn + 1,
                "searches": searches,
                "identical": same,
                "old_us_per_episode": us["old"],
                "new_us_per_episode": us["new"],
            }
            rows.append(row)
            print(
                f"{name:7s} turn {turn + 1}: {searches:5d} searches, identical {same}, "
                f"old {us['old']:7.1f}  new {us['new']:7.1f} µs/episode",
                flush=True,
            )
            states, ts = stp(catalog, states, actions, live)
            obs = ts.observation
    append_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
