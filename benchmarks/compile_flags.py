"""Compile seconds of one family's rollout under different XLA CPU flag sets.

Why: the test suite is compile-bound, and ``conftest.py`` picks its XLA flags from these
rows (LLVM -O0, and the loop emitters instead of the fusion emitters for every program but
the shared suite's, which compiles faster with fusion emitters). XLA reads its flags once
per process, so every (family, flag set) runs in a fresh interpreter; the persistent
compile cache is off. Each row holds trace + lower, compile and first-run seconds.

    python benchmarks/compile_flags.py                       # CART and POLICY, B = 64
    python benchmarks/compile_flags.py --families JOURNEY --repeats 3
    python benchmarks/compile_flags.py --cli C8 --batch 4096   # production candidates

``--cli TASKS`` times ``ecomjax run`` itself (compile apart, then steady-state episodes/s
over ``--rounds`` rounds) under flag sets that keep LLVM's optimiser: the question there
is whether a flag buys compile time without costing the run.

Rows go to benchmarks/results/compile_flags.jsonl. Compare flag sets as ratios within
one invocation: this machine is shared and noisy.
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

from rows_io import append_rows

OUT = Path(__file__).parent / "results" / "compile_flags.jsonl"
O0 = "--xla_backend_optimization_level=0 --xla_llvm_disable_expensive_passes=true"
FLAG_SETS = {
    "default": "",
    "llvm_O0": O0,
    "llvm_O0+loop_emitters": f"{O0} --xla_cpu_use_fusion_emitters=false",
}
# For production runs: LLVM -O2 kept.
CLI_FLAG_SETS = {
    "default": "",
    "no_expensive_passes": "--xla_llvm_disable_expensive_passes=true",
    "loop_emitters": "--xla_cpu_use_fusion_emitters=false",
    "no_expensive_passes+loop_emitters": (
        "--xla_llvm_disable_expensive_passes=true --xla_cpu_use_fusion_emitters=false"
    ),
}


def cli_cell(tasks: str, batch: int, rounds: int, flags: str) -> dict:
    """``ecomjax run`` in a fresh process under ``flags``, no persistent cache."""
    cmd = [sys.executable, "-m", "ecomjax.cli", "run", "--tasks", tasks, "--batch", str(batch)]
    cmd += ["--rounds", str(rounds), "--json", "--no-compile-cache"]
    env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
    wall = time.perf_counter() - t
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    return {
        "tasks": tasks,
        "batch": batch,
        "rounds": rounds,
        "compile_s": out["compile_s"],
        "episodes_per_s": out["episodes_per_s"],
        "wall_s": wall,
        "success": {t: v["success_rate"] for t, v in out["per_task"].items()},
    }


def cli_main(a) -> int:
    sys.path.insert(0, str(Path(__file__).parent))
    from throughput import env_info

    base = None
    for label, flags in CLI_FLAG_SETS.items():
        row = {**env_info(), **cli_cell(a.cli, a.batch, a.rounds, flags)}
        row.update(flags=label, xla_flags=flags, kind="cli")
        base = base or row
        row["compile_vs_default"] = row["compile_s"] / base["compile_s"]
        row["speed_vs_default"] = row["episodes_per_s"] / base["episodes_per_s"]
        append_rows(a.out, [row])
        print(
            f"{a.cli:6s} {label:36s} compile {row['compile_s']:6.1f}s "
            f"({row['compile_vs_default']:.2f}x)  {row['episodes_per_s']:8.0f} ep/s "
            f"({row['speed_vs_default']:.2f}x)"
        )
    return 0


def child(name: str, batch: int) -> dict:
    """One compile, in this (fresh) process."""
    import jax
    import jax.numpy as jnp

    sys.path.insert(0, str(Path(__file__).parent))
    from throughput import env_info, episode_inputs

    from ecomjax.agents.oracle import make_oracle
    from ecomjax.catalog.synthetic import generate_catalog
    from ecomjax.registry import family
    from ecomjax.rollout import run_batch_jit
    from ecomjax.types import EnvParams

    catalog, params = generate_catalog(42, 1000), EnvParams()
    fam = family(name)
    keys, d = episode_inputs(batch, 1)
    args = (catalog, keys, d, fam.generate, make_oracle((fam.env,)), params, None, (fam.env,))
    t = time.perf_counter()
    lowered = run_batch_jit.trace(*args).lower()
    lower_s = time.perf_counter() - t
    t = time.perf_counter()
    compiled = lowered.compile()
    compile_s = time.perf_counter() - t
    t = time.perf_counter()
    out = jax.block_until_ready(compiled(catalog, keys, d))
    run_s = time.perf_counter() - t
    return {
        **env_info(),
        "family": name,
        "batch": batch,
        "lower_s": lower_s,
        "compile_s": compile_s,
        "first_run_s": run_s,
        "success": float(jnp.mean(out.state.reward.is_correct)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", nargs="+", default=["CART", "POLICY"])
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=1, help="fresh processes per cell")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--cli", metavar="TASKS", help="time `ecomjax run --tasks TASKS`")
    ap.add_argument("--rounds", type=int, default=3, help="steady-state rounds (--cli)")
    ap.add_argument("--child", nargs=2, metavar=("FAMILY", "BATCH"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]))))
        return 0
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.cli:
        return cli_main(a)
    for name in a.families:
        base = None
        for label, flags in FLAG_SETS.items():
            rows = []
            for _ in range(a.repeats):
                env = {**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"}
                cmd = [sys.executable, __file__, "--child", name, str(a.batch)]
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            row = {**rows[0], "flags": label, "xla_flags": flags, "repeats": a.repeats}
            for k in ("lower_s", "compile_s", "first_run_s"):
                row[k] = statistics.median(r[k] for r in rows)
            base = base or row["compile_s"]
            row["compile_vs_default"] = row["compile_s"] / base
            append_rows(a.out, [row])
            print(
                f"{name:8s} {label:24s} lower {row['lower_s']:6.1f}s  compile "
                f"{row['compile_s']:6.1f}s ({row['compile_vs_default']:.2f}x)  "
                f"first run {row['first_run_s']:.2f}s  success {row['success']:.2f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
