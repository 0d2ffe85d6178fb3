"""The ninth family of ``tests/test_ninth_family.py`` (LATEST_ORDER, defined there through
its descriptor alone) through the text bridge: the system message states its task and
answer schema, the customer opens with its line, the oracle's turns rendered as text and
parsed back solve it, its customer hook's CONFIRM / CORRECT read in its own words, and the
HTTP server serves it by name."""

from __future__ import annotations

import jax
import pytest

from ecomjax import registry
from ecomjax.llm_bridge import server as SV
from ecomjax.llm_bridge import session as SS
from ecomjax.llm_bridge.parse import format_turn
from ecomjax.llm_bridge.render import action_to_turn
from tests.test_ninth_family import FAMILY, lookup


@pytest.fixture(scope="module", autouse=True)
def registered():
    with registry.extended(FAMILY):
        yield


@pytest.fixture(scope="module")
def text(catalog):
    return SS.CatalogText.build(catalog)


def oracle_turns(text, d: int, seed: int) -> tuple[list[dict], list[dict]]:
    """The plan's turns as "json" assistant outputs on an offline session, with the
    session's observations."""
    s = SS.Session(text, compiler_options=SS.FAST_COMPILE)
    obs = [s.reset("LATEST_ORDER", d, seed)]
    plan = FAMILY.oracle
    mem = plan.init_memory()
    turns = []
    while not s.done:
        mem, a = jax.jit(plan.act)(mem, s.timestep.observation, text.catalog)
        message, calls, answer = action_to_turn(a, s.codec, text.lexicon)
        turns.append(format_turn("json", message, calls, answer))
        obs.append(s.step(turns[-1], "json"))
    return turns, obs


def test_a_text_episode(text):
    """The system message states the family's task and answer schema, the customer opens
    with its line, and the plan's turns, rendered and parsed back, solve it."""
    turns, obs = oracle_turns(text, d=4, seed=11)
    system, opening = obs[0]["messages"][:2]
    assert FAMILY.task_text in system["content"]
    assert '"enum":["LATEST_ORDER"]' in system["content"]
    assert FAMILY.opening in opening["content"]
    assert turns[0]["tool_calls"][0]["name"] == "order_list"
    last = obs[-1]
    assert last["done"] and last["reward_breakdown"]["r_task"] == 1.0
    assert last["reward_breakdown"]["is_correct"] is True
    assert last["reward_breakdown"]["details"] == {"r_oid": 1.0, "r_stat": 1.0}


def test_the_customers_feedback_in_its_words(text):
    """The hook's CORRECT and CONFIRM are worded by the descriptor's issue_text and
    confirm_text, and the act trace names the issue."""
    s = SS.Session(text, compiler_options=SS.FAST_COMPILE, noise=False)
    s.reset("LATEST_ORDER", 9, 3)
    last = int(s.state.problem.n_orders) - 1
    assert last >= 1
    cases = (
        (last - 1, FAMILY.issue_text[0], {"feedback_issues": ["wrong_order"]}),
        (last, FAMILY.confirm_text, {"feedback_confirm": True}),
    )
    for order, words, record in cases:
        turn = action_to_turn(lookup(text.catalog, order), s.codec, text.lexicon)
        out = s.step(format_turn("json", *turn), "json")
        assert not out["done"]
        assert words in out["messages"][-1]["content"], out["messages"][-1]
        assert record.items() <= s.user_acts[-1].items(), s.user_acts[-1]


def test_one_server_episode(text):
    """The same turns through the HTTP server, which serves the family by name."""
    pytest.importorskip("httpx", reason="httpx (for fastapi's TestClient) is not installed")
    from fastapi.testclient import TestClient

    turns, offline = oracle_turns(text, d=2, seed=5)
    app = SV.create_app(text, tasks="LATEST_ORDER", warmup=False)
    with TestClient(app) as client:
        info = client.get("/info").json()
        assert "LATEST_ORDER" in info["families"]
        assert "LATEST_ORDER" in info["answer_schemas"]
        first = client.post("/reset", json={"family": "LATEST_ORDER", "difficulty": 2, "seed": 5})
        assert first.status_code == 200, first.text
        eid = first.json()["observation"]["episode_id"]
        for t in turns:
            out = client.post("/step", json={"episode_id": eid, "action": t}).json()
        assert out["done"] and out["observation"]["reward_breakdown"]["is_correct"] is True
        assert out["reward"] == offline[-1]["reward"]
