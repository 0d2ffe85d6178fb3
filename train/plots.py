"""PNG plots of training runs and the curriculum study (matplotlib, Agg backend).

Every function takes the per-(step, run) rows that ``train.loop.train`` returns (with the
study's ``schedule`` name added) and writes one small PNG (dpi 80). Curves are means over
seeds with a min-max band; noisy per-step series are smoothed by a trailing moving
average whose window is stated on the axis label.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

DPI = 80
KINDS = ("saturated", "starved", "mixed")


def _smooth(y: np.ndarray, w: int) -> np.ndarray:
    if w <= 1 or y.shape[-1] < 2:
        return y
    c = np.cumsum(np.pad(y, [(0, 0)] * (y.ndim - 1) + [(1, 0)]), -1)
    n = np.arange(1, y.shape[-1] + 1)
    lo = np.maximum(n - w, 0)
    return (c[..., n] - c[..., lo]) / (n - lo)


def _series(rows: list[dict], key, group: str = "schedule") -> dict[str, tuple]:
    """{group name: (episodes [S], values [seeds, S, ...])} for ``key`` (a row key or a
    function of the row)."""
    get = key if callable(key) else (lambda r: r[key])
    per: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    eps: dict[str, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        per[r[group]][r["run"]].append(np.asarray(get(r), float))
        eps[r[group]][r["run"]].append(r["episodes"])
    out = {}
    for name, runs in per.items():
        n = min(len(v) for v in runs.values())
        vals = np.stack([np.stack(v[:n]) for v in runs.values()])
        x = np.asarray(next(iter(eps[name].values()))[:n])
        out[name] = (x, vals)
    return out


STYLES = ("-", "--", ":", "-.", (0, (5, 1, 1, 1)))


def _style(i: int) -> dict:
    """Colour and dash per schedule: runs that share seeds can coincide exactly (adaptive
    at h = 0 plays the same episodes as static d = 0), so lines must stay distinguishable."""
    return {"color": f"C{i}", "ls": STYLES[i % len(STYLES)]}


def _band(ax, x, vals, label, i=0):
    mean = vals.mean(0)
    (line,) = ax.plot(x, mean, label=label, lw=1.6, alpha=0.85, **_style(i))
    if vals.shape[0] > 1:
        ax.fill_between(x, vals.min(0), vals.max(0), color=line.get_color(), alpha=0.15, lw=0)


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def _main_rows(rows: list[dict]) -> list[dict]:
    """Rows of the schedule comparison (the tau sweep's extra points left out)."""
    return [r for r in rows if not r["schedule"].startswith("tau")]


def plot_difficulty(rows, families, path: Path, title: str = "") -> Path:
    """Difficulty reached vs training episodes, one panel per family: the curriculum
    frontier h (solid) and the mean training d (dashed) of each schedule."""
    rows = _main_rows(rows)
    n = len(families)
    cols = min(n, 4)
    rows_n = -(-n // cols)
    fig, axes = plt.subplots(
        rows_n, cols, figsize=(max(3.2 * cols, 7), 2.6 * rows_n + 0.8), squeeze=False
    )
    h = _series(rows, "h")
    dm = _series(rows, "d_mean")
    for i, fam in enumerate(families):
        ax = axes.flat[i]
        for j, name in enumerate(sorted(h)):
            x, v = h[name]
            color = f"C{j}"
            if name.startswith("adaptive"):
                ax.plot(x, v[..., i].mean(0), lw=1.8, label=f"{name} h", **_style(j))
                if v.shape[0] > 1:
                    ax.fill_between(
                        x, v[..., i].min(0), v[..., i].max(0), color=color, alpha=0.15, lw=0
                    )
            x2, v2 = dm[name]
            ax.plot(
                x2,
                _smooth(v2[..., i], 5).mean(0),
                color=color,
                lw=0.8,
                alpha=0.6,
                marker=".",
                ms=2,
                label=f"{name} mean d",
            )
        ax.set_title(fam, fontsize=9)
        ax.set_xlabel("training episodes", fontsize=8)
        ax.set_ylabel("d", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=6, loc="lower center", ncol=5)
    fig.suptitle(f"{title}: difficulty reached (h, lines) and mean training d (dots)", fontsize=10)
    fig.tight_layout(rect=(0, 0.12, 1, 1))
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
    return _save(fig, path)


def plot_heldout(rows, eval_d, path: Path, title: str = "", smooth: int = 10) -> Path:
    """Held-out success at each fixed d vs training episodes (mean over families)."""
    rows = _main_rows(rows)
    fig, axes = plt.subplots(1, len(eval_d), figsize=(3.2 * len(eval_d), 2.8), squeeze=False)
    s = _series(rows, lambda r: np.mean(r["eval_success"], 0))
    for j, d in enumerate(eval_d):
        ax = axes[0, j]
        for i, name in enumerate(sorted(s)):
            x, v = s[name]
            _band(ax, x, _smooth(v[..., j], smooth), name, i)
        ax.set_title(f"held-out d = {d}", fontsize=9)
        ax.set_xlabel("training episodes", fontsize=8)
        ax.set_ylabel(f"success (moving avg {smooth} steps)", fontsize=7)
        ax.set_ylim(-0.02, 1.02)
        ax.tick_params(labelsize=7)
    axes[0, 0].legend(fontsize=6)
    fig.suptitle(f"{title}: held-out IsCorrect at fixed d", fontsize=10)
    return _save(fig, path)


def plot_group_heatmap(rows, path: Path, title: str = "", max_cols: int = 40) -> Path:
    """(d x step) shares of saturated / starved / mixed training groups per schedule
    (summed over seeds and families; blank where no group was played)."""
    rows = _main_rows(rows)
    names = sorted({r["schedule"] for r in rows})
    steps = sorted({r["step"] for r in rows})
    bins = np.array_split(np.arange(len(steps)), min(max_cols, len(steps)))
    step_bin = {steps[i]: b for b, idx in enumerate(bins) for i in idx}
    counts = {n: np.zeros((3, 21, len(bins))) for n in names}
    for r in rows:
        c = counts[r["schedule"]]
        b = step_bin[r["step"]]
        for k, kind in enumerate(KINDS):
            c[k, :, b] += np.asarray(r[kind]).sum(0)
    d_top = 0
    for c in counts.values():
        nz = np.flatnonzero(c.sum((0, 2)))
        d_top = max(d_top, int(nz.max()) if nz.size else 0)
    fig, axes = plt.subplots(
        len(names), 3, figsize=(10, 1.9 * len(names) + 1.0), squeeze=False, sharex=True
    )
    per_bin = -(-len(steps) // len(bins))
    for i, name in enumerate(names):
        c = counts[name][:, : d_top + 1]
        tot = c.sum(0)
        for k, kind in enumerate(KINDS):
            ax = axes[i, k]
            share = np.where(tot > 0, c[k] / np.maximum(tot, 1), np.nan)
            im = ax.imshow(share, origin="lower", aspect="auto", vmin=0, vmax=1, cmap="viridis")
            if i == 0:
                ax.set_title(kind, fontsize=10)
            if k == 0:
                ax.set_ylabel(f"{name}\nd", fontsize=8)
            ax.tick_params(labelsize=6)
        axes[-1, 1].set_xlabel(f"step bin (up to {per_bin} steps each)", fontsize=8)
    fig.suptitle(
        f"{title}: share of training groups per (d, step) that are saturated / starved / "
        "mixed (is_correct; blank = no group)",
        fontsize=9,
    )
    fig.tight_layout(rect=(0, 0, 0.9, 0.97))
    fig.colorbar(im, ax=axes, shrink=0.5, fraction=0.04)
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path


def plot_kept(rows, path: Path, title: str = "", smooth: int = 10) -> Path:
    """Share of training groups DAPO's dynamic sampling keeps (rewards not all equal):
    on the group reward the loss uses (r_task by default) and on is_correct."""
    rows = _main_rows(rows)
    fig, ax = plt.subplots(1, 2, figsize=(9, 3))
    for key, a in (("kept_fraction", ax[0]), ("kept_fraction_correct", ax[1])):
        s = _series(rows, key)
        for i, name in enumerate(sorted(s)):
            x, v = s[name]
            _band(a, x, _smooth(v, smooth), name, i)
        a.set_ylim(-0.02, 1.02)
        a.set_xlabel("training episodes", fontsize=8)
        a.set_ylabel(f"kept share (moving avg {smooth})", fontsize=8)
        a.tick_params(labelsize=7)
    ax[0].set_title("on the loss's group reward", fontsize=9)
    ax[1].set_title("on is_correct (mixed groups)", fontsize=9)
    ax[0].legend(fontsize=6)
    fig.suptitle(f"{title}: effective-group ratio", fontsize=10)
    return _save(fig, path)


def plot_tau_sweep(summary, eval_d, path: Path, title: str = "") -> Path | None:
    """tau_acc x tau_num: final frontier h and held-out success (means over seeds,
    families and eval d)."""
    pts = [s for s in summary if s.get("tau")]
    if len({tuple(s["tau"]) for s in pts}) < 2:  # no sweep ran (adaptive-default alone)
        return None
    accs = sorted({s["tau"][0] for s in pts})
    nums = sorted({s["tau"][1] for s in pts})
    h = np.full((len(accs), len(nums)), np.nan)
    succ = np.full_like(h, np.nan)
    for i, a in enumerate(accs):
        for j, n in enumerate(nums):
            mine = [s for s in pts if tuple(s["tau"]) == (a, n)]
            if mine:
                h[i, j] = np.mean([np.mean(list(s["final_h"].values())) for s in mine])
                succ[i, j] = np.mean([np.mean(list(s["heldout_mean"].values())) for s in mine])
    fig, axes = plt.subplots(1, 2, figsize=(8, 3.2))
    for ax, m, lab in ((axes[0], h, "final h"), (axes[1], succ, "held-out success")):
        im = ax.imshow(m, origin="lower", cmap="magma", aspect="auto")
        ax.set_xticks(range(len(nums)), [str(n) for n in nums])
        ax.set_yticks(range(len(accs)), [str(a) for a in accs])
        ax.set_xlabel("tau_num", fontsize=8)
        ax.set_ylabel("tau_acc", fontsize=8)
        for i in range(len(accs)):
            for j in range(len(nums)):
                if np.isfinite(m[i, j]):
                    ax.text(
                        j,
                        i,
                        f"{m[i, j]:.2f}",
                        ha="center",
                        va="center",
                        fontsize=8,
                        bbox={"facecolor": "white", "alpha": 0.7, "lw": 0},
                    )
        ax.set_title(lab, fontsize=9)
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(f"{title}: tau sweep (default convention; d in {list(eval_d)})", fontsize=10)
    return _save(fig, path)


def plot_learning(
    rows, eval_d, path: Path, baseline: float | None = None, smooth: int = 10
) -> Path:
    """The learning check: training and held-out success vs episodes (and wall time)."""
    x = np.array([r["episodes"] for r in rows])
    wall = np.array([r["wall_s"] for r in rows])
    train_s = np.array([np.mean(r["success"]) for r in rows])
    held = np.array([np.asarray(r["eval_success"]).mean(0) for r in rows])  # [S, n_d]
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    ax[0].plot(x, _smooth(train_s[None], smooth)[0], label="training batch", lw=1.4)
    ax[0].plot(x, _smooth(held.mean(1)[None], smooth)[0], label="held-out (all d)", lw=1.4)
    if baseline is not None:
        ax[0].axhline(baseline, color="k", ls=":", lw=1, label=f"random agent ({baseline:.2%})")
    ax[0].set_xlabel("training episodes", fontsize=8)
    ax[0].set_ylabel(f"IsCorrect (moving avg {smooth})", fontsize=8)
    ax[0].legend(fontsize=7)
    for j, d in enumerate(eval_d):
        ax[1].plot(wall / 60, _smooth(held[:, j][None], smooth)[0], label=f"held-out d={d}", lw=1.2)
    ax[1].set_xlabel("training wall time, min (shared CPU, compile excluded)", fontsize=8)
    ax[1].set_ylabel("IsCorrect", fontsize=8)
    ax[1].legend(fontsize=7)
    for a in ax:
        a.set_ylim(-0.02, 1.02)
        a.tick_params(labelsize=7)
    fig.suptitle("CART from scratch", fontsize=10)
    return _save(fig, path)


def plot_all(rows, summary, families, eval_d, out: Path, title: str = "") -> list[Path]:
    out = Path(out)
    paths = [
        plot_difficulty(rows, families, out / "difficulty.png", title),
        plot_heldout(rows, eval_d, out / "heldout.png", title),
        plot_group_heatmap(rows, out / "groups_heatmap.png", title),
        plot_kept(rows, out / "kept_fraction.png", title),
        plot_tau_sweep(summary, eval_d, out / "tau_sweep.png", title),
    ]
    return [p for p in paths if p is not None]


__all__ = [
    "plot_all",
    "plot_difficulty",
    "plot_group_heatmap",
    "plot_heldout",
    "plot_kept",
    "plot_learning",
    "plot_tau_sweep",
    "replot",
]


def replot(folder: str | Path) -> list[Path]:
    """Re-draws a finished run's PNGs from its files: a learning check (``log.jsonl`` with
    one run; ``baseline.json`` if present) or a study collection (``summary.jsonl``)."""
    import json

    folder = Path(folder)
    rows = [json.loads(x) for x in (folder / "log.jsonl").read_text().splitlines()]
    meta = json.loads((folder / "config.json").read_text())
    eval_d = meta["config"]["eval_d"]
    summary_path = folder / "summary.jsonl"
    if summary_path.exists():
        summary = [json.loads(x) for x in summary_path.read_text().splitlines()]
        names = [r["name"] for r in meta["runs"]]
        for r in rows:
            r["schedule"] = r["run"].split("/")[0]
            r["run_index"] = names.index(r["run"])
        return plot_all(
            rows, summary, meta["families"], eval_d, folder, title=meta["study"]["tasks"]
        )
    base = folder / "baseline.json"
    baseline = json.loads(base.read_text())["success"] if base.exists() else None
    return [plot_learning(rows, eval_d, folder / "learning.png", baseline)]


if __name__ == "__main__":
    import sys

    for f in sys.argv[1:]:
        for p in replot(f):
            print(p, p.stat().st_size)
