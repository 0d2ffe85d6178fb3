"""Rendering of the transcript (SPEC §4.4, §5): every tool's JSON through a live session,
business errors, store notices, the system message, and the Action -> text -> Action
round trip of ``action_to_turn``."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.catalog.vocabulary import TAXONOMY, VOCAB
from ecomjax.llm_bridge import render
from ecomjax.llm_bridge import session as SS
from ecomjax.llm_bridge.ids import IdCodec
from ecomjax.llm_bridge.parse import FORMATS, empty_numpy_action, format_turn, parse_turn
from ecomjax.types import CALL_FIELDS

T = C.Tool
FAST = SS.FAST_COMPILE
CARD_KEYS = {
    "product_id", "title", "cat", "brand", "store", "price", "rating", "rating_count",
    "ship_days", "stock_qty", "attrs", "has_variants",
}  # fmt: skip


@pytest.fixture(scope="module")
def text(catalog) -> SS.CatalogText:
    return SS.CatalogText.build(catalog)


def session(text, **kw) -> SS.Session:
    return SS.Session(text, compiler_options=FAST, **kw)


def say(s, calls=(), message="", answer=None, fmt="json") -> dict:
    return s.step(format_turn(fmt, message, list(calls), answer), fmt)


def results(obs: dict) -> list:
    """The JSON of this step's tool messages, in call order."""
    return [json.loads(m["content"]) for m in obs["new_messages"] if m["role"] == "tool"]


def hidden(s):
    return jax.device_get(s.state.problem)


# --- every tool, live ---------------------------------------------------------------------------


@pytest.fixture(scope="module", params=[4, 8], ids=["eligible", "ineligible"])
def return_episode(text, request):
    """RETURN at d = 20 (11 calls a turn): every order, catalog and policy tool; seed 4's
    target line is eligible for return, seed 8's is not."""
    s = session(text)
    s.reset("RETURN", 20, request.param)
    p = hidden(s)
    o, j = int(p.ret_order), int(p.ret_line)
    turn1 = say(
        s,
        [
            ("catalog_list_categories", {}),
            ("datetime_now", {}),
            ("user_get_visit_history", {}),
            ("order_list", {"days": 365}),
            ("policy_search", {"query": "return window days for electronics", "top_k": 2}),
            (
                "catalog_search",
                {"query": "lamp", "filters": {"cat": "lamps"}, "sort_by": "price_asc"},
            ),
            ("catalog_search", {"query": "desk lamp", "top_k": 5}),
            ("cart_view", {}),
            ("ask_user", {"question": "Why?", "slots": ["reason", "budget"]}),
        ],
    )
    r1 = results(turn1)
    lamp = next(c for c in r1[5]["results"] if c["stock_qty"] > 0)["product_id"]
    line = s.codec.order_line_id(o, j)
    order = s.codec.order_id(o)
    turn2 = say(
        s,
        [
            ("catalog_get_product", {"product_id": lamp}),
            ("catalog_get_variants", {"product_id": lamp}),
            ("catalog_rerank", {"query": "lamp", "candidate_product_ids": [lamp, "bogus", lamp]}),
            ("cart_add", {"product_id": lamp, "quantity": 1}),
            ("cart_set_quantity", {"line_id": "line_001", "quantity": 2}),
            ("cart_remove", {"line_id": "line_001"}),
            ("order_get_status", {"order_id": order}),
            ("return_check_eligibility", {"order_id": order, "line_id": line}),
            (
                "return_exchange",
                {
                    "order_id": order,
                    "line_id": line,
                    "new_product_id": lamp,
                    "reason_code": "defective",
                    "method": "mail",
                },
            ),
            ("return_cancel", {"return_id": "ret_001"}),
            (
                "return_initiate",
                {"order_id": order, "line_id": line, "reason_code": "too_small", "method": "mail"},
            ),
        ],
    )
    return s, r1, results(turn2), lamp, (o, j)


def test_catalog_tools(return_episode):
    s, r1, r2, lamp, _ = return_episode
    cats, now, history, _, policy, search, search5, cart, ask = r1
    assert len(cats) == len(TAXONOMY) and sum(c["count"] for c in cats) == 1000
    assert {c["display_name"] for c in cats} == {t[2] for t in TAXONOMY}
    today = int(hidden(s).today)
    assert now == {
        "date": render.day_text(today),
        "day_of_week": render.weekday(today),
        "time": "12:00:00",
    }
    assert len(history) == 6 and all(set(c) == CARD_KEYS for c in history)
    assert search["top_k_applied"] == 20 and search["total_matches"] >= len(search["results"]) > 0
    assert all(set(c) == CARD_KEYS | {"score"} for c in search["results"])
    assert search5["top_k_applied"] == 5 and len(search5["results"]) <= 5
    assert all(isinstance(c["score"], float) and -1 <= c["score"] <= 1 for c in search5["results"])
    assert all(c["score"] == c["price"] for c in search["results"])  # price_asc: the price
    assert cart == {"lines": [], "total_items": 0, "total_price": 0.0}
    assert ask == {"status": "sent", "slots": ["reason", "budget"]}
    assert [t["topic"] for t in policy["results"]][:1] == ["return_window_days"]
    assert policy["results"][0] == P.topic_record(P.TOPIC_INDEX["return_window_days"])
    record, variants, rerank = r2[:3]
    assert set(record) == CARD_KEYS | {"desc", "features", "variant_count"}
    assert record["product_id"] == lamp and record["variant_count"] == len(variants)
    for v in variants:
        assert set(v) == {
            "variant_id", "product_id", "color", "size", "attrs", "price", "stock_qty",
            "description",
        }  # fmt: skip
        assert v["variant_id"].startswith(lamp + "_v") and v["description"].startswith("color: ")
    assert rerank["unknown_ids"] == ["bogus"] and [r["product_id"] for r in rerank["results"]] == [
        lamp
    ]


def test_cart_and_order_tools(return_episode):
    s, r1, r2, lamp, (o, j) = return_episode
    added, setq, removed, status, elig, exch, cancel, init = r2[3:]
    line = {
        "line_id": "line_001", "product_id": lamp, "variant_id": None,
        "title": s.results.title(int(lamp[4:])), "variant_description": None, "qty": 1,
        "unit_price": s.results.price(int(lamp[4:])),
    }  # fmt: skip
    assert added == {"lines": [line], "total_items": 1, "total_price": line["unit_price"]}
    assert setq["lines"][0]["qty"] == 2 and setq["total_items"] == 2
    assert removed == {"lines": [], "total_items": 0, "total_price": 0.0}
    orders = r1[3]
    assert [x["order_id"] for x in orders] == sorted((x["order_id"] for x in orders), reverse=True)
    listed = next(x for x in orders if x["order_id"] == s.codec.order_id(o))
    assert status["order_id"] == listed["order_id"] and status["status"] == listed["status"]
    assert [x["line_id"] for x in status["lines"]] == [x["line_id"] for x in listed["items"]]
    assert status["status"] == "DELIVERED" and "delivered_date" in status
    assert status["tracking_number"].startswith("TRK") and len(status["tracking_number"]) == 12
    assert set(elig) >= {
        "eligible", "window_days", "days_since_purchase", "product_title",
        "allowed_reason_codes", "allowed_methods", "fees",
    }  # fmt: skip
    assert set(elig["fees"]) == {"mail", "in_store", "pickup"}
    assert elig["eligible"] == (s.seed == 4)
    if elig["eligible"]:
        assert exch["status"] == "EXCHANGE_INITIATED" and exch["return_id"] == "ret_001"
        assert exch["new_product_id"] == lamp and exch["exchange_id"] == "exc_001"
        assert cancel == {"return_id": "ret_001", "status": "CANCELLED"}
        assert init["status"] == "INITIATED" and init["return_id"] == "ret_002"
        assert init["line_id"] == s.codec.order_line_id(o, j) and "label_url" in init
    else:
        assert exch["error"]["code"] == "ineligible" and "ineligible_reason" in elig
        assert cancel["error"]["code"] == "unknown_return"


def test_cart_variants_of_a_variant_required_product(text):
    s = session(text)
    s.reset("CART", 20, 2)
    p = hidden(s)
    k = int(np.argmax(np.asarray(p.item_var_req)))
    pid = s.codec.product_id(int(p.item_pid[k]))
    variants = results(say(s, [("catalog_get_variants", {"product_id": pid})]))[0]
    attr = C.ATTR_NAMES[int(p.item_var_attr[k])]
    assert len(variants) == 3
    for v in variants:
        assert v["variant_id"].startswith(f"{pid}_v_{attr}_")
        assert v["description"].startswith(f"{attr}: ") and v["price"] == s.results.price(
            int(pid[4:])
        )
    chosen = variants[1]["variant_id"]
    cart = results(say(s, [("cart_add", {"product_id": pid, "variant_id": chosen, "quantity": 2})]))
    line = cart[0]["lines"][0]
    assert (
        line["variant_id"] == chosen and line["variant_description"] == variants[1]["description"]
    )


@pytest.mark.parametrize(
    "call, code",
    [
        (("cart_add", {"product_id": "syn_999999"}), "unknown_product"),
        (("catalog_get_product", {"product_id": "nope"}), "unknown_product"),
        (("cart_remove", {"line_id": "line_007"}), "unknown_line"),
        (("order_get_status", {"order_id": "ord_099"}), "unknown_order"),
        (("return_cancel", {"return_id": "ret_003"}), "unknown_return"),
        (("catalog_search", {"query": "x", "similar_to": "zzz"}), "unknown_product"),
    ],
)
def test_business_errors_are_error_objects(text, call, code):
    s = session(text)
    s.reset("STATUS", 2, 8)
    obs = say(s, [call])
    assert not obs["done"]
    (res,) = results(obs)
    assert set(res) == {"error"} and res["error"]["code"] == code and res["error"]["message"]


# --- events and store notices ------------------------------------------------------------------


def shocked_episode(text, event_role: bool):
    """SUB at d = 20: the original's category is searched, then time passes until stock
    shocks hit products the agent has seen."""
    s = session(text, event_role=event_role)
    s.reset("SUB", 20, 13)
    cat = s.text.tables.cat_display[
        int(s.text.lexicon.catalog.category[int(hidden(s).sub_original)])
    ]
    obs = [say(s, [("catalog_search", {"query": cat, "filters": {"cat": cat}})])]
    while not obs[-1]["events"] and len(obs) < 12:
        obs.append(say(s, [("datetime_now", {})]))
    return s, obs


def test_events_as_messages_or_store_notices(text):
    a, obs_a = shocked_episode(text, True)
    b, obs_b = shocked_episode(text, False)
    assert obs_a[-1]["events"] and obs_a[-1]["events"] == obs_b[-1]["events"]
    ids = [e["product_id"] for e in obs_a[-1]["events"]]
    ev = [m for m in obs_a[-1]["new_messages"] if m["role"] == "event"]
    assert [json.loads(m["content"]) for m in ev] == obs_a[-1]["events"]
    assert not any(m["role"] == "event" for m in b.messages)
    user_a = obs_a[-1]["new_messages"][-1]["content"]
    user_b = obs_b[-1]["new_messages"][-1]["content"]
    notices = "\n".join(f"[Store notice] {p} is now out of stock." for p in ids)
    assert user_b == notices + "\n" + user_a
    seen = {c["product_id"] for c in results(obs_a[0])[0]["results"]}
    assert set(ids) <= seen  # only seen products are shocked and announced


def test_system_message():
    m = render.system_message(C.Env.CART, 40, 6, 3)
    assert m["role"] == "system"
    c = m["content"]
    assert "2025-02-10 (Monday)" in c and "at most 6 turns" in c and "at most 3 tool calls" in c
    assert "ask_user" in c and "Task (CART)" in c and '"required":["env"]' in c
    hidden_env = render.system_message(None, -3, 4, 1, submit_tool=False)["content"]
    assert (
        "2024-12-29" in hidden_env
        and "Task" not in hidden_env
        and "submit_answer" not in hidden_env
    )


# --- Action -> text -> Action -----------------------------------------------------------------


@st.composite
def actions(draw, cat, codec: IdCodec):
    """A random canonical Action (the arrays the parser itself would produce)."""
    a = empty_numpy_action()
    arr = {k: getattr(a, k) for k in CALL_FIELDS}
    tools = [t for t in T if t not in (T.NONE, T.CATALOG_RERANK)]
    n_lines = codec.order_n_lines
    for i in range(draw(st.integers(0, C.MAX_TOOL_CALLS))):
        t = draw(st.sampled_from(tools))
        arr["tool"][i] = t
        pid = draw(st.integers(0, cat.n_products - 1))
        if t == T.CATALOG_SEARCH:
            c = draw(st.integers(0, len(TAXONOMY) - 1))
            arr["has_query"][i] = True
            arr["query_emb"][i] = np.asarray(cat.cat_emb[c])
            arr["qty"][i] = draw(st.integers(1, 500))
            arr["enum_a"][i] = draw(st.integers(0, 3))
            arr["flag"][i] = draw(st.booleans())
            if draw(st.booleans()):
                arr["product"][i] = pid
            for j in draw(st.lists(st.integers(0, C.N_DISC_FILTERS - 1), max_size=3, unique=True)):
                attr = C.DISC_FILTERS[j]
                n = {C.Attr.CAT: 40, C.Attr.BRAND: 25, C.Attr.STORE: 14}.get(attr) or len(
                    VOCAB[attr]
                )
                arr["filter_disc"][i, j] = draw(st.integers(-2, n - 1).filter(lambda x: x != -1))
            for j in draw(st.lists(st.integers(0, C.N_NUM_FILTERS - 1), max_size=3, unique=True)):
                arr["filter_num"][i, j] = np.float32(draw(st.floats(0, 1e4, width=32)))
        elif t in (T.CATALOG_GET_PRODUCT, T.CATALOG_GET_VARIANTS):
            arr["product"][i] = pid
        elif t == T.CART_ADD:
            arr["product"][i] = pid
            arr["variant"][i] = draw(st.integers(-1, C.MAX_VARIANTS - 1))
            arr["qty"][i] = draw(st.integers(1, 99))
        elif t in (T.CART_REMOVE, T.CART_SET_QUANTITY):
            arr["line"][i] = draw(st.integers(1, 40))
            if t == T.CART_SET_QUANTITY:
                arr["qty"][i] = draw(st.integers(0, 99))
        elif t == T.ORDER_LIST:
            arr["qty"][i] = draw(st.integers(1, 365))
        elif t == T.POLICY_SEARCH:
            arr["has_query"][i] = True
            arr["query_tokens"][i] = P.QUESTION_TOKENS[draw(st.integers(0, P.N_TOPICS - 1))]
            arr["qty"][i] = draw(st.integers(1, 10))
        elif t == T.RETURN_CANCEL:
            arr["order"][i] = draw(st.integers(1, 9))
        elif t == T.ASK_USER:
            for s in draw(
                st.lists(st.integers(0, C.N_SLOTS - 1), min_size=1, max_size=6, unique=True)
            ):
                arr["slots"][i, s] = True
            if draw(st.booleans()):
                arr["product"][i] = pid
            if draw(st.booleans()):
                arr["enum_b"][i] = draw(st.integers(0, 4))
        if t in (
            T.ORDER_GET_STATUS,
            T.RETURN_CHECK_ELIGIBILITY,
            T.RETURN_INITIATE,
            T.RETURN_EXCHANGE,
        ):
            o = draw(st.integers(0, len(n_lines) - 1))
            arr["order"][i] = o
            if t != T.ORDER_GET_STATUS:
                arr["line"][i] = draw(st.integers(0, n_lines[o] - 1))
        if t in (T.RETURN_INITIATE, T.RETURN_EXCHANGE):
            arr["enum_a"][i] = draw(st.integers(0, 7))
            arr["enum_b"][i] = draw(st.integers(0, 2))
            if t == T.RETURN_EXCHANGE:
                arr["product"][i] = pid
                arr["variant"][i] = draw(st.integers(-1, C.MAX_VARIANTS - 1))
    present = draw(st.lists(st.integers(0, cat.n_products - 1), max_size=4, unique=True))
    a = a.replace(has_message=np.asarray(bool(present) or draw(st.booleans())))
    a.present[: len(present)] = present
    n_calls = np.asarray(int((arr["tool"] != T.NONE).sum()), np.int32)
    a = a.replace(n_calls=n_calls)
    env = draw(st.integers(-1, len(C.Env) - 1))
    if env >= 0:
        ans = a.answer
        main = {
            k: np.array(getattr(ans.main, k))
            for k in ("env", "rec", "order", "line", "status", "policy_value", "policy_ok")
        }
        sub = {k: np.array(getattr(ans.sub, k)) for k in main}
        fill_answer(draw, main, (), env if env != C.Env.JOURNEY else None, codec, cat)
        if env == C.Env.JOURNEY:
            main["env"][()] = env
            n = draw(st.integers(1, C.MAX_SUBGOALS))
            for k in range(n):
                sub_env = draw(st.integers(-1, 6)) if k < n - 1 else draw(st.integers(0, 6))
                if sub_env >= 0:
                    fill_answer(draw, sub, k, sub_env, codec, cat)
        a = a.replace(
            answer=ans.replace(
                present=np.asarray(True),
                done=np.asarray(draw(st.booleans())),
                main=ans.main.replace(**main),
                sub=ans.sub.replace(**sub),
            )
        )
    return a


def fill_answer(draw, f, i, env, codec, cat):
    if env is None:
        return
    f["env"][i] = env
    if env in (C.Env.PD, C.Env.SUB, C.Env.BUNDLE):
        rec = draw(st.lists(st.integers(0, cat.n_products - 1), max_size=10))
        f["rec"][i][: len(rec)] = rec
    elif env in (C.Env.RETURN, C.Env.STATUS):
        o = draw(st.integers(0, len(codec.order_n_lines) - 1))
        f["order"][i] = o
        if env == C.Env.RETURN:
            f["line"][i] = draw(st.integers(0, codec.order_n_lines[o] - 1))
        else:
            f["status"][i] = draw(st.integers(0, 4))
    elif env == C.Env.POLICY:
        ok = draw(st.booleans())
        f["policy_value"][i] = np.float32(draw(st.floats(-1e6, 1e6, width=32))) if ok else 0.0
        f["policy_ok"][i] = ok


@pytest.fixture(scope="module")
def host_catalog(catalog):
    return jax.device_get(catalog)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(st.data(), st.sampled_from(FORMATS), st.sampled_from(["call", "key"]))
def test_action_text_round_trip(text, host_catalog, codec, data, fmt, answer_as):
    """parse(format(action_to_turn(a))) == a, bit for bit, for canonical actions."""
    a = data.draw(actions(host_catalog, codec))
    message, calls, answer = render.action_to_turn(a, codec, text.lexicon)
    if answer_as == "key" and fmt not in ("openai", "json"):
        answer_as = "call"
    back, info = parse_turn(format_turn(fmt, message, calls, answer, answer_as), codec, fmt)
    assert not info["errors"], info["errors"]
    assert not differing(back, a), (differing(back, a), message, calls, answer)


def differing(x, y) -> list[str]:
    """Paths of the leaves where two pytrees differ."""
    fx, _ = jax.tree_util.tree_flatten_with_path(x)
    fy = jax.tree_util.tree_leaves(y)
    return [
        jax.tree_util.keystr(p)
        for (p, u), v in zip(fx, fy, strict=True)
        if not _same(np.asarray(u), np.asarray(v))
    ]


def _same(u: np.ndarray, v: np.ndarray) -> bool:
    """Bitwise-equal arrays; NaN padding (filter_num) equals NaN."""
    nan = np.issubdtype(u.dtype, np.floating)
    return u.dtype == v.dtype and u.shape == v.shape and np.array_equal(u, v, equal_nan=nan)


def test_action_to_turn_refuses_what_text_cannot_say(text, codec):
    a = empty_numpy_action()
    a.tool[0] = T.CATALOG_SEARCH
    a.query_emb[0] = 0.5
    with pytest.raises(render.NotRenderable):
        render.action_to_turn(a, codec, text.lexicon)
    a.tool[0] = T.CATALOG_RERANK
    with pytest.raises(render.NotRenderable):
        render.action_to_turn(a, codec, text.lexicon)
    with pytest.raises(render.NotRenderable):
        render.action_to_turn(
            empty_numpy_action().replace(malformed=np.asarray(True)), codec, text.lexicon
        )


def test_assistant_echo_normalises_the_answer_to_a_call():
    info = {
        "message": "Done.",
        "calls": [{"id": "c1", "name": "cart_view", "arguments": {}}],
        "answer": {"env": "CART"},
        "turn": 3,
    }
    m = render.assistant_message(info, None)
    assert m["content"] == "Done."
    assert [c["function"]["name"] for c in m["tool_calls"]] == ["cart_view", "submit_answer"]
    assert json.loads(m["tool_calls"][1]["function"]["arguments"]) == {"answer": {"env": "CART"}}
    assert m["tool_calls"][1]["id"] == "call_3_answer"
    bad = render.assistant_message({"malformed": "x"}, "<tool_call>{")
    assert bad == {"role": "assistant", "content": "<tool_call>{"}
