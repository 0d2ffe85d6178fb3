"""One tool call is one turn: the shape every call-at-a-time client needs.

Why: TRL's ``environment_factory`` and MCP's ``tools/call`` hand the environment one call at
a time and need its result at once, while SPEC §4.1 turns carry a list of calls whose results
arrive in the next observation. Both adapters therefore play each call as a whole turn with
that single call (``message_customer`` is a turn with only a message; ``submit_answer`` is the
turn's answer) and return one text: the tool results, store notices and the customer's reply.
Arguments pass through untouched, so an invalid call is the env's hard fail (SPEC §4.2),
exactly as over ``/step``. Each call counts as one turn for T_max and efficiency.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ecomjax.llm_bridge import schemas as SC

MESSAGE_TOOL = "message_customer"
MESSAGE_SCHEMA = {
    "type": "function",
    "function": {
        "name": MESSAGE_TOOL,
        "description": "Send a message to the customer (no tool runs); the customer replies.",
        "parameters": SC.s_obj({"message": SC.s_str("The text to the customer.", 1)}, ("message",)),
    },
}
TURN_NOTE = (
    "Here every tool call is one turn of the conversation: its result and the customer's reply "
    f"come back as the tool's output. Write to the customer with {MESSAGE_TOOL}; finish with "
    f"{SC.SUBMIT_ANSWER}."
)


def call_tools(with_submit: bool = True) -> list[dict]:
    """The OpenAI-format tools of a call-at-a-time client: the 19 tools, ``submit_answer``
    and ``message_customer``."""
    return [*SC.all_tools(with_submit=with_submit), MESSAGE_SCHEMA]


def turn_for_call(name: str, arguments: Any) -> dict:
    """The SPEC §4.1 turn ("json" format) that plays one call. ``None`` arguments count as
    omitted; anything that is not an object goes to the parser as is (and hard-fails there)."""
    if not isinstance(arguments, Mapping):
        return {"message": "", "tool_calls": [{"name": name, "arguments": arguments}]}
    args = {k: v for k, v in arguments.items() if v is not None}
    if name == MESSAGE_TOOL:
        turn: dict[str, Any] = {"message": args.get("message", ""), "tool_calls": []}
        if set(args) - {"message"}:  # keep the model's mistake visible to the parser
            turn["tool_calls"] = [{"name": name, "arguments": args}]
        return turn
    return {"message": "", "tool_calls": [{"name": name, "arguments": args}]}


def reply_text(obs: Mapping[str, Any]) -> str:
    """What the caller reads back: this step's tool results, store notices, the customer's
    reply, and a closing line when the episode ended."""
    parts = []
    for m in obs["new_messages"]:
        if m["role"] == "tool":
            parts.append(m["content"])
        elif m["role"] == "event":
            parts.append(f"[Store notice] {m['content']}")
        elif m["role"] == "user":
            parts.append(f"Customer: {m['content']}")
    if obs["done"]:
        parts.append(f"The conversation has ended ({obs['termination_reason']}).")
    return "\n".join(parts)
