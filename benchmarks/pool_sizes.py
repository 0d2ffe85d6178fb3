"""PD / SUB pool sizes under the oracle (SPEC §13 invariant 15): per d, the distribution of
|F_init| (at reset) and |F_end| (at termination, after shocks), the share of episodes with
|F_end| = 1, how often the witness draw found all k_rec − 1 witnesses, and the IsCorrect
rates of the oracle and of the "repeat one id" shortcut (the oracle's first id k times).

    python benchmarks/pool_sizes.py                 # N = 1000, 300 episodes per d
    python benchmarks/pool_sizes.py --per-d 50 --families PD

The shortcut plays the oracle's trajectory and differs only in its final answer, so both
agents run in one compiled plan on the same keys. Rows (one per family and d) go to
benchmarks/results/pool_sizes.jsonl.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from rows_io import append_rows, git_commit
from throughput import env_info

from ecomjax import constants as C
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.envs.pd.ranking import pool_members
from ecomjax.envs.pd.shortcut import repeat_one_id
from ecomjax.registry import family
from ecomjax.rollout import run_plan_jit
from ecomjax.testing import reset_batch
from ecomjax.types import EnvParams

OUT = Path(__file__).parent / "results" / "pool_sizes.jsonl"
ROW = {"PD": 0, "SUB": 1}
QUANTILES = (0.0, 0.1, 0.5, 0.9, 1.0)


def measure(catalog, name: str, per_d: int, chunk: int, params: EnvParams) -> dict[str, np.ndarray]:
    """Per episode: d, |F_init|, |F_end|, witnesses drawn, oracle / shortcut IsCorrect."""
    fam = family(name)
    oracle = make_oracle((fam.env,))
    agents = (oracle, repeat_one_id(oracle))
    pool = jax.jit(jax.vmap(lambda pr, w: pool_members(catalog, pr, w, ROW[name]).sum()))
    gen = jax.jit(jax.vmap(fam.generate, (0, None, 0, None)), static_argnums=3)
    out: dict[str, list] = {k: [] for k in ("d", "f_init", "f_end", "wit", "oracle", "repeat")}
    total = (C.D_MAX + 1) * per_d
    chunk = min(chunk, total)
    for start in range(0, total, chunk):
        ids = start + jnp.arange(chunk)
        keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(15), i))(ids)
        d = (ids % (C.D_MAX + 1)).astype(jnp.int32)
        problems = gen(keys, catalog, d, params)
        states, _ = reset_batch(keys, catalog, problems, params)
        plan = ((name, chunk, 0), (name, chunk, 1))
        both = lambda x: jnp.concatenate([x, x])  # noqa: E731
        res = run_plan_jit(catalog, both(keys), both(d), plan, agents, params)
        st = res.state
        ok = np.asarray(st.reward.is_correct)
        out["d"].append(np.asarray(d))
        out["f_init"].append(np.asarray(pool(states.problem, states.world)))
        out["f_end"].append(np.asarray(pool(*(_take(x, chunk) for x in (st.problem, st.world)))))
        out["wit"].append((np.asarray(problems.pool_witness[:, ROW[name]]) >= 0).sum(1))
        out["oracle"].append(ok[:chunk])
        out["repeat"].append(ok[chunk:])
    return {k: np.concatenate(v)[:total] for k, v in out.items()}


def _take(tree, n: int):
    return jax.tree_util.tree_map(lambda x: x[:n], tree)


def rows_for(name: str, m: dict[str, np.ndarray], n: int) -> list[dict]:
    rows = []
    for d in range(C.D_MAX + 1):
        sel = m["d"] == d
        k = min(10, 3 + d // 3)
        rows.append(
            {
                "kind": "pool_sizes",
                "family": name,
                "N": n,
                "d": d,
                "k_rec": k,
                "episodes": int(sel.sum()),
                "f_init_q": np.quantile(m["f_init"][sel], QUANTILES).tolist(),
                "f_end_q": np.quantile(m["f_end"][sel], QUANTILES).tolist(),
                "share_f_init_1": float((m["f_init"][sel] == 1).mean()),
                "share_f_end_1": float((m["f_end"][sel] == 1).mean()),
                "share_f_end_0": float((m["f_end"][sel] == 0).mean()),
                "share_witnesses_any": float((m["wit"][sel] >= 1).mean()),
                "share_witnesses_full": float((m["wit"][sel] == k - 1).mean()),
                "oracle_is_correct": float(m["oracle"][sel].mean()),
                "repeat_is_correct": float(m["repeat"][sel].mean()),
                "repeat_correct_with_f_end_ge_2": int(
                    (m["repeat"][sel] & (m["f_end"][sel] >= 2)).sum()
                ),
            }
        )
    return rows


def print_table(rows: list[dict]) -> None:
    q = lambda xs: "/".join(f"{x:g}" for x in xs)  # noqa: E731
    head = ("fam", "d", "k", "F_init min/p10/p50/p90/max", "F_end min/p10/p50/p90/max")
    tail = ("Fe=1", "W>=1", "Wfull", "oracle", "repeat")
    print(
        "{:4s} {:>2s} {:>2s}  {:>26s}  {:>26s}".format(*head),
        "{:>5s} {:>5s} {:>5s} {:>6s} {:>6s}".format(*tail),
    )
    for r in rows:
        print(
            f"{r['family']:4s} {r['d']:2d} {r['k_rec']:2d}  {q(r['f_init_q']):>26s}  "
            f"{q(r['f_end_q']):>26s}  {r['share_f_end_1']:5.2f} {r['share_witnesses_any']:5.2f} "
            f"{r['share_witnesses_full']:5.2f} {r['oracle_is_correct']:6.3f} "
            f"{r['repeat_is_correct']:6.3f}"
        )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--n", type=int, default=1000, help="catalog size")
    ap.add_argument("--families", default="PD,SUB")
    ap.add_argument("--per-d", type=int, default=300, help="episodes per d")
    ap.add_argument("--chunk", type=int, default=21 * 50, help="episodes per compiled batch")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    catalog = generate_catalog(42, args.n)
    params = EnvParams()
    info = env_info() | {"commit": git_commit()}
    rows = []
    for name in (s.strip().upper() for s in args.families.split(",")):
        t0 = time.perf_counter()
        m = measure(catalog, name, args.per_d, args.chunk, params)
        part = rows_for(name, m, args.n)
        for r in part:
            r.update(info, seconds_with_compile=round(time.perf_counter() - t0, 1))
        rows += part
        print_table(part)
        print(
            f"{name}: oracle IsCorrect {m['oracle'].mean():.4f} "
            f"({m['oracle'].sum()}/{m['oracle'].size}); "
            f"repeat-one-id IsCorrect {m['repeat'].mean():.4f}, with |F_end| >= 2: "
            f"{int((m['repeat'] & (m['f_end'] >= 2)).sum())}; |F_end| = 1 share "
            f"{(m['f_end'] == 1).mean():.3f}",
            flush=True,
        )
    append_rows(args.out, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
