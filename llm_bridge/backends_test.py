"""Backends with no downloads: a tiny randomly initialised Llama with a word-level tokenizer
built here, and a local HTTP server standing in for an OpenAI-compatible endpoint."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest
from ecomjax.llm_bridge.backends import Generation, OpenAIBackend, TransformersBackend

CONVS = [
    [
        {"role": "system", "content": "you are a shopping agent"},
        {"role": "user", "content": "find me"},
    ],
    [{"role": "user", "content": "usb charger cart cart cart 3 4 5"}],
]


def test_batched_generation_equals_one_by_one(tiny):
    """Left padding must not change what each conversation generates."""
    backend = TransformersBackend(*tiny, max_new_tokens=6)
    both = backend.generate(CONVS, tools=[{"type": "function"}])
    alone = [backend.generate([c], tools=[{"type": "function"}])[0] for c in CONVS]
    for b, a in zip(both, alone, strict=True):
        assert b.completion_ids == a.completion_ids
        assert b.prompt_ids == a.prompt_ids
        assert b.output == a.output


def test_token_records_match_the_prompt(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok, max_new_tokens=5)
    (g,) = backend.generate(CONVS[:1], tools=[])
    assert (
        g.prompt_ids
        == tok(backend.prompts(CONVS[:1], [])[0], add_special_tokens=False)["input_ids"]
    )
    assert 0 < len(g.completion_ids) <= 5
    assert g.loss_mask == [0] * len(g.prompt_ids) + [1] * len(g.completion_ids)
    assert g.fmt == "hermes" and isinstance(g.output, str)


def test_sampling_is_seeded(tiny):
    a = TransformersBackend(*tiny, max_new_tokens=8, temperature=1.5, seed=3)
    b = TransformersBackend(*tiny, max_new_tokens=8, temperature=1.5, seed=3)
    assert [g.completion_ids for g in a.generate(CONVS, [])] == [
        g.completion_ids for g in b.generate(CONVS, [])
    ]


def test_prompt_cap_is_a_clear_error(tiny):
    backend = TransformersBackend(*tiny, max_prompt_tokens=3)
    with pytest.raises(ValueError, match="max_prompt_tokens"):
        backend.generate(CONVS, [])


class _Handler(BaseHTTPRequestHandler):
    seen: list = []
    status = 200

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Handler.seen.append((self.path, self.headers.get("Authorization"), body))
        if _Handler.status != 200:
            self.send_response(_Handler.status)
            self.end_headers()
            self.wfile.write(b'{"error": "bad request"}')
            return
        last = body["messages"][-1]["content"]
        msg = {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {
                        "name": "catalog_search",
                        "arguments": json.dumps({"query": last}),
                    },
                }
            ],
        }
        out = {"choices": [{"message": msg, "token_ids": [7, 8]}], "prompt_token_ids": [1, 2]}
        data = json.dumps(out).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = HTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    httpd.shutdown()


def test_openai_backend_batches_and_keeps_order(server):
    _Handler.seen.clear()
    _Handler.status = 200
    backend = OpenAIBackend(server, "m", api_key="k", concurrency=4, extra_body={"x": 1})
    convs = [[{"role": "user", "content": f"q{i}"}] for i in range(9)]
    gens = backend.generate(convs, tools=[{"type": "function", "function": {"name": "t"}}])
    assert len(_Handler.seen) == 9
    for i, g in enumerate(gens):
        assert isinstance(g, Generation) and g.fmt == "openai"
        args = json.loads(g.output["tool_calls"][0]["function"]["arguments"])
        assert args == {"query": f"q{i}"}  # answers come back in request order
        assert g.prompt_ids == [1, 2] and g.completion_ids == [7, 8]
    path, auth, body = _Handler.seen[0]
    assert path == "/v1/chat/completions" and auth == "Bearer k"
    assert body["model"] == "m" and body["x"] == 1 and body["tools"][0]["function"]["name"] == "t"


def test_openai_backend_client_error_is_not_retried(server):
    _Handler.seen.clear()
    _Handler.status = 400
    try:
        with pytest.raises(RuntimeError, match="400"):
            OpenAIBackend(server, "m").generate([[{"role": "user", "content": "x"}]], [])
        assert len(_Handler.seen) == 1
    finally:
        _Handler.status = 200


def test_openai_backend_unreachable_is_a_clear_error():
    backend = OpenAIBackend("http://127.0.0.1:9/v1", "m", retries=1, timeout_s=1.0)
    with pytest.raises(RuntimeError, match="failed after 2 tries"):
        backend.generate([[{"role": "user", "content": "x"}]], [])
