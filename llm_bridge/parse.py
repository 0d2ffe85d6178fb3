"""LLM output -> one structured ``Action`` (SPEC §4.1, §4.2), on the host in numpy.

``parse_turn`` reads one assistant turn in one of four formats:

- ``"openai"``: an assistant message dict ``{"content", "tool_calls": [{"id", "type",
  "function": {"name", "arguments"}}]}`` (``arguments`` a JSON string or an object), plus
  an optional ``"answer"`` key;
- ``"hermes"``: text with ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` blocks
  (Qwen2.5 / Hermes);
- ``"qwen_xml"``: text with ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>
  </function></tool_call>`` blocks (Qwen3-Coder); values are typed by the tool's schema;
- ``"json"``: the SPEC §4.1 turn object ``{"message", "tool_calls": [{"id", "name",
  "arguments"}], "answer"}``, as a dict or its JSON text.

The answer comes as a ``submit_answer(answer)`` call (any format) or an ``answer`` key
(openai, json). ``<think>...</think>`` reasoning is dropped from text formats.

Who flags what (the device validator, ``ecomjax.tools.validate``, checks everything the
arrays can show, so array agents and LLM agents are judged by one rule):

- ``Action.malformed`` (turn level): input over ``MAX_TEXT_CHARS``, more than
  ``MAX_PARSED_CALLS`` calls, JSON nested deeper than ``MAX_JSON_DEPTH``, unparseable JSON
  or tool-call markup, a turn that is not an object, an unknown top-level key, two answers.
  The empty turn is left to the device (it sees no message, no call and no answer).
- ``Action.bad_args[i]`` (invalid_tool_call): unknown tool, a call envelope that is not an
  object or has unknown keys, arguments that are not an object / not valid JSON, missing
  required argument, unknown key at any depth, wrong JSON type, enum / length / item-count
  violations, a range violation of a non-integer or device-unchecked argument, and an
  integer that does not fit int32. Integer ranges the device checks (top_k, quantity,
  days) are encoded as given and left to it.
- An unknown tool gets the id ``UNKNOWN_TOOL`` (= N_TOOLS), which the device rejects too.
- Calls beyond ``MAX_TOOL_CALLS``: the first ``MAX_TOOL_CALLS`` fill every slot and
  ``Action.n_calls`` carries the true count, so the device fails the budget even at
  B_tool = MAX_TOOL_CALLS (d = 20); a violation in an overflowing call is reported on the
  last slot. ``info["budget_overflow"]`` says the same for host drivers.
- An answer that fails its env's schema (§4.6) gets ``answer.main.env = -2``, which the
  device rejects as invalid_answer. Ids the catalog, history or cart do not know map to the
  device's unknown codes (business errors, not hard fails); see ``ids.py``.

No exception escapes ``parse_turn``: an internal error yields a malformed action with
``info["internal_error"]`` set, so a host misconfiguration is visible rather than silent.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np

from ecomjax import constants as C
from ecomjax import policy_rules as P
from ecomjax.catalog.embedder import embed_texts
from ecomjax.llm_bridge import schemas as SC
from ecomjax.llm_bridge.ids import IdCodec
from ecomjax.registry import family
from ecomjax.types import CALL_FIELDS, Action, empty_action

T = C.Tool
B = C.MAX_TOOL_CALLS
FORMATS = ("openai", "hermes", "qwen_xml", "json")
MAX_TEXT_CHARS = 1 << 18  # one turn's text (content plus argument strings)
MAX_PARSED_CALLS = 64  # calls looked at in one turn, counted before any JSON is parsed
MAX_NODES = 1 << 16  # values in an already-parsed message (openai / json dict input)
MAX_JSON_DEPTH = SC.MAX_JSON_DEPTH
UNKNOWN_TOOL = C.N_TOOLS  # outside 0..N_TOOLS-1: the device rejects it as unknown
INVALID_ENV = -2  # answer.main.env of an answer that fails its schema
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_BIG_INT_DIGITS = 30  # longer integer literals are out of every range: parse them cheaply

EmbedFn = Callable[[Sequence[str]], np.ndarray]


class Malformed(Exception):
    """A turn-level problem (SPEC §4.2 malformed_action)."""


class _Absent:
    """Marker for an argument that was not given."""


ABSENT = _Absent()


# --- bounded JSON ----------------------------------------------------------------------------

_STRING_RE = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_OPEN = {ord("{"), ord("[")}


def _text_depth_ok(s: str) -> bool:
    """Bracket depth of JSON text (string literals removed) is at most MAX_JSON_DEPTH.

    Why before parsing: ``json.loads`` recurses per level, so 10^5 nested brackets would
    cost a deep C recursion; this scan is linear and vectorised."""
    if s.count("[") + s.count("{") <= MAX_JSON_DEPTH:
        return True
    bare = _STRING_RE.sub('""', s)
    b = np.frombuffer(bare.encode("utf-8", "surrogatepass"), np.uint8)
    step = np.isin(b, (0x7B, 0x5B)).astype(np.int32) - np.isin(b, (0x7D, 0x5D)).astype(np.int32)
    return b.size == 0 or int(np.cumsum(step).max()) <= MAX_JSON_DEPTH


def _pairs(pairs: list[tuple[str, Any]]) -> dict:
    out = dict(pairs)
    if len(out) != len(pairs):
        raise ValueError("duplicate key")
    return out


def _parse_int(s: str) -> int:
    if len(s) > _BIG_INT_DIGITS:  # out of every range; avoids int() on 10^5 digits
        return -(10**_BIG_INT_DIGITS) if s.startswith("-") else 10**_BIG_INT_DIGITS
    return int(s)


def _reject_constant(s: str) -> Any:
    raise ValueError(f"{s} is not JSON")


def loads(s: str, max_chars: int = MAX_TEXT_CHARS) -> Any:
    """Strict, bounded ``json.loads``: no NaN/Infinity, no duplicate keys, capped length
    (``max_chars``: a turn's cap by default; the server passes its body cap) and depth.
    Raises ValueError on anything else."""
    if len(s) > max_chars:
        raise ValueError(f"too long: over {max_chars} characters")
    if not _text_depth_ok(s):
        raise ValueError("nested too deeply")
    return json.loads(
        s, object_pairs_hook=_pairs, parse_int=_parse_int, parse_constant=_reject_constant
    )


def _obj_bounded(x: Any) -> bool:
    """An already-parsed value has at most MAX_NODES values and MAX_JSON_DEPTH levels
    (also stops on reference cycles, which a dict built in Python may have)."""
    stack = [(x, 0)]
    nodes = 0
    while stack:
        v, d = stack.pop()
        nodes += 1
        if nodes > MAX_NODES or d > MAX_JSON_DEPTH:
            return False
        if isinstance(v, dict):
            if len(v) > MAX_NODES:
                return False
            stack.extend((y, d + 1) for y in v.values())
        elif isinstance(v, (list, tuple)):
            if len(v) > MAX_NODES:
                return False
            stack.extend((y, d + 1) for y in v)
        elif isinstance(v, str) and len(v) > MAX_TEXT_CHARS:
            return False
    return True


# --- raw calls from each format ----------------------------------------------------------


class RawCall:
    """One call as written: name and arguments not yet checked."""

    __slots__ = ("id", "name", "args", "envelope_error")

    def __init__(self, id_: Any, name: Any, args: Any, envelope_error: str | None = None):
        self.id, self.name, self.args, self.envelope_error = id_, name, args, envelope_error


class Raw:
    """What a format extractor hands on: message text, calls, and the ``answer`` key."""

    __slots__ = ("message", "calls", "answer")

    def __init__(self, message: str, calls: list[RawCall], answer: Any = ABSENT):
        self.message, self.calls, self.answer = message, calls, answer


def _as_text(x: Any) -> str:
    """The text of a text-format turn (a string, or a message dict with ``content``)."""
    if isinstance(x, dict):
        if x.get("tool_calls"):  # a host mix-up, not the model's fault: never drop calls
            raise ValueError("a message with parsed tool_calls: use fmt='openai'")
        x = _content_text(x.get("content"))
    if not isinstance(x, str):
        raise Malformed("the turn is not text")
    if len(x) > MAX_TEXT_CHARS:
        raise Malformed(f"the turn is longer than {MAX_TEXT_CHARS} characters")
    return x


def _drop_thinking(text: str) -> str:
    """Reasoning is not part of the action: drop everything up to the last ``</think>``
    and any unclosed ``<think>`` to the end."""
    if "</think>" in text:
        text = text.rsplit("</think>", 1)[1]
    if "<think>" in text:
        text = text.split("<think>", 1)[0]
    return text


def _blocks(text: str, open_tag: str, close_tag: str) -> tuple[str, list[str]]:
    """(text outside the blocks, block bodies); unbalanced tags are malformed."""
    if text.count(open_tag) > MAX_PARSED_CALLS:
        raise Malformed(f"more than {MAX_PARSED_CALLS} tool calls")
    outside: list[str] = []
    bodies: list[str] = []
    pos = 0
    while True:
        start = text.find(open_tag, pos)
        stray = text.find(close_tag, pos)
        if stray != -1 and (start == -1 or stray < start):
            raise Malformed(f"{close_tag} without {open_tag}")
        if start == -1:
            outside.append(text[pos:])
            break
        end = text.find(close_tag, start + len(open_tag))
        if end == -1:
            raise Malformed(f"unclosed {open_tag} (truncated output?)")
        body = text[start + len(open_tag) : end]
        if open_tag in body:
            raise Malformed(f"nested {open_tag}")
        outside.append(text[pos:start])
        bodies.append(body)
        pos = end + len(close_tag)
    return "".join(outside), bodies


def extract_hermes(x: Any) -> Raw:
    text = _drop_thinking(_as_text(x))
    message, bodies = _blocks(text, "<tool_call>", "</tool_call>")
    calls = []
    for body in bodies:
        try:
            obj = loads(body.strip())
        except (ValueError, RecursionError) as e:
            raise Malformed(f"unparseable tool call JSON: {e}") from None
        if not isinstance(obj, dict):
            raise Malformed("a tool call is not a JSON object")
        extra = [k for k in obj if k not in ("name", "arguments")]
        err = f"unknown call key {extra[0]!r}" if extra else None
        calls.append(RawCall(None, obj.get("name"), obj.get("arguments"), err))
    return Raw(message, calls)


_FUNC_RE = re.compile(r"\s*<function=([^>\n]*)>(.*?)(?:</function>\s*)?\Z", re.DOTALL)
_PARAM_RE = re.compile(r"<parameter=([^>\n]*)>")


def _param_types(name: str, key: str) -> list[str] | None:
    tool = SC.TOOL_BY_NAME.get(name)
    if name == SC.SUBMIT_ANSWER:
        return ["object"] if key == "answer" else None
    if tool is None:
        return None
    prop = SC.PARAMS[tool]["properties"].get(key)
    if prop is None:
        return None
    t = prop.get("type", [])
    return [t] if isinstance(t, str) else list(t)


def _xml_value(text: str, types: list[str] | None) -> Any:
    """A parameter's raw text typed by its schema (strings stay text, others are JSON).
    A value that does not convert stays a string, so the schema check reports its type."""
    v = text.strip()
    if types is None or types == ["string"]:
        return v
    if "null" in types and v in ("null", "None"):
        return None
    if types == ["boolean"] and v.lower() in ("true", "false"):
        return v.lower() == "true"
    if "string" in types:
        return v
    try:
        return loads(v)
    except (ValueError, RecursionError):
        return v


def extract_qwen_xml(x: Any) -> Raw:
    text = _drop_thinking(_as_text(x))
    message, bodies = _blocks(text, "<tool_call>", "</tool_call>")
    calls = []
    for body in bodies:
        m = _FUNC_RE.match(body)
        if m is None or "<function=" in m.group(2):
            raise Malformed("a tool call without exactly one <function=NAME> element")
        name, inner = m.group(1).strip(), m.group(2)
        params = list(_PARAM_RE.finditer(inner))
        args: dict[str, Any] = {}
        err = None
        if inner[: params[0].start() if params else len(inner)].strip():
            err = "text outside <parameter> elements"
        for k, p in enumerate(params):
            stop = params[k + 1].start() if k + 1 < len(params) else len(inner)
            chunk = inner[p.end() : stop]
            close = chunk.find("</parameter>")
            if close != -1:
                if chunk[close + len("</parameter>") :].strip():
                    err = err or "text outside <parameter> elements"
                chunk = chunk[:close]
            key = p.group(1).strip()
            if key in args:
                err = err or f"parameter {key!r} given twice"
            args[key] = _xml_value(chunk, _param_types(name, key))
        calls.append(RawCall(None, name, args, err))
    return Raw(message, calls)


_OPENAI_KEYS = frozenset(
    {
        "role",
        "content",
        "tool_calls",
        "answer",
        "name",
        "refusal",
        "annotations",
        "audio",
        "function_call",
        "reasoning_content",
        "reasoning",
    }
)


def _load_message(x: Any) -> dict:
    if isinstance(x, str):
        try:
            x = loads(x)
        except (ValueError, RecursionError) as e:
            raise Malformed(f"unparseable JSON: {e}") from None
    if not isinstance(x, dict):
        raise Malformed("the turn is not a JSON object")
    if not _obj_bounded(x):
        raise Malformed("the turn is too large or nested too deeply")
    return x


def _content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (isinstance(part, dict) and part.get("type") == "text"):
                raise Malformed("content holds a part that is not text")
            if set(part) - {"type", "text"} or not isinstance(part.get("text"), str):
                raise Malformed("a text part is not {type, text}")
            parts.append(part["text"])
        return "".join(parts)
    raise Malformed("content is not a string")


def _calls_list(calls: Any) -> list:
    if calls is None:
        return []
    if not isinstance(calls, list):
        raise Malformed("tool_calls is not an array")
    if len(calls) > MAX_PARSED_CALLS:
        raise Malformed(f"more than {MAX_PARSED_CALLS} tool calls")
    return calls


def _total_chars(message: str, calls: list[RawCall]) -> None:
    n = len(message) + sum(len(c.args) for c in calls if isinstance(c.args, str))
    if n > MAX_TEXT_CHARS:
        raise Malformed(f"the turn is longer than {MAX_TEXT_CHARS} characters")


def extract_openai(x: Any) -> Raw:
    msg = _load_message(x)
    unknown = [k for k in msg if k not in _OPENAI_KEYS]
    if unknown:
        raise Malformed(f"unknown top-level key {str(unknown[0])[:40]!r}")
    if msg.get("role", "assistant") != "assistant":
        raise Malformed("role is not assistant")
    if msg.get("function_call") is not None:
        raise Malformed("legacy function_call is not supported; use tool_calls")
    message = _content_text(msg.get("content"))
    calls = []
    for c in _calls_list(msg.get("tool_calls")):
        if not isinstance(c, dict):
            calls.append(RawCall(None, None, None, "a tool call is not an object"))
            continue
        fn = c.get("function")
        err = None
        if set(c) - {"id", "type", "function", "index"}:
            err = "unknown call key"
        elif c.get("type", "function") != "function":
            err = "call type is not function"
        elif not isinstance(fn, dict):
            err = "call has no function object"
        elif set(fn) - {"name", "arguments"}:
            err = "unknown function key"
        fn = fn if isinstance(fn, dict) else {}
        calls.append(RawCall(c.get("id"), fn.get("name"), fn.get("arguments"), err))
    _total_chars(message, calls)
    return Raw(message, calls, msg.get("answer", ABSENT))


def extract_json(x: Any) -> Raw:
    msg = _load_message(x)
    unknown = [k for k in msg if k not in ("message", "tool_calls", "answer")]
    if unknown:
        raise Malformed(f"unknown top-level key {str(unknown[0])[:40]!r}")
    message = msg.get("message")
    if message is None:
        message = ""
    if not isinstance(message, str):
        raise Malformed("message is not a string")
    calls = []
    for c in _calls_list(msg.get("tool_calls")):
        if not isinstance(c, dict):
            calls.append(RawCall(None, None, None, "a tool call is not an object"))
            continue
        err = "unknown call key" if set(c) - {"id", "name", "arguments"} else None
        calls.append(RawCall(c.get("id"), c.get("name"), c.get("arguments"), err))
    _total_chars(message, calls)
    return Raw(message, calls, msg.get("answer", ABSENT))


EXTRACTORS: dict[str, Callable[[Any], Raw]] = {
    "openai": extract_openai,
    "hermes": extract_hermes,
    "qwen_xml": extract_qwen_xml,
    "json": extract_json,
}


# --- arguments ------------------------------------------------------------------------------


def _relaxed(schema: dict, fields: set[str]) -> dict:
    """``schema`` with int32 bounds instead of the schema range on ``fields``."""
    props = dict(schema["properties"])
    for f in fields:
        props[f] = {**props[f], "minimum": INT32_MIN, "maximum": INT32_MAX}
    return {**schema, "properties": props}


_TEXT_PARAMS: dict[T, dict] = {
    t: _relaxed(s, {f for (tt, f) in SC.DEVICE_RANGE if tt == t}) for t, s in SC.PARAMS.items()
}
_SUBMIT_PARAMS = SC.s_obj({"answer": {}}, ("answer",))


def _arguments(raw: Any) -> tuple[Any, str | None]:
    """The arguments object of a call, or an error (not an object / not valid JSON)."""
    if raw is None:
        return {}, None
    if isinstance(raw, str):
        try:
            raw = loads(raw)
        except (ValueError, RecursionError) as e:
            return None, f"arguments are not valid JSON: {str(e)[:80]}"
    elif not _obj_bounded(raw):
        return None, "arguments too large or nested too deeply"
    if not isinstance(raw, dict):
        return None, "arguments are not a JSON object"
    return raw, None


# --- violations in words -------------------------------------------------------------------
# The model reads these in the rejection of its turn (SPEC §4.2 stays a hard fail): the
# field, what it must be (type and bound, from the same schema the model was shown) and
# what it got. They describe only the call's own arguments and public schemas, never the
# episode's hidden goal.

_CHECK_ERROR = re.compile(r"^(\w+) at (\$[^:]*): ?(.*)$", re.DOTALL)
_PATH_PART = re.compile(r"\.([^.\[]+)|\[(\d+)\]")
_JSON_TYPE = {"integer": "an integer", "number": "a number", "string": "a string"}
_JSON_TYPE |= {"boolean": "true or false", "array": "a list", "object": "an object"}
_JSON_TYPE |= {"null": "null"}
_PY_TYPE = {"str": "a string", "int": "an integer", "float": "a number", "bool": "a boolean"}
_PY_TYPE |= {"list": "a list", "dict": "an object", "NoneType": "null"}
MAX_ENUM_SHOWN = 12


def _span(lo: Any, hi: Any, unit: str = "") -> str:
    unit = f" {unit}" if unit else ""
    if lo is not None and hi is not None:
        return f"{lo}..{hi}{unit}"
    return f"at least {lo}{unit}" if lo is not None else f"at most {hi}{unit}"


def bounds_text(schema: dict) -> str | None:
    """The bounds of ``schema`` in words ("an integer in 1..500", "a string of 1..200
    characters", "a list of 1..48 items without repeats"), or None if it has none."""
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    core = [t for t in types if t != "null"]
    t = core[0] if len(core) == 1 else None
    lo, hi = schema.get("minimum"), schema.get("maximum")
    if t in ("integer", "number") and (lo is not None or hi is not None):
        if lo is not None and hi is not None:
            text = f"{_JSON_TYPE[t]} in {lo}..{hi}"
        else:
            text = (
                f"{_JSON_TYPE[t]} {'>=' if lo is not None else '<='} {lo if lo is not None else hi}"
            )
    elif t == "string" and ("minLength" in schema or "maxLength" in schema):
        lo, hi = schema.get("minLength"), schema.get("maxLength")
        text = (
            "a non-empty string"
            if (lo, hi) == (1, None)
            else f"a string of {_span(lo, hi, 'characters')}"
        )
    elif t == "array" and ("minItems" in schema or "maxItems" in schema):
        text = f"a list of {_span(schema.get('minItems'), schema.get('maxItems'), 'items')}"
        text += " without repeats" if schema.get("uniqueItems") else ""
    else:
        return None
    return text + (" or null" if "null" in types else "")


def requirement(schema: dict) -> str:
    """What a value of ``schema`` must be, in words: its bounds, enum or type."""
    if schema.get("enum"):
        vals = schema["enum"]
        if len(vals) > MAX_ENUM_SHOWN:
            return f"one of the {len(vals)} values the tool schema lists"
        return "one of " + ", ".join(json.dumps(v) for v in vals)
    bounds = bounds_text(schema)
    if bounds:
        return bounds
    types = schema.get("type")
    types = [types] if isinstance(types, str) else list(types or [])
    return " or ".join(_JSON_TYPE.get(t, t) for t in types) or "a valid value"


def _schema_at(schema: dict, path: str) -> tuple[dict | None, str]:
    """The schema node at a ``check`` path under ``$.arguments`` and the field's name."""
    rest = path[len("$.arguments") :] if path.startswith("$.arguments") else None
    if rest is None:
        return None, path
    node: dict | None = schema
    for key, _idx in _PATH_PART.findall(rest):
        if node is None:
            break
        node = node.get("properties", {}).get(key) if key else node.get("items")
    return node, rest


def describe_error(tool: Any, err: str) -> str:
    """One call's violation in words, e.g. ``catalog_search.top_k must be an integer in
    1..500, got 1000``, from the ``"kind at path: detail"`` of ``schemas.check``."""
    name = tool if isinstance(tool, str) else None
    t = SC.TOOL_BY_NAME.get(name) if name else None
    m = _CHECK_ERROR.match(err)
    if t is None or m is None:
        return f"{name[:40]}: {err}" if t is not None else err
    kind, path, detail = m.groups()
    node, rest = _schema_at(SC.PARAMS[t], path)
    field = f"{name}{rest}"
    if kind == "missing":
        return f"{name}{rest}.{detail.strip(chr(39))} is required but missing"
    if kind == "unknown_key":
        what = "argument" if rest == "" else "key"
        return f"{field} has no {what} {detail}"
    if kind == "unique":
        return f"{field} must not repeat items"
    if kind == "depth" or node is None:
        return f"{field}: {detail}"
    need = requirement(node)
    if kind == "type":
        got = detail.rsplit("got ", 1)[-1]
        return f"{field} must be {need}, got {_PY_TYPE.get(got, got)}"
    if kind == "enum":
        got = detail.split(" is not one of", 1)[0]
        return f"{field} must be {need}, got {got}"
    return f"{field} must be {need}, got {detail}"  # range, length, items


# --- answers ------------------------------------------------------------------------------

_NUMBER_RE = re.compile(r"-?\d+(?:\.\d+)?")
_STATUS_CODE = {s: i for i, s in enumerate(SC.STATUS_NAMES)}
F32_MAX = float(np.finfo(np.float32).max)


def policy_value(v: Any, categorical: bool | None) -> tuple[float, bool]:
    """(value, parsed) of ``policy_answer`` (SPEC §8.6): numbers as is, a string's first
    number after removing "$", "%" and ","; categorical topics compare normalised strings,
    sent as ANSWER_VOCAB codes. ``categorical`` None (topic unknown): a vocabulary string
    is categorical, anything else numeric."""
    code = P.answer_code(v) if isinstance(v, str) else -1
    if categorical is True or (categorical is None and code >= 0):
        return float(max(code, 0)), code >= 0
    if isinstance(v, str):
        m = _NUMBER_RE.search(v.replace("$", "").replace("%", "").replace(",", ""))
        if m is None:
            return 0.0, False
        v = float(m.group())
    try:
        x = float(v)
    except (OverflowError, TypeError, ValueError):
        return 0.0, False
    if not math.isfinite(x) or abs(x) > F32_MAX:
        return 0.0, False
    return x, True


def _answer_error(obj: Any, sub: bool) -> str | None:
    """Schema check of one answer object, dispatched on its ``env`` for clear messages."""
    if not isinstance(obj, dict):
        return "the answer is not an object"
    env = obj.get("env")
    table = SC.sub_answer_schemas() if sub else SC.answer_schemas()
    if not isinstance(env, str) or env not in table:
        return f"unknown answer env {str(env)[:20]!r}"
    if env != "JOURNEY":
        return SC.check(obj, table[env], "$.answer")
    schema = table[env]
    top = {
        **schema,
        "properties": {
            **schema["properties"],
            "subgoal_answers": {
                k: v for k, v in schema["properties"]["subgoal_answers"].items() if k != "items"
            },
        },
    }
    err = SC.check(obj, top, "$.answer")
    if err:
        return err
    for i, entry in enumerate(obj["subgoal_answers"]):
        if entry is not None:
            e = _answer_error(entry, sub=True)
            if e:
                return f"subgoal_answers[{i}]: {e}"
    return None


def _fill_answer_fields(f: dict[str, np.ndarray], i: Any, obj: dict, codec: IdCodec) -> None:
    """One non-JOURNEY answer into AnswerFields arrays ``f`` at index ``i``."""
    env = obj["env"]
    f["env"][i] = family(env).env
    ids = obj.get("recommended_product_ids")
    if ids is not None:
        f["rec"][i][: len(ids)] = [codec.product(s) for s in ids]
    if "selected_order_id" in obj:
        o = codec.order(obj["selected_order_id"])
        f["order"][i] = o
        if "selected_line_id" in obj:
            f["line"][i] = codec.order_line(obj["selected_line_id"], o)
    if "order_status" in obj:
        f["status"][i] = _STATUS_CODE[obj["order_status"]]
    if "policy_answer" in obj:
        value, ok = policy_value(obj["policy_answer"], codec.policy_categorical)
        f["policy_value"][i], f["policy_ok"][i] = value, ok


# --- the turn -----------------------------------------------------------------------------

_TEMPLATES: dict[int, Action] = {}


def empty_numpy_action(embed_dim: int = C.EMBED_DIM) -> Action:
    """``empty_action`` with fresh, writable numpy leaves."""
    if embed_dim not in _TEMPLATES:
        _TEMPLATES[embed_dim] = jax.tree_util.tree_map(np.asarray, empty_action(embed_dim))
    return jax.tree_util.tree_map(np.array, _TEMPLATES[embed_dim])


def _new_info(fmt: str, turn: int) -> dict:
    return {
        "format": fmt,
        "turn": turn,
        "message": "",
        "calls": [],
        "n_calls": 0,
        "budget_overflow": False,
        "answer": None,
        "answer_error": None,
        "malformed": None,
        "errors": [],
        "device_checked": [],
        "internal_error": None,
    }


def parse_turn(
    text_or_message: Any,
    codec: IdCodec,
    fmt: str = "openai",
    embed_fn: EmbedFn | None = None,
    turn: int = 0,
) -> tuple[Action, dict]:
    """One assistant turn -> (``Action`` with numpy leaves, info).

    ``embed_fn(texts) -> float32 [len(texts), D]`` embeds search / rerank queries (default:
    the catalog's hashing embedder). ``turn`` names calls without an id ``call_{turn}_{i}``.
    info: ``message``; ``calls`` (per call: id, name, arguments, slot, error, and for
    catalog_rerank the candidate codes, which have no Action field); ``n_calls``;
    ``budget_overflow``; ``answer`` / ``answer_error``; ``malformed``; ``errors`` (every
    problem found, text-level or not); ``device_checked`` (range violations left to the
    device); ``internal_error``.
    """
    info = _new_info(fmt, turn)
    dim = getattr(getattr(codec, "cat", None), "embed_dim", C.EMBED_DIM)
    try:
        if fmt not in EXTRACTORS:
            raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
        try:
            raw = EXTRACTORS[fmt](text_or_message)
            return _build(raw, codec, embed_fn, turn, info, dim)
        except (Malformed, RecursionError) as e:
            reason = str(e) if isinstance(e, Malformed) else "nested too deeply"
            info["malformed"] = reason
            info["errors"].append(f"malformed: {reason}")
            action = empty_numpy_action(dim)
            return action.replace(malformed=np.asarray(True)), info
    except Exception as e:  # noqa: BLE001 - the contract: nothing escapes
        try:
            info["internal_error"] = f"{type(e).__name__}: {str(e)[:200]}"
            info["malformed"] = info["malformed"] or "internal error"
            action = empty_numpy_action(dim)
            return action.replace(malformed=np.asarray(True)), info
        except Exception:  # noqa: BLE001
            return empty_numpy_action(C.EMBED_DIM).replace(malformed=np.asarray(True)), info


def _build(
    raw: Raw, codec: IdCodec, embed_fn: EmbedFn | None, turn: int, info: dict, dim: int
) -> tuple[Action, dict]:
    message = raw.message
    info["message"] = message.strip()
    answers: list[tuple[Any, str | None]] = []  # (answer object, envelope error)
    if raw.answer is not ABSENT and raw.answer is not None:
        answers.append((raw.answer, None))
    tool_calls: list[tuple[RawCall, dict]] = []
    for i, c in enumerate(raw.calls):
        rec: dict[str, Any] = {"id": _call_id(c, turn, i), "name": c.name, "slot": None}
        info["calls"].append(rec)
        if c.name != SC.SUBMIT_ANSWER:
            tool_calls.append((c, rec))
            continue
        args, err = _arguments(c.args)
        err = c.envelope_error or err or SC.check(args, _SUBMIT_PARAMS, "$.arguments")
        answers.append((None, err) if err else (args["answer"], None))
    if len(answers) > 1:
        raise Malformed("two answers in one turn")

    a = empty_numpy_action(dim)
    arr = {k: getattr(a, k) for k in _CALL_FIELDS}
    queries: list[tuple[int, str]] = []
    info["n_calls"] = len(tool_calls)
    info["budget_overflow"] = len(tool_calls) > B
    for k, (c, rec) in enumerate(tool_calls):
        # Calls beyond the last slot are checked but not stored; their violations are
        # reported on the last slot (the device then sees an invalid call, as §4.2 asks).
        slot = min(k, B - 1)
        rec["slot"] = k if k < B else None
        err = _encode_call(c, codec, arr, slot, queries, rec, write=k < B)
        if err:
            rec["error"] = err
            rec["problem"] = describe_error(c.name, err)
            info["errors"].append(f"call {k} ({str(c.name)[:40]}): {err}")
            arr["bad_args"][slot] = True
            if k < B:
                known = SC.TOOL_BY_NAME.get(c.name) if isinstance(c.name, str) else None
                arr["tool"][slot] = UNKNOWN_TOOL if known is None else known
        for e in rec.get("device_checked", ()):
            rec.setdefault("problem", describe_error(c.name, e))
            info["device_checked"].append(f"call {k}: {e}")
            info["errors"].append(f"call {k}: {e} (left to the device)")
    if queries:
        fn = embed_fn if embed_fn is not None else (lambda texts: embed_texts(texts, dim))
        emb = np.asarray(fn([q for _, q in queries]), np.float32)
        if emb.shape != (len(queries), dim):
            raise ValueError(f"embed_fn gave shape {emb.shape}, expected ({len(queries)}, {dim})")
        for (slot, _), v in zip(queries, emb, strict=True):
            arr["query_emb"][slot] = v

    answer = a.answer
    if answers:
        answer = _encode_answer(answers[0], codec, a, info)
    present = codec.presented(message)
    a.present[: len(present)] = present
    has_message = np.asarray(bool(message.strip()))
    n_calls = np.asarray(len(tool_calls), np.int32)
    return a.replace(has_message=has_message, answer=answer, n_calls=n_calls, **arr), info


_CALL_FIELDS = CALL_FIELDS


def _call_id(c: RawCall, turn: int, i: int) -> str:
    return c.id if isinstance(c.id, str) and c.id else f"call_{turn}_{i}"


def _encode_call(
    c: RawCall,
    codec: IdCodec,
    arr: dict[str, np.ndarray],
    slot: int,
    queries: list[tuple[int, str]],
    rec: dict,
    write: bool,
) -> str | None:
    """Check one call; if it is text-valid and ``write``, fill slot ``slot``. Returns the
    text-level error (-> bad_args) or None."""
    if c.envelope_error:
        return c.envelope_error
    if c.id is not None and not isinstance(c.id, str):
        return "call id is not a string"
    if not isinstance(c.name, str):
        return "tool name missing or not a string"
    tool = SC.TOOL_BY_NAME.get(c.name)
    if tool is None:
        return f"unknown tool {c.name[:40]!r}"
    args, err = _arguments(c.args)
    if err:
        return err
    rec["arguments"] = args
    err = SC.check(args, _TEXT_PARAMS[tool], "$.arguments")
    if err:
        return err
    strict = SC.check(args, SC.PARAMS[tool], "$.arguments")
    if not write:  # an overflowing call: the device never sees it, so flag it here
        return strict
    if strict:
        rec["device_checked"] = [strict]
    _write_call(tool, args, codec, arr, slot, queries, rec)
    return None


def _write_call(
    tool: T,
    args: dict,
    codec: IdCodec,
    arr: dict[str, np.ndarray],
    i: int,
    queries: list[tuple[int, str]],
    rec: dict,
) -> None:
    """Encode text-valid arguments into call slot ``i`` (field layout: ``Action``,
    ``ecomjax/tools/orders.py``, ``ecomjax/actions.py``)."""
    arr["tool"][i] = tool
    defaults = {k: p.get("default") for k, p in SC.PARAMS[tool]["properties"].items()}

    def get(k: str) -> Any:
        return args.get(k, defaults.get(k))

    if "query" in args:
        arr["has_query"][i] = True
        if tool == T.POLICY_SEARCH:
            arr["query_tokens"][i] = P.query_array(args["query"])
        else:
            queries.append((i, args["query"]))
    for k in ("top_k", "quantity", "days"):
        if get(k) is not None:
            arr["qty"][i] = int(get(k))
    if tool == T.CATALOG_SEARCH:
        arr["enum_a"][i] = SC.SORT_NAMES.index(get("sort_by"))
        arr["flag"][i] = bool(get("in_stock_only"))
        if "similar_to" in args:
            arr["product"][i] = codec.product(args["similar_to"])
        for k, v in (args.get("filters") or {}).items():
            if k in SC.DISC_FILTER_NAMES:
                j = SC.DISC_FILTER_NAMES.index(k)
                arr["filter_disc"][i, j] = codec.cat.filter_code(C.DISC_FILTERS[j], v)
            else:
                arr["filter_num"][i, SC.NUM_FILTER_NAMES.index(k)] = np.float32(v)
    elif tool == T.CATALOG_RERANK:
        rec["candidates"] = [codec.product(s) for s in args["candidate_product_ids"]]
    elif tool in (T.CATALOG_GET_PRODUCT, T.CATALOG_GET_VARIANTS, T.CART_ADD):
        arr["product"][i] = p = codec.product(args["product_id"])
        if tool == T.CART_ADD:
            arr["variant"][i] = codec.variant(args.get("variant_id"), p)
    elif tool in (T.CART_REMOVE, T.CART_SET_QUANTITY):
        arr["line"][i] = codec.cart_line(args["line_id"])
    elif tool == T.RETURN_CANCEL:
        arr["order"][i] = codec.return_number(args["return_id"])
    elif tool == T.ASK_USER:
        for s in args["slots"]:
            arr["slots"][i, C.SLOT_NAMES.index(s)] = True
        if "product_id" in args:
            arr["product"][i] = codec.product(args["product_id"])
        if "subgoal" in args:
            arr["enum_b"][i] = int(args["subgoal"])
    if "order_id" in args:
        arr["order"][i] = o = codec.order(args["order_id"])
        if "line_id" in args:
            arr["line"][i] = codec.order_line(args["line_id"], o)
    if "reason_code" in args:
        arr["enum_a"][i] = SC.REASON.get("enum").index(args["reason_code"])
        arr["enum_b"][i] = SC.METHOD.get("enum").index(args["method"])
    if tool == T.RETURN_EXCHANGE:
        arr["product"][i] = p = codec.product(args["new_product_id"])
        arr["variant"][i] = codec.variant(args.get("new_variant_id"), p)


def _encode_answer(item: tuple[Any, str | None], codec: IdCodec, a: Action, info: dict):
    obj, err = item
    err = err or _answer_error(obj, sub=False)
    ans = a.answer
    main = {k: np.array(getattr(ans.main, k)) for k in _FIELD_NAMES}
    sub = {k: np.array(getattr(ans.sub, k)) for k in _FIELD_NAMES}
    done = True
    if err:
        info["answer_error"] = err
        info["errors"].append(f"answer: {err}")
        main["env"][()] = INVALID_ENV
    else:
        info["answer"] = obj
        done = bool(obj.get("done", True))
        if obj["env"] != "JOURNEY":
            _fill_answer_fields(main, (), obj, codec)
        else:
            main["env"][()] = C.Env.JOURNEY
            for j, entry in enumerate(obj["subgoal_answers"]):
                if entry is not None:
                    _fill_answer_fields(sub, j, entry, codec)
    return ans.replace(
        present=np.asarray(True),
        done=np.asarray(done),
        main=ans.main.replace(**main),
        sub=ans.sub.replace(**sub),
    )


_FIELD_NAMES = ("env", "rec", "order", "line", "status", "policy_value", "policy_ok")


# --- the inverse, for tests and training data ------------------------------------------------


def format_turn(
    fmt: str,
    message: str = "",
    calls: Sequence[tuple[str, Any]] = (),
    answer: Any = None,
    answer_as: str = "call",
) -> Any:
    """Write a turn in ``fmt`` (what a model of that family would emit): ``calls`` are
    (name, arguments) pairs; ``answer`` goes in a ``submit_answer`` call, or (openai /
    json, ``answer_as="key"``) in the ``answer`` key."""
    calls = list(calls)
    if answer is not None and answer_as == "call":
        calls.append((SC.SUBMIT_ANSWER, {"answer": answer}))
    if fmt == "hermes":
        blocks = [
            f"<tool_call>\n{json.dumps({'name': n, 'arguments': a}, ensure_ascii=False)}\n"
            "</tool_call>"
            for n, a in calls
        ]
        return "\n".join([message, *blocks]) if message else "\n".join(blocks)
    if fmt == "qwen_xml":
        blocks = []
        for n, a in calls:
            params = "".join(
                f"<parameter={k}>\n"
                f"{v if isinstance(v, str) else json.dumps(v, ensure_ascii=False)}\n"
                "</parameter>\n"
                for k, v in a.items()
            )
            blocks.append(f"<tool_call>\n<function={n}>\n{params}</function>\n</tool_call>")
        return "\n".join([message, *blocks]) if message else "\n".join(blocks)
    if fmt == "openai":
        out: dict[str, Any] = {"role": "assistant", "content": message or None}
        if calls:
            out["tool_calls"] = [
                {
                    "id": f"call_{i}",
                    "type": "function",
                    "function": {"name": n, "arguments": json.dumps(a)},
                }
                for i, (n, a) in enumerate(calls)
            ]
        if answer is not None and answer_as == "key":
            out["answer"] = answer
        return out
    if fmt == "json":
        turn: dict[str, Any] = {"message": message}
        turn["tool_calls"] = [{"name": n, "arguments": a} for n, a in calls]
        turn["answer"] = answer if answer_as == "key" else None
        return turn
    raise ValueError(f"unknown format {fmt!r}")
