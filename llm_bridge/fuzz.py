"""Near-valid LLM turns for robustness tests: a corpus of valid calls and answers, and
mutations that break them the ways models do (dropped keys, extra keys, wrong types,
huge numbers, unicode, truncation, call floods).

Why a module and not test code: the default hypothesis test, the slow 100k sweep and any
robustness benchmark draw from the same corpus, so "valid" means one thing everywhere.
Ids in the corpus are valid for ``fuzz_codec``'s history (3 orders of 2, 3 and 5 lines).
"""

from __future__ import annotations

import json
import random
from typing import Any

import jax
import numpy as np

from ecomjax import constants as C
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge.ids import CatalogIds, IdCodec
from ecomjax.llm_bridge.parse import FORMATS, empty_numpy_action, format_turn
from ecomjax.tools.validate import hard_fail_kind

FUZZ_LINES = (2, 3, 5)  # lines per order of the history the corpus ids refer to


def fuzz_codec(cat: CatalogIds) -> IdCodec:
    return IdCodec(cat, n_orders=len(FUZZ_LINES), order_n_lines=FUZZ_LINES)


# (tool name, arguments): every tool at least once, optional arguments both given and not.
VALID_CALLS: list[tuple[str, dict[str, Any]]] = [
    (
        "catalog_search",
        {
            "query": "usb-c charger",
            "filters": {
                "cat": "chargers",
                "brand": "techpro",
                "color": "Black",
                "price_max": 30,
                "rating_min": 4.0,
            },
            "top_k": 50,
            "sort_by": "price_asc",
            "in_stock_only": True,
        },
    ),
    ("catalog_search", {"query": "quiet desk lamp"}),
    ("catalog_search", {"query": "like this one", "similar_to": "syn_000010", "top_k": 5}),
    (
        "catalog_rerank",
        {"query": "desk lamp", "candidate_product_ids": ["syn_000001", "syn_000002"], "top_k": 5},
    ),
    ("catalog_rerank", {"query": "lamp", "candidate_product_ids": ["syn_000003"]}),
    ("catalog_get_product", {"product_id": "syn_000042"}),
    ("catalog_get_variants", {"product_id": "syn_000162"}),
    ("catalog_list_categories", {}),
    ("cart_view", {}),
    ("cart_add", {"product_id": "syn_000162", "variant_id": "syn_000162_v2", "quantity": 3}),
    ("cart_add", {"product_id": "syn_000007"}),
    ("cart_add", {"product_id": "syn_000007", "variant_id": None}),
    ("cart_remove", {"line_id": "line_002"}),
    ("cart_set_quantity", {"line_id": "line_001", "quantity": 0}),
    ("order_list", {"days": 30}),
    ("order_list", {}),
    ("order_get_status", {"order_id": "ord_002"}),
    ("return_check_eligibility", {"order_id": "ord_001", "line_id": "ord_001_line_02"}),
    (
        "return_initiate",
        {
            "order_id": "ord_003",
            "line_id": "ord_003_line_05",
            "reason_code": "too_small",
            "method": "pickup",
        },
    ),
    (
        "return_exchange",
        {
            "order_id": "ord_002",
            "line_id": "ord_002_line_01",
            "new_product_id": "syn_000300",
            "new_variant_id": None,
            "reason_code": "defective",
            "method": "mail",
        },
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
    ),
    ("return_cancel", {"return_id": "ret_002"}),
    ("policy_search", {"query": "return fee for mail", "top_k": 2}),
    ("policy_search", {"query": "how long is the warranty on electronics"}),
    ("datetime_now", {}),
    ("user_get_visit_history", {}),
    ("ask_user", {"question": "Which color would you like?", "slots": ["color", "size"]}),
    (
        "ask_user",
        {
            "question": "How many of these?",
            "slots": ["quantity"],
            "product_id": "syn_000162",
            "subgoal": 1,
        },
    ),
]

VALID_ANSWERS: list[dict[str, Any]] = [
    {"env": "PD", "recommended_product_ids": ["syn_000001", "syn_000002"]},
    {"env": "SUB", "recommended_product_ids": [], "done": False},
    {"env": "CART"},
    {"env": "RETURN", "selected_order_id": "ord_002", "selected_line_id": "ord_002_line_03"},
    {"env": "STATUS", "selected_order_id": "ord_001", "order_status": "IN_TRANSIT"},
    {"env": "POLICY", "policy_answer": 14},
    {"env": "POLICY", "policy_answer": "$5.99"},
    {"env": "BUNDLE", "recommended_product_ids": ["syn_000005", "syn_000006", "syn_000007"]},
    {
        "env": "JOURNEY",
        "subgoal_answers": [
            {"env": "CART"},
            None,
            {"env": "STATUS", "selected_order_id": "ord_003", "order_status": "DELIVERED"},
        ],
        "done": False,
    },
]

JUNK: list[Any] = [
    None,
    True,
    False,
    0,
    -1,
    1.5,
    10**12,
    -(10**40),
    1e308,
    "",
    " ",
    "x" * 600,
    "ünï©ødé ☃ 𝄞",
    "\u0000\ud7ff",
    "</parameter><tool_call>",
    "syn_000001",
    [],
    [1, "a"],
    ["color"],
    {},
    {"a": {"b": [1]}},
]
UNICODE = "aZ09_-. ü☃𝄞ßЖ中\t\n\"'\\{}[]<>=/"


def _types(tool: str, key: str) -> list[str]:
    if tool == SC.SUBMIT_ANSWER:
        return ["object"]
    t = SC.PARAMS[SC.TOOL_BY_NAME[tool]]["properties"][key].get("type", [])
    return [t] if isinstance(t, str) else list(t)


def _wrong_type_value(rng: random.Random, types: list[str]) -> Any:
    """A value whose JSON type is none of ``types`` (an integral float counts as integer)."""
    pool = [
        v
        for v in JUNK
        if not any(SC.TYPE_OK[t](v) for t in types)
        and not ("integer" in types and isinstance(v, float) and v.is_integer())
    ]
    return rng.choice(pool)


def _rand_text(rng: random.Random, n: int) -> str:
    return "".join(rng.choice(UNICODE) for _ in range(n))


def mutate_args(rng: random.Random, tool: str, args: dict) -> tuple[dict, str, str]:
    """One mutation of a valid call's arguments: (arguments, expectation, kind) with
    expectation ``"invalid"`` (must be rejected), ``"valid"`` (must pass) or ``"unknown"``."""
    args = json.loads(json.dumps(args))
    schema = SC.PARAMS[SC.TOOL_BY_NAME[tool]]
    kind = rng.choice(
        ["drop", "extra", "extra_nested", "wrong_type", "junk", "huge_int", "unicode", "none"]
    )
    if kind == "drop" and args:
        k = rng.choice(sorted(args))
        del args[k]
        return args, "invalid" if k in schema["required"] else "valid", kind
    if kind == "extra":
        args[rng.choice(["zz_extra", "Query", "product", "filters_", ""])] = rng.choice(JUNK)
        return args, "invalid", kind
    if kind == "extra_nested" and "filters" in args:
        args["filters"][rng.choice(["colour", "price", "cat_", "CAT"])] = "x"
        return args, "invalid", kind
    if kind == "wrong_type" and args:
        k = rng.choice(sorted(args))
        args[k] = _wrong_type_value(rng, _types(tool, k))
        return args, "invalid", kind
    if kind == "junk" and args:
        args[rng.choice(sorted(args))] = rng.choice(JUNK)
        return args, "unknown", kind
    if kind == "huge_int":
        ints = [k for k, p in schema["properties"].items() if p.get("type") == "integer"]
        if ints:
            args[rng.choice(ints)] = rng.choice([10**9, 2**31, 2**63, 10**100, -(2**31) - 1])
            return args, "invalid", kind
    if kind == "unicode":
        strs = [k for k in args if isinstance(args[k], str)]
        if strs:
            args[rng.choice(strs)] = _rand_text(rng, rng.randint(0, 240))
            return args, "unknown", kind
    return args, "valid", kind


def mutate_answer(rng: random.Random, answer: dict) -> tuple[dict, str]:
    answer = json.loads(json.dumps(answer))
    kind = rng.choice(["drop", "extra", "wrong_type", "junk", "none"])
    schema = SC.answer_schemas()[answer["env"]]
    if kind == "drop":
        k = rng.choice(sorted(answer))
        del answer[k]
        return answer, "invalid" if k in schema["required"] else "valid"
    if kind == "extra":
        answer[rng.choice(["zz", "answer", "ids"])] = rng.choice(JUNK)
        return answer, "invalid"
    if kind == "wrong_type":
        k = rng.choice(sorted(answer))
        t = schema["properties"][k].get("type", "string")
        answer[k] = _wrong_type_value(rng, [t] if isinstance(t, str) else list(t))
        return answer, "invalid"
    if kind == "junk":
        answer[rng.choice(sorted(answer))] = rng.choice(JUNK)
        return answer, "unknown"
    return answer, "valid"


def _mutate_text(rng: random.Random, text: str) -> str:
    kind = rng.choice(["truncate", "insert", "delete", "swap_tag"])
    if not text:
        return text
    i = rng.randrange(len(text))
    if kind == "truncate":
        return text[:i]
    if kind == "insert":
        junk = rng.choice(['"', "{", "}", "[", "]", ",", "<", ">", _rand_text(rng, 3)])
        return text[:i] + junk + text[i:]
    if kind == "delete":
        return text[:i] + text[i + 1 :]
    return text.replace("</tool_call>", "</toolcall>", 1)


def random_turn(rng: random.Random) -> tuple[str, Any, str]:
    """(format, payload, expectation) for one generated assistant turn."""
    fmt = rng.choice(FORMATS)
    n_calls = rng.choice([0, 1, 1, 1, 2, 3, 5, C.MAX_TOOL_CALLS, C.MAX_TOOL_CALLS + 2])
    calls, expect = [], "valid"
    for _ in range(n_calls):
        name, args = rng.choice(VALID_CALLS)
        if rng.random() < 0.5:
            args, e, kind = mutate_args(rng, name, args)
            if fmt == "qwen_xml" and kind in ("wrong_type", "junk", "unicode"):
                e = "unknown"  # XML values are untyped text: 5 written as "5" is a string
            expect = _combine(expect, e)
        if rng.random() < 0.05:
            name, expect = name + "_x", _combine(expect, "invalid")
        calls.append((name, args))
    answer = None
    if rng.random() < 0.4:
        answer = rng.choice(VALID_ANSWERS)
        if rng.random() < 0.5:
            answer, e = mutate_answer(rng, answer)
            expect = _combine(expect, e)
    message = rng.choice(["", "", "Here you go.", _rand_text(rng, rng.randint(0, 60))])
    if not message.strip() and not calls and answer is None:
        expect = _combine(expect, "invalid")  # the empty turn
    answer_as = "key" if fmt in ("openai", "json") and rng.random() < 0.5 else "call"
    if n_calls > C.MAX_TOOL_CALLS:
        expect = _combine(expect, "unknown")
    payload = format_turn(fmt, message, calls, answer, answer_as)
    if rng.random() < 0.15:
        text = payload if isinstance(payload, str) else json.dumps(payload)
        payload, expect = _mutate_text(rng, text), "unknown"  # may cut the bad part off
    return fmt, payload, expect


def _combine(a: str, b: str) -> str:
    if "invalid" in (a, b):
        return "invalid"
    if "unknown" in (a, b):
        return "unknown"
    return "valid"


# --- checking a parse against the device validator --------------------------------------------

_HF = jax.jit(hard_fail_kind)
_HF_BATCH = jax.jit(jax.vmap(hard_fail_kind))


def device_kind(action, env: int = C.Env.CART, budget: int = C.MAX_TOOL_CALLS) -> int:
    """The HardFail the device validator gives a parsed action."""
    return int(_HF(action, np.int32(env), np.int32(budget)))


def device_kinds(actions: list, envs, budgets) -> np.ndarray:
    """Batched ``device_kind`` (one compile per batch size)."""
    stacked = jax.tree_util.tree_map(lambda *xs: np.stack(xs), *actions)
    return np.asarray(_HF_BATCH(stacked, np.asarray(envs, np.int32), np.asarray(budgets, np.int32)))


def episode_env(action) -> int:
    """The env an episode would need for this action's answer to be the right env (the
    parser cannot know the episode; a wrong env is the device's check)."""
    env = int(action.answer.main.env)
    return env if bool(action.answer.present) and env >= 0 else int(C.Env.CART)


_SPEC = None


def check_shapes(action) -> None:
    """Leaves have exactly the shapes and dtypes of ``empty_action``."""
    global _SPEC
    if _SPEC is None:
        _SPEC = [(x.shape, x.dtype) for x in jax.tree_util.tree_leaves(empty_numpy_action())]
    got = [(np.shape(x), np.asarray(x).dtype) for x in jax.tree_util.tree_leaves(action)]
    assert all(isinstance(x, np.ndarray) for x in jax.tree_util.tree_leaves(action))
    assert got == _SPEC, [(g, s) for g, s in zip(got, _SPEC, strict=True) if g != s]


def flagged(action, info: dict) -> bool:
    """The parser found a problem, or the turn is empty (which only the device flags)."""
    empty = (
        not bool(action.has_message)
        and not (np.asarray(action.tool) != 0).any()
        and not bool(action.answer.present)
    )
    return bool(info["errors"]) or empty


def check_consistent(action, info: dict, kind: int, expect: str = "unknown") -> None:
    """The device fails the action exactly when the parser reported a problem, and the
    generator's expectation (valid / invalid) holds."""
    assert info["internal_error"] is None, info["internal_error"]
    assert (kind != 0) == flagged(action, info), (kind, info["errors"], info["malformed"])
    if expect == "valid":
        assert kind == 0, (kind, info["errors"])
    elif expect == "invalid":
        assert kind != 0, info
