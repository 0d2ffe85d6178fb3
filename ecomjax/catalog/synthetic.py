"""Synthetic catalog generator (SPEC §1.1, §1.3, §1.4, §1.6, §8.0) and host text helpers.

Why on device: product i draws only from ``fold_in(catalog_key, i)`` (one sub-stream per
field), so generation is a ``vmap`` over product indices, identical whatever N is, and the
2M-product catalog builds in one jitted call. Embeddings are the hashing embedder's
vectors of ``title + " " + desc``; because hashed counts are additive, they are rebuilt
on device from small host-computed count tables instead of rendering 2M strings.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache, partial
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from ecomjax.bits import below, u01
from ecomjax.catalog.embedder import embed_texts, hash_token, raw_counts
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.catalog.vocabulary import (
    ADJECTIVES,
    BRANDS,
    CATALOG_VOCAB_SIZE,
    GROUPS,
    SCREEN_VALUES,
    STORES,
    TAXONOMY,
    VOCAB,
    WATTAGE_VALUES,
)
from ecomjax.constants import (
    ATTR_NAMES,
    DISC_ATTRS,
    MAX_VARIANTS,
    NUM_ATTRS,
    NUMERIC_PRECISION,
    POLICY_CATEGORIES,
    Attr,
    DescForm,
)

__all__ = [
    "MODEL_MAX",
    "MODEL_MIN",
    "describe",
    "generate_catalog",
    "product_card",
    "product_desc",
    "product_title",
    "render_desc",
    "render_title",
    "synthetic_tables",
]

MODEL_MIN = 100
MODEL_MAX = 9999
# Products per step of the generation loop: small enough that the [chunk, D] embedding
# temporaries stay in cache (2048 measured ~2x faster than 32768 on CPU at N = 400k).
_CHUNK = 2048

# Sub-streams: product i draws one block of words, bits(fold_in(catalog_key, i), (W,)), and
# each field owns a fixed range of it. Threefry is counter-based, so the ranges are
# independent streams, and with JAX's default partitionable threefry word j does not
# depend on W: the layout is append-only and a new field never changes existing ones.
# One block per product compiles ~5x faster than a fold_in + bits per field.
_FIELD_WORDS: dict[str, int] = {
    "cat": 1, "noun": 1, "adj": 1, "brand": 1, "store": 1, "model": 1, "price": 1,
    "rating": 7, "rating_count": 1, "ship": 1, "stock_zero": 1, "stock": 1, "color": 1,
    "material": 1, "connector": 1, "wattage": 1, "screen": 1, "size": 1, "weight": 1,
    "item_form": 1, "skin": 1, "vcount": 1, "vcolor": 4, "vsize": 4, "vdelta": 4, "vstock": 4,
}  # fmt: skip
_FIELD_OFFSET = dict(
    zip(_FIELD_WORDS, np.cumsum([0, *_FIELD_WORDS.values()])[:-1].tolist(), strict=True)
)
_N_WORDS = sum(_FIELD_WORDS.values())

_DISC_COL = {a: j for j, a in enumerate(DISC_ATTRS)}
_NUM_COL = {a: j for j, a in enumerate(NUM_ATTRS)}


# --- static taxonomy metadata ------------------------------------------------------------


@dataclass(frozen=True)
class _Meta:
    """Per-category and per-noun numpy tables derived once from the constants."""

    n_cat: int
    n_nouns_total: int
    noun_count: np.ndarray  # int32 [C]
    noun_offset: np.ndarray  # int32 [C]
    noun_cat: np.ndarray  # int32 [NN]
    nouns: tuple[str, ...]
    is_elec: np.ndarray  # bool [C]
    is_charger: np.ndarray  # bool [C]
    is_monitor: np.ndarray  # bool [C]
    has_size: np.ndarray  # bool [C]
    has_weight: np.ndarray  # bool [C]
    is_beauty: np.ndarray  # bool [C]
    noun_power: np.ndarray  # bool [NN]
    policy: np.ndarray  # int8 [C]
    group: np.ndarray  # int8 [C]


@cache
def _meta() -> _Meta:
    paths = [t[0] for t in TAXONOMY]
    counts = np.array([len(t[3]) for t in TAXONOMY], dtype=np.int32)
    offsets = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int32)
    nouns = tuple(n for t in TAXONOMY for n in t[3])
    noun_cat = np.repeat(np.arange(len(TAXONOMY), dtype=np.int32), counts)

    def pref(*ps: str) -> np.ndarray:
        return np.array([any(p.startswith(q) for q in ps) for p in paths])

    first = [p.split("/")[0] for p in paths]
    return _Meta(
        n_cat=len(TAXONOMY),
        n_nouns_total=len(nouns),
        noun_count=counts,
        noun_offset=offsets,
        noun_cat=noun_cat,
        nouns=nouns,
        is_elec=pref("electronics/"),
        is_charger=np.array([t[1] == "chargers" for t in TAXONOMY]),
        is_monitor=np.array([t[1] == "monitors" for t in TAXONOMY]),
        has_size=pref("clothing/", "sports/"),
        has_weight=pref("home/furniture/", "sports/fitness/"),
        is_beauty=pref("beauty/"),
        noun_power=np.array(["Power" in n for n in nouns]),
        policy=np.array([POLICY_CATEGORIES.index(t[4]) for t in TAXONOMY], dtype=np.int8),
        group=np.array([GROUPS.index(f) if f in GROUPS else -1 for f in first], dtype=np.int8),
    )


# --- text rendering (host) ---------------------------------------------------------------


def render_title(adj: str, brand: str, noun: str, model: int) -> str:
    """Synthetic title ``"{Adj} {Brand} {Noun} {model}"`` (SPEC §1.1)."""
    return f"{adj} {brand} {noun} {model}"


def render_desc(brand: str, noun: str, model: int | str, cat_path: str) -> str:
    """Synthetic description (SPEC §1.1); the lower-case noun reads naturally mid-sentence."""
    return (
        f"The {brand} {noun} {model} is a high-quality {noun.lower()} designed for everyday "
        f"use. Category: {cat_path.replace('/', ' > ')}."
    )


@cache
def _emb_tables(dim: int) -> dict[str, np.ndarray]:
    """Raw hashed-count tables whose gathered sum is the count vector of title + " " + desc.

    Tokenisation is concatenative here (every field is separated by spaces or
    punctuation), so counts(title + " " + desc) splits into an (adj, brand) part, a noun
    part that also carries the category path and the constant words, and the model
    number, which is always one token and appears twice.
    """
    m = _meta()
    adj_brand = np.zeros((len(ADJECTIVES) * len(BRANDS), dim), dtype=np.float32)
    for a, adj in enumerate(ADJECTIVES):
        for b, brand in enumerate(BRANDS):
            adj_brand[a * len(BRANDS) + b] = raw_counts(f"{adj} {brand} {brand}", dim)
    # Rendered with empty brand and model, the desc keeps the noun, path and constant words.
    noun_tab = np.zeros((m.n_nouns_total, dim), dtype=np.float32)
    for j, noun in enumerate(m.nouns):
        path = TAXONOMY[int(m.noun_cat[j])][0]
        noun_tab[j] = raw_counts(f"{noun} {render_desc('', noun, '', path)}", dim)
    bucket = np.zeros(MODEL_MAX + 1, dtype=np.int32)
    sign = np.zeros(MODEL_MAX + 1, dtype=np.float32)
    for k in range(MODEL_MIN, MODEL_MAX + 1):
        bucket[k], sign[k] = hash_token(str(k), dim)
    return {"adj_brand": adj_brand, "noun": noun_tab, "model_bucket": bucket, "model_sign": sign}


# --- device generation ---------------------------------------------------------------------


def _normal(bits: jax.Array) -> jax.Array:
    """Standard normal by inverse CDF, sqrt(2) erfinv(U(-1, 1)) (as ``jax.random.normal``)."""
    lo = np.nextafter(np.float32(-1.0), np.float32(0.0))
    u = jnp.maximum(lo, u01(bits) * 2.0 - 1.0)
    return np.float32(np.sqrt(2.0)) * jax.lax.erf_inv(u)


@cache
def _poisson_cdf(lam: float) -> np.ndarray:
    """float32 CDF of Poisson(lam) up to where the tail is below float32 resolution."""
    ks = np.arange(int(lam + 20.0 * np.sqrt(lam) + 20))
    logpmf = -lam + ks * np.log(lam) - np.cumsum(np.log(np.maximum(ks, 1)))
    return np.cumsum(np.exp(logpmf)).astype(np.float32)


def _poisson(bits: jax.Array, lam: float) -> jax.Array:
    """Poisson(lam) by inverting a tabulated CDF.

    Why: ``jax.random.poisson`` runs a rejection while-loop that, vmapped over millions
    of products, cost more than the rest of the catalog together.
    """
    cdf = jnp.asarray(_poisson_cdf(lam))
    return jnp.searchsorted(cdf, u01(bits), side="right").astype(jnp.int32)


def _geometric(bits: jax.Array, p: float) -> jax.Array:
    """Trials to the first success, >= 1 (as ``jax.random.geometric``)."""
    return jnp.floor(jnp.log1p(-u01(bits)) / np.log1p(-p)).astype(jnp.int32) + 1


def _beta_int(bits: jax.Array, a: int, b: int) -> jax.Array:
    """Beta(a, b) for integer a, b as Ga/(Ga+Gb), each Gamma a sum of exponentials."""
    e = -jnp.log1p(-u01(bits[: a + b]))
    ga = jnp.sum(e[:a])
    return ga / (ga + jnp.sum(e[a:]))


def _distinct(bits: jax.Array, k: int, m: int) -> jax.Array:
    """m distinct values of {0..k-1} in uniformly random order (an ordered m-subset).

    Pick j is the x-th value not yet picked, x ~ U{0..k-1-j}. That value c solves
    c = x + #{earlier picks <= c}; iterating from c = x reaches it in j steps, all cheap
    scalar compares (a permutation's sort was the slowest part of the build).
    """
    xs = below(bits[:m], k - jnp.arange(m))
    picks: list[jax.Array] = []
    for j in range(m):
        c = xs[j]
        for _ in range(j):
            c = xs[j] + sum((p <= c).astype(jnp.int32) for p in picks)
        picks.append(c)
    return jnp.stack(picks).astype(jnp.int32)


def _field_bits(ckey: jax.Array, i: jax.Array) -> dict[str, jax.Array]:
    """Product i's words by field: a scalar uint32, or a [w] vector for w > 1."""
    words = jax.random.bits(jax.random.fold_in(ckey, i), (_N_WORDS,), jnp.uint32)
    return {
        name: words[o] if _FIELD_WORDS[name] == 1 else words[o : o + _FIELD_WORDS[name]]
        for name, o in _FIELD_OFFSET.items()
    }


def _draw_product(ckey: jax.Array, i: jax.Array, dev: dict[str, jax.Array]) -> dict:
    """All fields of product i from its own key; no dependence on any other product."""
    m = _meta()
    w = _field_bits(ckey, i)

    cat = below(w["cat"], m.n_cat)
    noun = dev["noun_offset"][cat] + below(w["noun"], dev["noun_count"][cat])
    adj = below(w["adj"], len(ADJECTIVES))
    brand = below(w["brand"], len(BRANDS))
    store = below(w["store"], len(STORES))
    model = MODEL_MIN + below(w["model"], MODEL_MAX - MODEL_MIN + 1)

    price = jnp.exp(3.0 + 1.2 * _normal(w["price"]))
    price_cents = jnp.floor(jnp.clip(price, 0.99, 9999.99) * 100.0 + 0.5).astype(jnp.int32)
    rating = 1.0 + 4.0 * _beta_int(w["rating"], 5, 2)
    rating_x100 = jnp.clip(jnp.floor(rating * 100.0 + 0.5), 100, 500).astype(jnp.int16)
    rating_count = _poisson(w["rating_count"], 150.0)
    ship = jnp.clip(_geometric(w["ship"], 0.3), 1, 14).astype(jnp.int8)
    zero = u01(w["stock_zero"]) < 0.1
    stock = jnp.where(zero, 0, jnp.maximum(1, _poisson(w["stock"], 20.0))).astype(jnp.int16)

    def code(field: str, attr: Attr) -> jax.Array:
        return below(w[field], CATALOG_VOCAB_SIZE[attr])

    none = jnp.int32(-1)
    disc = [none] * len(DISC_ATTRS)
    disc[_DISC_COL[Attr.COLOR]] = code("color", Attr.COLOR)
    disc[_DISC_COL[Attr.MATERIAL]] = code("material", Attr.MATERIAL)
    disc[_DISC_COL[Attr.CONNECTOR_TYPE]] = jnp.where(
        dev["is_elec"][cat], code("connector", Attr.CONNECTOR_TYPE), none
    )
    has_size = dev["has_size"][cat]
    disc[_DISC_COL[Attr.SIZE]] = jnp.where(has_size, code("size", Attr.SIZE), none)
    beauty = dev["is_beauty"][cat]
    disc[_DISC_COL[Attr.ITEM_FORM]] = jnp.where(beauty, code("item_form", Attr.ITEM_FORM), none)
    disc[_DISC_COL[Attr.SKIN_TYPE]] = jnp.where(beauty, code("skin", Attr.SKIN_TYPE), none)

    nan = jnp.float32(jnp.nan)
    watt_ok = dev["is_charger"][cat] | dev["noun_power"][noun]
    watt = dev["wattage"][below(w["wattage"], len(WATTAGE_VALUES))]
    screen = dev["screen"][below(w["screen"], len(SCREEN_VALUES))]
    weight = jnp.exp(2.0 + _normal(w["weight"]))
    weight = jnp.floor(weight * 10.0 + 0.5) / 10.0
    num = [nan] * len(NUM_ATTRS)
    num[_NUM_COL[Attr.WATTAGE]] = jnp.where(watt_ok, watt, nan)
    num[_NUM_COL[Attr.SCREEN_SIZE_INCHES]] = jnp.where(dev["is_monitor"][cat], screen, nan)
    num[_NUM_COL[Attr.WEIGHT_LBS]] = jnp.where(dev["has_weight"][cat], weight, nan)

    # Catalog variants: 2-4 of them, with distinct colours.
    nv = MAX_VARIANTS
    live = jnp.arange(nv) < 2 + below(w["vcount"], nv - 1)
    vcount = jnp.sum(live)
    vcolor = jnp.where(live, _distinct(w["vcolor"], CATALOG_VOCAB_SIZE[Attr.COLOR], nv), -1)
    vsize = jnp.where(live & has_size, below(w["vsize"][:nv], CATALOG_VOCAB_SIZE[Attr.SIZE]), -1)
    u = u01(w["vdelta"][:nv]) * 0.2 - 0.1
    vdelta = jnp.where(live, jnp.floor(u * price_cents + 0.5), 0).astype(jnp.int32)
    vstock = jnp.where(live & (stock > 0), _poisson(w["vstock"][:nv], 10.0), 0)

    return {
        "price_cents": price_cents,
        "rating_x100": rating_x100,
        "rating_count": rating_count,
        "ship_days": ship,
        "stock": stock,
        "category": cat.astype(jnp.int16),
        "brand": brand.astype(jnp.int16),
        "store": store.astype(jnp.int16),
        "adj": adj.astype(jnp.int16),
        "noun": noun.astype(jnp.int16),
        "model": model.astype(jnp.int16),
        "disc": jnp.stack(disc).astype(jnp.int16),
        "num": jnp.stack(num).astype(jnp.float32),
        "var_count": vcount.astype(jnp.int8),
        "var_color": vcolor.astype(jnp.int16),
        "var_size": vsize.astype(jnp.int16),
        "var_price_delta": vdelta,
        "var_stock": vstock.astype(jnp.int16),
    }


def _embed_codes(
    adj: jax.Array, brand: jax.Array, noun: jax.Array, model: jax.Array, tabs: dict, dim: int
) -> jax.Array:
    """float32 [B, D] normalised embeddings from the count tables (SPEC §1.6)."""
    ab = adj.astype(jnp.int32) * len(BRANDS) + brand.astype(jnp.int32)
    v = tabs["adj_brand"][ab] + tabs["noun"][noun.astype(jnp.int32)]
    model = model.astype(jnp.int32)
    onehot = jnp.arange(dim)[None, :] == tabs["model_bucket"][model][:, None]
    v = v + jnp.where(onehot, 2.0 * tabs["model_sign"][model][:, None], 0.0)
    norm = jnp.sqrt(jnp.sum(v * v, axis=-1, keepdims=True))
    return jnp.where(norm > 0, v / jnp.where(norm > 0, norm, 1.0), 0.0)


def _unique(keys: jax.Array) -> jax.Array:
    """bool [N]: the key occurs exactly once (sort + searchsorted, O(N log N))."""
    s = jnp.sort(keys)
    return (jnp.searchsorted(s, keys, side="right") - jnp.searchsorted(s, keys, side="left")) == 1


@partial(jax.jit, static_argnames=("n", "dim", "emb_dtype"))
def _build(ckey: jax.Array, dev: dict, tabs: dict, *, n: int, dim: int, emb_dtype: Any) -> dict:
    """Every per-product array of the synthetic catalog, in one jitted program."""
    m = _meta()
    # Products are drawn and embedded in fixed-size chunks written in place, so no
    # per-product temporary (random words, the [chunk, D] gather-sum-normalise) ever
    # exists for the whole catalog: peak memory is the catalog plus O(chunk). The last
    # chunk is shifted back to end at n; it recomputes a few rows with identical values.
    # On CPU, 16-bit embeddings are held as raw unsigned bits: XLA:CPU has no native
    # bfloat16 update-slice and otherwise converts the whole [N, D] buffer to float32 and
    # back on every chunk (measured: 153 s instead of ~10 s at N = 2M). The final bitcast
    # costs one extra [N, D] copy at peak, on CPU only.
    chunk = min(n, _CHUNK)
    n_chunks = -(-n // chunk)
    native = jnp.dtype(emb_dtype) == jnp.float32 or jax.default_backend() != "cpu"
    store = jnp.dtype(emb_dtype) if native else jnp.dtype(f"uint{emb_dtype.itemsize * 8}")
    draw = jax.vmap(_draw_product, in_axes=(None, 0, None))
    shapes = jax.eval_shape(draw, ckey, jnp.arange(chunk, dtype=jnp.int32), dev)
    init = {k: jnp.zeros((n, *v.shape[1:]), v.dtype) for k, v in shapes.items()}
    init["emb"] = jnp.zeros((n, dim), store)

    def body(c: jax.Array, out: dict) -> dict:
        start = jnp.minimum(c * chunk, n - chunk)
        fc = draw(ckey, start + jnp.arange(chunk, dtype=jnp.int32), dev)
        e = _embed_codes(fc["adj"], fc["brand"], fc["noun"], fc["model"], tabs, dim)
        e = e.astype(emb_dtype)
        fc["emb"] = e if native else jax.lax.bitcast_convert_type(e, store)
        return {k: jax.lax.dynamic_update_slice_in_dim(out[k], fc[k], start, axis=0) for k in out}

    f = jax.lax.fori_loop(0, n_chunks, body, init)
    emb = f.pop("emb")
    emb = emb if native else jax.lax.bitcast_convert_type(emb, emb_dtype)

    # Identifying-description keys (SPEC §8.0), scoped to the whole catalog.
    nn = m.n_nouns_total
    short = f["brand"].astype(jnp.int32) * nn + f["noun"].astype(jnp.int32)
    medium = f["adj"].astype(jnp.int32) * (len(BRANDS) * nn) + short
    title = medium * (MODEL_MAX + 1) + f["model"].astype(jnp.int32)
    u_s, u_m, u_t = _unique(short), _unique(medium), _unique(title)
    form = jnp.where(
        u_s,
        DescForm.SHORT,
        jnp.where(u_m, DescForm.MEDIUM, jnp.where(u_t, DescForm.TITLE, DescForm.NONE)),
    ).astype(jnp.int8)

    cat = f["category"].astype(jnp.int32)
    counts = jnp.zeros(m.n_cat, jnp.int32).at[cat].add(1)
    offsets = jnp.concatenate([jnp.zeros(1, jnp.int32), jnp.cumsum(counts).astype(jnp.int32)])
    return {
        **f,
        "desc_form": form,
        "desc_key": jnp.stack([short, medium, title], axis=1),
        "emb": emb,
        "cat_order": jnp.argsort(cat, stable=True).astype(jnp.int32),
        "cat_offsets": offsets,
    }


def _device_meta() -> dict[str, jax.Array]:
    m = _meta()
    return {
        "noun_count": jnp.asarray(m.noun_count),
        "noun_offset": jnp.asarray(m.noun_offset),
        "is_elec": jnp.asarray(m.is_elec),
        "is_charger": jnp.asarray(m.is_charger),
        "is_monitor": jnp.asarray(m.is_monitor),
        "has_size": jnp.asarray(m.has_size),
        "has_weight": jnp.asarray(m.has_weight),
        "is_beauty": jnp.asarray(m.is_beauty),
        "noun_power": jnp.asarray(m.noun_power),
        "wattage": jnp.asarray(WATTAGE_VALUES, dtype=jnp.float32),
        "screen": jnp.asarray(SCREEN_VALUES, dtype=jnp.float32),
    }


def generate_catalog(
    seed: int = 42, n: int = 1000, embed_dim: int = 384, emb_dtype: Any = jnp.float32
) -> Catalog:
    """Build the synthetic catalog of SPEC §1.4 from ``jax.random.key(seed)``.

    Product i depends only on (seed, i): a catalog of N products is a prefix of any larger
    one, except ``desc_form`` and the category index, which are catalog-scoped.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    m = _meta()
    tabs = {k: jnp.asarray(v) for k, v in _emb_tables(embed_dim).items()}
    out = _build(
        jax.random.key(seed),
        _device_meta(),
        tabs,
        n=int(n),
        dim=int(embed_dim),
        emb_dtype=jnp.dtype(emb_dtype),
    )
    cat_emb = embed_texts([t[2] for t in TAXONOMY], embed_dim)
    return Catalog(
        **out,
        cat_policy=jnp.asarray(m.policy),
        cat_group=jnp.asarray(m.group),
        cat_denied=jnp.zeros(m.n_cat, dtype=bool),
        cat_emb=jnp.asarray(cat_emb, dtype=jnp.float32),
        max_cat_size=int(jnp.max(jnp.diff(out["cat_offsets"]))),
    )


def synthetic_tables() -> CatalogTables:
    """Host strings for the synthetic catalog's codes (ids and titles are derived)."""
    m = _meta()
    return CatalogTables(
        product_ids=None,
        titles=None,
        cat_paths=[t[0] for t in TAXONOMY],
        cat_leaves=[t[1] for t in TAXONOMY],
        cat_display=[t[2] for t in TAXONOMY],
        brands=list(BRANDS),
        stores=list(STORES),
        adjectives=list(ADJECTIVES),
        nouns=list(m.nouns),
        vocab={int(a): list(VOCAB[a]) for a in DISC_ATTRS},
    )


# --- host helpers (both synthetic and real catalogs) --------------------------------------


# The helpers below take a Catalog of device arrays or, for fast repeated lookups, its
# host copy ``jax.device_get(catalog)`` (numpy leaves); indexing works the same on both.


def _scalar(x: jax.Array | np.ndarray, i: int) -> Any:
    return np.asarray(x[i]).item()


def product_title(catalog: Catalog, tables: CatalogTables, i: int) -> str:
    """Title of product i: stored for real catalogs, rebuilt from codes for synthetic."""
    if tables.titles is not None:
        return tables.titles[i]
    return render_title(
        tables.adjectives[_scalar(catalog.adj, i)],
        tables.brands[_scalar(catalog.brand, i)],
        tables.nouns[_scalar(catalog.noun, i)],
        _scalar(catalog.model, i),
    )


def product_desc(catalog: Catalog, tables: CatalogTables, i: int) -> str:
    """Description of product i (real: as loaded, empty if the loader kept none)."""
    if tables.titles is not None:
        return tables.descs[i] if tables.descs is not None else ""
    return render_desc(
        tables.brands[_scalar(catalog.brand, i)],
        tables.nouns[_scalar(catalog.noun, i)],
        _scalar(catalog.model, i),
        tables.cat_paths[_scalar(catalog.category, i)],
    )


def _fmt_num(attr: Attr, v: float) -> float | int:
    q = NUMERIC_PRECISION[attr]
    return int(round(v)) if q >= 1.0 else round(v, 1)


def product_attrs(catalog: Catalog, tables: CatalogTables, i: int) -> dict[str, Any]:
    """Every allowlist attribute product i has, by name (SPEC §1.1 card ``attrs``)."""
    disc = np.asarray(catalog.disc[i])
    num = np.asarray(catalog.num[i])
    attrs: dict[str, Any] = {}
    for j, a in enumerate(DISC_ATTRS):
        if disc[j] >= 0:
            attrs[ATTR_NAMES[a]] = tables.vocab[int(a)][int(disc[j])]
    for j, a in enumerate(NUM_ATTRS):
        if not np.isnan(num[j]):
            attrs[ATTR_NAMES[a]] = _fmt_num(a, float(num[j]))
    return attrs


def product_card(catalog: Catalog, tables: CatalogTables, i: int) -> dict[str, Any]:
    """SPEC §1.1 card fields that the catalog alone fixes (the env adds stock_qty, score)."""
    brand = _scalar(catalog.brand, i)
    store = _scalar(catalog.store, i)
    return {
        "product_id": tables.product_id(i),
        "title": product_title(catalog, tables, i),
        "cat": tables.cat_paths[_scalar(catalog.category, i)],
        "brand": tables.brands[brand] if brand >= 0 else None,
        "store": tables.stores[store] if store >= 0 else None,
        "price": round(_scalar(catalog.price_cents, i) / 100.0, 2),
        "rating": round(_scalar(catalog.rating_x100, i) / 100.0, 2),
        "rating_count": int(_scalar(catalog.rating_count, i)),
        "ship_days": int(_scalar(catalog.ship_days, i)),
        "attrs": product_attrs(catalog, tables, i),
        "has_variants": bool(_scalar(catalog.var_count, i) > 0),
    }


def describe(catalog: Catalog, tables: CatalogTables, i: int, form: int) -> str:
    """Text of product i's identifying description of ``form`` (SPEC §8.0).

    Synthetic: "{Brand} {Noun}", "{Adj} {Brand} {Noun}", the title. Real: the first three
    title words with the brand ("... by {brand}"), the first six words, the title.
    """
    form = DescForm(int(form))
    if form == DescForm.NONE:
        raise ValueError(f"product {i} has no identifying description")
    title = product_title(catalog, tables, i)
    if form == DescForm.TITLE:
        return title
    if tables.titles is None:
        brand = tables.brands[_scalar(catalog.brand, i)]
        noun = tables.nouns[_scalar(catalog.noun, i)]
        if form == DescForm.SHORT:
            return f"{brand} {noun}"
        return f"{tables.adjectives[_scalar(catalog.adj, i)]} {brand} {noun}"
    words = title.split()
    if form == DescForm.SHORT:
        b = _scalar(catalog.brand, i)
        head = " ".join(words[:3])
        return f"{head} by {tables.brands[b]}" if b >= 0 else head
    return " ".join(words[:6])
