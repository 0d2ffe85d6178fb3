"""Tool and answer schemas (SPEC §4.6, §4.7): names, strictness, coverage, and the
validator ``check`` against hand-written cases (and against jsonschema, if installed)."""

from __future__ import annotations

import json
import random

import pytest

from ecomjax import constants as C
from ecomjax.llm_bridge import fuzz as F
from ecomjax.llm_bridge import schemas as SC

try:
    import jsonschema
except ImportError:  # optional: the cross-checks below skip without it
    jsonschema = None

needs_jsonschema = pytest.mark.skipif(jsonschema is None, reason="jsonschema not installed")

ALL = SC.all_tools(with_submit=True)


def test_names_and_tool_set():
    names = [t["function"]["name"] for t in ALL]
    assert all(SC.NAME_RE.match(n) for n in names)
    assert len(set(names)) == len(names) == 20
    assert set(names[:-1]) == {C.TOOL_NAMES[t] for t in C.Tool if t != C.Tool.NONE}
    assert names[-1] == SC.SUBMIT_ANSWER
    assert all(t["type"] == "function" and t["function"]["description"] for t in ALL)


def test_every_object_is_closed():
    roots = [*ALL, *SC.answer_schemas().values(), SC.answer_schema()]
    objects = [o for r in roots for o in SC.iter_object_schemas(r)]
    assert len(objects) > 40
    for o in objects:
        assert o.get("additionalProperties") is False, o
        assert set(o.get("required", ())) <= set(o.get("properties", {})), o


def test_table_matches_spec():
    p = {C.TOOL_NAMES[t]: SC.PARAMS[t] for t in SC.PARAMS}
    assert p["catalog_search"]["required"] == ["query"]
    assert p["return_exchange"]["required"] == [
        "order_id",
        "line_id",
        "new_product_id",
        "reason_code",
        "method",
    ]
    assert p["return_initiate"]["required"] == ["order_id", "line_id", "reason_code", "method"]
    assert p["ask_user"]["required"] == ["question", "slots"]
    for tool in ("order_list", "cart_view", "datetime_now", "catalog_list_categories"):
        assert p[tool]["required"] == []
    filters = p["catalog_search"]["properties"]["filters"]["properties"]
    assert len(filters) == 22 and filters["price_max"] == {
        "type": "number",
        "minimum": 0,
        "description": "Inclusive price max.",
    }
    search = p["catalog_search"]["properties"]
    assert (search["top_k"]["minimum"], search["top_k"]["maximum"], search["top_k"]["default"]) == (
        1,
        500,
        20,
    )
    assert search["sort_by"]["enum"] == ["relevance", "price_asc", "rating_desc", "ship_days_asc"]
    slots = p["ask_user"]["properties"]["slots"]
    assert slots["items"]["enum"] == list(C.SLOT_NAMES) and len(slots["items"]["enum"]) == 48
    assert slots["uniqueItems"] and (slots["minItems"], slots["maxItems"]) == (1, 48)
    assert p["cart_add"]["properties"]["variant_id"]["type"] == ["string", "null"]
    assert p["policy_search"]["properties"]["top_k"]["default"] == 3
    assert p["order_list"]["properties"]["days"]["default"] == 90
    assert set(SC.answer_schemas()) == set(C.ENV_NAMES)
    assert SC.answer_schemas()["STATUS"]["properties"]["order_status"]["enum"] == [
        "CONFIRMED",
        "SHIPPED",
        "IN_TRANSIT",
        "DELIVERED",
        "CANCELLED",
    ]


def test_defaults_satisfy_their_schema():
    for t in SC.PARAMS:
        for k, prop in SC.PARAMS[t]["properties"].items():
            if "default" in prop:
                assert SC.check(prop["default"], prop) is None, (t, k)


GOOD = [
    ("cart_add", {"product_id": "syn_000001"}),
    ("cart_add", {"product_id": "syn_000001", "variant_id": None, "quantity": 99}),
    ("cart_add", {"product_id": "syn_000001", "quantity": 2.0}),  # integral float: integer
    ("catalog_search", {"query": "x", "filters": {"price_min": 0, "cat": "", "brand": "Z"}}),
    ("ask_user", {"question": "?", "slots": ["color", "budget"], "subgoal": 4}),
    ("cart_set_quantity", {"line_id": "line_001", "quantity": 0}),
    ("datetime_now", {}),
]
BAD = [
    ("cart_add", {}, "missing"),
    ("cart_add", {"product_id": "a", "qty": 1}, "unknown_key"),
    ("cart_add", {"product_id": "a", "quantity": 0}, "range"),
    ("cart_add", {"product_id": "a", "quantity": 1.5}, "type"),
    ("cart_add", {"product_id": "a", "quantity": True}, "type"),
    ("cart_add", {"product_id": ""}, "length"),
    ("cart_add", {"product_id": "a", "variant_id": 3}, "type"),
    ("catalog_search", {"query": "x", "filters": {"size_max": 3}}, "unknown_key"),
    ("catalog_search", {"query": "x", "filters": {"price_max": -0.01}}, "range"),
    ("catalog_search", {"query": "x", "filters": {"price_max": False}}, "type"),
    ("catalog_search", {"query": "x", "sort_by": "Relevance"}, "enum"),
    ("catalog_search", {"query": "x" * 201}, "length"),
    ("ask_user", {"question": "?", "slots": ["color", "color"]}, "unique"),
    ("ask_user", {"question": "?", "slots": []}, "items"),
    ("ask_user", {"question": "?", "slots": ["colour"]}, "enum"),
    ("catalog_rerank", {"query": "x", "candidate_product_ids": [1]}, "type"),
    ("datetime_now", {"now": True}, "unknown_key"),
    ("datetime_now", [], "type"),
]


def _params(name: str) -> dict:
    return SC.PARAMS[SC.TOOL_BY_NAME[name]]


def test_check_good_and_bad():
    for name, args in GOOD:
        assert SC.check(args, _params(name)) is None, (name, args)
    for name, args, kind in BAD:
        err = SC.check(args, _params(name))
        assert err is not None and err.startswith(kind), (name, args, err)


def test_check_answers():
    for ans in F.VALID_ANSWERS:
        assert SC.check(ans, SC.answer_schemas()[ans["env"]]) is None
        assert SC.check(ans, SC.answer_schema()) is None
        assert (
            SC.check({"answer": ans}, SC.submit_answer_schema()["function"]["parameters"]) is None
        )
    assert SC.check({"env": "PD"}, SC.answer_schemas()["PD"]).startswith("missing")
    assert SC.check({"env": "CART", "x": 1}, SC.answer_schema()) is not None
    bad_entry = {"env": "JOURNEY", "subgoal_answers": [{"env": "CART", "done": True}]}
    assert SC.check(bad_entry, SC.answer_schemas()["JOURNEY"]) is not None
    assert SC.check({"env": "JOURNEY", "subgoal_answers": [None]}, SC.answer_schema()) is None


def test_check_depth_is_bounded():
    deep: list = []
    for _ in range(10_000):
        deep = [deep]
    schema = {"type": "array", "items": {"type": "array", "items": {}}}
    assert SC.check(deep, schema) is None  # the schema stops looking after two levels
    nested = {"env": "JOURNEY", "subgoal_answers": [deep]}
    assert SC.check(nested, SC.answer_schemas()["JOURNEY"]) is not None


@needs_jsonschema
def test_schemas_are_valid_json_schema():
    for t in ALL:
        jsonschema.Draft202012Validator.check_schema(t["function"]["parameters"])
    for s in SC.answer_schemas().values():
        jsonschema.Draft202012Validator.check_schema(s)


@needs_jsonschema
def test_jsonschema_agrees_on_hand_cases():
    for name, args in GOOD:
        jsonschema.validate(args, _params(name), cls=jsonschema.Draft202012Validator)
    for name, args, _ in BAD:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(args, _params(name), cls=jsonschema.Draft202012Validator)
    for ans in F.VALID_ANSWERS:
        jsonschema.validate(ans, SC.answer_schema(), cls=jsonschema.Draft202012Validator)


@needs_jsonschema
def test_jsonschema_agrees_on_mutations():
    """Differential: ``check`` and jsonschema accept exactly the same mutated arguments."""
    rng = random.Random(0)
    for _ in range(3000):
        name, args = rng.choice(F.VALID_CALLS)
        args, _, _ = F.mutate_args(rng, name, args)
        args = json.loads(json.dumps(args))
        schema = _params(name)
        ours = SC.check(args, schema) is None
        theirs = jsonschema.Draft202012Validator(schema).is_valid(args)
        assert ours == theirs, (name, args)
    for _ in range(1000):
        ans, _ = F.mutate_answer(rng, rng.choice(F.VALID_ANSWERS))
        ours = SC.check(ans, SC.answer_schema()) is None
        theirs = jsonschema.Draft202012Validator(SC.answer_schema()).is_valid(ans)
        assert ours == theirs, ans
