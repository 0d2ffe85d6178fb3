"""The LLM verbaliser keeps only text that carries every protected value and no new fact;
otherwise the template stands. Scores never depend on it."""

from __future__ import annotations

import jax
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax.llm_bridge.noise import PROTECT, VALUE, add_noise, key_rng, strip_markers
from ecomjax.llm_bridge.session import FAST_COMPILE, CatalogText, Session
from ecomjax.llm_bridge.templates import Utterance
from ecomjax.llm_bridge.verbaliser import Verbaliser, fact_terms, mark, transformers_generate

P0, P1 = PROTECT
V0, V1 = VALUE
UTT = Utterance(
    marked=f"I need {V0}{P0}2{P1}{V0} mugs in {V0}red{V1}, under {P0}$25.00{P1}, from Acme.",
    acts=("INFORM",),
    values=("2", "red", "$25.00"),
)
TERMS = frozenset({"red", "blue", "acme", "zeta", "mug"})


def verbaliser(reply) -> Verbaliser:
    return Verbaliser(lambda msgs: reply(msgs), "fake", TERMS)


def test_faithful_rewording_is_kept_and_protected():
    v = verbaliser(lambda m: "Hi! Could you find 2 red mugs from Acme, under $25.00?")
    out = v(UTT, [])
    assert strip_markers(out) == "Hi! Could you find 2 red mugs from Acme, under $25.00?"
    assert v.stats["accepted"] == 1
    # The protected values survive any noise level.
    for seed in range(20):
        noisy = add_noise(out, 1.0, key_rng(jax.random.key(seed), "NOISE", 0))
        assert all(x in noisy for x in ("2", "red", "$25.00"))


@pytest.mark.parametrize(
    "reply",
    [
        "Could you find red mugs from Acme under $25.00?",  # drops the quantity
        "Could you find 2 red mugs from Acme, under $25.00, or 3 blue ones?",  # new facts
        "Find 2 red mugs under $25.00 from Zeta.",  # a brand the act does not state
        "",
    ],
)
def test_unfaithful_text_falls_back_to_the_template(reply):
    v = verbaliser(lambda m: reply)
    assert v(UTT, []) == UTT.marked
    assert v.stats["fallback"] == 1


def test_model_errors_fall_back():
    def boom(_):
        raise RuntimeError("model down")

    assert verbaliser(boom)(UTT, []) == UTT.marked


def test_cache_is_keyed_by_act_and_transcript():
    calls = []
    v = verbaliser(lambda m: calls.append(1) or "2 red mugs from Acme, under $25.00 please")
    a = v(UTT, [{"role": "assistant", "content": "hello"}])
    b = v(UTT, [{"role": "assistant", "content": "hello"}])
    assert a == b and len(calls) == 1 and v.stats["cached"] == 1
    v(UTT, [{"role": "assistant", "content": "something else"}])
    assert len(calls) == 2
    assert v.key(UTT, []) == Verbaliser(lambda m: "", "fake").key(UTT, [])  # no process salt


def test_context_turns_bounds_the_transcript_in_the_prompt():
    history = [{"role": "assistant", "content": f"turn {i}"} for i in range(6)]
    for n, want in [(0, []), (2, ["turn 4", "turn 5"]), (10, [f"turn {i}" for i in range(6)])]:
        text = str(Verbaliser(lambda m: "", "fake", context_turns=n).prompt(UTT, history))
        assert [f"turn {i}" for i in range(6) if f"turn {i}" in text] == want


@settings(max_examples=60, deadline=None)
@given(st.lists(st.sampled_from(["2", "red", "$25.00", "mug", "x"]), max_size=6))
def test_mark_wraps_every_occurrence(parts):
    text = " ".join(parts)
    marked = mark(text, ["2", "red", "$25.00"])
    assert strip_markers(marked) == text
    assert marked.count(P0) == sum(p in ("2", "red", "$25.00") for p in parts)


def test_tiny_model_is_deterministic_and_checked(tiny):
    model, tok = tiny
    gen = transformers_generate(model, tok, max_new_tokens=12, seed=3)
    a = Verbaliser(gen, "tiny", TERMS)
    b = Verbaliser(gen, "tiny", TERMS)
    out_a, out_b = a(UTT, []), b(UTT, [])
    assert out_a == out_b
    assert all(x in strip_markers(out_a) for x in UTT.values)  # kept, or the template


def test_session_scores_do_not_depend_on_wording(catalog):
    from ecomjax.agents.oracle import make_oracle

    text = CatalogText.build(catalog, None)
    agent = make_oracle()
    act = jax.jit(agent.act)

    def play(verb):
        s = Session(text, noise=False, verbaliser=verb, compiler_options=FAST_COMPILE)
        obs = s.reset("CART", 3, 11)
        key = jax.random.fold_in(s.key, 0xA6E)
        mem = agent.init(key, s.timestep.observation, text.catalog)
        while not obs["done"]:
            mem, a = act(
                jax.random.fold_in(key, obs["turn"]), mem, s.timestep.observation, text.catalog
            )
            obs = s.step_action(a)
        return obs, s

    plain, _ = play(None)
    verb = Verbaliser(
        lambda m: "Hello there. " + m[-1]["content"].split(": ", 1)[-1],
        "fake",
        fact_terms(text.lexicon.tables),
    )
    worded, s = play(verb)
    assert worded["reward_breakdown"] == plain["reward_breakdown"]
    users = [m["content"] for m in s.messages if m["role"] == "user"]
    assert verb.stats["accepted"] >= 1
    assert sum(u.startswith("Hello there.") for u in users) == verb.stats["accepted"]
