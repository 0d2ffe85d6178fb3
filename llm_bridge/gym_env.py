"""A gymnasium-style text environment over a host ``Session``.

Why: many RL libraries speak ``reset(seed, options) -> (obs, info)`` and
``step(action) -> (obs, reward, terminated, truncated, info)``. Here the action is one assistant
turn (model text in ``fmt``, or a message dict), the observation is text (or the transcript),
and the reward is the episode reward, paid at the end (0 before). ``truncated`` means the turn
limit ended the episode (termination reason ``t_max``); every other end is ``terminated``.

gymnasium is optional: with it installed, ``EcomjaxTextEnv`` is a ``gymnasium.Env`` that passes
``gymnasium.utils.env_checker.check_env`` in every ``obs_mode`` and ``fmt``, and ``register()``
adds the id ``ecomjax/Text-v0`` (``gymnasium.make`` and ``gymnasium.make_vec``); without it,
the class has the same methods on ``object``.
"""

from __future__ import annotations

import copy
import json
import numbers
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.llm_bridge.parse import FORMATS, MAX_TEXT_CHARS, format_turn
from ecomjax.llm_bridge.session import FAST_COMPILE, CatalogText, Session
from ecomjax.registry import FAMILIES
from ecomjax.types import EnvParams

try:  # optional dependency
    import gymnasium as _gym
except ModuleNotFoundError:  # pragma: no cover - exercised only without gymnasium
    _gym = None

MAX_SEED = 2**32 - 1
ENV_ID = "ecomjax/Text-v0"
MAX_OBS_CHARS = 1 << 24  # an observation (text or a whole transcript): far above any episode

# What the spaces sample (see ``TurnSpace``): calls that are well-formed in every family, a
# customer-facing line, and words for free text.
SAMPLE_CALLS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("cart_view", ()),
    ("catalog_list_categories", ()),
    ("order_list", ()),
    ("datetime_now", ()),
    ("user_get_visit_history", ()),
    ("catalog_search", ("query",)),
    ("policy_search", ("query",)),
)
SAMPLE_LINES = (
    "Could you tell me a bit more about what you need?",
    "Let me look into that for you.",
    "Thanks, one moment please.",
    "Is there a budget or a brand you prefer?",
)
SAMPLE_WORDS = (
    "usb", "charger", "cable", "phone", "case", "laptop", "bag", "shoes", "jacket", "kettle",
    "lamp", "desk", "chair", "headphones", "return", "window", "refund", "shipping", "order",
    "delivery", "warranty", "size", "colour", "red", "blue", "black", "small",
)  # fmt: skip

_MESSAGE_KEYS = {
    "system": frozenset({"role", "content"}),
    "user": frozenset({"role", "content"}),
    "event": frozenset({"role", "content"}),
    "assistant": frozenset({"role", "content"}),  # plus an optional "tool_calls"
    "tool": frozenset({"role", "tool_call_id", "name", "content"}),
}


def message_text(m: Mapping[str, Any]) -> str:
    """One chat message as a plain-text block (what a text-only policy reads)."""
    role = m.get("role")
    if role == "tool":
        return f"[tool {m.get('name')} {m.get('tool_call_id')}]\n{m.get('content')}"
    if role == "event":
        return f"[store notice]\n{m.get('content')}"
    if role == "assistant":
        calls = "".join(
            f"\n-> {c['function']['name']} {c['function']['arguments']}"
            for c in m.get("tool_calls") or []
        )
        return f"[assistant]\n{m.get('content') or ''}{calls}"
    return f"[{role}]\n{m.get('content')}"


def messages_text(messages: Sequence[Mapping[str, Any]]) -> str:
    return "\n\n".join(message_text(m) for m in messages)


def next_seed(seed: int) -> int:
    """The seed of the unseeded reset after episode ``seed``: a uint32 drawn from a PCG64
    generator seeded with it (a fixed function of the seed; ``np_random`` is left as seeded)."""
    return int(np.random.Generator(np.random.PCG64(seed)).integers(0, MAX_SEED + 1))


def pick_family(family: str | None, collection: str | None, seed: int) -> str:
    """An explicit family, else ``collection[seed % len]`` (the server's rule)."""
    if family is not None:
        name = family.upper()
        if name not in FAMILIES:
            raise ValueError(f"unknown family {family!r}; available: {', '.join(FAMILIES)}")
        return name
    coll = (collection or "C8").upper()
    if coll not in C.COLLECTIONS:
        raise ValueError(
            f"unknown collection {collection!r}; available: {', '.join(C.COLLECTIONS)}"
        )
    members = C.COLLECTIONS[coll]
    return members[seed % len(members)]


def _words(rng: Any, lo: int = 1, hi: int = 6) -> str:
    n = int(rng.integers(lo, hi + 1))
    return " ".join(SAMPLE_WORDS[int(i)] for i in rng.integers(0, len(SAMPLE_WORDS), n))


def _sample_call(rng: Any) -> tuple[str, dict[str, str]]:
    name, keys = SAMPLE_CALLS[int(rng.integers(len(SAMPLE_CALLS)))]
    return name, {k: _words(rng) for k in keys}


def _is_call(c: Any) -> bool:
    """An assistant ``tool_calls`` entry as the session writes it (``render._call``)."""
    if not isinstance(c, Mapping) or set(c) != {"id", "type", "function"}:
        return False
    fn = c["function"]
    return (
        isinstance(c["id"], str)
        and c["type"] == "function"
        and isinstance(fn, Mapping)
        and set(fn) == {"name", "arguments"}
        and isinstance(fn["name"], str)
        and isinstance(fn["arguments"], str)
    )


def _message_chars(m: Any) -> int | None:
    """The characters of one well-formed transcript message, else None."""
    if not isinstance(m, Mapping):
        return None
    role = m.get("role")
    keys = _MESSAGE_KEYS.get(role) if isinstance(role, str) else None
    if keys is None:
        return None
    calls = m.get("tool_calls", []) if role == "assistant" else []
    if set(m) - ({"tool_calls"} if role == "assistant" else set()) != keys:
        return None
    if not isinstance(calls, list) or not all(_is_call(c) for c in calls):
        return None
    strings = [m[k] for k in keys if k != "role"]
    if not all(isinstance(v, str) for v in strings):
        return None
    return sum(map(len, strings)) + sum(
        len(c["id"]) + len(c["function"]["name"]) + len(c["function"]["arguments"]) for c in calls
    )


if _gym is not None:

    class _ValueSpace(_gym.spaces.Space):
        """Equal, hashed and shown by the fields in ``_key`` (``make_vec`` compares its
        sub-envs' spaces; gymnasium's default is identity)."""

        _key: tuple[str, ...] = ()

        def _values(self) -> tuple:
            return tuple(getattr(self, k) for k in self._key)

        def __eq__(self, other: object) -> bool:
            return type(other) is type(self) and other._values() == self._values()

        def __hash__(self) -> int:
            return hash((type(self).__name__, *self._values()))

        def __repr__(self) -> str:
            fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._key)
            return f"{type(self).__name__}({fields})"

    class TextSpace(_ValueSpace):
        """Any string of at most ``max_length`` characters: the ``obs_mode="text"``
        observation. gymnasium's ``Text`` space fixes a character set, which chat text (any
        Unicode) does not fit. Equal spaces compare and hash equal (``make_vec`` compares the
        sub-envs' spaces); ``sample()`` draws words with the space's seeded RNG."""

        _key = ("max_length",)

        def __init__(self, max_length: int = MAX_OBS_CHARS, seed: int | None = None):
            if max_length < 0:
                raise ValueError("max_length must be >= 0")
            self.max_length = int(max_length)
            super().__init__(dtype=str, seed=seed)

        @property
        def is_np_flattenable(self) -> bool:
            return False

        def sample(self, mask: Any = None, probability: Any = None) -> str:
            if mask is not None or probability is not None:
                raise ValueError("TextSpace.sample takes no mask or probability")
            return _words(self.np_random)[: self.max_length]

        def contains(self, x: Any) -> bool:
            return isinstance(x, str) and len(x) <= self.max_length

    class MessagesSpace(_ValueSpace):
        """A chat transcript, the ``obs_mode="messages"`` observation: a list of message
        dicts in the session's shapes — ``system``/``user``/``event`` ``{role, content}``,
        ``assistant`` ``{role, content[, tool_calls]}`` (OpenAI-style calls with JSON string
        arguments), ``tool`` ``{role, tool_call_id, name, content}`` — all strings, at most
        ``max_length`` characters in all. gymnasium's ``Sequence(Dict(...))`` does not fit:
        ``Dict`` needs one key set for every message and ``Sequence`` tuples, while chat
        templates read lists of role-specific dicts."""

        _key = ("max_length",)

        def __init__(self, max_length: int = MAX_OBS_CHARS, seed: int | None = None):
            if max_length < 0:
                raise ValueError("max_length must be >= 0")
            self.max_length = int(max_length)
            super().__init__(seed=seed)

        @property
        def is_np_flattenable(self) -> bool:
            return False

        def sample(self, mask: Any = None, probability: Any = None) -> list[dict]:
            """A system and a user message, then 0-2 rounds of a call, its result and a
            customer reply (an empty transcript if ``max_length`` cannot hold that)."""
            if mask is not None or probability is not None:
                raise ValueError("MessagesSpace.sample takes no mask or probability")
            rng = self.np_random
            out: list[dict] = [
                {"role": "system", "content": _words(rng)},
                {"role": "user", "content": _words(rng)},
            ]
            for turn in range(1, int(rng.integers(0, 3)) + 1):
                name, args = _sample_call(rng)
                call_id = f"call_{turn}_0"
                fn = {"name": name, "arguments": json.dumps(args)}
                call = {"id": call_id, "type": "function", "function": fn}
                out += [
                    {"role": "assistant", "content": _words(rng), "tool_calls": [call]},
                    {"role": "tool", "tool_call_id": call_id, "name": name, "content": "{}"},
                    {"role": "user", "content": _words(rng)},
                ]
            return out if self.contains(out) else []

        def contains(self, x: Any) -> bool:
            if not isinstance(x, list):
                return False
            total = 0
            for m in x:
                n = _message_chars(m)
                if n is None:
                    return False
                total += n
            return total <= self.max_length

    class TurnSpace(_ValueSpace):
        """One assistant turn in ``fmt``: what ``step`` accepts. A string (at most
        ``MAX_TEXT_CHARS``) in every format; a message dict in "openai"/"json", and one
        without ``tool_calls`` (its ``content`` is the text) in "hermes"/"qwen_xml".
        Malformed text is still in the space: the env scores it as a hard fail.

        ``sample()`` (seeded by ``seed()``) returns a well-formed turn written by
        ``parse.format_turn``: a line to the customer, or one call to a tool whose arguments
        are valid in every family (``SAMPLE_CALLS``). Why not an answer: its schema depends
        on the episode's hidden family and a wrong ``env`` is a hard fail (SPEC §4.6), and a
        space is fixed at construction. Why not ``''``: an empty turn is malformed, so a
        random policy (and ``check_env``) would only ever see hard fails."""

        _key = ("fmt",)

        def __init__(self, fmt: str = "hermes", seed: int | None = None):
            if fmt not in FORMATS:
                raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
            self.fmt = fmt
            self.max_length = MAX_TEXT_CHARS
            super().__init__(seed=seed)

        @property
        def is_np_flattenable(self) -> bool:
            return False

        def sample(self, mask: Any = None, probability: Any = None) -> Any:
            if mask is not None or probability is not None:
                raise ValueError("TurnSpace.sample takes no mask or probability")
            rng = self.np_random
            k = int(rng.integers(len(SAMPLE_CALLS) + 1))
            if k == len(SAMPLE_CALLS):
                return format_turn(self.fmt, SAMPLE_LINES[int(rng.integers(len(SAMPLE_LINES)))])
            return format_turn(self.fmt, "", [_sample_call(rng)])

        def contains(self, x: Any) -> bool:
            if isinstance(x, str):
                return len(x) <= self.max_length
            if isinstance(x, Mapping):
                return self.fmt in ("openai", "json") or not x.get("tool_calls")
            return False

    _Base: type = _gym.Env
else:  # pragma: no cover
    TextSpace = MessagesSpace = TurnSpace = None  # type: ignore[assignment,misc]
    _Base = object


class EcomjaxTextEnv(_Base):  # type: ignore[misc,valid-type]
    """One episode at a time, as text.

    ``reset(seed, options)``: ``options`` may give ``family``, ``collection`` and
    ``difficulty`` (else the constructor's). The episode is fixed by (family, d, seed)
    (SPEC §12). Every reset seeds ``self.np_random`` with the episode seed
    (``super().reset``); a reset without a seed takes ``next_seed`` of the previous episode's
    seed, a pseudo-random uint32 (the first is ``seed_start``). So ``reset(seed=s)`` fixes
    every unseeded reset after it (gymnasium's rule, which ``check_env`` tests), and the
    sub-envs of ``make_vec`` (seeded s, s+1, ...) never replay each other's episodes, as a
    "previous seed plus one" rule would. No clock is read. ``obs_mode="text"`` observes the
    new messages as text (``messages_text``); ``"messages"`` the whole transcript (for chat
    templates), a fresh copy each call. ``info`` (a fresh copy too) holds the tools,
    counters, parse summary, reward breakdown and (``expose_goal``, at the end) the hidden
    goal.

    ``gymnasium.make_vec(ENV_ID, num_envs=n, vectorization_mode="sync", ...)`` works (the
    spaces compare equal); prefer it. "async" needs ``vector_kwargs={"context": "spawn",
    "shared_memory": False}``: ``fork`` after JAX has started deadlocks, the text spaces
    have no shared-memory layout, and each spawned worker imports JAX and compiles the env
    again unless ``JAX_COMPILATION_CACHE_DIR`` points it at a warm persistent cache (tested:
    it plays what "sync" plays)."""

    # render_fps: gymnasium's checker asks for one whenever render modes exist; text has none.
    metadata = {"render_modes": ["ansi"], "render_fps": 1}

    def __init__(
        self,
        family: str | None = None,
        collection: str | None = None,
        difficulty: int = 0,
        catalog: Catalog | CatalogText | None = None,
        tables: CatalogTables | None = None,
        params: EnvParams | None = None,
        fmt: str = "hermes",
        obs_mode: str = "text",
        seed_start: int = 0,
        expose_goal: bool = False,
        compiler_options: Mapping[str, Any] | None = FAST_COMPILE,
        render_mode: str | None = None,
        **session_kwargs: Any,
    ):
        if obs_mode not in ("text", "messages"):
            raise ValueError("obs_mode must be 'text' or 'messages'")
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}; expected one of {FORMATS}")
        if render_mode is not None and render_mode not in self.metadata["render_modes"]:
            raise ValueError(f"render_mode must be None or one of {self.metadata['render_modes']}")
        if not 0 <= int(seed_start) <= MAX_SEED:
            raise ValueError(f"seed_start must be in 0..{MAX_SEED}")
        if catalog is None:
            from ecomjax.catalog.synthetic import generate_catalog

            catalog = generate_catalog(42, 1000)
        pick_family(family, collection, 0)  # validate early
        self.family, self.collection, self.difficulty = family, collection, int(difficulty)
        self.fmt, self.obs_mode, self.expose_goal = fmt, obs_mode, expose_goal
        self.render_mode = render_mode
        self.session = Session(
            catalog,
            tables,
            params if params is not None else EnvParams(),
            compiler_options=compiler_options,
            fmt=fmt,
            **session_kwargs,
        )
        self._next_seed = int(seed_start)
        self.last_seed: int | None = None
        if _gym is not None:
            self.action_space = TurnSpace(fmt)
            obs_space = MessagesSpace if obs_mode == "messages" else TextSpace
            self.observation_space = obs_space(MAX_OBS_CHARS)

    # -- gymnasium API ----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        opts = dict(options or {})
        unknown = set(opts) - {"family", "collection", "difficulty"}
        if unknown:
            raise ValueError(f"unknown reset option {sorted(unknown)[0]!r}")
        if seed is None:
            seed = self._next_seed
        if (
            isinstance(seed, bool)
            or not isinstance(seed, numbers.Integral)
            or not 0 <= seed <= MAX_SEED
        ):
            raise ValueError(f"seed must be an integer in 0..{MAX_SEED}")
        seed = int(seed)
        d = int(opts.get("difficulty", self.difficulty))
        if not 0 <= d <= C.D_MAX:
            raise ValueError(f"difficulty must be in 0..{C.D_MAX}")
        fam = pick_family(
            opts.get("family", self.family if "collection" not in opts else None),
            opts.get("collection", self.collection),
            seed,
        )
        if _gym is not None:
            super().reset(seed=seed)  # seeds self.np_random (for wrappers and users)
        self.last_seed = seed
        self._next_seed = next_seed(seed)
        obs = self.session.reset(fam, d, seed)
        info = self._info(obs)
        info.update(family=fam, difficulty=d, seed=seed)
        return self._obs(obs["new_messages"]), info

    def step(self, action: Any):
        """``action``: model output in ``fmt`` (or a message dict for "openai"/"json")."""
        if self.session.done:
            raise RuntimeError("the episode is over: call reset first")
        obs = self.session.step(action, self.fmt)
        reason = obs["termination_reason"]
        terminated = bool(obs["done"]) and reason != "t_max"
        truncated = reason == "t_max"
        # The agent knows its own turn: observe what came back (tools, events, customer).
        new = [m for m in obs["new_messages"] if m["role"] != "assistant"]
        return self._obs(new), float(obs["reward"]), terminated, truncated, self._info(obs)

    def render(self) -> str:
        return messages_text(self.session.messages)

    def close(self) -> None:
        pass

    # -- parts ------------------------------------------------------------------------------------

    @property
    def tools(self) -> list[dict]:
        return self.session.tools

    def _obs(self, new: list[dict]) -> Any:
        if self.obs_mode == "messages":
            # A deep copy: the caller may keep or edit it; the session's transcript stays.
            return copy.deepcopy(self.session.messages)
        return messages_text(new)

    def _info(self, obs: dict) -> dict:
        info = {
            k: obs[k]
            for k in (
                "tools",
                "env_id",
                "turn",
                "turns_left",
                "tool_budget",
                "events",
                "termination_reason",
                "reward_breakdown",
                "is_correct",
            )
        }
        info["parse"] = obs["info"]["parse"]
        info["user_acts"] = obs["info"]["user_acts"]
        if obs["done"] and self.expose_goal:
            from ecomjax.llm_bridge.server import goal_trace

            info["trace"] = goal_trace(self.session)
        # A deep copy: the tool schemas are shared by every session and the user acts are
        # the session's own records; an info must not alias either.
        return copy.deepcopy(info)


def register() -> None:
    """Registers ``ecomjax/Text-v0`` with gymnasium (``gymnasium.make(ENV_ID, ...)`` and
    ``gymnasium.make_vec(ENV_ID, num_envs, vectorization_mode="sync", ...)``)."""
    if _gym is None:
        raise ModuleNotFoundError("gymnasium is not installed", name="gymnasium")
    if ENV_ID not in _gym.registry:
        _gym.register(id=ENV_ID, entry_point="ecomjax.llm_bridge.gym_env:EcomjaxTextEnv")
