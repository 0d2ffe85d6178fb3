"""Where an oracle episode of each family spends its time: every stage of a rollout jitted
and timed alone, turn by turn over a real batch of episodes, and summed per episode.

    python benchmarks/step_profile.py --tasks CART,RETURN --batch 4096
    python benchmarks/step_profile.py --tasks C8 --batch 1024

The batch plays the oracle turn by turn on the host; on each turn every stage runs on that
turn's real states and actions (all B lanes, as inside the rollout's while loop, where an
ended lane idles until the batch's longest episode ends; a mixed plan's rollout goes on
over its JOURNEY lanes alone once the others end, so for C8 the late turns' stages here
cover all B lanes and read high against the round). Stages: generate, reset, the
agent's act, retrieval, the tool loop, the customer's reply, stock shocks, Seen marking,
the whole step (``rollout.step_batch``; the stages fuse differently inside it, so the parts
need not add up to it), verify, and the curriculum update. Each is the median of
``--repeats`` calls after a warm-up. The whole jitted round (``run_plan`` + curriculum) is
timed too, so the per-stage sum can be read against it. Rows (microseconds per episode,
summed over turns) go to benchmarks/results/step_profile.jsonl.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax import curriculum as cur
from ecomjax import difficulty as D
from ecomjax import exposure as X
from ecomjax.agents.oracle import make_oracle
from ecomjax.catalog.synthetic import generate_catalog
from ecomjax.core import _store_answer, reset, verify
from ecomjax.customer import reply
from ecomjax.gates import turn_gates
from ecomjax.registry import family, resolve_tasks
from ecomjax.rollout import (
    AGENT_STREAM,
    _by_family,
    act_runs,
    agent_runs,
    init_runs,
    max_turns_for,
    narrowed_agents,
    run_plan,
    step_batch,
)
from ecomjax.runner import make_plan
from ecomjax.shocks import apply_shocks
from ecomjax.tools.execute import mark_searched_batch, mark_seen, run_tools
from ecomjax.tools.search import resolve_batch
from ecomjax.types import EnvParams
from ecomjax.verify import ALL_FAMILIES

sys.path.insert(0, str(Path(__file__).parent))
from rows_io import add_row_args, append_rows  # noqa: E402
from throughput import env_info, episode_inputs  # noqa: E402
from timing import compiled, median_s  # noqa: E402

OUT = Path(__file__).parent / "results" / "step_profile.jsonl"


def timed(
    fn, *args, repeats: int, cache: dict | None = None, name: str = ""
) -> tuple[float, object]:
    """Median seconds of the compiled ``fn`` and its output (one warm-up call first).
    ``cache`` keeps one compiled program per stage name: every turn has the same shapes."""
    program = None if cache is None else cache.get(name)
    if program is None:
        program, _ = compiled(fn, *args)
        if cache is not None:
            cache[name] = program
    return median_s(program, lambda _: args, repeats)


def profile(spec: str, catalog, batch: int, repeats: int, params: EnvParams) -> dict:
    tasks = resolve_tasks(spec)
    plan = make_plan(tasks, batch)
    envs = tuple(family(t).env for t in tasks)
    present = tuple(sorted(int(e) for e in envs))
    agent = make_oracle(envs)
    keys, d = episode_inputs(batch, 1)
    us: dict[str, float] = {}
    programs: dict[str, object] = {}

    def stage(name, fn, *a):
        sec, out = timed(fn, *a, repeats=repeats, cache=programs, name=name)
        us[name] = us.get(name, 0.0) + 1e6 * sec / batch
        return out

    def generate(c, k, dd):
        def one(name, k, dd):
            return jax.vmap(family(name).generate, (0, None, 0, None))(k, c, dd, params)

        return _by_family(plan, one, k, dd)

    problems = stage("generate", generate, catalog, keys, d)
    states, ts = stage(
        "reset",
        lambda c, k, p: jax.vmap(reset, (0, None, 0, None))(k, c, p, params),
        catalog,
        keys,
        problems,
    )
    akeys = jax.vmap(lambda k: jax.random.fold_in(k, AGENT_STREAM))(keys)
    # As the rollout acts: each slice's agent narrowed to its family, one act per run of
    # episodes with the same agent (a mixed plan's oracle would otherwise run every
    # family's plan on every lane); JOURNEY's oracle dispatches its plans.
    agents, agent_ids = narrowed_agents(plan, agent)
    runs = agent_runs(agent_ids)
    obs = ts.observation
    memory = jax.jit(lambda k, o: init_runs(catalog, agents, runs, k, o))(akeys, obs)

    def act(c, k, m, o):
        return act_runs(c, agents, runs, k, m, o)

    def tools(c, s, a, r, live):
        calls = turn_gates(a, live).calls
        return jax.vmap(lambda s, a, r: run_tools(c, s.problem, s.world, a, r, calls))(s, a, r)

    def customer(c, s, a, w, scratch):
        def one(s, a, w, sc):
            dlg, w2 = _store_answer(s.dialogue.replace(turn=s.dialogue.turn + 1), w, a)
            pending_done = a.answer.present & ~a.answer.done & (s.problem.env != C.Env.JOURNEY)
            shocked = jnp.zeros(C.MAX_ITEMS, bool)
            return reply(
                c,
                s.problem,
                s.world,
                w2,
                dlg,
                sc,
                a,
                shocked,
                pending_done,
                s.key,
                params,
                present,
            )

        return jax.vmap(one)(s, a, w, scratch)

    def shocks(c, s):
        def one(s):
            hazard = D.difficulty(s.problem.d, params.overrides).shock_hazard
            return apply_shocks(s.key, c, s.problem, s.world, s.dialogue.turn + 1, hazard)

        return jax.vmap(one)(s)

    def seen(c, w, r, a, live):  # as step_batch marks: the search rows batch-wide if dense
        calls = turn_gates(a, live).calls
        dense = X.is_dense(w)
        w = jax.vmap(lambda w, r: mark_seen(w, r, c.n_products, calls, not dense))(w, r)
        return mark_searched_batch(w, r.search, params.search_batch) if dense else w

    turns, env_steps = 0, 0
    for t in range(max_turns_for(envs)):
        live = states.dialogue.termination == C.Termination.RUNNING
        n_live = int(live.sum())
        if n_live == 0:
            break
        turns, env_steps = turns + 1, env_steps + n_live
        k = jax.vmap(lambda key, t=t: jax.random.fold_in(key, t))(akeys)
        memory, actions = stage("agent_act", act, catalog, k, memory, obs)
        search = stage(
            "retrieval",
            lambda c, s, a, lv: resolve_batch(c, s, a, params, lv),
            catalog,
            states,
            actions,
            live,
        )
        world, scratch, results = stage("tool_loop", tools, catalog, states, actions, search, live)
        stage("customer", customer, catalog, states, actions, world, scratch)
        stage("shocks", shocks, catalog, states)
        stage("mark_seen", seen, catalog, world, results, actions, live)
        states, ts = stage(
            "step",
            lambda c, s, a, lv: step_batch(c, s, a, params, lv, present),
            catalog,
            states,
            actions,
            live,
        )
        obs = ts.observation

    def score(c, s):
        def one(name, s):
            fam = family(name).env
            fams = ALL_FAMILIES if fam == C.Env.JOURNEY else (fam,)
            return jax.vmap(lambda s: verify(c, s, params, fams))(s)

        return _by_family(plan, one, s)

    reward = stage("verify", score, catalog, states)
    cfg = cur.CurriculumConfig.default()
    task_ids = jnp.asarray(
        np.concatenate([np.full(n, i, np.int32) for i, (_, n) in enumerate(plan)])
    )
    cstate = cur.init(len(tasks))
    stage(
        "curriculum",
        lambda cs, ok: cur.update(cs, task_ids, d, ok, None, cfg, mode="stream"),
        cstate,
        reward.is_correct,
    )

    def whole(c, k, dd):
        return run_plan(c, k, dd, plan, agent, params).state.reward.is_correct

    sec, _ = timed(whole, catalog, keys, d, repeats=repeats)
    parts = sum(v for name, v in us.items() if name != "step")
    print(f"{spec}: {turns} turns, {env_steps / batch:.2f} env-steps per episode")
    for name, v in us.items():
        print(f"  {name:11s} {v:9.1f} µs per episode")
    print(f"  {'round':11s} {1e6 * sec / batch:9.1f} µs per episode (whole jitted rollout)")
    return {
        "spec": spec,
        "turns": turns,
        "env_steps_per_episode": env_steps / batch,
        "us_per_episode": us,
        "stage_sum_us": parts,
        "round_us_per_episode": 1e6 * sec / batch,
        "episodes_per_s": batch / sec,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default="CART", help="families or collections, comma-separated")
    ap.add_argument("--batch", type=int, default=4096)
    add_row_args(ap, OUT, repeats=3)
    args = ap.parse_args(argv)
    catalog = generate_catalog(42, args.catalog_size)
    params = EnvParams()
    for spec in filter(None, args.tasks.split(",")):
        row = env_info() | {
            "kind": "step_profile",
            "B": args.batch,
            "catalog_size": args.catalog_size,
            "repeats": args.repeats,
            **({"label": args.label} if args.label else {}),
            **profile(spec, catalog, args.batch, args.repeats, params),
        }
        append_rows(args.out, [row])
    print(f"wrote rows to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
