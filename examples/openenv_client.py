"""Play ecomjax through OpenEnv's own clients: whole turns over a WebSocket, then MCP tools.

Start the server in one shell, run this in another (needs ``pip install openenv-core``)::

    ecomjax serve --port 8000 --tasks CART
    python examples/openenv_client.py --url http://127.0.0.1:8000

``GenericEnvClient`` sends SPEC §4.1 turns (message, tool calls, answer) to ``/ws``; a bare
``reset()`` would let the server pick the family (``--tasks``), the seed (a counter) and d
(its curriculum); here the reset names CART. ``MCPToolClient`` lists the tools over MCP and
plays one turn per ``call_tool``: the reply is the tool's output and the customer's answer
as text, and ``submit_answer`` ends the episode.
"""

from __future__ import annotations

import argparse
import asyncio

from openenv.core.generic_client import GenericEnvClient
from openenv.core.mcp_client import MCPToolClient


def whole_turns(url: str) -> None:
    with GenericEnvClient(base_url=url).sync() as env:
        r = env.reset(family="CART", seed=7)
        print("customer:", r.observation["messages"][1]["content"])
        call = {"name": "user_get_visit_history", "arguments": {}}
        r = env.step({"message": "Let me look at what you viewed.", "tool_calls": [call]})
        print("turn", r.observation["turn"], "| customer:", r.observation["new_messages"][-1])
        r = env.step({"message": "Here is your cart.", "answer": {"env": "CART"}})
        print("done:", r.done, "reward:", r.reward, r.observation["termination_reason"])


async def tool_calls(url: str) -> None:
    async with MCPToolClient(base_url=url) as env:
        await env.reset(family="CART", seed=8)
        print("tools:", [t.name for t in await env.list_tools()][:5], "...")
        print(await env.call_tool("user_get_visit_history"))
        print(await env.call_tool("message_customer", message="Which of these do you want?"))
        print(await env.call_tool("submit_answer", answer={"env": "CART"}))


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--url", default="http://127.0.0.1:8000")
    args = ap.parse_args()
    whole_turns(args.url)
    asyncio.run(tool_calls(args.url))
