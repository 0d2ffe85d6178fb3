"""The TRL adapter tells the model every argument bound, and a turn that breaks one is
rejected (still the SPEC §4.2 hard fail, reward -1) with a tool output naming the field, the
bound and the value, in words that depend on the call alone, never on the episode's goal.

Compiles: the resets of PD and CART and one step (shared with the other bridge tests)."""

from __future__ import annotations

import json

import pytest

from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge import session as SS
from ecomjax.llm_bridge import trl_adapter as TA
from ecomjax.llm_bridge.tool_turns import call_tools

BOUNDS = (("minimum", "maximum"), ("minLength", "maxLength"), ("minItems", "maxItems"))
DONE = "; the turn was rejected and no call ran."


@pytest.fixture(scope="module")
def text(catalog) -> SS.CatalogText:
    return SS.CatalogText.build(catalog)


def test_tool_docs_give_every_schema_bound():
    """transformers' get_json_schema (what TRL renders) drops minimum/maximum/lengths/item
    counts, so each bound must be in the argument's description."""
    get_json_schema = pytest.importorskip("transformers.utils").get_json_schema
    cls = TA.make_env_class()
    checked = 0
    for tool in call_tools(with_submit=True):
        fn = tool["function"]
        got = get_json_schema(getattr(cls, fn["name"]))["function"]["parameters"]["properties"]
        for arg, sch in fn["parameters"]["properties"].items():
            desc = got[arg]["description"]
            for lo_key, hi_key in BOUNDS:
                lo, hi = sch.get(lo_key), sch.get(hi_key)
                if lo is not None and hi is not None:
                    assert f"{lo}..{hi}" in desc, (fn["name"], arg, desc)
                    checked += 1
            for key, sub in sch.get("properties", {}).items():  # catalog_search filters
                if "minimum" in sub:
                    assert f"{key} (a number >= {sub['minimum']})" in desc, (key, desc)
                    checked += 1
    assert checked >= 20
    props = get_json_schema(cls.catalog_search)["function"]["parameters"]["properties"]
    assert props["top_k"]["description"] == (
        "How many results. Must be an integer in 1..500. Default 20."
    )
    props = get_json_schema(cls.cart_add)["function"]["parameters"]["properties"]
    assert (
        props["quantity"]["description"] == "Units to add. Must be an integer in 1..99. Default 1."
    )


BAD_CALLS = [
    (
        "catalog_search",
        {"query": "lamp", "top_k": 1000},
        "catalog_search.top_k must be an integer in 1..500, got 1000",
    ),
    (
        "cart_add",
        {"product_id": "syn_000001", "quantity": 100},
        "cart_add.quantity must be an integer in 1..99, got 100",
    ),
    (
        "cart_add",
        {"product_id": "syn_000001", "quantity": 0},
        "cart_add.quantity must be an integer in 1..99, got 0",
    ),
    (
        "catalog_search",
        {"query": ""},
        "catalog_search.query must be a string of 1..200 characters, got 0 characters",
    ),
    (
        "catalog_search",
        {"query": "lamp", "filters": {"price_max": -1}},
        "catalog_search.filters.price_max must be a number >= 0, got -1",
    ),
    ("cart_add", {"product_id": "syn_000001", "bogus": True}, "cart_add has no argument 'bogus'"),
    (
        "catalog_search",
        {"query": "lamp", "top_k": "5"},
        "catalog_search.top_k must be an integer in 1..500, got a string",
    ),
]


def test_rejection_names_the_field_the_bound_and_the_value(text):
    env = TA.environment_factory(text, family="PD", difficulty=1)()
    for name, args, want in BAD_CALLS:
        env.reset(seed=9)
        out = getattr(env, name)(**args)
        first, last = out.split("\n")
        assert json.loads(first) == {"error": {"code": "invalid_tool_call", "message": want + DONE}}
        assert last == "The conversation has ended (hard_fail)."
        assert env.done and env.get_reward() == -1.0  # still the §4.2 hard fail
        assert env.observation["reward_breakdown"]["hard_fail_kind"] == "invalid_tool_call"


def tool_contents(text, family: str, seed: int, turn: dict) -> dict[str, str]:
    s = SS.Session(text, compiler_options=SS.FAST_COMPILE)
    s.reset(family, 2, seed)
    obs = s.step(turn, "json")
    assert obs["done"] and obs["reward"] == -1.0
    return {
        m["name"]: json.loads(m["content"])["error"]["message"]
        for m in obs["new_messages"]
        if m["role"] == "tool"
    }


def test_every_call_of_a_rejected_turn_says_why_and_no_goal_shows(text):
    """The valid call of the turn names the other call's violation; the words are the same
    in two episodes of different families and goals: they come from the call alone."""
    bad = {"name": "catalog_search", "arguments": {"query": "lamp", "top_k": 1000}}
    turn = {"message": "", "tool_calls": [{"name": "cart_view", "arguments": {}}, bad]}
    reason = "catalog_search.top_k must be an integer in 1..500, got 1000"
    want = {
        "cart_view": f"The turn was rejected ({reason}); no call ran.",
        "catalog_search": reason + DONE,
    }
    assert tool_contents(text, "PD", 9, turn) == want
    assert tool_contents(text, "CART", 3, turn) == want
    answer = {"name": SC.SUBMIT_ANSWER, "arguments": {"answer": {"env": "CART", "bogus": 1}}}
    got = tool_contents(text, "CART", 3, {"message": "", "tool_calls": [answer]})
    assert got == {
        SC.SUBMIT_ANSWER: "submit_answer: the answer is invalid (unknown_key at $.answer: "
        "'bogus'); the turn was rejected and no call ran."
    }
