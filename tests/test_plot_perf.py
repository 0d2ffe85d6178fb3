"""benchmarks/plot_perf.py: series come from one run each, unfinished rows are skipped,
and the plots are written from rows alone."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "plot_perf", Path(__file__).parent.parent / "benchmarks" / "plot_perf.py"
)
plot_perf = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(plot_perf)


def _scale(pid, n, b, eps, status="ok"):
    return {
        "sweep_pid": pid,
        "tasks": "C1",
        "N": n,
        "B": b,
        "episodes_per_s": eps,
        "status": status,
    }


def test_series_takes_the_latest_run_with_two_points():
    rows = plot_perf.scale_rows(
        [
            _scale(1, 1000, 256, 10.0),
            _scale(1, 10000, 256, 5.0),
            _scale(2, 1000, 256, 20.0),
            _scale(2, 10000, 256, 8.0),
            _scale(2, 100000, 256, 1.0, status="timeout"),
            _scale(3, 1000, 256, 99.0),  # a lone point: not a series
        ]
    )
    got = plot_perf.series(rows, "N", ("tasks", "B"))
    assert got == {("C1", 256): {1000: 20.0, 10000: 8.0}}


def test_throughput_runs_start_at_each_looped_row():
    rows = [
        {"mode": "looped", "B": 1, "episodes_per_s": 1.0},
        {"mode": "batched", "B": 128, "episodes_per_s": 2.0, "catalog_size": 1000},
        {"mode": "batched", "B": 512, "episodes_per_s": 3.0, "catalog_size": 1000},
        {"mode": "looped", "B": 1, "episodes_per_s": 1.0},
        {"mode": "batched", "B": 512, "episodes_per_s": 4.0, "catalog_size": 1000},
    ]
    shaped = plot_perf.throughput_rows(rows)
    assert [r["run"] for r in shaped] == [1, 1, 2]
    # The second run has one point only, so the first run's series is drawn.
    assert plot_perf.series(shaped, "B", ("tasks", "N")) == {("CART", 1000): {128: 2.0, 512: 3.0}}


def test_main_writes_both_plots(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    rows = [_scale(7, n, 256, 1e6 / n) for n in (1000, 10000)] + [
        _scale(7, 10000, b, b / 10) for b in (64, 1024)
    ]
    (res / "scale.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert plot_perf.main(["--results", str(res), "--out", str(tmp_path / "out")]) == 0
    for name in ("eps_vs_B.png", "eps_vs_N.png"):
        assert (tmp_path / "out" / name).read_bytes()[:4] == b"\x89PNG"


def test_main_draws_only_the_named_task_sets(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    rows = [_scale(7, n, 256, 1e6 / n) for n in (1000, 10000)]
    (res / "scale.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(SystemExit):  # C1 rows only: nothing left to draw for C8
        plot_perf.main(["--results", str(res), "--out", str(tmp_path / "o"), "--tasks", "C8"])
    assert (
        plot_perf.main(["--results", str(res), "--out", str(tmp_path / "o"), "--tasks", "C1"]) == 0
    )


def test_main_refuses_an_empty_results_folder(tmp_path):
    with pytest.raises(SystemExit):
        plot_perf.main(["--results", str(tmp_path), "--out", str(tmp_path / "out")])
