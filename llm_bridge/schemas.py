"""OpenAI function-format schemas of the 19 tools (SPEC §4.7) and the answer objects (§4.6).

Why generated from tables: the same tables drive the schemas an LLM is shown, the
parser's validation (``check``) and the argument-to-array encoding in ``parse.py``, so
the three can never drift apart. ``check`` implements exactly the JSON-Schema subset these
schemas use (type, enum, minimum/maximum, minLength/maxLength, minItems/maxItems,
uniqueItems, required, properties, additionalProperties false, anyOf), with jsonschema's
conventions: booleans are not numbers, an integral float is an integer.
"""

from __future__ import annotations

import functools
import math
import re
from typing import Any

from ecomjax import constants as C
from ecomjax.order_history import METHOD_NAMES, REASON_NAMES, OrderStatus
from ecomjax.registry import FAMILIES, Family

T = C.Tool
NAME_RE = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
SUBMIT_ANSWER = "submit_answer"
MAX_JSON_DEPTH = 32  # deeper than any schema here (answers reach depth 4)

SORT_NAMES: tuple[str, ...] = tuple(s.name.lower() for s in C.SortBy)
STATUS_NAMES: tuple[str, ...] = tuple(s.name for s in OrderStatus)
DISC_FILTER_NAMES: tuple[str, ...] = tuple(C.ATTR_NAMES[a] for a in C.DISC_FILTERS)
NUM_FILTER_NAMES: tuple[str, ...] = tuple(n for n, _, _ in C.NUMERIC_FILTERS)


# --- schema builders -----------------------------------------------------------------------


def s_str(desc: str, lo: int | None = None, hi: int | None = None) -> dict:
    out: dict[str, Any] = {"type": "string", "description": desc}
    if lo is not None:
        out["minLength"] = lo
    if hi is not None:
        out["maxLength"] = hi
    return out


def s_int(desc: str, lo: int, hi: int, default: int | None = None) -> dict:
    out: dict[str, Any] = {"type": "integer", "description": desc, "minimum": lo, "maximum": hi}
    if default is not None:
        out["default"] = default
    return out


def s_enum(desc: str, values: tuple[str, ...], default: str | None = None) -> dict:
    out: dict[str, Any] = {"type": "string", "description": desc, "enum": list(values)}
    if default is not None:
        out["default"] = default
    return out


def s_obj(props: dict[str, dict], required: tuple[str, ...] = ()) -> dict:
    return {
        "type": "object",
        "additionalProperties": False,
        "required": list(required),
        "properties": props,
    }


PRODUCT_ID = s_str("A product id returned by a tool, e.g. syn_000162.", 1)
ORDER_ID = s_str("An order id, e.g. ord_001.", 1)
ORDER_LINE_ID = s_str("An order line id, e.g. ord_001_line_01.", 1)
QUERY = s_str("Free-text query.", 1, 200)
REASON = s_enum("Why the customer returns the item.", REASON_NAMES)
METHOD = s_enum("How the customer returns the item.", METHOD_NAMES)

FILTERS = s_obj(
    {
        **{
            n: {"type": "string", "description": f"Exact {n} (case-insensitive)."}
            for n in DISC_FILTER_NAMES
        },
        **{
            n: {"type": "number", "minimum": 0, "description": f"Inclusive {n.replace('_', ' ')}."}
            for n in NUM_FILTER_NAMES
        },
    }
)

# (tool, description, properties, required): SPEC §4.7 in table form.
TOOL_TABLE: tuple[tuple[T, str, dict[str, dict], tuple[str, ...]], ...] = (
    (
        T.CATALOG_SEARCH,
        "Search the catalog; filters apply before ranking.",
        {
            "query": QUERY,
            "filters": {**FILTERS, "description": "Attribute filters; unknown keys are errors."},
            "top_k": s_int("How many results.", 1, 500, 20),
            "sort_by": s_enum("Result order.", SORT_NAMES, "relevance"),
            "similar_to": s_str("Rank by similarity to this product id instead.", 1),
            "in_stock_only": {
                "type": "boolean",
                "description": "Keep only products in stock now.",
                "default": False,
            },
        },
        ("query",),
    ),
    (
        T.CATALOG_RERANK,
        "Rank given products by similarity to a query.",
        {
            "query": QUERY,
            "candidate_product_ids": {
                "type": "array",
                "description": "Product ids to rank.",
                "items": {"type": "string"},
                "minItems": 1,
                "maxItems": 100,
            },
            "top_k": s_int("How many results.", 1, 100, 10),
        },
        ("query", "candidate_product_ids"),
    ),
    (T.CATALOG_GET_PRODUCT, "Full product record.", {"product_id": PRODUCT_ID}, ("product_id",)),
    (T.CATALOG_GET_VARIANTS, "Variants of a product.", {"product_id": PRODUCT_ID}, ("product_id",)),
    (T.CATALOG_LIST_CATEGORIES, "All categories with display names and counts.", {}, ()),
    (T.CART_VIEW, "Current cart.", {}, ()),
    (
        T.CART_ADD,
        "Add a product (optionally a specific variant) to the cart.",
        {
            "product_id": PRODUCT_ID,
            "variant_id": {"type": ["string", "null"], "description": "A variant id, or null."},
            "quantity": s_int("Units to add.", 1, 99, 1),
        },
        ("product_id",),
    ),
    (
        T.CART_REMOVE,
        "Remove a cart line.",
        {"line_id": s_str("A cart line id, e.g. line_001.", 1)},
        ("line_id",),
    ),
    (
        T.CART_SET_QUANTITY,
        "Set a line's quantity (0 removes it).",
        {
            "line_id": s_str("A cart line id, e.g. line_001.", 1),
            "quantity": s_int("New quantity.", 0, 99),
        },
        ("line_id", "quantity"),
    ),
    (
        T.ORDER_LIST,
        "Orders of the last N days.",
        {"days": s_int("Look-back window in days.", 1, 365, 90)},
        (),
    ),
    (T.ORDER_GET_STATUS, "Status and lines of one order.", {"order_id": ORDER_ID}, ("order_id",)),
    (
        T.RETURN_CHECK_ELIGIBILITY,
        "Can this line be returned?",
        {"order_id": ORDER_ID, "line_id": ORDER_LINE_ID},
        ("order_id", "line_id"),
    ),
    (
        T.RETURN_INITIATE,
        "Start a return.",
        {"order_id": ORDER_ID, "line_id": ORDER_LINE_ID, "reason_code": REASON, "method": METHOD},
        ("order_id", "line_id", "reason_code", "method"),
    ),
    (
        T.RETURN_EXCHANGE,
        "Return a line and order a replacement.",
        {
            "order_id": ORDER_ID,
            "line_id": ORDER_LINE_ID,
            "new_product_id": PRODUCT_ID,
            "new_variant_id": {
                "type": ["string", "null"],
                "description": "Variant of the replacement, or null.",
            },
            "reason_code": REASON,
            "method": METHOD,
        },
        ("order_id", "line_id", "new_product_id", "reason_code", "method"),
    ),
    (
        T.RETURN_CANCEL,
        "Cancel a return or exchange.",
        {"return_id": s_str("A return id, e.g. ret_001.", 1)},
        ("return_id",),
    ),
    (
        T.POLICY_SEARCH,
        "Look up store policy rules.",
        {"query": QUERY, "top_k": s_int("How many topics.", 1, 10, 3)},
        ("query",),
    ),
    (T.DATETIME_NOW, "Current date and time.", {}, ()),
    (T.USER_GET_VISIT_HISTORY, "Products the customer viewed recently.", {}, ()),
    (
        T.ASK_USER,
        "Ask the customer for specific information.",
        {
            "question": s_str("The question, in words.", 1, 500),
            "slots": {
                "type": "array",
                "description": "What the question asks about.",
                "items": {"type": "string", "enum": list(C.SLOT_NAMES)},
                "minItems": 1,
                "maxItems": len(C.SLOT_NAMES),
                "uniqueItems": True,
            },
            "product_id": s_str("Scope the question to this product.", 1),
            "subgoal": s_int("Scope the question to this sub-goal (JOURNEY).", 0, 4),
        },
        ("question", "slots"),
    ),
)

TOOL_BY_NAME: dict[str, T] = {C.TOOL_NAMES[t]: t for t, *_ in TOOL_TABLE}
PARAMS: dict[T, dict] = {t: s_obj(props, req) for t, _, props, req in TOOL_TABLE}

# Integer arguments whose range the device validator checks from the arrays
# (``ecomjax.tools.validate.call_valid``): the parser encodes them as given, so array
# agents and LLM agents are judged by one rule. Every other violation is text-only.
DEVICE_RANGE: frozenset[tuple[T, str]] = frozenset(
    {
        (T.CATALOG_SEARCH, "top_k"),
        (T.CATALOG_RERANK, "top_k"),
        (T.CART_ADD, "quantity"),
        (T.CART_SET_QUANTITY, "quantity"),
        (T.ORDER_LIST, "days"),
        (T.POLICY_SEARCH, "top_k"),
    }
)


def tool_schema(tool: T) -> dict:
    """One tool as ``{"type": "function", "function": {name, description, parameters}}``."""
    desc = next(d for t, d, _, _ in TOOL_TABLE if t == tool)
    fn = {"name": C.TOOL_NAMES[tool], "description": desc, "parameters": PARAMS[tool]}
    return {"type": "function", "function": fn}


# --- answers (SPEC §4.6) ---------------------------------------------------------------------

# The answer keys a family may use (``Family.answer``), each with the schema its value
# takes; the family's descriptor gives the description the model reads. The keys are fixed
# because every family writes the same AnswerFields arrays (parse.py fills them by key).
ANSWER_KEYS: dict[str, dict] = {
    "recommended_product_ids": {
        "type": "array",
        "items": {"type": "string"},
        "minItems": 0,
        "maxItems": C.MAX_ANSWER_IDS,
    },
    "selected_order_id": {"type": "string"},
    "selected_line_id": {"type": "string"},
    "order_status": {"type": "string", "enum": list(STATUS_NAMES)},
    "policy_answer": {"type": ["number", "string"]},
}
DONE = {"type": "boolean", "description": "End the episode (default true).", "default": True}


def answer_fields(fam: Family) -> dict[str, dict]:
    """The answer object's properties beyond ``env`` for one family, from its descriptor."""
    out = {}
    for key, desc in fam.answer:
        if key not in ANSWER_KEYS:
            known = ", ".join(ANSWER_KEYS)
            raise ValueError(f"{fam.name}: unknown answer key {key!r}; known: {known}")
        schema = ANSWER_KEYS[key]  # the description follows the type, as the model reads it
        out[key] = {"type": schema["type"], "description": desc}
        out[key].update((k, v) for k, v in schema.items() if k != "type")
    return out


def _answer_obj(env: str, fields: dict[str, dict], with_done: bool) -> dict:
    props = {"env": {"type": "string", "enum": [env]}, **fields}
    if with_done:
        props["done"] = DONE
    return s_obj(props, ("env", *fields))


def _journey_fields(subs: dict[str, dict]) -> dict[str, dict]:
    return {
        "subgoal_answers": {
            "type": "array",
            "description": "One entry per sub-goal in order: its answer object, or null.",
            "items": {"anyOf": [*subs.values(), {"type": "null"}]},
            "minItems": 1,
            "maxItems": C.MAX_SUBGOALS,
        }
    }


def sub_answer_schemas() -> dict[str, dict]:
    """Env name -> the answer object of a JOURNEY sub-goal (no ``done``). Do not mutate."""
    return _schemas(tuple(FAMILIES.values()))[1]


def answer_schemas() -> dict[str, dict]:
    """Env name -> the answer object of every registered family, in env order, read from
    the descriptors (a family added with ``registry.register`` has one). Do not mutate."""
    return _schemas(tuple(FAMILIES.values()))[0]


@functools.lru_cache(maxsize=8)
def _schemas(fams: tuple[Family, ...]) -> tuple[dict[str, dict], dict[str, dict]]:
    subs = {
        f.name: _answer_obj(f.name, answer_fields(f), with_done=False)
        for f in fams
        if f.fill is not None
    }
    top = {
        f.name: _answer_obj(
            f.name,
            _journey_fields(subs) if f.env == C.Env.JOURNEY else answer_fields(f),
            with_done=True,
        )
        for f in fams
    }
    return top, subs


def answer_schema(env: str | None = None) -> dict:
    """The answer object of one env, or (``None``) any env's, as an anyOf."""
    schemas = answer_schemas()
    if env is not None:
        return schemas[env]
    return {"anyOf": list(schemas.values())}


def submit_answer_schema(env: str | None = None) -> dict:
    """The optional ``submit_answer(answer)`` function of SPEC §4.1 (not a tool call)."""
    params = s_obj(
        {"answer": {**answer_schema(env), "description": "The answer object."}}, ("answer",)
    )
    fn = {
        "name": SUBMIT_ANSWER,
        "description": "Submit the final answer (done=false stores it and continues).",
        "parameters": params,
    }
    return {"type": "function", "function": fn}


def all_tools(with_submit: bool = False, env: str | None = None) -> list[dict]:
    """The 19 tool schemas in Tool order, optionally followed by ``submit_answer``."""
    out = [tool_schema(t) for t, *_ in TOOL_TABLE]
    if with_submit:
        out.append(submit_answer_schema(env))
    return out


# --- validation (the subset above) -----------------------------------------------------------


def is_int(x: object) -> bool:
    """JSON-Schema integer: an int, or an integral finite float; never a bool."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return isinstance(x, float) and math.isfinite(x) and x.is_integer()


def is_num(x: object) -> bool:
    """A finite JSON number (NaN / inf can only come from overflow, never valid JSON)."""
    if isinstance(x, bool):
        return False
    if isinstance(x, int):
        return True
    return isinstance(x, float) and math.isfinite(x)


TYPE_OK = {
    "string": lambda x: isinstance(x, str),
    "integer": is_int,
    "number": is_num,
    "boolean": lambda x: isinstance(x, bool),
    "null": lambda x: x is None,
    "object": lambda x: isinstance(x, dict),
    "array": lambda x: isinstance(x, list),
}


def _canon(x: object) -> object:
    """Hashable form for uniqueItems (our arrays hold scalars only)."""
    return (type(x).__name__ if not is_num(x) else "num", x)


def check(value: object, schema: dict, path: str = "$", depth: int = 0) -> str | None:
    """The first violation of ``schema`` as ``"kind at path: detail"``, or None.

    Kinds: type, enum, length, range, items, unique, missing, unknown_key, depth. Checks
    run cheapest first and stop at the first failure, so a huge value costs O(1) to reject.
    """
    if depth > MAX_JSON_DEPTH:
        return f"depth at {path}: nested too deeply"
    if "anyOf" in schema:
        for sub in schema["anyOf"]:
            if check(value, sub, path, depth) is None:
                return None
        return f"type at {path}: matches none of the allowed forms"
    types = schema.get("type")
    if types is not None:
        types = [types] if isinstance(types, str) else types
        if not any(TYPE_OK[t](value) for t in types):
            return f"type at {path}: expected {'/'.join(types)}, got {type(value).__name__}"
    if "enum" in schema and value not in schema["enum"]:
        return f"enum at {path}: {str(value)[:40]!r} is not one of the allowed values"
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0) or len(value) > schema.get("maxLength", 1e18):
            return f"length at {path}: {len(value)} characters"
    elif is_num(value):
        if value < schema.get("minimum", -math.inf) or value > schema.get("maximum", math.inf):
            return f"range at {path}: {str(value)[:40]}"
    elif isinstance(value, list):
        if len(value) < schema.get("minItems", 0) or len(value) > schema.get("maxItems", 1e18):
            return f"items at {path}: {len(value)} items"
        item_schema = schema.get("items")
        if item_schema is not None:
            for i, x in enumerate(value):
                err = check(x, item_schema, f"{path}[{i}]", depth + 1)
                if err:
                    return err
        if schema.get("uniqueItems") and len({_canon(x) for x in value}) != len(value):
            return f"unique at {path}: repeated items"
    elif isinstance(value, dict):
        props = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            for k in value:
                if k not in props:
                    return f"unknown_key at {path}: {str(k)[:40]!r}"
        for k in schema.get("required", ()):
            if k not in value:
                return f"missing at {path}: {k!r}"
        for k, x in value.items():
            if k in props:
                err = check(x, props[k], f"{path}.{k}", depth + 1)
                if err:
                    return err
    return None


def iter_object_schemas(schema: object):
    """Every dict in a schema tree that declares ``type: object`` (for the tests)."""
    stack = [schema]
    while stack:
        s = stack.pop()
        if isinstance(s, dict):
            if s.get("type") == "object" or (
                isinstance(s.get("type"), list) and "object" in s["type"]
            ):
                yield s
            stack.extend(s.values())
        elif isinstance(s, list):
            stack.extend(s)
