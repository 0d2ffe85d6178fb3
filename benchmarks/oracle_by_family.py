"""Oracle IsCorrect per family on a large catalog: which families' oracle plans stop
working as N grows, at which d, and how the episodes ended.

    python benchmarks/oracle_by_family.py --n 100000
    python benchmarks/oracle_by_family.py --n 2000000 --families SUB,PD --per-d 2

One ``run_batch`` per family (its own oracle, d = 0..20, ``--per-d`` episodes each); rows
go to benchmarks/results/oracle_by_family.jsonl.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from rows_io import append_rows
from throughput import env_info

from ecomjax import constants as C
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.registry import family
from ecomjax.rollout import families_for, run_batch_jit
from ecomjax.types import EnvParams

OUT = Path(__file__).parent / "results" / "oracle_by_family.jsonl"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="catalog size")
    ap.add_argument("--families", default="PD,SUB,CART,RETURN,STATUS,POLICY,BUNDLE")
    ap.add_argument("--per-d", type=int, default=3, help="episodes per d")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    catalog = generate_catalog(42, args.n)
    b = (C.D_MAX + 1) * args.per_d
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(5), i))(jnp.arange(b))
    d = jnp.arange(b, dtype=jnp.int32) % (C.D_MAX + 1)
    rows = []
    for name in args.families.split(","):
        fam = family(name.strip().upper())
        fams = families_for(fam.env)
        t0 = time.perf_counter()
        res = run_batch_jit(
            catalog, keys, d, fam.generate, make_oracle((fam.env,)), EnvParams(), families=fams
        )
        ok = np.asarray(res.state.reward.is_correct)
        bad = np.flatnonzero(~ok)
        term = np.asarray(res.state.dialogue.termination)[bad]
        row = env_info() | {
            "kind": "oracle_by_family",
            "family": fam.name,
            "N": args.n,
            "episodes": b,
            "is_correct": int(ok.sum()),
            "failing_d": np.asarray(d)[bad].tolist(),
            "failing_termination": [C.TERMINATION_NAMES[t] for t in term],
            "seconds_with_compile": round(time.perf_counter() - t0, 1),
        }
        rows.append(row)
        print(
            f"{fam.name:8s} {row['is_correct']}/{b}  failing d {row['failing_d']}  "
            f"{sorted(set(row['failing_termination']))}",
            flush=True,
        )
    append_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
