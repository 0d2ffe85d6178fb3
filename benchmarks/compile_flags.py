"""Compile seconds of one family's rollout under different XLA CPU flag sets.

Why: the test suite is compile-bound, and ``conftest.py`` picks its XLA flags from these
rows (LLVM -O0, and the loop emitters instead of the fusion emitters for every program but
the shared suite's, which compiles faster with fusion emitters). XLA reads its flags once
per process, so every (family, flag set) runs in a fresh interpreter; the persistent
compile cache is off. Each row holds trace + lower, compile and first-run seconds.

    python benchmarks/compile_flags.py                       # CART and POLICY, B = 64
    python benchmarks/compile_flags.py --families JOURNEY --repeats 3

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
    ap.add_argument("--child", nargs=2, metavar=("FAMILY", "BATCH"), help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.child:
        print(json.dumps(child(a.child[0], int(a.child[1]))))
        return 0
    a.out.parent.mkdir(parents=True, exist_ok=True)
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
