"""The server against OpenEnv's own code: ``openenv validate --url`` and its clients
(``GenericEnvClient`` sync and async over WebSocket, ``MCPToolClient`` over the WebSocket step
path and over HTTP ``/mcp``), under openenv-core 0.3.0 (the dev extra) and openenv 0.10.0
(a separate environment made by ``scripts/setup.sh``: both install the ``openenv`` module).
Every episode a client plays must equal an offline ``Session`` replay of the same turns.
Also: OpenEnv's own request/response models accept what the HTTP routes send and return.

One served family (STATUS) keeps the compile cost to one reset and one step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("fastapi", reason="the serve extra (fastapi) is not installed")
openenv_types = pytest.importorskip(
    "openenv.core.env_server.types", reason="openenv-core (the dev extra) is not installed"
)
from ecomjax.llm_bridge import openenv_drive as DRIVE  # noqa: E402
from ecomjax.llm_bridge import server as SV  # noqa: E402
from ecomjax.llm_bridge import session as SS  # noqa: E402
from ecomjax.llm_bridge.serve_thread import serve_in_thread  # noqa: E402
from ecomjax.llm_bridge.tool_turns import reply_text, turn_for_call  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
OPENENV_010 = ROOT / ".venv-openenv010" / "bin"
SEED = 7


@pytest.fixture(scope="module")
def text(catalog) -> SS.CatalogText:
    return SS.CatalogText.build(catalog)


@pytest.fixture(scope="module")
def url(text) -> Iterator[str]:
    app = SV.create_app(text, tasks="STATUS", warmup=True, expose_goal=False)
    with serve_in_thread(app) as u:
        yield u


@pytest.fixture(scope="module")
def offline(text) -> dict:
    """What the drive script's turns give on an offline session (family STATUS, d 0)."""

    def play(turns):
        s = SS.Session(text, compiler_options=SS.FAST_COMPILE)
        s.reset("STATUS", 0, SEED)
        return [SV.jsonable(s.step(t, "json")) for t in turns]

    text_obs = play(DRIVE.TEXT_TURNS)
    call_obs = play([turn_for_call(n, a) for n, a in DRIVE.CALLS])
    for obs in (text_obs, call_obs):  # the scripts play whole episodes, no hard fail
        assert [o["done"] for o in obs] == [False] * (len(obs) - 1) + [True]
        assert obs[-1]["termination_reason"] == "agent_done"
    return {
        "text_reward": text_obs[-1]["reward"],
        "call_texts": [reply_text(o) for o in call_obs],
        "call_reward": call_obs[-1]["reward"],
    }


def drive(python: str | Path, url: str) -> dict:
    env = {**os.environ, "NO_PROXY": "127.0.0.1,localhost"}
    out = subprocess.run(
        [str(python), "-P", DRIVE.__file__, url, str(SEED)],  # -P: not llm_bridge/ on sys.path
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def validate(openenv_bin: str | Path, url: str) -> str:
    out = subprocess.run(
        [str(openenv_bin), "validate", "--url", f"http://{url}"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, (out.stdout + out.stderr)[-3000:]
    return out.stdout


def check_clients(got: dict, offline: dict, shared_mcp_session: bool) -> None:
    for mode in ("generic_async", "generic_sync"):
        r = got[mode]
        assert r["family"] == "STATUS" and r["done"] is True, (mode, r)
        assert r["reward"] == offline["text_reward"], (mode, r)
        assert r["steps"] == len(DRIVE.TEXT_TURNS)
    names = set(got["mcp_ws"]["tools"])
    assert {"catalog_search", "submit_answer", "message_customer"} <= names
    assert got["mcp_ws"]["texts"] == offline["call_texts"]  # each call is one turn
    assert got["mcp_ws"]["steps"] == len(DRIVE.CALLS)
    http = got["mcp_http"]
    assert set(http["tools"]) == names
    assert http["texts"][-1].endswith("The conversation has ended (agent_done).")
    if shared_mcp_session:  # the WebSocket reset and the HTTP calls play one episode
        assert http["texts"] == offline["call_texts"]
        assert http["steps"] == len(DRIVE.CALLS)


def test_openenv_core_validate_and_clients(url, offline):
    """openenv-core 0.3.0: validate passes; a whole episode through each client."""
    report = json.loads(validate(Path(sys.executable).with_name("openenv"), url))
    assert report["passed"] and not report["summary"]["failed_criteria"], report
    got = drive(sys.executable, url)
    assert got["version"] == "0.3.0"
    # 0.3.0's production MCP session is separate from its WebSocket: the calls play the
    # session's own episode (reset with the server's defaults at creation).
    check_clients(got, offline, shared_mcp_session=False)


@pytest.mark.skipif(
    not (OPENENV_010 / "openenv").exists(), reason="scripts/setup.sh makes .venv-openenv010"
)
def test_openenv_010_validate_and_clients(url, offline):
    """openenv 0.10.0 (its own environment): validate passes; the same episodes, and its
    MCP client shares one episode between HTTP /mcp and the WebSocket."""
    out = validate(OPENENV_010 / "openenv", url)
    assert "Verdict: PASS" in out and "FAIL" not in out.replace("Verdict: PASS", ""), out
    got = drive(OPENENV_010 / "python", url)
    assert got["version"] == "0.10.0"
    check_clients(got, offline, shared_mcp_session=True)


def test_http_routes_speak_openenv_models(url, text):
    """Bodies built from OpenEnv's ResetRequest / StepRequest (with the extra fields they
    allow) are accepted without an episode id, and the responses validate as its
    ResetResponse / StepResponse / State."""
    import httpx

    T = openenv_types
    with httpx.Client(base_url=f"http://{url}", timeout=120) as c:
        body = T.ResetRequest(seed=SEED, render=True).model_dump(exclude_unset=True)
        r = c.post("/reset", json=body)
        assert r.status_code == 200, r.text
        reset = T.ResetResponse(**r.json())
        assert reset.observation["info"]["ignored_fields"] == ["render"]
        assert c.post("/reset", json={}).status_code == 200  # what OpenEnv's docs send
        for turn in DRIVE.TEXT_TURNS:
            req = T.StepRequest(action=turn, timeout_s=30.0, request_id="r1", verbose=False)
            r = c.post("/step", json=req.model_dump(exclude_unset=True))
            assert r.status_code == 200, r.text
            step = T.StepResponse(**r.json())
        assert step.done and step.observation["episode_id"] != reset.observation["episode_id"]
        state = T.State(**c.get("/state").json())
        assert state.step_count == len(DRIVE.TEXT_TURNS)
        meta = c.get("/metadata").json()
        assert T.EnvironmentMetadata(**meta).name == "ecomjax"
        assert T.HealthResponse(status=c.get("/health").json()["status"])
