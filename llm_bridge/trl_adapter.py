"""A TRL adapter: each tool is a Python method, the customer's reply is tool output.

Why this shape: TRL's ``GRPOTrainer(environment_factory=...)`` builds one environment per
rollout, exposes every public method of its *class* as a tool (the JSON schema comes from the
method's signature and Google-style docstring), calls ``reset(**dataset_row)`` and appends the
string it returns to the prompt, runs each tool call the model makes and feeds the returned
string back as the tool message, and ends the rollout at the first completion without a tool
call; ``get_reward()`` then scores it. So:

- the methods are generated from ``schemas.all_tools(with_submit=True)`` (the same tables the
  parser checks), plus ``message_customer(message)`` for plain text to the customer;
- one method call is one env turn (SPEC §4.1 with a single call): TRL hands over calls one at a
  time and needs each result at once. The output is the tool result, store notices and the
  customer's reply (``Customer: ...``);
- the argument bounds of the schemas (which ``get_json_schema`` cannot carry) are written in
  each ``Args`` line ("Must be an integer in 1..500");
- arguments pass through untouched (``None`` means omitted): an invalid call is the env's hard
  fail, exactly as over the server, and its tool output names the field, the bound and the
  value ("catalog_search.top_k must be an integer in 1..500, got 1000; ...");
- a rollout that stops before the episode ends scores ``unfinished_reward`` (default -1, the
  hard-fail score), so the model learns to finish with ``submit_answer``;
- grouped problems: GRPO repeats each dataset row ``num_generations`` times, so a row's
  (family, difficulty, seed) is one problem for the whole group (``make_dataset``).

trl itself is not imported here; the classes work with any loop that follows the same contract
(the tests drive one without trl, and one GRPO step with trl when it is installed).
"""

from __future__ import annotations

import inspect
import json
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.llm_bridge.gym_env import MAX_SEED, pick_family
from ecomjax.llm_bridge.parse import bounds_text, requirement
from ecomjax.llm_bridge.session import FAST_COMPILE, CatalogText, Session
from ecomjax.llm_bridge.tool_turns import (
    TURN_NOTE,
    call_tools,
    reply_text,
    turn_for_call,
)
from ecomjax.types import EnvParams

RESERVED = frozenset({"reset", "get_reward"})
ADAPTER_NOTE = f"{TURN_NOTE} A reply without a tool call ends the conversation unanswered."


# --- methods from JSON schemas ---------------------------------------------------------------


def py_type(schema: Mapping[str, Any]) -> Any:
    """The Python type hint whose transformers JSON schema matches ``schema`` most closely."""
    if "anyOf" in schema:
        return dict
    t = schema.get("type")
    if isinstance(t, list):
        parts = [py_type({**schema, "type": x}) for x in t if x != "null"]
        hint = parts[0] if len(parts) == 1 else typing.Union[tuple(parts)]  # noqa: UP007
        return hint | None if "null" in t else hint
    if t == "string":
        return Literal[tuple(schema["enum"])] if schema.get("enum") else str
    if t == "array":
        return list[py_type(schema.get("items", {}))] if schema.get("items") else list
    return {"integer": int, "number": float, "boolean": bool, "object": dict}.get(t, Any)


def _arg_doc(prop: Mapping[str, Any]) -> str:
    """One ``Args`` line. transformers' ``get_json_schema`` keeps only types and enums, so
    the bounds (top_k 1..500, quantity 1..99, string lengths, item counts) go in the text,
    in the words the rejection of a violating turn uses."""
    text = str(prop.get("description", "")).strip().rstrip(".") or "Argument"
    bounds = bounds_text(dict(prop))
    if bounds:
        text += f". Must be {bounds}"
    props = prop.get("properties")
    if props:  # nested object (catalog_search filters): name its keys and their bounds
        text += ". Keys: " + ", ".join(f"{k} ({requirement(v)})" for k, v in props.items())
    if "anyOf" in prop:
        text += " (its schema is the answer schema in the instructions)"
    if "default" in prop:
        text += f". Default {json.dumps(prop['default'])}"
    return text + "."


def docstring(function: Mapping[str, Any]) -> str:
    """A Google-style docstring for transformers' ``get_json_schema``."""
    props = function["parameters"].get("properties", {})
    lines = [function["description"], ""]
    if props:
        lines.append("Args:")
        lines += [f"    {k}: {_arg_doc(p)}" for k, p in props.items()]
        lines.append("")
    lines += ["Returns:", "    The tool result, store notices and the customer's reply."]
    return "\n".join(lines)


def make_method(tool: Mapping[str, Any]) -> Callable:
    """A method ``name(self, *, <schema args>) -> str`` that plays one turn with this call."""
    fn = tool["function"]
    name = fn["name"]
    props = fn["parameters"].get("properties", {})
    required = set(fn["parameters"].get("required", ()))

    def method(self, **kwargs: Any) -> str:
        return self._call(name, kwargs)

    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    annotations: dict[str, Any] = {}
    for k, p in props.items():
        annotations[k] = py_type(p)
        default = inspect.Parameter.empty if k in required else None
        params.append(
            inspect.Parameter(
                k, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotations[k]
            )
        )
    annotations["return"] = str
    method.__name__ = method.__qualname__ = name
    method.__doc__ = docstring(fn)
    method.__annotations__ = annotations
    method.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    return method


# --- the environment ---------------------------------------------------------------------------


class ToolEnvBase:
    """State and the TRL hooks; the tool methods are added by ``make_env_class``. Helpers are
    private or properties: TRL exposes every other public function of the class as a tool."""

    _text: CatalogText
    _params: EnvParams
    _defaults: dict[str, Any] = {}
    _session_kwargs: dict[str, Any] = {}
    _unfinished_reward: float = -1.0

    def __init__(self) -> None:
        self._session = Session(
            self._text,
            params=self._params,
            compiler_options=self._session_kwargs.get("compiler_options", FAST_COMPILE),
            fmt="json",
            **{k: v for k, v in self._session_kwargs.items() if k != "compiler_options"},
        )
        self._last: dict | None = None
        self._problem: tuple[str, int, int] | None = None

    def reset(self, **row: Any) -> str:
        """Starts the row's problem: ``family`` (or ``collection``), ``difficulty``, ``seed``
        (other columns, e.g. ``prompt``, are ignored). Returns the episode's instructions and
        the customer's opening message, which TRL appends to the prompt."""
        seed = row.get("seed", self._defaults.get("seed", 0))
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise ValueError(f"seed must be an integer in 0..{MAX_SEED}")
        d = int(row.get("difficulty", self._defaults.get("difficulty", 0)))
        if not 0 <= d <= C.D_MAX:
            raise ValueError(f"difficulty must be in 0..{C.D_MAX}")
        fam = pick_family(
            row.get("family") or (None if row.get("collection") else self._defaults.get("family")),
            row.get("collection") or self._defaults.get("collection"),
            seed,
        )
        obs = self._session.reset(fam, d, seed)
        self._last, self._problem = obs, (fam, d, seed)
        system, opening = obs["messages"][0]["content"], obs["messages"][1]["content"]
        return f"{system}\n{ADAPTER_NOTE}\n\nCustomer: {opening}"

    def get_reward(self) -> float:
        """The episode reward; ``unfinished_reward`` when the rollout stopped first."""
        if self._last is None or not self._last["done"]:
            return float(self._unfinished_reward)
        return float(self._last["reward"])

    @property
    def observation(self) -> dict | None:
        """The last session observation (counters, reward breakdown, transcript)."""
        return self._last

    @property
    def problem(self) -> tuple[str, int, int] | None:
        """(family, difficulty, seed) of the current episode."""
        return self._problem

    @property
    def done(self) -> bool:
        return bool(self._last is not None and self._last["done"])

    def _call(self, name: str, kwargs: Mapping[str, Any]) -> str:
        if self._last is None:
            return "The conversation has not started."
        if self._last["done"]:
            return f"The conversation is over ({self._last['termination_reason']}); nothing ran."
        self._last = self._session.step(turn_for_call(name, kwargs), "json")
        return reply_text(self._last)


def make_env_class(name: str = "EcomjaxToolEnv", submit: bool = True) -> type:
    """A ``ToolEnvBase`` subclass with one method per tool (19, ``submit_answer``,
    ``message_customer``); configure it with ``environment_factory``."""
    tools = call_tools(with_submit=submit)
    methods = {}
    for t in tools:
        tname = t["function"]["name"]
        if tname in RESERVED or tname.startswith("_") or hasattr(ToolEnvBase, tname):
            raise ValueError(f"tool name {tname!r} clashes with the environment's own members")
        methods[tname] = make_method(t)
    return type(name, (ToolEnvBase,), {"__doc__": ToolEnvBase.__doc__, **methods})


def environment_factory(
    catalog: Catalog | CatalogText | None = None,
    tables: CatalogTables | None = None,
    params: EnvParams | None = None,
    *,
    family: str | None = None,
    collection: str | None = None,
    difficulty: int = 0,
    unfinished_reward: float = -1.0,
    **session_kwargs: Any,
) -> Callable[[], ToolEnvBase]:
    """``GRPOTrainer(environment_factory=environment_factory(...))``: a zero-argument factory of
    environments sharing one catalog text (built once). The defaults apply to dataset rows
    without ``family``/``collection``/``difficulty``."""
    if catalog is None:
        from ecomjax.catalog.synthetic import generate_catalog

        catalog = generate_catalog(42, 1000)
    text = catalog if isinstance(catalog, CatalogText) else CatalogText.build(catalog, tables)
    pick_family(family, collection, 0)
    base = make_env_class()
    cls = type(
        base.__name__,
        (base,),
        {
            "_text": text,
            "_params": params if params is not None else EnvParams(),
            "_defaults": {"family": family, "collection": collection, "difficulty": difficulty},
            "_session_kwargs": dict(session_kwargs),
            "_unfinished_reward": float(unfinished_reward),
        },
    )
    return cls


def make_dataset(
    n_problems: int,
    *,
    family: str | None = None,
    collection: str | None = "C8",
    difficulty: int | Callable[[int], int] = 0,
    seed: int = 0,
    prompt: str = "",
) -> list[dict]:
    """Rows ``{"prompt", "family", "difficulty", "seed"}``, one problem each (seeds
    ``seed .. seed + n - 1``; the family from ``family`` or ``collection[seed % len]``).
    ``datasets.Dataset.from_list(rows)`` makes TRL's train_dataset; GRPO plays each row once per
    generation of its group, so a group shares one problem."""
    rows = []
    for i in range(n_problems):
        s = seed + i
        d = difficulty(i) if callable(difficulty) else difficulty
        rows.append(
            {
                "prompt": [{"role": "user", "content": prompt}],
                "family": pick_family(family, collection, s),
                "difficulty": int(d),
                "seed": s,
            }
        )
    return rows
