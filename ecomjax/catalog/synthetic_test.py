"""Synthetic catalog (SPEC §1.1, §1.3, §1.4, §1.6, §8.0).

Two builds are shared by the whole module (each distinct N compiles once): 20k products
in float32 and the first 1000 of the same catalog with bfloat16 embeddings.
"""

from __future__ import annotations

from collections import Counter

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from ecomjax.catalog.embedder import embed_texts
from ecomjax.catalog.synthetic import (
    describe,
    generate_catalog,
    product_card,
    product_desc,
    product_title,
    synthetic_tables,
)
from ecomjax.catalog.types import Catalog
from ecomjax.catalog.vocabulary import (
    ADJECTIVES,
    BRANDS,
    CATALOG_VOCAB_SIZE,
    GROUPS,
    SCREEN_VALUES,
    STORES,
    TAXONOMY,
    WATTAGE_VALUES,
)
from ecomjax.constants import DISC_ATTRS, MAX_VARIANTS, NUM_ATTRS, POLICY_CATEGORIES, Attr, DescForm

N_BIG = 20_000
N_SMALL = 1000
PER_PRODUCT = (
    "price_cents", "rating_x100", "rating_count", "ship_days", "stock", "category", "brand",
    "store", "adj", "noun", "model", "disc", "num", "var_count", "var_color", "var_size",
    "var_price_delta", "var_stock", "desc_key",
)  # fmt: skip
DTYPES = {
    "price_cents": jnp.int32, "rating_x100": jnp.int16, "rating_count": jnp.int32,
    "ship_days": jnp.int8, "stock": jnp.int16, "category": jnp.int16, "brand": jnp.int16,
    "store": jnp.int16, "adj": jnp.int16, "noun": jnp.int16, "model": jnp.int16,
    "disc": jnp.int16, "num": jnp.float32, "var_count": jnp.int8, "var_color": jnp.int16,
    "var_size": jnp.int16, "var_price_delta": jnp.int32, "var_stock": jnp.int16,
    "desc_form": jnp.int8, "desc_key": jnp.int32, "cat_order": jnp.int32,
    "cat_offsets": jnp.int32, "cat_policy": jnp.int8, "cat_group": jnp.int8,
    "cat_denied": jnp.bool_, "cat_emb": jnp.float32,
}  # fmt: skip
DISC_COL = {a: j for j, a in enumerate(DISC_ATTRS)}
U = {a: j for j, a in enumerate(NUM_ATTRS)}
PATHS = np.array([t[0] for t in TAXONOMY])
NOUNS = [n for t in TAXONOMY for n in t[3]]
NOUN_CAT = np.repeat(np.arange(len(TAXONOMY)), [len(t[3]) for t in TAXONOMY])


@pytest.fixture(scope="module")
def big() -> Catalog:
    return generate_catalog(42, N_BIG)


@pytest.fixture(scope="module")
def small() -> Catalog:
    return generate_catalog(42, N_SMALL, emb_dtype=jnp.bfloat16)


@pytest.fixture(scope="module")
def h(big: Catalog) -> dict[str, np.ndarray]:
    """Host copies of the big catalog's arrays."""
    return {k: np.asarray(v) for k, v in vars(big).items()}


def _mask(prefixes: tuple[str, ...]) -> np.ndarray:
    return np.array([any(p.startswith(q) for q in prefixes) for p in PATHS])


def test_shapes_and_dtypes(big: Catalog, small: Catalog) -> None:
    for name, dt in DTYPES.items():
        assert getattr(big, name).dtype == dt, name
    assert big.emb.dtype == jnp.float32 and small.emb.dtype == jnp.bfloat16
    assert big.n_products == N_BIG and big.n_categories == 40 and big.embed_dim == 384
    assert big.disc.shape == (N_BIG, len(DISC_ATTRS)) and big.num.shape == (N_BIG, len(NUM_ATTRS))
    assert big.var_color.shape == (N_BIG, MAX_VARIANTS) and big.desc_key.shape == (N_BIG, 3)
    assert big.cat_offsets.shape == (41,) and big.cat_emb.shape == (40, 384)


def test_deterministic_and_seeded(small: Catalog) -> None:
    again = generate_catalog(42, N_SMALL, emb_dtype=jnp.bfloat16)
    for a, b in zip(jax.tree.leaves(small), jax.tree.leaves(again), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    other = generate_catalog(7, N_SMALL, emb_dtype=jnp.bfloat16)
    assert np.mean(np.asarray(other.price_cents) == np.asarray(small.price_cents)) < 0.05


def test_order_free_prefix(big: Catalog, small: Catalog) -> None:
    """Product i is the same whatever N is: the 1000-catalog is a prefix of the 20k one."""
    for name in PER_PRODUCT:
        np.testing.assert_array_equal(
            np.asarray(getattr(small, name)), np.asarray(getattr(big, name))[:N_SMALL], name
        )
    # Same float32 vectors, rounded to bfloat16.
    np.testing.assert_array_equal(
        np.asarray(small.emb), np.asarray(big.emb[:N_SMALL].astype(jnp.bfloat16))
    )


def test_codes_and_name_distributions(h: dict[str, np.ndarray]) -> None:
    cat, noun = h["category"], h["noun"]
    assert NOUN_CAT[noun].tolist() == cat.tolist()  # noun is one of its leaf's nouns
    counts = np.bincount(cat, minlength=40)
    assert counts.min() > 0.7 * N_BIG / 40 and counts.max() < 1.3 * N_BIG / 40
    for name, k in (("adj", len(ADJECTIVES)), ("brand", len(BRANDS)), ("store", len(STORES))):
        c = np.bincount(h[name], minlength=k)
        assert len(c) == k and c.min() > 0.8 * N_BIG / k and c.max() < 1.2 * N_BIG / k, name
    assert h["model"].min() >= 100 and h["model"].max() <= 9999
    assert abs(h["model"].mean() - 5049.5) < 100
    # Noun uniform within its leaf: the 4-noun kitchen appliances leaf.
    j = [t[0] for t in TAXONOMY].index("home/kitchen/appliances")
    within = Counter(noun[cat == j].tolist())
    assert len(within) == 4 and min(within.values()) > 0.6 * sum(within.values()) / 4


def test_numeric_field_distributions(h: dict[str, np.ndarray]) -> None:
    price = h["price_cents"] / 100.0
    assert price.min() >= 0.99 and price.max() <= 9999.99
    assert abs(np.log(price).mean() - 3.0) < 0.05 and abs(np.log(price).std() - 1.2) < 0.05
    rating = h["rating_x100"]
    assert rating.min() >= 100 and rating.max() <= 500
    assert abs(rating.mean() / 100 - (1 + 4 * 5 / 7)) < 0.02  # 1 + 4 E[Beta(5, 2)]
    assert abs(np.var(rating / 100) - 16 * 10 / (49 * 8)) < 0.03  # 16 Var[Beta(5, 2)]
    assert abs(h["rating_count"].mean() - 150) < 1.0
    assert abs(h["rating_count"].var() - 150) < 10
    ship = h["ship_days"].astype(int)
    assert ship.min() >= 1 and ship.max() <= 14
    k = np.arange(1, 15)
    pmf = 0.3 * 0.7 ** (k - 1)
    pmf[-1] = 0.7**13  # clip(Geometric(0.3), 1, 14)
    assert abs(ship.mean() - (k * pmf).sum()) < 0.06
    stock = h["stock"].astype(int)
    assert abs((stock == 0).mean() - 0.1) < 0.01
    assert abs(stock[stock > 0].mean() - 20) < 0.3 and stock.min() >= 0


def test_attribute_presence_rules(h: dict[str, np.ndarray]) -> None:
    cat, disc, num = h["category"], h["disc"], h["num"]
    elec = _mask(("electronics/",))[cat]
    sized = _mask(("clothing/", "sports/"))[cat]
    heavy = _mask(("home/furniture/", "sports/fitness/"))[cat]
    beauty = _mask(("beauty/",))[cat]
    monitor = (PATHS == "electronics/computing/monitors")[cat]
    power = (PATHS == "electronics/mobile/chargers")[cat] | np.array(["Power" in n for n in NOUNS])[
        h["noun"]
    ]
    assert power[~(PATHS == "electronics/mobile/chargers")[cat]].sum() == 0  # only chargers
    present = {
        Attr.COLOR: np.ones_like(elec), Attr.MATERIAL: np.ones_like(elec),
        Attr.CONNECTOR_TYPE: elec, Attr.SIZE: sized, Attr.ITEM_FORM: beauty,
        Attr.SKIN_TYPE: beauty, Attr.FINISH_TYPE: np.zeros_like(elec),
        Attr.AGE_RANGE: np.zeros_like(elec),
    }  # fmt: skip
    for a, mask in present.items():
        col = disc[:, DISC_COL[a]]
        assert ((col >= 0) == mask).all(), a
        if mask.any():
            assert col[mask].max() < CATALOG_VOCAB_SIZE[a], a
            assert len(np.unique(col[mask])) == CATALOG_VOCAB_SIZE[a], a
    w, s, lb = (num[:, U[a]] for a in (Attr.WATTAGE, Attr.SCREEN_SIZE_INCHES, Attr.WEIGHT_LBS))
    assert (~np.isnan(w) == power).all() and set(np.unique(w[power])) <= set(WATTAGE_VALUES)
    assert (~np.isnan(s) == monitor).all()
    np.testing.assert_allclose(np.unique(s[monitor]), np.float32(SCREEN_VALUES))
    assert (~np.isnan(lb) == heavy).all()
    lbh = lb[heavy].astype(np.float64)
    np.testing.assert_allclose(lbh * 10, np.round(lbh * 10), atol=1e-3)  # 0.1 precision
    assert abs(np.log(np.maximum(lbh, 0.05)).mean() - 2.0) < 0.1


def test_variants(h: dict[str, np.ndarray]) -> None:
    count = h["var_count"].astype(int)
    assert set(np.unique(count)) == {2, 3, 4}
    live = np.arange(MAX_VARIANTS)[None, :] < count[:, None]
    color, size = h["var_color"], h["var_size"]
    assert ((color >= 0) == live).all() and color.max() < CATALOG_VOCAB_SIZE[Attr.COLOR]
    for row, c in zip(color, count, strict=True):
        assert len(set(row[:c].tolist())) == c
    sized = _mask(("clothing/", "sports/"))[h["category"]]
    assert ((size >= 0) == (live & sized[:, None])).all() and size.max() < 6
    delta, price = h["var_price_delta"], h["price_cents"][:, None]
    assert (np.abs(delta) <= 0.1 * price + 0.5 + 1e-3).all() and (delta[~live] == 0).all()
    assert abs(delta[live].mean()) < 0.02 * price.mean()
    vstock, stock = h["var_stock"], h["stock"][:, None]
    assert (vstock[~live | (stock == 0)] == 0).all()
    assert abs(vstock[live & (stock > 0)].mean() - 10) < 0.2


def test_desc_keys_forms_and_text_uniqueness(big: Catalog, h: dict[str, np.ndarray]) -> None:
    nn = len(NOUNS)
    short = h["brand"].astype(np.int64) * nn + h["noun"]
    medium = h["adj"].astype(np.int64) * 25 * nn + short
    title = medium * 10000 + h["model"]
    np.testing.assert_array_equal(h["desc_key"], np.stack([short, medium, title], 1))
    cnt = [Counter(k.tolist()) for k in (short, medium, title)]
    form = h["desc_form"]
    for i in range(N_BIG):
        u = [c[k] == 1 for c, k in zip(cnt, (short[i], medium[i], title[i]), strict=True)]
        want = next((DescForm(f + 1) for f in range(3) if u[f]), DescForm.NONE)
        assert form[i] == want
    assert {int(f) for f in np.unique(form)} >= {DescForm.SHORT, DescForm.MEDIUM, DescForm.TITLE}
    # The chosen description text names exactly one product (case-insensitive).
    tables = synthetic_tables()
    host = jax.device_get(big)  # numpy leaves: fast scalar reads in the host helpers
    texts = {
        f: [describe(host, tables, i, f).lower() for i in range(N_BIG)]
        for f in (DescForm.SHORT, DescForm.MEDIUM)
    }
    texts[DescForm.TITLE] = [t.lower() for t in _titles(h, N_BIG)]
    counts = {f: Counter(v) for f, v in texts.items()}
    for i in range(N_BIG):
        f = DescForm(int(form[i]))
        if f != DescForm.NONE:
            assert counts[f][texts[f][i]] == 1
    with pytest.raises(ValueError):
        describe(big, tables, 0, DescForm.NONE)


def _titles(h: dict[str, np.ndarray], n: int) -> list[str]:
    return [
        f"{ADJECTIVES[h['adj'][i]]} {BRANDS[h['brand'][i]]} {NOUNS[h['noun'][i]]} {h['model'][i]}"
        for i in range(n)
    ]


def test_embeddings_equal_host_embedder(big: Catalog, h: dict[str, np.ndarray]) -> None:
    tables = synthetic_tables()
    idx = list(range(100)) + list(range(N_BIG - 100, N_BIG))
    texts = [product_title(big, tables, i) + " " + product_desc(big, tables, i) for i in idx]
    np.testing.assert_allclose(h["emb"][idx], embed_texts(texts), atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(h["emb"], axis=1), 1.0, atol=1e-5)
    np.testing.assert_allclose(h["cat_emb"], embed_texts([t[2] for t in TAXONOMY]), atol=1e-6)


def test_category_index_and_tables(h: dict[str, np.ndarray]) -> None:
    order, off, cat = h["cat_order"], h["cat_offsets"], h["category"]
    assert sorted(order.tolist()) == list(range(N_BIG))
    np.testing.assert_array_equal(off, np.concatenate([[0], np.cumsum(np.bincount(cat))]))
    for c in range(40):
        block = order[off[c] : off[c + 1]]
        assert (cat[block] == c).all() and (np.diff(block) > 0).all()  # stable
    assert [POLICY_CATEGORIES[p] for p in h["cat_policy"]] == [t[4] for t in TAXONOMY]
    assert [GROUPS[g] for g in h["cat_group"]] == [t[0].split("/")[0] for t in TAXONOMY]
    assert not h["cat_denied"].any()


def test_host_helpers(big: Catalog, h: dict[str, np.ndarray]) -> None:
    tables = synthetic_tables()
    assert tables.nouns == NOUNS and tables.cat_paths == PATHS.tolist()
    assert tables.vocab[int(Attr.COLOR)][0] == "black"
    for i in (0, 1, 2, 12345):
        card = product_card(big, tables, i)
        assert card["product_id"] == f"syn_{i:06d}"
        assert card["title"] == _titles(h, i + 1)[i]
        assert card["cat"] == PATHS[h["category"][i]]
        assert card["price"] == pytest.approx(h["price_cents"][i] / 100)
        assert card["rating"] == pytest.approx(h["rating_x100"][i] / 100)
        assert card["has_variants"] is True and "stock_qty" not in card
        assert "color" in card["attrs"] and "material" in card["attrs"]
        desc = product_desc(big, tables, i)
        noun = NOUNS[h["noun"][i]]
        assert desc.startswith(f"The {BRANDS[h['brand'][i]]} {noun} {h['model'][i]} is a")
        assert desc.endswith(f"Category: {card['cat'].replace('/', ' > ')}.")
        assert describe(big, tables, i, DescForm.SHORT) == f"{BRANDS[h['brand'][i]]} {noun}"
        assert describe(big, tables, i, DescForm.TITLE) == card["title"]
