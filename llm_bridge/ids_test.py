"""IdCodec: every id kind round-trips, unknown strings get the device's unknown codes, and
messages present products by id, variant id or exact title."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ecomjax import constants as C
from ecomjax.catalog.vocabulary import BRANDS, STORES, TAXONOMY
from ecomjax.llm_bridge.ids import UNKNOWN, IdCodec
from ecomjax.llm_bridge.parse import format_turn, parse_turn
from ecomjax.types import empty_problem


def test_products(codec):
    for i in (0, 7, 162, 999):
        assert codec.product(codec.product_id(i)) == i
    a, b = codec.product("syn_001000"), codec.product("syn_42")
    assert a <= UNKNOWN and b <= UNKNOWN and a != b
    assert codec.product("syn_001000") == a  # stable within the episode
    for s in ("SYN_000001", " syn_000001", "syn_0000001", "syn_٠٠٠٠٠١", ""):
        assert codec.product(s) <= UNKNOWN, s


def test_orders_lines_returns(codec):
    assert [codec.order(codec.order_id(o)) for o in range(3)] == [0, 1, 2]
    assert codec.order("ord_004") == UNKNOWN and codec.order("ord_0001") == UNKNOWN
    assert codec.order("ord_000") == UNKNOWN and codec.order("order_001") == UNKNOWN
    for o, n in enumerate((2, 3, 5)):
        for j in range(n):
            assert codec.order_line(codec.order_line_id(o, j), o) == j
        assert codec.order_line(codec.order_line_id(o, n), o) == UNKNOWN
    assert codec.order_line("ord_001_line_01", 1) == UNKNOWN  # another order's line
    assert codec.order_line("ord_001_line_1", 0) == UNKNOWN
    assert codec.order_line("ord_001_line_01", UNKNOWN) == UNKNOWN
    assert codec.cart_line(codec.cart_line_id(12)) == 12
    assert codec.cart_line("line_1") == UNKNOWN and codec.cart_line("line_000") == UNKNOWN
    assert codec.return_number(codec.return_id(3)) == 3
    assert codec.return_number(codec.exchange_id(3)) == UNKNOWN
    free = IdCodec(codec.cat)  # no history known: the device decides
    assert free.order("ord_012") == 11 and free.order_line("ord_012_line_05", 11) == 4


def test_catalog_variants(codec):
    assert codec.variant(None, 5) == -1
    assert codec.variant(codec.variant_id(5, 0), 5) == 0
    assert codec.variant("syn_000005_v4", 5) == 3
    assert codec.variant("syn_000005_v5", 5) == UNKNOWN
    assert codec.variant("syn_000005_v0", 5) == UNKNOWN
    assert codec.variant("syn_000006_v1", 5) == UNKNOWN  # not a variant of this product
    assert codec.variant("syn_000005_v1", UNKNOWN) == UNKNOWN


def test_from_problem_synthesized_variants(cat_ids):
    p = empty_problem().replace(
        n_orders=jnp.int32(2),
        order_n_lines=jnp.zeros(C.MAX_ORDERS, jnp.int32).at[:2].set(jnp.array([4, 1])),
        item_pid=jnp.full(C.MAX_ITEMS, -1, jnp.int32).at[:3].set(jnp.array([162, 7, 40])),
        item_var_req=jnp.zeros(C.MAX_ITEMS, bool).at[jnp.array([0, 2])].set(True),
        item_var_attr=jnp.full(C.MAX_ITEMS, -1, jnp.int32)
        .at[0]
        .set(C.Attr.CONNECTOR_TYPE)
        .at[2]
        .set(C.Attr.WEIGHT_LBS),
        item_var_vals=jnp.zeros((C.MAX_ITEMS, 3), jnp.float32)
        .at[0]
        .set(jnp.array([1.0, 6.0, 0.0]))
        .at[2]
        .set(jnp.array([0.25, 10.0, 2.0])),
        pol_topic=jnp.int32(0),
    )
    codec = IdCodec.from_problem(cat_ids, p)
    assert codec.n_orders == 2 and codec.order_n_lines == (4, 1)
    assert codec.synth_variants[162] == (
        "syn_000162_v_connector_type_USB-C",
        "syn_000162_v_connector_type_3.5mm",
        "syn_000162_v_connector_type_USB-A",
    )
    assert codec.synth_variants[40] == (
        "syn_000040_v_weight_lbs_0.25",
        "syn_000040_v_weight_lbs_10",
        "syn_000040_v_weight_lbs_2",
    )
    assert 7 not in codec.synth_variants
    assert codec.variant("syn_000162_v_connector_type_3.5mm", 162) == 1
    assert codec.variant("syn_000162_v1", 162) == UNKNOWN  # catalog variants are hidden
    assert codec.variant_id(40, 2) == "syn_000040_v_weight_lbs_2"
    assert codec.policy_categorical is False  # return_window_days is numeric
    usb_a = "syn_000162_v_connector_type_USB-A"
    add = ("cart_add", {"product_id": "syn_000162", "variant_id": usb_a})
    action, info = parse_turn(format_turn("hermes", "", [add]), codec, "hermes")
    assert info["errors"] == [] and action.variant[0] == 2


def test_filter_codes(cat_ids):
    cat = C.Attr.CAT
    chargers = [t[1] for t in TAXONOMY].index("chargers")
    for name in ("chargers", "Chargers", "electronics/mobile/chargers", " CHARGERS "):
        assert cat_ids.filter_code(cat, name) == chargers
    shirts = [t[1] for t in TAXONOMY].index("shirts")
    assert cat_ids.filter_code(cat, "men's shirts") == shirts
    assert cat_ids.filter_code(cat, "smart_home lights") == UNKNOWN
    assert cat_ids.filter_code(cat, "SMART LIGHTS") == [t[1] for t in TAXONOMY].index("lights")
    assert cat_ids.filter_code(C.Attr.BRAND, "pixelvault") == BRANDS.index("PixelVault")
    assert cat_ids.filter_code(C.Attr.STORE, "homegoods plus") == STORES.index("HomeGoods Plus")
    assert cat_ids.filter_code(C.Attr.CONNECTOR_TYPE, "usb-c") == 1
    assert cat_ids.filter_code(C.Attr.MATERIAL, "stainless steel") == 11
    assert cat_ids.filter_code(C.Attr.COLOR, "chartreuse") == UNKNOWN


def test_presented(codec, cat_ids):
    t3, t9 = cat_ids.titles[3], cat_ids.titles[9]
    text = f"Try syn_000009 ({t9}), or the {t3}! Also syn_001234 and syn_000003_v2."
    assert codec.presented(text) == [9, 3]
    assert codec.presented(f"{t3}0 is not a title") == []  # a longer model number
    assert codec.presented(f"x{t3}") == [] and codec.presented(f"(«{t3}»)") == [3]
    assert codec.presented(f"[{t9}]: {t3}") == [9, 3]
    assert codec.presented("syn_000002, syn_000001, syn_000002.") == [2, 1]
    many = " ".join(codec.product_id(i) for i in range(20))
    assert codec.presented(many) == list(range(C.MAX_PRESENTED))
    action, _ = parse_turn({"content": f"See {t3}."}, codec, "openai")
    assert list(np.asarray(action.present)) == [3] + [-1] * (C.MAX_PRESENTED - 1)
