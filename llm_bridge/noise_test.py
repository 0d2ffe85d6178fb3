"""Typo noise (SPEC §11): protected spans survive for every rate and key, p = 0 is the
identity, the same draws give the same text, and the rates and operations are the ones
the spec lists."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax.llm_bridge import noise

P0, P1 = noise.PROTECT
Q0, Q1 = noise.QUIET
V0, V1 = noise.VALUE

WORDS = [*noise.ABBREVIATIONS, "the", "cart", "Please", "LOOKING", "i'm", "red", "héllo", "x"]
# Protected content may hold anything but the markers, including words of the map.
protected_text = st.text(
    alphabet=st.characters(
        blacklist_characters="".join(noise.MARKER_CHARS), blacklist_categories=("Cs",)
    ),
    min_size=1,
    max_size=12,
) | st.sampled_from(["syn_000162", "$45.00", "ord_001_line_02", "please", "USB-C", "3.5mm"])


@st.composite
def marked_strings(draw) -> tuple[str, list[str]]:
    """A marked string and its protected spans, in order."""
    parts: list[str] = []
    spans: list[str] = []
    for _ in range(draw(st.integers(0, 12))):
        kind = draw(st.sampled_from(["free", "free", "protect", "quiet", "value"]))
        if kind == "free":
            parts.append(" ".join(draw(st.lists(st.sampled_from(WORDS), max_size=4))) + " ")
        elif kind in ("protect", "quiet"):
            t = draw(protected_text)
            o, c = (P0, P1) if kind == "protect" else (Q0, Q1)
            parts.append(f"{o}{t}{c}")
            spans.append(t)
        else:
            parts.append(f"{V0}{draw(st.sampled_from(WORDS))}{V1}")
    return "".join(parts), spans


def rng(seed: int) -> np.random.Generator:
    return np.random.default_rng(seed)


@settings(max_examples=300, deadline=None)
@given(marked_strings(), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_protected_spans_survive_verbatim(ms, p, seed):
    marked, spans = ms
    out = noise.add_noise(marked, p, rng(seed))
    assert noise.protected_spans(marked) == spans
    pos = 0
    for s in spans:  # in order, each verbatim
        k = out.find(s, pos)
        assert k >= 0, (s, out)
        pos = k + len(s)
    assert not set(out) & noise.MARKER_CHARS


@settings(max_examples=200, deadline=None)
@given(marked_strings(), st.integers(0, 2**32 - 1))
def test_zero_rate_is_identity(ms, seed):
    marked, _ = ms
    assert noise.add_noise(marked, 0.0, rng(seed)) == noise.strip_markers(marked)


@settings(max_examples=100, deadline=None)
@given(marked_strings(), st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_same_draws_same_text(ms, p, seed):
    marked, _ = ms
    assert noise.add_noise(marked, p, rng(seed)) == noise.add_noise(marked, p, rng(seed))


@settings(max_examples=100, deadline=None)
@given(st.floats(0.0, 1.0), st.integers(0, 2**32 - 1))
def test_tokens_with_digits_money_and_ids_are_protected(p, seed):
    text = "please add syn_000162 x2 for $45.00 to ord_001_line_02 by 2025-03-04 now"
    out = noise.add_noise(text, p, rng(seed))
    for tok in ("syn_000162", "x2", "$45.00", "ord_001_line_02", "2025-03-04"):
        assert re.search(rf"(^|\s){re.escape(tok)}(\s|$)", out), (tok, out)


def test_different_keys_give_different_typos():
    text = "I am looking for something different please, because shopping is fun " * 4
    outs = {noise.add_noise(text, 0.1, rng(s)) for s in range(20)}
    assert len(outs) == 20


def test_abbreviations_apply_with_rate_min_1_3p():
    text = " ".join(noise.ABBREVIATIONS)
    # p = 1/3: every word of the map is replaced (then characters mutate with p); look at
    # the word step alone through a rate-1 draw that never mutates characters.
    chars, prot = list(text), [False] * len(text)
    words, _ = noise._abbreviate(chars, prot, 1.0, rng(0))
    assert "".join(words).split() == list(noise.ABBREVIATIONS.values())
    kept, _ = noise._abbreviate(chars, prot, 0.0, rng(0))
    assert "".join(kept) == text
    # Case is kept and protected words stay.
    w, _ = noise._abbreviate(list("Please PLEASE please"), [False] * 13 + [True] * 7, 1.0, rng(0))
    assert "".join(w) == "Pls PLS please"


def test_character_operation_mix_matches_spec():
    """At p = 1 on a long free text, each letter is dropped / doubled / swapped / replaced
    by a QWERTY neighbour with probabilities 0.3 / 0.3 / 0.2 / 0.2. On "aaa...": a swap
    consumes two letters, so a step eats 1.2 letters on average; drops and doubles cancel
    in the length; "a" has one neighbour, "s", which replaces 0.2 / 1.2 of the letters."""
    text = "a" * 30000
    out = noise.add_noise(text, 1.0, rng(1))
    assert abs(len(out) - len(text)) / len(text) < 0.02
    assert set(out) == {"a", "s"}
    assert abs(out.count("s") / len(text) - 0.2 / 1.2) < 0.01
    # "za" can only come from swapping "a" with the next letter; "z" never swaps with " ".
    swapped = noise.add_noise("az " * 5000, 1.0, rng(2)).split()
    assert 0.17 < sum(w == "za" for w in swapped) / 5000 < 0.23


@pytest.mark.parametrize(
    "c, allowed", [("q", {"w"}), ("p", {"o"}), ("G", {"F", "H"}), ("m", {"n"}), ("é", {"é"})]
)
def test_qwerty_neighbours_stay_in_row_and_keep_case(c, allowed):
    assert {noise._neighbour(c, u) for u in np.linspace(0, 0.999, 50)} == allowed


def test_unbalanced_markers_are_rejected():
    with pytest.raises(ValueError):
        noise.add_noise(f"{P0}abc", 0.1, rng(0))
    with pytest.raises(ValueError):
        noise.add_noise(f"abc{Q1}", 0.1, rng(0))
    with pytest.raises(ValueError):
        noise.add_noise("abc", 1.5, rng(0))


def test_message_rng_is_keyed_by_stream_and_index():
    key = jax.random.key(7)
    a = noise.key_rng(key, "NOISE", 3).random(4)
    assert np.array_equal(a, noise.message_rng(key, 3).random(4))
    assert not np.array_equal(a, noise.key_rng(key, "NOISE", 4).random(4))
    assert not np.array_equal(a, noise.key_rng(key, "TEMPLATE", 3).random(4))
    assert not np.array_equal(a, noise.key_rng(jax.random.key(8), "NOISE", 3).random(4))


def test_draws_are_uniform_and_pinned():
    """The draws replay on any numpy (raw PCG64 output), and are uniform."""
    d = noise.Draws([1, 2, 3])
    assert d.random(3).tolist() == [0.6704722626516632, 0.1110146366693816, 0.5115090823948739]
    assert (d.integers(10), d.permutation(5)) == (3, [4, 0, 2, 1, 3])
    u = noise.Draws([9]).random(100_000)
    assert abs(u.mean() - 0.5) < 0.01 and u.min() >= 0.0 and u.max() < 1.0
    counts = np.bincount([noise.Draws([k]).integers(3) for k in range(3000)], minlength=3)
    assert counts.min() > 900
    assert sorted(noise.Draws([5]).permutation(50)) == list(range(50))
