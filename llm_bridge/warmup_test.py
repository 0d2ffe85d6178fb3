"""Start-up warm-up (progress, waiting, failures) and the server's curriculum, without JAX
compiles: the warm-up unit is a stub that blocks on events, so every check is about order,
never about how long something took."""

from __future__ import annotations

import threading

import pytest

from ecomjax import constants as C
from ecomjax.llm_bridge.served_curriculum import ServedCurriculum
from ecomjax.llm_bridge.warmup import COMPILING, PENDING, READY, Warmup


class Gate:
    """A warm-up unit that waits until the test opens its family's gate."""

    def __init__(self, fail: str | None = None):
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}
        self.fail = fail

    def __call__(self, family: str) -> None:
        self.entered.setdefault(family, threading.Event()).set()
        assert self.gates.setdefault(family, threading.Event()).wait(60), "gate never opened"
        if family == self.fail:
            raise RuntimeError("no compiler today")

    def open(self, family: str) -> None:
        self.gates.setdefault(family, threading.Event()).set()

    def wait_entered(self, family: str) -> None:
        assert self.entered.setdefault(family, threading.Event()).wait(60)


def test_progress_in_order_and_waiting_for_one_family():
    gate = Gate()
    w = Warmup(("CART", "PD"), gate)
    assert w.report()["state"] == "off" and w.ready and w.wait("CART", 0)
    w.start()
    gate.wait_entered("CART")
    r = w.report()
    assert r["state"] == "running" and r["families"] == {"CART": COMPILING, "PD": PENDING}
    assert (r["done"], r["total"], r["current"]) == (0, 2, "CART") and not w.ready
    assert not w.wait("PD", timeout=0)  # not ready yet, and says so

    order: list[str] = []
    waiter = threading.Thread(target=lambda: order.append(f"PD waited: {w.wait('PD')}"))
    waiter.start()
    gate.open("CART")
    gate.wait_entered("PD")
    assert w.report()["families"] == {"CART": READY, "PD": COMPILING}
    order.append("PD released")
    gate.open("PD")
    waiter.join(60)
    assert order == ["PD released", "PD waited: True"]
    r = w.report()
    assert r["state"] == "done" and r["done"] == 2 and r["current"] is None and w.ready
    assert w.wait("SUB", 0)  # a family warm-up does not serve never waits


def test_a_failed_family_is_reported_and_the_rest_still_warm():
    gate = Gate(fail="CART")
    w = Warmup(("CART", "PD"), gate)
    w.start()
    gate.open("CART")
    gate.open("PD")
    assert not w.wait("CART") and w.wait("PD")
    w._thread.join(60)
    r = w.report()
    assert r["state"] == "failed" and r["families"] == {"CART": "failed", "PD": READY}
    assert r["error"] == "CART: RuntimeError: no compiler today" and not w.ready


def test_served_curriculum_moves_on_frontier_outcomes_only():
    cur = ServedCurriculum()
    assert cur.draw("CART", 0) == 0 and cur.snapshot()["CART"] == {"lo": 0, "hi": 0, "a": 0, "b": 0}
    for _ in range(31):
        cur.record("CART", 0, True)
    cur.record("CART", 3, True)  # off the frontier: not counted
    assert cur.snapshot()["CART"]["b"] == 31
    cur.record("CART", 0, True)  # the 32nd at the frontier, all correct: h moves to 1
    snap = cur.snapshot()
    assert (snap["CART"]["lo"], snap["CART"]["hi"], snap["CART"]["b"]) == (0, 1, 0)
    assert all(snap[f]["hi"] == 0 for f in C.ENV_NAMES if f != "CART")
    draws = [cur.draw("CART", s) for s in range(400)]
    assert set(draws) == {0, 1}  # U{0..1}
    assert draws == [cur.draw("CART", s) for s in range(400)]  # keyed by the seed alone
    assert all(cur.draw("PD", s) == 0 for s in range(50))


@pytest.mark.parametrize("seed", [0, 2**31 - 1, 2**32 - 1])
def test_curriculum_draws_take_any_uint32_seed(seed):
    assert ServedCurriculum().draw("PD", seed) == 0
