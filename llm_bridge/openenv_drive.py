"""Play episodes through OpenEnv's own clients (a script, run by ``openenv_test.py``).

Why a script: openenv-core 0.3.0 (the dev extra) and openenv 0.10.0 both install the
``openenv`` module, so the test runs this file under each version's interpreter and compares
what it prints (one JSON object) with offline ``Session`` replays. Usage:
``python -m ecomjax.llm_bridge.openenv_drive URL`` or ``python openenv_drive.py URL``; it
imports only openenv, never ecomjax.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

ANSWER = {"env": "STATUS", "selected_order_id": "ord_001", "order_status": "SHIPPED"}
TEXT_TURNS = [{"message": "Which order do you mean?"}, {"message": "Done.", "answer": ANSWER}]
CALLS = [
    ("order_list", {}),
    ("message_customer", {"message": "Is this the order you mean?"}),
    ("submit_answer", {"answer": ANSWER}),
]


def _dump(x: Any) -> Any:
    return x.model_dump() if hasattr(x, "model_dump") else x


async def generic_async(url: str, seed: int) -> dict:
    from openenv.core.generic_client import GenericEnvClient

    async with GenericEnvClient(base_url=f"http://{url}") as env:
        r = await env.reset(seed=seed)
        fam = r.observation["family"]
        for turn in TEXT_TURNS:
            r = await env.step(turn)
        state = await env.state()
    return {"family": fam, "reward": r.reward, "done": r.done, "steps": _dump(state)["step_count"]}


def generic_sync(url: str, seed: int) -> dict:
    from openenv.core.generic_client import GenericEnvClient

    with GenericEnvClient(base_url=f"http://{url}").sync() as env:
        r = env.reset(seed=seed)
        fam = r.observation["family"]
        for turn in TEXT_TURNS:
            r = env.step(turn)
        state = env.state()
    return {"family": fam, "reward": r.reward, "done": r.done, "steps": _dump(state)["step_count"]}


async def mcp_tools(url: str, seed: int, production: bool) -> dict:
    from openenv.core.mcp_client import MCPToolClient

    env = MCPToolClient(base_url=f"http://{url}")
    env.use_production_mode = production  # 0.3.0 defaults to the WebSocket step path
    async with env:
        await env.reset(seed=seed)
        names = [t.name for t in await env.list_tools()]
        texts = [await env.call_tool(name, **args) for name, args in CALLS]
        state = await env.state()
    return {"tools": names, "texts": texts, "steps": _dump(state)["step_count"]}


async def main(url: str, seed: int) -> dict:
    from importlib.metadata import version

    try:
        ver = version("openenv-core")
    except Exception:  # noqa: BLE001 - 0.10.0 is the "openenv" distribution
        ver = version("openenv")
    out: dict[str, Any] = {"version": ver}
    out["generic_async"] = await generic_async(url, seed)
    out["generic_sync"] = await asyncio.to_thread(generic_sync, url, seed)
    out["mcp_ws"] = await mcp_tools(url, seed, production=False)
    out["mcp_http"] = await mcp_tools(url, seed, production=True)
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 7))))
