"""Curriculum dynamics study: which difficulty schedule trains the array policy best for
the same episode budget?

Schedules (``SCHEDULES``): the adaptive curriculum of SPEC §3 in both conventions
(default: 5-level window, per-episode check; rlve: last 4 levels, per-batch check),
static d = 0, static d = 8, and uniform d in [0, 12]; plus a sweep of the default
convention over tau_acc x tau_num. Every run (schedule or sweep point, x seeds) trains
its own policy from scratch; all runs of a task collection are vmapped under one compile
(``train.loop.train``), share the per-step problem keys of their seed (common random
numbers) and play the same number of training episodes. Held-out success is measured
every step at fixed d in ``eval_d`` on problems training never sees.

Outputs per collection under ``out/<C>/``: ``log.jsonl`` (one row per step and run),
``summary.jsonl`` (one row per run), ``config.json`` and the PNGs of ``train.plots``.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import numpy as np

from ecomjax.registry import resolve_tasks
from ecomjax.xla_options import FAST_COMPILE

from . import plots
from . import schedules as sch
from .array_policy import CART_TOOLS, PolicyConfig
from .loop import TrainConfig, default_policy, train

SCHEDULES: dict[str, dict] = {
    "adaptive-default": {"kind": "adaptive", "convention": "default"},
    "adaptive-rlve": {"kind": "adaptive", "convention": "rlve"},
    "static-0": {"kind": "static", "d_lo": 0},
    "static-8": {"kind": "static", "d_lo": 8},
    "uniform-0-12": {"kind": "uniform", "d_lo": 0, "d_hi": 12},
}
TAU_ACC = (0.7, 0.8, 0.9)
TAU_NUM = (16, 32, 128)
DEFAULT_TAU = (0.9, 32)  # the sweep point that is "adaptive-default" itself


@dataclass(frozen=True)
class StudyConfig:
    tasks: tuple[str, ...] = ("C1", "C8")
    seeds: int = 3
    sweep_seeds: int | None = None  # default: seeds
    steps: int = 400  # training batches per run (the episode budget is steps x groups x G)
    groups: int = 16  # training groups per step (at least one per family)
    group_size: int = 8
    eval_per: int = 2  # held-out episodes per (family, d) per step
    eval_d: tuple[int, ...] = (0, 4, 8, 12)
    schedules: tuple[str, ...] = tuple(SCHEDULES)
    sweep: bool = True
    sweep_on: tuple[str, ...] = ("C1", "C8")  # collections that run the tau sweep
    tau_acc: tuple[float, ...] = TAU_ACC
    tau_num: tuple[int, ...] = TAU_NUM
    minutes: float | None = None  # wall-time cap per collection (compile included)
    lr: float = 1e-3
    reward: str = "r_task"  # see TrainConfig.reward
    policy: PolicyConfig | None = None  # default: loop.default_policy(tasks)
    # Compile the train step with LLVM optimisation off (ecomjax.xla_options.FAST_COMPILE):
    # faster to compile, slower per step; worth it when compiles dominate (--quick).
    fast_compile: bool = False
    # Per-collection overrides of the fields above, e.g. {"C8": {"seeds": 1}}.
    per_tasks: dict = field(default_factory=dict)


# Under 10 minutes on this 2-core CPU from a cold compile cache (docs/study/README.md): a
# smoke-scale budget (a few hundred episodes per run), far below what the policy needs to
# learn CART (about 10k episodes); the default StudyConfig is the real study. Compiles
# dominate at this size, hence fast_compile.
QUICK = StudyConfig(
    seeds=2,
    sweep_seeds=1,
    sweep_on=("C1",),
    steps=16,
    groups=4,
    group_size=8,
    eval_per=1,
    # A C8 episode costs about 10x a CART one (searches, 24-turn journeys, eight customers).
    per_tasks={"C8": {"seeds": 1, "group_size": 4, "steps": 8}},
    fast_compile=True,
)
# Smoke-test size (the tests share its compiled step): 2 runs of 2 small batches on C1.
TINY = StudyConfig(
    tasks=("C1",),
    seeds=1,
    sweep_seeds=1,
    steps=2,
    groups=4,
    group_size=4,
    eval_per=1,
    eval_d=(0, 4),
    schedules=("adaptive-default",),
    tau_acc=(0.7,),
    tau_num=(16,),
    # r_total (efficiency, hallucination) almost never ties within a group, so even two
    # tiny groups carry a gradient; r_task ties at -1 until the policy finds a cart.
    reward="r_total",
    policy=PolicyConfig(hidden=16, memory=8, calls=2, tools=CART_TOOLS),
)


@dataclass(frozen=True)
class Run:
    name: str
    kind: str  # "schedule" or "sweep"
    seed: int
    schedule: dict
    tau: tuple[float, int] | None = None


def runs_for(cfg: StudyConfig, tasks: str | None = None) -> list[Run]:
    """Every schedule x seed, then (if ``tasks`` is in ``sweep_on``) every sweep point x
    sweep seed; the default point is the adaptive-default run itself, not run twice."""
    out = [
        Run(name, "schedule", s, SCHEDULES[name])
        for name in cfg.schedules
        for s in range(cfg.seeds)
    ]
    if cfg.sweep and (tasks is None or tasks in cfg.sweep_on):
        n = cfg.sweep_seeds if cfg.sweep_seeds is not None else cfg.seeds
        for acc in cfg.tau_acc:
            for num in cfg.tau_num:
                for s in range(n):
                    if (
                        (acc, num) == DEFAULT_TAU
                        and "adaptive-default" in cfg.schedules
                        and s < cfg.seeds
                    ):
                        continue
                    spec = {
                        "kind": "adaptive",
                        "convention": "default",
                        "tau_acc": acc,
                        "tau_num": num,
                    }
                    out.append(Run(f"tau{acc}x{num}", "sweep", s, spec, (acc, num)))
    return out


def tau_of(run: Run) -> tuple[float, int] | None:
    if run.tau is not None:
        return run.tau
    return DEFAULT_TAU if run.name == "adaptive-default" else None


def train_config(cfg: StudyConfig, tasks: str) -> TrainConfig:
    n_fam = len(resolve_tasks(tasks))
    return TrainConfig(
        tasks=tasks,
        groups=max(cfg.groups, n_fam),
        group_size=cfg.group_size,
        eval_per=cfg.eval_per,
        eval_d=cfg.eval_d,
        lr=cfg.lr,
        reward=cfg.reward,
        policy=cfg.policy if cfg.policy is not None else default_policy(tasks),
    )


def summarize(rows: list[dict], runs: list[Run], families: tuple[str, ...], eval_d) -> list[dict]:
    """One row per run: the episode budget, where its curriculum ended, and held-out
    success per (family, d) over the last quarter of its steps."""
    out = []
    for r_i, run in enumerate(runs):
        mine = [r for r in rows if r["run_index"] == r_i]
        if not mine:
            continue
        tail = mine[-max(1, len(mine) // 4) :]
        held = np.mean([r["eval_success"] for r in tail], 0)  # [n_tasks, n_d]
        out.append(
            {
                "run": run.name,
                "kind": run.kind,
                "seed": run.seed,
                "tau": list(tau_of(run)) if tau_of(run) else None,
                "steps": mine[-1]["step"],
                "episodes": mine[-1]["episodes"],
                "final_h": dict(zip(families, mine[-1]["h"], strict=True)),
                "final_lo": dict(zip(families, mine[-1]["lo"], strict=True)),
                "train_success_last": float(np.mean([np.mean(r["success"]) for r in tail])),
                "heldout_success": {
                    f: {str(d): round(float(held[i, j]), 4) for j, d in enumerate(eval_d)}
                    for i, f in enumerate(families)
                },
                "heldout_mean": {
                    str(d): round(float(held[:, j].mean()), 4) for j, d in enumerate(eval_d)
                },
                "kept_fraction_mean": float(np.mean([r["kept_fraction"] for r in mine])),
                "kept_fraction_correct_mean": float(
                    np.mean([r["kept_fraction_correct"] for r in mine])
                ),
            }
        )
    return out


def run_collection(
    cfg: StudyConfig, tasks: str, out: Path, progress: bool = True
) -> tuple[list[dict], list[dict]]:
    """Trains every run of one collection side by side, then writes summary and plots."""
    cfg = replace(cfg, **cfg.per_tasks.get(tasks, {}))
    runs = runs_for(cfg, tasks)
    tcfg = train_config(cfg, tasks)
    families = tcfg.families
    scheds = [sch.make_schedule(**r.schedule) for r in runs]
    names = [f"{r.name}/s{r.seed}" for r in runs]
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    rows = train(
        tcfg,
        scheds,
        steps=cfg.steps,
        seeds=[r.seed for r in runs],
        names=names,
        minutes=cfg.minutes,
        out=out,
        progress=progress,
        ckpt_every=None,
        compiler_options=FAST_COMPILE if cfg.fast_compile else None,
    )
    for row in rows:
        row["run_index"] = names.index(row["run"])
        row["schedule"] = runs[row["run_index"]].name
    summary = summarize(rows, runs, families, cfg.eval_d)
    with open(out / "summary.jsonl", "w") as f:
        for s in summary:
            f.write(json.dumps(s) + "\n")
    meta = json.loads((out / "config.json").read_text())
    meta["study"] = {**asdict(cfg), "tasks": tasks, "policy": meta["config"]["policy"]}
    meta["families"] = list(families)
    meta["study_s"] = round(time.perf_counter() - t0, 2)
    (out / "config.json").write_text(json.dumps(meta, indent=1))
    plots.plot_all(rows, summary, families, cfg.eval_d, out, title=tasks)
    return rows, summary


def study(cfg: StudyConfig, out: str | Path, progress: bool = True) -> dict[str, list[dict]]:
    """The whole study, one collection after the other (C1, then C8 by default)."""
    out = Path(out)
    results = {}
    for tasks in cfg.tasks:
        _, summary = run_collection(cfg, tasks, out / tasks, progress)
        results[tasks] = summary
    return results


def table(summary: list[dict], eval_d) -> str:
    """Markdown table: mean over seeds per run name."""
    by: dict[str, list[dict]] = {}
    for s in summary:
        by.setdefault(s["run"], []).append(s)
    head = (
        "| run | seeds | episodes | final h (mean over families) | "
        + " | ".join(f"held-out d={d}" for d in eval_d)
        + " | kept (group reward) | kept (is_correct) |"
    )
    lines = [head, "|---|---:|---:|---:|" + "---:|" * (len(eval_d) + 2)]
    for name, ss in by.items():
        h = np.mean([np.mean(list(s["final_h"].values())) for s in ss])
        held = [np.mean([s["heldout_mean"][str(d)] for s in ss]) for d in eval_d]
        kept = np.mean([s["kept_fraction_mean"] for s in ss])
        kc = np.mean([s["kept_fraction_correct_mean"] for s in ss])
        lines.append(
            f"| {name} | {len(ss)} | {ss[0]['episodes']} | {h:.2f} | "
            + " | ".join(f"{x:.3f}" for x in held)
            + f" | {kept:.3f} | {kc:.3f} |"
        )
    return "\n".join(lines)


__all__ = [
    "QUICK",
    "SCHEDULES",
    "TINY",
    "Run",
    "StudyConfig",
    "run_collection",
    "runs_for",
    "study",
    "summarize",
    "table",
]
