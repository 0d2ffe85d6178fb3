"""Deterministic lexical hashing embedder (SPEC §1.6), on the host in numpy.

Why hashing: it needs no model download, is identical on every machine (FNV-1a, no
process-salted ``hash``), and its per-token counts are additive, so the synthetic catalog
can rebuild exactly the same vectors on device from small per-vocabulary count tables.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from functools import lru_cache

import numpy as np

from ecomjax.constants import EMBED_DIM

FNV64_OFFSET = 0xCBF29CE484222325
FNV64_PRIME = 0x100000001B3
_MASK64 = (1 << 64) - 1
_TOKEN_RE = re.compile(r"[a-z0-9]+")
# Rows per block in embed_texts: bounds the temporary (row, bucket) index arrays.
_BLOCK_ROWS = 65536

__all__ = [
    "FNV64_OFFSET",
    "FNV64_PRIME",
    "embed_texts",
    "fnv1a_64",
    "hash_token",
    "normalize_rows",
    "raw_counts",
    "tokenize",
]


def fnv1a_64(data: bytes) -> int:
    """FNV-1a 64-bit hash of ``data`` as an unsigned Python int."""
    h = FNV64_OFFSET
    for byte in data:
        h ^= byte
        h = (h * FNV64_PRIME) & _MASK64
    return h


def tokenize(text: str) -> list[str]:
    """Lower-cased alphanumeric runs; every occurrence is kept (counts matter)."""
    return _TOKEN_RE.findall(text.lower())


@lru_cache(maxsize=1 << 20)
def _hash_token_cached(tok: str, dim: int) -> tuple[int, int]:
    h = fnv1a_64(tok.encode("utf-8"))
    return h % dim, (1 if ((h >> 32) & 1) == 0 else -1)


def hash_token(tok: str, dim: int = EMBED_DIM) -> tuple[int, int]:
    """(bucket, sign) of one token: bucket = h mod dim, sign +1 iff bit 32 of h is 0."""
    return _hash_token_cached(tok, dim)


def raw_counts(text: str, dim: int = EMBED_DIM) -> np.ndarray:
    """Unnormalised signed bucket counts of ``text`` as int32 [dim].

    Why int: counts are additive and exact, so device code can sum per-field tables and
    normalise once, matching ``embed_texts`` up to float rounding.
    """
    v = np.zeros(dim, dtype=np.int32)
    for tok in tokenize(text):
        b, s = hash_token(tok, dim)
        v[b] += s
    return v


def normalize_rows(v: np.ndarray) -> np.ndarray:
    """L2-normalise each row in float64 and return float32; zero rows stay zero."""
    v = np.asarray(v, dtype=np.float64)
    norm = np.sqrt(np.sum(v * v, axis=-1, keepdims=True))
    out = np.divide(v, norm, out=np.zeros_like(v), where=norm > 0)
    return out.astype(np.float32)


class _TokenTable:
    """Distinct token -> dense id, with the (bucket, sign) of each id in growing arrays.

    Why: a dict lookup per token occurrence plus numpy gathers is several times faster
    than hashing (or calling a cached function) per occurrence on million-row catalogs.
    """

    def __init__(self, dim: int) -> None:
        self.dim = dim
        self.ids: dict[str, int] = {}
        self.bucket: list[int] = []
        self.sign: list[int] = []

    def lookup(self, toks: list[str]) -> list[int]:
        ids = self.ids
        try:  # fast path: every token already known
            return list(map(ids.__getitem__, toks))
        except KeyError:
            for tok in toks:
                if tok not in ids:
                    ids[tok] = len(self.bucket)
                    b, s = hash_token(tok, self.dim)
                    self.bucket.append(b)
                    self.sign.append(s)
            return list(map(ids.__getitem__, toks))


_TABLES: dict[int, _TokenTable] = {}
_MAX_CACHED_TOKENS = 4_000_000


def _token_table(dim: int) -> _TokenTable:
    t = _TABLES.get(dim)
    if t is None or len(t.ids) > _MAX_CACHED_TOKENS:  # bound host memory
        t = _TABLES[dim] = _TokenTable(dim)
    return t


def _block_counts(texts: Sequence[str], dim: int) -> np.ndarray:
    """Signed counts for one block of texts, using one bincount over (row, bucket)."""
    table = _token_table(dim)
    ids: list[int] = []
    lengths = np.zeros(len(texts), dtype=np.int64)
    for r, text in enumerate(texts):
        toks = _TOKEN_RE.findall(text.lower())
        lengths[r] = len(toks)
        ids.extend(table.lookup(toks))
    n = len(texts)
    if not ids:
        return np.zeros((n, dim), dtype=np.float64)
    idx = np.asarray(ids, dtype=np.int64)
    buckets = np.asarray(table.bucket, dtype=np.int64)[idx]
    signs = np.asarray(table.sign, dtype=np.float64)[idx]
    flat = np.repeat(np.arange(n, dtype=np.int64), lengths) * dim + buckets
    return np.bincount(flat, weights=signs, minlength=n * dim).reshape(n, dim)


def embed_texts(texts: Iterable[str], dim: int = EMBED_DIM) -> np.ndarray:
    """Embed many texts as float32 [n, dim], L2-normalised rows (zero rows stay zero).

    Token hashes are cached per distinct token, and texts are processed in blocks so that
    temporary index arrays stay small for catalogs of millions of products.
    """
    texts = list(texts)
    out = np.zeros((len(texts), dim), dtype=np.float32)
    for start in range(0, len(texts), _BLOCK_ROWS):
        block = texts[start : start + _BLOCK_ROWS]
        out[start : start + len(block)] = normalize_rows(_block_counts(block, dim))
    return out
