"""Log-log plots of episodes/s against batch size B and catalog size N, from the rows the
throughput and scale benchmarks wrote (no new measurement).

    python benchmarks/plot_perf.py                # -> docs/perf/eps_vs_B.png, eps_vs_N.png
    python benchmarks/plot_perf.py --tasks C1 CART    # only these task sets

Each line is one series of rows measured with everything but the swept axis fixed (the
same tasks, agent and the other size); for a repeated point the latest row counts, since
rows accumulate run after run. Only finished rows (no ``status`` or ``status == "ok"``)
are drawn.
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

RESULTS = Path(__file__).parent / "results"
DOCS = Path(__file__).parent.parent / "docs" / "perf"


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _finished(row: dict) -> bool:
    return row.get("status", "ok") == "ok" and row.get("episodes_per_s") is not None


def series(rows: list[dict], axis: str, fixed: tuple[str, ...]) -> dict[tuple, dict[int, float]]:
    """{fixed values: {axis value: episodes/s}} from the latest run (``run`` key) that has
    at least two points of that series: points from different runs, on a shared machine,
    would not compare."""
    runs: dict[tuple, dict] = defaultdict(lambda: defaultdict(dict))
    for row in rows:
        if _finished(row):
            key = tuple(row.get(f) for f in fixed)
            runs[key][row["run"]][int(row[axis])] = float(row["episodes_per_s"])
    out = {}
    for key, by_run in runs.items():
        full = [pts for pts in by_run.values() if len(pts) >= 2]
        if full:
            out[key] = full[-1]
    return out


def throughput_rows(rows: list[dict]) -> list[dict]:
    """The throughput benchmark's batched rows, shaped like scale rows; a run starts at
    each looped-baseline row."""
    out, run = [], 0
    for r in rows:
        run += r.get("mode") == "looped"
        if r.get("mode") == "batched":
            out.append(r | {"tasks": "CART", "N": r.get("catalog_size"), "run": run})
    return out


def scale_rows(rows: list[dict]) -> list[dict]:
    """scale.py rows; one sweep (its parent's pid) is one run."""
    return [r | {"run": r.get("sweep_pid")} for r in rows]


def _plot(lines: dict[str, dict[int, float]], xlabel: str, title: str, path: Path) -> None:
    if not lines:
        print(f"no series for {path.name}: not drawn")
        return
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, pts in sorted(lines.items()):
        xs = sorted(pts)
        ax.plot(xs, [pts[x] for x in xs], marker="o", label=label)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel("episodes / s (steady state, median)")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--results", type=Path, default=RESULTS)
    ap.add_argument("--out", type=Path, default=DOCS)
    ap.add_argument("--tasks", nargs="*", default=None, help="task sets to draw (default all)")
    args = ap.parse_args(argv)
    scale = scale_rows(read_rows(args.results / "scale.jsonl"))
    thru = throughput_rows(read_rows(args.results / "throughput.jsonl"))
    if args.tasks is not None:
        scale = [r for r in scale if r.get("tasks") in args.tasks]
        thru = [r for r in thru if r.get("tasks") in args.tasks]
    device = {r.get("device") for r in scale + thru}

    by_b = {
        f"{t} (N = {n:,}, {src})": pts
        for src, rows in (("throughput.py", thru), ("scale.py", scale))
        for (t, n), pts in series(rows, "B", ("tasks", "N")).items()
    }
    by_n = {f"{t} (B = {b:,})": pts for (t, b), pts in series(scale, "N", ("tasks", "B")).items()}
    if not by_b and not by_n:
        raise SystemExit(f"no sweep rows under {args.results}")
    where = ", ".join(sorted(str(d) for d in device if d))
    _plot(
        by_b,
        "batch size B (episodes in parallel)",
        f"episodes/s vs B ({where})",
        args.out / "eps_vs_B.png",
    )
    _plot(
        by_n, "catalog size N (products)", f"episodes/s vs N ({where})", args.out / "eps_vs_N.png"
    )
    print(
        f"wrote {args.out / 'eps_vs_B.png'} ({len(by_b)} series), "
        f"{args.out / 'eps_vs_N.png'} ({len(by_n)} series)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
