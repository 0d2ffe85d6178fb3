"""The random agent's success on the learning check's distribution (SPEC §13.6's bound),
so the learned policy's curve has its chance level beside it.

    python -m ecomjax.train.baseline --tasks CART --d 0,1,2,3,4 --episodes 2048 \\
        --out docs/study/learn_cart/baseline.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax.agents import random_agent
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.registry import family
from ecomjax.rollout import run_batch_jit
from ecomjax.types import EnvParams

from .loop import enable_compile_cache


def random_success(name: str, levels: list[int], episodes: int, seed: int = 0) -> dict:
    """IsCorrect rate of the random agent per d (``episodes`` per level, one batch)."""
    catalog = generate_catalog(42, 1000)
    fam = family(name)
    d = jnp.asarray(np.repeat(levels, episodes), jnp.int32)
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(seed), i))(jnp.arange(d.shape[0]))
    res = run_batch_jit(
        catalog, keys, d, fam.generate, random_agent, EnvParams(), families=(fam.env,)
    )
    ok = np.asarray(res.state.reward.is_correct).reshape(len(levels), episodes)
    per_d = {str(lv): float(ok[i].mean()) for i, lv in enumerate(levels)}
    return {
        "agent": "random",
        "family": name,
        "episodes_per_d": episodes,
        "success_per_d": per_d,
        "success": float(ok.mean()),
        "correct": int(ok.sum()),
        "total": int(ok.size),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ecomjax.train.baseline")
    ap.add_argument("--tasks", default="CART")
    ap.add_argument("--d", default="0,1,2,3,4")
    ap.add_argument("--episodes", type=int, default=2048)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    enable_compile_cache()
    out = random_success(args.tasks, [int(x) for x in args.d.split(",")], args.episodes, args.seed)
    print(json.dumps(out))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
