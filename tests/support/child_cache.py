"""Subprocess checks (``ecomjax.sharding.run_on_host_devices``) reuse the suite's persistent
compile cache: the child reads it from the environment it inherits."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def share_compile_cache() -> None:
    """Point a child interpreter at the suite's cache (conftest), unless it is off."""
    cache = os.environ.get("ECOMJAX_JAX_CACHE", str(ROOT / ".jax_cache"))
    if cache != "off":
        os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", cache)
        os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "2")
