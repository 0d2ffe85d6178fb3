"""Where every benchmark's rows go: appended as JSON lines, so reruns accumulate history.

Kept free of jax so that sweep parents (scale.py, catalog_memory.py) can use it without
starting a backend."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path


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
