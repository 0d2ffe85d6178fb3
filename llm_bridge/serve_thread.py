"""Run an ASGI app (``create_app``) on a free loopback port in a background thread.

Why: notebooks, tests and examples want a real server (real sockets, real WebSockets, as
OpenEnv's clients expect) without a second process. The OS picks the port, so parallel
runs never collide.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def serve_in_thread(app: Any, lifespan: str = "on", timeout_s: float = 30.0) -> Iterator[str]:
    """Yields ``host:port`` while uvicorn serves ``app``; stops it on exit."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", ws_max_size=1 << 20, lifespan=lifespan)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + timeout_s
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=timeout_s)
        sock.close()
