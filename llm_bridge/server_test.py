"""The OpenEnv-compatible server: routes, validation (4xx, never 500, no traceback), capacity,
the WebSocket protocol, and concurrent episodes that must each equal an offline ``Session``
replay of the same turns (the oracle's, recorded offline, plus wrong-answer and malformed
variants so the rewards differ).

Compiles dominate: three families' resets, one step and one search (shared by every session,
``FAST_COMPILE``) and one oracle act. The full load test (64 WebSocket clients x 50 episodes
over loopback uvicorn) is ``slow``; the default runs 8 x 3."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator

import jax
import pytest

fastapi = pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
pytest.importorskip("httpx", reason="httpx (for fastapi's TestClient) is not installed")
from fastapi.testclient import TestClient  # noqa: E402

from ecomjax import constants as C  # noqa: E402
from ecomjax.llm_bridge import server as SV  # noqa: E402
from ecomjax.llm_bridge import session as SS  # noqa: E402
from ecomjax.llm_bridge.parse import format_turn  # noqa: E402
from ecomjax.llm_bridge.render import action_to_turn  # noqa: E402
from ecomjax.llm_bridge.serve_thread import serve_in_thread  # noqa: E402

FAST = SS.FAST_COMPILE
CASES = [("PD", 3, 11), ("CART", 4, 12), ("STATUS", 3, 13)]
VARIANTS = ("oracle", "wrong_answer", "malformed")
COMPARED = ("messages", "done", "termination_reason", "reward", "reward_breakdown", "turn")


# --- fixtures and helpers ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def text(catalog) -> SS.CatalogText:
    return SS.CatalogText.build(catalog)


@pytest.fixture(scope="module")
def client(text) -> Iterator[TestClient]:
    app = SV.create_app(
        text, max_sessions=6, max_body_bytes=64 << 10, expose_goal=True, warmup=False
    )
    with TestClient(app) as c:
        yield c


def reset(client, **body):
    return client.post("/reset", json=body)


def step(client, eid, turn):
    return client.post("/step", json={"episode_id": eid, "action": turn})


def record_oracle(text, agent, act, family: str, d: int, seed: int) -> list[dict]:
    """The oracle's turns as "json" assistant outputs, recorded on an offline session."""
    s = SS.Session(text, compiler_options=FAST)
    s.reset(family, d, seed)
    key = jax.random.key(seed)
    mem = agent.init(key, s.timestep.observation, text.catalog)
    turns = []
    while not s.done:
        mem, a = act(key, mem, s.timestep.observation, text.catalog)
        message, calls, answer = action_to_turn(a, s.codec, text.lexicon)
        turns.append(format_turn("json", message, calls, answer))
        s.step(turns[-1], "json")
    return turns


def replay(text, family: str, d: int, seed: int, turns: list[dict]) -> list[dict]:
    """Observations of an offline session playing ``turns`` (the expected server output)."""
    s = SS.Session(text, compiler_options=FAST)
    out = [SV.jsonable(s.reset(family, d, seed))]
    for t in turns:
        out.append(SV.jsonable(s.step(t, "json")))
        if out[-1]["done"]:
            break
    return out


@pytest.fixture(scope="module")
def scripts(text) -> list[dict]:
    """(case, variant) -> turns and the offline observations they give."""
    from ecomjax.agents.oracle import make_oracle

    agent = make_oracle()
    act = jax.jit(agent.act, compiler_options=FAST)
    out = []
    for fam, d, seed in CASES:
        oracle = record_oracle(text, agent, act, fam, d, seed)
        variants = {
            "oracle": oracle,
            "wrong_answer": [*oracle[:-1], {"message": "Done.", "answer": {"env": fam}}],
            "malformed": [{"bogus": 1}],
        }
        for name in VARIANTS:
            turns = variants[name]
            expected = replay(text, fam, d, seed, turns)
            out.append(
                {"case": (fam, d, seed), "variant": name, "turns": turns, "expected": expected}
            )
    return out


def assert_matches(got: dict, want: dict, where: str) -> None:
    for k in COMPARED:
        assert got[k] == want[k], f"{where}: {k} differs from the offline replay"


# --- routes -----------------------------------------------------------------------------------


def test_health_and_schema(client):
    import jsonschema

    health = client.get("/health").json()
    assert health["status"] == "healthy" and health["ready"] is True
    assert health["warmup"]["state"] == "off"  # this app compiles on first use
    sch = client.get("/schema").json()
    assert set(sch) == {"action", "observation", "state"}
    for s in sch.values():
        jsonschema.Draft202012Validator.check_schema(s)
    good = {"format": "json", "message": "hi", "tool_calls": [{"name": "cart_view"}]}
    jsonschema.validate(good, sch["action"])
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({"format": "yaml"}, sch["action"])
    info = client.get("/info").json()
    assert info["families"] == list(C.ENV_NAMES) and set(info["answer_schemas"]) == set(C.ENV_NAMES)


def test_http_episode_reset_step_state(client):
    import jsonschema

    sch = client.get("/schema").json()
    r = reset(client, family="STATUS", difficulty=2, seed=3)
    assert r.status_code == 200
    body = r.json()
    assert body["reward"] is None and body["done"] is False
    obs = body["observation"]
    jsonschema.validate(obs, sch["observation"])
    eid = obs["episode_id"]
    assert obs["session_id"] == eid and obs["family"] == "STATUS" and obs["seed"] == 3
    assert [m["role"] for m in obs["messages"]] == ["system", "user"]
    assert "trace" not in obs["info"]  # the hidden goal never shows before the end
    state = client.get("/state", params={"episode_id": eid}).json()
    jsonschema.validate(state, sch["state"])
    assert state["step_count"] == 0 and state["done"] is False and state["reward"] is None

    r = step(client, eid, {"message": "", "tool_calls": [{"name": "order_list", "arguments": {}}]})
    assert r.status_code == 200 and r.json()["reward"] == 0.0 and not r.json()["done"]
    obs = r.json()["observation"]
    assert [m["role"] for m in obs["new_messages"]] == ["assistant", "tool", "user"]
    assert "trace" not in obs["info"]
    assert client.get("/state", params={"session_id": eid}).json()["step_count"] == 1

    answer = {"env": "STATUS", "selected_order_id": "ord_001", "order_status": "SHIPPED"}
    r = step(client, eid, {"format": "json", "message": "", "answer": answer})
    body = r.json()
    obs = body["observation"]
    assert body["done"] and obs["termination_reason"] == "agent_done"
    assert body["reward"] == obs["reward"] == obs["reward_breakdown"]["r_total"]
    trace = obs["info"]["trace"]
    assert trace["family"] == "STATUS" and trace["goals"][0]["order_id"].startswith("ord_")
    state = client.get("/state", params={"episode_id": eid}).json()
    assert state["done"] and state["termination_reason"] == "agent_done"
    assert state["reward"] == body["reward"]
    assert "trace" not in json.dumps(state) and "goals" not in json.dumps(state)


def test_formats_and_malformed_turn_is_a_hard_fail(client):
    """A malformed *turn* inside a valid request is scored (SPEC §4.2), not rejected."""
    eid = reset(client, family="PD", seed=5, format="hermes").json()["observation"]["episode_id"]
    call = '<tool_call>\n{"name": "cart_view", "arguments": {}}\n</tool_call>'
    r = step(client, eid, {"content": call})  # format comes from the reset
    assert r.status_code == 200 and r.json()["observation"]["info"]["parse"]["n_calls"] == 1
    r = step(client, eid, {"format": "openai", "role": "assistant", "content": "x", "bogus": 1})
    obs = r.json()["observation"]
    assert r.status_code == 200 and r.json()["done"] and r.json()["reward"] == -1.0
    assert obs["termination_reason"] == "hard_fail"
    assert obs["reward_breakdown"]["hard_fail_kind"] == "malformed_action"
    r = step(client, eid, {"message": "again"})
    assert r.status_code == 409 and r.json()["code"] == "EPISODE_DONE"


def test_collection_picks_family_from_seed_deterministically(client):
    members = C.COLLECTIONS["C4"]  # CART, SUB, PD, RETURN: seeds 0, 2, 4 play CART, PD, CART
    first = {}
    for seed in (0, 2, 4):
        obs = reset(client, collection="c4", seed=seed, episode_id="coll").json()["observation"]
        assert obs["family"] == members[seed % len(members)] == SV.family_for("C4", seed)
        first[seed] = obs["messages"]
    assert [first[s][0]["content"].count("Task (CART)") for s in (0, 2, 4)] == [1, 0, 1]
    again = reset(client, collection="C4", seed=2, episode_id="coll").json()["observation"]
    assert again["messages"] == first[2] and first[0] != first[4]


def test_episodes_are_isolated_by_id(client):
    a = reset(client, family="CART", seed=1, episode_id="client-a").json()["observation"]
    b = reset(client, family="CART", seed=2, episode_id="client-b").json()["observation"]
    assert a["messages"] != b["messages"]
    step(
        client, "client-a", {"tool_calls": [{"name": "cart_add", "arguments": {"product_id": "x"}}]}
    )
    assert client.get("/state", params={"episode_id": "client-a"}).json()["step_count"] == 1
    assert client.get("/state", params={"episode_id": "client-b"}).json()["step_count"] == 0
    assert client.post("/close", json={"episode_id": "client-a"}).json() == {"closed": True}
    assert client.get("/state", params={"episode_id": "client-a"}).status_code == 404


BAD_RESETS = [
    ({"family": "NOPE"}, 422, "UNKNOWN_FAMILY"),
    ({"family": 3}, 422, "INVALID_FIELD"),
    ({"family": "PD", "difficulty": 21}, 422, "INVALID_FIELD"),
    ({"family": "PD", "difficulty": -1}, 422, "INVALID_FIELD"),
    ({"family": "PD", "difficulty": "3"}, 422, "INVALID_FIELD"),
    ({"family": "PD", "difficulty": True}, 422, "INVALID_FIELD"),
    ({"family": "PD", "difficulty": 2.5}, 422, "INVALID_FIELD"),
    ({"family": "PD", "seed": 2**32}, 422, "INVALID_FIELD"),
    ({"family": "PD", "seed": -1}, 422, "INVALID_FIELD"),
    ({"collection": "C9"}, 422, "UNKNOWN_COLLECTION"),
    ({"collection": "C1", "family": "PD"}, 422, "INVALID_FIELD"),
    ({"family": "PD", "format": "yaml"}, 422, "INVALID_FIELD"),
    ({"family": "PD", "episode_id": "has space"}, 422, "INVALID_FIELD"),
    ({"family": "PD", "episode_id": "a", "session_id": "b"}, 422, "INVALID_FIELD"),
]


@pytest.mark.parametrize(("body", "status", "code"), BAD_RESETS)
def test_bad_reset_bodies_are_4xx(client, body, status, code):
    r = client.post("/reset", json=body)
    assert (r.status_code, r.json()["code"]) == (status, code), r.text
    assert "Traceback" not in r.text and r.json()["detail"]


def test_bad_payloads_are_4xx_without_tracebacks(text):
    app = SV.create_app(text, warmup=False)
    with TestClient(app) as client:
        # Before any id-less reset, id-less requests have no episode to go to.
        early = [
            (client.post("/step", json={"action": {"message": "hi"}}), 400, "MISSING_EPISODE_ID"),
            (client.get("/state"), 400, "MISSING_EPISODE_ID"),
            (client.post("/close", json={}), 400, "MISSING_EPISODE_ID"),
        ]
        eid = reset(client, family="PD", seed=1, episode_id="e1").json()["observation"][
            "episode_id"
        ]
        cases = early + [
            (client.post("/reset", content=b"{not json"), 400, "INVALID_JSON"),
            (client.post("/reset", content=b"[1, 2]"), 400, "INVALID_BODY"),
            (client.post("/reset", content=b"\xff\xfe"), 400, "INVALID_JSON"),
            (client.post("/reset", content=b"[" * 5000 + b"]" * 5000), 400, "INVALID_JSON"),
            (client.post("/reset", content=b'{"family": "PD", "family": "SUB"}'), 400,
             "INVALID_JSON"),
            (client.post("/reset", content=b'{"family": "PD", "seed": NaN}'), 400, "INVALID_JSON"),
            (step(client, "never-reset", {"message": "hi"}), 404, "UNKNOWN_EPISODE"),
            (client.post("/step", json={"episode_id": eid}), 422, "MISSING_FIELD"),
            (client.post("/step", json={"episode_id": eid, "action": "hi", "x": 1}), 422,
             "INVALID_ACTION"),
            (client.post("/step", json={"episode_id": eid, "action": {}, "timeout_s": 0}), 422,
             "INVALID_FIELD"),
            (client.post("/step", json={"episode_id": eid, "action": {}, "request_id": 5}), 422,
             "INVALID_FIELD"),
            (step(client, eid, "just text"), 422, "INVALID_ACTION"),
            (step(client, eid, ["a"]), 422, "INVALID_ACTION"),
            (step(client, eid, {"format": "yaml", "message": "hi"}), 422, "INVALID_ACTION"),
            (step(client, eid, {"format": "hermes", "tool_calls": []}), 422, "INVALID_ACTION"),
            (step(client, eid, {"format": "qwen_xml", "content": 3}), 422, "INVALID_ACTION"),
            (client.get("/state", params={"episode_id": "nope"}), 404, "UNKNOWN_EPISODE"),
            (client.get("/nowhere"), 404, "HTTP_ERROR"),
            (client.get("/reset"), 405, "HTTP_ERROR"),
        ]  # fmt: skip
        for i, (r, status, code) in enumerate(cases):
            assert (r.status_code, r.json().get("code")) == (status, code), (i, r.text)
            assert "Traceback" not in r.text and 'File "' not in r.text
        # The episode survived every bad request.
        assert client.get("/state", params={"episode_id": eid}).json()["step_count"] == 0


def test_bare_resets_use_the_served_tasks_and_ignore_extra_fields(text):
    """What OpenEnv clients send: ``{}`` and ``{"seed": 42}``, plus fields the server does not
    read (allowed by OpenEnv's ResetRequest / StepRequest), which are named, not refused.
    Id-less requests go to the latest id-less reset's episode, which replaces the one before."""
    app = SV.create_app(text, tasks="CART,STATUS", warmup=False, max_http_sessions=2)
    with TestClient(app) as c:
        fams = [reset(c).json()["observation"] for _ in range(3)]  # seeds 0, 1, 2 by counter
        assert [o["seed"] for o in fams] == [0, 1, 2]
        assert [o["family"] for o in fams] == ["CART", "STATUS", "CART"]
        assert len(app.state.service.episodes) == 1  # each id-less reset replaced the last
        obs = reset(c, seed=41, colour="red", render=True).json()["observation"]
        assert obs["family"] == "STATUS" and obs["seed"] == 41 and obs["difficulty"] == 0
        assert obs["info"]["ignored_fields"] == ["colour", "render"]
        r = c.post("/step", json={"action": {"message": "hi"}, "render": True, "verbose": 1})
        assert r.status_code == 200 and r.json()["observation"]["seed"] == 41
        assert r.json()["observation"]["info"]["ignored_fields"] == ["render", "verbose"]
        assert c.get("/state").json()["step_count"] == 1
        assert reset(c, seed=3, episode_id="x" * 255).status_code == 200  # OpenEnv's length
        assert c.post("/close", json={}).json() == {"closed": True}
        assert c.get("/state").status_code == 400


def test_oversized_payloads_are_413(client):
    big = {"family": "PD", "episode_id": "x" * 10, "pad": "y" * (70 << 10)}
    r = client.post("/reset", json=big)
    assert r.status_code == 413 and r.json()["code"] == "PAYLOAD_TOO_LARGE"

    def chunks():  # no Content-Length: the cap applies while streaming
        for _ in range(40):
            yield b" " * 4096

    r = client.post("/reset", content=chunks())
    assert r.status_code == 413 and r.json()["code"] == "PAYLOAD_TOO_LARGE"
    r = client.post("/reset", content=b"{}", headers={"content-length": "999999999"})
    assert r.status_code == 413


def test_capacity_is_capped_with_429_per_pool(text):
    """HTTP episodes and WebSocket sessions have separate caps: HTTP clients that abandon
    their episodes cannot lock a WebSocket trainer out, and the reverse."""
    app = SV.create_app(text, max_sessions=1, max_http_sessions=2, warmup=False)
    with TestClient(app) as c:
        assert reset(c, family="PD", seed=1, episode_id="a").status_code == 200
        assert reset(c, family="PD", seed=2, episode_id="b").status_code == 200
        r = reset(c, family="PD", seed=3, episode_id="c")
        assert r.status_code == 429 and r.json()["code"] == "CAPACITY_REACHED"
        assert reset(c, family="PD", seed=4, episode_id="a").status_code == 200  # reuse is fine
        with c.websocket_connect("/ws") as ws:  # the HTTP pool is full; WebSockets still get in
            ws.send_json({"type": "reset", "data": {"family": "PD", "seed": 5}})
            assert ws.receive_json()["type"] == "observation"
            with c.websocket_connect("/ws") as ws2:  # ... up to their own cap
                assert ws2.receive_json()["data"]["code"] == "CAPACITY_REACHED"
            assert reset(c, family="PD", seed=6, episode_id="c").status_code == 429
        # A finished episode gives way to a new one; a running one never does.
        done = step(c, "b", {"bogus": True}).json()
        assert done["done"]
        assert reset(c, family="PD", seed=3, episode_id="c").status_code == 200
        assert c.get("/state", params={"episode_id": "b"}).status_code == 404
        assert c.get("/state", params={"episode_id": "a"}).json()["started"]
        assert app.state.service.stats["evicted"] == 1
        assert app.state.service.stats["rejected_capacity"] == 3


# --- WebSocket ----------------------------------------------------------------------------------


def test_ws_episode_and_errors(client):
    with client.websocket_connect("/ws") as ws:
        ws.send_json({"type": "step", "data": {"message": "hi"}})
        assert ws.receive_json()["data"]["code"] == "NOT_RESET"
        ws.send_json({"type": "reset", "data": {"family": "STATUS", "seed": 3, "difficulty": 2}})
        msg = ws.receive_json()
        assert msg["type"] == "observation" and msg["data"]["done"] is False
        assert msg["data"]["reward"] is None
        ws.send_text("{oops")
        err = ws.receive_json()
        assert err["type"] == "error" and err["data"]["code"] == "INVALID_JSON"
        ws.send_json({"type": "dance"})
        assert ws.receive_json()["data"]["code"] == "UNKNOWN_TYPE"
        ws.send_json({"type": "reset", "data": {"family": "NOPE"}})
        assert ws.receive_json()["data"]["code"] == "UNKNOWN_FAMILY"
        ws.send_json({"type": "step", "data": {"action": {"tool_calls": [{"name": "order_list"}]}}})
        msg = ws.receive_json()
        assert msg["type"] == "observation" and msg["data"]["observation"]["turn"] == 1
        ws.send_json({"type": "state"})
        st = ws.receive_json()
        assert st["type"] == "state" and st["data"]["step_count"] == 1
        ws.send_json({"type": "step", "data": {"answer": {"env": "STATUS"}}})  # invalid answer
        msg = ws.receive_json()["data"]
        assert msg["done"] and msg["reward"] == -1.0
        ws.send_json({"type": "close"})


def test_ws_bad_json_keeps_the_connection(client):
    with client.websocket_connect("/ws") as ws:
        ws.send_text("{oops")
        err = ws.receive_json()
        assert err["type"] == "error" and err["data"]["code"] == "INVALID_JSON"
        ws.send_text(json.dumps({"type": "state", "extra": 1}))
        assert ws.receive_json()["data"]["code"] == "INVALID_MESSAGE"
        ws.send_text("x" * (70 << 10))
        assert ws.receive_json()["data"]["code"] == "PAYLOAD_TOO_LARGE"
        ws.send_json({"type": "state"})
        st = ws.receive_json()
        assert st["type"] == "state" and st["data"]["started"] is False
        assert st["data"]["step_count"] == 0


# --- concurrency: each episode equals its offline replay ---------------------------------------


def play_ws(url: str, jobs: list[dict], errors: list, results: list, start: threading.Event):
    from websockets.sync.client import connect

    try:
        start.wait(30)
        with connect(f"ws://{url}/ws", max_size=1 << 24, open_timeout=30) as ws:
            for job in jobs:
                fam, d, seed = job["case"]
                ws.send(json.dumps({"type": "reset", "data": {"family": fam, "difficulty": d,
                                                              "seed": seed}}))  # fmt: skip
                got = [json.loads(ws.recv(timeout=300))["data"]]
                for turn in job["turns"]:
                    ws.send(json.dumps({"type": "step", "data": {"format": "json", **turn}}))
                    got.append(json.loads(ws.recv(timeout=300))["data"])
                    if got[-1]["done"]:
                        break
                results.append((job, got))
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(repr(e))


def run_load(text, scripts, n_clients: int, n_episodes: int) -> dict:
    app = SV.create_app(text, max_sessions=n_clients, workers=4, warmup=False)
    jobs = [
        [scripts[(c * n_episodes + e) % len(scripts)] for e in range(n_episodes)]
        for c in range(n_clients)
    ]
    errors: list = []
    results: list = []
    start = threading.Event()
    with serve_in_thread(app, lifespan="off") as url:
        threads = [
            threading.Thread(target=play_ws, args=(url, j, errors, results, start)) for j in jobs
        ]
        for t in threads:
            t.start()
        t0 = time.perf_counter()
        start.set()
        for t in threads:
            t.join(timeout=3600)
        seconds = time.perf_counter() - t0
    assert not errors, errors[:3]
    assert len(results) == n_clients * n_episodes
    for job, got in results:
        want = job["expected"]
        assert len(got) == len(want), job["variant"]
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            where = f"{job['case']} {job['variant']} obs {i}"
            assert_matches(g["observation"], w, where)
            assert g["done"] == w["done"]
            assert g["reward"] == (None if i == 0 else w["reward"])
    steps = sum(len(got) - 1 for _, got in results)
    return {"episodes": len(results), "steps": steps, "seconds": seconds,
            "service": app.state.service.stats}  # fmt: skip


def test_scripts_have_distinct_rewards(scripts):
    rewards = {(s["case"], s["variant"]): s["expected"][-1]["reward"] for s in scripts}
    assert all(s["expected"][-1]["done"] for s in scripts)
    for fam, d, seed in CASES:
        assert rewards[((fam, d, seed), "oracle")] > 0.5
        assert rewards[((fam, d, seed), "malformed")] == -1.0
    assert len(set(rewards.values())) >= 3


def test_concurrent_ws_sessions_match_offline_replays(text, scripts):
    out = run_load(text, scripts, n_clients=8, n_episodes=3)
    assert out["episodes"] == 24 and out["service"]["rejected_capacity"] == 0


@pytest.mark.slow
def test_load_64_clients_x_50_episodes(text, scripts):
    out = run_load(text, scripts, n_clients=64, n_episodes=50)
    print(f"\nload: {out['episodes']} episodes, {out['steps']} steps in {out['seconds']:.1f}s "
          f"({out['steps'] / out['seconds']:.1f} steps/s)")  # fmt: skip
    assert out["episodes"] == 3200
