"""A gymnasium-style text environment over a host ``Session``.

Why: many RL libraries speak ``reset(seed, options) -> (obs, info)`` and
``step(action) -> (obs, reward, terminated, truncated, info)``. Here the action is one assistant
turn (model text in ``fmt``, or a message dict), the observation is text (or the transcript),
and the reward is the episode reward, paid at the end (0 before). ``truncated`` means the turn
limit ended the episode (termination reason ``t_max``); every other end is ``terminated``.

gymnasium is optional: with it installed, ``EcomjaxTextEnv`` is a ``gymnasium.Env`` with text
spaces and ``register()`` adds the id ``ecomjax/Text-v0``; without it, the class has the same
methods on ``object``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ecomjax.llm_bridge.session import FAST_COMPILE, CatalogText, Session

from ecomjax import constants as C
from ecomjax.catalog.types import Catalog, CatalogTables
from ecomjax.registry import FAMILIES
from ecomjax.types import EnvParams

try:  # optional dependency
    import gymnasium as _gym
except ModuleNotFoundError:  # pragma: no cover - exercised only without gymnasium
    _gym = None

MAX_SEED = 2**32 - 1
ENV_ID = "ecomjax/Text-v0"


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


if _gym is not None:

    class TextSpace(_gym.spaces.Space):
        """Any string up to ``max_length`` characters (gymnasium's ``Text`` space restricts
        the charset, which chat text does not fit)."""

        def __init__(self, max_length: int = 1 << 18, allow_dict: bool = False):
            super().__init__((), str)
            self.max_length, self.allow_dict = max_length, allow_dict

        def sample(self, mask: Any = None, probability: Any = None) -> str:
            return ""

        def contains(self, x: Any) -> bool:
            if self.allow_dict and isinstance(x, Mapping):
                return True
            return isinstance(x, str) and len(x) <= self.max_length

    _Base: type = _gym.Env
else:  # pragma: no cover
    TextSpace = None  # type: ignore[assignment,misc]
    _Base = object


class EcomjaxTextEnv(_Base):  # type: ignore[misc,valid-type]
    """One episode at a time, as text.

    ``reset(seed, options)``: ``options`` may give ``family``, ``collection`` and
    ``difficulty`` (else the constructor's); without a seed, seeds count up from
    ``seed_start`` (replayable). ``obs_mode="text"`` observes the new messages as text
    (``messages_text``); ``"messages"`` the whole transcript (for chat templates). ``info``
    holds the tools, counters, parse summary, reward breakdown and (``expose_goal``, at the
    end) the hidden goal."""

    metadata = {"render_modes": ["ansi"]}

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
        if TextSpace is not None:
            self.action_space = TextSpace(allow_dict=True)
            self.observation_space = TextSpace(max_length=1 << 24)

    # -- gymnasium API ----------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: Mapping[str, Any] | None = None):
        opts = dict(options or {})
        unknown = set(opts) - {"family", "collection", "difficulty"}
        if unknown:
            raise ValueError(f"unknown reset option {sorted(unknown)[0]!r}")
        if seed is None:
            seed = self._next_seed
            self._next_seed += 1
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_SEED:
            raise ValueError(f"seed must be an integer in 0..{MAX_SEED}")
        d = int(opts.get("difficulty", self.difficulty))
        if not 0 <= d <= C.D_MAX:
            raise ValueError(f"difficulty must be in 0..{C.D_MAX}")
        fam = pick_family(
            opts.get("family", self.family if "collection" not in opts else None),
            opts.get("collection", self.collection),
            seed,
        )
        self.last_seed = seed
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
            return [dict(m) for m in self.session.messages]
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
        return info


def register() -> None:
    """Registers ``ecomjax/Text-v0`` with gymnasium (``gymnasium.make(ENV_ID, ...)``)."""
    if _gym is None:
        raise ModuleNotFoundError("gymnasium is not installed", name="gymnasium")
    if ENV_ID not in _gym.registry:
        _gym.register(id=ENV_ID, entry_point="ecomjax.llm_bridge.gym_env:EcomjaxTextEnv")
