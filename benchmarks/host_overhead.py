"""Host overhead per episode-turn of the text bridge: parse + render + template wording
(+ host retrieval when given), apart from the device step, at B episodes.

The episodes are played by the oracle speaking through text (``OracleBackend``), so every
turn parses a real tool-call block, renders real tool results and words a real customer
act. Each ``Session.step`` is timed as a whole, and the device work inside it (the jitted
step and retrieval, blocked until ready) is timed apart; host overhead = the difference.
The oracle's own action time is outside both. Medians over turns, plus the mean.

    .venv/bin/python benchmarks/host_overhead.py --batch 256 --tasks C8 --difficulty 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
from rows_io import append_rows

sys.path.insert(0, str(Path(__file__).resolve().parent))

from throughput import env_info  # noqa: E402

from ecomjax.catalog.synthetic import generate_catalog  # noqa: E402
from ecomjax.llm_bridge import session as SS  # noqa: E402
from ecomjax.llm_bridge.llm_rollout import OracleBackend, problems, run_rollouts  # noqa: E402
from ecomjax.registry import resolve_tasks  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "host_overhead.jsonl"


class Clock:
    """Accumulates device seconds inside the current ``Session.step``."""

    def __init__(self) -> None:
        self.device = 0.0
        self.host: list[float] = []  # one entry per episode-turn
        self.parts: dict[str, float] = {"parse": 0.0, "tool_render": 0.0, "user_text": 0.0}

    def timed_device(self, fn):
        def run(*a, **kw):
            t = time.perf_counter()
            out = jax.block_until_ready(fn(*a, **kw))
            self.device += time.perf_counter() - t
            return out

        return run

    def timed_part(self, name: str, fn):
        def run(*a, **kw):
            t = time.perf_counter()
            out = fn(*a, **kw)
            self.parts[name] += time.perf_counter() - t
            return out

        return run


def instrument(clock: Clock) -> None:
    make_step, make_search = SS.compiled_step, SS.compiled_search
    SS.compiled_step = lambda *a, **kw: clock.timed_device(make_step(*a, **kw))
    SS.compiled_search = lambda *a, **kw: clock.timed_device(make_search(*a, **kw))
    SS.parse_turn = clock.timed_part("parse", SS.parse_turn)
    Session = SS.Session
    Session._tool_messages = clock.timed_part("tool_render", Session._tool_messages)
    Session._user_message = clock.timed_part("user_text", Session._user_message)
    step = Session.step

    def timed_step(self, *a, **kw):
        clock.device = 0.0
        t = time.perf_counter()
        out = step(self, *a, **kw)
        clock.host.append(time.perf_counter() - t - clock.device)
        return out

    Session.step = timed_step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--tasks", default="C8")
    ap.add_argument("--difficulty", type=int, default=4)
    ap.add_argument("--fmt", default="hermes")
    ap.add_argument("--catalog-size", type=int, default=1000)
    ap.add_argument("--out", default=str(OUT))
    args = ap.parse_args()

    text = SS.CatalogText.build(generate_catalog(42, args.catalog_size))
    fams = resolve_tasks(args.tasks)
    per = max(1, args.batch // len(fams))
    backend = OracleBackend(args.fmt)
    # Warm-up: compile every family's reset and the step outside the measurement.
    run_rollouts(backend, problems(fams, [args.difficulty], 1, seed=10**6), text, batch_size=64)
    clock = Clock()
    instrument(clock)
    todo = problems(fams, [args.difficulty], per)
    t0 = time.perf_counter()
    rows = run_rollouts(backend, todo, text, batch_size=args.batch)
    wall = time.perf_counter() - t0
    turns = len(clock.host)
    row = env_info() | {
        "bench": "host_overhead",
        "batch": len(todo),
        "tasks": args.tasks,
        "difficulty": args.difficulty,
        "fmt": args.fmt,
        "episode_turns": turns,
        "host_ms_per_turn_median": 1e3 * statistics.median(clock.host),
        "host_ms_per_turn_mean": 1e3 * sum(clock.host) / turns,
        "parse_ms_per_turn": 1e3 * clock.parts["parse"] / turns,
        "tool_render_ms_per_turn": 1e3 * clock.parts["tool_render"] / turns,
        "user_text_ms_per_turn": 1e3 * clock.parts["user_text"] / turns,
        "wall_s": wall,
        "success_rate": sum(r["is_correct"] for r in rows) / len(rows),
    }
    print(json.dumps(row, indent=1))
    append_rows(args.out, [row])


if __name__ == "__main__":
    main()
