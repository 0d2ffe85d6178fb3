"""The ``ecomjax`` command: ``ecomjax run`` plays curriculum rounds on the synthetic catalog."""

from __future__ import annotations

import argparse
import importlib
import json
import sys

from ecomjax import compile_cache, distributed
from ecomjax import constants as C


def _table(result) -> str:
    from ecomjax.runner import COLUMNS

    head = f"{'task':<8}{'d':>3}{'episodes':>10}" + "".join(f"{c:>10}" for c in COLUMNS)
    lines = [head, "-" * len(head)]
    for task, st in result.per_task.items():
        for d in sorted(st.n):
            n = st.n[d]
            means = st.sums[d] / max(n, 1)
            lines.append(f"{task:<8}{d:>3}{n:>10}" + "".join(f"{m:>10.3f}" for m in means))
        lo, hi = result.curriculum[task]
        lines.append(f"{task:<8} curriculum window [{lo}, {hi}]")
    lines.append(
        f"episodes {result.episodes}  episodes/s {result.episodes_per_s:,.0f}  "
        f"env-steps/s {result.env_steps / max(result.seconds, 1e-9):,.0f}  "
        f"compile {result.compile_s:.1f}s  steady {result.seconds:.2f}s"
    )
    return "\n".join(lines)


def _run(args: argparse.Namespace) -> int:
    import jax
    from tqdm import tqdm

    if args.devices < 1:
        print("ecomjax run: --devices must be at least 1", file=sys.stderr)
        return 2
    if args.devices > 1:  # on CPU, JAX makes this many host devices (before it starts one)
        jax.config.update("jax_num_cpu_devices", args.devices)
    try:  # before anything touches a JAX backend
        distributed.initialize(distributed.cluster_from_args(args))
    except (ValueError, RuntimeError) as exc:
        print(f"ecomjax run: cannot join the multi-process run: {exc}", file=sys.stderr)
        return 2
    from ecomjax.runner import RunConfig, run

    lead = jax.process_index() == 0  # every process computes the same result; one prints
    mesh = None  # before the progress bar, so a refusal leaves none behind
    if args.devices > 1 and jax.process_count() == 1:
        from ecomjax.sharding import batch_mesh

        local = jax.local_devices()
        if len(local) < args.devices:
            print(
                f"ecomjax run: --devices {args.devices}, but this process has "
                f"{len(local)} {local[0].platform} device(s)",
                file=sys.stderr,
            )
            return 2
        mesh = batch_mesh(local[: args.devices])

    cfg = RunConfig(
        tasks=args.tasks,
        agent=args.agent,
        batch=args.batch,
        rounds=args.rounds,
        difficulty=args.difficulty,
        catalog_size=args.catalog_size,
        seed=args.seed,
        convention=args.convention,
        auto_reset=args.auto_reset,
        shard_catalog=args.shard_catalog,
        search_chunk=args.search_chunk,
    )
    bar = tqdm(
        total=cfg.rounds,
        desc="rounds",
        file=sys.stderr,
        disable=(args.json and not args.progress) or not lead,
    )

    def progress(rnd, window):
        bar.update(1)
        bar.set_postfix({t: f"[{lo},{hi}]" for t, (lo, hi) in window.items()})

    try:
        result = run(cfg, progress, mesh=mesh)
    except distributed.PeerLost as exc:
        bar.close()
        print(f"ecomjax run: {exc}", file=sys.stderr)
        distributed.exit_now(distributed.EXIT_PEER_LOST)
    except (KeyError, ValueError) as exc:
        bar.close()
        print(f"ecomjax run: {exc}", file=sys.stderr)
        return 2
    bar.close()
    if lead:
        print(_table(result))
    if args.json:
        print(json.dumps(result.summary()))
    return 0


# Subcommands of the layers above the core (host bridge, training). The core never imports
# them (DESIGN: dependencies point down); the CLI is an entry point above every layer and
# loads each by name. Each module defines add_parser(subparsers) -> the subparser and
# main(args) -> exit status, and imports heavy or optional dependencies only in main.
PLUGINS = {
    "study": "ecomjax.train.cli_study",
    "rollout": "ecomjax.llm_bridge.cli_rollout",
    "serve": "ecomjax.llm_bridge.cli_serve",
}


def _add_plugins(sub) -> None:
    for name in PLUGINS.values():
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name != name:  # the module exists but needs something missing: say so
                raise
            continue
        parser = mod.add_parser(sub)
        if parser is not None and hasattr(mod, "main"):
            compile_cache.add_arguments(parser)
            parser.set_defaults(func=mod.main)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ecomjax", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="curriculum rounds of B parallel episodes")
    run.add_argument(
        "--tasks", default="C8", help="a collection (C1, C2, C4, C8) or a list: CART,SUB"
    )
    run.add_argument("--agent", default="oracle", choices=["oracle", "random", "silent"])
    run.add_argument("--batch", type=int, default=4096, help="episodes per round")
    run.add_argument("--rounds", type=int, default=10)
    run.add_argument("--difficulty", type=int, default=None, help=f"fixed d in 0..{C.D_MAX}")
    run.add_argument("--catalog-size", type=int, default=1000)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--convention", default="default", choices=["default", "rlve"])
    run.add_argument(
        "--auto-reset",
        type=int,
        default=0,
        metavar="STEPS",
        help="training mode: rounds of STEPS steps in which ended lanes start their next "
        "episode (0, the default: each round plays fresh episodes to the end)",
    )
    run.add_argument(
        "--devices",
        type=int,
        default=1,
        metavar="K",
        help="split every round over K of this process's devices; on CPU, JAX is given K "
        "host devices, so one per core keeps every core busy (batch: a multiple of K x tasks)",
    )
    run.add_argument(
        "--shard-catalog",
        action="store_true",
        help="split the catalog's embedding rows over the run's devices (processes x K) "
        "instead of a whole copy on each; results equal one device's",
    )
    run.add_argument(
        "--search-chunk",
        type=int,
        default=0,
        metavar="ROWS",
        help="rows the retrieval kernel scores per step (0: the default, 4096)",
    )
    run.add_argument("--json", action="store_true", help="print a JSON summary as the last line")
    run.add_argument("--progress", action="store_true", help="show the progress bar with --json")
    compile_cache.add_arguments(run)
    distributed.add_arguments(run)
    run.set_defaults(func=_run)
    _add_plugins(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    # Every subcommand compiles: a relaunch loads its programs from the persistent cache.
    try:
        compile_cache.enable(args.compile_cache, enabled=not args.no_compile_cache)
    except ValueError as err:  # a malformed cache setting in the environment
        print(f"ecomjax: {err}", file=sys.stderr)
        return 2
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
