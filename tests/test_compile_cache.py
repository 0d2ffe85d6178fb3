"""The entry points' persistent compilation cache (``ecomjax.compile_cache``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ecomjax import compile_cache

RUN = [sys.executable, "-m", "ecomjax.cli", "run", "--tasks", "STATUS", "--batch", "16"]
RUN += ["--rounds", "1", "--catalog-size", "200", "--json"]
HIT = "Persistent compilation cache hit for 'jit_round'"


def _entries(path: Path) -> set[str]:
    return {p.name for p in path.rglob("*") if p.is_file()} if path.exists() else set()


def _run(*extra: str, env: dict | None = None) -> subprocess.CompletedProcess:
    env = {**os.environ, "JAX_PLATFORMS": "cpu", **(env or {})}
    out = subprocess.run([*RUN, *extra], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out


def test_default_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("ECOMJAX_CACHE_DIR", str(tmp_path / "c"))
    assert compile_cache.default_dir() == tmp_path / "c"
    for off in ("off", "0", "none", ""):
        monkeypatch.setenv("ECOMJAX_CACHE_DIR", off)
        assert compile_cache.default_dir() is None
    monkeypatch.delenv("ECOMJAX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert compile_cache.default_dir() == tmp_path / "xdg" / "ecomjax" / "jax"


def test_a_second_launch_reuses_every_compiled_program(tmp_path):
    """The first `ecomjax run` writes its programs; the second loads the round from them
    (JAX logs each persistent-cache hit when JAX_LOG_COMPILES is set) and writes no new
    entry, and --no-compile-cache writes nothing anywhere."""
    cache = tmp_path / "cache"
    cold = _run("--compile-cache", str(cache), env={"JAX_LOG_COMPILES": "1"})
    first = _entries(cache)
    assert first, "the first launch wrote no cache entry"
    assert HIT not in cold.stderr
    warm = _run("--compile-cache", str(cache), env={"JAX_LOG_COMPILES": "1"})
    assert HIT in warm.stderr
    assert _entries(cache) == first
    off = tmp_path / "off"
    _run("--no-compile-cache", env={"ECOMJAX_CACHE_DIR": str(off)})
    assert not _entries(off)
    # The environment variable alone chooses the directory too (warm, so it hits; the
    # default directory is empty, so a hit can come from nowhere else).
    env = {"ECOMJAX_CACHE_DIR": str(cache), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    by_env = _run(env={**env, "JAX_LOG_COMPILES": "1"})
    assert HIT in by_env.stderr
