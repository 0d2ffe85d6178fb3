"""Real-catalog loader (SPEC §1.1, §1.5, §8.0) on small hand-made catalogs."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import jax
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from ecomjax.catalog.embedder import embed_texts
from ecomjax.catalog.loader import (
    LoadStats,
    is_denied,
    keyed_ship_stock,
    load_catalog,
    load_parquet,
    load_rows,
)
from ecomjax.catalog.synthetic import describe, product_card, product_desc, product_title
from ecomjax.catalog.vocabulary import GROUPS, VOCAB
from ecomjax.constants import DISC_ATTRS, NUM_ATTRS, POLICY_CATEGORIES, Attr, DescForm

DISC_COL = {a: j for j, a in enumerate(DISC_ATTRS)}
U = {a: j for j, a in enumerate(NUM_ATTRS)}


def _rows() -> list[dict[str, Any]]:
    """Edge cases: one row per rule. Ids p0..p9 survive; d* are denied."""
    return [
        {  # complete row; attrs as a JSON string with mixed spellings
            "product_id": "p0", "title": "Acme Turbo Blender 3000 Deluxe Kitchen Edition",
            "description": "Blends things.", "category": "home/kitchen/appliances",
            "brand": "ACME", "store": "Kitchen Store", "price": 49.99, "rating": 4.5,
            "rating_count": 120, "ship_days": 3, "stock": 7,
            "attrs": json.dumps({"Colour": "Red", "Material": "Stainless_Steel",
                                 "wattage": "600W", "weight": "5.5 lb"}),
        },
        {  # everything optional missing
            "product_id": "p1", "title": "Acme Turbo Blender Mini", "description": None,
            "category": "home/kitchen/appliances", "brand": "acme", "store": None,
            "price": None, "rating": None, "rating_count": None, "ship_days": None,
            "stock": None, "attrs": None,
        },
        {  # denied: weapons part
            "product_id": "d0", "title": "Knife", "description": "", "category": "weapons/knives",
            "brand": "x", "store": "y", "price": 10.0, "rating": 4.0, "rating_count": 1,
            "ship_days": 1, "stock": 1, "attrs": None,
        },
        {  # price <= 0, rating out of range, unknown colour, cased attributes, as a dict
            "product_id": "p2", "title": "Zeta Phone Charger", "description": "Fast charging.",
            "category": "electronics/mobile/chargers", "brand": "Zeta", "store": "Tech",
            "price": 0.0, "rating": 7.0, "rating_count": 3, "ship_days": None, "stock": 2,
            "attrs": json.dumps({"color": "Chartreuse", "connector_type": "usb-c",
                                 "screen_size": "6.1 inches"}),
        },
        {  # denied: nested, upper-case part
            "product_id": "d1", "title": "Scope", "description": "",
            "category": "sports/Firearms/optics", "brand": "x", "store": "y", "price": 1.0,
            "rating": 4.0, "rating_count": 1, "ship_days": 1, "stock": 1, "attrs": None,
        },
        {  # negative price, low rating, size keeps canonical case, string price
            "product_id": "p3", "title": "Wool Sweater Classic Fit", "description": "Warm.",
            "category": "clothing/womens/tops", "brand": "Knitco", "store": "Fashion",
            "price": "-5", "rating": 0.2, "rating_count": 0, "ship_days": 30, "stock": None,
            "attrs": json.dumps({"size": "xl", "color": "NAVY", "skin_type": "Oily"}),
        },
        {  # identical full title to p5: never a target (NONE)
            "product_id": "p4", "title": "Generic USB Cable", "description": "A cable.",
            "category": "electronics/accessories", "brand": "Brand A", "store": "S",
            "price": "$1,299.50", "rating": 3.3, "rating_count": 9, "ship_days": 2,
            "stock": 0, "attrs": None,
        },
        {
            "product_id": "p5", "title": "generic usb cable", "description": "Another cable.",
            "category": "garden_tools/hoses", "brand": "Brand B", "store": "S", "price": 2.0,
            "rating": 3.3, "rating_count": 9, "ship_days": 2, "stock": 5, "attrs": None,
        },
        {  # shares the first 6 words with p7 (and the brand), differs later: TITLE form
            "product_id": "p6", "title": "Nova Desk Lamp LED Adjustable Arm White",
            "description": "", "category": "home/decor/lighting", "brand": "Nova",
            "store": "S", "price": 20.0, "rating": 4.0, "rating_count": 1, "ship_days": 2,
            "stock": 1, "attrs": None,
        },
        {
            "product_id": "p7", "title": "Nova Desk Lamp LED Adjustable Arm Black",
            "description": "", "category": "home/decor/lighting", "brand": "Nova",
            "store": "S", "price": 20.0, "rating": 4.0, "rating_count": 1, "ship_days": 2,
            "stock": 1, "attrs": None,
        },
        {  # shares the first 3 words + brand with p9, differs in word 4: MEDIUM form
            "product_id": "p8", "title": "Nova Desk Lamp Pro", "description": "",
            "category": "home/decor/lighting", "brand": "Nova", "store": "S", "price": 30.0,
            "rating": 4.0, "rating_count": 1, "ship_days": 2, "stock": 1, "attrs": None,
        },
        {  # duplicate id: dropped (first kept)
            "product_id": "p0", "title": "dup", "description": "", "category": "home/x",
            "brand": "b", "store": "s", "price": 1.0, "rating": 4.0, "rating_count": 1,
            "ship_days": 1, "stock": 1, "attrs": None,
        },
        {
            "product_id": "p9", "title": "Nova Desk Lamp Mini", "description": "",
            "category": "home/decor/lighting", "brand": "Nova", "store": "S", "price": 30.0,
            "rating": 4.0, "rating_count": 1, "ship_days": 2, "stock": 1, "attrs": None,
        },
    ]  # fmt: skip


IDS = [f"p{i}" for i in range(10)]


@pytest.fixture(scope="module")
def loaded() -> tuple[Any, Any, LoadStats]:
    stats = LoadStats()
    catalog, tables = load_rows(_rows(), stats=stats)
    return jax.device_get(catalog), tables, stats


def _parquet(path: Path) -> Path:
    rows = _rows()
    cols = {k: [r[k] for r in rows] for k in rows[0]}
    cols["price"] = [None if v is None else str(v) for v in cols["price"]]  # one dtype
    pq.write_table(pa.table(cols), path)
    return path


def test_rows_dropped_and_stats(loaded: tuple) -> None:
    catalog, tables, stats = loaded
    assert tables.product_ids == IDS
    assert stats.rows == 13 and stats.denied == 2 and stats.duplicate_ids == 1
    assert stats.default_price == 3 and stats.default_rating == 1
    assert stats.keyed_ship == 2 and stats.keyed_stock == 2
    assert stats.new_vocab == {"color": ["chartreuse"]}
    assert not any(is_denied(p) for p in tables.cat_paths)
    assert is_denied("a/Tobacco/b") and not is_denied("home/weaponsmith")


def test_numeric_defaults_and_clamps(loaded: tuple) -> None:
    c, _, _ = loaded
    assert c.price_cents.tolist() == [4999, 999, 999, 999, 129950, 200, 2000, 2000, 3000, 3000]
    assert c.rating_x100.tolist() == [450, 300, 500, 100, 330, 330, 400, 400, 400, 400]
    assert c.rating_count.tolist() == [120, 0, 3, 0, 9, 9, 1, 1, 1, 1]
    assert c.ship_days[0] == 3 and c.ship_days[3] == 14  # given values kept, clipped to 14
    assert c.stock[0] == 7 and c.stock[2] == 2 and c.stock[4] == 0


def test_keyed_ship_and_stock(loaded: tuple) -> None:
    c, _, _ = loaded
    ship1, stock1 = keyed_ship_stock("p1")
    assert (c.ship_days[1], c.stock[1]) == (ship1, stock1)
    assert c.ship_days[2] == keyed_ship_stock("p2")[0]
    assert c.stock[3] == keyed_ship_stock("p3")[1]
    # Keyed by id alone: the same id in another catalog, at another index, draws the same.
    other, tables = load_rows([{"product_id": "zz", "title": "x"}, {"product_id": "p1"}])
    assert tables.product_ids == ["zz", "p1"]
    assert (int(other.ship_days[1]), int(other.stock[1])) == (ship1, stock1)
    draws = np.array([keyed_ship_stock(f"id{i}") for i in range(3000)])
    assert draws[:, 0].min() >= 1 and draws[:, 0].max() <= 14
    assert abs(draws[:, 0].mean() - 2.5) < 0.15  # E[Geometric(0.4)]
    stock = draws[:, 1]
    assert abs((stock == 0).mean() - 0.1) < 0.03
    assert stock[stock > 0].min() >= 1 and stock.max() <= 200
    assert abs(stock[stock > 0].mean() - 20) < 0.5
    assert keyed_ship_stock("p1") == (ship1, stock1)


def test_attributes(loaded: tuple) -> None:
    c, tables, _ = loaded
    disc, num = np.asarray(c.disc), np.asarray(c.num)
    color = tables.vocab[int(Attr.COLOR)]
    assert color[: len(VOCAB[Attr.COLOR])] == list(VOCAB[Attr.COLOR])
    assert color[disc[0, DISC_COL[Attr.COLOR]]] == "red"
    assert disc[2, DISC_COL[Attr.COLOR]] == len(VOCAB[Attr.COLOR]) and color[-1] == "chartreuse"
    assert color[disc[3, DISC_COL[Attr.COLOR]]] == "navy"
    assert tables.vocab[int(Attr.MATERIAL)][disc[0, DISC_COL[Attr.MATERIAL]]] == "stainless_steel"
    assert tables.vocab[int(Attr.CONNECTOR_TYPE)][disc[2, DISC_COL[Attr.CONNECTOR_TYPE]]] == "USB-C"
    assert tables.vocab[int(Attr.SIZE)][disc[3, DISC_COL[Attr.SIZE]]] == "XL"
    assert tables.vocab[int(Attr.SKIN_TYPE)][disc[3, DISC_COL[Attr.SKIN_TYPE]]] == "oily"
    assert (disc[1] == -1).all() and np.isnan(num[1]).all()
    assert num[0, U[Attr.WATTAGE]] == 600.0 and num[0, U[Attr.WEIGHT_LBS]] == 5.5
    assert num[2, U[Attr.SCREEN_SIZE_INCHES]] == pytest.approx(6.1)
    assert math.isnan(num[0, U[Attr.SCREEN_SIZE_INCHES]])
    card = product_card(c, tables, 0)
    assert card["attrs"] == {
        "color": "red", "material": "stainless_steel", "wattage": 600, "weight_lbs": 5.5,
    }  # fmt: skip
    assert card["brand"] == "acme" and card["store"] == "Kitchen Store"
    assert card["price"] == 49.99 and card["has_variants"] is False


def test_codes_and_taxonomy(loaded: tuple) -> None:
    c, tables, _ = loaded
    kept = [r for r in _rows() if r["product_id"] in IDS and r["title"] != "dup"]
    paths = sorted({r["category"] for r in kept})
    assert tables.cat_paths == paths
    assert tables.cat_leaves == [p.split("/")[-1] for p in paths]
    assert tables.cat_display == [p.split("/")[-1].replace("_", " ") for p in paths]
    assert [tables.cat_paths[k] for k in c.category] == [r["category"] for r in kept]
    assert tables.brands == sorted({"acme", "zeta", "knitco", "brand a", "brand b", "nova"})
    assert c.brand[0] == c.brand[1] == tables.brands.index("acme")  # brand lower-cased
    assert c.store[1] == -1 and tables.stores[c.store[0]] == "Kitchen Store"
    pol = {p: POLICY_CATEGORIES[k] for p, k in zip(paths, c.cat_policy, strict=True)}
    assert pol["electronics/mobile/chargers"] == "electronics"
    assert pol["garden_tools/hoses"] == "home"  # fallback
    assert pol["clothing/womens/tops"] == "clothing"
    grp = {p: (GROUPS[g] if g >= 0 else None) for p, g in zip(paths, c.cat_group, strict=True)}
    assert grp["home/decor/lighting"] == "home" and grp["garden_tools/hoses"] is None
    assert not c.cat_denied.any()
    order, off = np.asarray(c.cat_order), np.asarray(c.cat_offsets)
    for k in range(len(paths)):
        block = order[off[k] : off[k + 1]]
        assert (c.category[block] == k).all() and (np.diff(block) > 0).all()
    assert off[-1] == len(IDS)
    for name in ("adj", "noun", "model"):
        assert (np.asarray(getattr(c, name)) == -1).all()
    assert (np.asarray(c.var_count) == 0).all() and (np.asarray(c.var_color) == -1).all()
    np.testing.assert_allclose(c.cat_emb, embed_texts(tables.cat_display), atol=1e-6)


def test_policy_map_override() -> None:
    rows = [
        {"product_id": "a", "title": "t a", "cat": "garden/hoses"},
        {"product_id": "b", "title": "t b", "cat": "garden/tools/rakes"},
        {"product_id": "c", "title": "t c", "cat": "food/snacks"},
    ]
    c, t = load_rows(rows, policy_map={"garden": "sports", "garden/tools": "home"})
    pol = [POLICY_CATEGORIES[k] for k in np.asarray(c.cat_policy)]
    assert dict(zip(t.cat_paths, pol, strict=True)) == {
        "food/snacks": "home", "garden/hoses": "sports", "garden/tools/rakes": "home",
    }  # fmt: skip
    c2, _ = load_rows(rows, policy_map=lambda p: "groceries")
    assert {POLICY_CATEGORIES[k] for k in np.asarray(c2.cat_policy)} == {"groceries"}
    with pytest.raises(ValueError):
        load_rows(rows, policy_map={"food": "snacks"})


def test_identifying_descriptions(loaded: tuple) -> None:
    c, tables, _ = loaded
    form = [DescForm(int(f)) for f in c.desc_form]
    assert form[4] == form[5] == DescForm.NONE  # same title, case-insensitive
    assert form[6] == form[7] == DescForm.TITLE
    assert form[8] == form[9] == DescForm.MEDIUM
    assert form[0] == form[1] == DescForm.MEDIUM  # same first 3 words and brand
    assert form[2] == form[3] == DescForm.SHORT
    keys = np.asarray(c.desc_key)
    assert keys[4, 2] == keys[5, 2] and keys[6, 1] == keys[7, 1] and keys[8, 0] == keys[9, 0]
    assert keys[6, 0] == keys[8, 0] and keys[0, 0] == keys[1, 0]
    for i, f in enumerate(form):  # the chosen key is unique
        if f != DescForm.NONE:
            assert (keys[:, f - 1] == keys[i, f - 1]).sum() == 1
    assert describe(c, tables, 2, DescForm.SHORT) == "Zeta Phone Charger by zeta"
    assert describe(c, tables, 0, DescForm.MEDIUM) == "Acme Turbo Blender 3000 Deluxe Kitchen"
    assert describe(c, tables, 8, DescForm.MEDIUM) == "Nova Desk Lamp Pro"
    assert describe(c, tables, 6, DescForm.TITLE) == "Nova Desk Lamp LED Adjustable Arm White"


def test_embeddings_and_text(loaded: tuple) -> None:
    c, tables, _ = loaded
    texts = [product_title(c, tables, i) + " " + product_desc(c, tables, i) for i in range(10)]
    assert texts[0] == "Acme Turbo Blender 3000 Deluxe Kitchen Edition Blends things."
    assert product_desc(c, tables, 1) == ""
    np.testing.assert_allclose(c.emb, embed_texts(texts), atol=1e-6)


def test_parquet_and_iterables_agree(tmp_path: Path, loaded: tuple) -> None:
    c, tables, _ = loaded
    path = _parquet(tmp_path / "cat.parquet")
    for cp, tp in (load_parquet(path, batch_size=4), load_catalog(str(path))):
        assert tp.product_ids == tables.product_ids and tp.vocab == tables.vocab
        for a, b in zip(jax.tree.leaves(c), jax.tree.leaves(cp), strict=True):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    cg, tg = load_catalog(r for r in _rows())  # any iterable of dict rows (HF Dataset-like)
    assert tg.titles == tables.titles
    np.testing.assert_array_equal(np.asarray(cg.price_cents), np.asarray(c.price_cents))


def test_columns_variants_and_errors() -> None:
    rows = [
        {"sku": "a", "name": "Tee Shirt", "path": ["clothing", "mens", "shirts"], "cost": 10,
         "variants": [{"color": "Red", "size": "m", "price": 11.0, "stock": 4},
                      {"color": "blue", "price_delta": -1.5}],
         "attributes": {"colour": "red"}, "stock": 6, "ship_days": 2},
    ]  # fmt: skip
    cols = {"product_id": "sku", "title": "name", "cat": "path", "price": "cost"}
    c, t = load_rows(rows, columns=cols)
    assert t.product_ids == ["a"] and t.cat_paths == ["clothing/mens/shirts"]
    assert int(c.price_cents[0]) == 1000 and int(c.var_count[0]) == 2
    assert [t.vocab[int(Attr.COLOR)][k] for k in np.asarray(c.var_color[0, :2])] == ["red", "blue"]
    assert t.vocab[int(Attr.SIZE)][int(c.var_size[0, 0])] == "M" and int(c.var_size[0, 1]) == -1
    assert np.asarray(c.var_price_delta[0]).tolist() == [100, -150, 0, 0]
    assert np.asarray(c.var_stock[0]).tolist() == [4, 6, 0, 0]
    with pytest.raises(ValueError):
        load_rows([{"title": "no id"}])
    with pytest.raises(ValueError):
        load_rows([{"product_id": "x", "cat": "weapons"}])
    with pytest.raises(KeyError):
        load_rows(rows, columns={"nonsense": "x"})
