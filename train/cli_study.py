"""``ecomjax study``: the curriculum dynamics study from the command line.

The lead wires it into ``ecomjax.cli`` with ``add_parser(subparsers)``; until then
``python -m ecomjax.train.cli_study [--quick] ...`` runs the same thing.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "study",
        help="compare difficulty schedules (adaptive, static, uniform) training the array policy",
        description="Train the array policy from scratch under each difficulty schedule "
        "(adaptive curriculum in both conventions, static d=0, static d=8, uniform d in "
        "[0, 12]) and a tau_acc x tau_num sweep, for the same episode budget; write JSONL "
        "logs, summaries and PNG plots per task collection.",
    )
    p.add_argument(
        "--quick", action="store_true", help="smoke-scale budget (~10 min cold, 2 CPU cores)"
    )
    p.add_argument(
        "--tasks", default="C1,C8", help="collections to study, in order: C1, C8 or C1,C8"
    )
    p.add_argument("--seeds", type=int, default=None, help="seeds per schedule")
    p.add_argument("--sweep-seeds", type=int, default=None, help="seeds per tau sweep point")
    p.add_argument("--steps", type=int, default=None, help="training batches per run")
    p.add_argument("--groups", type=int, default=None, help="training groups per batch")
    p.add_argument("--group-size", type=int, default=None, help="G rollouts per problem")
    p.add_argument("--eval-per", type=int, default=None, help="held-out episodes per (family, d)")
    p.add_argument("--no-sweep", action="store_true", help="skip the tau_acc x tau_num sweep")
    p.add_argument("--minutes", type=float, default=None, help="wall-time cap per collection")
    p.add_argument("--out", default="docs/study", help="output folder (one subfolder per C)")
    p.add_argument("--no-progress", action="store_true")
    p.set_defaults(func=main)
    return p


def main(args: argparse.Namespace) -> int:
    from ecomjax.registry import resolve_tasks

    from .curriculum_study import QUICK, StudyConfig, study, table
    from .loop import enable_compile_cache

    cfg = QUICK if args.quick else StudyConfig()
    tasks = tuple(t.strip().upper() for t in args.tasks.split(",") if t.strip())
    try:
        for t in tasks:
            resolve_tasks(t)
    except KeyError as exc:
        print(f"ecomjax study: {exc}", file=sys.stderr)
        return 2
    over = {
        "seeds": args.seeds,
        "sweep_seeds": args.sweep_seeds,
        "steps": args.steps,
        "groups": args.groups,
        "group_size": args.group_size,
        "eval_per": args.eval_per,
        "minutes": args.minutes,
    }
    over = {k: v for k, v in over.items() if v is not None}
    # Flags win over the preset's per-collection settings too.
    per = {t: {k: v for k, v in o.items() if k not in over} for t, o in cfg.per_tasks.items()}
    cfg = replace(cfg, tasks=tasks, per_tasks=per, **over)
    if args.no_sweep:
        cfg = replace(cfg, sweep=False)
    enable_compile_cache()
    results = study(cfg, args.out, progress=not args.no_progress)
    for t, summary in results.items():
        print(f"\n## {t}\n")
        print(table(summary, cfg.eval_d))
    return 0


def _standalone(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="ecomjax")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["study", *(sys.argv[1:] if argv is None else argv)])
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(_standalone())
