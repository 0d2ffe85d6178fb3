"""A tiny study end to end: JSONL rows with the expected keys, a summary and the PNGs."""

from __future__ import annotations

import json

import numpy as np

from ecomjax.train.curriculum_study import QUICK, TINY, runs_for, study, table

ROW_KEYS = {
    "step",
    "run",
    "seed",
    "episodes",
    "wall_s",
    "success",
    "r_total",
    "d_mean",
    "lo",
    "h",
    "kept_fraction",
    "kept_fraction_correct",
    "saturated",
    "starved",
    "mixed",
    "eval_success",
    "eval_r_total",
    "loss",
    "entropy",
}
SUMMARY_KEYS = {
    "run",
    "kind",
    "seed",
    "tau",
    "episodes",
    "final_h",
    "heldout_success",
    "heldout_mean",
    "kept_fraction_mean",
    "kept_fraction_correct_mean",
}
PNGS = ("difficulty.png", "heldout.png", "groups_heatmap.png", "kept_fraction.png", "tau_sweep.png")


def test_tiny_study_writes_logs_summary_and_plots(tmp_path):
    results = study(TINY, tmp_path, progress=False)
    out = tmp_path / "C1"
    rows = [json.loads(x) for x in (out / "log.jsonl").read_text().splitlines()]
    assert len(rows) == TINY.steps * 2  # adaptive-default + one tau sweep point
    for r in rows:
        assert set(r) >= ROW_KEYS
        assert np.asarray(r["saturated"]).shape == (1, 21)
        n_groups = np.sum(r["saturated"]) + np.sum(r["starved"]) + np.sum(r["mixed"])
        assert n_groups == TINY.groups
    summary = [json.loads(x) for x in (out / "summary.jsonl").read_text().splitlines()]
    assert [s["run"] for s in summary] == ["adaptive-default", "tau0.7x16"]
    assert summary == results["C1"]
    for s in summary:
        assert set(s) >= SUMMARY_KEYS
        assert s["episodes"] == TINY.steps * TINY.groups * TINY.group_size
    assert summary[1]["tau"] == [0.7, 16] and summary[0]["tau"] == [0.9, 32]
    for name in PNGS:
        png = out / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert 1_000 < png.stat().st_size < 300_000
    assert "adaptive-default" in table(summary, TINY.eval_d)


def test_runs_cover_schedules_and_sweep_without_duplicates():
    runs = runs_for(QUICK)
    names = [(r.name, r.seed) for r in runs]
    assert len(names) == len(set(names))
    sched = {r.name for r in runs if r.kind == "schedule"}
    assert sched == {"adaptive-default", "adaptive-rlve", "static-0", "static-8", "uniform-0-12"}
    taus = {r.tau for r in runs if r.kind == "sweep"}
    # The default point (0.9, 32) is the adaptive-default run itself.
    assert len(taus) == 8 and (0.9, 32) not in taus
    assert sum(r.kind == "schedule" for r in runs) == 5 * QUICK.seeds
