"""Multi-process runs on jax.distributed (``ecomjax.distributed``), over loopback on this
machine: every process's result and the final curriculum equal one process running the
same global batch, bit for bit, and a process that dies stops the others."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ecomjax import distributed as dist
from ecomjax.runner import RunConfig, run

PY = sys.executable
CHECK = [PY, "-m", "ecomjax.distributed", "check"]


# One compile cache for this file's runs: the dead-process test replays 2-mixed's program.
CACHE = Path(os.environ.get("ECOMJAX_JAX_CACHE", Path(__file__).parents[1] / ".jax_cache"))


def _cli(tasks: str, batch: int, rounds: int, *extra: str) -> list[str]:
    cache = ["--no-compile-cache"] if str(CACHE) == "off" else ["--compile-cache", str(CACHE)]
    return [
        PY, "-m", "ecomjax.cli", "run", "--tasks", tasks, "--batch", str(batch),
        "--rounds", str(rounds), "--catalog-size", "200", "--seed", "3", "--json",
        *cache, *extra,
    ]  # fmt: skip


# gRPC can abort process 0 while JAX stops its coordination service at exit, after every
# process printed its report (``server.cc ... Check failed: queue.Pop() == nullptr`` in
# ~RealRequestMatcher: once in CI, in none of 340 processes launched here, loaded or not;
# docs/multihost.md). A launch whose only failures are that abort after a finished
# report runs once more; any other failure, or the abort twice, fails the test.
TEARDOWN_ABORT = "Check failed: queue.Pop() == nullptr"


def _teardown_abort(r: subprocess.CompletedProcess) -> bool:
    """The process finished its work (a JSON report is its last line) and gRPC aborted it
    (SIGABRT) in the coordination service's teardown."""
    lines = r.stdout.strip().splitlines()
    reported = bool(lines) and lines[-1].startswith("{")
    return r.returncode == -6 and TEARDOWN_ABORT in r.stderr and reported


def _launch(argv: list[str], n: int, timeout: float) -> list[subprocess.CompletedProcess]:
    runs = dist.launch_local(argv, n, timeout=timeout)
    failed = [r for r in runs if r.returncode != 0]
    if failed and all(_teardown_abort(r) for r in failed):
        runs = dist.launch_local(argv, n, timeout=timeout)
    return runs


def test_only_the_teardown_abort_after_a_report_is_launched_again():
    def done(code: int, out: str, err: str) -> subprocess.CompletedProcess:
        return subprocess.CompletedProcess([], code, out, err)

    report, abort = (
        '{"identical": true}\n',
        f"F1207 server.cc:584] {TEARDOWN_ABORT} (0x7f vs. (null))",
    )
    assert _teardown_abort(done(-6, "log line\n" + report, abort))
    assert not _teardown_abort(done(-6, "log line\n", abort))  # aborted before its report
    assert not _teardown_abort(done(-6, report, "Fatal Python error"))  # another abort
    assert not _teardown_abort(done(1, report, abort))  # an ordinary failure
    assert not _teardown_abort(done(0, report, ""))


def _reports(runs: list[subprocess.CompletedProcess]) -> list[dict]:
    for i, r in enumerate(runs):
        assert r.returncode == 0, f"process {i} failed ({r.returncode}):\n{r.stderr[-3000:]}"
    return [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]


def test_cluster_settings_are_checked(monkeypatch):
    assert not dist.Cluster().enabled and not dist.Cluster(num_processes=1).enabled
    assert dist.initialize(dist.Cluster(num_processes=1)) is False  # nothing to join
    with pytest.raises(ValueError, match="coordinator"):
        dist.Cluster(num_processes=2, process_id=0).validate()
    with pytest.raises(ValueError, match="process_id must lie in 0..1"):
        dist.Cluster("127.0.0.1:1", 2, 2).validate()
    with pytest.raises(ValueError, match="num_processes"):
        dist.Cluster(num_processes=0).validate()
    monkeypatch.setenv(dist.ENV_COORDINATOR, "10.0.0.1:7777")
    monkeypatch.setenv(dist.ENV_NUM_PROCESSES, "4")
    monkeypatch.setenv(dist.ENV_PROCESS_ID, "3")
    assert dist.cluster_from_args() == dist.Cluster("10.0.0.1:7777", 4, 3)
    from ecomjax.cli import build_parser

    args = build_parser().parse_args(["run", "--num-processes", "2", "--process-id", "1"])
    assert dist.cluster_from_args(args) == dist.Cluster("10.0.0.1:7777", 2, 1)


def test_a_batch_that_does_not_split_evenly_is_refused():
    """Over 2 processes, 2 tasks need a batch that is a multiple of 4: a clear error from
    every process, before anything compiles."""
    runs = dist.launch_local(_cli("CART,STATUS", 6, 1), 2, timeout=300)
    for r in runs:
        assert r.returncode == 2, r.stderr[-2000:]
        assert "batch must be a multiple of 4" in r.stderr


# exact_floats: the reward floats too are bit-identical. Not for PD (and C8, which holds
# it): XLA:CPU may contract PD's weighted r_task into an FMA in one batch shape's program
# and not in another's, one ulp apart (docs/limits.md); d, success and the curriculum
# still agree bit for bit, and the mean rewards to rounding.
# k: host devices per process (--devices), so the run spans n * k devices.
CASES = [
    pytest.param(2, "CART,STATUS", 32, True, 1, id="2-mixed"),
    pytest.param(4, "CART", 64, True, 1, id="4-CART"),
    pytest.param(2, "CART,STATUS", 32, True, 2, id="2x2-devices-mixed"),
    pytest.param(2, "CART", 32, True, 1, id="2-CART", marks=pytest.mark.slow),
    pytest.param(2, "C8", 32, False, 1, id="2-C8", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("n, tasks, batch, exact_floats, k", CASES)
def test_processes_equal_one_process(n, tasks, batch, exact_floats, k):
    """Each of n processes plays 1/n of every slice; all of them report the digest of the
    whole batch's (task, d, success) rows of every round (and of every outcome column),
    the curriculum windows after every round and the final curriculum counters of one
    process playing it all. The curriculum moves during the run (so a process that
    counted only its own episodes would sample other d and disagree)."""
    rounds = 4
    want = run(RunConfig(tasks=tasks, batch=batch, rounds=rounds, catalog_size=200, seed=3))
    assert want.history[0] != want.history[-1], "the curriculum must move for this test to bite"
    argv = _cli(tasks, batch, rounds, *(["--devices", str(k)] if k > 1 else []))
    reports = _reports(_launch(argv, n, timeout=1500))
    for i, got in enumerate(reports):
        assert (got["processes"], got["devices"]) == (n, n * k)
        assert got["episodes"] == want.episodes == batch * rounds
        assert got["outcome_digest"] == want.outcome_digest, f"process {i}: episodes differ"
        if exact_floats:
            assert got["digest"] == want.digest, f"process {i}: reward floats differ"
        assert got["curriculum_state"] == want.state, f"process {i}: curriculum differs"
        for t, row in want.summary()["per_task"].items():
            assert got["per_task"][t]["success_rate"] == row["success_rate"]
            assert got["per_task"][t]["mean_reward"] == pytest.approx(row["mean_reward"], abs=1e-6)
        windows = {t: list(w) for t, w in want.curriculum.items()}
        assert {t: got["per_task"][t]["h"] for t in windows} == {
            t: w[1] for t, w in windows.items()
        }


def test_local_devices_equal_one_device():
    """``ecomjax run --devices 2``: one process, two CPU host devices (what keeps both
    cores of a CPU busy), the same episodes and curriculum as one device; a batch that does
    not split and a count below 1 are refused before anything compiles."""
    tasks, batch, rounds = "CART,STATUS", 32, 4
    want = run(RunConfig(tasks=tasks, batch=batch, rounds=rounds, catalog_size=200, seed=3))

    def cli(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(list(argv), capture_output=True, text=True, timeout=1500)

    (got,) = _reports([cli(*_cli(tasks, batch, rounds, "--devices", "2"))])
    assert (got["processes"], got["devices"]) == (1, 2)
    assert got["digest"] == want.digest and got["outcome_digest"] == want.outcome_digest
    assert got["curriculum_state"] == want.state
    for argv, message in [
        (_cli(tasks, 6, 1, "--devices", "2"), "batch must be a multiple of 4"),
        (_cli(tasks, 8, 1, "--devices", "0"), "--devices must be at least 1"),
    ]:
        r = cli(*argv)
        assert r.returncode == 2 and message in r.stderr, r.stderr[-2000:]


def test_auto_reset_across_processes_equals_one_process_over_as_many_devices():
    """Auto-reset rounds over 2 processes: device j of the mesh keeps its own lanes and
    hands out ids c * 2 + j, so the run equals one process over 2 host devices bit for bit
    (every completion in (step, device, slot) order, the curriculum after every round)."""
    argv = _cli("CART,STATUS", 16, 3, "--auto-reset", "6")
    (want,) = _reports([subprocess.run([*argv, "--devices", "2"], capture_output=True,
                                       text=True, timeout=1500)])  # fmt: skip
    assert want["devices"] == 2 and want["episodes"] > 16  # lanes were recycled
    reports = _reports(_launch(argv, 2, timeout=1500))
    for i, got in enumerate(reports):
        assert (got["processes"], got["devices"]) == (2, 2)
        assert got["episodes"] == want["episodes"]
        assert got["digest"] == want["digest"], f"process {i}: completions differ"
        assert got["curriculum_state"] == want["curriculum_state"], f"process {i}"


@pytest.mark.parametrize("n", [2, 4])
def test_row_sharded_retrieval_across_processes(n):
    """The catalog's rows split over n processes (each reads only its own rows); the exact
    top-k merged across them equals one device's, ids and tie order included."""
    runs = _launch([*CHECK, "ecomjax.kernels.sharded:check_sharded_topk"], n, timeout=900)
    for report in _reports(runs):
        assert report == {"devices": n, "n": 1003, "cases": 6, "identical": True}


@pytest.mark.parametrize("n", [2, 4])
def test_row_sharded_pools_across_processes(n):
    """PD/SUB's evaluation pools over a catalog split by rows over n processes: every
    episode's statistics (|pool|, extremes, top-k keys) equal one device's."""
    runs = _launch([*CHECK, "ecomjax.kernels.sharded_pool:check_sharded_pool"], n, timeout=900)
    for report in _reports(runs):
        assert report == {"devices": n, "n": 1003, "cases": 5, "identical": True}


@pytest.mark.parametrize("n", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_row_sharded_catalog_rollout_across_processes(n):
    """``ecomjax run --shard-catalog`` over n processes: each device holds 200 / n of the
    embedding rows, and the random agent's searches (relevance, similar_to and keyed
    sorts) and SUB's cosine scores read them across processes in lockstep. Every process
    reports the digest of every outcome column, and the curriculum, of one process
    running the same global batch with the whole table. The retrieval chunk (25 rows) is
    at most one device's rows, so the relevance dots have one shape on both sides."""
    tasks, batch, rounds = "CART,SUB", 16, 2
    chunk = ["--search-chunk", "25", "--agent", "random"]
    want = run(RunConfig(tasks=tasks, batch=batch, rounds=rounds, catalog_size=200, seed=3,
                         agent="random", search_chunk=25))  # fmt: skip
    argv = _cli(tasks, batch, rounds, "--shard-catalog", *chunk)
    for i, got in enumerate(_reports(_launch(argv, n, timeout=1500))):
        assert (got["processes"], got["devices"]) == (n, n)
        assert got["digest"] == want.digest, f"process {i}: episodes differ"
        assert got["curriculum_state"] == want.state, f"process {i}: curriculum differs"


# 4 runs by default: 2 processes once passed by luck while SUB's pool loop ran another
# trip count (so other collectives) on each device, which 4 processes caught.
@pytest.mark.parametrize(
    "n, tasks, per_device",
    [
        pytest.param(4, "PD,SUB,CART", 2, id="4"),
        pytest.param(2, "PD,SUB,CART", 2, id="2", marks=pytest.mark.slow),
        pytest.param(2, "C8", 1, id="2-C8", marks=pytest.mark.slow),
    ],
)
def test_row_sharded_catalog_states_across_processes(n, tasks, per_device):
    """The same split, judged on the whole final state: episodes of the random agent,
    episodes and embedding rows split over n processes, gathered, equal one device's
    whole-table run leaf for leaf (Seen, the cart, the last turn's search cards, every
    reward field): the search results themselves, which the outcome columns above only
    partly reflect."""
    kwargs = {"tasks": tasks, "per_device": per_device, "n_products": 200,
              "shard_catalog": True, "search_chunk": 25, "agent": "random"}  # fmt: skip
    argv = [*CHECK, "ecomjax.sharding:check_sharded_rollout", json.dumps(kwargs)]
    for report in _reports(_launch(argv, n, timeout=1500)):
        assert report["identical"] and report["devices"] == n
        assert report["emb_rows_per_device"] == 200 // n


@pytest.mark.slow
def test_every_episode_state_across_processes():
    """The whole final state of a mixed batch, gathered from 2 processes' slices, equals
    one device's run leaf for leaf (``sharding.check_sharded_rollout``)."""
    kwargs = json.dumps({"tasks": "CART,STATUS", "per_device": 2})
    runs = _launch([*CHECK, "ecomjax.sharding:check_sharded_rollout", kwargs], 2, timeout=900)
    for report in _reports(runs):
        assert report["identical"] and report["devices"] == 2


def _started(n: int, argv: list[str], logs: Path) -> list[tuple[subprocess.Popen, Path]]:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env[dist.ENV_COORDINATOR] = f"127.0.0.1:{dist.free_port()}"
    env[dist.ENV_NUM_PROCESSES] = str(n)
    out = []
    for i in range(n):
        err = logs / f"p{i}.err"
        with open(err, "w") as fh:
            proc = subprocess.Popen(
                argv, env={**env, dist.ENV_PROCESS_ID: str(i)}, stdout=subprocess.DEVNULL, stderr=fh
            )
        out.append((proc, err))
    return out


@pytest.mark.parametrize("victim", [1, 0], ids=["worker-dies", "coordinator-dies"])
def test_a_dead_process_stops_the_others(victim, tmp_path):
    """Kill one of two processes mid-run: the other exits non-zero with a message naming
    the cause within a bounded time (gloo fails at once; the coordination service's
    heartbeat timeout, 10 s here, bounds the rest), instead of waiting forever."""
    argv = _cli("CART,STATUS", 32, 10**6, "--progress", "--heartbeat-timeout", "10")
    procs = _started(2, argv, tmp_path)
    try:
        lead_err = procs[0][1]
        deadline = time.monotonic() + 900
        while not re.search(r"\|\s*[1-9]\d*/", lead_err.read_text()):  # a round finished
            assert all(p.poll() is None for p, _ in procs), lead_err.read_text()[-3000:]
            assert time.monotonic() < deadline, "no round finished"
            time.sleep(0.5)
        procs[victim][0].send_signal(signal.SIGKILL)
        survivor, err = procs[1 - victim]
        t0 = time.monotonic()
        rc = survivor.wait(timeout=120)
        waited = time.monotonic() - t0
    finally:
        for p, _ in procs:
            if p.poll() is None:
                p.kill()
    text = err.read_text()
    assert rc != 0
    assert waited < 60, f"took {waited:.0f} s to stop"
    clear = "another process of the run has probably died" in text or (
        "JAX distributed service detected fatal errors" in text
    )
    assert clear, text[-3000:]
    if victim == 1:  # the worker's collective fails at once: ecomjax's own message
        assert rc == dist.EXIT_PEER_LOST, text[-3000:]
