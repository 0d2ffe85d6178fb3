"""JAX's persistent compilation cache for the entry points (run, serve, rollout, study).

A C8 rollout compiles for about a minute; with the cache a second launch of the same
program on the same machine loads the executables instead. The cache lives in a user
directory (``$ECOMJAX_CACHE_DIR``, else ``$XDG_CACHE_HOME/ecomjax/jax``, else
``~/.cache/ecomjax/jax``); ``--no-compile-cache`` or ``ECOMJAX_CACHE_DIR=off`` turns it off.
Only programs that compile for at least ``ECOMJAX_CACHE_MIN_COMPILE_S`` seconds (default
0.5) are written: a timing threshold, so whether a borderline program is kept can vary with
the machine's load; 0 keeps every program.
Entries are keyed by JAX on the program, the compiler options and the backend, so a
stale or foreign entry is never used, only recompiled.
"""

from __future__ import annotations

import os
from pathlib import Path

import jax

OFF = {"off", "0", "none", "false", ""}
MIN_COMPILE_S = 0.5  # programs that compile faster than this are not worth a disk entry
_chosen: list[Path | None] = []  # what the first enable() of this process decided


def default_dir() -> Path | None:
    """The cache directory the environment asks for, or None when it turns the cache off."""
    env = os.environ.get("ECOMJAX_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in OFF else Path(env).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(Path.home(), ".cache")
    return Path(base) / "ecomjax" / "jax"


def min_compile_s() -> float:
    """The compile time a program needs to be written, from ``$ECOMJAX_CACHE_MIN_COMPILE_S``."""
    raw = os.environ.get("ECOMJAX_CACHE_MIN_COMPILE_S")
    if raw is None or not raw.strip():
        return MIN_COMPILE_S
    try:
        value = float(raw)
    except ValueError:
        msg = f"ECOMJAX_CACHE_MIN_COMPILE_S must be a number of seconds, got {raw!r}"
        raise ValueError(msg) from None
    if not value >= 0:  # also rejects nan
        raise ValueError(f"ECOMJAX_CACHE_MIN_COMPILE_S must be >= 0, got {raw!r}")
    return value


def enable(path: str | os.PathLike | None = None, enabled: bool = True) -> Path | None:
    """Turns the persistent cache on at ``path`` (default ``default_dir()``); returns the
    directory in use, or None when it stays off. Call before the first compile."""
    where = Path(path).expanduser() if path is not None else default_dir()
    _chosen[:] = [where if enabled else None]
    if not enabled or where is None:
        jax.config.update("jax_enable_compilation_cache", False)
        return None
    where.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_enable_compilation_cache", True)
    jax.config.update("jax_compilation_cache_dir", str(where))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", min_compile_s())
    return where


def chosen() -> Path | None:
    """The directory the entry point chose, or None (off, or no entry point chose)."""
    return _chosen[0] if _chosen else None


def configured() -> bool:
    """Whether an entry point of this process already chose (library code then defers)."""
    return bool(_chosen)


def add_arguments(parser) -> None:
    """The cache options every entry point shares."""
    parser.add_argument(
        "--compile-cache",
        default=None,
        metavar="DIR",
        help="persistent XLA compilation cache directory (default: ~/.cache/ecomjax/jax, "
        "or $ECOMJAX_CACHE_DIR)",
    )
    parser.add_argument(
        "--no-compile-cache",
        action="store_true",
        help="compile from scratch and write nothing to disk",
    )
