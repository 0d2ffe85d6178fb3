"""MCP's tool protocol (JSON-RPC 2.0) over the server's episodes.

Why: OpenEnv's tool-calling clients (``MCPToolClient``) and ``openenv validate`` speak MCP:
``tools/list`` and ``tools/call`` on ``POST /mcp`` (or as ``{"type": "mcp"}`` WebSocket
messages), plus OpenEnv's ``openenv/session/create`` / ``close`` so that HTTP calls and a
WebSocket (``/ws?session_id=``) share one episode. Each ``tools/call`` plays one turn with that
single call (``tool_turns``): the result is the tool output and the customer's reply as text,
with the reward and the end of the episode in ``structuredContent``. Protocol mistakes
(not JSON-RPC, unknown method, missing tool name, unknown session) are JSON-RPC errors; a bad
*call* (unknown tool, invalid arguments) is the env's hard fail (SPEC §4.2), reported as a
result with ``isError: true``, never as a crash.

The functions take the ``server.Service`` and are plain async Python (no FastAPI here).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ecomjax.llm_bridge.tool_turns import TURN_NOTE, call_tools, reply_text, turn_for_call

if TYPE_CHECKING:
    from ecomjax.llm_bridge.server import Episode, Service

JSONRPC = "2.0"
PROTOCOL_VERSIONS = ("2025-06-18", "2025-03-26", "2024-11-05")
PARSE_ERROR, INVALID_REQUEST, METHOD_NOT_FOUND, INVALID_PARAMS, INTERNAL_ERROR = (
    -32700,
    -32600,
    -32601,
    -32602,
    -32603,
)
SESSION_CREATE, SESSION_CLOSE = "openenv/session/create", "openenv/session/close"


class RpcError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


def mcp_tools() -> list[dict]:
    """The tools in MCP's shape (``inputSchema``), from the same tables the parser checks."""
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"]["description"],
            "inputSchema": t["function"]["parameters"],
        }
        for t in call_tools(with_submit=True)
    ]


def error(rid: Any, code: int, message: str) -> dict:
    return {"jsonrpc": JSONRPC, "id": rid, "error": {"code": code, "message": message}}


def call_result(step: Mapping[str, Any] | None, text: str, is_error: bool) -> dict:
    """An MCP ``CallToolResult``. ``data`` repeats the text: OpenEnv's clients return it."""
    structured: dict[str, Any] = {"done": True, "reward": None}
    if step is not None:
        obs = step["observation"]
        structured = {
            "episode_id": obs["episode_id"],
            "done": step["done"],
            "reward": step["reward"],
            "turn": obs.get("turn"),
            "turns_left": obs.get("turns_left"),
            "termination_reason": obs.get("termination_reason"),
            "is_correct": obs.get("is_correct"),
            "reward_breakdown": obs.get("reward_breakdown"),
        }
    return {
        "content": [{"type": "text", "text": text}],
        "structuredContent": structured,
        "isError": is_error,
        "data": text,
    }


async def call_tool(service: Service, ep: Episode, name: Any, arguments: Any) -> dict:
    """Plays one call as one turn of ``ep``; the ``CallToolResult``."""
    from ecomjax.llm_bridge.server import ApiError

    if not isinstance(name, str) or not name:
        raise RpcError(INVALID_PARAMS, "tools/call needs params.name, a tool name")
    turn = {"format": "json", **turn_for_call(name, {} if arguments is None else arguments)}
    try:
        step = await service.step(ep, turn)
    except ApiError as e:  # e.g. the episode is over: the caller should reset
        return call_result(None, f"{e.message} ({e.code}); nothing ran.", True)
    hard = step["observation"].get("termination_reason") == "hard_fail"
    return call_result(step, reply_text(step["observation"]), hard)


def _initialize(params: Mapping[str, Any]) -> dict:
    asked = params.get("protocolVersion")
    version = asked if asked in PROTOCOL_VERSIONS else PROTOCOL_VERSIONS[0]
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": False}},
        "serverInfo": {"name": "ecomjax", "version": "0.1.0"},
        "instructions": TURN_NOTE,
    }


async def dispatch(service: Service, msg: Any, bound: Episode | None = None) -> dict | None:
    """One JSON-RPC message -> its response (None for a notification). ``bound`` is the
    episode of the WebSocket the message came on; over HTTP, ``params.session_id`` names one
    (without it: the server's default HTTP episode)."""
    rid = msg.get("id") if isinstance(msg, dict) else None
    if isinstance(rid, bool) or not isinstance(rid, (str, int, type(None))):
        rid = None
    try:
        if not isinstance(msg, dict) or msg.get("jsonrpc") != JSONRPC:
            raise RpcError(INVALID_REQUEST, 'not a JSON-RPC 2.0 request: need "jsonrpc": "2.0"')
        method, params = msg.get("method"), msg.get("params", {})
        if not isinstance(method, str):
            raise RpcError(INVALID_REQUEST, "method must be a string")
        if params is None:
            params = {}
        if not isinstance(params, dict):
            raise RpcError(INVALID_PARAMS, "params must be an object")
        result = await _method(service, method, params, bound)
    except RpcError as e:
        return error(rid, e.code, e.message)
    except Exception:  # noqa: BLE001 - never leak a traceback to a client
        return error(rid, INTERNAL_ERROR, "internal error while handling the request")
    if "id" not in msg:  # a notification gets no response
        return None
    return {"jsonrpc": JSONRPC, "id": rid, "result": result}


async def _method(service: Service, method: str, params: dict, bound: Episode | None) -> Any:
    from ecomjax.llm_bridge.server import ApiError

    if method == "initialize":
        return _initialize(params)
    if method == "ping" or method.startswith("notifications/"):
        return {}
    if method == "tools/list":
        return {"tools": mcp_tools()}
    try:
        if method == "tools/call":
            ep = bound if bound is not None else await service.mcp_episode(params.get("session_id"))
            return await call_tool(service, ep, params.get("name"), params.get("arguments"))
        if method == SESSION_CREATE:
            if bound is not None:
                return {"session_id": bound.id}
            reset = {k: v for k, v in params.items() if k != "session_id"}
            ep = await service.create_mcp_session(reset)
            return {"session_id": ep.id}
        if method == SESSION_CLOSE:
            sid = params.get("session_id")
            if not isinstance(sid, str) or not sid:
                raise RpcError(INVALID_PARAMS, "params.session_id is required")
            if sid not in service.episodes:
                raise RpcError(INVALID_PARAMS, f"unknown session_id {sid[:128]!r}")
            return {"session_id": sid, "closed": service.close(sid)}
    except ApiError as e:
        raise RpcError(INVALID_PARAMS, f"{e.message} ({e.code})") from None
    raise RpcError(METHOD_NOT_FOUND, f"method not found: {method[:80]}")
