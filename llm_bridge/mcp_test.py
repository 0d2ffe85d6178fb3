"""MCP on the server: JSON-RPC framing and errors, tools/list from the parser's tables,
tools/call as one turn each (equal to an offline replay), OpenEnv's session methods, the
WebSocket paths (``{"type": "mcp"}``, ``MCPToolClient``'s step actions, ``/ws?session_id=``
sharing one episode with HTTP), the warm-up at start and the curriculum behind bare resets.
OpenEnv's real clients against all this are in ``openenv_test.py``."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
from fastapi.testclient import TestClient  # noqa: E402

from ecomjax.llm_bridge import mcp_rpc  # noqa: E402
from ecomjax.llm_bridge import server as SV  # noqa: E402
from ecomjax.llm_bridge import session as SS  # noqa: E402
from ecomjax.llm_bridge.tool_turns import call_tools, reply_text, turn_for_call  # noqa: E402
from ecomjax.llm_bridge.warmup import Warmup  # noqa: E402

ANSWER = {"env": "STATUS", "selected_order_id": "ord_001", "order_status": "SHIPPED"}
CALLS = [
    ("order_list", {}),
    ("message_customer", {"message": "Which one?"}),
    ("submit_answer", {"answer": ANSWER}),
]


@pytest.fixture(scope="module")
def text(catalog) -> SS.CatalogText:
    return SS.CatalogText.build(catalog)


@pytest.fixture(scope="module")
def client(text) -> Iterator[TestClient]:
    app = SV.create_app(text, tasks="STATUS", warmup=False)
    with TestClient(app) as c:
        yield c


def rpc(c: TestClient, method: str, params: dict | None = None, rid: int | None = 1):
    msg = {"jsonrpc": "2.0", "method": method}
    if params is not None:
        msg["params"] = params
    if rid is not None:
        msg["id"] = rid
    return c.post("/mcp", json=msg)


def offline_texts(text, seed: int) -> tuple[list[str], float]:
    s = SS.Session(text, compiler_options=SS.FAST_COMPILE)
    s.reset("STATUS", 0, seed)
    obs = [SV.jsonable(s.step(turn_for_call(n, a), "json")) for n, a in CALLS]
    return [reply_text(o) for o in obs], obs[-1]["reward"]


def test_jsonrpc_framing_and_errors(client):
    assert client.post("/mcp", json={}).json()["error"]["code"] == mcp_rpc.INVALID_REQUEST
    r = client.post("/mcp", content=b"{nope")
    assert r.status_code == 200 and r.json()["error"]["code"] == mcp_rpc.PARSE_ERROR
    assert client.post("/mcp", json=[1]).json()["error"]["code"] == mcp_rpc.INVALID_REQUEST
    assert rpc(client, "tools/dance").json()["error"]["code"] == mcp_rpc.METHOD_NOT_FOUND
    assert rpc(client, "tools/call", {"arguments": {}}).json()["error"]["code"] == (
        mcp_rpc.INVALID_PARAMS
    )
    bad = rpc(client, "tools/call", {"name": "order_list", "session_id": "nope"}).json()
    assert bad["error"]["code"] == mcp_rpc.INVALID_PARAMS and "nope" in bad["error"]["message"]
    assert client.post("/mcp", json={"jsonrpc": "2.0", "method": "x", "params": 3}).json()["error"][
        "code"
    ] == (mcp_rpc.INVALID_PARAMS)
    close = rpc(client, mcp_rpc.SESSION_CLOSE, {"session_id": "nope"}).json()
    assert close["error"]["code"] == mcp_rpc.INVALID_PARAMS
    note = rpc(client, "notifications/initialized", rid=None)
    assert note.status_code == 202 and note.content == b""
    init = rpc(client, "initialize", {"protocolVersion": "2025-03-26"}).json()["result"]
    assert init["protocolVersion"] == "2025-03-26" and "tools" in init["capabilities"]
    assert rpc(client, "ping", rid="a").json() == {"jsonrpc": "2.0", "id": "a", "result": {}}


def test_tools_list_comes_from_the_parser_tables(client):
    tools = rpc(client, "tools/list").json()["result"]["tools"]
    want = call_tools(with_submit=True)
    assert [t["name"] for t in tools] == [t["function"]["name"] for t in want]
    for t, w in zip(tools, want, strict=True):
        assert t["inputSchema"] == w["function"]["parameters"]  # bounds included
    search = next(t for t in tools if t["name"] == "catalog_search")
    assert search["inputSchema"]["properties"]["top_k"]["maximum"] == 500


def test_session_calls_are_turns_equal_to_an_offline_replay(client, text):
    sid = rpc(client, mcp_rpc.SESSION_CREATE, {"seed": 9}).json()["result"]["session_id"]
    want, reward = offline_texts(text, 9)
    results = []
    for name, args in CALLS:
        r = rpc(client, "tools/call", {"name": name, "arguments": args, "session_id": sid})
        results.append(r.json()["result"])
    assert [r["content"][0]["text"] for r in results] == want
    assert [r["data"] for r in results] == want
    last = results[-1]["structuredContent"]
    assert last["done"] and last["reward"] == reward and last["termination_reason"] == "agent_done"
    assert not any(r["isError"] for r in results)
    again = rpc(client, "tools/call", {"name": "order_list", "session_id": sid}).json()["result"]
    assert again["isError"] and "EPISODE_DONE" in again["data"]  # over: nothing ran
    assert rpc(client, mcp_rpc.SESSION_CLOSE, {"session_id": sid}).json()["result"]["closed"]


def test_a_bad_call_is_the_envs_hard_fail_not_a_crash(client):
    sid = rpc(client, mcp_rpc.SESSION_CREATE, {"seed": 3}).json()["result"]["session_id"]
    for name, args in [("catalog_search", {"query": "x", "top_k": 1000}), ("nope", {})]:
        r = rpc(client, "tools/call", {"name": name, "arguments": args, "session_id": sid})
        res = r.json()["result"]
        assert res["isError"] and res["structuredContent"]["reward"] == -1.0
        assert res["structuredContent"]["termination_reason"] == "hard_fail"
        sid = rpc(client, mcp_rpc.SESSION_CREATE, {}).json()["result"]["session_id"]


def test_http_calls_without_a_session_play_the_default_episode(client):
    r = rpc(client, "tools/call", {"name": "order_list"}).json()["result"]
    assert not r["isError"] and r["structuredContent"]["turn"] == 1
    eid = r["structuredContent"]["episode_id"]
    assert client.get("/state").json()["episode_id"] == eid  # the same id-less episode
    r = rpc(client, "tools/call", {"name": "order_list"}).json()["result"]
    assert r["structuredContent"]["turn"] == 2


def test_websocket_mcp_paths_share_the_episode(client, text):
    sid = rpc(client, mcp_rpc.SESSION_CREATE, {"seed": 11}).json()["result"]["session_id"]
    want, reward = offline_texts(text, 11)
    with client.websocket_connect(f"/ws?session_id={sid}") as ws:
        ws.send_json({"type": "reset", "data": {"seed": 11}})
        assert ws.receive_json()["data"]["observation"]["episode_id"] == sid
        ws.send_json({"type": "step", "data": {"type": "list_tools"}})
        tools = ws.receive_json()["data"]["observation"]["tools"]
        assert len(tools) == len(call_tools(with_submit=True))
        name, args = CALLS[0]
        ws.send_json({"type": "step", "data": {"type": "call_tool", "tool_name": name,
                                               "arguments": args}})  # fmt: skip
        got = ws.receive_json()["data"]
        assert got["observation"]["tool_name"] == name
        assert got["observation"]["result"]["data"] == want[0] and not got["done"]
        name, args = CALLS[1]  # the same episode over HTTP
        r = rpc(client, "tools/call", {"name": name, "arguments": args, "session_id": sid})
        assert r.json()["result"]["data"] == want[1]
        name, args = CALLS[2]  # and over the WebSocket's JSON-RPC channel
        call = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                "params": {"name": name, "arguments": args}}  # fmt: skip
        ws.send_json({"type": "mcp", "data": call})
        got = ws.receive_json()
        assert got["type"] == "mcp" and got["data"]["id"] == 7
        assert got["data"]["result"]["data"] == want[2]
        assert got["data"]["result"]["structuredContent"]["reward"] == reward
        with client.websocket_connect(f"/ws?session_id={sid}") as ws2:  # one player at a time
            assert ws2.receive_json()["data"]["code"] == "UNKNOWN_SESSION"
    with client.websocket_connect("/ws?session_id=missing") as ws:
        assert ws.receive_json()["data"]["code"] == "UNKNOWN_SESSION"


def test_warmup_at_start_and_a_reset_waits_for_its_family(text):
    app = SV.create_app(text, tasks="STATUS", warmup=True)
    service = app.state.service
    order: list[str] = []
    gate, entered = threading.Event(), threading.Event()

    def warm(family: str) -> None:
        entered.set()
        assert gate.wait(120)
        order.append(f"warmed {family}")
        service._warm_family(family)

    service.warmup = Warmup(service.tasks, warm)
    with TestClient(app) as c:
        assert entered.wait(120)  # the warm-up thread runs on its own schedule
        h = c.get("/health").json()
        assert h["status"] == "healthy" and not h["ready"]
        assert h["warmup"]["families"] == {"STATUS": "compiling"}
        result: list = []
        t = threading.Thread(target=lambda: result.append(c.post("/reset", json={"seed": 1})))
        t.start()
        order.append("opened")
        gate.set()
        t.join(300)
        assert result[0].status_code == 200
        order.append("reset answered")
        assert order == ["opened", "warmed STATUS", "reset answered"]
        h = c.get("/health").json()
        assert h["ready"] and h["warmup"]["state"] == "done" and h["warmup"]["done"] == 1


def test_bare_resets_feed_the_curriculum_and_fixed_ones_do_not(text):
    app = SV.create_app(text, tasks="STATUS", warmup=False)
    with TestClient(app) as c:

        def b():
            return c.get("/info").json()["curriculum"]["STATUS"]["b"]

        assert b() == 0
        c.post("/reset", json={"seed": 2})
        c.post("/step", json={"action": {"answer": ANSWER}})
        assert b() == 1  # the server drew d: the outcome counts
        c.post("/reset", json={"seed": 2, "difficulty": 0})
        c.post("/step", json={"action": {"answer": ANSWER}})
        assert b() == 1  # the client fixed d: it does not
    fixed = SV.create_app(text, tasks="STATUS", warmup=False, curriculum=False,
                          default_difficulty=4)  # fmt: skip
    with TestClient(fixed) as c:
        obs = c.post("/reset", json={}).json()["observation"]
        assert obs["difficulty"] == 4 and c.get("/info").json()["curriculum"] is None
