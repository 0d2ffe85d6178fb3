"""Hashing embedder (SPEC §1.6): FNV-1a vectors, tokenisation and vector properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ecomjax.catalog.embedder import (
    embed_texts,
    fnv1a_64,
    hash_token,
    normalize_rows,
    raw_counts,
    tokenize,
)

ASCII_TEXT = st.text(alphabet=st.characters(min_codepoint=32, max_codepoint=126), max_size=80)


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"", 0xCBF29CE484222325),
        (b"a", 0xAF63DC4C8601EC8C),
        (b"foobar", 0x85944171F73967E8),
    ],
)
def test_fnv1a_64_known_vectors(data: bytes, expected: int) -> None:
    assert fnv1a_64(data) == expected


def test_hash_token_bucket_and_sign() -> None:
    for tok in ("a", "foobar", "usb", "3", "headphones"):
        h = fnv1a_64(tok.encode())
        b, s = hash_token(tok, 384)
        assert b == h % 384
        assert s == (1 if (h >> 32) & 1 == 0 else -1)
    # 0xaf63dc4c8601ec8c: bit 32 is the low bit of 0x...dc4c, which is 0, so the sign is +1.
    assert hash_token("a", 384) == (0xAF63DC4C8601EC8C % 384, 1)


def test_tokenize_lowercases_alnum_runs() -> None:
    assert tokenize("Hello, World! USB-C 3.5mm  T-Shirt") == [
        "hello", "world", "usb", "c", "3", "5mm", "t", "shirt",
    ]  # fmt: skip
    assert tokenize("") == []
    assert tokenize("--- !!") == []


def test_raw_counts_count_every_occurrence() -> None:
    one = raw_counts("speaker")
    assert np.abs(one).sum() == 1
    np.testing.assert_array_equal(raw_counts("speaker Speaker SPEAKER"), 3 * one)
    np.testing.assert_array_equal(raw_counts("a b"), raw_counts("a") + raw_counts("b"))


def test_embed_matches_normalised_counts() -> None:
    texts = ["Premium TechPro Headphones 1234", "", "the the the", "x"]
    e = embed_texts(texts)
    assert e.shape == (4, 384) and e.dtype == np.float32
    for t, row in zip(texts, e, strict=True):
        c = raw_counts(t).astype(np.float64)
        n = np.linalg.norm(c)
        np.testing.assert_allclose(row, c / n if n > 0 else c, atol=1e-7)
    assert not e[1].any()  # empty text stays zero
    np.testing.assert_allclose(normalize_rows(np.zeros((2, 5))), 0.0)


def test_embed_dim_and_batching_agree() -> None:
    texts = [f"item {i} blue widget" for i in range(100)]
    batch = embed_texts(texts, 64)
    single = np.stack([embed_texts([t], 64)[0] for t in texts])
    np.testing.assert_array_equal(batch, single)
    assert batch.shape == (100, 64)


@settings(max_examples=60, deadline=None)
@given(text=ASCII_TEXT)
def test_embed_unit_norm_or_zero(text: str) -> None:
    v = embed_texts([text])[0]
    n = float(np.linalg.norm(v))
    if tokenize(text):
        # Tokens can cancel (+1 and -1 in one bucket), so zero is possible but rare.
        assert n == pytest.approx(1.0, abs=1e-5) or n == 0.0
    else:
        assert n == 0.0


@settings(max_examples=60, deadline=None)
@given(text=ASCII_TEXT)
def test_embed_deterministic_and_case_insensitive(text: str) -> None:
    a = embed_texts([text])
    np.testing.assert_array_equal(a, embed_texts([text]))
    np.testing.assert_array_equal(a, embed_texts([text.upper()]))
    np.testing.assert_array_equal(a, embed_texts([text.lower()]))
