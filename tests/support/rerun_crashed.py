"""Run pytest, and run once more, in a fresh session, the test files a crashed xdist
worker left unfinished.

Why: long-lived test workers died in XLA compiles when they ran out of memory maps
(vm.max_map_count; docs/testing.md). The root conftest.py now clears JAX's caches before
that, and this is the second line of defence: pytest-xdist 3.8 cannot replace a worker
under ``--dist loadgroup`` without hanging (pytest-dev/pytest-xdist#1378), so
``scripts/test.sh`` runs with ``--max-worker-restart=0`` and a crash ends the session; a
second session in new interpreters reruns what the crash left unfinished. It reruns only
when a worker died and no test failed for any other reason, and only once: a test that
crashes every time, or a real failure, still fails the run.

As a pytest plugin (``-p tests.support.rerun_crashed``) the controller writes a ledger
(collected, finished, crashed and otherwise failed node ids) to ``$ECOMJAX_CRASH_LEDGER``.
As a program, ``python -m tests.support.rerun_crashed OPTIONS... -- PATHS...`` runs
``pytest OPTIONS PATHS`` with the plugin and reruns the unfinished files with
``pytest OPTIONS FILES``; its exit status is the last session's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

LEDGER_ENV = "ECOMJAX_CRASH_LEDGER"


def _plain(nodeid: str) -> str:
    """xdist's loadgroup appends ``@group`` to every node id; the file is what reruns."""
    return nodeid.split("::")[0].split("@")[0]


class Ledger:
    """The controller's record of a session, written when it finishes."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.collected: set[str] = set()
        self.finished: set[str] = set()
        self.crashed: list[str] = []
        self.failed: set[str] = set()
        self.workers_down = 0

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node, ids) -> None:
        self.collected.update(ids)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node, error) -> None:
        if error is not None:
            self.workers_down += 1

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem, report, sched) -> None:
        self.crashed.append(crashitem)  # xdist logs its failed report right after this

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.failed.add(report.nodeid or "<collection>")

    def pytest_runtest_logreport(self, report) -> None:
        if report.when == "teardown":
            self.finished.add(report.nodeid)
        if report.failed and report.nodeid not in self.crashed:
            self.failed.add(report.nodeid)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session, exitstatus) -> None:
        unfinished = (self.collected - self.finished) | set(self.crashed)
        record = {
            "exitstatus": int(exitstatus),
            "workers_down": self.workers_down,
            "crashed": self.crashed,
            "failed": sorted(self.failed),
            "unfinished": sorted(unfinished),
        }
        Path(self.path).write_text(json.dumps(record, indent=1))


def pytest_configure(config) -> None:
    path = os.environ.get(LEDGER_ENV)
    if path and not hasattr(config, "workerinput"):  # the controller, not a worker
        config.pluginmanager.register(Ledger(path), "ecomjax-crash-ledger")


def files_to_rerun(record: dict) -> list[str]:
    """The files to run again, or none when the session is not one a rerun may mend."""
    if record["exitstatus"] != 1 or not record["workers_down"] or record["failed"]:
        return []
    return sorted({_plain(nodeid) for nodeid in record["unfinished"]})


def main(argv: list[str]) -> int:
    if "--" not in argv:
        raise SystemExit("usage: python -m tests.support.rerun_crashed OPTIONS... -- PATHS...")
    cut = argv.index("--")
    options, paths = argv[:cut], argv[cut + 1 :]
    pytest_cmd = [sys.executable, "-m", "pytest", "-p", "tests.support.rerun_crashed", *options]
    with tempfile.TemporaryDirectory() as tmp:
        ledger = os.path.join(tmp, "ledger.json")
        env = {**os.environ, LEDGER_ENV: ledger}
        rc = subprocess.call([*pytest_cmd, *paths], env=env)
        if rc == 0 or not os.path.exists(ledger):
            return rc
        record = json.loads(Path(ledger).read_text())
    files = files_to_rerun(record)
    if not files:
        return rc
    print(
        f"\nrerun_crashed: a worker died in {record['crashed'] or 'between tests'}; "
        f"running the {len(files)} files it left unfinished once more: {' '.join(files)}",
        flush=True,
    )
    return subprocess.call([*pytest_cmd, *files], env={**os.environ, LEDGER_ENV: ""})


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
