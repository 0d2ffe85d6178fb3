"""Background compilation of the served families, with progress for ``/health``.

Why: each family's reset and the shared step compile on first use (seconds to tens of
seconds on a CPU, less when the persistent compilation cache has them). A server that
compiles lazily makes its first clients wait without saying why. ``Warmup`` plays one
scratch episode turn per family in a background thread, in the served order, and records
where it stands; a reset of a family that is not ready yet waits for it (``wait``) instead
of compiling a second copy beside it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

PENDING, COMPILING, READY, FAILED = "pending", "compiling", "ready", "failed"


class Warmup:
    """Per-family compile state. ``warm_one(family)`` does the work (run in the thread)."""

    def __init__(self, families: Sequence[str], warm_one: Callable[[str], None]) -> None:
        self.families = tuple(families)
        self._warm_one = warm_one
        self._cond = threading.Condition()
        self.status = dict.fromkeys(self.families, PENDING)
        self.state = "off"
        self.error: str | None = None
        self._started: float | None = None
        self._finished: float | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Starts the thread once; later calls do nothing."""
        with self._cond:
            if self._thread is not None:
                return
            self.state, self._started = "running", time.monotonic()
            self._thread = threading.Thread(target=self._run, name="ecomjax-warmup", daemon=True)
            self._thread.start()

    def _set(self, family: str, status: str) -> None:
        with self._cond:
            self.status[family] = status
            self._cond.notify_all()

    def _run(self) -> None:
        for fam in self.families:
            self._set(fam, COMPILING)
            try:
                self._warm_one(fam)
            except Exception as exc:  # noqa: BLE001 - reported in /health, never raised
                with self._cond:
                    self.error = f"{fam}: {type(exc).__name__}: {exc}"[:300]
                self._set(fam, FAILED)
            else:
                self._set(fam, READY)
        with self._cond:
            self.state = "failed" if self.error else "done"
            self._finished = time.monotonic()
            self._cond.notify_all()

    @property
    def ready(self) -> bool:
        with self._cond:
            return self.state == "off" or all(s == READY for s in self.status.values())

    def wait(self, family: str, timeout: float | None = None) -> bool:
        """Blocks until ``family`` is compiled or failed (or warm-up is off or the family is
        not one it warms). True when the family is ready or needs no wait."""
        with self._cond:
            if self.state == "off" or family not in self.status:
                return True
            self._cond.wait_for(lambda: self.status[family] in (READY, FAILED), timeout)
            return self.status[family] == READY

    def report(self) -> dict:
        """The ``warmup`` object of ``GET /health``."""
        with self._cond:
            now = self._finished or time.monotonic()
            current = next((f for f, s in self.status.items() if s == COMPILING), None)
            return {
                "state": self.state,
                "families": dict(self.status),
                "done": sum(s == READY for s in self.status.values()),
                "total": len(self.status),
                "current": current,
                "elapsed_s": round(now - self._started, 1) if self._started else 0.0,
                "error": self.error,
            }
