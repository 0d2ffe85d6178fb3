"""The entry points' persistent compilation cache (``ecomjax.compile_cache``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

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


def test_min_compile_time_follows_the_environment(monkeypatch):
    monkeypatch.delenv("ECOMJAX_CACHE_MIN_COMPILE_S", raising=False)
    assert compile_cache.min_compile_s() == compile_cache.MIN_COMPILE_S
    monkeypatch.setenv("ECOMJAX_CACHE_MIN_COMPILE_S", "0")
    assert compile_cache.min_compile_s() == 0.0
    monkeypatch.setenv("ECOMJAX_CACHE_MIN_COMPILE_S", " 2.5 ")
    assert compile_cache.min_compile_s() == 2.5
    for bad in ("-1", "nan", "soon"):
        monkeypatch.setenv("ECOMJAX_CACHE_MIN_COMPILE_S", bad)
        with pytest.raises(ValueError, match="ECOMJAX_CACHE_MIN_COMPILE_S"):
            compile_cache.min_compile_s()


def test_a_malformed_threshold_exits_with_a_message():
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "ECOMJAX_CACHE_MIN_COMPILE_S": "soon"}
    out = subprocess.run(RUN, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 2
    assert "ECOMJAX_CACHE_MIN_COMPILE_S" in out.stderr and "Traceback" not in out.stderr


def test_the_threshold_decides_what_is_written(tmp_path):
    """Above every program's compile time no XLA executable is kept (the traced round in
    programs/ is the program cache's, which has no threshold); at 0 every one is."""
    high, zero = tmp_path / "high", tmp_path / "zero"
    _run("--compile-cache", str(high), env={"ECOMJAX_CACHE_MIN_COMPILE_S": "1e9"})
    _run("--compile-cache", str(zero), env={"ECOMJAX_CACHE_MIN_COMPILE_S": "0"})
    xla = {p for p in _entries(high) if p.endswith("-cache")}
    assert not xla, sorted(xla)[:5]
    assert any(p.startswith("jit__build-") for p in _entries(zero))


def test_a_second_launch_reuses_every_compiled_program(tmp_path):
    """The first `ecomjax run` writes its programs; the second loads the round from them
    (JAX logs each persistent-cache hit when JAX_LOG_COMPILES is set) and writes no new
    entry, and --no-compile-cache writes nothing anywhere. Every program is kept (threshold
    0): with the default 0.5 s a program compiling near it (the catalog build) was written by
    one launch of a loaded machine and not by the other."""
    cache = tmp_path / "cache"
    keep = {"JAX_LOG_COMPILES": "1", "ECOMJAX_CACHE_MIN_COMPILE_S": "0"}
    cold = _run("--compile-cache", str(cache), env=keep)
    first = _entries(cache)
    assert first, "the first launch wrote no cache entry"
    assert HIT not in cold.stderr
    warm = _run("--compile-cache", str(cache), env=keep)
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
