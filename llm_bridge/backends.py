"""LLM agents for host rollouts: a local transformers model, or any OpenAI-compatible
chat endpoint (vLLM, SGLang, llama.cpp server, a hosted API).

Both take a batch of conversations and answer them together, so a rollout over B episodes
makes one generate call per turn, not B. The transformers backend records the exact
prompt and completion token ids of every turn, so a trainer can learn from the tokens the
policy produced rather than from a re-tokenisation of the text.

Conversations arrive in chat form (system / user / assistant / tool roles; SPEC §4.4
events already folded into user turns as ``[Store notice]`` lines).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol


@dataclass
class Generation:
    """One assistant turn as produced, before parsing."""

    output: Any  # what parse_turn reads: text (hermes / qwen_xml / json) or a message dict
    fmt: str  # the parse_turn format of ``output``
    prompt_ids: list[int] | None = None  # the exact prompt tokens (local models)
    completion_ids: list[int] | None = None  # the exact generated tokens
    meta: dict = field(default_factory=dict)

    @property
    def loss_mask(self) -> list[int] | None:
        """1 on generated tokens, 0 on the prompt: what a policy-gradient loss may touch."""
        if self.prompt_ids is None or self.completion_ids is None:
            return None
        return [0] * len(self.prompt_ids) + [1] * len(self.completion_ids)


class Backend(Protocol):
    name: str

    def generate(
        self, conversations: Sequence[list[dict]], tools: list[dict]
    ) -> list[Generation]: ...


class TransformersBackend:
    """A local causal LM through its chat template (tools passed to the template).

    Greedy by default; with ``temperature > 0`` sampling is seeded per call from ``seed``
    and a call counter, so a rerun reproduces the same rollouts on the same hardware."""

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        fmt: str = "hermes",
        max_new_tokens: int = 512,
        temperature: float = 0.0,
        seed: int = 0,
        max_prompt_tokens: int | None = None,
    ) -> None:
        self.model, self.tok, self.fmt = model, tokenizer, fmt
        self.max_new_tokens, self.temperature, self.seed = max_new_tokens, temperature, seed
        self.max_prompt_tokens = max_prompt_tokens
        self.name = getattr(getattr(model, "config", None), "_name_or_path", "") or "local"
        self.calls = 0
        self.tok.padding_side = "left"  # generated tokens must line up at the right edge
        if self.tok.pad_token_id is None:
            self.tok.pad_token = self.tok.eos_token

    @classmethod
    def from_pretrained(cls, path: str, **kw: Any) -> TransformersBackend:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tok = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(path)
        return cls(model.eval(), tok, **kw)

    def prompts(self, conversations: Sequence[list[dict]], tools: list[dict]) -> list[str]:
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
        enc = self.tok(
            self.prompts(conversations, tools),
            return_tensors="pt",
            padding=True,
            add_special_tokens=False,
        )
        width = enc["input_ids"].shape[1]
        if self.max_prompt_tokens is not None and width > self.max_prompt_tokens:
            raise ValueError(
                f"prompt of {width} tokens exceeds max_prompt_tokens={self.max_prompt_tokens}"
            )
        sample = self.temperature > 0
        torch.manual_seed(self.seed * 1_000_003 + self.calls)
        self.calls += 1
        with torch.no_grad():
            out = self.model.generate(
                **enc,
                max_new_tokens=self.max_new_tokens,
                do_sample=sample,
                temperature=self.temperature if sample else None,
                top_p=None,
                top_k=None,
                pad_token_id=self.tok.pad_token_id,
            )
        gens = []
        stops = {self.tok.eos_token_id, self.tok.pad_token_id} - {None}
        for i in range(len(conversations)):
            mask = enc["attention_mask"][i].bool()
            prompt = enc["input_ids"][i][mask].tolist()
            completion = []
            for t in out[i, width:].tolist():
                if t in stops:
                    break
                completion.append(t)
            text = self.tok.decode(completion, skip_special_tokens=True)
            gens.append(Generation(text, self.fmt, prompt, completion))
        return gens


class OpenAIBackend:
    """POST /chat/completions with the tool schemas; requests run concurrently.

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
        retries: int = 2,
        extra_body: dict | None = None,
    ) -> None:
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.name, self.api_key = model, api_key
        self.body = {"model": model, "temperature": temperature, "max_tokens": max_tokens}
        if seed is not None:
            self.body["seed"] = seed
        self.body.update(extra_body or {})
        self.concurrency, self.timeout_s, self.retries = concurrency, timeout_s, retries

    def _post(self, payload: dict) -> dict:
        data = json.dumps(payload).encode()
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as r:
                    return json.loads(r.read().decode())
            except urllib.error.HTTPError as e:
                if e.code < 500:  # the request itself is wrong: retrying will not help
                    detail = e.read().decode(errors="replace")[:500]
                    raise RuntimeError(f"{self.url} answered {e.code}: {detail}") from e
                last = e
            except (urllib.error.URLError, TimeoutError, json.JSONDecodeError) as e:
                last = e
            time.sleep(min(2.0**attempt, 8.0) * 0.1)
        raise RuntimeError(f"{self.url} failed after {self.retries + 1} tries: {last}")

    def _one(self, conversation: list[dict], tools: list[dict]) -> Generation:
        payload = dict(self.body, messages=conversation)
        if tools:
            payload["tools"] = tools
        resp = self._post(payload)
        try:
            choice = resp["choices"][0]
            message = dict(choice["message"])
        except (KeyError, IndexError, TypeError) as e:
            raise RuntimeError(f"{self.url}: no choices[0].message in {str(resp)[:300]}") from e
        return Generation(
            message,
            "openai",
            resp.get("prompt_token_ids"),
            choice.get("token_ids"),
            {"usage": resp.get("usage"), "finish_reason": choice.get("finish_reason")},
        )

    def generate(self, conversations: Sequence[list[dict]], tools: list[dict]) -> list[Generation]:
        if not conversations:
            return []
        with ThreadPoolExecutor(
            max_workers=max(1, min(self.concurrency, len(conversations)))
        ) as ex:
            return list(ex.map(lambda c: self._one(c, tools), conversations))
