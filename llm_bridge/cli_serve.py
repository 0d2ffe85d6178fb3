"""``ecomjax serve``: the OpenEnv-compatible server and the browser demo on one port.

fastapi and uvicorn (the ``serve`` extra) are imported only in ``main``, so ``ecomjax --help``
works without them."""

from __future__ import annotations

import argparse
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "serve",
        help="OpenEnv-compatible HTTP/WebSocket server and browser demo",
        description="Serve the environments over HTTP (/reset, /step, /state), WebSocket (/ws) "
        "and a browser demo at /. Needs the serve extra: pip install 'ecomjax[serve]'.",
    )
    p.add_argument("--host", default="127.0.0.1", help="bind address (default loopback)")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--catalog-size", type=int, default=1000, help="synthetic catalog products")
    p.add_argument(
        "--tasks",
        default="C8",
        help="families a reset without one draws from (seed %% count), and the ones compiled "
        "at start: a collection (C1, C2, C4, C8) or a list such as CART,SUB (default C8)",
    )
    p.add_argument("--max-sessions", type=int, default=256, help="WebSocket sessions at most")
    p.add_argument("--max-http-sessions", type=int, default=64, help="HTTP / MCP episodes at most")
    p.add_argument("--workers", type=int, default=4, help="threads running the JAX steps")
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=1 << 20,
        help="cap of a request body or WebSocket message, bytes (default 1 MiB)",
    )
    p.add_argument("--session-ttl", type=float, default=900.0, help="idle HTTP episode lifetime, s")
    p.add_argument(
        "--difficulty",
        type=int,
        default=None,
        help="fixed difficulty for resets that give none (default: the curriculum draws it)",
    )
    p.add_argument(
        "--warmup",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="compile the --tasks families in the background at start (progress in /health)",
    )
    p.add_argument(
        "--expose-goal",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="add the hidden goal to the terminal observation (info.trace); "
        "--no-expose-goal hides it",
    )
    p.add_argument("--log-level", default="info")
    return p


def main(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ecomjax.llm_bridge.server import ServerConfig, create_app
    except ModuleNotFoundError as e:
        print(
            f"ecomjax serve needs the serve extra ({e.name} is missing): "
            "pip install 'ecomjax[serve]'",
            file=sys.stderr,
        )
        return 2
    if min(args.max_sessions, args.max_http_sessions, args.catalog_size) < 1:
        print(
            "ecomjax serve: --max-sessions, --max-http-sessions and --catalog-size must be "
            "positive",
            file=sys.stderr,
        )
        return 2
    from ecomjax.constants import D_MAX

    if args.difficulty is not None and not 0 <= args.difficulty <= D_MAX:
        print(f"ecomjax serve: --difficulty must be in 0..{D_MAX}", file=sys.stderr)
        return 2
    config = ServerConfig(
        max_sessions=args.max_sessions,
        max_http_sessions=args.max_http_sessions,
        max_body_bytes=args.max_body_bytes,
        session_ttl_s=args.session_ttl,
        workers=args.workers,
        expose_goal=args.expose_goal,
        tasks=args.tasks,
        warmup=args.warmup,
        curriculum=args.difficulty is None,
        default_difficulty=args.difficulty or 0,
    )
    try:
        app = create_app(config=config, catalog_size=args.catalog_size)
    except ValueError as e:
        print(f"ecomjax serve: {e}", file=sys.stderr)
        return 2
    print(f"ecomjax serve: demo at http://{args.host}:{args.port}/", file=sys.stderr)
    uvicorn.run(
        app,
        host=args.host,
        port=args.port,
        log_level=args.log_level,
        ws_max_size=args.max_body_bytes,
    )
    return 0
