"""parse_turn: round trips per format and tool, every SPEC §4.2 class, bounded time on
hostile payloads, and fuzzing (hypothesis by default, a 100k mutation sweep when slow)."""

from __future__ import annotations

import json
import random
import time

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.actions import Call, make_action
from ecomjax.catalog.embedder import embed_texts
from ecomjax.llm_bridge import fuzz as F
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge.parse import (
    FORMATS,
    INVALID_ENV,
    MAX_PARSED_CALLS,
    UNKNOWN_TOOL,
    format_turn,
    parse_turn,
    policy_value,
)
from ecomjax.types import CALL_FIELDS

T = C.Tool
HF = C.HardFail
TEXT_FORMATS = ("hermes", "qwen_xml")


def emb(text: str) -> np.ndarray:
    return embed_texts([text])[0]


# (name, arguments, the Call an array agent would build): every tool, with and without
# optional arguments. Ids refer to fuzz_codec's history (orders of 2, 3 and 5 lines).
CASES: list[tuple[str, dict, Call]] = [
    (
        "catalog_search",
        {
            "query": "usb-c charger",
            "filters": {"cat": "Chargers", "brand": "techpro", "color": "Black", "price_max": 30},
            "top_k": 50,
            "sort_by": "price_asc",
            "in_stock_only": True,
        },
        Call(
            T.CATALOG_SEARCH,
            qty=50,
            enum_a=1,
            in_stock_only=True,
            query=emb("usb-c charger"),
            filter_disc={0: 8, 1: 0, 3: 0},
            filter_num={1: 30.0},
        ),
    ),
    (
        "catalog_search",
        {"query": "lamp", "filters": {"cat": "home/decor/lighting", "rating_min": 4.5}},
        Call(T.CATALOG_SEARCH, qty=20, query=emb("lamp"), filter_disc={0: 22}, filter_num={2: 4.5}),
    ),
    (
        "catalog_search",
        {"query": "like this", "similar_to": "syn_000010", "sort_by": "rating_desc"},
        Call(T.CATALOG_SEARCH, qty=20, enum_a=2, product=10, query=emb("like this")),
    ),
    (
        "catalog_rerank",
        {"query": "desk lamp", "candidate_product_ids": ["syn_000001", "syn_000002"], "top_k": 5},
        Call(T.CATALOG_RERANK, qty=5, query=emb("desk lamp")),
    ),
    (
        "catalog_rerank",
        {"query": "desk", "candidate_product_ids": ["syn_000001"]},
        Call(T.CATALOG_RERANK, qty=10, query=emb("desk")),
    ),
    ("catalog_get_product", {"product_id": "syn_000042"}, Call(T.CATALOG_GET_PRODUCT, product=42)),
    (
        "catalog_get_variants",
        {"product_id": "syn_000999"},
        Call(T.CATALOG_GET_VARIANTS, product=999),
    ),
    ("catalog_list_categories", {}, Call(T.CATALOG_LIST_CATEGORIES)),
    ("cart_view", {}, Call(T.CART_VIEW)),
    (
        "cart_add",
        {"product_id": "syn_000162", "variant_id": "syn_000162_v2", "quantity": 3},
        Call(T.CART_ADD, product=162, variant=1, qty=3),
    ),
    (
        "cart_add",
        {"product_id": "syn_000007", "variant_id": None},
        Call(T.CART_ADD, product=7, qty=1),
    ),
    ("cart_remove", {"line_id": "line_002"}, Call(T.CART_REMOVE, line=2)),
    (
        "cart_set_quantity",
        {"line_id": "line_011", "quantity": 0},
        Call(T.CART_SET_QUANTITY, line=11, qty=0),
    ),
    ("order_list", {"days": 30}, Call(T.ORDER_LIST, qty=30)),
    ("order_list", {}, Call(T.ORDER_LIST, qty=90)),
    ("order_get_status", {"order_id": "ord_002"}, Call(T.ORDER_GET_STATUS, order=1)),
    (
        "return_check_eligibility",
        {"order_id": "ord_001", "line_id": "ord_001_line_02"},
        Call(T.RETURN_CHECK_ELIGIBILITY, order=0, line=1),
    ),
    (
        "return_initiate",
        {
            "order_id": "ord_003",
            "line_id": "ord_003_line_05",
            "reason_code": "too_small",
            "method": "pickup",
        },
        Call(T.RETURN_INITIATE, order=2, line=4, enum_a=5, enum_b=2),
    ),
    (
        "return_exchange",
        {
            "order_id": "ord_002",
            "line_id": "ord_002_line_03",
            "new_product_id": "syn_000300",
            "new_variant_id": "syn_000300_v1",
            "reason_code": "better_price_found",
            "method": "in_store",
        },
        Call(T.RETURN_EXCHANGE, order=1, line=2, product=300, variant=0, enum_a=7, enum_b=1),
    ),
    ("return_cancel", {"return_id": "ret_002"}, Call(T.RETURN_CANCEL, order=2)),
    (
        "policy_search",
        {"query": "return fee for mail", "top_k": 2},
        Call(T.POLICY_SEARCH, qty=2, query=np.zeros(C.EMBED_DIM)),
    ),
    (
        "policy_search",
        {"query": "warranty"},
        Call(T.POLICY_SEARCH, qty=3, query=np.zeros(C.EMBED_DIM)),
    ),
    ("datetime_now", {}, Call(T.DATETIME_NOW)),
    ("user_get_visit_history", {}, Call(T.USER_GET_VISIT_HISTORY)),
    (
        "ask_user",
        {"question": "Which color?", "slots": ["color", "size"]},
        Call(T.ASK_USER, slots=(10, 11)),
    ),
    (
        "ask_user",
        {"question": "How many?", "slots": ["quantity"], "product_id": "syn_000162", "subgoal": 1},
        Call(T.ASK_USER, slots=(23,), product=162, enum_b=1),
    ),
]
# n_calls is left out: the parser counts calls, the array builders leave it 0.
ARRAY_FIELDS = ("malformed", "has_message", "present", *CALL_FIELDS)


def expected(cases: list[tuple[str, dict, Call]]):
    """make_action's arrays for the calls, plus the policy query tokens it leaves out."""
    want = make_action([c for _, _, c in cases], message=False)
    tokens = np.array(want.query_tokens)
    for i, (name, args, _) in enumerate(cases):
        if name == "policy_search":
            tokens[i] = P.query_array(args["query"])
    return jax.tree_util.tree_map(np.asarray, want.replace(query_tokens=tokens))


def assert_same(got, want) -> None:
    for f in ARRAY_FIELDS:
        np.testing.assert_allclose(
            np.asarray(getattr(got, f), np.float64),
            np.asarray(getattr(want, f), np.float64),
            rtol=1e-6,
            atol=1e-6,
            err_msg=f,
        )


def test_cases_cover_every_tool():
    assert {name for name, _, _ in CASES} == set(SC.TOOL_BY_NAME)
    assert {name for name, _ in F.VALID_CALLS} == set(SC.TOOL_BY_NAME)


@pytest.mark.parametrize("fmt", FORMATS)
def test_round_trip_every_tool(fmt, codec):
    for case in CASES:
        name, args, _ = case
        action, info = parse_turn(format_turn(fmt, "", [(name, args)]), codec, fmt, turn=2)
        assert info["errors"] == [], (name, info["errors"])
        assert_same(action, expected([case]))
        assert F.device_kind(action) == HF.NONE, name
        if name == "catalog_rerank":
            assert info["calls"][0]["candidates"] == [
                int(s[4:]) for s in args["candidate_product_ids"]
            ]


@pytest.mark.parametrize("fmt", FORMATS)
def test_full_turn_of_max_calls(fmt, codec, cat_ids):
    cases = CASES[: C.MAX_TOOL_CALLS]
    title = cat_ids.titles[5]
    message = f"I recommend {title} or syn_000007."
    payload = format_turn(fmt, message, [(n, a) for n, a, _ in cases])
    action, info = parse_turn(payload, codec, fmt, turn=4)
    assert info["errors"] == [] and not info["budget_overflow"]
    want = expected(cases)
    want = want.replace(has_message=np.asarray(True), present=np.asarray(action.present))
    assert_same(action, want)
    assert list(action.present[:2]) == [5, 7]
    assert info["message"] == message
    if fmt != "openai":  # openai messages carry ids; the others get call_{turn}_{i}
        assert [c["id"] for c in info["calls"]][:2] == ["call_4_0", "call_4_1"]
    assert F.device_kind(action) == HF.NONE
    assert F.device_kind(action, budget=C.MAX_TOOL_CALLS - 1) == HF.TOOL_BUDGET_EXCEEDED


def test_fuzz_corpus_is_valid(codec):
    for fmt in FORMATS:
        for name, args in F.VALID_CALLS:
            action, info = parse_turn(format_turn(fmt, "", [(name, args)]), codec, fmt)
            assert info["errors"] == [] and F.device_kind(action) == HF.NONE, (fmt, name, info)
        for ans in F.VALID_ANSWERS:
            action, info = parse_turn(format_turn(fmt, "", answer=ans), codec, fmt)
            env = C.ENV_NAMES.index(ans["env"])
            assert info["errors"] == [] and F.device_kind(action, env) == HF.NONE, (fmt, ans)


def test_openai_arguments_as_object_and_content_parts(codec):
    msg = {
        "role": "assistant",
        "content": [{"type": "text", "text": "Looking "}, {"type": "text", "text": "now."}],
        "tool_calls": [
            {"id": "a", "type": "function", "function": {"name": "cart_view", "arguments": {}}},
            {"id": "b", "type": "function", "function": {"name": "datetime_now"}},
        ],
        "refusal": None,
    }
    action, info = parse_turn(msg, codec, "openai")
    assert info["errors"] == [] and info["message"] == "Looking now."
    assert list(action.tool[:3]) == [T.CART_VIEW, T.DATETIME_NOW, T.NONE]
    assert [c["id"] for c in info["calls"]] == ["a", "b"]


def test_hermes_and_qwen_text_details(codec):
    text = (
        "<think>I should search. <tool_call>not a call</tool_call></think>Let me look.\n"
        '<tool_call>\n{"name": "cart_add", "arguments": "{\\"product_id\\": \\"syn_000003\\"}"}'
        "\n</tool_call>"
    )
    action, info = parse_turn(text, codec, "hermes")
    assert info["errors"] == [] and info["message"] == "Let me look."
    assert action.tool[0] == T.CART_ADD and action.product[0] == 3
    xml = (
        "Sure.\n<tool_call>\n<function=catalog_search>\n<parameter=query>\n  red mug \n"
        "</parameter>\n<parameter=top_k>\n7\n</parameter>\n<parameter=in_stock_only>\nTrue\n"
        '</parameter>\n<parameter=filters>\n{"color": "red"}\n</parameter>\n</function>\n'
        "</tool_call>"
    )
    action, info = parse_turn(xml, codec, "qwen_xml")
    assert info["errors"] == [] and info["calls"][0]["arguments"]["query"] == "red mug"
    assert action.qty[0] == 7 and bool(action.flag[0]) and action.filter_disc[0, 3] == 4
    # A message dict is accepted for the text formats too.
    action, info = parse_turn({"role": "assistant", "content": xml}, codec, "qwen_xml")
    assert info["errors"] == [] and action.tool[0] == T.CATALOG_SEARCH


def test_answers(codec):
    ans = {"env": "RETURN", "selected_order_id": "ord_002", "selected_line_id": "ord_002_line_03"}
    action, info = parse_turn(format_turn("hermes", "", answer=ans), codec, "hermes")
    a = action.answer
    assert bool(a.present) and bool(a.done) and a.main.env == C.Env.RETURN
    assert (int(a.main.order), int(a.main.line)) == (1, 2)
    pd = {"env": "PD", "recommended_product_ids": ["syn_000004", "nope", "syn_000004", "nah"]}
    action, _ = parse_turn(format_turn("openai", "", answer={**pd, "done": False}), codec, "openai")
    rec = list(action.answer.main.rec[:5])
    assert rec[0] == rec[2] == 4 and rec[1] <= -2 and rec[3] <= -2 and rec[1] != rec[3]
    assert rec[4] == -1 and not bool(action.answer.done)
    st_ans = {"env": "STATUS", "selected_order_id": "ord_003", "order_status": "CANCELLED"}
    action, _ = parse_turn(format_turn("json", "", answer=st_ans, answer_as="key"), codec, "json")
    assert (int(action.answer.main.order), int(action.answer.main.status)) == (2, 4)
    journey = F.VALID_ANSWERS[-1]
    action, info = parse_turn(format_turn("qwen_xml", "", answer=journey), codec, "qwen_xml")
    sub = action.answer.sub
    assert action.answer.main.env == C.Env.JOURNEY and info["errors"] == []
    assert list(sub.env) == [C.Env.CART, -1, C.Env.STATUS, -1, -1]
    assert (int(sub.order[2]), int(sub.status[2])) == (2, 3)
    assert F.device_kind(action, C.Env.JOURNEY) == HF.NONE


def test_policy_values():
    assert policy_value(14, False) == (14.0, True)
    assert policy_value("$1,234.50 per year", False) == (1234.5, True)
    assert policy_value("about -3%", None) == (-3.0, True)
    assert policy_value("no idea", False) == (0.0, False)
    assert policy_value(float("inf"), False)[1] is False
    assert policy_value(10**400, False)[1] is False
    code = P.answer_code("Not included")
    assert policy_value("not  included!", True) == (float(code), True)
    assert policy_value("not included", None) == (float(code), True)
    assert policy_value(3, True) == (0.0, False)  # a number is never a categorical answer
    assert policy_value("5-7 business days", False) == (5.0, True)


# --- SPEC §4.2, class by class -------------------------------------------------------------

TEN_MB = "x" * 10_000_000


def _openai_call(name, arguments) -> dict:
    return {
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": name, "arguments": arguments}}
        ]
    }


MALFORMED = [
    ("json", "{not json", "unparseable"),
    ("json", "[1, 2]", "not a JSON object"),
    ("json", '{"message": "hi", "extra": 1}', "unknown top-level key"),
    ("json", {"message": "hi", "message2": "x"}, "unknown top-level key"),
    ("json", '{"message": "a", "message": "b"}', "duplicate key"),
    ("json", {"message": 5}, "message is not a string"),
    ("json", {"tool_calls": {"name": "cart_view"}}, "not an array"),
    ("openai", "5", "not a JSON object"),
    ("openai", {"content": "hi", "foo": 1}, "unknown top-level key"),
    ("openai", {"role": "user", "content": "hi"}, "role"),
    ("openai", {"content": 7}, "content"),
    ("hermes", '<tool_call>{"name": "cart_view", "arguments": {}</tool_call>', "unparseable"),
    ("hermes", "<tool_call>[1]</tool_call>", "not a JSON object"),
    ("hermes", '<tool_call>{"name": "cart_view"}', "unclosed"),
    ("hermes", "hello </tool_call>", "without"),
    ("hermes", b"bytes", "not text"),
    ("qwen_xml", "<tool_call>\n<parameter=q>x</parameter>\n</tool_call>", "function"),
    ("qwen_xml", "<tool_call><function=cart_view></function>", "unclosed"),
    ("hermes", TEN_MB, "longer than"),
    ("openai", {"content": TEN_MB}, "too large"),
    ("openai", json.dumps({"content": TEN_MB}), "too long"),
    ("hermes", "<tool_call>{}</tool_call>" * (MAX_PARSED_CALLS + 1), "more than"),
    ("hermes", "<tool_call>" * 1_000_000, "longer than"),
    ("qwen_xml", "<tool_call><function=cart_view></tool_call>" * 5_000, "more than"),
    ("openai", {"tool_calls": [{}] * 1_000_000}, "too large"),
    ("openai", {"tool_calls": [{}] * (MAX_PARSED_CALLS + 1)}, "more than"),
    ("json", '{"message": ' + "[" * 100_000 + "]" * 100_000 + "}", "nested too deeply"),
]


@pytest.mark.parametrize("fmt,payload,why", MALFORMED, ids=[m[2] for m in MALFORMED])
def test_malformed(fmt, payload, why, codec):
    t0 = time.perf_counter()
    action, info = parse_turn(payload, codec, fmt)
    assert time.perf_counter() - t0 < 2.0
    assert bool(action.malformed) and why in info["malformed"], info["malformed"]
    assert info["internal_error"] is None
    F.check_shapes(action)
    assert F.device_kind(action) == HF.MALFORMED_ACTION


@pytest.mark.parametrize("fmt", FORMATS)
def test_two_answers_and_empty_turn(fmt, codec):
    two = format_turn(fmt, "", [(SC.SUBMIT_ANSWER, {"answer": {"env": "CART"}})], {"env": "CART"})
    action, info = parse_turn(two, codec, fmt)
    assert bool(action.malformed) and "two answers" in info["malformed"]
    # The empty turn is the device's check: nothing to flag in the text.
    for empty in (format_turn(fmt, ""), format_turn(fmt, "  \n ")):
        action, info = parse_turn(empty, codec, fmt)
        assert info["errors"] == [] and not bool(action.malformed)
        assert F.device_kind(action) == HF.MALFORMED_ACTION
    if fmt in ("openai", "json"):
        both = format_turn(fmt, "", answer={"env": "CART"}, answer_as="key")
        both = {**both, "tool_calls": [{"name": SC.SUBMIT_ANSWER, "arguments": {"answer": {}}}]}
        if fmt == "openai":
            both["tool_calls"] = [
                {"id": "x", "type": "function", "function": both["tool_calls"][0]}
            ]
        action, info = parse_turn(both, codec, fmt)
        assert bool(action.malformed) and "two answers" in info["malformed"]


# (name, arguments, text-level flag expected): all are invalid_tool_call on the device.
INVALID_CALLS = [
    ("no_such_tool", {}, True),
    ("cart_add", {}, True),  # missing required argument (also visible: product -1)
    ("cart_set_quantity", {"line_id": "line_001"}, True),  # missing, invisible on device
    (
        "return_initiate",
        {"order_id": "ord_001", "line_id": "ord_001_line_01", "method": "mail"},
        True,
    ),
    ("cart_add", {"product_id": "syn_000001", "colour": "red"}, True),  # unknown key
    ("catalog_search", {"query": "x", "filters": {"colour": "red"}}, True),  # nested key
    ("catalog_search", {"query": "x", "filters": {"price_max": "30"}}, True),  # wrong type
    ("cart_add", {"product_id": "syn_000001", "quantity": "2"}, True),
    ("cart_add", {"product_id": "syn_000001", "quantity": 2.5}, True),
    ("cart_add", {"product_id": "syn_000001", "quantity": True}, True),
    ("cart_add", {"product_id": 162}, True),
    ("catalog_search", {"query": "x", "in_stock_only": "yes"}, True),
    ("catalog_search", {"query": "x", "sort_by": "cheapest"}, True),  # enum
    (
        "return_initiate",
        {
            "order_id": "ord_001",
            "line_id": "ord_001_line_01",
            "reason_code": "meh",
            "method": "mail",
        },
        True,
    ),
    ("ask_user", {"question": "?", "slots": ["colour"]}, True),
    ("ask_user", {"question": "?", "slots": ["color", "color"]}, True),  # unique
    ("ask_user", {"question": "?", "slots": []}, True),
    ("ask_user", {"question": "?", "slots": ["color"], "subgoal": 5}, True),
    ("ask_user", {"question": "", "slots": ["color"]}, True),  # length
    ("ask_user", {"question": "q" * 501, "slots": ["color"]}, True),
    ("catalog_search", {"query": ""}, True),
    ("catalog_search", {"query": "q" * 201}, True),
    ("catalog_search", {"query": "x", "filters": {"price_max": -1}}, True),  # range (float)
    ("catalog_rerank", {"query": "x", "candidate_product_ids": []}, True),
    ("catalog_rerank", {"query": "x", "candidate_product_ids": ["a"] * 101}, True),
    ("cart_add", {"product_id": ""}, True),
    ("cart_add", {"product_id": "syn_000001", "quantity": 10**12}, True),  # not int32
    ("catalog_search", {"query": "x", "top_k": 501}, False),  # device-checked ranges
    ("catalog_search", {"query": "x", "top_k": 0}, False),
    ("catalog_rerank", {"query": "x", "candidate_product_ids": ["a"], "top_k": 101}, False),
    ("cart_add", {"product_id": "syn_000001", "quantity": 100}, False),
    ("cart_set_quantity", {"line_id": "line_001", "quantity": -1}, False),
    ("order_list", {"days": 366}, False),
    ("policy_search", {"query": "x", "top_k": 11}, False),
]


@pytest.mark.parametrize("fmt", ("hermes", "openai", "json"))
def test_invalid_tool_calls(fmt, codec):
    for name, args, text_flag in INVALID_CALLS:
        action, info = parse_turn(format_turn(fmt, "hi", [(name, args)]), codec, fmt)
        assert bool(action.bad_args[0]) == text_flag, (name, args, info["errors"])
        assert info["errors"], (name, args)
        assert F.device_kind(action) == HF.INVALID_TOOL_CALL, (name, args)
    action, _ = parse_turn(format_turn(fmt, "", [("no_such_tool", {})]), codec, fmt)
    assert action.tool[0] == UNKNOWN_TOOL


def test_invalid_tool_calls_qwen_xml(codec):
    """XML values are text typed by the schema, so a few JSON type errors cannot be written
    in XML at all (quantity "2" reads as 2; product_id 162 reads as the string "162")."""
    unwritable = ({"product_id": "syn_000001", "quantity": "2"}, {"product_id": 162})
    for name, args, _ in INVALID_CALLS:
        if args in unwritable:
            continue
        action, info = parse_turn(format_turn("qwen_xml", "hi", [(name, args)]), codec, "qwen_xml")
        assert F.device_kind(action) == HF.INVALID_TOOL_CALL, (name, args, info["errors"])


@pytest.mark.parametrize("fmt", ("hermes", "openai", "json"))
def test_arguments_not_an_object(fmt, codec):
    for arguments in ("{bad", "[1]", "5", '"x"', '{"a": NaN}', '{"a": 1, "a": 2}', [1], 3):
        if fmt == "openai":
            payload = _openai_call("cart_view", arguments)
        elif fmt == "hermes":
            call = json.dumps({"name": "cart_view", "arguments": arguments})
            payload = f"<tool_call>{call}</tool_call>"
        else:
            payload = {"tool_calls": [{"name": "cart_view", "arguments": arguments}]}
        action, info = parse_turn(payload, codec, fmt)
        assert bool(action.bad_args[0]) and not bool(action.malformed), (arguments, info)
        assert F.device_kind(action) == HF.INVALID_TOOL_CALL
    # A call envelope that is not an object, or has unknown keys, is an invalid call too.
    bad = [5, {"name": "cart_view", "argz": {}}]
    if fmt == "openai":
        payload = {
            "tool_calls": [
                5,
                {"id": "x", "type": "function", "function": {"name": "cart_view", "x": 1}},
            ]
        }
    elif fmt == "hermes":
        payload = '<tool_call>{"name": "cart_view", "argz": {}}</tool_call>'
    else:
        payload = {"tool_calls": bad}
    action, info = parse_turn(payload, codec, fmt)
    assert bool(action.bad_args[0]) and F.device_kind(action) == HF.INVALID_TOOL_CALL


def test_hostile_arguments_bounded(codec):
    deep = "[" * 100_000 + "]" * 100_000
    digits = "9" * 150_000
    for arguments in (deep, '{"quantity": ' + digits + ', "product_id": "a"}', "{" * 50 + "}" * 50):
        t0 = time.perf_counter()
        action, info = parse_turn(_openai_call("cart_add", arguments), codec, "openai")
        assert time.perf_counter() - t0 < 2.0
        assert bool(action.bad_args[0]) and info["internal_error"] is None
    nested: list = []
    for _ in range(100_000):  # built in Python: no JSON text to scan first
        nested = [nested]
    cyclic: dict = {"product_id": "syn_000001"}
    cyclic["self"] = cyclic
    for arguments in (nested, cyclic, {"product_id": "syn_000001", "quantity": 10**400}):
        action, info = parse_turn(_openai_call("cart_add", arguments), codec, "openai")
        assert bool(action.bad_args[0]) or bool(action.malformed), arguments
        assert info["internal_error"] is None
    action, info = parse_turn({"content": "x", "tool_calls": [nested]}, codec, "openai")
    assert bool(action.malformed) and info["internal_error"] is None


def test_budget(codec):
    call = ("cart_view", {})
    for fmt in FORMATS:
        action, info = parse_turn(format_turn(fmt, "", [call] * 6), codec, fmt)
        assert info["errors"] == [] and not info["budget_overflow"]
        assert F.device_kind(action, budget=5) == HF.TOOL_BUDGET_EXCEEDED
        assert F.device_kind(action, budget=6) == HF.NONE
        n = C.MAX_TOOL_CALLS + 3
        action, info = parse_turn(format_turn(fmt, "", [call] * n), codec, fmt)
        assert info["budget_overflow"] and info["n_calls"] == n
        assert (action.tool == T.CART_VIEW).all()  # every slot used: any budget < 11 fails
        assert F.device_kind(action, budget=C.MAX_TOOL_CALLS - 1) == HF.TOOL_BUDGET_EXCEEDED
        # At d = 20 (B_tool = every slot) the true count still fails the budget.
        assert int(action.n_calls) == n
        assert F.device_kind(action, budget=C.MAX_TOOL_CALLS) == HF.TOOL_BUDGET_EXCEEDED
        # A violation in an overflowing call still reaches the device (on the last slot).
        calls = [call] * C.MAX_TOOL_CALLS + [("cart_add", {"product_id": "x", "qty": 1})]
        action, info = parse_turn(format_turn(fmt, "", calls), codec, fmt)
        assert bool(action.bad_args[-1]) and F.device_kind(action) == HF.INVALID_TOOL_CALL
        calls = [call] * C.MAX_TOOL_CALLS + [("order_list", {"days": 999})]
        action, info = parse_turn(format_turn(fmt, "", calls), codec, fmt)
        assert F.device_kind(action) == HF.INVALID_TOOL_CALL


INVALID_ANSWERS = [
    {"env": "PD"},  # missing field
    {"env": "PD", "recommended_product_ids": ["a"], "extra": 1},  # unknown key
    {"env": "PD", "recommended_product_ids": "syn_000001"},  # wrong type
    {"env": "PD", "recommended_product_ids": ["a"] * 51},
    {"env": "PD", "recommended_product_ids": [], "done": "yes"},
    {"env": "SHOP"},  # unknown env
    {"env": "STATUS", "selected_order_id": "ord_001", "order_status": "LOST"},
    {"env": "POLICY", "policy_answer": None},
    {"env": "JOURNEY", "subgoal_answers": []},
    {"env": "JOURNEY", "subgoal_answers": [{"env": "CART", "done": True}]},  # no done inside
    {"env": "JOURNEY", "subgoal_answers": [{"env": "JOURNEY", "subgoal_answers": [None]}]},
    {"env": "JOURNEY", "subgoal_answers": [None] * 6},
    {"env": "RETURN", "selected_order_id": "ord_001"},
    ["env", "CART"],
    "CART",
]


@pytest.mark.parametrize("fmt", FORMATS)
def test_invalid_answers(fmt, codec):
    for ans in INVALID_ANSWERS:
        action, info = parse_turn(format_turn(fmt, "ok", answer=ans), codec, fmt)
        assert not bool(action.malformed), (ans, info)
        assert info["answer_error"] and action.answer.main.env == INVALID_ENV, ans
        for env in C.Env:
            assert F.device_kind(action, env) == HF.INVALID_ANSWER, ans
    # The submit_answer envelope itself: extra keys or a missing answer.
    for args in ({}, {"answer": {"env": "CART"}, "x": 1}):
        action, info = parse_turn(format_turn(fmt, "", [(SC.SUBMIT_ANSWER, args)]), codec, fmt)
        assert F.device_kind(action) == HF.INVALID_ANSWER and info["answer_error"]
    # A valid answer for another env is the device's check.
    action, info = parse_turn(format_turn(fmt, "", answer={"env": "CART"}), codec, fmt)
    assert info["errors"] == [] and F.device_kind(action, C.Env.PD) == HF.INVALID_ANSWER


def test_unknown_ids_are_business_errors(codec):
    calls = [
        ("cart_add", {"product_id": "syn_999999"}),
        ("cart_add", {"product_id": "SYN_000001"}),
        ("cart_add", {"product_id": "syn_999999", "variant_id": "v"}),
        ("cart_add", {"product_id": "syn_000001", "variant_id": "syn_000002_v1"}),
        ("cart_remove", {"line_id": "line_1"}),
        ("order_get_status", {"order_id": "ord_004"}),
        ("return_check_eligibility", {"order_id": "ord_001", "line_id": "ord_002_line_01"}),
        ("return_check_eligibility", {"order_id": "ord_001", "line_id": "ord_001_line_03"}),
        ("return_cancel", {"return_id": "exc_001"}),
        ("catalog_search", {"query": "x", "similar_to": "nope", "filters": {"brand": "Acme"}}),
    ]
    action, info = parse_turn(format_turn("json", "", calls), codec, "json")
    assert info["errors"] == [] and F.device_kind(action) == HF.NONE
    p = action.product
    assert p[0] <= -2 and p[1] <= -2 and p[0] != p[1] and p[2] == p[0]
    assert action.variant[2] == -2 and action.variant[3] == -2 and action.line[4] == -2
    assert action.order[5] == -2 and action.line[6] == -2 and action.line[7] == -2
    assert action.order[8] == -2 and action.product[9] <= -2 and action.filter_disc[9, 1] == -2


# --- fuzzing --------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=30),
    lambda kids: (
        st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=10), kids, max_size=4)
    ),
    max_leaves=12,
)


@st.composite
def near_valid_turns(draw):
    """A valid corpus call or answer, mutated by hypothesis-drawn edits, in some format."""
    fmt = draw(st.sampled_from(FORMATS))
    calls = []
    for name, args in draw(st.lists(st.sampled_from(F.VALID_CALLS), max_size=4)):
        args = json.loads(json.dumps(args))
        edit = draw(st.sampled_from(["none", "drop", "extra", "replace", "huge", "text"]))
        keys = sorted(args)
        if edit == "drop" and keys:
            del args[draw(st.sampled_from(keys))]
        elif edit == "extra":
            args[draw(st.text(max_size=8))] = draw(JSON_VALUES)
        elif edit == "replace" and keys:
            args[draw(st.sampled_from(keys))] = draw(JSON_VALUES)
        elif edit == "huge" and keys:
            args[draw(st.sampled_from(keys))] = draw(st.integers(2**31 - 2, 10**40))
        elif edit == "text" and keys:
            args[draw(st.sampled_from(keys))] = draw(st.text(max_size=250))
        calls.append((draw(st.sampled_from([name, name, name + "x", ""])), args))
    answer = draw(st.none() | st.sampled_from(F.VALID_ANSWERS))
    if answer is not None and draw(st.booleans()):
        answer = {**answer, draw(st.sampled_from(["env", "done", "zz"])): draw(JSON_VALUES)}
    message = draw(st.text(max_size=40))
    payload = format_turn(fmt, message, calls, answer)
    cut = draw(st.none() | st.integers(0, 2000))
    if cut is not None:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        payload = text[:cut]
    return fmt, payload


SETTINGS = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)


def _check(fmt, payload, codec) -> None:
    action, info = parse_turn(payload, codec, fmt, turn=1)
    F.check_shapes(action)
    F.check_consistent(action, info, F.device_kind(action, F.episode_env(action)))


@SETTINGS
@given(near_valid_turns())
def test_fuzz_near_valid(codec, turn):
    _check(*turn, codec)


@SETTINGS
@given(st.sampled_from(FORMATS), st.text(max_size=300) | JSON_VALUES)
def test_fuzz_arbitrary_input(codec, fmt, payload):
    _check(fmt, payload, codec)


@SETTINGS
@given(st.randoms(use_true_random=False))
def test_fuzz_corpus_mutations(codec, rng):
    fmt, payload, expect = F.random_turn(rng)
    action, info = parse_turn(payload, codec, fmt)
    F.check_shapes(action)
    F.check_consistent(action, info, F.device_kind(action, F.episode_env(action)), expect)


@pytest.mark.slow
def test_fuzz_sweep_100k(cat_ids):
    """100,000 generated turns over seeds: never raises, right shapes, and the device fails
    exactly the turns the parser reported (checked in batches)."""
    n, batch = 100_000, 2_000
    for start in range(0, n, batch):
        actions, infos, expects = [], [], []
        for seed in range(start, start + batch):
            codec = F.fuzz_codec(cat_ids)
            fmt, payload, expect = F.random_turn(random.Random(seed))
            action, info = parse_turn(payload, codec, fmt, turn=seed % 7)
            F.check_shapes(action)
            actions.append(action)
            infos.append(info)
            expects.append(expect)
        envs = [F.episode_env(a) for a in actions]
        kinds = F.device_kinds(actions, envs, [C.MAX_TOOL_CALLS] * batch)
        for a, info, kind, expect in zip(actions, infos, kinds, expects, strict=True):
            F.check_consistent(a, info, int(kind), expect)


def test_host_errors_never_raise(codec):
    good = format_turn("openai", "", [("catalog_search", {"query": "mug"})])
    calls = []

    def embed(texts):
        calls.append(list(texts))
        return np.ones((len(texts), C.EMBED_DIM), np.float32)

    action, info = parse_turn(good, codec, "openai", embed_fn=embed)
    assert calls == [["mug"]] and (action.query_emb[0] == 1).all() and info["errors"] == []
    for fmt, payload, embed_fn in (
        ("openai", good, lambda texts: np.zeros((1, 3))),  # wrong embedding width
        ("openai", good, lambda texts: 1 / 0),
        ("hermes", {"content": "", "tool_calls": [{"x": 1}]}, None),  # parsed calls: openai
        ("xml", "hi", None),  # unknown format
    ):
        action, info = parse_turn(payload, codec, fmt, embed_fn=embed_fn)
        assert bool(action.malformed) and info["internal_error"], (fmt, info)
        F.check_shapes(action)
    action, info = parse_turn("hi", None, "hermes")  # not a codec at all
    assert bool(action.malformed) and info["internal_error"]


def test_policy_answer_uses_the_episode_topic_kind(codec):
    ans = {"env": "POLICY", "policy_answer": "Not included"}
    for categorical, want in ((True, (P.answer_code("Not included"), True)), (False, (0, False))):
        codec.policy_categorical = categorical
        action, _ = parse_turn(format_turn("json", "", answer=ans), codec, "json")
        got = (float(action.answer.main.policy_value), bool(action.answer.main.policy_ok))
        assert got == (float(want[0]), want[1])
