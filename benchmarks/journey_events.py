"""Why the JOURNEY oracle misses at large N: replays oracle episodes turn by turn (the same
``step_batch`` as the rollout, so the same trajectories) and records, per episode, the
largest per-turn shock count ``n_events`` and the turns whose list overflowed
(``n_events`` > MAX_EVENTS = 32: the oracle cannot see every shocked id there). Prints
IsCorrect split by overflow and, for each failure, which sub-goals failed and why.

    python benchmarks/journey_events.py --n 100000 --per-d 3
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from rows_io import append_rows
from throughput import env_info

from ecomjax import constants as C
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.core import reset, verify
from ecomjax.registry import family
from ecomjax.rollout import AGENT_STREAM, max_turns_for, step_batch
from ecomjax.types import EnvParams

OUT = Path(__file__).parent / "results" / "journey_events.jsonl"
ALL = tuple(int(e) for e in C.Env)


def replay(catalog, keys, d, params, max_turns: int):
    """(final states, peak n_events [B], overflowing turns [B])."""
    fam = family("JOURNEY")
    agent = make_oracle((C.Env.JOURNEY,))
    problems = jax.vmap(fam.generate, (0, None, 0, None))(keys, catalog, d, params)
    states, ts = jax.vmap(reset, (0, None, 0, None))(keys, catalog, problems, params)
    akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
    memory = jax.vmap(agent.init, (0, 0, None))(akeys, ts.observation, catalog)
    b = keys.shape[0]

    def turn(carry, t):
        states, obs, memory, peak, over = carry
        live = states.dialogue.termination == C.Termination.RUNNING
        k = jax.vmap(lambda key: jax.random.fold_in(key, t))(akeys)
        memory, actions = jax.vmap(agent.act, (0, 0, 0, None))(k, memory, obs, catalog)
        states, ts = step_batch(catalog, states, actions, params, live, ALL)
        n = ts.observation.n_events
        return (
            states,
            ts.observation,
            memory,
            jnp.maximum(peak, n),
            over + (n > C.MAX_EVENTS).astype(jnp.int32),
        ), None

    zero = jnp.zeros(b, jnp.int32)
    carry = (states, ts.observation, memory, zero, zero)
    (states, _, _, peak, over), _ = jax.lax.scan(turn, carry, jnp.arange(max_turns))
    reward = jax.vmap(lambda s: verify(catalog, s, params, ALL))(states)
    return states.replace(reward=reward), peak, over


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--per-d", type=int, default=3)
    ap.add_argument("--seed", type=int, default=5, help="as oracle_by_family.py")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    catalog = generate_catalog(42, args.n)
    params = EnvParams()
    b = (C.D_MAX + 1) * args.per_d
    keys = jax.vmap(lambda i: jax.random.fold_in(jax.random.key(args.seed), i))(jnp.arange(b))
    d = jnp.arange(b, dtype=jnp.int32) % (C.D_MAX + 1)
    run = jax.jit(replay, static_argnums=(3, 4))
    states, peak, over = run(catalog, keys, d, params, max_turns_for([C.Env.JOURNEY]))
    ok = np.asarray(states.reward.is_correct)
    peak, over = np.asarray(peak), np.asarray(over)
    overflow = over > 0
    print(f"N = {args.n}: oracle IsCorrect {ok.sum()}/{b}")
    print(f"  with an overflowing turn: {ok[overflow].sum()}/{overflow.sum()}")
    print(f"  without:                  {ok[~overflow].sum()}/{(~overflow).sum()}")
    sub_env = np.asarray(states.problem.sub_env)
    failures = []
    for i in np.flatnonzero(~ok):
        fams = [C.ENV_NAMES[e] for e in sub_env[i] if e >= 0]
        failures.append(
            {
                "d": int(d[i]),
                "subgoals": fams,
                "peak_events": int(peak[i]),
                "overflow_turns": int(over[i]),
            }
        )
        print(f"  fail d={int(d[i])} {fams} peak n_events {peak[i]} overflowing turns {over[i]}")
    row = env_info() | {
        "kind": "journey_events",
        "N": args.n,
        "episodes": b,
        "is_correct": int(ok.sum()),
        "episodes_with_overflow": int(overflow.sum()),
        "correct_with_overflow": int(ok[overflow].sum()),
        "correct_without_overflow": int(ok[~overflow].sum()),
        "failures": failures,
    }
    append_rows(args.out, [row])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
