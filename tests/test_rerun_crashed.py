"""scripts/test.sh's rerun of what a crashed xdist worker left unfinished
(tests/support/rerun_crashed.py), run on small sessions whose tests abort their worker."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# As in the suite (conftest.py), every file is one xdist group: one worker runs it in order.
PASSING = """
import pytest
pytestmark = pytest.mark.xdist_group("a")

def test_one():
    assert 1 + 1 == 2

def test_two():
    assert "a" < "b"
"""

# Aborts its interpreter (as XLA's compiler did) the first N times it runs; a file in the
# session's directory counts the runs, so a fresh session sees the earlier ones.
CRASHING = """
import os
from pathlib import Path
import pytest
pytestmark = pytest.mark.xdist_group("crash")

def test_crashes_at_first():
    {wait}
    runs = Path(__file__).with_name("runs.txt")
    n = int(runs.read_text()) if runs.exists() else 0
    runs.write_text(str(n + 1))
    if n < {crashes}:
        os.abort()

def test_after_the_crash():
    assert True
"""

# Fails, then leaves a file behind once pytest has sent the failure's reports (a worker
# starts a test only after its predecessor's teardown), so a crash can wait for them.
FAILING = """
from pathlib import Path
import pytest
pytestmark = pytest.mark.xdist_group("f")

def test_fails():
    assert 1 == 2

def test_signals_the_failure_is_in():
    Path(__file__).with_name("failed.txt").write_text("")
"""

# The two files run on the two workers; the crash waits until the failure is reported.
WAIT_FOR_THE_FAILURE = """import time
    for _ in range(600):
        if Path(__file__).with_name("failed.txt").exists():
            break
        time.sleep(0.1)"""


def _run(tmp_path: Path, files: dict[str, str]) -> subprocess.CompletedProcess:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    options = ["-n", "2", "--dist", "loadgroup", "--max-worker-restart=0", "-p", "no:cacheprovider"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONFAULTHANDLER": ""}
    cmd = [sys.executable, "-m", "tests.support.rerun_crashed", *options, "--", str(tmp_path)]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)


def test_a_crash_once_is_mended_by_one_rerun_of_the_unfinished_files(tmp_path):
    crashing = CRASHING.format(crashes=1, wait="")
    out = _run(tmp_path, {"test_a.py": PASSING, "test_crash.py": crashing})
    assert out.returncode == 0, out.stdout[-3000:]
    assert "crashed" in out.stdout  # the first session really lost its worker
    rerun = out.stdout.split("rerun_crashed:")[1]
    assert "test_crash.py" in rerun.splitlines()[0]
    assert (tmp_path / "runs.txt").read_text() == "2"
    assert "2 passed" in rerun  # the rerun ran the crashed file, both of its tests


def test_a_test_that_crashes_every_time_still_fails_the_run(tmp_path):
    crashing = CRASHING.format(crashes=9, wait="")
    out = _run(tmp_path, {"test_a.py": PASSING, "test_crash.py": crashing})
    assert out.returncode != 0
    assert out.stdout.count("rerun_crashed:") == 1  # once, not until it passes
    assert (tmp_path / "runs.txt").read_text() == "2"


def test_a_real_failure_beside_a_crash_is_never_rerun(tmp_path):
    crashing = CRASHING.format(crashes=1, wait=WAIT_FOR_THE_FAILURE)
    out = _run(tmp_path, {"test_f.py": FAILING, "test_crash.py": crashing})
    assert out.returncode == 1
    assert "rerun_crashed:" not in out.stdout
    assert "test_fails" in out.stdout and "crashed" in out.stdout
