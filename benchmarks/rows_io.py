"""Where every benchmark's rows go: appended as JSON lines, so reruns accumulate history.

Kept free of jax so that sweep parents (scale.py, catalog_memory.py) can use it without
starting a backend."""

from __future__ import annotations

import importlib.util
import json
import subprocess
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def measured_root() -> Path:
    """The checkout whose ``ecomjax`` this process imports: an A/B run imports an old
    commit's worktree (PYTHONPATH) with this folder's scripts, and its rows must name that
    commit. Found without importing the package (no jax here)."""
    spec = importlib.util.find_spec("ecomjax")
    if spec is None or spec.origin is None:
        return ROOT
    root = Path(spec.origin).resolve().parents[1]
    return root if (root / ".git").exists() else ROOT  # an installed copy: these scripts


def git_commit() -> str:
    """The measured commit, with "-dirty" when tracked files differ from it, so every row
    says which code it measured ("unknown" outside a git checkout)."""
    root = measured_root()

    def git(*args: str) -> str:
        out = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""

    head = git("rev-parse", "--short=12", "HEAD")
    if not head:
        return "unknown"
    # Result rows appended by the run itself do not make the measured code dirty.
    changed = git("status", "--porcelain", "-uno", "--", ".", ":!benchmarks/results")
    return head + ("-dirty" if changed else "")


def append_rows(path: str | Path, rows: Iterable[dict]) -> int:
    """Append ``rows`` to the JSONL file at ``path`` (folders made as needed); returns
    how many were written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with path.open("a") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
            n += 1
    return n


def add_row_args(ap, out: Path, repeats: int, label: str | None = None) -> None:
    """The options every row-writing benchmark shares: catalog size, repeats, a row label
    and the JSONL file the rows go to."""
    ap.add_argument("--catalog-size", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=repeats)
    ap.add_argument("--label", default=label, help="tag the rows (ab_throughput.sh: the commit)")
    ap.add_argument("--out", type=Path, default=out)
